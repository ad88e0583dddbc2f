"""The repair's own look at its swap, right after the exchange: riffd.repair.handover.settle, made
again while a writer still holds the old file (up to HOLD_WAIT) or a flaky folder fails a step, then
told as the repair's outcome.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from riffd.fsio import ReadFailed, RetryingFS
from riffd.repair.backup import BackupRecord, BackupStore
from riffd.repair.handover import (
    ABANDONED,
    FINISHED,
    GONE,
    KEPT_OTHER,
    PENDING,
    UNDONE,
    SwapResult,
    settle,
)
from riffd.repair.journal import Journal
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FailReason,
    Repaired,
    RepairOutcome,
    Skipped,
    SkipReason,
    failure,
    gone,
)
from riffd.repair.plan import Edit
from riffd.repair.swap import late_append_failure

log = logging.getLogger(__name__)

# How long a repair waits for writers that still hold the old file open before it leaves the rest to
# a later look (the daemon's pending job within 10 s, the next `riffd fix`).
HOLD_WAIT = 2.0
POLL_INTERVAL = 0.01
# looks that failed even after their retries (a flaky cloud-synced folder), before giving up
MAX_FAILED_LOOKS = 20


def hand_over(
    fs: RetryingFS,
    journal: Journal,
    original_fd: int,
    source_size: int,
    store: BackupStore,
    backup: BackupRecord,
    edits: tuple[Edit, ...],
    warnings: Sequence[str],
    options: ApplyOptions,
    failed_swap: OSError | None = None,
) -> RepairOutcome:
    """After the exchange (or an exchange that failed in a way that leaves what happened to the
    disk, `failed_swap`), settle the swap and return the repair's outcome. The journal is removed
    once the swap is done, or left (closed) for a later look."""
    path = journal.name(journal.record.transcript)
    deadline = time.monotonic() + HOLD_WAIT
    failures = 0
    while True:
        try:
            result = settle(fs, journal)
        except OSError as exc:
            failures += 1
            # A flaky folder, or a name that changed under the look (the transcript deleted or
            # replaced just after the swap): the journal says how far it got, so look again.
            if (
                exc.errno in (errno.EIO, errno.ENOENT) or isinstance(exc, ReadFailed)
            ) and failures < MAX_FAILED_LOOKS:
                time.sleep(POLL_INTERVAL)
                continue
            journal.close()  # the journal and riffd's names stay: the next look finishes or undoes the swap
            if failed_swap is not None:
                return Failed(
                    path,
                    FailReason.IO_ERROR,
                    f"{path}: not repaired, I/O error while replacing it "
                    f"({failed_swap}), and riffd could not look at what its name holds now ({exc}); "
                    f"riffd's journal beside it lets the next run finish or undo the swap, and the "
                    f"verified backup {backup.backup_id} holds the transcript as it was",
                )
            return late_append_failure(fs, path, original_fd, store, backup.backup_id, exc)
        if result.state != PENDING or not result.holders or time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    return _outcome(journal, result, source_size, backup, edits, warnings, failed_swap)


def _outcome(
    journal: Journal,
    result: SwapResult,
    source_size: int,
    backup: BackupRecord,
    edits: tuple[Edit, ...],
    warnings: Sequence[str],
    failed_swap: OSError | None,
) -> RepairOutcome:
    record = journal.record
    path = journal.name(record.transcript)
    if result.state == ABANDONED:
        journal.close()
        if failed_swap is not None:
            return failure(path, failed_swap, "replacing it with the repaired copy", checked=True)
        return Skipped(
            path, SkipReason.CHANGED, f"{path}: it was not replaced after all; scan it again"
        )
    if result.state == UNDONE:
        log.info("%s", result.detail)
        return Skipped(
            path, SkipReason.CHANGED if result.changed else SkipReason.LIVE, result.detail
        )
    if result.state == KEPT_OTHER:
        return Skipped(path, SkipReason.CHANGED, result.detail)
    if result.state == GONE:
        return Skipped(path, SkipReason.CHANGED, result.detail) if result.changed else gone(path)
    notes = [*warnings, *record.notes]
    pending: Path | None = None
    if result.state == PENDING:
        journal.close()
        pending = journal.path
        if record.phase == "undo":
            return Skipped(
                path,
                SkipReason.LIVE,
                f"{record.notes[-1] if record.notes else path} ({result.detail})",
            )
        notes.append(
            f"{result.detail}, at its next look (the daemon's within 10 s; `riffd fix` at its start)"
        )
    assert result.state in (FINISHED, PENDING)
    if result.state == FINISHED and "no name left" in result.detail:
        notes.append(
            f"{path}: the filesystem dropped the old file at once (a plain rename, or a stale file "
            "handle), so lines another writer might still have appended to it cannot be carried over "
            "here; riffd only rewrites sessions idle for the quiet period, which is the protection"
        )
    return Repaired(
        path=path,
        backup_id=backup.backup_id,
        backup_path=backup.data_path,
        edits=edits,
        carried_over_bytes=record.settled_end
        - source_size
        + sum(end - start for start, end in record.carried_at),
        warnings=tuple(notes),
        pending_swap=pending,
        copy_id=(record.copy_id[0], record.copy_id[1]),
    )
