"""The worker's repair step: a transcript whose findings a repair may fix is repaired once its
session is idle, through the same safe path as `riffd fix` (`repair.planner.plan_file_repair`
then `repair.writer.apply_plan`), and what came of it is recorded.

A repair that failed waits before the next attempt, twice as long after each failure in a row; one
that cannot succeed as things are is not tried again until the file changes; a torn last line is cut
off only once the archive holds it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from riffd.archive.store import Archive
from riffd.daemon.judging import liveness
from riffd.daemon.outcome import Outcome, WorkerSettings
from riffd.daemon.sinks import ArchiveErrors
from riffd.fsio import RetryingFS
from riffd.repair.outcomes import ApplyOptions, Failed, FileChanged, Repaired, Skipped, SkipReason
from riffd.repair.plan import RepairOptions, RepairPlan
from riffd.repair.planner import cuts_torn_tail, keep_torn_tail, plan_file_repair
from riffd.repair.recovery import PendingSwaps
from riffd.repair.writer import apply_plan
from riffd.state.store import StateStore
from riffd.transcript.scan import index_file

log = logging.getLogger("riffd.daemon.worker")  # the worker's own lines

CHANGED_RETRY_SECONDS = 5.0
# After a failed repair (the disk or a sync client failing), the file waits before the next attempt,
# twice as long after each failure in a row: each attempt takes a backup, and one that put the
# transcript back rewrote it, which would bring the file straight back.
FAILED_RETRY_SECONDS = 30.0
FAILED_RETRY_MAX_SECONDS = 600.0


@dataclass(frozen=True)
class NotYet:
    """A repair not attempted now, and not recorded: the outcome's `repair` and `why`, looked at
    again after `seconds`."""

    repair: str
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class NothingSafe:
    """The plan holds no edit that is safe to make; `why` says what was left out."""

    why: str


@dataclass(frozen=True)
class Done:
    """A repair made: the writer's result, and what the plan fixed, by class."""

    result: Repaired
    fixes: Counter[str]
    edits: int


Attempt = NotYet | NothingSafe | Done | Skipped | Failed


