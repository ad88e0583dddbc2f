"""What riffd says is true at the moment it says it: a real daemon driven through the moments of
its life (before start, just after it, after files are damaged while it runs, within and after the
quiet period, after SIGTERM), and at each `riffd status`, latest.json, latest.md, metrics.prom and
latest.html (rendered by headless Chromium) checked against each other and against what happened."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import damage
from helpers.browser import needs_chromium, render
from helpers.daemon import RunningDaemon, Sandbox

pytestmark = [pytest.mark.slow, needs_chromium]

QUIET = 5.0  # long enough to look at a file that waits for its repair


@dataclass
class Moment:
    """Everything riffd says at one moment."""

    status: Any
    status_json: dict[str, Any]
    report: dict[str, Any]
    markdown: str
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    page: str


def damaged(path: Path, session: str, idle: bool) -> None:
    lines = damage.inject_resumed_duplicate(
        damage.generated_session(segments=2, session_id=session)
    ).lines
    path.write_bytes(b"".join(lines))
    if idle:
        os.utime(path, (time.time() - 3600, time.time() - 3600))


def look(sandbox: Sandbox) -> Moment:
    """What `status` and every report file say now; checks that hold at any moment."""
    status = sandbox.riffd("status")
    status_json = json.loads(sandbox.riffd("status", "--json").stdout)
    reports = sandbox.state / "reports"
    report = json.loads((reports / "latest.json").read_bytes())
    text = (reports / "metrics.prom").read_text()
    metrics = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert all(sample.labels.values()), sample  # no empty label value
            metrics[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    moment = Moment(
        status,
        status_json,
        report,
        (reports / "latest.md").read_text(),
        metrics,
        (reports / "latest.html").read_text(),
    )
    for document in (report, status_json["report"]):
        if document is None:
            continue
        daemon = document["daemon"]
        if daemon["running"] and daemon["starting"] and not document["problems"]:
            assert document["healthy"] is None, document  # no verdict before looking
        if document["healthy"]:
            assert document["findings"]["open"] == {} and document["attention"] == []
    # one moment: the page's files waiting for a repair are not among its repaired ones
    waiting = set(
        re.findall(r'<tr class="waiting_for_repair"><td><code>([^<]+)</code>', moment.page)
    )
    repaired = set(
        re.findall(r"<tr><td>[^<]+</td><td><code>([^<]+)</code></td><td>repaired<", moment.page)
    )
    assert not waiting & repaired, (waiting, repaired)
    # the charts end on the figures the page states
    assert f"repairs ({report['repairs']['done']} now)" in moment.page
    assert ("riffd_healthy", ()) in metrics or report["healthy"] is None
    return moment


def in_browser(sandbox: Sandbox, name: str) -> str:
    dom = render(
        sandbox.state / "reports" / "latest.html",
        sandbox.root / f"profile-{name}",
        sandbox.root / f"{name}.png",
    )
    assert dom.count("<svg") == 4 and "Open findings by class" in dom
    for figure in dom.split("<figure>")[1:]:
        labels = re.findall(r'class="xtick"[^>]*>([^<]+)<', figure)
        assert len(set(labels)) == len(labels), labels  # the two ends never read the same
    assert "0.000" not in "".join(re.findall(r'class="ytick"[^>]*>([^<]+)<', dom))
    return dom


def test_everything_riffd_says_is_true_at_each_moment_of_a_daemons_life(
    sandbox: Sandbox,
) -> None:
    sandbox.write_config(repair__quiet_period=QUIET)
    first = sandbox.project / "11111111-0000-4000-8000-000000000001.jsonl"
    second = sandbox.project / "22222222-0000-4000-8000-000000000002.jsonl"
    # before start: nothing runs, and status says so
    before = sandbox.riffd("status")
    assert before.returncode == 3 and "not running" in before.stdout, before.stdout
    damaged(first, first.stem, idle=True)

    # just after start: the first report of this daemon gives no verdict it has not earned
    daemon: RunningDaemon = sandbox.start()
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid), "a first report"
    )
    start = look(sandbox)
    if start.report["healthy"]:
        assert start.report["repairs"]["done"] == 1  # only once the damaged file is repaired
    in_browser(sandbox, "start")

    # the idle damaged file is repaired; all is well
    daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: (
                r["repairs"]["done"] == 1 and r["healthy"] is True and not r["daemon"]["starting"]
            )
        ),
        "the repair of the idle file",
    )
    well = look(sandbox)
    assert well.status.returncode == 0 and "**healthy**" in well.markdown
    assert well.metrics[("riffd_healthy", ())] == 1 and well.metrics[("riffd_starting", ())] == 0

    # damage while it runs: within the quiet period, the advice is when and what repairs it now
    damaged(second, second.stem, idle=False)
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["findings"]["open"]), "the new damage reported"
    )
    waiting = look(sandbox)
    actions = [item["action"] for item in waiting.report["attention"] if item["repairable"]]
    # (on a machine so slow that the 5 s passed already, the repair is checked below)
    if actions and time.time() < second.stat().st_mtime + QUIET - 1:
        action = actions[0]
        assert "riffd repairs it by itself at" in action, action
        assert (
            f"`riffd --config {sandbox.config} fix --quiet-period 0 {second}` repairs it now"
            in action
        )
        assert "now: `riffd" not in waiting.status.stdout
        assert waiting.status.returncode == 1 and waiting.report["healthy"] is False
    in_browser(sandbox, "waiting")

    # after the quiet period: repaired, and every figure says 2
    daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: r["repairs"]["done"] == 2 and r["findings"]["open"] == {}
        ),
        "the repair after the quiet period",
        timeout=30,
    )
    done = look(sandbox)
    assert done.report["healthy"] is True and "repairs (2 now)" in done.page
    assert done.metrics[("riffd_repairs_total", (("outcome", "repaired"), ("reason", "none")))] == 2
    in_browser(sandbox, "repaired")

    # after SIGTERM: stopped, said everywhere, every series kept
    daemon.stop()
    stopped = look(sandbox)
    assert stopped.status.returncode == 3 and "stopped" in stopped.status.stdout
    assert stopped.report["daemon"]["running"] is False
    assert stopped.metrics[("riffd_up", ())] == 0
    assert set(stopped.metrics) >= {key for key in done.metrics if key[0] != "riffd_healthy"}
    dom = in_browser(sandbox, "stopped")
    assert "Daemon: stopped" in dom
