"""The daemon's live figures and health reports (a part of riffd.daemon.runner.Daemon).

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
from riffd.daemon.counters import Stats
from riffd.daemon.disk_full import Room
from riffd.daemon.jobs import archive_summary, store_snapshot
from riffd.fsio import IO_STATS
from riffd.reports.build import build_report
from riffd.reports.html import history_point
from riffd.reports.publish import write_report
from riffd.state.store import StateStore

if TYPE_CHECKING:
    from riffd.archive.store import Archive
    from riffd.config import Config
    from riffd.daemon.watcher import Watcher
    from riffd.daemon.workqueue import WorkQueue
    from riffd.tracker.tracker import ToolCallTracker

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines

SNAPSHOT_SECONDS = (
    5.0  # the live figures `status` and `report` read are at most this old when something changed
)
HEARTBEAT_SECONDS = 30.0  # and at most this old when nothing did


class Figures:
    """Publishing the live figures and writing reports; mixed into Daemon, whose attributes these
    are."""

    config: Config
    store: StateStore | None
    archive: Archive | None
    watcher: Watcher | None
    queue: WorkQueue
    stats: Stats
    room: Room
    tracker: ToolCallTracker
    _report_lock: threading.Lock
    _startup_done: bool
    _stopping: bool
    _archive_figures: dict[str, Any]
    _published: tuple[object, ...] | None
    _published_at: float

    def status_line(self) -> str:
        """One line for the service manager's status: files watched, queued, processed, and the
        observer."""
        watched = self.store.count_files() if self.store else 0
        return (
            f"{watched} files watched, {len(self.queue)} queued, {self.stats.processed} processed, "
            f"observer {self.watcher.observer_kind if self.watcher else '-'}"
        )

    def publish(self, *, force: bool = False) -> None:
        """Store the live figures where `status` and `report` read them: when something changed (at
        most every SNAPSHOT_SECONDS), and every HEARTBEAT_SECONDS anyway, so their age tells a stuck
        daemon from a quiet one."""
        if self.store is None:
            return
        now = time.monotonic()
        watcher = self.watcher
        state = (
            self.stats.processed,
            len(self.queue),
            watcher.events if watcher else 0,
            self.stats.errors_met,
            len(self.stats.errors),
            str(self.stats.last_reload),
            self.stats.rescans,
            self._startup_done,
            self._stopping,
        )
        due = now - self._published_at >= (
            SNAPSHOT_SECONDS if state != self._published else HEARTBEAT_SECONDS
        )
        if not (force or due):
            return
        try:
            store_snapshot(self.store, self.snapshot())
        except sqlite3.Error as exc:
            self._unstored(exc)
            return
        if self.room.stored():
            self.stats.resolved("live figures")
        self._published, self._published_at = state, now

    def _unstored(self, exc: sqlite3.Error) -> None:
        if self.room.unstored(exc):
            self.stats.error(
                f"could not store the live figures in {self.config.state_dir}: {exc}",
                self.room.advice(exc, "see the errors before this"),
                about="live figures",
            )

    def snapshot(self) -> dict[str, Any]:
        """The daemon's live figures, as the health report and `riffd report` read them."""
        watcher = self.watcher
        return {
            "running": not self._stopping,
            "starting": not self._startup_done,
            "seen_at": time.time(),
            "version": __version__,
            "pid": os.getpid(),
            "started": self.stats.started,
            "config_path": str(self.config.source) if self.config.source else None,
            "repair_mode": self.config.repair.mode,
            "last_reload": self.stats.last_reload,
            "roots": [str(root) for root in self.config.roots],
            "observer": watcher.observer_kind if watcher else None,
            "observer_reason": watcher.observer_why if watcher else None,
            "events": watcher.events if watcher else 0,
            "rescans": self.stats.rescans,
            "queue_depth": len(self.queue),
            "processed": self.stats.processed,
            "latencies": list(self.stats.latencies),
            "errors": self.stats.recent_errors(),
            "io_retries": IO_STATS.retries,
            "io_give_ups": IO_STATS.give_ups,
            "tracker": self.tracker.stats(),
            "archive": self._archive_figures,
        }

    def write_report(self) -> Path:
        """Write a health report now (the scheduled job, and at shutdown)."""
        assert self.store is not None
        with self._report_lock:
            self._archive_figures = (
                {}
                if self.archive is None
                else archive_summary(self.archive, self.store, self.config.claude_dir)
            )
            snapshot = self.snapshot()
            try:  # a state store that cannot be written to (a full disk) still gets its report written, saying so
                store_snapshot(self.store, snapshot)
            except sqlite3.Error as exc:
                self._unstored(exc)
            report = build_report(self.store, self.config.backups.dir, snapshot)
            try:
                self.store.record_history(history_point(report), time.time())
            except sqlite3.Error as exc:
                log.error("could not add this report to the history: %s", exc)
            return write_report(
                report,
                self.config.reports.dir,
                self.config.reports.keep,
                self.store.history(),
                self.store.recent_repairs(),
            )
