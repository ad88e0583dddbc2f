"""Health reports: what the daemon has seen and done, written atomically as JSON and Markdown.

A report is built from the state store (files, findings, repairs, counters) and, when the daemon
runs, its live snapshot (uptime, watcher, queue, latency). Files in the report folder:
`report-<UTC time>.json` (the newest `keep` are kept), `latest.json` and `latest.md`. The JSON
schema is versioned (`schema`) and documented in the README.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.archive.schema import ARCHIVE_NAME
from riffd.database import FULL_BELOW, damaged_copies, free_bytes
from riffd.display import shell_word
from riffd.fsio import IO_STATS
from riffd.state.store import StateStore
from riffd.transcript.acks import Ack, AckFileError, Acknowledged, load_acks
from riffd.transcript.findings import INFORMATIONAL, REPAIRABLE, FindingClass

REPORT_SCHEMA = 1
REPAIRABLE_NAMES = frozenset(map(str, REPAIRABLE))
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
    store: StateStore, backup_dir: Path, daemon: dict[str, Any] | None
) -> dict[str, Any]:
    """Given the state store, the backup folder and the daemon's snapshot (its live figures,
    `running` true only when that daemon runs now; a stopped daemon's last figures; or None when
    none was ever seen), return the report as a JSON-ready dict."""
    now = time.time()
    daemon = daemon or {}
    watched = store.count_files()
    findings = _findings(store, daemon.get("repair_mode"))
    repairs = store.repair_summary()
    counters = store.counters()
    backups = _backup_summary(backup_dir)
    running = bool(daemon.get("running"))
    latencies = [float(value) for value in daemon.get("latencies", [])]
    errors = [
        error
        for error in daemon.get("errors", [])
        if now - float(error.get("time", 0)) < RECENT_SECONDS
    ]
    seen_at = float(daemon["seen_at"]) if daemon.get("seen_at") else None
    state_dir = store.path.parent
    free = free_bytes(state_dir)
    full = free is not None and free < FULL_BELOW
    uptime = now - float(daemon["started"]) if running and daemon.get("started") else None
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
    blocked = None
    if running and seen_at is not None and now - seen_at > STUCK_SECONDS:
        blocked = (
            f"the daemon (pid {daemon.get('pid')}) has not refreshed its figures for {now - seen_at:.0f} s: "
            + (
                "it cannot write them (the disk is full)"
                if full
                else "it may be stuck (its log says more; restarting it is safe)"
            )
        )
    elif running and daemon.get("unpublished") and uptime is not None and uptime > STUCK_SECONDS:
        blocked = (
            f"the daemon (pid {daemon.get('pid')}) started {uptime:.0f} s ago and has stored no figures yet: "
            + (
                "it cannot write them (the disk is full)"
                if full
                else "it cannot write to its state folder, or is stuck (its log says which; restarting it is safe)"
            )
        )
    elif running and full:
        blocked = problems[0]
    if not running and daemon.get("stopping"):
        problems.append(
            f"the riffd daemon (pid {daemon.get('pid')}) is stopping: it finishes what is queued and exits "
            "(`riffd run`, or the service, starts it again)"
        )
    elif not running:
        problems.append(
            f"no riffd daemon runs{_last_seen(daemon)} (`riffd run`, or `riffd service install`)"
        )
    elif blocked is not None and blocked not in problems:
        problems.append(blocked)
    if errors:
        problems.append(f"{len(errors)} error(s) in the last hour: see `errors`")
    damage, with_findings = findings["open"], findings["files"]
    if damage:
        problems.append(
            f"{sum(damage.values())} open finding(s) in {with_findings} file(s): each is listed under "
            "`attention` with what deals with it"
        )
    if findings["ack_error"]:
        problems.append(findings["ack_error"])
    moved_state, moved_archive = (
        damaged_copies(store.path),
        damaged_copies(store.path.parent / ARCHIVE_NAME),
    )
    if moved_archive:
        problems.append(
            f"the archive was damaged and moved aside to {moved_archive[-1]}: `riffd archive recover` "
            "copies its readable lines into the new archive"
        )
    at_risk = (daemon.get("archive") or {}).get("cleanup_at_risk_count")
    if at_risk:
        days = (daemon.get("archive") or {}).get("cleanup_days")
        problems.append(
            f"{at_risk} transcript(s) not (fully) archived are due for deletion by Claude Code's cleanup "
            f"(cleanupPeriodDays {days:g}) within a week: `archive.cleanup_at_risk` names them; "
            "`riffd archive ingest` archives them now"
        )
    if (daemon.get("last_reload") or {}).get("ok") is False:
        problems.append(
            "the last configuration reload failed; the previous configuration is still in use"
        )
    lines, read = counters.get("lines.processed", 0), counters.get("bytes.read", 0)
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        "healthy": not problems,
        "problems": problems,
        "daemon": {
            "running": running,
            "starting": bool(running and daemon.get("starting")),
            "blocked": blocked,
            "stopping": bool(daemon.get("stopping")),
            "last_seen": _iso(seen_at),
            "figures_age_seconds": round(now - seen_at, 1) if seen_at is not None else None,
            "repair_mode": daemon.get("repair_mode"),
            "version": daemon.get("version", __version__),
            "pid": daemon.get("pid"),
            "uptime_seconds": round(uptime, 1) if uptime is not None else None,
            "config_path": daemon.get("config_path"),
            "last_reload": daemon.get("last_reload"),
        },
        "watcher": {
            "roots": daemon.get("roots", []),
            "observer": daemon.get("observer"),
            "observer_reason": daemon.get("observer_reason"),
            "events": daemon.get("events", 0),
            "rescans": daemon.get("rescans", 0),
        },
        "queue": {"depth": daemon.get("queue_depth", 0), "processed": daemon.get("processed", 0)},
        "files": {
            "watched": watched,
            "with_findings": with_findings,
            "repaired": repairs["files_repaired"],
        },
        "attention": findings["attention"][:ATTENTION_LISTED],
        "attention_total": len(findings["attention"]),
        "findings": {
            "open": dict(sorted(damage.items())),
            "acknowledged": dict(sorted(findings["acknowledged"].items())),
            "informational": dict(sorted(findings["informational"].items())),
            "repaired": repairs["findings_repaired_by_class"],
            "pending": [
                {"path": path, "tool_id": item.get("tool_id"), "line": item["lines"][0]}
                for path, item in store.findings_of_class(FindingClass.PENDING_TOOL_CALL)
            ],
        },
        "repairs": {
            "done": repairs["done"],
            "skipped": repairs["skipped_by_reason"],
            "failed": repairs["failed_by_reason"],
        },
        "backups": backups,
        "io": {
            "retries": daemon.get("io_retries", IO_STATS.retries),
            "give_ups": daemon.get("io_give_ups", IO_STATS.give_ups),
            "read_errors": counters.get("errors.read", 0),
        },
        "latency_seconds": {
            "p50": _round(percentile(latencies, 0.5)),
            "p95": _round(percentile(latencies, 0.95)),
            "max": _round(max(latencies) if latencies else None),
            "samples": len(latencies),
        },
        "throughput": {
            "lines": lines,
            "bytes": read,
            "lines_per_second": round(lines / uptime, 2) if uptime else None,
            "bytes_per_second": round(read / uptime, 1) if uptime else None,
        },
        "tracker": _tracker_summary(daemon.get("tracker") or {}),
        "archive": {
            key: (daemon.get("archive") or {}).get(key)
            for key in (
                "stored_bytes",
                "raw_bytes",
                "ratio",
                "sessions",
                "files_behind",
                "bytes_behind",
                "cleanup_days",
                "cleanup_at_risk",
                "cleanup_at_risk_count",
            )
        },
        "databases": {
            "state": {"path": str(store.path), "moved_aside": [str(path) for path in moved_state]},
            "archive": {
                "path": str(store.path.parent / ARCHIVE_NAME),
                "moved_aside": [str(path) for path in moved_archive],
            },
        },
        "errors": errors,
    }


def _iso(seconds: float | None) -> str | None:
    return (
        datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")
        if seconds
        else None
    )


def _last_seen(daemon: dict[str, Any]) -> str:
    """' (last seen at <local time>, pid N)' for a stopped daemon's figures, '' when none was ever
    seen."""
    if not daemon.get("seen_at"):
        return ""
    return f" (last seen at {_iso(float(daemon['seen_at']))}, pid {daemon.get('pid')})"


def _tracker_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """The tool-call tracker's figures since the daemon started (zeros when it does not run)."""
    return {
        "calls_seen": stats.get("calls_seen", 0),
        "redundant": stats.get("redundant", 0),
        "by_tool": stats.get("by_tool", {}),
        "top_sessions": stats.get("top_sessions", []),
        "bytes_wasted": stats.get("bytes_wasted", 0),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _backup_summary(backup_dir: Path) -> dict[str, Any]:
    if not backup_dir.is_dir():
        return {"count": 0, "bytes": 0, "oldest": None}
    from riffd.repair.backup import (
        BackupStore,
    )  # here: `riffd status` starts without the repair machinery

    records = BackupStore(backup_dir).list()
    oldest = min((record.created_at for record in records), default=None)
    return {
        "count": len(records),
        "bytes": sum(record.stored_bytes for record in records),
        "oldest": oldest.isoformat(timespec="seconds") if oldest else None,
    }


def _findings(store: StateStore, mode: str | None) -> dict[str, Any]:
    """Every stored finding sorted out: open damage by class (and the files holding it),
    acknowledged and informational findings by class, and the `attention` list (open first, then
    acknowledged)."""
    try:
        acks, ack_error = Acknowledged(load_acks(store.path.parent)), ""
    except (
        AckFileError
    ) as exc:  # a broken file must not hide damage: nothing counts as acknowledged
        acks, ack_error = Acknowledged(()), f"acknowledgements not applied: {exc}"
    damage: Counter[str] = Counter()
    acknowledged: Counter[str] = Counter()
    informational: Counter[str] = Counter()
    files: set[str] = set()
    listed, later = [], []
    for path, item, waiting in store.all_findings():
        cls = str(item.get("class"))
        if cls in INFORMATIONAL:
            informational[cls] += 1
            continue
        ack = acks.of(path, item) if acks else None
        if ack is not None:
            acknowledged[cls] += 1
            later.append(attention(path, item, waiting, mode, ack))
        else:
            damage[cls] += 1
            files.add(path)
            listed.append(attention(path, item, waiting, mode))
    return {
        "open": damage,
        "files": len(files),
        "acknowledged": acknowledged,
        "informational": informational,
        "attention": listed + later,
        "ack_error": ack_error,
    }


def attention(
    path: str,
    finding: dict[str, Any],
    waiting: bool,
    mode: str | None = None,
    ack: Ack | None = None,
) -> dict[str, Any]:
    """One finding as the report lists it: the file, the class, the lines, its state
    (waiting_for_repair, not_repaired: riffd tried and it was not safe, never_repaired: a class
    riffd does not edit, acknowledged) and the command that deals with it."""
    cls = str(finding.get("class"))
    lines = finding.get("lines") or []
    quoted = shell_word(path)
    where = shell_word(f"{path}:{lines[0]}") if lines else quoted
    if ack is not None:
        state = "acknowledged"
        action = (
            f"acknowledged {ack.at}"
            + (f" ({ack.note})" if ack.note else "")
            + f"; `riffd ack --undo {where}` counts it again"
        )
    elif cls in REPAIRABLE_NAMES and mode == "report-only":
        state = "waiting_for_repair"
        action = f"report-only mode: riffd does not repair; `riffd fix {quoted}` does, once the session is idle"
    elif cls in REPAIRABLE_NAMES and waiting:
        state = "waiting_for_repair"
        action = f"riffd repairs it once the session is idle; now: `riffd fix {quoted}`"
    elif cls in REPAIRABLE_NAMES:
        state = "not_repaired"
        action = (
            f"riffd could not repair it safely (see `repairs`); `riffd fix --dry-run {quoted}` says why; "
            f"`riffd ack {where}` accepts it as it is"
        )
    else:
        state = "never_repaired"
        action = (
            f"riffd never edits this ({cls}): `riffd show {quoted}` shows where; if the session resumes "
            f"well, `riffd ack {where}` acknowledges it"
        )
    return {
        "path": path,
        "class": cls,
        "lines": lines,
        "message": finding.get("message", ""),
        "repairable": cls in REPAIRABLE_NAMES,
        "state": state,
        "action": action,
    }


TEMP_MAX_AGE = 600.0  # a report is written in milliseconds: an older temp file is a killed writer's