@dataclass(frozen=True)
class RepairStep:
    """Repairs one transcript for the worker, with its settings and its file system; the repairs
    whose old file a writer still held go to `pending_swaps` (riffd.repair.handover)."""

    store: StateStore
    settings: WorkerSettings
    fs: RetryingFS
    pending_swaps: PendingSwaps
    archive: Archive | None
    archive_errors: ArchiveErrors
    # writes the file's appended lines still waiting for the archive (riffd.daemon.archive_batch)
    archive_waiting: Callable[[str], object] = lambda _name: None

    def run(self, path: Path, session_id: str | None, outcome: Outcome) -> Repaired | None:
        """Repair `path` if that is safe now; record what came of it and say it in `outcome`;
        return the repair done (None when none was). Raise OSError when the file cannot be read
        for it."""
        attempt = self._attempt(path, session_id)
        self._record(str(path), attempt, outcome)
        return attempt.result if isinstance(attempt, Done) else None

    def _attempt(self, path: Path, session_id: str | None) -> Attempt:
        """Wait, or plan the repair of `path` and apply it."""
        waiting = self._waiting(path, session_id)
        if waiting is not None:
            return waiting
        self.archive_waiting(str(path))  # the archive has every line read before a rewrite
        settings, fs = self.settings, self.fs
        scanned = index_file(path, fs=fs, with_identity=True)
        options = RepairOptions(
            add_missing_results=settings.add_missing_results, classes=settings.classes
        )
        try:
            plan = plan_file_repair(scanned, options, fs=fs)
        except FileChanged as exc:  # written to since it was read: its event brings it back
            if exc.reason is not SkipReason.CHANGED:  # a symlink: in the report, not tried again
                return Skipped(path, exc.reason, str(exc))
            return NotYet(f"skipped:{SkipReason.CHANGED}", CHANGED_RETRY_SECONDS, str(exc))
        if cuts_torn_tail(plan):
            plan = self._archive_torn_tail(path, plan)
        if plan.is_empty:
            return NothingSafe("; ".join(plan.notes) or "no safe repair")
        result = apply_plan(
            plan,
            ApplyOptions(
                backup_dir=settings.backup_dir,
                claude_dir=settings.claude_dir,
                roots=settings.roots,
                quiet_period=settings.quiet_period,
                fs=fs.seam,
                retry=fs.policy,
                session_id=scanned.index.session_id,
            ),
        )
        if isinstance(result, Repaired):
            fixes = Counter(str(finding.cls) for finding in plan.fixes)
            return Done(result, fixes, len(plan.edits))
        return result

    def _waiting(self, path: Path, session_id: str | None) -> NotYet | None:
        """Whether the repair waits: after a failure, or while the session may be live."""
        failures, failed_at = self.store.failed_repairs(str(path))
        if failed_at is not None:
            wait = min(FAILED_RETRY_SECONDS * 2 ** (failures - 1), FAILED_RETRY_MAX_SECONDS) - (
                time.time() - failed_at
            )
            if wait > 0:
                return NotYet("waiting:after_failure", wait)
        live, why = liveness(path, session_id, self.settings, self.fs)
        if live:
            # Not an attempt yet: look again once the quiet period could have passed.
            log.debug("%s: repair waits: %s", path, why)
            return NotYet("waiting:live", self.settings.look_again_after)
        return None

    def _archive_torn_tail(self, path: Path, plan: RepairPlan) -> RepairPlan:
        """A torn last line is cut off only once the archive holds it (the worker archives an
        unfinished line only once the file is quiet); return the plan, without that cut when the
        archive cannot take it."""
        if self.archive is None:
            return keep_torn_tail(
                plan,
                "the archive is off, and riffd keeps a fragment in the archive before "
                "cutting it off",
            )
        failure = self.archive_errors.take_file(
            self.archive, path, "archive its torn last line", self.fs
        )
        if failure is not None:
            return keep_torn_tail(plan, f"it could not be archived first ({failure})")
        return plan

    def _record(self, name: str, attempt: Attempt, outcome: Outcome) -> None:
        """Record what came of an attempt in the store, the log and `outcome`. A repair that may
        succeed soon (live, changed, busy) is tried again; one that cannot as things are is not,
        until the file changes."""
        store = self.store
        give_up = False
        if isinstance(attempt, NotYet):
            outcome.repair, outcome.retry_after = attempt.repair, attempt.seconds
            outcome.why = attempt.why  # (the read's own why, "new file" say, is not the repair's)
        elif isinstance(attempt, NothingSafe):
            outcome.repair, outcome.why = "skipped:nothing_safe_to_do", attempt.why
            store.record_repair(name, "skipped", "nothing_safe_to_do", None, Counter(), attempt.why)
            give_up = True
        elif isinstance(attempt, Done):
            outcome.why = ""
            self._repaired(name, attempt, outcome)
        elif isinstance(attempt, Skipped):
            outcome.repair, outcome.why = f"skipped:{attempt.reason}", attempt.detail
            store.record_repair(
                name, "skipped", str(attempt.reason), None, Counter(), attempt.detail
            )
            if attempt.reason is SkipReason.LIVE:
                outcome.retry_after = self.settings.look_again_after
            elif attempt.reason in (SkipReason.CHANGED, SkipReason.BUSY):
                outcome.retry_after = CHANGED_RETRY_SECONDS
            else:
                give_up = True
            log.info("%s: repair skipped: %s", name, attempt.detail)
        else:
            outcome.repair, outcome.why = f"failed:{attempt.reason}", attempt.detail
            store.record_repair(
                name, "failed", str(attempt.reason), None, Counter(), attempt.detail
            )
            give_up = True
            log.error("%s: repair failed: %s", name, attempt.detail)
        state = store.file(name) if give_up else None
        if state is not None:  # the same findings, not repairable: the next change re-decides
            store.save_file(state.watermark, state.session_id, None, 0)

    def _repaired(self, name: str, done: Done, outcome: Outcome) -> None:
        """Record a repair made."""
        result, fixes = done.result, done.fixes
        outcome.repair, outcome.fixed, outcome.backup_id = "repaired", dict(fixes), result.backup_id
        self.store.record_repair(
            name,
            "repaired",
            None,
            result.backup_id,
            fixes,
            f"{done.edits} edit(s); backup {result.backup_id}",
        )
        log.info(
            "%s: repaired (%s); backup %s",
            name,
            ", ".join(f"{k} {v}" for k, v in fixes.items()),
            result.backup_id,
        )
        for warning in result.warnings:
            log.warning("%s", warning)
        if result.pending_swap is not None:
            self.pending_swaps.add(result.pending_swap)
