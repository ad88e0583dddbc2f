"""The archive's back-fill against a transcript replaced while it reads it.

`ingest_file` (what `riffd archive ingest`, `riffd fix` and the daemon's catch-up archive with)
judges where to read a file from on the bytes the archive has of it, then reads the rest. A repair's
swap or Claude Code's own rewrite may replace the file at any instant of that. Each test here
replaces it (a real rename of a real file) just before each file call `ingest_file` makes in turn,
through its I/O seam, and checks that every generation the archive then holds is a whole version
the file had, and that the next back-fill brings the archive to the file as it is: never the old
file's watermark with the new file's bytes after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive
from riffd.fsio import FileSystem

CALLS = ("open", "pread", "stat", "fstat", "close")


class ReplacedAt(FileSystem):
    """Counts the file calls made through it; just before call number `at` (1-based), renames
    `replacement` over `target`, as a repair's swap or an editor's save does."""

    def __init__(self, at: int, replacement: Path, target: Path) -> None:
        self.at, self.replacement, self.target = at, replacement, target
        self.calls = 0

    def _tick(self) -> None:
        self.calls += 1
        if self.calls == self.at:
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


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _without_line_3(data: bytes) -> bytes:
    """A repair that removes a line (a duplicate result): the file gets shorter."""
    lines = _lines(data)
    return b"".join(lines[:2] + lines[3:])


def _with_line_after_3(data: bytes) -> bytes:
    """A repair that adds a line (a synthetic result): the file gets longer."""
    lines = _lines(data)
    return b"".join([*lines[:3], transcript_line(99, pad=17), *lines[3:]])


def _generations(archive: Archive, path: Path) -> list[bytes]:
    file_id = archive.file_id(str(path))
    assert file_id is not None
    return [b"".join(archive.iter_file(file_id, gen)) for gen in archive.generations(file_id)]


@pytest.mark.parametrize("repair", [_without_line_3, _with_line_after_3])
def test_a_file_replaced_at_any_call_is_archived_as_one_version(
    tmp_path: Path, repair: Callable[[bytes], bytes]
) -> None:
    archive = Archive(tmp_path / "archive.db")
    folder = tmp_path / "projects" / "-p"
    folder.mkdir(parents=True)
    first = transcript_bytes(10, pad=40)
    grown = first + transcript_line(11, pad=40) + transcript_line(12, pad=40)
    repaired = repair(grown)
    try:
        at = 1
        while True:
            path = folder / f"session-{at}.jsonl"
            path.write_bytes(first)
            assert ingest_file(archive, path) == 10
            with path.open("ab") as appended:  # the session writes on, in place
                appended.write(grown[len(first) :])
            replacement = path.with_suffix(".new")
            replacement.write_bytes(repaired)
            seam = ReplacedAt(at, replacement, path)
            ingest_file(archive, path, fs=seam)
            replaced = seam.calls >= at
            held = _generations(archive, path)
            # every generation is a version the file had; the newest is the file read whole
            assert set(held) <= {first, grown, repaired}, f"replaced before call {at}"
            assert held[-1] in {grown, repaired}, f"replaced before call {at}"
            if not replaced:  # every call was made: the last replacement comes after the read
                os.replace(replacement, path)
            ingest_file(archive, path)
            assert _generations(archive, path)[-1] == repaired, f"replaced before call {at}"
            if not replaced:
                break
            at += 1
        assert at > 4  # the check, the read and what follows were each tried
    finally:
        archive.close()
