"""Building the health report from the state store (files, findings, repairs, counters) and, when
the daemon runs, its live snapshot (uptime, watcher, queue, latency); `publish` writes it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.archive.schema import ARCHIVE_NAME
from riffd.database import FULL_BELOW, damaged_copies, free_bytes
from riffd.fsio import IO_STATS
from riffd.reports.attention import DEFAULT_REPAIR_NAMES, RepairTiming, sort_findings
from riffd.reports.model import (
    ArchiveFigures,
    BackupFigures,
    DaemonState,
    DatabaseFiles,
    Databases,
    ErrorRecord,
    FileCounts,
    FindingCounts,
    HealthReport,
    IoFigures,
    Latency,
    PendingCall,
    QueueFigures,
    Reload,
    RepairCounts,
    Throughput,
    TopSession,
    TrackerFigures,
    WatcherFigures,
)
from riffd.state.store import StateStore
from riffd.transcript.findings import FindingClass

RECENT_SECONDS = 3600.0
STUCK_SECONDS = 120.0  # a running daemon refreshes its figures every 30 s at least
ATTENTION_LISTED = 200  # findings listed under `attention` (all are counted in `findings`)


def percentile(samples: list[float], fraction: float) -> float | None:
    """Return the `fraction` percentile (nearest rank) of `samples`, or None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))  # 1-based nearest rank
    return ordered[min(rank, len(ordered)) - 1]


def build_report(
    store: StateStore,
    backup_dir: Path,
    daemon: dict[str, Any] | None,
    hook_problems: Sequence[str] = (),
    riffd: str = "riffd",
) -> HealthReport:
    """Given the state store, the backup folder, the daemon's snapshot (its live figures, `running`
    true only when that daemon runs now; a stopped daemon's last figures; or None when none was ever
    seen) and the installed hooks that do not run (`riffd.hooks.checking.hook_problems`), return the
    health report, its advice starting with `riffd` (riffd.display.riffd_invocation). The store is
    read in one snapshot: its findings, repairs and counters are those of one moment."""
    with store.read_snapshot():
        return _build(store, backup_dir, daemon or {}, hook_problems, riffd)


