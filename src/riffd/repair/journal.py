"""The swap journal: what a repair records beside the transcript before it swaps the names, so that
whoever looks at the swap next (the repair itself, the daemon's pending job, the next `riffd fix` or
daemon start) can finish or undo it from what is on disk (`riffd.repair.handover`).

A journal is written whole under a staging name, locked, and renamed into place. Each later state is
a whole record appended on a line of its own and flushed before riffd acts on it; the last whole
record counts (an append that fails is cut off again). Files are named by their names alone: every
file of a swap is in the journal's own folder, so a journal is read the same whatever path led to
it, and it can name nothing elsewhere. A journal that is not this user's, or names a file that is
not riffd's own, is refused.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from riffd.display import key_path, path_key
from riffd.fsio import (
    NOFOLLOW,
    RetryingFS,
    fsync_file,
    fsync_folder,
    remove_leftover,
)
from riffd.repair.locks import temp_stem, try_flock
from riffd.transcript.reader import iter_fd

JOURNAL_SUFFIX = ".swap"
# a journal being written (`<name>.swap.new`), never read: removed once its pid is gone
STAGING_SUFFIX = ".new"
# the original's own hard link while lines written to it are carried (rename only)
OLD_SUFFIX = ".old"
SWAP, CHECKED, UNDO = "swap", "checked", "undo"
# riffd's own names beside a transcript: `.<transcript>.riffd-<pid>-<12 hex>.<suffix>`
_RIFFD_NAME = re.compile(r"^\.(?P<transcript>.+)\.riffd-[0-9]+-[0-9a-f]{12}\.(?:tmp|old)$")

Pair = tuple[int, int]


@dataclass(frozen=True)
class SwapRecord:
    """One state of a swap: the names (in the journal's folder), the two files' identities, what the
    copy was made from, what the repair removed and inserted, and how far lines were handed over
    since."""

    transcript: str
    copy_name: str  # riffd's copy before the swap; after an exchange it names the old file
    # where the old file is while the copy holds the transcript's name (None: nowhere)
    old_name: str | None
    old_id: Pair
    copy_id: Pair
    source_size: int  # the original's bytes [0, source_size) were planned for, with this sha256
    source_sha256: str
    settled_end: int  # [source_size, settled_end): lines appended before the swap, in the copy too (this sha256)
    settled_sha256: str
    copy_size: int  # the copy's size when it took the name
    cut_at: int | None  # where an unfinished last line began that the repair cut off
    removed: tuple[str, ...]  # uuids of the lines the repair removed
    inserted: tuple[str, ...]  # uuids of the lines the repair added (placeholder results)
    session_id: str | None
    claude_dirs: tuple[str, ...]  # where a running Claude Code registers this session
    backup_dir: str
    backup_id: str
    pid: int
    phase: str = SWAP  # CHECKED once the swap is known to stand; UNDO once the name goes back to the old file
    # The hand-over of the old file's late lines onto the new one: from where (-1: not begun), up to
    # where, the ranges of the new file they landed in, and a carry under way (old start, old end,
    # new size before).
    carry_from: int = -1
    carried: int = -1
    carried_at: tuple[Pair, ...] = ()
    carrying: tuple[int, int, int] | None = None
    # After an undo, the same for the copy's direct lines onto the old file: up to where in the
    # copy, the inserted lines carried before them, and a carry under way (copy start, copy end, old
    # size before).
    back_carried: int = -1
    back_inserted: tuple[str, ...] = ()
    back_carrying: tuple[int, int, int] | None = None
    notes: tuple[str, ...] = field(default=())

    def encode(self) -> bytes:
        """Return the record as one journal line (names that are not valid text kept exactly:
        riffd.display.path_key)."""
        return orjson.dumps(_texts(asdict(self), path_key)) + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> SwapRecord:
        """Given one journal line, return its record; raise ValueError when it is not one of
        riffd's."""
        try:
            fields: dict[str, Any] = _texts(orjson.loads(line), key_path)
            record = cls(
                **{
                    **fields,
                    "old_id": tuple(fields["old_id"]),
                    "copy_id": tuple(fields["copy_id"]),
                    "removed": tuple(fields["removed"]),
                    "inserted": tuple(fields["inserted"]),
                    "claude_dirs": tuple(fields["claude_dirs"]),
                    "carried_at": tuple(tuple(pair) for pair in fields.get("carried_at", ())),
                    "carrying": tuple(fields["carrying"]) if fields.get("carrying") else None,
                    "back_inserted": tuple(fields.get("back_inserted", ())),
                    "back_carrying": tuple(fields["back_carrying"])
                    if fields.get("back_carrying")
                    else None,
                    "notes": tuple(fields.get("notes", ())),
                }
            )
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"not a swap record: {exc}") from exc
        record.check_names()
        return record

    def check_names(self) -> None:
        """Raise ValueError unless the copy's and the old file's names are riffd's own, of this
        transcript."""
        if "/" in self.transcript or self.transcript in ("", ".", ".."):
            raise ValueError(f"not a transcript's name: {self.transcript!r}")
        for name in (self.copy_name, self.old_name):
            match = None if name is None else _RIFFD_NAME.match(name)
            if name is not None and (
                match is None or match.group("transcript") != temp_stem(self.transcript)
            ):
                raise ValueError(f"{name!r} is not a name riffd gives {self.transcript}")


