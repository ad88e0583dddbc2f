"""latest.html: the health report as one page to look at, self-contained (inline CSS and SVG, no
script, no request: its Content-Security-Policy forbids any), written beside latest.json.

It shows the verdict and its problems, the figures in words (open and informational findings, the
archive), every finding that needs attention with the command that deals with it, the recent repairs
with their backups, and the charts of `charts` over the hourly history the daemon keeps (90 days),
each ending on the report's own figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any

from riffd.display import shell_command
from riffd.reports.charts import charts
from riffd.reports.markdown import archive_age, seen_words, stopped_figures_note
from riffd.reports.model import HealthReport, HistoryPoint, RecentRepair, verdict_words


def history_point(report: HealthReport) -> dict[str, Any]:
    """The figures of a report the charts draw, as the state store keeps them once an hour."""
    return {
        "open": dict(report.findings.open),
        "repairs": report.repairs.done,
        "archive_stored": report.archive.stored_bytes,
        "archive_raw": report.archive.raw_bytes,
        "latency_p50": report.latency.p50,
        "latency_p95": report.latency.p95,
        "at": report.generated_at.timestamp(),
    }


def history_points(stored: Sequence[tuple[int, dict[str, Any]]]) -> list[HistoryPoint]:
    """The state store's hourly points (hour, figures), oldest first, as the charts read them: a
    figure a point lacks (one kept by an earlier riffd) is None."""
    return [
        HistoryPoint(
            hour=hour,
            open=point.get("open") or {},
            repairs=_number(point.get("repairs")),
            archive_stored=_number(point.get("archive_stored")),
            archive_raw=_number(point.get("archive_raw")),
            latency_p50=_number(point.get("latency_p50")),
            latency_p95=_number(point.get("latency_p95")),
            at=_number(point.get("at")),
        )
        for hour, point in stored
    ]


def recent_repairs(stored: Sequence[dict[str, Any]]) -> list[RecentRepair]:
    """The state store's recent repair attempts (newest first) as the page lists them."""
    return [
        RecentRepair(
            time=row["time"],
            path=row["path"],
            outcome=row["outcome"],
            reason=row.get("reason"),
            backup_id=row.get("backup_id"),
            fixes=row["fixes"],
            detail=row.get("detail"),
        )
        for row in stored
    ]


def _number(value: object) -> float | None:
    return value if isinstance(value, int | float) else None


def _local(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="minutes")


def render_page(
    report: HealthReport, history: Sequence[HistoryPoint], repairs: Sequence[RecentRepair]
) -> str:
    """Return latest.html for `report`, with the hourly `history` (oldest first) and the recent
    `repairs` (newest first)."""
    healthy, daemon, files = report.healthy, report.daemon, report.files
    verdict = verdict_words(report)
    problems = "".join(f"<li>{escape(problem)}</li>" for problem in report.problems)
    attention_rows = "".join(
        f'<tr class="{escape(item.state)}"><td><code>{escape(item.path)}</code></td>'
        f"<td>{escape(', '.join(map(str, item.lines[:5])))}</td><td>{escape(item.finding_class)}</td>"
        f"<td>{escape(item.state.replace('_', ' '))}</td><td>{_commands(item.action)}</td></tr>"
        for item in report.attention
    )
    repair_rows = "".join(
        f"<tr><td>{escape(_local(item.time))}</td><td><code>{escape(item.path)}</code></td>"
        f"<td>{escape(item.outcome + (': ' + item.reason if item.reason else ''))}</td>"
        f"<td>{escape(', '.join(f'{name} {count}' for name, count in item.fixes.items()) or '-')}</td>"
        f"<td>{_backup(item.backup_id, report.riffd)}</td></tr>"
        for item in repairs
    )
    state = "stopped" if not daemon.running else "starting" if daemon.starting else "running"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>riffd: {escape(verdict)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
.verdict {{ padding: .6em 1em; border-radius: 6px; color: #fff; background: {
        "#3d9970" if healthy else "#777" if healthy is None else "#d1495b"
    }; }}
table {{ border-collapse: collapse; width: 100%; margin: .5em 0 1.5em; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .3em .5em; text-align: left; vertical-align: top; }}
tr.acknowledged {{ color: #888; }}
code {{ font-size: 12px; word-break: break-all; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; }}
figure {{ margin: 0; }} figcaption {{ font-weight: 600; }}
svg text {{ font-size: 10px; fill: #555; }} .axis {{ stroke: #999; }}
.legend, .empty, .since {{ font-size: 12px; color: #555; }}
</style></head>
<body>
<h1>riffd health report</h1>
<p class="verdict"><strong>{escape(verdict)}</strong> &middot;
{escape(_local(report.generated_at.timestamp()))}</p>
{f"<ul class='problems'>{problems}</ul>" if problems else ""}
{f"<p class='since'>{escape(note)}</p>" if (note := stopped_figures_note(report)) else ""}
<p>Daemon: {escape(state)}{f", pid {daemon.pid}" if daemon.pid else ""}{
        f", {escape(daemon.repair_mode)} mode" if daemon.repair_mode else ""
    }. Files watched:
{files.watched}; with findings: {files.with_findings}; repairs done:
{report.repairs.done}; backups: {report.backups.count}.</p>
<p class="figures">{escape(_figures_words(report))}</p>
<h2>Needs attention ({len(report.attention)})</h2>
{
        f"<table><tr><th>file</th><th>lines</th><th>class</th><th>state</th><th>what deals with it</th></tr>"
        f"{attention_rows}</table>"
        if attention_rows
        else "<p>Nothing.</p>"
    }
<h2>Recent repairs</h2>
{
        f"<table><tr><th>when</th><th>file</th><th>outcome</th><th>repaired</th><th>backup</th></tr>{repair_rows}</table>"
        if repair_rows
        else "<p>None yet.</p>"
    }
<h2>Over time</h2>
<div class="charts">{"".join(charts(report, history))}</div>
</body></html>
"""


def _figures_words(report: HealthReport) -> str:
    """The figures the charts end on, in words: open and informational findings by class, and the
    archive (with the age of its figures)."""
    findings, archive = report.findings, report.archive

    def counts(by_class: Mapping[str, int]) -> str:
        return ", ".join(f"{name} {count}" for name, count in by_class.items()) or "none"

    words = (
        f"Open findings: {counts(findings.open)} ({sum(findings.open.values())} in all). "
        f"Informational (never unhealthy): {counts(findings.informational)}. "
    )
    if archive.stored_bytes is None:
        return words + "Archive: no figures yet."
    return (
        words + f"Archive: {archive.stored_bytes:,} bytes on disk for {seen_words(archive)}, "
        f"{archive.sessions} session(s); behind: {archive.files_behind} file(s)"
        + archive_age(archive)
        + "."
    )


def _commands(action: str) -> str:
    """The action text with its `commands` as <code>."""
    parts = action.split("`")
    return "".join(
        f"<code>{escape(part)}</code>" if number % 2 else escape(part)
        for number, part in enumerate(parts)
    )


def _backup(backup_id: str | None, riffd: str) -> str:
    if not backup_id:
        return "-"
    restore = f"{riffd} {shell_command('backups', 'restore', backup_id)}"
    return f"<code>{escape(backup_id)}</code><br><code>{escape(restore)}</code>"
