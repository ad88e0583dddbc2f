"""After the swap: the file that gave up the transcript's name keeps a name of riffd's until every line written to it
is carried onto the file that took the name, and an interrupted swap is finished or undone from what is on disk.

Claude Code opens the transcript by path for each append. A writer that opened it just before the swap writes into
the old file just after; so does a process that holds it open for longer. Before the swap riffd writes a journal
beside the transcript (`.<name>.riffd-<pid>-<hex>.swap`, flocked while riffd works on it); after it, the old file
stays under riffd's name (the temp name the exchange gave it, or a hard link where the filesystem only renames)
while riffd carries what lands in it, until no process holds it open for writing (Linux: /proc/*/fd; elsewhere, a
quiet second), and only then loses that name. riffd killed at any instant leaves the journal and both files: the
next riffd run in that folder (the daemon's start, `riffd fix`, any repair there) finishes the swap (carries the
lines the new file lacks) or undoes it (the swap never happened, or a line hangs from one the repair removed).

A line that hangs from a line the repair removed proves a client read the old file: the swap is undone (the old
file takes the name back, with every line written to either file) and the repair reported as skipped, live.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import orjson

from riffd.fsio import NOFOLLOW, FileSystem, RetryPolicy, fsync_file, fsync_folder, retrying_call, write_all
from riffd.repair.journal import UNDO, Journal, SwapRecord
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

# How long a repair waits for writers that still hold the old file open before it leaves the rest to a later
# run (the daemon's next pass over pending swaps, the next `riffd fix`).
HOLD_WAIT = 2.0
POLL_INTERVAL = 0.01
# Where no process table can be read (macOS): the old file must stay unchanged this long before its name goes.
QUIET_WITHOUT_PROC = 1.0
_PROC = Path("/proc")


# -- who still writes a file --------------------------------------------------------------------------------------


def writers_holding(name: Path) -> list[int] | None:
    """Given the name of a file, return the pids of other processes that hold it open for writing, or None where no
    process table can be read (no /proc). Processes whose descriptors this user cannot read are not seen: another
    user's process does not write a user's transcripts."""
    if not _PROC.is_dir():
        return None
    wanted = os.fsencode(os.path.join(os.path.realpath(name.parent), name.name))
    mine = os.getpid()
    holders: list[int] = []
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        fd_folder = f"/proc/{entry.name}/fd"
        try:
            descriptors = os.listdir(fd_folder)
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(os.fsencode(f"{fd_folder}/{descriptor}"))
            except OSError:
                continue
            if target != wanted:
                continue
            if _opened_for_writing(entry.name, descriptor):
                holders.append(int(entry.name))
                break
    return holders


def _opened_for_writing(pid: str, descriptor: str) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{descriptor}", "rb") as info:
            for line in info:
                if line.startswith(b"flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE != os.O_RDONLY
    except (OSError, ValueError):
        pass
    return True  # cannot tell: a writer, which only makes riffd wait


# -- lines ----------------------------------------------------------------------------------------------------------


def split_lines(data: bytes) -> list[bytes]:
    """Given bytes, return their lines, each with its newline (the last may lack it); only b"\\n" ends a line."""
    lines: list[bytes] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end + 1
        lines.append(data[start:end])
        start = end
    return lines


def hangs_from(line: bytes, removed: frozenset[str]) -> str | None:
    """Given one line and the uuids a repair removed, return the removed uuid it hangs from, or None."""
    if not removed:
        return None
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    for key in ("parentUuid", "logicalParentUuid"):
        parent = record.get(key)
        if isinstance(parent, str) and parent in removed:
            return parent
    return None


def uuids_of(lines: Iterable[bytes]) -> set[str]:
    """Given lines, return the uuids they carry."""
    found: set[str] = set()
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("uuid"), str):
            found.add(record["uuid"])
    return found


def read_bytes(fs: FileSystem, fd: int, start: int, end: int, what: str, retry: RetryPolicy) -> bytes:
    """Return the bytes of the open file `fd` in [start, end) (fewer when it ends sooner), retrying EIO."""
    return b"".join(iter_fd(fd, what=what, fs=fs, retry=retry, start=start, end=end))


def missing_lines(source: bytes, present: bytes) -> list[bytes]:
    """Given the lines one file gained after the swap (`source`) and the lines the other gained (`present`), return
    those of `source` the other lacks, in order, counting repeats (a line written twice is carried twice)."""
    have = Counter(split_lines(present))
    missing = []
    for line in split_lines(source):
        if have[line] > 0:
            have[line] -= 1
        else:
            missing.append(line)
    return missing


# -- the hand-over ---------------------------------------------------------------------------------------------------


class LineConflict(Exception):
    """A line written after the repair began hangs from a line the repair removed: a client read the old file."""


@dataclass
class Handover:
    """The old file (`old_fd`, at `record.old_name`) and the new one (`new_fd`, at the transcript's name) after the
    swap; `carried` is how much of the old file the new one holds, `direct` what others wrote straight to the new
    one since the swap (they are compared against removed uuids too)."""

    fs: FileSystem
    journal: Journal
    old_fd: int
    new_fd: int  # opened with O_APPEND
    retry: RetryPolicy
    carried: int = 0
    seen_new: int = 0
    restored: str | None = None
    carried_lines: Counter[bytes] | None = None
    carried_bytes: int = 0  # appended to the new file by this hand-over

    def __post_init__(self) -> None:
        record = self.journal.record
        self.carried = record.settled_end
        self.seen_new = record.copy_size
        self.carried_lines = Counter()

    @property
    def record(self) -> SwapRecord:
        """The swap as journaled."""
        return self.journal.record

    def carry(self, *, final: bool = False) -> int:
        """Carry the whole lines (with `final`, every byte) the old file gained onto the new one; raise LineConflict
        when a line written to either file since the swap hangs from a removed line. Return the bytes carried."""
        record = self.record
        removed = frozenset(record.removed)
        path = record.path
        new_size = retrying_call(lambda: self.fs.fstat(self.new_fd), what=path, policy=self.retry).st_size
        if new_size > self.seen_new:
            gained = read_bytes(self.fs, self.new_fd, self.seen_new, new_size, path, self.retry)
            for line in split_lines(gained):
                if line.endswith(b"\n") and self._is_direct(line) and hangs_from(line, removed):
                    raise LineConflict(f"a line written to it after the swap hangs from {hangs_from(line, removed)}, "
                                       "a line the repair removed")
            self.seen_new = new_size - (len(gained) - gained.rfind(b"\n") - 1)
        old_size = retrying_call(lambda: self.fs.fstat(self.old_fd), what=path, policy=self.retry).st_size
        if old_size <= self.carried:
            return 0
        start = self.carried
        if record.cut_at is not None and self.carried == record.settled_end:
            # Bytes after an unfinished last line the repair cut off continue that line: it comes back whole.
            start = record.cut_at
            self.restored = (f"{path}: a writer continued its unfinished last line during the repair, so that line "
                             "was put back with what followed it")
        tail = read_bytes(self.fs, self.old_fd, start, old_size, path, self.retry)
        whole = tail if final else tail[: tail.rfind(b"\n") + 1]
        if not whole:
            return 0
        for line in split_lines(whole):
            parent = hangs_from(line, removed)
            if parent is not None:
                raise LineConflict(f"a line written to the old file during the repair hangs from {parent}, a line "
                                   "the repair removed")
        self._append(whole)
        assert self.carried_lines is not None
        self.carried_lines.update(split_lines(whole))
        self.carried = start + len(whole)
        self.carried_bytes += len(whole)
        return len(whole)

    def carried_over(self, source_size: int) -> int:
        """The bytes of the new file that follow the planned content: lines appended before the swap (the original
        was `source_size` bytes when scanned) and those carried after it (a restored fragment included)."""
        return self.record.settled_end - source_size + self.carried_bytes

    def release_old_name(self) -> None:
        """Remove the old file's name of riffd's: every line written to it is in the new file."""
        record = self.record
        unlink_if(self.fs, record.old_name, record.old_id)

    def release_copy_name(self) -> None:
        """After an undo, remove the name riffd's copy has (the old file holds every line written to it)."""
        record = self.record
        unlink_if(self.fs, record.copy_name, record.copy_id)

    def _is_direct(self, line: bytes) -> bool:
        assert self.carried_lines is not None
        return self.carried_lines[line] == 0

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = retrying_call(partial(self.fs.write, self.new_fd, view), what=f"the end of {self.record.path}",
                                    policy=self.retry)
            if written <= 0:
                raise OSError(errno.EIO, "write wrote nothing")
            view = view[written:]

    def watch(self, deadline: float) -> bool:
        """Carry what the old file gains until no other process holds it open for writing (then carry the rest, an
        unfinished last line too); return False when writers still hold it at `deadline` (monotonic)."""
        old_name = self.record.old_name
        quiet_since = time.monotonic()
        while True:
            if self.carry():
                quiet_since = time.monotonic()
            holders = writers_holding(Path(old_name)) if old_name is not None else None
            if holders == [] or (holders is None and time.monotonic() - quiet_since >= QUIET_WITHOUT_PROC):
                self.carry(final=True)
                fsync_file(self.fs, self.new_fd, Path(self.record.path), self.retry)
                return True
            if time.monotonic() >= deadline:
                fsync_file(self.fs, self.new_fd, Path(self.record.path), self.retry)
                return False
            time.sleep(POLL_INTERVAL)

    def verify(self) -> None:
        """Check that every line the old file gained after the swap point is in the new file; raise OSError when
        one is not (the old file's name then stays, with the journal, for a later run)."""
        record = self.record
        old_end = self.fs.fstat(self.old_fd).st_size
        new_end = self.fs.fstat(self.new_fd).st_size
        start = record.settled_end if record.cut_at is None or self.carried == record.settled_end else record.cut_at
        gained = read_bytes(self.fs, self.old_fd, start, old_end, record.path, self.retry)
        present = read_bytes(self.fs, self.new_fd, record.copy_size, new_end, record.path, self.retry)
        lacking = missing_lines(gained, present)
        if lacking:
            raise OSError(errno.EIO, f"{len(lacking)} line(s) written to the old file are not in the new one")


def undo_exchange(fs: FileSystem, journal: Journal, old_fd: int, new_fd: int, retry: RetryPolicy) -> None:
    """Give the transcript's name back to the old file (the journal says so first), then carry onto it what was
    written straight to the new file since the swap. Raise OSError when the names cannot be swapped back."""
    record = journal.record
    journal.update(replace(record, phase=UNDO), retry)
    path, old_name = Path(record.path), record.old_name
    assert old_name is not None
    if old_name == record.copy_name:
        fs.exchange(old_name, path)
    else:
        fs.replace(old_name, path)  # the old file's hard link takes the name back; the copy's name is gone
    fsync_folder(fs, path.parent)
    carry_back(fs, record, old_fd, new_fd, retry)


def carry_back(fs: FileSystem, record: SwapRecord, old_fd: int, new_fd: int, retry: RetryPolicy) -> int:
    """After an undo: append to the transcript (the old file again) the lines the new file gained since the swap
    that the old file lacks; return the bytes."""
    new_end = fs.fstat(new_fd).st_size
    old_end = fs.fstat(old_fd).st_size
    gained_new = read_bytes(fs, new_fd, record.copy_size, new_end, record.path, retry)
    gained_old = read_bytes(fs, old_fd, record.settled_end, old_end, record.path, retry)
    lacking = b"".join(missing_lines(gained_new, gained_old))
    if not lacking:
        return 0
    out_fd = fs.open(record.path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
    try:
        status = fs.fstat(out_fd)
        if (status.st_dev, status.st_ino) != record.old_id:
            raise OSError(errno.ESTALE, f"{record.path} is not the old file any more")
        write_all(fs, out_fd, lacking)
        fsync_file(fs, out_fd, Path(record.path), retry)
    finally:
        fs.close(out_fd)
    return len(lacking)


def identity_of(fs: FileSystem, name: str | None) -> tuple[int, int] | None:
    if name is None:
        return None
    try:
        status = retrying_call(lambda: fs.stat(name), what=f"the status of {name}")
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def unlink_if(fs: FileSystem, name: str | None, identity: tuple[int, int]) -> None:
    if name is not None and identity_of(fs, name) == identity:
        with contextlib.suppress(FileNotFoundError):
            retrying_call(lambda: fs.unlink(name), what=f"the removal of {name}")


