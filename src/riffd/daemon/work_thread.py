"""The daemon's worker thread: it takes each queued path, hands a transcript to the worker and a
file of a session kept whole to the keeper, counts what came of it, sends the alerts it calls for,
and queues the path again when its outcome asks to be looked at later. One bad file never stops it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from riffd.claude_code.session_files import SessionFile
from riffd.daemon.alerts import Alerts
from riffd.daemon.counters import Counters, DaemonNow, advice
from riffd.daemon.disk_full import DiskWatch
from riffd.daemon.jobs import log_outcome, transcript_filter
from riffd.daemon.keeper import Keeper
from riffd.daemon.outcome import Outcome
from riffd.daemon.worker import Worker
from riffd.daemon.workqueue import WorkQueue
from riffd.state.store import StateStore

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines

TICK_SECONDS = 1.0


class WorkThread:
    """Runs `worker` and `keeper` on what `queue` gives until `stop` is set and the queue is empty.
    `now()` says what changes while the daemon runs (its configuration, its archive, whether it is
    starting); `on_new_store` is called when the state store was damaged and a new one started (a
    rescan fills it again)."""

    def __init__(
        self,
        queue: WorkQueue,
        stop: threading.Event,
        worker: Worker,
        keeper: Keeper,
        store: StateStore,
        counters: Counters,
        alerts: Alerts,
        disk: DiskWatch,
        now: Callable[[], DaemonNow],
        on_new_store: Callable[[], object],
    ) -> None:
        self.queue, self.stop = queue, stop
        self.worker, self.keeper, self.store = worker, keeper, store
        self.counters, self.alerts, self.disk = counters, alerts, disk
        self.now, self.on_new_store = now, on_new_store
        self._thread = threading.Thread(target=self._run, name="riffd-worker", daemon=True)

    def start(self) -> None:
        """Start taking from the queue."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the thread to end."""
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not (self.stop.is_set() and not len(self.queue)):
            item = self.queue.get(TICK_SECONDS)
            if item is not None:
                path, first_event = item
                self.counters.busy = True
                try:
                    self._process(Path(path), first_event)
                finally:
                    self.counters.busy = False
            self._write_batches(self.worker.batches.flush_due)
        self._write_batches(self.worker.batches.flush_all)  # the daemon stops

    def _write_batches(self, write: Callable[[], None]) -> None:
        """Write the archive's waiting batches (`write`); archive errors are said where they
        happen, anything else here must not stop the worker either."""
        try:
            write()
        except Exception as exc:
            log.error("could not archive appended lines: %s\n%s", exc, traceback.format_exc())
            self.counters.error(
                f"could not archive appended lines: {exc}",
                "nothing to do: the next rescan archives them from the files",
                about="archive",
            )

    def _process(self, path: Path, first_event: float) -> None:
        now = self.now()
        try:
            watched = transcript_filter(now.config)
            if not watched.matches(path):
                self._keep(path, watched.session_file(path), now)
                return
            outcome = self.worker.process(path)
        except sqlite3.Error as exc:
            self._database_error(path, exc)
            return
        except Exception as exc:  # one bad file must not stop the worker: log it, count it, go on
            log.error("%s: unexpected error: %s\n%s", path, exc, traceback.format_exc())
            self.counters.error(
                f"{path}: {exc}",
                "run `riffd scan` on it; report the traceback if it persists",
                about=str(path),
            )
            return
        finally:
            self.counters.progress = time.monotonic()
        self._count(path, outcome, first_event, quiet=now.starting)

    def _keep(self, path: Path, found: SessionFile | None, now: DaemonNow) -> None:
        """A file kept whole goes to the keeper (riffd.daemon.keeper); any other path that is no
        transcript is forgotten (no longer under the roots, or excluded now)."""
        if found is not None:
            again = self.keeper.process(now.archive, found)
            if again and not self.stop.is_set():
                self.queue.put(str(path), delay=again, again=True)
        else:
            self.store.forget_file(str(path))

    def _database_error(self, path: Path, exc: sqlite3.Error) -> None:
        if self.store.reopen_if_damaged(exc):
            self.counters.error(
                f"{self.store.path} was damaged and moved aside to {self.store.moved_aside}",
                "nothing to do: a rescan fills the new state store again",
            )
            self.on_new_store()
            return
        log.error("%s: database error: %s", path, exc)
        self.disk.ran_out(exc)
        self.counters.error(
            f"{path}: database error: {exc}",
            self.disk.advice(exc, "it is retried at the next change or rescan"),
            about=str(path),
        )

    def _count(self, path: Path, outcome: Outcome, first_event: float, *, quiet: bool) -> None:
        """Count what processing `path` came to, alert (not while `quiet`: the start-up pass), log
        it, and queue the path again when it asks to be looked at later."""
        counters = self.counters
        counters.processed += 1
        failed = (outcome.repair or "").startswith("failed")
        if (outcome.kind == "skipped" and outcome.why) or failed:
            counters.error(
                f"{path}: {outcome.why or outcome.repair}", advice(outcome.why), about=str(path)
            )
        else:
            counters.resolved(str(path))
        self.alerts.outcome(outcome, quiet=quiet)
        if outcome.kind != "unchanged":
            counters.latencies.append(time.monotonic() - first_event)
            log_outcome(outcome)
        if outcome.retry_after is not None and not self.stop.is_set():  # none while draining
            self.queue.put(str(path), delay=outcome.retry_after, again=True)