def _build(
    store: StateStore,
    backup_dir: Path,
    daemon: dict[str, Any],
    hook_problems: Sequence[str],
    riffd: str,
) -> HealthReport:
    now = time.time()
    rechecking = store.repaired_since_read()
    running = bool(daemon.get("running"))
    timing = RepairTiming(
        running=running and not daemon.get("stopping"),
        quiet_period=daemon.get("quiet_period"),
        modified={path: known[3] / 1e9 for path, known in store.known_files().items()},
        now=now,
    )
    classes = daemon.get("repair_classes")
    findings = sort_findings(
        store,
        daemon.get("repair_mode"),
        rechecking,
        timing,
        frozenset(classes) if isinstance(classes, list) else DEFAULT_REPAIR_NAMES,
        riffd,
    )
    repairs = store.repair_summary()
    counters = store.counters()
    latencies = [float(value) for value in daemon.get("latencies", [])]
    errors = tuple(
        _error(error)
        for error in daemon.get("errors", [])
        if now - float(error.get("time", 0)) < RECENT_SECONDS
    )
    seen_at = float(daemon["seen_at"]) if daemon.get("seen_at") else None
    uptime = now - float(daemon["started"]) if running and daemon.get("started") else None
    archive = _archive(daemon.get("archive") or {}, now)
    last_reload = _reload(daemon.get("last_reload"))
    state_dir = store.path.parent
    free = free_bytes(state_dir)
    full = free is not None and free < FULL_BELOW
    problems = []
    if free is not None and full:
        problems.append(
            f"the disk holding the state folder {state_dir} is full ({free / 1024:.0f} KiB free): riffd "
            "cannot store findings, figures or archived lines; free some space there"
            + (
                " (riffd goes on by itself, and catches up)"
                if running
                else " before starting riffd"
            )
        )
    # What keeps the daemon itself from working: also a problem while it is starting (`status` exits
    # 1 then)
    blocked = _blocked(daemon, now, seen_at, uptime, full)
    if running and full and blocked is None:
        blocked = problems[0]
    if not running and daemon.get("stopping"):
        problems.append(
            f"the riffd daemon (pid {daemon.get('pid')}) is stopping: it finishes what is queued and exits "
            f"(`{riffd} run`, or the service, starts it again)"
        )
    elif not running:
        problems.append(
            f"no riffd daemon runs{_last_seen(daemon)} (`{riffd} run`, or `{riffd} service install`)"
        )
    elif blocked is not None and blocked not in problems:
        problems.append(blocked)
    if errors:
        problems.append(f"{len(errors)} error(s) in the last hour: see `errors`")
    if findings.open:
        problems.append(
            f"{sum(findings.open.values())} open finding(s) in {findings.files} file(s): each is listed "
            "under `attention` with what deals with it"
        )
    if findings.ack_error:
        problems.append(findings.ack_error)
    moved_state, moved_archive = (
        damaged_copies(store.path),
        damaged_copies(store.path.parent / ARCHIVE_NAME),
    )
    if moved_archive:
        problems.append(
            f"the archive was damaged and moved aside to {moved_archive[-1]}: `{riffd} archive "
            "recover` copies its readable lines into the new archive"
        )
    if archive.cleanup_at_risk_count:
        problems.append(
            f"{archive.cleanup_at_risk_count} transcript(s) not (fully) archived are due for deletion by "
            f"Claude Code's cleanup (cleanupPeriodDays {archive.cleanup_days:g}) within a week: "
            f"`archive.cleanup_at_risk` names them; `{riffd} archive ingest` archives them now"
        )
    if last_reload is not None and last_reload.ok is False:
        problems.append(
            "the last configuration reload failed; the previous configuration is still in use"
        )
    roots = tuple(daemon.get("roots", []))
    missing_roots = tuple(root for root in roots if not os.path.isdir(root))
    for root in missing_roots:
        if os.path.exists(root):  # (a link to nothing: missing, as a drive not mounted yet)
            problems.append(
                f"the root {root} is not a folder: nothing is watched there; name a folder in the "
                "config's `roots`"
            )
    problems.extend(hook_problems)
    lines, read = counters.get("lines.processed", 0), counters.get("bytes.read", 0)
    return HealthReport(
        generated_at=datetime.fromtimestamp(now, UTC).replace(microsecond=0),
        problems=tuple(problems),
        daemon=DaemonState(
            running=running,
            starting=bool(running and daemon.get("starting")),
            blocked=blocked,
            stopping=bool(daemon.get("stopping")),
            last_seen=_local_time(seen_at),
            figures_age_seconds=round(now - seen_at, 1) if seen_at is not None else None,
            repair_mode=daemon.get("repair_mode"),
            version=daemon.get("version", __version__),
            pid=daemon.get("pid"),
            uptime_seconds=round(uptime, 1) if uptime is not None else None,
            config_path=daemon.get("config_path"),
            last_reload=last_reload,
        ),
        watcher=WatcherFigures(
            roots=roots,
            observer=daemon.get("observer"),
            observer_reason=daemon.get("observer_reason"),
            missing_roots=missing_roots,
            events=daemon.get("events", 0),
            rescans=daemon.get("rescans", 0),
        ),
        queue=QueueFigures(
            depth=daemon.get("queue_depth", 0), processed=daemon.get("processed", 0)
        ),
        files=FileCounts(
            watched=store.count_files(),
            with_findings=findings.files,
            repaired=repairs["files_repaired"],
            rechecking=len(rechecking),
        ),
        attention=tuple(findings.attention[:ATTENTION_LISTED]),
        attention_total=len(findings.attention),
        findings=FindingCounts(
            open=dict(sorted(findings.open.items())),
            acknowledged=dict(sorted(findings.acknowledged.items())),
            informational=dict(sorted(findings.informational.items())),
            repaired=repairs["findings_repaired_by_class"],
            pending=tuple(
                PendingCall(path=path, tool_id=item.get("tool_id"), line=item["lines"][0])
                for path, item in store.findings_of_class(FindingClass.PENDING_TOOL_CALL)
                if path not in rechecking
            ),
        ),
        repairs=RepairCounts(
            done=repairs["done"],
            skipped=repairs["skipped_by_reason"],
            failed=repairs["failed_by_reason"],
        ),
        backups=_backups(backup_dir),
        io=IoFigures(
            retries=daemon.get("io_retries", IO_STATS.retries),
            give_ups=daemon.get("io_give_ups", IO_STATS.give_ups),
            read_errors=counters.get("errors.read", 0),
        ),
        latency=Latency(
            p50=_round(percentile(latencies, 0.5)),
            p95=_round(percentile(latencies, 0.95)),
            maximum=_round(max(latencies) if latencies else None),
            samples=len(latencies),
        ),
        throughput=Throughput(
            lines=lines,
            bytes_read=read,
            lines_per_second=round(lines / uptime, 2) if uptime else None,
            bytes_per_second=round(read / uptime, 1) if uptime else None,
        ),
        tracker=_tracker(daemon.get("tracker") or {}),
        archive=archive,
        databases=Databases(
            state=DatabaseFiles(str(store.path), tuple(str(path) for path in moved_state)),
            archive=DatabaseFiles(
                str(store.path.parent / ARCHIVE_NAME), tuple(str(path) for path in moved_archive)
            ),
        ),
        errors=errors,
        riffd=riffd,
    )


