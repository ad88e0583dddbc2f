"""`riffd run`: the daemon that watches the roots, keeps findings current, repairs idle sessions,
reports.

Lifecycle (after uvicorn): start-up takes the state folder's lock (one daemon per state folder),
opens the store, starts the worker thread, the watcher and the scheduler, queues every file that
differs from its watermark, then tells systemd READY. Signal handlers only set flags; the main
thread sleeps on the stop event and, once a second, handles a requested reload, notices a changed
config file (editors save by rename, so the file's inode and mtime are compared, which works
whether or not its folder exists yet), pings the systemd watchdog while the worker makes progress,
and updates the status line. Shutdown: stop the watcher, stop the scheduler, drain the queue to a
deadline, write a last report, close the store, exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
import traceback
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler

from riffd import __version__, logs
from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.archive.store import Archive
from riffd.config import ConfigError, config_path, file_stamp, load_config
from riffd.daemon.alerts import Alerts
from riffd.daemon.counters import Stats, advice
from riffd.daemon.disk_full import Room
from riffd.daemon.figures import Figures
from riffd.daemon.jobs import (
    backup_retention,
    catch_up_archive,
    clean_leftovers,
    log_outcome,
    log_startup_summary,
    settle_archive,
    transcript_filter,
    worker_settings,
)
from riffd.daemon.keeper import Keeper, reconcile_files
from riffd.daemon.lock import StateLock
from riffd.daemon.notify import Notifier
from riffd.daemon.watcher import Watcher, reconcile
from riffd.daemon.worker import Worker
from riffd.daemon.workqueue import WorkQueue
from riffd.database import full_disk_note, is_full_error
from riffd.state.store import STATE_NAME, StateStore
from riffd.tracker.tracker import ToolCallTracker

log = logging.getLogger(__name__)

RELOAD_FAILED = "configuration reload failed"
TICK_SECONDS = 1.0
DRAIN_SECONDS = 10.0
STALL_SECONDS = (
    120.0  # a worker with work queued and no progress for this long stops the watchdog pings
)
TRACKER_PRUNE_SECONDS = 60.0
ARCHIVE_COMPACT_SECONDS = 120.0  # loose packs compressed again at most this long per quiet period


class Daemon(Figures):
    """One running riffd: configuration, store, queue, worker, watcher and scheduler."""

    def __init__(
        self,
        config_flag: Path | None = None,
        overrides: dict[str, object] | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config_flag = config_flag
        self.overrides = dict(overrides or {})
        self.environ = environ
        self.config = load_config(config_flag, environ=environ, overrides=self.overrides)
        self.config_file = config_path(config_flag, environ)
        self.stop = threading.Event()
        self.reload_requested = threading.Event()
        self._report_lock = (
            threading.Lock()
        )  # one report at a time, so latest.json is always the newest
        self._rescan_lock = threading.Lock()  # one rescan (or archive reopening) at a time
        self._archive_off = (
            ""  # why the archive could not be opened, as the log said it (once per reason)
        )
        self._startup_done = self._stopping = False
        self._archive_figures: dict[
            str, Any
        ] = {}  # computed with each report (costly): the snapshot reuses them
        self._published: tuple[object, ...] | None = None
        self._published_at = 0.0
        self.room = Room(
            self.config.state_dir
        )  # a full disk under the state folder (riffd.daemon.disk_full)
        self.stats = Stats()
        self.notifier = Notifier(environ)
        self.alerts = Alerts(self.config.notify.command)
        self.queue = WorkQueue(self.config.watcher.debounce)
        self.lock = StateLock(self.config.state_dir)
        self.store: StateStore | None = None
        self.archive: Archive | None = None
        self.worker: Worker | None = None
        self.tracker = ToolCallTracker(self.config.tracker.window, self.config.tracker.max_calls)
        self.watcher: Watcher | None = None
        self.scheduler: BackgroundScheduler | None = None
        self._worker_thread: threading.Thread | None = None
        self._interrupts = 0
        self._config_stamp = file_stamp(self.config_file)

    # --- start and stop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; return the exit code (0 after a clean shutdown; EXIT_RESTART or
        2 after the state folder was deleted under it: riffd.daemon.lock)."""
        logs.configure(self.config.log.level, self.config.log.format, self.config.log.file)
        self.lock.acquire(
            on_lost=self.stop.set
        )  # its state folder deleted under it: stop (riffd.daemon.lock)
        try:
            self._install_signal_handlers()
            self._start()
            self._serve()
        finally:
            self._shutdown()
            code = self.lock.finish()
        return code

    def _start(self) -> None:
        config = self.config
        self.store = StateStore(config.state_dir / STATE_NAME, heal=True)
        self.publish(
            force=True
        )  # `status` sees this daemon, starting, from now on (the archive's check may last)
        self._open_archive()
        clean_leftovers(config)
        self.worker = Worker(
            self.store,
            worker_settings(config),
            tracker=self.tracker,
            archive=self.archive,
            on_write_error=self.room.ran_out,
        )
        # the files kept whole are read as the worker reads transcripts: through its `fs`
        self.keeper = Keeper(
            config.watcher.file_settle, self.store, self.room.ran_out, self.worker.fs
        )
        self._worker_thread = threading.Thread(target=self._work, name="riffd-worker", daemon=True)
        self._worker_thread.start()
        self._start_watcher()
        self._start_scheduler()
        queued = self._reconcile()
        self._queue_pending_repairs()
        mode = (
            f"repair mode: idle sessions are repaired after a verified backup (quiet period "
            f"{config.repair.quiet_period:g} s)"
            if config.repair.mode == "repair"
            else "report-only mode: nothing is rewritten"
        )
        log.info(
            "riffd %s started (pid %d) in %s; %d file(s) to look at; config %s",
            __version__,
            os.getpid(),
            mode,
            queued,
            config.source or "defaults (no file)",
        )
        self.notifier.ready(self.status_line())

    def _scheduled_report(self) -> None:
        """The report job. A report that cannot be written for a full disk is a line in the log and
        an error in the live figures (not a traceback at every interval), which the next report
        written takes back."""
        try:
            self.write_report()
        except (OSError, sqlite3.Error) as exc:
            reports = self.config.reports.dir
            on_state_disk = self.room.ran_out(exc, written=reports)
            if not (on_state_disk or is_full_error(exc)):
                raise
            advice = (
                self.room.advice(exc, "", written=reports)
                if on_state_disk
                else f"{full_disk_note(reports)}: free some space there"
            )
            log.error("could not write the report: %s; %s", exc, advice)
            self.stats.resolved("reports")
            self.stats.error(
                f"could not write the report to {self.config.reports.dir}: {exc}",
                advice,
                about="reports",
            )
            return
        self.stats.resolved("reports")

    def _open_archive(self) -> None:
        """Open (and check) the archive; when it cannot (a full disk, say), riffd works without it,
        and each rescan and settle job tries again under `_rescan_lock`, so never two opens at
        once."""
        try:
            self.archive = Archive(self.config.state_dir / ARCHIVE_NAME, heal=True, check=True)
        except (ArchiveError, sqlite3.Error, OSError) as exc:
            if (
                str(exc) != self._archive_off
            ):  # said once per reason, not at every try (`status` says it always)
                log.error(
                    "the archive is off: %s; riffd tries to open it again at each rescan and every %g s "
                    "(archive.settle_after)",
                    exc,
                    self.config.archive.settle_after,
                )
            self._archive_off = str(exc)
            self.room.ran_out(exc)
            self.stats.resolved("archive")
            self.stats.error(
                f"the archive is off: {exc}",
                self.room.advice(exc, "see the message; repairs and reports go on without it"),
                about="archive",
            )
            return
        self._archive_off = ""
        self.stats.resolved("archive")
        if self.worker is not None:
            self.worker.archive = self.archive
            log.info("the archive is on again: the rescan archives what was read meanwhile")

    def _start_watcher(self) -> None:
        wanted = self.config.watcher
        self.watcher = Watcher(
            transcript_filter(self.config), self.queue.put, wanted.observer, wanted.polling_interval
        )
        self.watcher.start()

    def _start_scheduler(self) -> None:
        scheduler = BackgroundScheduler(
            timezone="UTC",
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": 3600,
            },
        )
        scheduler.add_listener(self._job_failed, EVENT_JOB_ERROR)
        scheduler.add_listener(self._job_done, EVENT_JOB_EXECUTED)
        self.scheduler = scheduler
        self._schedule_jobs()
        scheduler.start()

    def _schedule_jobs(self) -> None:
        assert self.scheduler is not None
        config = self.config
        jobs: list[tuple[str, Any, float]] = [
            ("report", self._scheduled_report, config.reports.interval),
            (
                "backup_retention",
                lambda: backup_retention(self.config),
                config.backups.retention_interval,
            ),
            ("state_maintenance", self._maintain_state, 6 * 3600.0),
            ("tracker_prune", lambda: self.tracker.prune(time.time()), TRACKER_PRUNE_SECONDS),
            ("archive_settle", self._settle_archive, config.archive.settle_after),
            (
                "finish_swaps",
                self._finish_swaps,
                10.0,
            ),  # hand-overs a writer held up (riffd.repair.handover)
        ]
        if config.watcher.rescan_interval > 0:
            jobs.append(("rescan", self._rescan, config.watcher.rescan_interval))
        elif self.scheduler.get_job("rescan") is not None:
            self.scheduler.remove_job("rescan")
        for job_id, function, seconds in jobs:
            job = self.scheduler.get_job(job_id)
            if job is not None and getattr(job.trigger, "interval", None) == timedelta(
                seconds=seconds
            ):
                continue  # unchanged: a reload (an editor saving the config) must not put its next run off again
            self.scheduler.add_job(
                function, "interval", seconds=seconds, id=job_id, replace_existing=True
            )

    def _finish_swaps(self) -> None:
        if self.worker is not None:
            fs = self.worker.fs  # (riffd.repair retries with the policy itself: the bare seam)
            self.worker.pending_swaps.finish(fs.seam, fs.policy)

    def _shutdown(self) -> None:
        self.notifier.stopping()
        self._stopping = True  # from here on every snapshot and report says the daemon has stopped
        if self.watcher is not None:
            self.watcher.stop()
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        left = self._drain(DRAIN_SECONDS)
        if left:
            log.warning(
                "stopped with %d file(s) still queued; the next start picks them up from their watermarks",
                left,
            )
        if self.store is not None:
            try:
                self.write_report()
            except (OSError, sqlite3.Error) as exc:
                log.error("could not write the last report: %s", exc)
            self.store.close()
            self.store = None
        if self.archive is not None:
            try:
                self.archive.settle(optimize=False)
            except (sqlite3.Error, OSError) as exc:
                log.error("could not settle the archive: %s", exc)
            self.archive.close()
            self.archive = None
        log.info("riffd stopped")

    def _drain(self, seconds: float) -> int:
        """Let the worker finish what is queued, up to `seconds`; return how many files were
        left."""
        deadline = time.monotonic() + seconds
        pending = self.queue.take_all()
        for path in pending:
            self.queue.put(path, delay=0)
        self.stop.set()
        self.queue.wake()
        if self._worker_thread is not None:
            self._worker_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return len(self.queue)

    # --- signals and the main loop ----------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._interrupts += 1
        if self._interrupts > 1 and signum == signal.SIGINT:
            os._exit(
                130
            )  # a second Ctrl-C: the user wants out now; the store's WAL keeps it consistent
        self.stop.set()

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        self.reload_requested.set()

    def _serve(self) -> None:
        last_ping = last_status = 0.0
        ping_every = self.notifier.watchdog_interval()
        while not self.stop.wait(TICK_SECONDS):
            self._watch_new_roots()
            if not self._startup_done and not len(self.queue) and not self.stats.busy:
                self._startup_done = True
                self._after_startup_pass()
            self.publish()
            free = self.room.back()
            if free is not None:
                log.info(
                    "the state folder %s has room again (%.1f MiB free): rescanning now for what could not be "
                    "stored meanwhile",
                    self.config.state_dir,
                    free / 2**20,
                )
                self._rescan_now()
            if self.reload_requested.is_set() or file_stamp(self.config_file) != self._config_stamp:
                self.reload_requested.clear()
                self.reload()
            now = time.monotonic()
            stalled = len(self.queue) > 0 and now - self.stats.progress > STALL_SECONDS
            if ping_every is not None and now - last_ping >= ping_every and not stalled:
                self.notifier.watchdog()
                last_ping = now
            if self.notifier.enabled and now - last_status >= 10 * TICK_SECONDS:
                self.notifier.status(self.status_line())
                last_status = now

    def _watch_new_roots(self) -> None:
        """A root that did not exist at start (a fresh machine, before the first Claude Code
        session) is watched within a tick of appearing, and what it already holds is queued."""
        if self.watcher is None or not self.watcher.missing_roots():
            return
        for root in self.watcher.refresh():
            log.info("%s appeared: watching it", root)
            self.watcher.enqueue_folder(root)

    def _after_startup_pass(self) -> None:
        """Once the files found at start are looked at: one summary line, and a first report right
        away."""
        assert self.store is not None
        log_startup_summary(self.store, self.config, self.stats.errors_met)
        try:
            self.write_report()
        except (OSError, sqlite3.Error) as exc:
            log.error("could not write the first report: %s", exc)

    # --- reload -----------------------------------------------------------------------------------

    def reload(self) -> bool:
        """Read the configuration again; apply it, or keep the running one and say why; return
        success."""
        self.notifier.reloading()
        self._config_stamp = file_stamp(self.config_file)
        try:
            new = load_config(self.config_flag, environ=self.environ, overrides=self.overrides)
        except ConfigError as exc:
            log.error("configuration reload failed, keeping the running configuration: %s", exc)
            self.stats.last_reload = {"time": time.time(), "ok": False, "errors": exc.errors}
            self.stats.error(
                f"{RELOAD_FAILED}: {exc}",
                "fix the file; `riffd config validate` checks it",
                about=RELOAD_FAILED,
            )
            self.notifier.ready(self.status_line())
            return False
        old, self.config = self.config, new
        if new.state_dir != old.state_dir:
            log.warning(
                "state_dir changes take effect at the next start; still using %s", old.state_dir
            )
            self.config = replace(new, state_dir=old.state_dir)
        logs.configure(new.log.level, new.log.format, new.log.file)
        self.queue.debounce = new.watcher.debounce
        if self.worker is not None:
            self.worker.reconfigure(worker_settings(self.config))
            self.keeper.settle, self.keeper.fs = new.watcher.file_settle, self.worker.fs
        self.tracker.window, self.tracker.max_calls = new.tracker.window, new.tracker.max_calls
        self.alerts.command = Alerts(new.notify.command).command
        watch_changed = transcript_filter(new) != transcript_filter(old) or (
            new.watcher.observer,
            new.watcher.polling_interval,
        ) != (old.watcher.observer, old.watcher.polling_interval)
        if watch_changed and self.watcher is not None:
            self.watcher.stop()
            self._start_watcher()
            self._reconcile()
        if self.scheduler is not None:
            self._schedule_jobs()
        self._queue_pending_repairs()  # repairs may just have been switched on, or their settings changed
        # A config error is over once a good config is loaded: it no longer makes the report
        # unhealthy. (Before last_reload says ok, so no report shows a good reload beside the old
        # error.)
        self.stats.resolved(RELOAD_FAILED)
        self.stats.last_reload = {"time": time.time(), "ok": True, "errors": []}
        log.info("configuration reloaded from %s", new.source or "defaults (no file)")
        self.notifier.ready(self.status_line())
        return True

    # --- work -------------------------------------------------------------------------------------

    def _reconcile(self) -> int:
        assert self.store is not None
        # Not an event: a file already queued keeps its time (a rescan during a long start-up pass
        # must not put every waiting file off by another debounce)
        queued = reconcile(
            transcript_filter(self.config),
            self.store,
            lambda path: self.queue.put(path, delay=self.queue.debounce),
            self._unlistable,
            self.watcher,
        ) + reconcile_files(
            transcript_filter(self.config), self.archive, self.queue.put, self._unlistable
        )
        self.stats.rescans += 1
        return queued

    def _unlistable(self, exc: OSError) -> None:
        log.error(
            "%s: cannot be listed: %s; transcripts in it are not looked at until it can be",
            exc.filename,
            exc.strerror or exc,
        )
        self.stats.error(
            f"{exc.filename}: cannot be listed ({exc.strerror or exc})",
            "check the folder's permissions, or the disk or sync client behind it",
        )

    def _queue_pending_repairs(self) -> int:
        """Queue the files whose stored findings are waiting for a repair, when repairs are on;
        return how many. Their files may never change again, so neither an event nor a rescan would
        bring them back: after a restart (waiting retries live only in memory) or a reload that
        switches repairs on, this does."""
        assert self.store is not None
        if self.config.repair.mode != "repair":
            return 0
        pending = self.store.files_needing_repair()
        for path in pending:
            self.queue.put(path)
        return len(pending)

    def _work(self) -> None:
        while not (self.stop.is_set() and not len(self.queue)):
            item = self.queue.get(TICK_SECONDS)
            if item is None:
                continue
            path, first_event = item
            self.stats.busy = True
            try:
                self._process(Path(path), first_event)
            finally:
                self.stats.busy = False

    def _process(self, path: Path, first_event: float) -> None:
        assert self.worker is not None and self.store is not None
        try:
            if not transcript_filter(self.config).matches(path):
                found = transcript_filter(self.config).session_file(
                    path
                )  # a file kept whole (riffd.daemon.keeper)
                if (
                    found is not None
                    and (again := self.keeper.process(self.archive, found))
                    and not self.stop.is_set()
                ):
                    self.queue.put(str(path), delay=again)
                elif found is None:
                    self.store.forget_file(str(path))  # no longer under the roots, or excluded now
                return
            outcome = self.worker.process(path)
        except sqlite3.Error as exc:
            if self.store.reopen_if_damaged(exc):
                self.stats.error(
                    f"{self.store.path} was damaged and moved aside to {self.store.moved_aside}",
                    "nothing to do: a rescan fills the new state store again",
                )
                self._reconcile()
                return
            log.error("%s: database error: %s", path, exc)
            self.room.ran_out(exc)
            self.stats.error(
                f"{path}: database error: {exc}",
                self.room.advice(exc, "it is retried at the next change or rescan"),
                about=str(path),
            )
            return
        except Exception as exc:  # one bad file must not stop the worker: log it, count it, go on
            log.error("%s: unexpected error: %s\n%s", path, exc, traceback.format_exc())
            self.stats.error(
                f"{path}: {exc}",
                "run `riffd scan` on it; report the traceback if it persists",
                about=str(path),
            )
            return
        finally:
            self.stats.progress = time.monotonic()
        self.stats.processed += 1
        if (outcome.kind == "skipped" and outcome.why) or (outcome.repair or "").startswith(
            "failed"
        ):
            self.stats.error(
                f"{path}: {outcome.why or outcome.repair}", advice(outcome.why), about=str(path)
            )
        else:
            self.stats.resolved(str(path))
        self.alerts.outcome(outcome, quiet=not self._startup_done)
        if outcome.kind != "unchanged":
            self.stats.latencies.append(time.monotonic() - first_event)
            log_outcome(outcome)
        if (
            outcome.retry_after is not None and not self.stop.is_set()
        ):  # no waiting retries while draining
            self.queue.put(str(path), delay=outcome.retry_after)

    # --- scheduled jobs ---------------------------------------------------------------------------

    def _job_failed(self, event: JobExecutionEvent) -> None:
        log.error("scheduled job %s failed: %s", event.job_id, event.exception)
        self.room.ran_out(event.exception)
        self.stats.error(
            f"scheduled job {event.job_id} failed: {event.exception}",
            self.room.advice(event.exception, "it runs again at its next time"),
            about=f"job {event.job_id}",
        )

    def _job_done(self, event: JobExecutionEvent) -> None:
        self.stats.resolved(f"job {event.job_id}")  # it failed before, and has run well since

    def _rescan(self) -> None:
        with (
            self._rescan_lock
        ):  # the scheduled rescan and one asked for now (`_rescan_now`) never run together
            if self.watcher is not None:
                self.watcher.refresh()
            self._catch_up_archive()
            queued = self._reconcile()
            clean_leftovers(
                self.config
            )  # swaps a killed `riffd fix` left, which no event brings here
        if queued:
            log.info(
                "rescan: %d file(s) to look at (changed without an event, or not stored before)",
                queued,
            )

    def _catch_up_archive(self) -> None:
        """Open the archive when it is off, then archive what it missed (the caller holds
        `_rescan_lock`)."""
        if self.archive is None:
            self._open_archive()
        if self.archive is not None and self.store is not None:
            catch_up_archive(self.archive, self.store, self.room.ran_out)

    def _rescan_now(self) -> None:
        """Rescan at once, in a scheduler thread; after the scheduled rescan, when one is running
        (one that is running may have looked at a file before there was room)."""
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.add_job(self._rescan, id="rescan_now", replace_existing=True)

    def _maintain_state(self) -> None:
        if self.store is not None:
            self.store.maintain()
            self.store.prune_repairs()

    def _settle_archive(self) -> None:
        """Once lines stopped coming for archive.settle_after seconds: `settle_archive`, compacting
        for at most ARCHIVE_COMPACT_SECONDS and only while it stays quiet and the daemon is not
        stopping."""
        if self.archive is None:  # off since the start (with rescans off, nothing else tries again)
            with self._rescan_lock:
                self._catch_up_archive()
            return
        progress = self.stats.progress
        if time.monotonic() - progress >= self.config.archive.settle_after:
            deadline = time.monotonic() + ARCHIVE_COMPACT_SECONDS
            settle_archive(
                self.archive,
                lambda: (
                    not self._stopping
                    and self.stats.progress == progress
                    and time.monotonic() < deadline
                ),
            )
