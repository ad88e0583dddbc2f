"""Carrying lines between the two files of a swap, exactly: forward (what writers put into the old
file, onto the transcript) and back (after an undo, what they wrote to riffd's copy, onto the old
file again).

Each carry is journaled before it is written (where it comes from, and the size of the file it goes
to) and after (where it landed), so riffd killed in between leaves enough to tell whether it landed,
in part or whole: a line is never carried twice, never lost, and never judged by its bytes alone
(two identical metadata lines are two lines). Lines are carried whole, except the last, unfinished
one once no process writes the file any more.
"""

from __future__ import annotations

import errno
import os
import time
from functools import partial
from pathlib import Path

from riffd.fsio import RetryingFS
from riffd.repair.journal import Journal, Pair
from riffd.repair.lines import (
    Interval,
    LineConflict,
    hangs_from,
    inside,
    outside,
    parent_of,
    read_bytes,
    split_lines,
    uuid_of,
)

_PROC = Path("/proc")
_NOT_FILES = (b"socket:", b"pipe:", b"anon_inode:", b"/dev/", b"/proc/", b"/sys/")
# where no process table can be read: unchanged this long counts as no writer
QUIET_WITHOUT_PROC = 1.0


def writers_holding(identity: Pair) -> list[int] | None:
    """Given a file's (device, inode), return the pids of other processes that hold it open for
    writing, whatever name (or none) it has now and through whichever mount they opened it; None
    where no process table can be read (no /proc). Processes whose descriptors this user cannot read
    are not seen: another user's process does not write a user's transcripts."""
    if not _PROC.is_dir():
        return None
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
            link = f"{fd_folder}/{descriptor}"
            try:
                if os.readlink(os.fsencode(link)).startswith(_NOT_FILES):
                    continue
                status = os.stat(link)
            except OSError:
                continue
            if (status.st_dev, status.st_ino) == identity and _opened_for_writing(
                entry.name, descriptor
            ):
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


def holders_of(identity: Pair, fd: int, fs: RetryingFS) -> list[int]:
    """The processes still writing the file `identity` (open as `fd`); where that cannot be seen,
    [0] while the file changed within QUIET_WITHOUT_PROC seconds, else none."""
    holders = writers_holding(identity)
    if holders is not None:
        return holders
    return [0] if time.time() - fs.fstat(fd).st_mtime < QUIET_WITHOUT_PROC else []


def _append(fs: RetryingFS, fd: int, payload: bytes, what: str) -> list[Interval]:
    """Append `payload` to `fd` (opened O_APPEND), resuming a short write from the exact byte;
    return the ranges of the file it landed in."""
    landed: list[Interval] = []
    view = memoryview(payload)
    while view:
        written = fs.attempt(partial(fs.write, fd, view), what)
        if written <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        end = os.lseek(fd, 0, os.SEEK_CUR)
        landed.append((end - written, end))
        view = view[written:]
    return landed


def _landed(
    fs: RetryingFS, fd: int, payload: bytes, size_before: int, what: str
) -> tuple[list[Interval], int]:
    """A carry of `payload` was under way when riffd stopped: return where the file `fd` holds it
    (or the part of it that landed, at its end) and how many bytes of it landed."""
    size = fs.fstat(fd).st_size
    tail = read_bytes(fs, fd, size_before, size, what)
    found = tail.find(payload)
    if found >= 0:
        return [(size_before + found, size_before + found + len(payload))], len(payload)
    start = 0
    for line in split_lines(tail):  # a short write: the payload's first part, at the file's end
        rest = tail[start:]
        if rest and payload.startswith(rest):
            return [(size_before + start, size)], len(rest)
        start += len(line)
    return [], 0


def _whole(data: bytes, final: bool) -> bytes:
    return data if final else data[: data.rfind(b"\n") + 1]


def check_direct(fs: RetryingFS, journal: Journal, new_fd: int) -> None:
    """Raise LineConflict when a line written straight to the transcript since the swap (not carried
    there by riffd) hangs from a line the repair removed."""
    record = journal.record
    what = str(journal.name(record.transcript))
    new_size = fs.fstat(new_fd).st_size
    direct = outside(
        read_bytes(fs, new_fd, record.copy_size, new_size, what),
        record.copy_size,
        record.carried_at,
    )
    for line in split_lines(direct):
        parent = hangs_from(line, frozenset(record.removed)) if line.endswith(b"\n") else None
        if parent is not None:
            raise LineConflict(
                f"a line written to it after the swap hangs from {parent}, a line the repair removed"
            )


