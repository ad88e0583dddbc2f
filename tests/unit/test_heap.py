"""riffd.fsio.pin_mmap_threshold: once `riffd scan` or `fix` has set it (`run` too), big blocks are
mapped alone."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import transcript_bytes
from helpers.run import riffd_env


def _glibc_with_mallinfo2() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION")) and hasattr(ctypes.CDLL(None), "mallinfo2")
    except (ValueError, OSError):
        return False


pytestmark = pytest.mark.skipif(
    not _glibc_with_mallinfo2(), reason="needs glibc 2.33 or later (mallinfo2)"
)

# Frees a mapped 8 MB block (which makes glibc raise its threshold to 8 MB), then makes a 2 MB block
# and prints whether it got its own mapping (mallinfo2's hblkhd: bytes in mapped blocks) rather than
# a place in the heap.
PROBE = r"""
import ctypes, sys
from riffd.commands.cli import main

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1:]:
    main(sys.argv[1:])
block = bytearray(8 << 20)
del block
before = libc.mallinfo2().hblkhd
block = bytearray(2 << 20)
print("mapped" if libc.mallinfo2().hblkhd - before >= 2 << 20 else "heap")
"""


def probe(tmp_path: Path, *command: str) -> str:
    env = riffd_env(
        RIFFD_STATE_DIR=str(tmp_path / "state"),
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
        RIFFD_CONFIG=str(tmp_path / "no-config.toml"),
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    return done.stdout.split()[-1]


def test_glibc_moves_big_blocks_into_the_heap_unless_riffd_pins_the_threshold(
    tmp_path: Path,
) -> None:
    session = tmp_path / "session.jsonl"
    session.write_bytes(transcript_bytes(20))
    assert probe(tmp_path) == "heap"  # glibc's own behaviour: what the pin is for
    assert probe(tmp_path, "scan", str(session)) == "mapped"
    assert probe(tmp_path, "fix", "--dry-run", str(session)) == "mapped"
