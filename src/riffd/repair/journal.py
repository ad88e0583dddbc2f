"""The swap journal: what a repair records beside the transcript before it swaps the names, so that a riffd run
killed at any instant afterwards leaves enough on disk for the next run to finish or undo the swap
(`riffd.repair.recovery`).

One record per line, appended and flushed before riffd acts on it; the last whole line counts. The process working
on a swap holds an flock on its journal, so no other riffd run takes it over while it works.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import orjson

from riffd.fsio import NOFOLLOW, FileSystem, RetryPolicy, fsync_file, fsync_folder, remove_leftover, retrying_call
from riffd.repair.locks import try_flock
from riffd.transcript.reader import iter_fd

JOURNAL_SUFFIX = ".swap"
STAGING_SUFFIX = ".new"  # a journal being written (`<name>.swap.new`), never read: removed once its pid is gone
SWAP, UNDO = "swap", "undo"


@dataclass(frozen=True)
class SwapRecord:
    """What a swap needs to be finished or undone by another process: the names, the two files' identities, how
    much of the old file the copy holds, and the uuids of the lines the repair removed."""

    path: str  # the transcript
    copy_name: str  # riffd's copy before the swap (after an exchange: the old file)
    old_name: str | None  # where the old file is once the copy holds the transcript's name (None: nowhere)
    old_id: tuple[int, int]
    copy_id: tuple[int, int]
    settled_end: int  # the old file's bytes [0, settled_end) are in the copy (as planned)
    copy_size: int  # the copy's size when it took the name
    cut_at: int | None  # where an unfinished last line began that the repair cut off
    removed: tuple[str, ...]  # uuids of lines the repair removed
    backup_dir: str
    backup_id: str
    pid: int
    phase: str = SWAP  # UNDO once riffd gives the name back to the old file

    def encode(self) -> bytes:
        """Return the record as one journal line."""
        return orjson.dumps(asdict(self)) + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> SwapRecord:
        """Given one journal line, return its record; raise ValueError when it is not one."""
        try:
            fields = orjson.loads(line)
            return cls(**{**fields, "old_id": tuple(fields["old_id"]), "copy_id": tuple(fields["copy_id"]),
                          "removed": tuple(fields["removed"])})
        except (orjson.JSONDecodeError, TypeError, KeyError) as exc:
            raise ValueError(f"not a swap record: {exc}") from exc


def journal_path_for(copy_name: Path) -> Path:
    """Given riffd's copy (`.<name>.riffd-<pid>-<hex>.tmp`), return its swap journal's name."""
    return copy_name.with_name(copy_name.name.removesuffix(".tmp") + JOURNAL_SUFFIX)


def copy_name_for(journal: Path) -> Path:
    """Given a swap journal, return the name of riffd's copy it belongs to."""
    return journal.with_name(journal.name.removesuffix(JOURNAL_SUFFIX) + ".tmp")


class Journal:
    """The swap journal of one repair: records appended, one per line (the last whole one counts), flocked by the
    process working on it so that no other riffd run finishes a swap still under way."""

    def __init__(self, fs: FileSystem, path: Path, fd: int, record: SwapRecord) -> None:
        self.fs, self.path, self.fd, self.record = fs, path, fd, record

    @classmethod
    def create(cls, fs: FileSystem, path: Path, record: SwapRecord, retry: RetryPolicy) -> Journal:
        """Write a new journal holding `record`, locked, and flushed to disk with its folder entry. It is written whole
        under a name no other run looks at, then renamed into place: a run that finds it finds it locked and
        complete."""
        staging = path.with_name(path.name + STAGING_SUFFIX)
        fd = fs.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        journal = cls(fs, staging, fd, record)
        try:
            try_flock(fs, fd)
            journal._append(record, retry)
            fs.replace(staging, path)
            journal.path = path
            fsync_folder(fs, path.parent)
        except OSError:
            remove_leftover(fs, staging)
            journal.remove()
            raise
        return journal

    def _append(self, record: SwapRecord, retry: RetryPolicy) -> None:
        size = self.fs.fstat(self.fd).st_size
        data = record.encode()
        written = 0
        while written < len(data):
            written += retrying_call(partial(self.fs.pwrite, self.fd, data[written:], size + written),
                                     what=str(self.path), policy=retry)
        fsync_file(self.fs, self.fd, self.path, retry)

    def update(self, record: SwapRecord, retry: RetryPolicy) -> None:
        """Record a new state (the phase) of the swap, flushed before anything acts on it."""
        self._append(record, retry)
        self.record = record

    def close(self) -> None:
        """Let go of the journal (and its lock), leaving it on disk for a later run."""
        if self.fd >= 0:
            self.fs.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        """Remove the journal: the swap is finished or undone."""
        try:
            retrying_call(lambda: self.fs.unlink(self.path), what=f"the removal of {self.path}")
        except FileNotFoundError:
            pass
        finally:
            self.close()


def read_journal(fs: FileSystem, path: Path) -> SwapRecord | None:
    """Given a journal, return its last whole record, or None when it holds none (torn while it was written)."""
    fd = fs.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        data = b"".join(iter_fd(fd, what=str(path), fs=fs))
    finally:
        fs.close(fd)
    for line in reversed(data.split(b"\n")):
        try:
            return SwapRecord.decode(line)
        except ValueError:
            continue
    return None