def _texts(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with every string in it (in lists and dict values too) passed through `change`."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list | tuple):
        return [_texts(item, change) for item in value]
    if isinstance(value, dict):
        return {key: _texts(item, change) for key, item in value.items()}
    return value


def journal_path_for(copy_name: Path) -> Path:
    """Given riffd's copy (`.<name>.riffd-<pid>-<hex>.tmp`), return its swap journal's name."""
    return copy_name.with_name(copy_name.name.removesuffix(".tmp") + JOURNAL_SUFFIX)


def copy_name_for(journal: Path) -> Path:
    """Given a swap journal, return the name of riffd's copy it belongs to."""
    return journal.with_name(journal.name.removesuffix(JOURNAL_SUFFIX) + ".tmp")


def old_name_for(copy_name: Path) -> Path:
    """Given riffd's copy, return the name the original's hard link takes before a plain rename."""
    return copy_name.with_name(copy_name.name.removesuffix(".tmp") + OLD_SUFFIX)


class Journal:
    """The journal of one swap, open and locked by the process working on it."""

    def __init__(self, fs: RetryingFS, path: Path, fd: int, record: SwapRecord) -> None:
        self.fs, self.path, self.fd, self.record = fs, path, fd, record

    @property
    def folder(self) -> Path:
        """The folder of the transcript, of riffd's files beside it, and of this journal."""
        return self.path.parent

    def name(self, name: str) -> Path:
        """Given a name from the record, return its path in the journal's folder."""
        return self.folder / name

    @classmethod
    def create(cls, fs: RetryingFS, path: Path, record: SwapRecord) -> Journal:
        """Write a new journal holding `record`, locked, and flushed to disk with its folder entry:
        written whole under a name no other run reads, then renamed into place, so a run that finds
        it finds it locked and whole."""
        staging = path.with_name(path.name + STAGING_SUFFIX)
        fd = fs.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        journal = cls(fs, staging, fd, record)
        try:
            try_flock(fs, fd)
            journal._append(record)
            fs.replace(staging, path)
            journal.path = path
            fsync_folder(fs, path.parent)
        except OSError:
            remove_leftover(fs, staging)
            journal.remove()
            raise
        return journal

    def _append(self, record: SwapRecord) -> None:
        size = self.fs.fstat(self.fd).st_size
        data = record.encode() if size == 0 else b"\n" + record.encode()
        written = 0
        try:
            while written < len(data):
                written += self.fs.pwrite(self.fd, data[written:], size + written)
            fsync_file(self.fs, self.fd, self.path, self.fs.policy)
        except OSError:
            with contextlib.suppress(OSError):  # a half record must not glue onto the next one
                os.ftruncate(self.fd, size)
            raise

    def update(self, **changes: Any) -> SwapRecord:
        """Record a new state of the swap (the fields `changes` names), flushed before anything acts
        on it."""
        from dataclasses import replace

        record = replace(self.record, **changes)
        self._append(record)
        self.record = record
        return record

    def close(self) -> None:
        """Let go of the journal (and its lock), leaving it on disk for a later run."""
        if self.fd >= 0:
            self.fs.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        """Remove the journal: the swap is finished or undone."""
        try:
            remove_leftover(self.fs, self.path)
        finally:
            self.close()


def read_journal(fs: RetryingFS, path: Path, fd: int | None = None) -> SwapRecord | None:
    """Given a journal (and a descriptor of it), return its last whole record; None when it holds
    none, or when it is not this user's (riffd never acts on a journal another user could have
    written)."""
    own = fd is None
    if fd is None:
        fd = fs.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        if fs.fstat(fd).st_uid != os.geteuid():
            return None
        data = b"".join(iter_fd(fd, what=str(path), fs=fs))
    finally:
        if own:
            fs.close(fd)
    for line in reversed(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            return SwapRecord.decode(line)
        except ValueError:
            continue
    return None