def _blocked(
    daemon: dict[str, Any], now: float, seen_at: float | None, uptime: float | None, full: bool
) -> str | None:
    """What keeps a running daemon from working, as a problem: its figures not refreshed, or none
    stored since it started; None when nothing does (a full disk alone the caller names)."""
    if not daemon.get("running"):
        return None
    if seen_at is not None and now - seen_at > STUCK_SECONDS:
        return (
            f"the daemon (pid {daemon.get('pid')}) has not refreshed its figures for {now - seen_at:.0f} s: "
            + (
                "it cannot write them (the disk is full)"
                if full
                else "it may be stuck (its log says more; restarting it is safe)"
            )
        )
    if daemon.get("unpublished") and uptime is not None and uptime > STUCK_SECONDS:
        return (
            f"the daemon (pid {daemon.get('pid')}) started {uptime:.0f} s ago and has stored no figures yet: "
            + (
                "it cannot write them (the disk is full)"
                if full
                else "it cannot write to its state folder, or is stuck (its log says which; restarting it is safe)"
            )
        )
    return None


def _local_time(seconds: float | None) -> datetime | None:
    """`seconds` (Unix time) as a local time to the second; None for None (or 0: never)."""
    return datetime.fromtimestamp(seconds).astimezone().replace(microsecond=0) if seconds else None


def _last_seen(daemon: dict[str, Any]) -> str:
    """' (last seen at <local time>, pid N)' for a stopped daemon's figures, '' when none was ever
    seen."""
    seen = _local_time(float(daemon["seen_at"])) if daemon.get("seen_at") else None
    if seen is None:
        return ""
    return f" (last seen at {seen.isoformat(timespec='seconds')}, pid {daemon.get('pid')})"


def _reload(value: Any) -> Reload | None:
    """The snapshot's `last_reload` ({time, ok, errors}), or None when there was none."""
    if not isinstance(value, dict):
        return None
    return Reload(
        time=value.get("time", 0.0),
        ok=value.get("ok", True),  # failed only when it says so
        errors=tuple(value.get("errors") or ()),
    )


def _error(error: dict[str, Any]) -> ErrorRecord:
    """One of the snapshot's `errors` ({time, message, suggestion, about})."""
    return ErrorRecord(
        time=error.get("time", 0),
        message=error.get("message", ""),
        suggestion=error.get("suggestion", ""),
        about=error.get("about"),
    )


def _tracker(stats: dict[str, Any]) -> TrackerFigures:
    """The tool-call tracker's figures since the daemon started (zeros when it does not run)."""
    return TrackerFigures(
        calls_seen=stats.get("calls_seen", 0),
        redundant=stats.get("redundant", 0),
        by_tool=stats.get("by_tool", {}),
        top_sessions=tuple(
            TopSession(
                session=item["session"],
                redundant=item["redundant"],
                bytes_wasted=item["bytes_wasted"],
            )
            for item in stats.get("top_sessions", [])
        ),
        bytes_wasted=stats.get("bytes_wasted", 0),
    )


def _archive(figures: dict[str, Any], now: float) -> ArchiveFigures:
    """The archive's figures the daemon gathered (each None when it did not, or could not), with
    when it gathered them and their age at `now`."""
    at_risk = figures.get("cleanup_at_risk")
    gathered = figures.get("at")
    return ArchiveFigures(
        stored_bytes=figures.get("stored_bytes"),
        raw_bytes=figures.get("raw_bytes"),
        whole_bytes=figures.get("whole_bytes"),
        ratio=figures.get("ratio"),
        sessions=figures.get("sessions"),
        files_behind=figures.get("files_behind"),
        bytes_behind=figures.get("bytes_behind"),
        cleanup_days=figures.get("cleanup_days"),
        cleanup_at_risk=None if at_risk is None else tuple(at_risk),
        cleanup_at_risk_count=figures.get("cleanup_at_risk_count"),
        as_of=_local_time(gathered),
        age_seconds=None if gathered is None else round(max(0.0, now - float(gathered)), 1),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _backups(backup_dir: Path) -> BackupFigures:
    if not backup_dir.is_dir():
        return BackupFigures(count=0, total_bytes=0, oldest=None)
    # here: `riffd status` starts without the repair machinery
    from riffd.repair.backup import BackupStore

    records = BackupStore(backup_dir).list()
    oldest = min((record.created_at for record in records), default=None)
    return BackupFigures(
        count=len(records),
        total_bytes=sum(record.stored_bytes for record in records),
        oldest=oldest,
    )
