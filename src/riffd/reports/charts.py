"""The charts of latest.html, as inline SVG: open findings by class, repairs, the archive's size
against the transcript bytes it holds, and event-to-done latency.

Each is drawn from the hourly history the daemon keeps and, as its last point, the report's own
figures at the report's moment: the value a chart ends on is the one the page's tables and words
show. The axes say when the history starts and ends (to the second when it spans less than an hour,
so the two ends never read the same), and the y axis has round ticks from 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from html import escape

from riffd.reports.model import HealthReport, HistoryPoint

WIDTH, HEIGHT, PAD, LEFT = 560, 180, 36, 64
COLOURS = ("#d1495b", "#2e86ab", "#edae49", "#00798c", "#6a4c93", "#3d9970", "#8d6a9f", "#ff851b")
Series = dict[str, list[tuple[float, float]]]


def current_point(report: HealthReport) -> HistoryPoint:
    """The report's own figures as a chart point (its `hour` is the hour it falls in)."""
    return HistoryPoint(
        hour=int(report.generated_at.timestamp() // 3600),
        open=dict(report.findings.open),
        repairs=float(report.repairs.done),
        archive_stored=_number(report.archive.stored_bytes),
        archive_raw=_number(report.archive.raw_bytes),
        latency_p50=report.latency.p50,
        latency_p95=report.latency.p95,
        at=report.generated_at.timestamp(),
    )


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def charts(report: HealthReport, history: Sequence[HistoryPoint]) -> list[str]:
    """The four charts of the page: the stored hours (oldest first), then the report's own figures
    at its moment."""
    moments = [point.at or point.hour * 3600.0 for point in history]
    moments.append(report.generated_at.timestamp())
    points = [*history, current_point(report)]
    classes = sorted({name for point in points for name in point.open})

    def series(figure: Callable[[HistoryPoint], float | None]) -> list[tuple[float, float]]:
        # one value per moment, the later one (the hour's point may be this very report's)
        by_moment = {
            moment: float(value)
            for moment, point in zip(moments, points, strict=True)
            if (value := figure(point)) is not None
        }
        return sorted(by_moment.items())

    def open_of(name: str) -> Callable[[HistoryPoint], float]:
        return lambda point: float(point.open.get(name, 0))

    open_series: Series = {name: series(open_of(name)) for name in classes} or {
        "all classes": series(lambda point: 0.0)
    }
    return [
        chart("Open findings by class", open_series),
        chart("Repairs done", {"repairs": series(lambda point: point.repairs)}),
        chart(
            "Archive",
            {
                "stored on disk": series(lambda point: point.archive_stored),
                "transcript bytes it holds": series(lambda point: point.archive_raw),
            },
            "B",
        ),
        chart(
            "Latency, event to done",
            {
                "p50": series(lambda point: point.latency_p50),
                "p95": series(lambda point: point.latency_p95),
            },
            "s",
        ),
    ]


def chart(title: str, series: Series, unit: str = "") -> str:
    """One line chart as inline SVG: a polyline (or a dot, for one point) per series, the time axis
    from its first point to its last, the y axis from 0 to a round top."""
    points = [point for values in series.values() for point in values]
    head = f"<figure><figcaption>{escape(title)}</figcaption>"
    if not points:
        return head + '<p class="empty">no figures yet</p></figure>'
    x_low, x_high = min(x for x, _ in points), max(x for x, _ in points)
    y_top = round_top(max(y for _, y in points), unit)
    x_span = x_high - x_low

    def place(x: float, y: float) -> str:
        left = LEFT + ((x - x_low) / x_span if x_span else 1.0) * (WIDTH - LEFT - PAD)
        return f"{left:.1f},{HEIGHT - PAD - y / y_top * (HEIGHT - 2 * PAD):.1f}"

    first, last = time_labels(x_low, x_high)
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{LEFT}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<line x1="{LEFT}" y1="{PAD}" x2="{LEFT}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text class="ytick" x="{LEFT - 4}" y="{PAD + 4}" text-anchor="end">'
        f"{escape(figure(y_top, unit))}</text>",
        f'<text class="ytick" x="{LEFT - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
        f'<text class="xtick" x="{WIDTH - PAD}" y="{HEIGHT - 8}" text-anchor="end">'
        f"{escape(last)}</text>",
    ]
    if unit or (y_top / 2).is_integer():  # no half a finding on a count's axis
        parts.append(
            f'<text class="ytick" x="{LEFT - 4}" y="{HEIGHT / 2 + 4}" text-anchor="end">'
            f"{escape(figure(y_top / 2, unit))}</text>"
        )
    if first is not None:
        parts.append(f'<text class="xtick" x="{LEFT}" y="{HEIGHT - 8}">{escape(first)}</text>')
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
            f"({escape(figure(values[-1][1], unit)) if values else '-'} now)"
        )
    parts.append("</svg>")
    since = (
        f"history from {_moment(x_low, x_span)}; a point an hour, the last one now"
        if x_span
        else "one moment so far: the daemon adds a point every hour"
    )
    return (
        head
        + "".join(parts)
        + f'<p class="legend">{" &nbsp; ".join(legend)}</p>'
        + f'<p class="since">{escape(since)}</p></figure>'
    )


def round_top(highest: float, unit: str = "") -> float:
    """The top of a y axis: the smallest 1, 2 or 5 times a power of ten at or above `highest` (1
    for counts at most, and 1 ms for seconds, when all is 0)."""
    floor = 0.001 if unit == "s" else 1.0
    if highest <= floor:
        return floor
    power = 10.0 ** math.floor(math.log10(highest))
    for step in (1.0, 2.0, 5.0, 10.0):
        if highest <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def time_labels(first: float, last: float) -> tuple[str | None, str]:
    """The labels of a time axis from `first` to `last`: None for the first when they are one
    moment; to the second when they are less than an hour apart, so the two never read the same."""
    if last == first:
        return None, _moment(last, 0)
    return _moment(first, last - first), _moment(last, last - first)


def _moment(seconds: float, span: float) -> str:
    stamp = datetime.fromtimestamp(seconds).astimezone()
    return stamp.isoformat(timespec="seconds" if span < 3600 else "minutes")


def figure(value: float, unit: str = "") -> str:
    """A figure for an axis or a legend: 1.9 MB, 47, 0.030 s, 5 ms."""
    if unit == "s" and 0 < abs(value) < 1:
        return f"{value * 1000:g} ms"
    for limit, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f} {prefix}{unit}"
    number = f"{value:g}" if value == int(value) else f"{value:.3g}"
    return f"{number} {unit}" if unit else number
