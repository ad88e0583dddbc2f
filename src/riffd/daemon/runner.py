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
from dataclasses import replace
from pathlib import Path
from types import FrameType

from riffd import logs
from riffd.archive.schema import ARCHIVE_NAME
from riffd.archive.store import Archive
from riffd.config import ConfigError, config_path, file_stamp, load_config
from riffd.config.load import validate_command
from riffd.daemon.alerts import Alerts
from riffd.daemon.archive_batch import ArchiveBatches
from riffd.daemon.archiving import ArchiveSlot
from riffd.daemon.counters import Counters, DaemonNow
from riffd.daemon.disk_full import DiskWatch
from riffd.daemon.jobs import (
    backup_retention,
    clean_leftovers,
    log_startup_summary,
    new_or_changed,
    started_line,
    transcript_filter,
    worker_settings,
)
from riffd.daemon.keeper import Keeper, reconcile_files
from riffd.daemon.lock import StateLock
from riffd.daemon.notify import Notifier
from riffd.daemon.publisher import Publisher
from riffd.daemon.schedule import Job, Schedule
from riffd.daemon.watcher import Watcher, reconcile
from riffd.daemon.work_thread import TICK_SECONDS, WorkThread
from riffd.daemon.worker import Worker
from riffd.daemon.workqueue import WorkQueue
from riffd.state.database import STATE_NAME
from riffd.state.store import StateStore
from riffd.tracker.tracker import ToolCallTracker

log = logging.getLogger(__name__)

RELOAD_FAILED = "configuration reload failed"
DRAIN_SECONDS = 10.0
# a worker with work queued and no progress for this long stops the watchdog pings
STALL_SECONDS = 120.0
TRACKER_PRUNE_SECONDS = 60.0
SWAPS_SECONDS = 10.0  # hand-overs a writer held up (riffd.repair.handover) are looked at this often


