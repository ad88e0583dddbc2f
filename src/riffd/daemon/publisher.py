"""The daemon's live figures and health reports: `Figures`, which the daemon holds, publishes them.

The live figures are stored in the state store, where `riffd status` and `riffd report` read them:
when something changed (at most every SNAPSHOT_SECONDS) and every HEARTBEAT_SECONDS anyway, so their
age tells a stuck daemon from a quiet one. A report is written on schedule and at shutdown, also
when the state store cannot be written to (a full disk: riffd.daemon.disk_full), and then says so.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riffd import __version__
from riffd.archive.schema import FORMAT as ARCHIVE_FORMAT
from riffd.config.load import advised_config
from riffd.daemon.counters import Counters, DaemonNow
from riffd.daemon.disk_full import DiskWatch
from riffd.daemon.jobs import archive_summary, store_snapshot
from riffd.database import full_disk_note, is_full_error
from riffd.display import riffd_invocation
from riffd.fsio import IO_STATS
from riffd.hooks.checking import hook_problems
from riffd.reports.build import build_report
from riffd.reports.html import history_point
from riffd.reports.publish import write_report
from riffd.state.store import StateStore

if TYPE_CHECKING:
    from riffd.config import Config
    from riffd.daemon.watcher import Watcher
    from riffd.daemon.workqueue import WorkQueue
    from riffd.tracker.tracker import ToolCallTracker

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines

# the live figures `status` and `report` read are at most this old when something changed
SNAPSHOT_SECONDS = 5.0
HEARTBEAT_SECONDS = 30.0  # and at most this old when nothing did
# The installed hooks are run to check them at most this often (a report may come every second)
HOOK_RECHECK_SECONDS = 60.0


class Publisher:
    """Publishes a running daemon's live figures to its state store, and writes its reports, from
    the parts it is given: those that last as long as the daemon here, the others (`DaemonNow`) at
    each call."""

    def __init__(
        self,
        store: StateStore,
        counters: Counters,
        queue: WorkQueue,
        tracker: ToolCallTracker,
        disk: DiskWatch,
    ) -> None:
        self.store = store
        self.counters = counters
        self.queue = queue
        self.tracker = tracker
        self.disk = disk
        self._report_lock = threading.Lock()  # one report at a time: latest.json is the newest
        # computed with each report (costly): the snapshot reuses them
        self._archive_figures: dict[str, Any] = {}
        # the installed hooks that do not run, as last checked, and when (None: not yet)
        self._hooks: tuple[float, tuple[str, ...] | None] = (0.0, None)
        self._published: tuple[object, ...] | None = None
        self._published_at = 0.0

    def status_line(self, watcher: Watcher | None) -> str:
        """One line for the service manager's status: files watched, queued, processed, and the
        observer."""
        return (
            f"{self.store.count_files()} files watched, {len(self.queue)} queued, "
            f"{self.counters.processed} processed, "
            f"observer {watcher.observer_kind if watcher else '-'}"
        )

    def publish(self, now: DaemonNow, *, force: bool = False) -> None:
        """Store the live figures where `status` and `report` read them: when something changed (at
        most every SNAPSHOT_SECONDS), and every HEARTBEAT_SECONDS anyway, so their age tells a stuck
        daemon from a quiet one."""
        moment = time.monotonic()
        watcher, counters = now.watcher, self.counters
        state = (
            counters.processed,
            len(self.queue),
            watcher.events if watcher else 0,
            counters.errors_met,
            len(counters.errors),
            str(counters.last_reload),
            counters.rescans,
            not now.starting,
            now.stopping,
        )
        due = moment - self._published_at >= (
            SNAPSHOT_SECONDS if state != self._published else HEARTBEAT_SECONDS
        )
        if not (force or due):
            return
        try:
            store_snapshot(self.store, self.snapshot(now))
        except sqlite3.Error as exc:
            self._unstored(now.config, exc)
            return
        if self.disk.stored():
            counters.resolved("live figures")
        self._published, self._published_at = state, moment

    def _unstored(self, config: Config, exc: sqlite3.Error) -> None:
        if self.disk.unstored(exc):
            self.counters.error(
                f"could not store the live figures in {config.state_dir}: {exc}",
                self.disk.advice(exc, "see the errors before this"),
                about="live figures",
            )

    def snapshot(self, now: DaemonNow) -> dict[str, Any]:
        """The daemon's live figures, as the health report and `riffd report` read them."""
        config, watcher, counters = now.config, now.watcher, self.counters
        return {
            "running": not now.stopping,
            "starting": now.starting,
            "seen_at": time.time(),
            "version": __version__,
            # the archive format this daemon writes (it moves an older archive to it as it opens it)
            "archive_format": ARCHIVE_FORMAT,
            "pid": os.getpid(),
            "started": counters.started,
            "config_path": str(config.source) if config.source else None,
            "repair_mode": config.repair.mode,
            "quiet_period": config.repair.quiet_period,
            "repair_classes": sorted(map(str, config.repair.classes)),
            "last_reload": counters.last_reload,
            "roots": [str(root) for root in config.roots],
            "observer": watcher.observer_kind if watcher else None,
            "observer_reason": watcher.observer_why if watcher else None,
            "events": watcher.events if watcher else 0,
            "rescans": counters.rescans,
            "queue_depth": len(self.queue),
            "processed": counters.processed,
            "latencies": list(counters.latencies),
            "errors": counters.recent_errors(),
            "io_retries": IO_STATS.retries,
            "io_give_ups": IO_STATS.give_ups,
            "tracker": self.tracker.stats(),
            "archive": self._archive_figures,
        }

    def write_scheduled_report(self, now: DaemonNow) -> None:
        """The report job. A report that cannot be written for a full disk is a line in the log and
        an error in the live figures (not a traceback at every interval), which the next report
        written takes back."""
        counters, disk = self.counters, self.disk
        reports = now.config.reports.dir
        try:
            self.write_report(now)
        except (OSError, sqlite3.Error) as exc:
            on_state_disk = disk.ran_out(exc, written=reports)
            if not (on_state_disk or is_full_error(exc)):
                raise
            advice = (
                disk.advice(exc, "", written=reports)
                if on_state_disk
                else f"{full_disk_note(reports)}: free some space there"
            )
            log.error("could not write the report: %s; %s", exc, advice)
            counters.resolved("reports")
            counters.error(
                f"could not write the report to {reports}: {exc}", advice, about="reports"
            )
            return
        counters.resolved("reports")

    def _hook_problems(
        self, claude_dir: Path, stopping: bool, config: Path | None
    ) -> tuple[str, ...]:
        """The installed hooks that do not run, checked at most every HOOK_RECHECK_SECONDS, and not
        again while stopping: a hook that hangs costs its timeout once, not at every report nor at
        the shutdown. The service's PATH is not Claude Code's: only hooks named by their path run."""
        checked_at, problems = self._hooks
        if problems is None or (
            not stopping and time.monotonic() - checked_at >= HOOK_RECHECK_SECONDS
        ):
            user = claude_dir / "settings.json"
            problems = hook_problems([user], by_path=False, user_settings=user, config=config)
            self._hooks = (time.monotonic(), problems)
        return problems

    def write_report(self, now: DaemonNow) -> Path:
        """Write a health report now (the scheduled job, and at shutdown)."""
        config, store = now.config, self.store
        with self._report_lock:
            self._archive_figures = (
                {}
                if now.archive is None
                else archive_summary(now.archive, store, config.claude_dir) | {"at": time.time()}
            )
            snapshot = self.snapshot(now)
            # A state store that cannot be written to (a full disk) still gets its report written,
            # saying so.
            try:
                store_snapshot(store, snapshot)
            except sqlite3.Error as exc:
                self._unstored(config, exc)
            hooks = self._hook_problems(config.claude_dir, now.stopping, advised_config(config))
            report = build_report(
                store,
                config.backups.dir,
                snapshot,
                hooks,
                # (the daemon's variables too: its reports are read in a shell that may lack them,
                # a service's above all)
                riffd_invocation(advised_config(config), variables=True),
            )
            try:
                store.record_history(history_point(report), time.time())
            except sqlite3.Error as exc:
                log.error("could not add this report to the history: %s", exc)
            return write_report(
                report,
                config.reports.dir,
                config.reports.keep,
                store.history(),
                store.recent_repairs(),
                config.reports.metrics_readable,
            )
