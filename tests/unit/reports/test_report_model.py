"""The health report's typed model and its renderers: the JSON schema's keys in their order, paths
that are not UTF-8 shown in every rendering without changing the report, and the page's history as
an earlier riffd kept it."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from riffd.reports.build import build_report
from riffd.reports.html import history_point, history_points, render_page
from riffd.reports.json import render_json, report_document
from riffd.reports.markdown import render_markdown
from riffd.reports.model import HealthReport, displayed_values
from riffd.reports.prometheus import render_metrics
from riffd.state.records import Watermark
from riffd.state.store import StateStore

UNDECODABLE = "/p/caf\udce9.jsonl"  # the byte 0xe9 alone: not UTF-8
SHOWN = "/p/caf\\xe9.jsonl"

# Schema 1, as the README documents it: a key renamed, removed or moved changes every report file.
SCHEMA_1 = {
    "": [
        "schema",
        "generated_at",
        "healthy",
        "problems",
        "daemon",
        "watcher",
        "queue",
        "files",
        "attention",
        "attention_total",
        "findings",
        "repairs",
        "backups",
        "io",
        "latency_seconds",
        "throughput",
        "tracker",
        "archive",
        "databases",
        "errors",
    ],
    "daemon": [
        "running",
        "starting",
        "blocked",
        "stopping",
        "last_seen",
        "figures_age_seconds",
        "repair_mode",
        "version",
        "pid",
        "uptime_seconds",
        "config_path",
        "last_reload",
    ],
    "daemon.last_reload": ["time", "ok", "errors"],
    "watcher": ["roots", "observer", "observer_reason", "missing_roots", "events", "rescans"],
    "queue": ["depth", "processed"],
    "files": ["watched", "with_findings", "repaired", "rechecking"],
    "attention.0": ["path", "class", "lines", "message", "repairable", "state", "action"],
    "findings": ["open", "acknowledged", "informational", "repaired", "pending"],
    "findings.pending.0": ["path", "tool_id", "line"],
    "repairs": ["done", "skipped", "failed"],
    "backups": ["count", "bytes", "oldest"],
    "io": ["retries", "give_ups", "read_errors"],
    "latency_seconds": ["p50", "p95", "max", "samples"],
    "throughput": ["lines", "bytes", "lines_per_second", "bytes_per_second"],
    "tracker": ["calls_seen", "redundant", "by_tool", "top_sessions", "bytes_wasted"],
    "tracker.top_sessions.0": ["session", "redundant", "bytes_wasted"],
    "archive": [
        "stored_bytes",
        "raw_bytes",
        "ratio",
        "sessions",
        "files_behind",
        "bytes_behind",
        "cleanup_days",
        "cleanup_at_risk",
        "cleanup_at_risk_count",
        "as_of",
        "age_seconds",
        "whole_bytes",
    ],
    "databases": ["state", "archive"],
    "databases.state": ["path", "moved_aside"],
    "errors.0": ["time", "message", "suggestion", "about"],
}


def full_report(tmp_path: Path) -> HealthReport:
    """A report with every part filled: an open finding at a path that is not UTF-8, a pending tool
    call, a repair, and a running daemon's figures (a failed reload, an error, the tracker's top
    session, the archive)."""
    store = StateStore(tmp_path / "state" / "state.db")
    blank = Watermark(UNDECODABLE, 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    store.save_file(blank, "s", [{"class": "duplicate_tool_result", "lines": [7]}], 1)
    pending = {"class": "pending_tool_call", "lines": [3], "tool_id": "toolu_1"}
    store.save_file(replace(blank, path="/p/live.jsonl"), "s", [pending], 0)
    store.record_repair(
        "/p/b.jsonl", "repaired", None, "b1", Counter({"missing_tool_result": 1}), ""
    )
    now = time.time()
    snapshot = {
        "running": True,
        "pid": 42,
        "started": now - 60,
        "seen_at": now,
        "roots": ["/p"],
        "latencies": [0.1, 0.3],
        "last_reload": {"time": now, "ok": False, "errors": ["log.level: loud"]},
        "errors": [
            {"time": now, "message": f"{UNDECODABLE}: EIO", "suggestion": "", "about": None}
        ],
        "tracker": {
            "calls_seen": 3,
            "redundant": 1,
            "by_tool": {"Read": 1},
            "top_sessions": [{"session": "s", "redundant": 1, "bytes_wasted": 9}],
            "bytes_wasted": 9,
        },
        "archive": {"stored_bytes": 10, "raw_bytes": 90, "ratio": 0.11, "sessions": 1},
    }
    report = build_report(store, tmp_path / "backups", snapshot)
    store.close()
    return report


def test_the_json_document_keeps_schema_1s_keys_in_their_order(tmp_path: Path) -> None:
    document = report_document(full_report(tmp_path))
    for where, keys in SCHEMA_1.items():
        part: object = document
        for step in filter(None, where.split(".")):
            assert isinstance(part, dict | list), where
            part = part[int(step)] if isinstance(part, list) else part[step]
        assert isinstance(part, dict) and list(part) == keys, where
    assert document["schema"] == 1 and document["healthy"] is False
    assert document["attention_total"] == 1 and document["findings"]["pending"][0]["line"] == 3


def test_a_path_that_is_not_utf8_is_shown_in_every_format_and_the_report_keeps_it(
    tmp_path: Path,
) -> None:
    report = full_report(tmp_path)
    with pytest.raises(orjson.JSONEncodeError):  # the real name cannot be written as JSON
        render_json(report)
    shown = displayed_values(report)
    assert report.attention[0].path == UNDECODABLE  # the report itself is left as it was
    assert shown.attention[0].path == SHOWN and shown.errors[0].message == f"{SHOWN}: EIO"
    assert shown.attention[0].action == report.attention[0].action  # $'...\xe9...' is ASCII
    document = orjson.loads(render_json(shown))
    assert document["attention"][0]["path"] == SHOWN
    assert f"needs attention: {SHOWN} line 7" in render_markdown(shown)
    assert f"<code>{SHOWN}</code>" in render_page(shown, [], [])
    assert "riffd_files_with_findings 1" in render_metrics(shown)


def test_the_page_draws_history_points_an_earlier_riffd_kept(tmp_path: Path) -> None:
    report = full_report(tmp_path)
    hour = int(time.time() // 3600)
    (older, newer) = history_points([(hour - 1, {"repairs": 2}), (hour, history_point(report))])
    assert older.open == {} and older.repairs == 2 and older.latency_p95 is None
    assert newer.open == {"duplicate_tool_result": 1} and newer.repairs == 1
    assert newer.archive_raw == 90 and newer.latency_p50 == report.latency.p50
    page = render_page(report, [older, newer], [])
    # Open findings (0 where a point has none) and repairs: lines; the archive's and the latency's
    # figures, which only the newer point has (the report's own moment: one point): a dot each.
    assert page.count("<polyline") == 2 and page.count("<circle") == 4