class Daemon:
    """One running riffd: configuration, store, queue, worker, watcher, scheduler, and the figures
    it publishes."""

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
        self._rescan_lock = threading.Lock()  # one rescan (or archive reopening) at a time
        self._startup_done = self._stopping = False
        # a full disk under the state folder (riffd.daemon.disk_full)
        self.disk = DiskWatch(self.config.state_dir)
        self.counters = Counters()
        self.notifier = Notifier(environ)
        self.alerts = Alerts(self.config.notify.command)
        self.queue = WorkQueue(self.config.watcher.debounce)
        self.lock = StateLock(self.config.state_dir)
        self.store: StateStore | None = None
        self.publisher: Publisher | None = None  # while the store is open
        self.archives = ArchiveSlot(self.config.state_dir / ARCHIVE_NAME, self.counters, self.disk)
        self.worker: Worker | None = None
        self.tracker = ToolCallTracker(self.config.tracker.window, self.config.tracker.max_calls)
        self.watcher: Watcher | None = None
        self.schedule: Schedule | None = None
        self._work: WorkThread | None = None
        self._interrupts = 0
        self._config_stamp = file_stamp(self.config_file)

    # --- start and stop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; return the exit code (0 after a clean shutdown; EXIT_RESTART or
        2 after the state folder was deleted under it: riffd.daemon.lock)."""
        logs.configure(self.config.log.level, self.config.log.format, self.config.log.file)
        # its state folder deleted under it: stop (riffd.daemon.lock)
        self.lock.acquire(on_lost=self.stop.set)
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
        self.publisher = Publisher(self.store, self.counters, self.queue, self.tracker, self.disk)
        # `status` sees this daemon, starting, from now on (the archive's check may last)
        self.publisher.publish(self._now(), force=True)
        self._open_archive()
        clean_leftovers(config)
        self.worker = Worker(
            self.store,
            worker_settings(config),
            tracker=self.tracker,
            archive=self.archive,
            on_write_error=self.disk.ran_out,
        )
        # the files kept whole are read as the worker reads transcripts: through its `fs`
        self.keeper = Keeper(
            config.watcher.file_settle, self.store, self.disk.ran_out, self.worker.fs
        )
        self._work = WorkThread(
            self.queue,
            self.stop,
            self.worker,
            self.keeper,
            self.store,
            self.counters,
            self.alerts,
            self.disk,
            now=self._now,
            on_new_store=self._reconcile,
        )
        self._work.start()
        self._start_watcher()
        self.schedule = Schedule(self.counters, self.disk)
        self.schedule.start(self._jobs())
        queued = self._reconcile()
        self._queue_pending_repairs()
        # lines a daemon killed before read but had not archived yet (riffd.daemon.archive_batch)
        self.schedule.run_now("archive_catch_up", self._catch_up_at_start)
        log.info("%s", started_line(config, *queued))
        self.notifier.ready(self._status_line())

    @property
    def archive(self) -> Archive | None:
        """The archive, while it is open."""
        return self.archives.archive

    def _now(self) -> DaemonNow:
        """The parts of the daemon that change while it runs, as they are now (for its figures)."""
        return DaemonNow(
            self.config,
            self.watcher,
            self.archive,
            starting=not self._startup_done,
            stopping=self._stopping,
        )

    def _status_line(self) -> str:
        return self.publisher.status_line(self.watcher) if self.publisher is not None else ""

    def _write_report(self) -> None:
        if self.publisher is not None:
            self.publisher.write_report(self._now())

    def _scheduled_report(self) -> None:
        if self.publisher is not None:
            self.publisher.write_scheduled_report(self._now())

    def _open_archive(self) -> None:
        """Open the archive; when it cannot be, riffd works without it, and each rescan and settle
        job tries again under `_rescan_lock`, so never two opens at once."""
        if self.archives.open(self.config.archive.settle_after) and self.worker is not None:
            self.worker.archive = self.archive
            log.info("the archive is on again: the rescan archives what was read meanwhile")

    def _start_watcher(self) -> None:
        wanted = self.config.watcher
        self.watcher = Watcher(
            transcript_filter(self.config), self.queue.put, wanted.observer, wanted.polling_interval
        )
        self.watcher.start()

    def _jobs(self) -> list[Job]:
        """The scheduled jobs, as the configuration says."""
        config = self.config
        jobs = [
            Job("report", self._scheduled_report, config.reports.interval),
            Job(
                "backup_retention",
                lambda: backup_retention(self.config),
                config.backups.retention_interval,
            ),
            Job("state_maintenance", self._maintain_state, 6 * 3600.0),
            Job("tracker_prune", lambda: self.tracker.prune(time.time()), TRACKER_PRUNE_SECONDS),
            Job("archive_settle", self._settle_archive, config.archive.settle_after),
            Job("finish_swaps", self._finish_swaps, SWAPS_SECONDS),
        ]
        if config.watcher.rescan_interval > 0:
            jobs.append(Job("rescan", self._rescan, config.watcher.rescan_interval))
        return jobs

    def _finish_swaps(self) -> None:
        if self.worker is not None:
            self.worker.pending_swaps.finish(self.worker.fs)

    def _shutdown(self) -> None:
        self.notifier.stopping()
        self._stopping = True  # from here on every snapshot and report says the daemon has stopped
        if self.watcher is not None:
            self.watcher.stop()
        if self.schedule is not None:
            self.schedule.stop()
        left = self._drain(DRAIN_SECONDS)
        if left:
            log.warning(
                "stopped with %d file(s) still queued; the next start picks them up from their "
                "watermarks",
                left,
            )
        if self.store is not None:
            try:
                self._write_report()
            except (OSError, sqlite3.Error) as exc:
                log.error("could not write the last report: %s", exc)
            self.store.close()
            self.store = self.publisher = None
        self.archives.close()
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
        if self._work is not None:
            self._work.join(timeout=max(0.0, deadline - time.monotonic()))
        return len(self.queue)

    # --- signals and the main loop ----------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        self._interrupts += 1
        if self._interrupts > 1 and signum == signal.SIGINT:
            # a second Ctrl-C: the user wants out now; the store's WAL keeps it consistent
            os._exit(130)
        self.stop.set()

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        self.reload_requested.set()

    def _serve(self) -> None:
        last_ping = last_status = 0.0
        ping_every = self.notifier.watchdog_interval()
        while not self.stop.wait(TICK_SECONDS):
            self._watch_new_roots()
            if not self._startup_done and not self.queue.unread() and not self.counters.busy:
                self._startup_done = True
                self._after_startup_pass()
            if self.publisher is not None:
                self.publisher.publish(self._now())
            free = self.disk.back()
            if free is not None:
                log.info(
                    "the state folder %s has room again (%.1f MiB free): rescanning now for what "
                    "could not be stored meanwhile",
                    self.config.state_dir,
                    free / 2**20,
                )
                self._rescan_now()
            if self.reload_requested.is_set() or file_stamp(self.config_file) != self._config_stamp:
                self.reload_requested.clear()
                self.reload()
            now = time.monotonic()
            stalled = len(self.queue) > 0 and now - self.counters.progress > STALL_SECONDS
            if ping_every is not None and now - last_ping >= ping_every and not stalled:
                self.notifier.watchdog()
                last_ping = now
            if self.notifier.enabled and now - last_status >= 10 * TICK_SECONDS:
                self.notifier.status(self._status_line())
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
        log_startup_summary(self.store, self.config, self.counters.errors_met)
        try:
            self._write_report()
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
            self.counters.last_reload = {"time": time.time(), "ok": False, "errors": exc.errors}
            self.counters.error(
                f"{RELOAD_FAILED}: {exc}",
                f"fix the file; `{validate_command(config_path(self.config_flag))}` checks it",
                about=RELOAD_FAILED,
            )
            self.notifier.ready(self._status_line())
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
        if self.schedule is not None:
            self.schedule.plan(self._jobs())
        # repairs may just have been switched on, or their settings changed
        self._queue_pending_repairs()
        # A config error is over once a good config is loaded: it no longer makes the report
        # unhealthy. (Before last_reload says ok, so no report shows a good reload beside the old
        # error.)
        self.counters.resolved(RELOAD_FAILED)
        self.counters.last_reload = {"time": time.time(), "ok": True, "errors": []}
        log.info("configuration reloaded from %s", new.source or "defaults (no file)")
        self.notifier.ready(self._status_line())
        return True

    # --- what to look at: the start-up pass, rescans ----------------------------------------------

    def _reconcile(self) -> tuple[int, int]:
        """Queue the transcripts and other session files riffd has not read as they are now."""
        assert self.store is not None
        # Not an event: a file already queued keeps its time (a rescan during a long start-up pass
        # must not put every waiting file off by another debounce)
        transcripts = reconcile(
            transcript_filter(self.config),
            self.store,
            lambda path: self.queue.put(path, delay=self.queue.debounce),
            self._unlistable,
            self.watcher,
        )
        others = reconcile_files(
            transcript_filter(self.config),
            self.archive,
            self.queue.put,
            self._unlistable,
            self.keeper.note_link,
        )
        self.counters.rescans += 1
        self._queue_unsettled_tails()  # a look again lost (a restart, say)
        return transcripts, others

    def _unlistable(self, exc: OSError) -> None:
        log.error(
            "%s: cannot be listed: %s; transcripts in it are not looked at until it can be",
            exc.filename,
            exc.strerror or exc,
        )
        self.counters.error(
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

    def _queue_unsettled_tails(self) -> None:
        """Queue the files whose unfinished last line waits to be judged and archived (the worker's
        look again lives in memory only: StateStore.unsettled_tails), as a rescan queues files."""
        assert self.store is not None
        for path in self.store.unsettled_tails(self.config.repair.quiet_period, time.time()):
            self.queue.put(path, delay=self.queue.debounce)

    # --- scheduled jobs ---------------------------------------------------------------------------

    def _rescan(self) -> None:
        # the scheduled rescan and one asked for now (`_rescan_now`) never run together
        with self._rescan_lock:
            if self.watcher is not None:
                self.watcher.refresh()
            self._catch_up_archive()
            queued = self._reconcile()
            # swaps a killed `riffd fix` left, which no event brings here
            clean_leftovers(self.config)
        if any(queued):
            log.info(
                "rescan: %s to look at (changed without an event, or not read before)",
                new_or_changed(*queued),
            )

    def _catch_up_archive(self) -> None:
        """Open the archive when it is off, then archive what it missed (the caller holds
        `_rescan_lock`)."""
        if self.archive is None:
            self._open_archive()
        self.archives.catch_up(self.store, self._batches(), self.config.repair.quiet_period)

    def _batches(self) -> ArchiveBatches | None:
        """The worker's batches of appended lines waiting for the archive."""
        return self.worker.batches if self.worker is not None else None

    def _catch_up_at_start(self) -> None:
        with self._rescan_lock:
            self.archives.catch_up(self.store, self._batches(), self.config.repair.quiet_period)

    def _rescan_now(self) -> None:
        """Rescan at once, in a scheduler thread; after the scheduled rescan, when one is running
        (one that is running may have looked at a file before there was room)."""
        if self.schedule is not None:
            self.schedule.run_now("rescan_now", self._rescan)

    def _maintain_state(self) -> None:
        if self.store is not None:
            self.store.maintain()
            self.store.prune_repairs()

    def _settle_archive(self) -> None:
        """Settle the archive once lines stopped coming for archive.settle_after seconds, and not
        while the daemon stops; when it is off since the start, try to open it (with rescans off,
        nothing else does)."""
        if self.archive is None:
            with self._rescan_lock:
                self._catch_up_archive()
            return
        self.archives.settle(self.config.archive.settle_after, lambda: not self._stopping)
