"""Once the repaired copy holds the transcript's name: check that the swap was right, hand over the lines written to
the old file late, or undo the swap.

Three findings undo a swap, each of which means the repair must not stand: the old file was truncated or rewritten
in place just before the swap (its writer's version wins), a Claude Code process registered the session just as the
names were swapped (it may have read the old file), or a line written to either file since hangs from a line the
repair removed (a client read the old file: its next lines would dangle in the repaired one). An undo gives the
name back to the old file and carries onto it every line written to the copy meanwhile, so the transcript is what
its writers made of it, and the repair is reported as skipped.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from riffd.fsio import FileSystem, ReadFailed, retrying_call
from riffd.repair.backup import BackupRecord, BackupStore
from riffd.repair.handover import (
    HOLD_WAIT,
    POLL_INTERVAL,
    Handover,
    LineConflict,
    carry_back,
    read_bytes,
    undo_exchange,
    writers_holding,
)
from riffd.repair.outcomes import ApplyOptions, Failed, FailReason, Repaired, RepairOutcome, Skipped, SkipReason
from riffd.repair.plan import Edit
from riffd.repair.swap import late_append_failure
from riffd.transcript.liveness import session_liveness
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_FAILED_CHECKS = 20  # checks of the old file that failed even after their retries, before riffd gives up


@dataclass(frozen=True)
class Planned:
    """What the copy was made from: the original's size as scanned, its sample windows, and where in the copy the
    lines appended before the swap begin."""

    source_size: int
    sha256: str  # of the original's bytes [0, source_size), as backed up
    samples: dict[int, bytes]
    settle_from: int


def changed_under_swap(fs: FileSystem, handover: Handover, planned: Planned) -> str | None:
    """Return how the old file changed other than by appends since it was checked last (truncated, bytes rewritten
    in place), or None when it only grew."""
    record = handover.record
    fd, path, retry = handover.old_fd, record.path, handover.retry
    size = retrying_call(lambda: fs.fstat(fd), what=path, policy=retry).st_size
    if size < record.settled_end:
        return f"it was truncated to {size} bytes"
    for start, expected in planned.samples.items():
        if read_bytes(fs, fd, start, start + len(expected), path, retry) != expected:
            return f"its bytes at offset {start} were rewritten"
    # Every byte: an in-place rewrite between two sample windows is as real as one inside them.
    digest = hashlib.sha256()
    for chunk in iter_fd(fd, what=path, fs=fs, retry=retry, end=planned.source_size):
        digest.update(chunk)
    if digest.hexdigest() != planned.sha256:
        return "its bytes were rewritten in place"
    appended = record.settled_end - planned.source_size
    if appended and read_bytes(fs, fd, planned.source_size, record.settled_end, path, retry) != read_bytes(
            fs, handover.new_fd, planned.settle_from, planned.settle_from + appended, path, retry):
        return f"its bytes after offset {planned.source_size} were rewritten"
    return None


def hand_over(
    fs: FileSystem,
    handover: Handover,
    planned: Planned,
    store: BackupStore,
    backup: BackupRecord,
    edits: tuple[Edit, ...],
    warnings: Sequence[str],
    options: ApplyOptions,
) -> RepairOutcome:
    """After the swap: undo it if it must not stand, else carry the old file's late lines until no process writes
    it, and remove its name (or leave it, with the journal, to a later run while a writer still holds it)."""
    path = Path(handover.record.path)
    try:
        try:
            changed = _patiently(handover, lambda: changed_under_swap(fs, handover, planned))
            if changed is not None:
                return undo(fs, handover, SkipReason.CHANGED, f"{path}: {changed} just before riffd swapped in its "
                            "repaired copy, so riffd gave the transcript back as its writer left it; scan it again")
            live, why = session_liveness(path, options.claude_dirs(path), 0, session_id=options.session_id, fs=fs)
            if live:
                return undo(fs, handover, SkipReason.LIVE, f"{path}: the session may be in use: {why} (seen just "
                            "after the swap), so riffd undid the repair; the transcript is as its writers left it")
            finished, warning = _watch(handover, time.monotonic() + HOLD_WAIT), None
        except OSError as exc:
            if not _out_of_reach(exc):
                raise
            # ESTALE (NFS, libfuse's hard_remove) or ENOENT (a FUSE layer that lost the renamed file): the old file
            # is out of reach, and so is anything still written to it.
            finished, warning = True, (
                f"{path}: the filesystem dropped the old file at once (stale file handle), so lines another writer "
                "might still have appended to it cannot be carried over here; riffd only rewrites sessions idle for "
                "the quiet period, which is the protection")
    except LineConflict as exc:
        return undo(fs, handover, SkipReason.LIVE, f"{path}: the session is in use: {exc}; riffd undid the repair, "
                    "so the transcript is as its writers left it")
    except OSError as exc:
        handover.journal.close()  # the old file keeps its name and the journal: the next run here finishes it
        return late_append_failure(fs, path, handover.old_fd, store, backup.backup_id, exc, handover.retry)
    notes = list(warnings)
    if warning:
        notes.append(warning)
    if handover.restored:
        notes.append(handover.restored)
    pending: Path | None = None
    if finished:
        try:
            handover.verify()
            handover.release_old_name()
            handover.journal.remove()
        except OSError as exc:
            handover.journal.close()
            pending = handover.journal.path
            notes.append(f"{path}: repaired, but the old file's lines could not be checked against the new file "
                         f"({exc}); riffd keeps the old file as {handover.record.old_name} and checks again at its "
                         "next run here")
    else:
        handover.journal.close()
        pending = handover.journal.path
        holders = writers_holding(Path(handover.record.old_name or path)) or []
        notes.append(f"{path}: repaired; process(es) {', '.join(map(str, holders)) or '?'} still hold the old file "
                     f"open for writing, so riffd keeps it as {handover.record.old_name} and carries what they write "
                     "at its next run here (the daemon looks again within a minute; `riffd fix` at its start)")
    return Repaired(
        path=path,
        backup_id=backup.backup_id,
        backup_path=backup.data_path,
        edits=edits,
        carried_over_bytes=handover.carried_over(planned.source_size),
        warnings=tuple(notes),
        pending_swap=pending,
    )


def _patiently(handover: Handover, check: Callable[[], T]) -> T:
    """Return `check()`, made again through failures (a flaky cloud-synced folder) up to MAX_FAILED_CHECKS."""
    failures = 0
    while True:
        try:
            return check()
        except OSError as exc:
            failures += 1
            if failures >= MAX_FAILED_CHECKS or _out_of_reach(exc):
                raise
            log.debug("%s: checking the old file failed (%s); again", handover.record.path, exc)
            time.sleep(POLL_INTERVAL)


def _out_of_reach(exc: OSError) -> bool:
    return exc.errno in (errno.ESTALE, errno.ENOENT) and not isinstance(exc, ReadFailed)


def _watch(handover: Handover, deadline: float) -> bool:
    """Run the hand-over's watch, going on through failed checks (a flaky cloud-synced folder) up to
    MAX_FAILED_CHECKS; return whether it finished (no writer holds the old file any more)."""
    failures = 0
    while True:
        try:
            return handover.watch(deadline)
        except LineConflict:
            raise
        except OSError as exc:
            failures += 1
            if failures >= MAX_FAILED_CHECKS or _out_of_reach(exc):
                raise
            log.debug("%s: copying late lines failed (%s); again at the next check", handover.record.path, exc)
            time.sleep(POLL_INTERVAL)


def undo(fs: FileSystem, handover: Handover, reason: SkipReason, detail: str) -> RepairOutcome:
    """Give the transcript's name back to the old file with every line written to the copy since the swap; return
    Skipped(reason, detail), or Failed when the names cannot be swapped back (the journal stays for the next run)."""
    record = handover.record
    path = Path(record.path)
    if record.old_name is None:
        return Failed(path, FailReason.IO_ERROR, f"{detail.split(';')[0]}; but this filesystem keeps no name for the "
                      "old file, so the repair could not be undone: the old file is in the backup; "
                      "`riffd backups list` names it")
    try:
        undo_exchange(fs, handover.journal, handover.old_fd, handover.new_fd, handover.retry)
        copy_at = Path(record.copy_name) if record.old_name == record.copy_name else None
        if copy_at is not None:
            # Writers that opened the transcript between the swap and the undo write into the copy: wait for them.
            deadline = time.monotonic() + HOLD_WAIT
            while writers_holding(copy_at) and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL)
            carry_back(fs, record, handover.old_fd, handover.new_fd, handover.retry)
            if writers_holding(copy_at):
                handover.journal.close()
                return Skipped(path, reason, f"{detail} (a process still writes riffd's copy {copy_at}: riffd carries "
                               "what it writes at its next run here)")
            handover.release_copy_name()
        handover.journal.remove()
    except OSError as exc:
        handover.journal.close()
        return Failed(path, FailReason.IO_ERROR, f"{detail.split(';')[0]}; riffd had to undo the repair but the "
                      f"filesystem failed ({exc}): the next riffd run here finishes undoing it from its journal "
                      f"{handover.journal.path}")
    log.info("%s", detail)
    return Skipped(path, reason, detail)
