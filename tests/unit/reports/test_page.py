"""latest.html, looked at as a user would: rendered by a real headless Chromium, screenshot taken,
charts drawn, and not one request made by the page (every request must go through a proxy that
records it; a canary page proves it sees a page's requests; Chromium's own calls to Google
aside)."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from conftest import write_config
from helpers.browser import chromium, needs_chromium, render
from riffd.commands.cli import main
from riffd.reports.build import build_report
from riffd.reports.html import history_point
from riffd.reports.publish import write_report
from riffd.state.records import Watermark
from riffd.state.store import StateStore
from riffd.transcript.acks import Ack, save_acks


def page_with_history(tmp_path: Path) -> Path:
    """A state store with two open findings, one acknowledged, two repairs and 48 hours of history;
    its page."""
    state = tmp_path / "state"
    store = StateStore(state / "state.db")
    mark = Watermark("/home/me/.claude/projects/-app/s1.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    store.save_file(
        mark,
        "s1",
        [
            {
                "class": "duplicate_tool_result",
                "lines": [7, 9],
                "message": "twice",
                "uuids": ["u7", "u9"],
                "tool_id": "toolu_1",
            },
            {"class": "dangling_parent", "lines": [40], "message": "cut", "uuids": ["u40"]},
        ],
        1,
    )
    save_acks(
        state,
        [Ack(mark.path, "dangling_parent", 40, "dangling_parent||u40", "2026-11-24T01:00:00+0000")],
    )
    store.record_repair(
        "/home/me/.claude/projects/-app/s2.jsonl",
        "repaired",
        None,
        "20261124T010000-abc123",
        Counter({"missing_tool_result": 1}),
        "1 edit(s)",
    )
    store.record_repair(
        "/home/me/.claude/projects/-app/s3.jsonl", "skipped", "live", None, Counter(), "in use"
    )
    now = time.time()
    for hours_ago in range(48, 0, -1):
        store.record_history(
            {
                "open": {
                    "duplicate_tool_result": hours_ago % 5,
                    "missing_tool_result": hours_ago % 3,
                },
                "repairs": 48 - hours_ago,
                "archive_stored": 1e6 + 2e4 * (48 - hours_ago),
                "archive_raw": 8e6 + 3e5 * (48 - hours_ago),
                "latency_p50": 0.02,
                "latency_p95": 0.05 + hours_ago / 1000,
            },
            now - hours_ago * 3600,
        )
    snapshot = {
        "running": True,
        "pid": 4242,
        "started": now - 7200,
        "seen_at": now,
        "latencies": [0.01, 0.03],
        "repair_mode": "repair",
    }
    report = build_report(store, tmp_path / "backups", snapshot)
    store.record_history(history_point(report), now)
    write_report(report, tmp_path / "reports", 3, store.history(), store.recent_repairs())
    store.close()
    return tmp_path / "reports" / "latest.html"


def test_the_page_says_what_needs_attention_and_holds_nothing_from_outside(tmp_path: Path) -> None:
    html = page_with_history(tmp_path).read_text()
    assert "<strong>needs attention</strong>" in html
    # the command for the open finding
    assert "riffd fix --dry-run /home/me/.claude/projects/-app/s1.jsonl" in html
    assert 'class="acknowledged"' in html and "riffd ack --undo" in html
    assert "riffd backups restore 20261124T010000-abc123" in html  # each repair with its backup
    assert html.count("<figure>") == 4 and html.count("<polyline") >= 6
    assert "<script" not in html and "<link" not in html and "url(" not in html
    assert re.findall(r"(?:src|href)=", html) == []
    # a namespace name
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in html


def test_riffd_report_draws_the_stored_history_and_repairs(tmp_path: Path) -> None:
    """`riffd report` reads the hours and repairs the page draws (`riffd status` does not read
    them)."""
    page_with_history(tmp_path)
    config = write_config(tmp_path)
    assert main(["--config", str(config), "report"]) == 1  # open findings, and no daemon runs
    html = (tmp_path / "state" / "reports" / "latest.html").read_text()
    assert html.count("<figure>") == 4 and html.count("<polyline") >= 6
    assert f"riffd --config {config} backups restore 20261124T010000-abc123" in html


class CountingProxy:
    """A proxy that Chromium must send every request through; it answers nothing and counts
    connections. A context manager: its thread ends with it (a thread left running keeps every
    later test of the worker from forking: riffd.forking.can_fork)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # (wakes the accept a close alone may not)
        self.server.close()
        self.thread.join(10)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            connection.settimeout(2)
            try:
                first = connection.recv(4096)
                if first:  # nothing at all: a connection Chromium opened ahead (a preconnect) and closed unused
                    self.requests.append(first.split(b"\r\n", 1)[0].decode(errors="replace"))
            except OSError:
                self.requests.append("?")
            connection.close()


@needs_chromium
def test_chromium_renders_the_page_with_its_charts_and_makes_no_request(tmp_path: Path) -> None:
    page = page_with_history(tmp_path)
    with CountingProxy() as proxy:
        address = f"http://127.0.0.1:{proxy.port}"
        screenshot = tmp_path / "latest.png"
        dom = render(page, tmp_path / "profile", screenshot, proxy=address)
        assert screenshot.stat().st_size > 20_000
        # rendered: the four charts and their lines
        assert dom.count("<svg") == 4 and dom.count("<polyline") >= 6
        assert "Open findings by class" in dom and "needs attention" in dom
        assert [request for request in proxy.requests if not _browser_own(request)] == []
        # The proxy does see what a page asks for: a page with one outside image, loaded the same way.
        canary = tmp_path / "canary.html"
        canary.write_text('<!DOCTYPE html><img src="http://riffd-canary.invalid/pixel.png">')
        subprocess.run(
            [*chromium(tmp_path / "profile", proxy=address), "--dump-dom", canary.as_uri()],
            capture_output=True,
            timeout=120,
            check=False,
        )
        deadline = time.monotonic() + 10  # the proxy's thread may still be reading the request
        while (
            not any("riffd-canary.invalid" in request for request in proxy.requests)
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert any("riffd-canary.invalid" in request for request in proxy.requests), proxy.requests


def _browser_own(request: str) -> bool:
    """Chromium's own background requests (its clock and component checks go to Google), not the
    page's."""
    host = re.sub(r"^(GET|CONNECT|POST) (https?://)?", "", request).split("/")[0].split(":")[0]
    return host.endswith((".google.com", ".googleapis.com", ".gstatic.com", ".gvt1.com"))


@needs_chromium
def test_a_stopped_daemons_page_says_its_figures_are_what_it_last_saw(tmp_path: Path) -> None:
    """No daemon runs: the page, as Chromium renders it, says the daemon stopped and that the
    files, findings and archive shown are as it last saw them, with when."""
    store = StateStore(tmp_path / "state" / "state.db")
    store.set_meta(
        "daemon",
        {"running": True, "pid": 999_999_999, "seen_at": time.time() - 90, "latencies": []},
    )
    store.close()
    assert main(["--config", str(write_config(tmp_path)), "report"]) == 1
    page = tmp_path / "state" / "reports" / "latest.html"
    dom = subprocess.run(
        [*chromium(tmp_path / "profile"), "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    assert "Daemon: stopped" in dom
    assert re.search(
        r"The files, findings, repairs and archive below are as the daemon last saw them, at \S+ "
        r"\(9\d s before this report\)",
        dom,
    ), dom[-3000:]
