"""The worker: bring one transcript's findings up to date from its watermark, and repair it when
idle.

It is a pipeline: the file's status (riffd.daemon.reading), its new bytes read from the watermark
in chunks of complete lines, each chunk fed to the sinks (riffd.daemon.sinks: the index, the
tracker, the archive), one judgement of what they hold (riffd.daemon.judging), the watermark and
findings committed together, after the work they record, then the repair step
(riffd.daemon.repairing). riffd's own rewrite is read at once, so the watcher's event for it finds
nothing to do.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from riffd.archive.store import Archive
from riffd.daemon.archive_batch import ARCHIVE_ERRORS, ArchiveBatches
from riffd.daemon.cache import IndexCache
from riffd.daemon.judging import TAIL_MARGIN, RedundantCalls, Seen, Verdict, judge, liveness
from riffd.daemon.outcome import Outcome, WorkerSettings
from riffd.daemon.reading import (
    ChangedUnderRead,
    Gone,
    PassedBy,
    Reading,
    Replaced,
    open_reading,
    status_of,
    watermark_of,
)
from riffd.daemon.repairing import RepairStep
from riffd.daemon.sinks import ArchiveErrors, ArchiveSink, IndexSink, LineSink, TrackerSink
from riffd.fsio import REAL_FS, FileSystem, RetryingFS
from riffd.repair.recovery import PendingSwaps
from riffd.state.records import FileState
from riffd.state.store import StateStore
from riffd.tracker.tracker import RedundantCall, ToolCallTracker
from riffd.transcript.findings import Finding, FindingClass

__all__ = ["Outcome", "Worker", "WorkerSettings"]

log = logging.getLogger(__name__)

# Looks at a file whose name another file took while it was read, before it is left to its next change
READ_TRIES = 3


class Worker:
    """Processes one file at a time; the daemon's worker thread owns it. `fs` is the seam its files
    are read through (a test's faults included), with the retry policy of `settings`; `tracker` is
    fed every message line read (its repeats become redundant_tool_call findings); `archive` every
    complete line read (a new or rewritten file's before the state store commits, appends a few
    seconds later in `batches`: riffd.daemon.archive_batch); `on_write_error` is told every archive
    write that failed (the daemon's DiskWatch: a full disk is followed by a rescan once there is room)."""

    def __init__(
        self,
        store: StateStore,
        settings: WorkerSettings,
        fs: FileSystem = REAL_FS,
        cache: IndexCache | None = None,
        tracker: ToolCallTracker | None = None,
        archive: Archive | None = None,
        on_write_error: Callable[[BaseException], object] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.fs = RetryingFS.of(fs, settings.retry)
        self.cache = cache if cache is not None else IndexCache()
        self.tracker = tracker
        self.archive = archive
        self.archive_errors = ArchiveErrors(store, on_write_error)
        # Files a read was thrown away of (riffd.daemon.reading.changed_under_read): those whose
        # next read starts a new archive generation (the archive took that read as it came), and
        # the repeated tool calls found in it (the tracker, having seen them, finds them no more)
        self._new_generation: set[str] = set()
        self._unkept_repeats: dict[str, dict[str, RedundantCall]] = {}
        # the lines appended to known files, waiting to go to the archive together
        self.batches = ArchiveBatches(
            settings.archive_delay,
            lambda: self.archive,
            self.archive_errors.failed,
            lambda: self.fs,
        )
        # The repairs whose old file a writer still held (riffd.repair.handover): the scheduler
        # finishes them.
        self.pending_swaps = PendingSwaps()
        # path -> the findings this worker stored last for it (files with findings only), with how
        # many there are of each class: an append that leaves them as they were writes only the
        # watermark.
        self._stored: dict[str, tuple[list[Finding], dict[str, int]]] = {}
        self._redundant = RedundantCalls()  # the redundant calls judged last, per file

    def reconfigure(self, settings: WorkerSettings) -> None:
        """Work with `settings` from now on (a reloaded configuration)."""
        self.settings = settings
        self.fs = RetryingFS.of(self.fs, settings.retry)
        self.batches.delay = settings.archive_delay

    def process(self, path: Path) -> Outcome:
        """Bring `path`'s watermark and findings up to date, then repair it if that is due; never
        raises for a file that vanished or cannot be read (the outcome says so)."""
        started = time.monotonic()
        name = str(path)
        try:
            outcome, verdict = self._update_now(name)  # read, feed, judge, commit
        except Gone:
            self._forget(name)
            return Outcome(name, "gone", seconds=time.monotonic() - started)
        except PassedBy as passed:
            if passed.error:
                self.store.bump({"errors.read": 1})
            return Outcome(name, "skipped", why=passed.why, seconds=time.monotonic() - started)
        except OSError as exc:  # EIO on every try: look again at the next change or rescan
            log.error("%s: could not read it: %s", name, exc)
            self.store.bump({"errors.read": 1})
            return Outcome(name, "skipped", why=str(exc), seconds=time.monotonic() - started)
        outcome.retry_after = verdict.look_again
        if verdict.repair_due:
            self._repair(path, outcome)
        outcome.seconds = time.monotonic() - started
        return outcome

    def _update_now(
        self,
        name: str,
        own_rewrite: int | None = None,
        own_file: tuple[int, int] | None = None,
    ) -> tuple[Outcome, Verdict]:
        """`_update` with the file's status now, taken again when another file took the name
        between that status and the read (then read as the file it now is, from its start: not
        riffd's own rewrite). `own_rewrite` counts only while the name holds `own_file` ((st_dev,
        st_ino) of riffd's repaired copy). Raise PassedBy when the name changed hands at every
        try, Gone when nothing is there."""
        changed_each_time = True
        for attempt in range(READ_TRIES):
            status = status_of(name, self.fs)  # through a symlink the walk reached it by
            if own_file is not None and (status.st_dev, status.st_ino) != own_file:
                own_rewrite = None  # another file took the name since riffd's swap
            try:
                return self._update(name, status, own_rewrite)
            except ChangedUnderRead as changed:
                log.info("%s: it changed as it was read (%s); reading it again", name, changed.why)
                self.store.bump({"rescans.changed_under_read": 1})
                own_rewrite = None
                continue
            except Replaced:
                changed_each_time = False
                log.info(
                    "%s: another file took its name as it was read; %s",
                    name,
                    "reading that one"
                    if attempt + 1 < READ_TRIES
                    else "leaving it to its next change",
                )
                own_rewrite = None
        raise PassedBy(
            f"it changed as it was read, at each of {READ_TRIES} reads; "
            "it is looked at again at its next change"
            if changed_each_time
            else f"another file took its name or it changed as it was read, at each of "
            f"{READ_TRIES} reads; it is looked at again at its next change"
        )

    def _update(
        self, name: str, status: os.stat_result, own_rewrite: int | None = None
    ) -> tuple[Outcome, Verdict]:
        """Read what is new in `name`, feed it to the sinks, judge the file and commit its watermark
        and findings. After riffd's own rewrite, `own_rewrite` says how many bytes at its end other
        writers added (carried over): only their lines are new; the rest was processed before."""
        state = self.store.file(name)
        now = time.time()  # one clock for whether the file is idle and for the judge
        idle = now - status.st_mtime > self.settings.quiet_period
        reading = open_reading(
            name, status, state, self.cache, self.fs, settle_tail=idle and self._tail_due(state)
        )
        if reading is None:
            assert state is not None
            verdict = self._recheck(state)
            if state.watermark.size > state.watermark.offset and not idle:
                # an unfinished line, looked at early (an event with no change): again once quiet
                wait = status.st_mtime + self.settings.quiet_period + TAIL_MARGIN - now
                verdict = replace(verdict, look_again=min(verdict.look_again or wait, wait))
            return Outcome(name, "unchanged"), verdict
        try:
            return self._read(reading, now, idle, own_rewrite)
        finally:
            reading.close(self.fs)

    def _read(
        self, reading: Reading, now: float, idle: bool, own_rewrite: int | None
    ) -> tuple[Outcome, Verdict]:
        """Read the file `reading` holds open from where it says, feed the sinks, judge it and
        commit (see `_update`); raise ChangedUnderRead, keeping nothing of the read, when the file
        changed under it."""
        name = reading.name
        if reading.rewritten and own_rewrite is None:
            log.info("%s: %s; reading it again from the start", name, reading.why)
            self.store.bump({"rescans.changed_files": 1})
        tracked = TrackerSink(self.tracker, name) if self.tracker is not None else None
        if tracked is not None:  # found in a read the file changed under (the tracker saw them)
            tracked.repeats.update(self._unkept_repeats.pop(name, {}))
        fresh = own_rewrite is not None or name in self._new_generation
        sinks = self._sinks(reading, tracked, fresh)
        for chunk in reading.chunks(self.fs):
            for sink in sinks:
                sink.feed(chunk)
        try:
            changed = reading.changed_under_read(self.fs)
        except OSError:  # EIO at every try: a read error, and nothing of the read is kept
            self._throw_away(name, sinks, tracked)
            raise
        if changed:
            self._throw_away(name, sinks, tracked)
            raise ChangedUnderRead(changed)
        self._new_generation.discard(name)
        for sink in sinks:
            sink.done()
        verdict = self._judge(reading, tracked, now, appended=own_rewrite is None)
        if reading.tail and idle and self.archive is not None:
            # An unfinished last line nothing was written after for the quiet period: archived
            # as it is, so a session Claude Code deletes comes back whole (a line completed later
            # replaces it in the archive).
            with self.batches.written_first(name):
                self.archive_errors.take_file(
                    self.archive, Path(name), "archive its unfinished last line", self.fs
                )
        return self._commit(reading, verdict, own_rewrite), verdict

    def _tail_due(self, state: FileState | None) -> bool:
        """Whether an idle file's unfinished last line (its watermark ends before the file) waits
        to be judged and archived: it was last looked at before the quiet period was over, or the
        archive does not hold it (an archive error then: tried again at each look)."""
        if state is None or state.watermark.size <= state.watermark.offset:
            return False
        if state.processed_at <= state.watermark.mtime_ns / 1e9 + self.settings.quiet_period:
            return True
        if self.archive is None:
            return False
        try:
            return self.archive.cursor(state.watermark.path)[1] < state.watermark.size
        except ARCHIVE_ERRORS:
            return True

    def _sinks(
        self, reading: Reading, tracked: TrackerSink | None, new_generation: bool
    ) -> list[LineSink]:
        """The sinks of one reading: the index first (it parses the lines), then the tracker and the
        archive (`new_generation`: it starts a new generation of the file)."""
        sinks: list[LineSink] = [IndexSink(reading.growing, keep_messages=tracked is not None)]
        if tracked is not None:
            sinks.append(tracked)
        if self.archive is not None:
            sinks.append(
                ArchiveSink(
                    self.archive,
                    reading,
                    self.archive_errors,
                    self.batches,
                    self.fs,
                    new_generation=new_generation,
                )
            )
        return sinks

    def _throw_away(self, name: str, sinks: list[LineSink], tracked: TrackerSink | None) -> None:
        """Keep nothing of a read that could not be checked or that the file changed under."""
        self.cache.drop(name)  # the index took lines the file may no longer hold
        if any(isinstance(sink, ArchiveSink) and sink.archived_at_once for sink in sinks):
            self._new_generation.add(name)  # until a read of it is kept
        if tracked is not None:
            self._unkept_repeats[name] = tracked.repeats

    def _judge(
        self, reading: Reading, tracked: TrackerSink | None, now: float, *, appended: bool
    ) -> Verdict:
        """Judge the file `reading` read, from the detectors' findings and what the tracker found
        (`appended`: unless riffd's own rewrite was read, which moved lines)."""
        index, state = reading.index, reading.state
        findings = reading.growing.findings(fs=self.fs, fd=reading.fd)
        redundant = None
        if tracked is not None:

            def stored() -> list[dict[str, Any]]:
                """The findings stored, which the redundant calls found now join."""
                if state is not None and state.may_hold(FindingClass.REDUNDANT_TOOL_CALL):
                    return state.findings
                return []

            redundant = self._redundant.judged(
                reading.name,
                index,
                tracked.repeats,
                stored,
                appended=appended and reading.kind == "appended",
            )
        seen = Seen(
            reading.name,
            findings,
            index,
            redundant,
            reading.tail,
            reading.status.st_mtime,
            tail_torn=reading.tail_torn,
        )
        live = partial(self._live, reading.name, index.session_id)
        return judge(seen, live, self.settings, now)

    def _recheck(self, state: FileState) -> Verdict:
        """Judge an unchanged file again when it holds tool calls pending while its session was
        live: once it is idle, they are missing tool results (and may be repaired)."""
        if state.may_hold(FindingClass.PENDING_TOOL_CALL) and any(
            item.get("class") == FindingClass.PENDING_TOOL_CALL for item in state.findings
        ):
            name = state.watermark.path
            findings = [Finding.from_json(item) for item in state.findings]
            seen = Seen(name, findings, stored_repairable=state.repairable)
            live = partial(self._live, name, state.session_id)
            verdict = judge(seen, live, self.settings, time.time())
            if verdict.findings != findings:
                self._save(state, verdict)
            return verdict
        return Verdict([], state.repairable, self.settings.repair and state.repairable > 0)

    def _commit(self, reading: Reading, verdict: Verdict, own_rewrite: int | None) -> Outcome:
        """Store the watermark and findings of what `reading` read, counting the lines processed
        for the first time; keep the index in memory for the next append."""
        name, index, findings = reading.name, reading.index, verdict.findings
        watermark = watermark_of(reading, self.fs)
        read_bytes = index.end - reading.start
        already, kind, why = reading.already, reading.kind, reading.why
        if own_rewrite is not None:
            already = bisect.bisect_left(index.offsets, index.end - own_rewrite)
            kind, why = "rebuilt", "riffd's own repair"
        new_lines = len(index) - already
        counters = {"lines.processed": new_lines, "bytes.read": read_bytes}
        # The findings stored last for this file (by this worker): when they are the same, only the
        # watermark is written, so an append to a file with thousands of findings costs what an
        # append to a clean one does.
        stored = self._stored.get(name)
        same = stored is not None and stored[0] == findings
        if not (
            reading.state is not None
            and same
            and self.store.save_file(
                watermark, index.session_id, None, verdict.repairable, counters, verdict.judged_at
            )
        ):
            self.store.save_file(
                watermark,
                index.session_id,
                [finding.to_json() for finding in findings],
                verdict.repairable,
                counters,
                verdict.judged_at,
            )
        classes = stored[1] if same and stored is not None else _classes(findings)
        self._remember(name, findings, classes)
        self.cache.put(name, reading.growing)
        return Outcome(
            name,
            kind,
            lines=new_lines,
            bytes=read_bytes,
            findings=len(findings),
            why=why,
            classes=dict(classes),
            session_id=index.session_id,
        )

    def _save(self, state: FileState, verdict: Verdict) -> None:
        """Store a new verdict on an unchanged file."""
        findings = [finding.to_json() for finding in verdict.findings]
        self.store.save_file(state.watermark, state.session_id, findings, verdict.repairable)
        self._remember(state.watermark.path, verdict.findings)

    def _repair(self, path: Path, outcome: Outcome) -> None:
        """The repair step; riffd's own rewrite is read at once, so its watcher event is a no-op."""
        name = str(path)
        state = self.store.file(name)
        step = RepairStep(
            self.store,
            self.settings,
            self.fs,
            self.pending_swaps,
            self.archive,
            self.archive_errors,
            self.batches.flush,
        )
        try:
            repaired = step.run(path, state.session_id if state else None, outcome)
        except OSError as exc:  # reading it for the repair failed: nothing was written
            log.error("%s: could not read it to repair it: %s", name, exc)
            outcome.repair, outcome.why = "failed:io_error", str(exc)
            return
        if repaired is None:
            return
        self.cache.drop(name)
        try:
            self._update_now(name, repaired.carried_over_bytes, repaired.copy_id)
        except (Gone, FileNotFoundError):  # deleted as soon as it was repaired
            self._forget(name)
        except (PassedBy, OSError) as exc:  # the repair is done: only the look after it failed
            why = exc.why if isinstance(exc, PassedBy) else str(exc)
            log.warning(
                "%s: repaired, but not read again since (%s); read at its next look", name, why
            )

    def _live(self, name: str, session_id: str | None) -> bool:
        return liveness(Path(name), session_id, self.settings, self.fs)[0]

    def _remember(
        self, name: str, findings: list[Finding], classes: dict[str, int] | None = None
    ) -> None:
        if findings:
            self._stored[name] = (findings, _classes(findings) if classes is None else classes)
        else:
            self._stored.pop(name, None)

    def _forget(self, name: str) -> None:
        """The file is gone: forget its state, its index and its findings."""
        self.batches.flush(name)  # the lines of a file gone live on in the archive only
        self.store.forget_file(name)
        self.cache.drop(name)
        self._stored.pop(name, None)
        self._redundant.forget(name)


def _classes(findings: list[Finding]) -> dict[str, int]:
    """How many of `findings` there are of each class."""
    return dict(Counter(str(finding.cls) for finding in findings))
