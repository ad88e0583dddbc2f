"""Swaps that are not done yet: a journal beside a transcript whose repair was killed, or whose old
file a writer still held when the repair ended. Each is looked at again
(riffd.repair.handover.settle) at the daemon's start, by its pending job, by `riffd fix` and by any
repair in that folder: finished, undone or left for the next look.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from riffd.claude_code.liveness import pid_is_alive
from riffd.claude_code.walk import iter_transcripts
from riffd.fsio import NOFOLLOW, REAL_FILES, RetryingFS, remove_leftover
from riffd.repair.handover import (
    ABANDONED,
    FINISHED,
    PENDING,
    UNDONE,
    SwapResult,
    identity_of,
    settle,
)
from riffd.repair.journal import JOURNAL_SUFFIX, STAGING_SUFFIX, Journal, SwapRecord, read_journal
from riffd.repair.locks import remove_stale_temps, try_flock

log = logging.getLogger(__name__)

_STAGING = re.compile(
    r"^\..+\.riffd-(?P<pid>[0-9]+)-[0-9a-f]{12}" + re.escape(JOURNAL_SUFFIX + STAGING_SUFFIX) + "$"
)


def _remove_dead_staging(fs: RetryingFS, folder: Path) -> None:
    """Remove journals a killed run was still writing (never renamed into place: its swap had not
    begun)."""
    try:
        names = fs.listdir(folder)
    except OSError:
        return
    for name in names:
        match = _STAGING.match(name)
        if (
            match is not None
            and int(match.group("pid")) != os.getpid()
            and not pid_is_alive(int(match.group("pid")))
        ):
            remove_leftover(fs, folder / name)


def journals_in(fs: RetryingFS, folder: Path) -> Iterator[Path]:
    """Yield the swap journals in `folder`."""
    try:
        names = fs.listdir(folder)
    except OSError as exc:
        log.warning("cannot list %s to look for unfinished repairs: %s", folder, exc)
        return
    for name in sorted(names):
        if name.startswith(".") and name.endswith(JOURNAL_SUFFIX) and ".riffd-" in name:
            yield folder / name


def _same_file(fs: RetryingFS, folder: Path, name: str, holding: Path | None) -> bool:
    if holding is None or holding.name != name:
        return False
    try:
        return os.path.samefile(holding.parent, folder)
    except OSError:
        return False


def recover(
    fs: RetryingFS, journal_path: Path, *, holding: Path | None = None
) -> SwapResult | None:
    """Look at the swap `journal_path` records: finish, undo or leave it
    (riffd.repair.handover.settle). Return what was done, or None when another riffd run works on it
    now (or it is gone, or it is not riffd's). `holding`: the transcript whose lock the caller holds
    already (a repair of that very file). Raise OSError when the disk fails."""
    try:
        fd = fs.open(journal_path, os.O_RDWR | NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        locked = try_flock(fs, fd)
        held = fs.fstat(fd)
        if locked is False or identity_of(fs, journal_path) != (held.st_dev, held.st_ino):
            return None  # another run works on it, or finished it between our open and our lock
        record = read_journal(fs, journal_path, fd)
    except BaseException:
        fs.close(fd)
        raise
    if record is None:
        fs.close(fd)
        log.warning(
            "%s: not a swap journal riffd can read (another user's, or damaged); left as it is",
            journal_path,
        )
        return None
    journal = Journal(fs, journal_path, fd, record)
    try:
        if locked is None and record.pid != os.getpid() and pid_is_alive(record.pid):
            return None  # no locks on this filesystem, and the run that wrote it still runs
        return _settle_locked(fs, journal, holding)
    finally:
        journal.close()


def _settle_locked(fs: RetryingFS, journal: Journal, holding: Path | None) -> SwapResult | None:
    """Take the transcript's lock (unless the caller holds it) and settle the swap."""
    record: SwapRecord = journal.record
    if _same_file(fs, journal.folder, record.transcript, holding):
        return settle(fs, journal)
    try:
        transcript_fd = fs.open(journal.name(record.transcript), os.O_RDONLY | NOFOLLOW)
    except OSError:
        return settle(fs, journal)  # deleted or not a file: judged from the names alone
    try:
        if try_flock(fs, transcript_fd) is False:
            return None  # a riffd run is repairing the transcript right now
        return settle(fs, journal)
    finally:
        fs.close(transcript_fd)


def unfinished_swap(fs: RetryingFS, path: Path) -> Path | None:
    """Return the journal of a swap of `path` not finished yet (a writer still holds its old file),
    or None."""
    for journal in journals_in(fs, path.parent):
        try:
            record = read_journal(fs, journal)
        except OSError:
            return journal  # cannot tell: as if unfinished
        if record is not None and record.transcript == path.name:
            return journal
    return None


def recover_folder(fs: RetryingFS, folder: Path, *, holding: Path | None = None) -> list[str]:
    """Look again at every unfinished swap in `folder`; return what was done, in words (errors are
    logged and the journal kept for the next look)."""
    done: list[str] = []
    _remove_dead_staging(fs, folder)
    for journal in journals_in(fs, folder):
        try:
            result = recover(fs, journal, holding=holding)
        except OSError as exc:
            log.error(
                "%s: could not finish a repair yet (%s); riffd looks again at its next run here",
                journal,
                exc,
            )
            continue
        if result is not None and result.state != PENDING:
            said = f"{result.detail} ({_LEFT_BY_ANOTHER_RUN.get(result.state, 'a repair left unfinished')})"
            log.info("%s", said)
            done.append(said)
    return done


_LEFT_BY_ANOTHER_RUN = {
    FINISHED: "riffd finished a repair an earlier run left unfinished",
    UNDONE: "riffd undid a repair an earlier run left unfinished",
    ABANDONED: "riffd removed the copy of a repair killed before its swap",
}


class PendingSwaps:
    """The journals of repairs whose old file a writer still held when the repair ended: added by
    the thread that repairs, looked at again by another (the daemon's scheduler)."""

    def __init__(self) -> None:
        self._journals: set[Path] = set()
        self._lock = threading.Lock()

    def add(self, journal: Path) -> None:
        """Remember a swap to look at again."""
        with self._lock:
            self._journals.add(journal)

    def finish(self, fs: RetryingFS) -> None:
        """Carry what writers put into those old files since; forget the swaps that are done."""
        with self._lock:
            pending = sorted(self._journals)
        for journal in pending:
            try:
                result = recover(fs, journal)
            except OSError as exc:
                log.warning("%s: could not finish the hand-over of a repair yet: %s", journal, exc)
                continue
            if result is not None and result.state != PENDING:
                log.info("%s", result.detail)
            if not journal.exists():
                with self._lock:
                    self._journals.discard(journal)


def recover_and_sweep(
    roots: Iterable[Path],
    older_than_seconds: float,
    *,
    fs: RetryingFS = REAL_FILES,
) -> list[Path]:
    """In every transcript folder under `roots` (the folders riffd.claude_code.walk walks: symlinked ones
    followed), look again at the unfinished swaps, then remove riffd's stale temp files
    (`riffd.repair.locks.remove_stale_temps`); return the temp files removed."""
    folders: list[Path] = []
    walked = iter_transcripts(
        [root for root in roots if root.is_dir()],
        lambda exc: log.warning(
            "cannot look for riffd temp files in %s: %s", exc.filename, exc.strerror or exc
        ),
        fs=fs,
        on_folder=folders.append,
    )
    collections.deque(walked, maxlen=0)  # the walk is what is wanted, not the transcripts it names
    removed: list[Path] = []
    for folder in folders:
        recover_folder(fs, folder)
        removed += remove_stale_temps(folder, older_than_seconds, fs=fs)
    return removed
