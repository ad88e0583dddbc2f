"""Writing the report files (`latest.json`, `latest.md`, `latest.html`, `metrics.prom`) each
whole, private, and reading the last one back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from riffd.display import displayed
from riffd.fsio import replace_file
from riffd.reports.build import TEMP_MAX_AGE
from riffd.reports.markdown import render_markdown
from riffd.reports.prometheus import render_metrics


def write_report(
    report: dict[str, Any],
    folder: Path,
    keep: int,
    history: Sequence[tuple[int, dict[str, Any]]] = (),
    repairs: Sequence[dict[str, Any]] = (),
) -> Path:
    """Write the report as `report-<time>.json`, `latest.json`, `latest.md`, `metrics.prom` and
    `latest.html` (with the hourly `history` and the recent `repairs`), each atomically; prune the
    oldest timestamped reports beyond `keep`; return the timestamped file's path."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    report, repairs = (
        displayed(report),
        displayed(repairs),
    )  # a path that is not UTF-8 shown as display_path does
    stamp = (
        report["generated_at"]
        .replace("-", "")
        .replace(":", "")
        .replace("+0000", "Z")
        .replace("+00:00", "Z")
    )
    data = orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n"
    timestamped = folder / f"report-{stamp}.json"
    _atomic_write(timestamped, data)
    _atomic_write(folder / "latest.json", data)
    _atomic_write(folder / "latest.md", render_markdown(report).encode())
    _atomic_write(folder / "metrics.prom", render_metrics(report).encode())
    from riffd.reports.html import render_page

    _atomic_write(folder / "latest.html", render_page(report, history, repairs).encode())
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
    """Return the latest report in `folder`, or None when there is none (or it cannot be read)."""
    try:
        value = orjson.loads((folder / "latest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
