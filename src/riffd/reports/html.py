"""latest.html: the health report as one page to look at, self-contained (inline CSS and SVG, no
script, no request: its Content-Security-Policy forbids any), written beside latest.json.

It shows the verdict and its problems, every finding that needs attention with the command that
deals with it, the recent repairs with their backups, and charts over the hourly history the daemon
keeps (90 days): open findings by class, repairs, the archive's size against the raw bytes it holds,
and event-to-done latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from typing import Any

from riffd.display import shell_command

WIDTH, HEIGHT, PAD, LEFT = 560, 180, 36, 64
COLOURS = ("#d1495b", "#2e86ab", "#edae49", "#00798c", "#6a4c93", "#3d9970", "#8d6a9f", "#ff851b")


def history_point(report: dict[str, Any]) -> dict[str, Any]:
    """The figures of a report the charts draw: kept once an hour."""
    archive = report.get("archive") or {}
    return {
        "open": report["findings"]["open"],
        "repairs": report["repairs"]["done"],
        "archive_stored": archive.get("stored_bytes"),
        "archive_raw": archive.get("raw_bytes"),
        "latency_p50": report["latency_seconds"]["p50"],
        "latency_p95": report["latency_seconds"]["p95"],
    }


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
    report: dict[str, Any],
    history: Sequence[tuple[int, dict[str, Any]]],
    repairs: Sequence[dict[str, Any]],
) -> str:
    """Return latest.html for `report`, with `history` (hour, point) and the recent `repairs`
    (newest first)."""
    healthy = report["healthy"]
    daemon = report["daemon"]
    verdict = "healthy" if healthy else "needs attention"
    problems = "".join(f"<li>{escape(problem)}</li>" for problem in report["problems"])
    attention_rows = "".join(
        f'<tr class="{escape(item.get("state", ""))}"><td><code>{escape(item["path"])}</code></td>'
        f"<td>{escape(', '.join(map(str, item['lines'][:5])))}</td><td>{escape(item['class'])}</td>"
        f"<td>{escape(item.get('state', '').replace('_', ' '))}</td><td>{_commands(item['action'])}</td></tr>"
        for item in report.get("attention", [])
    )
    repair_rows = "".join(
        f"<tr><td>{escape(_local(item['time']))}</td><td><code>{escape(item['path'])}</code></td>"
        f"<td>{escape(item['outcome'] + (': ' + item['reason'] if item.get('reason') else ''))}</td>"
        f"<td>{escape(', '.join(f'{name} {count}' for name, count in item['fixes'].items()) or '-')}</td>"
        f"<td>{_backup(item.get('backup_id'))}</td></tr>"
        for item in repairs
    )
    times = [hour * 3600.0 for hour, _ in history]
    open_classes = sorted({name for _, point in history for name in point.get("open", {})})
    charts = [
        chart(
            "Open findings by class",
            {
                name: [
                    (t, float(point.get("open", {}).get(name, 0)))
                    for t, (_, point) in zip(times, history, strict=True)
                ]
                for name in open_classes
            }
            or {"all classes": [(t, 0.0) for t in times]},
        ),
        chart("Repairs done", {"repairs": _series(times, history, "repairs")}),
        chart(
            "Archive",
            {
                "stored on disk": _series(times, history, "archive_stored"),
                "transcript bytes it holds": _series(times, history, "archive_raw"),
            },
            "B",
        ),
        chart(
            "Latency, event to done",
            {
                "p50": _series(times, history, "latency_p50"),
                "p95": _series(times, history, "latency_p95"),
            },
            "s",
        ),
    ]
    state = (
        "stopped" if not daemon["running"] else "starting" if daemon.get("starting") else "running"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>riffd: {escape(verdict)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
.verdict {{ padding: .6em 1em; border-radius: 6px; color: #fff; background: {
        "#3d9970" if healthy else "#d1495b"
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
{escape(_local(datetime.fromisoformat(report["generated_at"]).timestamp()))}</p>
{f"<ul class='problems'>{problems}</ul>" if problems else ""}
<p>Daemon: {escape(state)}{f", pid {daemon['pid']}" if daemon.get("pid") else ""}{
        f", {escape(daemon['repair_mode'])} mode" if daemon.get("repair_mode") else ""
    }. Files watched:
{report["files"]["watched"]}; with findings: {report["files"]["with_findings"]}; repairs done:
{report["repairs"]["done"]}; backups: {report["backups"]["count"]}.</p>
<h2>Needs attention ({len(report.get("attention", []))})</h2>
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
    times: list[float], history: Sequence[tuple[int, dict[str, Any]]], key: str
) -> list[tuple[float, float]]:
    return [
        (t, float(point[key]))
        for t, (_, point) in zip(times, history, strict=True)
        if isinstance(point.get(key), int | float)
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