def carry_forward(
    fs: RetryingFS,
    journal: Journal,
    old_fd: int,
    new_fd: int,
    *,
    final: bool = False,
) -> int:
    """Carry what the old file gained since the swap onto the transcript (`new_fd`, O_APPEND), whole
    lines only unless `final`; raise LineConflict first when a line written to either file since
    hangs from a removed line. Return the bytes carried."""
    record = journal.record
    what = str(journal.name(record.transcript))
    removed = frozenset(record.removed)
    if record.carrying is not None:
        start, end, size_before = record.carrying
        payload = read_bytes(fs, old_fd, start, end, what)
        landed, count = _landed(fs, new_fd, payload, size_before, what)
        if 0 < count < len(payload):
            landed += _append(fs, new_fd, payload[count:], what)
        record = journal.update(
            carrying=None,
            carried_at=(*record.carried_at, *landed),
            carried=end if landed else start,
        )
    check_direct(fs, journal, new_fd)
    old_size = fs.fstat(old_fd).st_size
    if record.carry_from < 0:
        if old_size <= record.settled_end:
            return 0
        start = record.settled_end
        # bytes after a cut unfinished line continue it: it comes back whole
        if record.cut_at is not None:
            start = record.cut_at
            record = journal.update(
                notes=(
                    *record.notes,
                    f"{what}: a writer continued its unfinished last "
                    "line during the repair, so that line was put back whole",
                ),
            )
        record = journal.update(carry_from=start, carried=start)
    payload = _whole(read_bytes(fs, old_fd, record.carried, old_size, what), final)
    if not payload:
        return 0
    for line in split_lines(payload):
        parent = hangs_from(line, removed)
        if parent is not None:
            raise LineConflict(
                f"a line written to the old file during the repair hangs from {parent}, a line the "
                "repair removed"
            )
    start, end = record.carried, record.carried + len(payload)
    record = journal.update(carrying=(start, end, fs.fstat(new_fd).st_size))
    landed = _append(fs, new_fd, payload, what)
    journal.update(carrying=None, carried=end, carried_at=(*record.carried_at, *landed))
    return len(payload)


def verify_forward(fs: RetryingFS, journal: Journal, old_fd: int, new_fd: int) -> None:
    """Check that every byte the old file gained after the swap point is in the transcript where the
    journal says; raise OSError when not (the old file then keeps its name and the journal for the
    next look)."""
    record = journal.record
    what = str(journal.name(record.transcript))
    old_size = fs.fstat(old_fd).st_size
    if record.carry_from < 0:
        if old_size > record.settled_end:
            raise OSError(errno.EIO, f"{what}: the old file grew, but nothing of it was carried")
        return
    new_size = fs.fstat(new_fd).st_size
    carried = inside(
        read_bytes(fs, new_fd, record.copy_size, new_size, what),
        record.copy_size,
        record.carried_at,
    )
    if record.carried != old_size or carried != read_bytes(
        fs, old_fd, record.carry_from, old_size, what
    ):
        raise OSError(
            errno.EIO, f"{what}: the lines written to the old file are not all in the new one"
        )


def _inserted_line(fs: RetryingFS, copy_fd: int, end: int, wanted: str, what: str) -> bytes:
    needle = f'"uuid":"{wanted}"'.encode()
    data = read_bytes(fs, copy_fd, 0, end, what)
    for line in split_lines(data):
        if needle in line and uuid_of(line) == wanted:
            return line
    return b""


def _back_payload(
    fs: RetryingFS, journal: Journal, copy_fd: int, start: int, end: int
) -> tuple[bytes, tuple[str, ...]]:
    """The bytes an undo carries back for the copy's range [start, end): what writers put into it
    directly (not what riffd carried into it from the old file), each line after the inserted lines
    it hangs from (a placeholder the repair added, which the old file lacks). Return them and the
    inserted uuids carried so far."""
    record = journal.record
    what = str(journal.name(record.copy_name))
    direct = outside(read_bytes(fs, copy_fd, start, end, what), start, record.carried_at)
    inserted, carried = set(record.inserted), list(record.back_inserted)
    parts: list[bytes] = []
    for line in split_lines(direct):
        chain: list[bytes] = []
        parent = parent_of(line)
        while parent is not None and parent in inserted and parent not in carried:
            found = _inserted_line(fs, copy_fd, record.copy_size, parent, what)
            if not found:
                break
            chain.append(found)
            carried.append(parent)
            parent = parent_of(found)
        parts += reversed(chain)
        parts.append(line)
    return b"".join(parts), tuple(carried)


def carry_back(
    fs: RetryingFS,
    journal: Journal,
    old_fd: int,
    copy_fd: int,
    *,
    final: bool = False,
) -> int:
    """After an undo: carry onto the transcript (the old file again, `old_fd`, O_APPEND) what
    writers put into riffd's copy since the swap, whole lines only unless `final`. Return the bytes
    carried."""
    record = journal.record
    what = str(journal.name(record.transcript))
    if record.back_carrying is not None:
        start, end, size_before = record.back_carrying
        payload, carried_inserted = _back_payload(fs, journal, copy_fd, start, end)
        landed, count = _landed(fs, old_fd, payload, size_before, what)
        if 0 < count < len(payload):
            _append(fs, old_fd, payload[count:], what)
        record = journal.update(
            back_carrying=None,
            back_carried=end if landed else start,
            back_inserted=carried_inserted if landed else record.back_inserted,
        )
    start = record.copy_size if record.back_carried < 0 else record.back_carried
    copy_size = fs.fstat(copy_fd).st_size
    end = start + len(_whole(read_bytes(fs, copy_fd, start, copy_size, what), final))
    if end <= start:
        return 0
    payload, carried_inserted = _back_payload(fs, journal, copy_fd, start, end)
    if not payload:
        journal.update(back_carried=end)
        return 0
    journal.update(back_carrying=(start, end, fs.fstat(old_fd).st_size))
    _append(fs, old_fd, payload, what)
    journal.update(back_carrying=None, back_carried=end, back_inserted=carried_inserted)
    return len(payload)
