"""The health report as JSON (schema 1): `latest.json`, `report-<time>.json`, `riffd report --json`
and the `report` of `riffd status --json`. Its keys and their order are the schema the README
documents; this module is the one place that names them.
"""

from __future__ import annotations

from typing import Any

import orjson

from riffd.reports.model import (
    ArchiveFigures,
    AttentionItem,
    DaemonState,
    DatabaseFiles,
    ErrorRecord,
    FindingCounts,
    HealthReport,
    Reload,
    TrackerFigures,
    iso_seconds,
)

SCHEMA = 1  # the version of this document: a key renamed or removed makes it 2


def render_json(report: HealthReport) -> bytes:
    """Return the report as indented JSON, ending in a newline (as the report files hold it)."""
    return orjson.dumps(report_document(report), option=orjson.OPT_INDENT_2) + b"\n"


def report_document(report: HealthReport) -> dict[str, Any]:
    """Return the report as a JSON-ready dict, its keys in the schema's order."""
    return {
        "schema": SCHEMA,
        "generated_at": iso_seconds(report.generated_at),
        "healthy": report.healthy,
        "problems": list(report.problems),
        "daemon": _daemon(report.daemon),
        "watcher": {
            "roots": list(report.watcher.roots),
            "observer": report.watcher.observer,
            "observer_reason": report.watcher.observer_reason,
            "missing_roots": list(report.watcher.missing_roots),
            "events": report.watcher.events,
            "rescans": report.watcher.rescans,
        },
        "queue": {"depth": report.queue.depth, "processed": report.queue.processed},
        "files": {
            "watched": report.files.watched,
            "with_findings": report.files.with_findings,
            "repaired": report.files.repaired,
            "rechecking": report.files.rechecking,
        },
        "attention": [_attention(item) for item in report.attention],
        "attention_total": report.attention_total,
        "findings": _findings(report.findings),
        "repairs": {
            "done": report.repairs.done,
            "skipped": dict(report.repairs.skipped),
            "failed": dict(report.repairs.failed),
        },
        "backups": {
            "count": report.backups.count,
            "bytes": report.backups.total_bytes,
            "oldest": iso_seconds(report.backups.oldest),
        },
        "io": {
            "retries": report.io.retries,
            "give_ups": report.io.give_ups,
            "read_errors": report.io.read_errors,
        },
        "latency_seconds": {
            "p50": report.latency.p50,
            "p95": report.latency.p95,
            "max": report.latency.maximum,
            "samples": report.latency.samples,
        },
        "throughput": {
            "lines": report.throughput.lines,
            "bytes": report.throughput.bytes_read,
            "lines_per_second": report.throughput.lines_per_second,
            "bytes_per_second": report.throughput.bytes_per_second,
        },
        "tracker": _tracker(report.tracker),
        "archive": _archive(report.archive),
        "databases": {
            "state": _database(report.databases.state),
            "archive": _database(report.databases.archive),
        },
        "errors": [_error(error) for error in report.errors],
    }


def _daemon(daemon: DaemonState) -> dict[str, Any]:
    return {
        "running": daemon.running,
        "starting": daemon.starting,
        "blocked": daemon.blocked,
        "stopping": daemon.stopping,
        "last_seen": iso_seconds(daemon.last_seen),
        "figures_age_seconds": daemon.figures_age_seconds,
        "repair_mode": daemon.repair_mode,
        "version": daemon.version,
        "pid": daemon.pid,
        "uptime_seconds": daemon.uptime_seconds,
        "config_path": daemon.config_path,
        "last_reload": None if daemon.last_reload is None else _reload(daemon.last_reload),
    }


def _reload(reload: Reload) -> dict[str, Any]:
    return {"time": reload.time, "ok": reload.ok, "errors": list(reload.errors)}


def _attention(item: AttentionItem) -> dict[str, Any]:
    return {
        "path": item.path,
        "class": item.finding_class,
        "lines": list(item.lines),
        "message": item.message,
        "repairable": item.repairable,
        "state": item.state,
        "action": item.action,
    }


def _findings(findings: FindingCounts) -> dict[str, Any]:
    return {
        "open": dict(findings.open),
        "acknowledged": dict(findings.acknowledged),
        "informational": dict(findings.informational),
        "repaired": dict(findings.repaired),
        "pending": [
            {"path": call.path, "tool_id": call.tool_id, "line": call.line}
            for call in findings.pending
        ],
    }


def _tracker(tracker: TrackerFigures) -> dict[str, Any]:
    return {
        "calls_seen": tracker.calls_seen,
        "redundant": tracker.redundant,
        "by_tool": dict(tracker.by_tool),
        "top_sessions": [
            {
                "session": session.session,
                "redundant": session.redundant,
                "bytes_wasted": session.bytes_wasted,
            }
            for session in tracker.top_sessions
        ],
        "bytes_wasted": tracker.bytes_wasted,
    }


def _archive(archive: ArchiveFigures) -> dict[str, Any]:
    at_risk = archive.cleanup_at_risk
    return {
        "stored_bytes": archive.stored_bytes,
        "raw_bytes": archive.raw_bytes,
        "ratio": archive.ratio,
        "sessions": archive.sessions,
        "files_behind": archive.files_behind,
        "bytes_behind": archive.bytes_behind,
        "cleanup_days": archive.cleanup_days,
        "cleanup_at_risk": None if at_risk is None else list(at_risk),
        "cleanup_at_risk_count": archive.cleanup_at_risk_count,
        "as_of": iso_seconds(archive.as_of),
        "age_seconds": archive.age_seconds,
        "whole_bytes": archive.whole_bytes,
    }


def _database(database: DatabaseFiles) -> dict[str, Any]:
    return {"path": database.path, "moved_aside": list(database.moved_aside)}


def _error(error: ErrorRecord) -> dict[str, Any]:
    return {
        "time": error.time,
        "message": error.message,
        "suggestion": error.suggestion,
        "about": error.about,
    }
