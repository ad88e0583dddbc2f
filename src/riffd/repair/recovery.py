"""Finishing what a killed riffd left: a swap whose journal is still beside the transcript is finished (the lines
the new file lacks are carried onto it) or undone (the swap never happened, or a line written since hangs from one
the repair removed), judged from what is on disk, at the daemon's start, by `riffd fix` and by any repair in that
folder.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from riffd.fsio import (
    DEFAULT_RETRY,
    NOFOLLOW,
    REAL_FS,
    FileSystem,
    RetryPolicy,
    fsync_file,
    remove_leftover,
    write_all,
)
from riffd.paths import iter_transcripts
from riffd.repair.backup import BackupError, BackupStore
from riffd.repair.handover import (
    carry_back,
    hangs_from,
    identity_of,
    missing_lines,
    read_bytes,
    undo_exchange,
    unlink_if,
    writers_holding,
)
from riffd.repair.journal import (
    JOURNAL_SUFFIX,
    STAGING_SUFFIX,
    SWAP,
    UNDO,
    Journal,
    SwapRecord,
    copy_name_for,
    read_journal,
)
from riffd.repair.locks import remove_stale_temps, try_flock
from riffd.transcript.liveness import pid_is_alive

log = logging.getLogger(__name__)


_STAGING = re.compile(r"^\..+\.riffd-(?P<pid>[0-9]+)-[0-9a-f]{12}" + re.escape(JOURNAL_SUFFIX + STAGING_SUFFIX) + "$")


def _remove_dead_staging(fs: FileSystem, folder: Path) -> None:
    """Remove journals a killed run was still writing (never renamed into place: its swap had not begun)."""
    try:
        names = fs.listdir(folder)
    except OSError:
        return
    for name in names:
        match = _STAGING.match(name)
        if match is not None and int(match.group("pid")) != os.getpid() and not pid_is_alive(int(match.group("pid"))):
            remove_leftover(fs, folder / name)


def journals_in(fs: FileSystem, folder: Path) -> Iterator[Path]:
    """Yield the swap journals in `folder`."""
    try:
        names = fs.listdir(folder)
    except OSError as exc:
        log.warning("cannot list %s to look for interrupted repairs: %s", folder, exc)
        return
    for name in sorted(names):
        if name.startswith(".") and name.endswith(JOURNAL_SUFFIX) and ".riffd-" in name:
            yield folder / name


def recover(fs: FileSystem, journal_path: Path, retry: RetryPolicy) -> str | None:
    """Finish or undo the swap a riffd run left half done, from what is on disk; return what was done in words, or
    None when there is nothing to do now (another riffd run works on it, or a writer still holds the old file)."""
    try:
        fd = fs.open(journal_path, os.O_RDWR | NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        locked = try_flock(fs, fd)
        if locked is False or not _still_named(fs, fd, journal_path):
            return None  # another run works on it, or finished it between our open and our lock
        record = read_journal(fs, journal_path)
    except BaseException:
        fs.close(fd)
        raise
    if record is None:
        # Torn while it was first written, so before the swap (the journal is flushed before it): only the copy
        # is there to remove.
        fs.close(fd)
        remove_leftover(fs, copy_name_for(journal_path))
        remove_leftover(fs, journal_path)
        return f"{journal_path}: a repair was killed before its swap; its copy was removed"
    journal = Journal(fs, journal_path, fd, record)
    try:
        if locked is None and record.pid != os.getpid() and pid_is_alive(record.pid):
            return None  # no lock to go by on this filesystem, and the riffd run that wrote it still runs
        return _recover_locked(fs, journal, retry)
    finally:
        journal.close()


def _still_named(fs: FileSystem, fd: int, path: Path) -> bool:
    held = fs.fstat(fd)
    return identity_of(fs, str(path)) == (held.st_dev, held.st_ino)


def _recover_locked(fs: FileSystem, journal: Journal, retry: RetryPolicy) -> str | None:
    record = journal.record
    try:
        transcript_fd = fs.open(record.path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        transcript_fd = -1  # gone or not a file: judged below from the names alone
    try:
        if transcript_fd >= 0 and try_flock(fs, transcript_fd) is False:
            return None  # a riffd run is repairing the transcript right now
        return _recover_unlocked(fs, journal, retry)
    finally:
        if transcript_fd >= 0:
            fs.close(transcript_fd)


def _recover_unlocked(fs: FileSystem, journal: Journal, retry: RetryPolicy) -> str | None:
    record = journal.record
    path = record.path
    at_path = identity_of(fs, path)
    old_there = record.old_name is not None and identity_of(fs, record.old_name) == record.old_id
    if record.phase == SWAP and at_path == record.old_id:
        # The swap never happened: the transcript is as it was; the copy (and the old file's extra link) go.
        unlink_if(fs, record.copy_name, record.copy_id)
        if record.old_name != record.copy_name:
            unlink_if(fs, record.old_name, record.old_id)
        journal.remove()
        return f"{path}: a repair was interrupted before its swap; the transcript was never changed"
    if record.phase == UNDO and at_path == record.copy_id and old_there:
        undo_exchange(fs, journal, *_open_pair(fs, record), retry)  # the undo's own swap had not happened
        return _finish_undo(fs, journal, retry)
    if record.phase == UNDO and at_path == record.old_id:
        return _finish_undo(fs, journal, retry)
    if at_path == record.copy_id and old_there:
        return _finish_swap(fs, journal, retry)
    if at_path == record.copy_id:
        journal.remove()
        return f"{path}: a repair was interrupted after its last step; nothing was left to do"
    # The transcript was deleted or replaced since: the old file's late lines go into a backup, never back.
    kept = ""
    if old_there:
        assert record.old_name is not None
        kept = _back_up_old(fs, record, retry)
        unlink_if(fs, record.old_name, record.old_id)
    unlink_if(fs, record.copy_name, record.copy_id)
    journal.remove()
    return f"{path}: a repair was interrupted and the transcript has been deleted or replaced since{kept}"


def _open_pair(fs: FileSystem, record: SwapRecord) -> tuple[int, int]:
    assert record.old_name is not None
    old_fd = fs.open(record.old_name, os.O_RDONLY | NOFOLLOW)
    try:
        new_fd = fs.open(record.path, os.O_RDWR | os.O_APPEND | NOFOLLOW)
    except BaseException:
        fs.close(old_fd)
        raise
    return old_fd, new_fd


def _finish_swap(fs: FileSystem, journal: Journal, retry: RetryPolicy) -> str | None:
    record = journal.record
    assert record.old_name is not None
    holders = writers_holding(Path(record.old_name))
    if holders:
        return None
    old_fd, new_fd = _open_pair(fs, record)
    try:
        old_end = fs.fstat(old_fd).st_size
        new_end = fs.fstat(new_fd).st_size
        grew = record.cut_at is not None and old_end > record.settled_end
        start = record.cut_at if grew and record.cut_at is not None else record.settled_end
        gained_old = read_bytes(fs, old_fd, start, old_end, record.path, retry)
        gained_new = read_bytes(fs, new_fd, record.copy_size, new_end, record.path, retry)
        removed = frozenset(record.removed)
        lacking = missing_lines(gained_old, gained_new)
        direct = missing_lines(gained_new, gained_old)
        conflict = next((line for line in (*lacking, *direct) if hangs_from(line, removed)), None)
        if conflict is not None:
            undo_exchange(fs, journal, old_fd, new_fd, retry)
            unlink_if(fs, record.copy_name, record.copy_id)
            journal.remove()
            return (f"{record.path}: a repair was interrupted, and a line written meanwhile hangs from a line it "
                    "removed; the repair was undone (the transcript is as its writers left it)")
        if lacking:
            data = b"".join(lacking)
            write_all(fs, new_fd, data)
            fsync_file(fs, new_fd, Path(record.path), retry)
    finally:
        fs.close(old_fd)
        fs.close(new_fd)
    unlink_if(fs, record.old_name, record.old_id)
    journal.remove()
    carried = f"; {len(lacking)} line(s) written to the old file were carried over" if lacking else ""
    return f"{record.path}: finished a repair that was interrupted after its swap{carried}"


def _finish_undo(fs: FileSystem, journal: Journal, retry: RetryPolicy) -> str:
    record = journal.record
    copy_at = record.copy_name if record.old_name == record.copy_name else None
    if copy_at is not None and identity_of(fs, copy_at) == record.copy_id:
        old_fd = fs.open(record.path, os.O_RDONLY | NOFOLLOW)
        try:
            new_fd = fs.open(copy_at, os.O_RDONLY | NOFOLLOW)
            try:
                carry_back(fs, record, old_fd, new_fd, retry)
            finally:
                fs.close(new_fd)
        finally:
            fs.close(old_fd)
        unlink_if(fs, copy_at, record.copy_id)
    journal.remove()
    return f"{record.path}: finished undoing a repair that was interrupted; the transcript is as its writers left it"


def _back_up_old(fs: FileSystem, record: SwapRecord, retry: RetryPolicy) -> str:
    assert record.old_name is not None
    fd = fs.open(record.old_name, os.O_RDONLY | NOFOLLOW)
    try:
        store = BackupStore(Path(record.backup_dir), fs=fs, retry=retry)
        saved = store.create(Path(record.path), fd, fs.fstat(fd).st_size, None, (),
                             reason="the old file of an interrupted repair")
    except (OSError, BackupError) as exc:
        raise OSError(errno.EIO, f"could not back up the old file {record.old_name} ({exc}); it is left there") from exc
    finally:
        fs.close(fd)
    return f"; the old file, with every line written to it, is in backup {saved.backup_id}"


def unfinished_swap(fs: FileSystem, path: Path) -> Path | None:
    """Return the journal of a swap of `path` that is not finished (a writer still holds its old file), or None."""
    for journal in journals_in(fs, path.parent):
        try:
            record = read_journal(fs, journal)
        except OSError:
            return journal  # cannot tell: as if unfinished
        if record is not None and record.path == str(path):
            return journal
    return None


def recover_folder(fs: FileSystem, folder: Path, retry: RetryPolicy) -> list[str]:
    """Finish or undo every interrupted swap in `folder`; return what was done, in words (errors are logged and
    the journal kept for the next run)."""
    done: list[str] = []
    _remove_dead_staging(fs, folder)
    for journal in journals_in(fs, folder):
        try:
            what = recover(fs, journal, retry)
        except OSError as exc:
            log.error("%s: could not finish an interrupted repair (%s); riffd tries again at its next run here",
                      journal, exc)
            continue
        if what is not None:
            log.warning("%s", what)
            done.append(what)
    return done


class PendingSwaps:
    """The journals of repairs whose old file a writer still held when the repair ended: added by the thread that
    repairs, finished by another (the daemon's scheduler)."""

    def __init__(self) -> None:
        self._journals: set[Path] = set()
        self._lock = threading.Lock()

    def add(self, journal: Path) -> None:
        """Remember a hand-over to finish later."""
        with self._lock:
            self._journals.add(journal)

    def finish(self, fs: FileSystem, retry: RetryPolicy) -> None:
        """Carry what writers put into those old files since; forget the hand-overs that are done."""
        with self._lock:
            pending = sorted(self._journals)
        for journal in pending:
            try:
                recover(fs, journal, retry)
            except OSError as exc:
                log.warning("%s: could not finish the hand-over of a repair yet: %s", journal, exc)
            if not journal.exists():
                with self._lock:
                    self._journals.discard(journal)


def recover_and_sweep(roots: Iterable[Path], older_than_seconds: float, *, fs: FileSystem = REAL_FS,
                      retry: RetryPolicy = DEFAULT_RETRY) -> list[Path]:
    """In every transcript folder under `roots` (the folders riffd.paths walks: symlinked ones followed), finish or
    undo the interrupted swaps, then remove riffd's stale temp files (`riffd.repair.locks.remove_stale_temps`);
    return the temp files removed."""
    folders: list[Path] = []
    walked = iter_transcripts([root for root in roots if root.is_dir()], lambda exc: log.warning(
        "cannot look for riffd temp files in %s: %s", exc.filename, exc.strerror or exc), fs=fs,
        on_folder=folders.append)
    collections.deque(walked, maxlen=0)  # the walk is what is wanted, not the transcripts it names
    removed: list[Path] = []
    for folder in folders:
        recover_folder(fs, folder, retry)
        removed += remove_stale_temps(folder, older_than_seconds, fs=fs)
    return removed
