"""metrics.prom: the report's figures in Prometheus text format, read back with Prometheus's own
Python parser."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from riffd.reports.build import build_report
from riffd.reports.prometheus import render_metrics
from riffd.reports.publish import write_report
from riffd.state.records import Watermark
from riffd.state.store import StateStore


def test_metrics_parse_as_prometheus_text_and_carry_the_reports_figures(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state" / "state.db")
    mark = Watermark('/p/a "quoted" name.jsonl', 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    store.save_file(
        mark,
        "s",
        [
            {"class": "duplicate_tool_result", "lines": [7, 9], "message": "twice"},
            {"class": "redundant_tool_call", "lines": [3, 5], "message": "again"},
        ],
        1,
    )
    store.record_repair(
        "/p/b.jsonl", "repaired", None, "b1", Counter({"missing_tool_result": 2}), "done"
    )
    store.record_repair("/p/c.jsonl", "skipped", "live", None, Counter(), "in use")
    snapshot = {
        "running": True,
        "pid": 42,
        "started": 0,
        "seen_at": 10**10,
        "latencies": [0.1, 0.2, 0.4],
        "queue_depth": 3,
        "archive": {
            "stored_bytes": 1000,
            "raw_bytes": 9000,
            "ratio": 0.1111,
            "sessions": 2,
            "files_behind": 0,
            "bytes_behind": 0,
            "at": 10**10 - 120,
        },
    }
    report = build_report(store, tmp_path / "backups", snapshot)
    write_report(report, tmp_path / "reports", keep=3)
    text = (tmp_path / "reports" / "metrics.prom").read_text()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    value = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families.values()
        for sample in family.samples
    }
    assert value[("riffd_up", ())] == 1 and value[("riffd_healthy", ())] == 0
    assert value[("riffd_files_watched", ())] == 1 and value[("riffd_queue_depth", ())] == 3
    assert value[("riffd_findings", (("class", "duplicate_tool_result"), ("state", "open")))] == 1
    assert (
        value[("riffd_findings", (("class", "redundant_tool_call"), ("state", "informational")))]
        == 1
    )
    # the parser names a counter family without _total
    assert families["riffd_repairs"].type == "counter"
    assert value[("riffd_repairs_total", (("outcome", "repaired"), ("reason", "none")))] == 1
    assert value[("riffd_repairs_total", (("outcome", "skipped"), ("reason", "live")))] == 1
    assert value[("riffd_findings_repaired_total", (("class", "missing_tool_result"),))] == 2
    assert value[("riffd_archive_raw_bytes", ())] == 9000
    assert value[("riffd_archive_figures_timestamp_seconds", ())] == 10**10 - 120
    assert value[("riffd_event_latency_p50_seconds", ())] == 0.2
    assert value[("riffd_event_latency_max_seconds", ())] == 0.4
    assert abs(value[("riffd_report_timestamp_seconds", ())] - time.time()) < 60
    store.close()


def series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_series_stays_when_the_daemon_stops_and_no_label_is_empty(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    store.record_repair("/p/b.jsonl", "repaired", None, "b1", Counter({"orphan": 1}), "done")
    running = {"running": True, "pid": 4, "started": time.time() - 60, "seen_at": time.time()}
    up = render_metrics(build_report(store, tmp_path, running))
    down = render_metrics(build_report(store, tmp_path, running | {"running": False}))
    assert set(series(up)) == set(series(down))  # a stop makes no series vanish
    assert series(up)[("riffd_up", ())] == 1 and series(down)[("riffd_up", ())] == 0
    assert series(down)[("riffd_uptime_seconds", ())] == 0
    # how old the figures are: the stopped daemon's last moment, not the report's
    seen = running["seen_at"]
    stopped = running | {"running": False, "seen_at": seen - 3600}
    late = series(render_metrics(build_report(store, tmp_path, stopped)))
    assert abs(late[("riffd_figures_timestamp_seconds", ())] - (seen - 3600)) < 1
    assert (
        late[("riffd_report_timestamp_seconds", ())] - late[("riffd_figures_timestamp_seconds", ())]
        > 3500
    )
    for family in text_string_to_metric_families(up):
        for sample in family.samples:
            assert all(sample.labels.values()), sample  # no empty label value
            assert "quantile" not in sample.labels or family.type == "summary", sample
    latency = series(up)[("riffd_event_latency_p50_seconds", ())]
    assert math.isnan(latency)  # no change handled yet: the series is there, without a value


def test_metrics_prom_is_readable_by_another_user_when_configured(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    report = build_report(store, tmp_path, {"running": True, "pid": 4})
    base = Path(tempfile.mkdtemp(prefix="riffd-metrics-"))  # /tmp/pytest-of-* lets no one else in
    try:
        base.chmod(0o755)
        folder = base / "reports"
        write_report(report, folder, keep=3, metrics_readable=True)
        assert (folder / "metrics.prom").stat().st_mode & 0o777 == 0o644
        assert (folder / "latest.json").stat().st_mode & 0o777 == 0o600  # paths: still private
        as_nobody = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
        read = subprocess.run(
            ["/bin/cat", str(folder / "metrics.prom")],
            capture_output=True,
            text=True,
            check=False,
            **as_nobody,
        )
        assert read.returncode == 0, read.stderr
        assert ("riffd_up", ()) in series(read.stdout)
        listed = subprocess.run(
            ["/bin/ls", str(folder)],
            capture_output=True,
            text=True,
            check=False,
            **as_nobody,
        )
        assert "metrics.prom" in listed.stdout.split()  # the textfile collector lists the folder
        write_report(report, folder, keep=3)  # turned off again: private again
        assert (folder / "metrics.prom").stat().st_mode & 0o777 == 0o600
    finally:
        shutil.rmtree(base)


def test_counters_do_not_go_down_when_old_repair_records_are_pruned(tmp_path: Path) -> None:
    """Prometheus counters must never decrease: pruning the repairs table keeps what the pruned rows
    counted."""
    store = StateStore(tmp_path / "state" / "state.db")
    for number in range(6):
        store.record_repair(
            f"/p/{number}.jsonl",
            "repaired",
            None,
            f"b{number}",
            Counter({"duplicate_tool_result": 1}),
            "done",
        )
        store.record_repair(f"/p/{number}.jsonl", "skipped", "live", None, Counter(), "in use")
    store.record_repair("/p/x.jsonl", "failed", "rename.failed", None, Counter(), "EIO")
    snapshot = {
        "running": True,
        "pid": 42,
        "started": 0,
        "seen_at": 10**10,
        "latencies": [],
        "queue_depth": 0,
    }

    def counters() -> dict[tuple[str, tuple], float]:
        write_report(
            build_report(store, tmp_path / "backups", snapshot), tmp_path / "reports", keep=3
        )
        text = (tmp_path / "reports" / "metrics.prom").read_text()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            if family.type == "counter"
            for sample in family.samples
        }

    before = counters()
    assert before[("riffd_repairs_total", (("outcome", "repaired"), ("reason", "none")))] == 6
    store.prune_repairs(keep=3)
    assert len(store.recent_repairs(limit=100)) == 3
    assert counters() == before
    store.record_repair("/p/y.jsonl", "skipped", "live", None, Counter(), "in use")
    store.prune_repairs(keep=1)
    after = counters()
    assert after[("riffd_repairs_total", (("outcome", "skipped"), ("reason", "live")))] == 7
    assert after[("riffd_repairs_total", (("outcome", "failed"), ("reason", "rename.failed")))] == 1
    assert after[("riffd_findings_repaired_total", (("class", "duplicate_tool_result"),))] == 6
    store.close()
