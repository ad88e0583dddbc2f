"""latest.html: the health report as one page to look at, self-contained (inline CSS and SVG, no
script, no request: its Content-Security-Policy forbids any), written beside latest.json.

It shows the verdict and its problems, every finding that needs attention with the command that
deals with it, the recent repairs with their backups, and charts over the hourly history the daemon
keeps (90 days): open findings by class, repairs, the archive's size against the raw bytes it holds,
and event-to-done latency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from html import escape
from typing import Any

from riffd.display import shell_command
from riffd.reports.model import HealthReport, HistoryPoint, RecentRepair, verdict_words

WIDTH, HEIGHT, PAD, LEFT = 560, 180, 36, 64
COLOURS = ("#d1495b", "#2e86ab", "#edae49", "#00798c", "#6a4c93", "#3d9970", "#8d6a9f", "#ff851b")


def history_point(report: HealthReport) -> dict[str, Any]:
    """The figures of a report the charts draw, as the state store keeps them once an hour."""
    return {
        "open": dict(report.findings.open),
        "repairs": report.repairs.done,
        "archive_stored": report.archive.stored_bytes,
        "archive_raw": report.archive.raw_bytes,
        "latency_p50": report.latency.p50,
        "latency_p95": report.latency.p95,
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


def chart(title: str, series: dict[str, list[tuple[float, float]]], unit: str = "") -> str:
    """One line chart as inline SVG: a polyline (or a dot, for one point) per series, its range on
    the axes."""
    points = [point for values in series.values() for point in values]
    head = f"<figure><figcaption>{escape(title)}</figcaption>"
    if not points:
        return (
            head
            + '<p class="empty">no history yet: the daemon adds a point every hour</p></figure>'
        )
    x_low, x_high = min(x for x, _ in points), max(x for x, _ in points)
    y_high = max(max(y for _, y in points), 1e-9)
    x_span = (x_high - x_low) or 1.0

    def place(x: float, y: float) -> str:
        return (
            f"{LEFT + (x - x_low) / x_span * (WIDTH - LEFT - PAD):.1f},"
            f"{HEIGHT - PAD - y / y_high * (HEIGHT - 2 * PAD):.1f}"
        )

    parts = [
        f'<svg role="img" aria-label="{escape(title)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{LEFT}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<line x1="{LEFT}" y1="{PAD}" x2="{LEFT}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{LEFT - 4}" y="{PAD + 4}" text-anchor="end">{escape(_figure(y_high, unit))}</text>',
        f'<text x="{LEFT - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
        f'<text x="{LEFT}" y="{HEIGHT - 8}">{escape(_local(x_low))}</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">{escape(_local(x_high))}</text>',
    ]
    legend = []
    for number, (name, values) in enumerate(sorted(series.items())):
        colour = COLOURS[number % len(COLOURS)]
        if len(values) == 1:
            x, y = place(*values[0]).split(",")
            parts.append(f'<circle class="series" cx="{x}" cy="{y}" r="3" fill="{colour}"/>')
        elif values:
            coords = " ".join(place(x, y) for x, y in values)
            parts.append(
                f'<polyline class="series" points="{coords}" fill="none" stroke="{colour}" '
                'stroke-width="2"/>'
            )
        legend.append(
            f'<span style="color:{colour}">&#9632;</span> {escape(name)} '
            f"({escape(_figure(values[-1][1], unit)) if values else '-'} now)"
        )
    parts.append("</svg>")
    return head + "".join(parts) + f'<p class="legend">{" &nbsp; ".join(legend)}</p></figure>'


def _figure(value: float, unit: str = "") -> str:
    """A figure for an axis or a legend: 1.9 MB, 47, 0.030 s."""
    for limit, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f} {prefix}{unit}"
    number = f"{value:g}" if value == int(value) else f"{value:.3f}"
    return f"{number} {unit}" if unit else number


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
        f"<td>{_backup(item.backup_id)}</td></tr>"
        for item in repairs
    )
    times = [point.hour * 3600.0 for point in history]
    open_classes = sorted({name for point in history for name in point.open})
    charts = [
        chart(
            "Open findings by class",
            {
                name: [
                    (t, float(point.open.get(name, 0)))
                    for t, point in zip(times, history, strict=True)
                ]
                for name in open_classes
            }
            or {"all classes": [(t, 0.0) for t in times]},
        ),
        chart("Repairs done", {"repairs": _series(times, history, lambda p: p.repairs)}),
        chart(
            "Archive",
            {
                "stored on disk": _series(times, history, lambda p: p.archive_stored),
                "transcript bytes it holds": _series(times, history, lambda p: p.archive_raw),
            },
            "B",
        ),
        chart(
            "Latency, event to done",
            {
                "p50": _series(times, history, lambda p: p.latency_p50),
                "p95": _series(times, history, lambda p: p.latency_p95),
            },
            "s",
        ),
    ]
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
.legend, .empty {{ font-size: 12px; color: #555; }}
</style></head>
<body>
<h1>riffd health report</h1>
<p class="verdict"><strong>{escape(verdict)}</strong> &middot;
{escape(_local(report.generated_at.timestamp()))}</p>
{f"<ul class='problems'>{problems}</ul>" if problems else ""}
<p>Daemon: {escape(state)}{f", pid {daemon.pid}" if daemon.pid else ""}{
        f", {escape(daemon.repair_mode)} mode" if daemon.repair_mode else ""
    }. Files watched:
{files.watched}; with findings: {files.with_findings}; repairs done:
{report.repairs.done}; backups: {report.backups.count}.</p>
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
<div class="charts">{"".join(charts)}</div>
</body></html>
"""


def _series(
    times: list[float],
    history: Sequence[HistoryPoint],
    figure: Callable[[HistoryPoint], float | None],
) -> list[tuple[float, float]]:
    """(time, figure) for every point that has the figure."""
    return [
        (t, float(value))
        for t, point in zip(times, history, strict=True)
        if (value := figure(point)) is not None
    ]


def _commands(action: str) -> str:
    """The action text with its `commands` as <code>."""
    parts = action.split("`")
    return "".join(
        f"<code>{escape(part)}</code>" if number % 2 else escape(part)
        for number, part in enumerate(parts)
    )


def _backup(backup_id: str | None) -> str:
    if not backup_id:
        return "-"
    restore = shell_command("riffd", "backups", "restore", backup_id)
    return f"<code>{escape(backup_id)}</code><br><code>{escape(restore)}</code>"
