"""The charts of latest.html tell the truth of the page they are on: they end on the report's own
figures, keep the hours a short run did not measure, and have axes one can read."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

from riffd.reports.build import build_report
from riffd.reports.charts import chart, round_top
from riffd.reports.html import history_points, render_page
from riffd.state.records import Watermark
from riffd.state.store import StateStore


def test_each_chart_ends_on_the_figures_the_page_shows(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    mark = Watermark("/p/a.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    findings = [{"class": "duplicate_tool_result", "lines": [n], "message": "x"} for n in (3, 5)]
    store.save_file(mark, "s", [*findings, {"class": "redundant_tool_call", "lines": [7]}], 1)
    for number in range(4):
        store.record_repair(f"/p/{number}.jsonl", "repaired", None, "b", Counter(orphan=1), "")
    an_hour_ago = time.time() - 3600
    store.record_history({"open": {}, "repairs": 2, "latency_p50": 0.5}, an_hour_ago)
    report = build_report(store, tmp_path, {"running": True, "pid": 1, "latencies": [0.25]})
    page = render_page(report, history_points(store.history()), [])
    # the table has 2 open findings and 4 repairs done: the charts end there, not at the hour's
    assert "duplicate_tool_result (2 now)" in page and "repairs (4 now)" in page
    assert "repairs done:\n4" in page and "Needs attention (2)" in page
    assert "p50 (250 ms now)" in page
    # the figures in words too: informational findings and the archive
    assert "Informational (never unhealthy): redundant_tool_call 1" in page
    assert "Open findings: duplicate_tool_result 2 (2 in all)" in page


def test_a_short_run_merges_into_the_hours_point_instead_of_replacing_it(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    now = time.time()
    store.record_history({"open": {"orphan": 1}, "repairs": 3, "latency_p50": 0.2}, now)
    store.record_history({"open": {}, "repairs": 3, "latency_p50": None}, now + 1)
    [(_hour, point)] = store.history()
    assert point == {"open": {}, "repairs": 3, "latency_p50": 0.2}


def test_axes_are_readable_with_one_hour_of_history_or_one_point() -> None:
    start = time.time()
    near = chart("Repairs done", {"repairs": [(start, 0.0), (start + 30, 0.0)]})
    labels = re.findall(r'class="xtick"[^>]*>([^<]+)<', near)
    assert len(labels) == 2 and labels[0] != labels[1]  # 30 s apart: to the second
    assert re.findall(r'class="ytick"[^>]*>([^<]+)<', near) == ["1", "0"]  # not 0.000
    assert "history from" in near
    one = chart("Latency, event to done", {"p50": [(start, 0.0)]}, "s")
    assert len(re.findall(r'class="xtick"', one)) == 1 and "<circle" in one
    assert "one moment so far" in one and ">1 ms<" in one
    assert round_top(4) == 5 and round_top(47) == 50 and round_top(1.2e6) == 2e6
