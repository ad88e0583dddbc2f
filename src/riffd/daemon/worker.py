"""The worker: bring one transcript's findings up to date from its watermark, and repair it when
idle.

Processing reads only the bytes after the stored watermark, feeding them to the file's index kept in
memory (an LRU bounded by lines); a file whose index was evicted, or that was truncated, rewritten
or replaced by someone else, is read again from the start: never silently skipped. Only complete
lines are consumed: an unfinished last line waits for its newline. The new watermark and findings
are committed together, after the work they record. Repairs go through the same safe path as
`riffd fix` (`repair.plan_repair` then `apply.apply_plan`), and riffd's own rewrite updates the
watermark at once, so the watcher's event for it finds nothing to do.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import sqlite3
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from riffd.archive.ingest import ingest_file, still_appended
from riffd.archive.packs import PackDamaged
from riffd.archive.store import Archive, ArchiveGap
from riffd.claude_code.liveness import claude_dirs_for, session_liveness
from riffd.daemon.cache import IndexCache
from riffd.fsio import DEFAULT_RETRY, REAL_FS, FileSystem, RetryPolicy, retrying_call
from riffd.repair.outcomes import ApplyOptions, Failed, FileChanged, Repaired, Skipped, SkipReason
from riffd.repair.plan import RepairPlan
from riffd.repair.planner import RepairOptions, cuts_torn_tail, keep_torn_tail, plan_file_repair
from riffd.repair.recovery import PendingSwaps
from riffd.repair.writer import apply_plan
from riffd.state.store import FINGERPRINT_BYTES, FileState, StateStore, Watermark
from riffd.tracker.tracker import RedundantCall, ToolCallTracker
from riffd.transcript.findings import (
    REPAIRABLE,
    Finding,
    FindingClass,
    has_latest_turn_calls,
    pending_while_live,
    torn_tail,
)
from riffd.transcript.incremental import GrowingIndex
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.reader import iter_chunks, read_span
from riffd.transcript.scan import index_file

log = logging.getLogger(__name__)

CHANGED_RETRY_SECONDS = 5.0
# After a failed repair (the disk or a sync client failing), the file waits before the next attempt,
# twice as long after each failure in a row: each attempt takes a backup, and one that put the
# transcript back rewrote it, which would bring the file straight back.
FAILED_RETRY_SECONDS = 30.0
FAILED_RETRY_MAX_SECONDS = 600.0


@dataclass(frozen=True)
class WorkerSettings:
    """What the worker needs from the configuration."""

    repair: bool = True  # False: report only
    quiet_period: float = 120.0
    add_missing_results: bool = True
    classes: frozenset[FindingClass] = REPAIRABLE
    backup_dir: Path = Path()
    claude_dir: Path = Path()
    roots: tuple[Path, ...] = ()
    retry: RetryPolicy = DEFAULT_RETRY


@dataclass
class Outcome:
    """What processing one file did: `kind` is unchanged / appended / rebuilt (the same file read
    again to rebuild its index) / read (a new or rewritten file) / gone / skipped; `lines` counts
    lines processed for the first time."""

    path: str
    kind: str
    lines: int = 0
    bytes: int = 0
    findings: int = 0
    seconds: float = 0.0
    repair: str | None = None  # repaired / skipped:<reason> / failed:<reason>
    retry_after: float | None = None  # process again after this many seconds (a repair is waiting)
    why: str = ""
    classes: dict[str, int] = field(
        default_factory=dict
    )  # the file's findings by class after this processing
    session_id: str | None = None
    fixed: dict[str, int] = field(default_factory=dict)  # what a repair fixed, by class
    backup_id: str | None = None


@dataclass
class Worker:
    """Processes one file at a time; the daemon's worker thread owns it."""

    store: StateStore
    settings: WorkerSettings
    fs: FileSystem = REAL_FS
    cache: IndexCache = field(default_factory=IndexCache)
    # Fed every message line read (through the index's observer); its repeats become
    # redundant_tool_call findings.
    tracker: ToolCallTracker | None = None
    # Fed every complete line read, before the state store commits, so nothing is ever read and not
    # archived.
    archive: Archive | None = None
    # Told every archive write that failed (the daemon's Room: a full disk is followed by a rescan
    # once there is room)
    on_write_error: Callable[[BaseException], object] | None = None
    # path -> the findings this worker stored last for it (files with findings only): see _update.
    _stored: dict[str, list[Finding]] = field(default_factory=dict, repr=False)
    # The repairs whose old file a writer still held (riffd.repair.handover); the scheduler finishes
    # them.
    pending_swaps: PendingSwaps = field(default_factory=PendingSwaps, repr=False)

    def process(self, path: Path) -> Outcome:
        """Bring `path`'s watermark and findings up to date, then repair it if that is due; never
        raises for a file that vanished or cannot be read (the outcome says so)."""
        started = time.monotonic()
        name = str(path)
        try:
            status = retrying_call(
                lambda: self.fs.stat(name), what=f"the status of {name}", policy=self.settings.retry
            )
        except FileNotFoundError:
            self.store.forget_file(name)
            self.cache.drop(name)
            self._stored.pop(name, None)
            return Outcome(name, "gone", seconds=time.monotonic() - started)
        except OSError as exc:  # EIO on every try: look again at the next change or rescan
            log.error("%s: could not read its status: %s", name, exc)
            self.store.bump({"errors.read": 1})
            return Outcome(name, "skipped", why=str(exc), seconds=time.monotonic() - started)
        if stat.S_ISLNK(status.st_mode):
            # A link to a transcript the walk reaches by no other path (riffd.claude_code.walk): read and
            # archived through the link; its repair is skipped as `symlink` (the planner), so the
            # report names it.
            try:
                status = retrying_call(
                    lambda: os.stat(name), what=f"the status of {name}", policy=self.settings.retry
                )
            except OSError as exc:
                return Outcome(
                    name,
                    "skipped",
                    why=f"a symlink to nothing readable ({exc})",
                    seconds=time.monotonic() - started,
                )
        if not stat.S_ISREG(status.st_mode):
            return Outcome(
                name, "skipped", why="not a regular file", seconds=time.monotonic() - started
            )
        try:
            outcome = self._update(name, status)
        except OSError as exc:
            log.error("%s: could not read it: %s", name, exc)
            self.store.bump({"errors.read": 1})
            return Outcome(name, "skipped", why=str(exc), seconds=time.monotonic() - started)
        state = self.store.file(name)
        if (
            state is not None
            and state.may_hold(FindingClass.PENDING_TOOL_CALL)
            and any(item.get("class") == FindingClass.PENDING_TOOL_CALL for item in state.findings)
        ):
            state = self._judge_pending(state, outcome)
        if self.settings.repair and state is not None and state.repairable:
            try:
                self._repair(path, state.session_id, outcome)
            except OSError as exc:  # reading it for the repair failed: nothing was written; the next change retries
                log.error("%s: could not read it to repair it: %s", name, exc)
                outcome.repair, outcome.why = "failed:io_error", str(exc)
        outcome.seconds = time.monotonic() - started
        return outcome

    # --- reading ----------------------------------------------------------------------------------

    def _update(
        self, name: str, status: os.stat_result, own_rewrite_new_bytes: int | None = None
    ) -> Outcome:
        """Read what is new in `name` and commit its watermark and findings. After riffd's own
        rewrite, `own_rewrite_new_bytes` says how many bytes at its end other writers added (carried
        over): only their lines are new; the rest was processed before the rewrite."""
        state = self.store.file(name)
        watermark = state.watermark if state else None
        start = 0
        already = (
            0  # lines processed before: a rebuild re-reads them, but does not process them again
        )
        growing: GrowingIndex | None = None
        kind = "read"
        why = "new file" if watermark is None else ""
        if watermark is not None:
            if (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns) == (
                watermark.dev,
                watermark.ino,
                watermark.size,
                watermark.mtime_ns,
            ):
                return Outcome(
                    name, "unchanged"
                )  # one stat, no read: what a restart costs per untouched file
            why = self._still_same_file(name, status, watermark)
            if not why:
                already = watermark.lines
                growing = self.cache.get(name, watermark.offset)
                if growing is not None:
                    start, kind = watermark.offset, "appended"
                else:
                    kind, why = "rebuilt", "no index in memory: read from the start to rebuild it"
            elif own_rewrite_new_bytes is None:
                log.info("%s: %s; reading it again from the start", name, why)
                self.store.bump({"rescans.changed_files": 1})
        if growing is None:
            growing = GrowingIndex(name)
            self.cache.drop(name)
        index = growing.index
        repeats: dict[str, RedundantCall] = {}
        if self.tracker is not None:
            # Lines read again from the start are fed again: the tracker ignores tool_use ids it has
            # seen.
            growing.builder.observe = self._observer(name, index, repeats)
        tail_pending = 0
        rewritten = self._archive_rewritten(
            name, watermark, why, kind, own_rewrite_new_bytes is not None
        )
        for offset, lines, terminated in iter_chunks(
            name, fs=self.fs, retry=self.settings.retry, start=start
        ):
            if terminated:
                growing.add_lines(offset, lines, True)
                # The file's time goes with these lines when they end where the file ended when it
                # was looked at
                self._archive(
                    name,
                    offset,
                    lines,
                    rewritten and offset == 0,
                    status.st_mtime_ns if index.end == status.st_size else None,
                )
            else:
                tail_pending = len(lines[0])  # an unfinished last line: wait for its newline
        if self.archive is not None and index.end == status.st_size:
            try:
                self.archive.note_mtime(
                    name, index.end, status.st_mtime_ns
                )  # (held already: nothing written)
            except sqlite3.Error as exc:
                self._archive_failed(name, "record its modification time", exc)
        findings = growing.findings(fs=self.fs, retry=self.settings.retry)
        if self.tracker is not None:
            stored = (
                state.findings if state and state.may_hold(FindingClass.REDUNDANT_TOOL_CALL) else []
            )
            findings += _redundant_findings(name, index, stored, repeats)
            self.tracker.prune(
                time.time()
            )  # sessions read from history are quiet: forget them at once
        if has_latest_turn_calls(findings):
            findings = pending_while_live(findings, self._live(Path(name), index.session_id))
        if tail_pending and time.time() - status.st_mtime > self.settings.quiet_period:
            findings.append(torn_tail(name, len(index) + 1, index.end))
        watermark = self._watermark(name, status, index)
        repairable = sum(1 for finding in findings if finding.cls in self.settings.classes)
        read_bytes = index.end - start
        if own_rewrite_new_bytes is not None:
            already = bisect.bisect_left(index.offsets, index.end - own_rewrite_new_bytes)
            kind, why = "rebuilt", "riffd's own repair"
        new_lines = len(index) - already
        # The findings stored last for this file (by this worker): when they are the same, only the
        # watermark is written, so an append to a file with thousands of findings costs what an
        # append to a clean one does.
        counters = {"lines.processed": new_lines, "bytes.read": read_bytes}
        if not (
            state is not None
            and self._stored.get(name) == findings
            and self.store.save_file(watermark, index.session_id, None, repairable, counters)
        ):
            self.store.save_file(
                watermark,
                index.session_id,
                [finding.to_json() for finding in findings],
                repairable,
                counters,
            )
        self._remember(name, findings)
        self.cache.put(name, growing)
        return Outcome(
            name,
            kind,
            lines=new_lines,
            bytes=read_bytes,
            findings=len(findings),
            why=why,
            classes=dict(Counter(str(finding.cls) for finding in findings)),
            session_id=index.session_id,
        )

    def _archive_rewritten(
        self, name: str, watermark: Watermark | None, why: str, kind: str, own: bool
    ) -> bool:
        """Whether the archive must start a new generation of `name` (it was rewritten, by
        anyone)."""
        if self.archive is None:
            return False
        if own or (watermark is not None and why and kind == "read"):
            return True
        if watermark is None:  # new to the state store: new to the archive too, or recreated since?
            try:
                _generation, archived = self.archive.cursor(name)
                return archived > 0 and not still_appended(self.archive, Path(name), archived)
            except (sqlite3.Error, OSError, PackDamaged) as exc:
                self._archive_failed(name, "ask the archive about it", exc)
        return False

    def _archive(
        self, name: str, offset: int, lines: list[bytes], rewritten: bool, mtime_ns: int | None
    ) -> None:
        if self.archive is None:
            return
        try:
            try:
                self.archive.add_lines(name, offset, lines, rewritten=rewritten, mtime_ns=mtime_ns)
            except (
                ArchiveGap
            ) as gap:  # bytes read before were not archived then: from the archive's watermark now
                added = ingest_file(self.archive, Path(name))
                log.info(
                    "%s: the archive lacked bytes %d to %d (not archived when they were read); archived %d "
                    "line(s) from the file",
                    name,
                    gap.archived,
                    gap.offset,
                    added,
                )
        except (sqlite3.Error, OSError, ArchiveGap, PackDamaged) as exc:
            self._archive_failed(name, f"archive lines at byte {offset}", exc)

    def _archive_failed(self, name: str, what: str, exc: Exception) -> None:
        """Detection and repairs go on whatever the archive does; it catches up later from its own
        watermark (Daemon._rescan). A damaged archive is moved aside and a new one started at
        once."""
        log.error("%s: could not %s: %s; the next rescan retries", name, what, exc)
        if self.on_write_error is not None:
            self.on_write_error(exc)
        self.store.bump({"archive.errors": 1})
        if self.archive is not None and self.archive.reopen_if_damaged(exc):
            self.store.bump({"archive.moved_aside": 1})

    def _still_same_file(self, name: str, status: os.stat_result, watermark: Watermark) -> str:
        """Return why `name` is no longer the file the watermark describes, or '' if it still is."""
        if (status.st_dev, status.st_ino) != (watermark.dev, watermark.ino):
            return "it was replaced by another file"
        if status.st_size < watermark.offset:
            return f"it shrank below the {watermark.offset} bytes already read (truncated)"
        if _digest(name, 0, watermark.head_len, self.fs, self.settings.retry) != watermark.head_sha:
            return "its first line changed (rewritten)"
        tail_start = watermark.offset - watermark.tail_len
        if (
            _digest(name, tail_start, watermark.tail_len, self.fs, self.settings.retry)
            != watermark.tail_sha
        ):
            return "bytes before the watermark changed (rewritten)"
        return ""

    def _watermark(self, name: str, status: os.stat_result, index: TranscriptIndex) -> Watermark:
        offset = index.end
        head_len = min(index.span(0)[1], FINGERPRINT_BYTES) if len(index) else 0
        tail_len = min(offset, FINGERPRINT_BYTES)
        return Watermark(
            path=name,
            dev=status.st_dev,
            ino=status.st_ino,
            offset=offset,
            lines=len(index),
            head_len=head_len,
            head_sha=_digest(name, 0, head_len, self.fs, self.settings.retry),
            tail_len=tail_len,
            tail_sha=_digest(name, offset - tail_len, tail_len, self.fs, self.settings.retry),
            size=status.st_size,
            mtime_ns=status.st_mtime_ns,
        )

    def _observer(
        self, name: str, index: TranscriptIndex, repeats: dict[str, RedundantCall]
    ) -> Callable[[int, dict[str, Any]], None]:
        """Return the index observer that feeds the tracker each message line of `name`, keeping
        what it finds."""
        tracker = self.tracker
        assert tracker is not None
        fallback = os.path.basename(name).removesuffix(".jsonl")

        def observe(line: int, record: dict[str, Any]) -> None:
            session_id = record.get("sessionId")
            if not isinstance(session_id, str):
                session_id = index.session_id or fallback
            for found in tracker.feed(session_id, record, line=line, path=name):
                repeats[found.later_id] = found

        return observe

    def _live(self, path: Path, session_id: str | None) -> bool:
        settings = self.settings
        return session_liveness(
            path,
            claude_dirs_for(path, settings.claude_dir, settings.roots),
            settings.quiet_period,
            session_id=session_id,
            fs=self.fs,
        )[0]

    def _judge_pending(self, state: FileState, outcome: Outcome) -> FileState:
        """A file with pending tool calls: while its session is live, look again later; once it is
        idle, the calls still unanswered become missing_tool_result findings (and may be
        repaired)."""
        path = Path(state.watermark.path)
        live = outcome.kind != "unchanged" or self._live(path, state.session_id)
        if live:
            outcome.retry_after = outcome.retry_after or max(self.settings.quiet_period / 2, 1.0)
            return state
        findings = pending_while_live(
            [Finding.from_json(item) for item in state.findings], live=False
        )
        repairable = sum(1 for finding in findings if finding.cls in self.settings.classes)
        self.store.save_file(
            state.watermark,
            state.session_id,
            [finding.to_json() for finding in findings],
            repairable,
        )
        self._remember(state.watermark.path, findings)
        return self.store.file(state.watermark.path) or state

    def _remember(self, name: str, findings: list[Finding]) -> None:
        if findings:
            self._stored[name] = findings
        else:
            self._stored.pop(name, None)

    # --- repairing --------------------------------------------------------------------------------

    def _repair(self, path: Path, session_id: str | None, outcome: Outcome) -> None:
        settings = self.settings
        failures, failed_at = self.store.failed_repairs(str(path))
        if failed_at is not None:
            wait = min(FAILED_RETRY_SECONDS * 2 ** (failures - 1), FAILED_RETRY_MAX_SECONDS) - (
                time.time() - failed_at
            )
            if wait > 0:
                outcome.repair, outcome.retry_after = "waiting:after_failure", wait
                return
        live, why = session_liveness(
            path,
            claude_dirs_for(path, settings.claude_dir, settings.roots),
            settings.quiet_period,
            session_id=session_id,
            fs=self.fs,
        )
        if live:
            # Not an attempt yet: look again once the quiet period could have passed.
            outcome.repair = "waiting:live"
            outcome.retry_after = max(settings.quiet_period / 2, 1.0)
            log.debug("%s: repair waits: %s", path, why)
            return
        scanned = index_file(path, fs=self.fs, retry=settings.retry, with_identity=True)
        options = RepairOptions(
            add_missing_results=settings.add_missing_results, classes=settings.classes
        )
        try:
            plan = plan_file_repair(scanned, options, fs=self.fs, retry=settings.retry)
        except FileChanged as exc:  # written to since it was read: its event brings it back
            if (
                exc.reason is not SkipReason.CHANGED
            ):  # a symlink: said in the report, not tried again and again
                self._skipped(path, Skipped(path, exc.reason, str(exc)), outcome)
                return
            outcome.repair, outcome.why = f"skipped:{SkipReason.CHANGED}", str(exc)
            outcome.retry_after = CHANGED_RETRY_SECONDS
            return
        if cuts_torn_tail(plan):
            plan = self._archive_torn_tail(path, plan)
        if plan.is_empty:
            outcome.repair, outcome.why = (
                "skipped:nothing_safe_to_do",
                "; ".join(plan.notes) or "no safe repair",
            )
            self.store.record_repair(
                str(path),
                "skipped",
                "nothing_safe_to_do",
                None,
                Counter(),
                "; ".join(plan.notes) or "no safe repair",
            )
            self._mark_not_repairable(str(path))
            return
        result = apply_plan(
            plan,
            ApplyOptions(
                backup_dir=settings.backup_dir,
                claude_dir=settings.claude_dir,
                roots=settings.roots,
                quiet_period=settings.quiet_period,
                fs=self.fs,
                retry=settings.retry,
                session_id=scanned.index.session_id,
            ),
        )
        fixes = Counter(str(finding.cls) for finding in plan.fixes)
        if isinstance(result, Repaired):
            outcome.repair, outcome.fixed, outcome.backup_id = (
                "repaired",
                dict(fixes),
                result.backup_id,
            )
            self.store.record_repair(
                str(path),
                "repaired",
                None,
                result.backup_id,
                fixes,
                f"{len(plan.edits)} edit(s); backup {result.backup_id}",
            )
            log.info(
                "%s: repaired (%s); backup %s",
                path,
                ", ".join(f"{k} {v}" for k, v in fixes.items()),
                result.backup_id,
            )
            for warning in result.warnings:
                log.warning("%s", warning)
            if result.pending_swap is not None:
                self.pending_swaps.add(result.pending_swap)
            # Our own rewrite: record the new file now, so its watcher event is a no-op.
            self.cache.drop(str(path))
            self._update(
                str(path), self.fs.stat(str(path)), own_rewrite_new_bytes=result.carried_over_bytes
            )
            return
        if isinstance(result, Skipped):
            self._skipped(path, result, outcome)
            return
        assert isinstance(result, Failed)
        outcome.repair, outcome.why = f"failed:{result.reason}", result.detail
        self.store.record_repair(
            str(path), "failed", str(result.reason), None, Counter(), result.detail
        )
        self._mark_not_repairable(str(path))
        log.error("%s: repair failed: %s", path, result.detail)

    def _skipped(self, path: Path, result: Skipped, outcome: Outcome) -> None:
        """Record a repair skipped on purpose; one that may succeed soon (live, changed, busy) is
        tried again."""
        outcome.repair = f"skipped:{result.reason}"
        self.store.record_repair(
            str(path), "skipped", str(result.reason), None, Counter(), result.detail
        )
        if result.reason in (SkipReason.LIVE, SkipReason.CHANGED, SkipReason.BUSY):
            outcome.retry_after = (
                CHANGED_RETRY_SECONDS
                if result.reason is not SkipReason.LIVE
                else max(self.settings.quiet_period / 2, 1.0)
            )
        else:
            self._mark_not_repairable(str(path))
        log.info("%s: repair skipped: %s", path, result.detail)

    def _archive_torn_tail(self, path: Path, plan: RepairPlan) -> RepairPlan:
        """A torn last line is cut off only once the archive holds it (the worker archives complete
        lines only); return the plan, without that cut when the archive cannot take it."""
        if self.archive is None:
            return keep_torn_tail(
                plan,
                "the archive is off, and riffd keeps a fragment in the archive before "
                "cutting it off",
            )
        try:
            ingest_file(self.archive, path)
        except (sqlite3.Error, OSError, ArchiveGap, PackDamaged) as exc:
            self._archive_failed(str(path), "archive its torn last line", exc)
            return keep_torn_tail(plan, f"it could not be archived first ({exc})")
        return plan

    def _mark_not_repairable(self, name: str) -> None:
        """Stop retrying a repair that cannot succeed as things are; the next change of the file
        re-decides."""
        state = self.store.file(name)
        if state is not None:
            self.store.save_file(
                state.watermark, state.session_id, None, 0
            )  # the same findings, not repairable


