"""A small tmpfs for the tests of a full disk: a real ENOSPC from the kernel, no injected error.
Mounting needs root (CI runs as root); elsewhere the test skips, saying so."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(folder: Path, size_kib: int) -> Iterator[Path]:
    """Mount a tmpfs of `size_kib` KiB on `folder` (made if missing) for the block; unmount it
    after."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"a small tmpfs could not be mounted here (root only): {mounted.stderr.strip()}"
        )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def grow_tmpfs(folder: Path, size_kib: int) -> None:
    """Give the tmpfs on `folder` `size_kib` KiB in all (room made on a full disk)."""
    subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(folder)], check=True)
