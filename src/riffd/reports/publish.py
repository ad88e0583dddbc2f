"""Writing the report files (`report-<time>.json`, `latest.json`, `latest.md`, `metrics.prom`,
`latest.html`) each whole, private, and reading the last one back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from riffd.fsio import replace_file
from riffd.reports.json import render_json
from riffd.reports.markdown import render_markdown
from riffd.reports.model import HealthReport, displayed_values
from riffd.reports.prometheus import render_metrics

TEMP_MAX_AGE = 600.0  # a report is written in milliseconds: an older temp file is a killed writer's


def write_report(
    report: HealthReport,
    folder: Path,
    keep: int,
    history: Sequence[tuple[int, dict[str, Any]]] = (),
    repairs: Sequence[dict[str, Any]] = (),
    metrics_readable: bool = False,
) -> Path:
    """Write the report as `report-<time>.json`, `latest.json`, `latest.md`, `metrics.prom` and
    `latest.html` (with the state store's hourly `history` and its recent `repairs`), each
    atomically and readable by its owner only, but metrics.prom (and the folder, to list it) when
    `metrics_readable` (reports.metrics_readable: node_exporter runs as its own user); prune the
    oldest timestamped reports beyond `keep`; return the timestamped file's path."""
    from riffd.reports.html import history_points, recent_repairs, render_page

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = folder.stat().st_mode & 0o7777
    if metrics_readable and mode & 0o055 != 0o055:  # others may list it and go in; no bit taken
        folder.chmod(mode | 0o055)
    # A path that is not UTF-8 shown as display_path does.
    report, shown_repairs = (
        displayed_values(report),
        displayed_values(recent_repairs(repairs)),
    )
    data = render_json(report)
    timestamped = folder / f"report-{report.generated_at.strftime('%Y%m%dT%H%M%SZ')}.json"
    _atomic_write(timestamped, data)
    _atomic_write(folder / "latest.json", data)
    _atomic_write(folder / "latest.md", render_markdown(report).encode())
    replace_file(
        folder / "metrics.prom",
        render_metrics(report).encode(),
        0o644 if metrics_readable else 0o600,
    )
    page = render_page(report, history_points(history), shown_repairs)
    _atomic_write(folder / "latest.html", page.encode())
    reports = sorted(folder.glob("report-*.json"))
    for old in reports[: max(0, len(reports) - keep)]:
        old.unlink(missing_ok=True)
    _remove_old_temps(folder)
    return timestamped


def _atomic_write(path: Path, data: bytes) -> None:
    # A name of its own per writer: the daemon's job, a reload's report and `riffd report` may write
    # at once.
    replace_file(path, data)


def _remove_old_temps(folder: Path) -> None:
    now = time.time()
    for temp in folder.glob(".*.tmp"):
        try:
            if now - temp.stat().st_mtime > TEMP_MAX_AGE:
                temp.unlink()
        except OSError:
            pass  # gone already, or not ours to remove: the next report tries again


def read_latest(folder: Path) -> dict[str, Any] | None:
    """Return the latest report in `folder` as the JSON document it holds (schema 1, as written by
    whichever riffd wrote it), or None when there is none (or it cannot be read)."""
    try:
        value = orjson.loads((folder / "latest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