def _redundant_findings(
    name: str,
    index: TranscriptIndex,
    stored: list[dict[str, Any]],
    repeats: dict[str, RedundantCall],
) -> list[Finding]:
    """Given a file's index, its stored findings and the redundant calls just found in it (by the
    repeat's tool_use id), return its redundant_tool_call findings: the stored ones and the new
    ones, each repeat once, dropping repeats no longer in the file and placing each at its lines'
    current numbers (by uuid)."""
    kept: dict[str, Finding] = {}
    for item in stored:
        if item.get("class") == FindingClass.REDUNDANT_TOOL_CALL and isinstance(
            item.get("tool_id"), str
        ):
            kept[item["tool_id"]] = Finding(
                FindingClass.REDUNDANT_TOOL_CALL,
                name,
                tuple(item.get("lines", ())),
                str(item.get("message", "")),
                uuids=tuple(item.get("uuids", ())),
                tool_id=item["tool_id"],
                detail=item.get("detail"),
            )
    for tool_id, record in repeats.items():
        kept[tool_id] = redundant_finding(record, name)
    findings: list[Finding] = []
    for tool_id, finding in kept.items():
        if tool_id not in index.tool_uses:
            continue  # the file was rewritten without that call
        lines = tuple(
            index.line_of_uuid[uuid] + 1 for uuid in finding.uuids if uuid in index.line_of_uuid
        )
        findings.append(
            replace(finding, lines=lines) if len(lines) == len(finding.lines) else finding
        )
    return sorted(findings, key=lambda finding: finding.lines[-1:])


def redundant_finding(record: RedundantCall, path: str) -> Finding:
    """Given a redundant call found in the transcript `path`, return its informational finding."""
    gap = record.later_time - record.earlier_time
    return Finding(
        FindingClass.REDUNDANT_TOOL_CALL,
        path,
        tuple(line for line in (record.earlier_line, record.later_line) if line is not None),
        f"{record.tool} call {record.later_id} repeats the identical call {record.earlier_id} made {gap:.0f} s "
        f"earlier; about {record.wasted_bytes:,} bytes of result repeated (informational; nothing to repair)",
        uuids=tuple(uuid for uuid in (record.earlier_uuid, record.later_uuid) if uuid is not None),
        tool_id=record.later_id,
        detail=record.tool,
    )


def _digest(name: str, offset: int, length: int, fs: FileSystem, retry: RetryPolicy) -> str:
    if length <= 0:
        return hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(read_span(name, offset, length, fs=fs, retry=retry)).hexdigest()
