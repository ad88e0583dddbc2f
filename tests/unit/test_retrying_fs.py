"""RetryingFS: a seam with its retry policy retries what is exact to make again, and only that."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from riffd.fsio import FileSystem, ReadFailed, RetryingFS, RetryPolicy

FAST = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002)


class FailsFirst(FileSystem):
    """Fails the first `count` calls of every operation with EIO."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.calls: dict[str, int] = {}

    def _maybe(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.count:
            raise OSError(errno.EIO, "Input/output error")

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        self._maybe("stat")
        return super().stat(path)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._maybe("pread")
        return super().pread(fd, size, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._maybe("write")
        return super().write(fd, data)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        self._maybe("open")
        return super().open(path, flags, mode)


def test_status_reads_and_opens_are_retried(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"hello")
    seam = FailsFirst(2)
    fs = RetryingFS(seam, FAST)
    assert fs.stat(path).st_size == 5
    fd = fs.open(path, os.O_RDONLY)
    try:
        assert fs.pread(fd, 5, 0) == b"hello"
    finally:
        fs.close(fd)
    assert seam.calls == {"stat": 3, "open": 3, "pread": 3}


def test_an_append_and_a_creating_open_are_made_once(tmp_path: Path) -> None:
    seam = FailsFirst(1)
    fs = RetryingFS(seam, FAST)
    with pytest.raises(OSError):
        fs.open(tmp_path / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    fd = fs.open(tmp_path / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with pytest.raises(OSError):
            fs.write(fd, b"line\n")  # never twice: the first may have landed
    finally:
        fs.close(fd)
    assert seam.calls["write"] == 1


def test_a_read_that_keeps_failing_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "named.jsonl"
    path.write_bytes(b"x")
    fs = RetryingFS(FailsFirst(0), FAST)
    fd = fs.open(path, os.O_RDONLY)
    fs.seam = FailsFirst(99)
    try:
        with pytest.raises(ReadFailed, match=r"named\.jsonl at byte 0"):
            fs.pread(fd, 1, 0)
    finally:
        os.close(fd)


def test_a_retrying_seam_is_never_wrapped_twice() -> None:
    inner = RetryingFS(FileSystem(), FAST)
    assert RetryingFS.of(inner, FAST) is inner
    assert RetryingFS(inner, FAST).seam is inner.seam
