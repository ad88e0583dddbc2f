"""A file replaced at a chosen instant: the seam the tests of riffd's readers rename a new version of
a transcript over it with, just before the Nth file call the code under test makes, as a repair's
swap or Claude Code's own rewrite would (a real rename of real files)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import transcript_line
from riffd.fsio import FileSystem


class ReplacedAt(FileSystem):
    """Counts the open, pread, stat, fstat and close calls made through it; just before call number
    `at` (1-based; 0: never), renames `replacement` over `target`."""

    def __init__(self, at: int = 0, replacement: Path | None = None, target: Path | None = None):
        self.at, self.replacement, self.target = at, replacement, target
        self.calls = 0

    def aim(self, at: int, replacement: Path, target: Path) -> None:
        """Replace `target` by `replacement` before call `at` from now on."""
        self.at, self.replacement, self.target, self.calls = at, replacement, target, 0

    @property
    def replaced(self) -> bool:
        """Whether the replacement was made."""
        return 0 < self.at <= self.calls

    def _tick(self) -> None:
        self.calls += 1
        if self.calls == self.at:
            assert self.replacement is not None and self.target is not None
            os.replace(self.replacement, self.target)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        self._tick()
        return super().open(path, flags, mode)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._tick()
        return super().pread(fd, size, offset)

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        self._tick()
        return super().stat(path)

    def fstat(self, fd: int) -> os.stat_result:
        self._tick()
        return super().fstat(fd)

    def close(self, fd: int) -> None:
        self._tick()
        super().close(fd)


def shorter_line_3(data: bytes) -> bytes:
    """The same transcript (of `transcript_line`s padded by 40) with line 3's text shorter: every
    byte after it moves back, as after a repair that removes or shortens a line."""
    lines = data.splitlines(keepends=True)
    return b"".join([*lines[:2], transcript_line(3, pad=5), *lines[3:]])


def longer_line_3(data: bytes) -> bytes:
    """The same with line 3's text longer: every byte after it moves on, as after a repair that adds
    a line."""
    lines = data.splitlines(keepends=True)
    return b"".join([*lines[:2], transcript_line(3, pad=90), *lines[3:]])
