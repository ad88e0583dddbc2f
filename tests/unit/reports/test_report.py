"""Health reports: content, atomic files, pruning; `riffd report` and `riffd status` without a
daemon."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, corpus_lines, requires_corpus, write_config
from helpers import damage
from riffd.commands.cli import main
from riffd.commands.daemon import EXIT_NOT_RUNNING
from riffd.daemon.lock import StateLock, running_pid
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.reports.build import build_report, percentile
from riffd.reports.json import report_document
from riffd.reports.markdown import render_markdown
from riffd.reports.prometheus import render_metrics
from riffd.reports.publish import read_latest, write_report
from riffd.state.store import StateStore


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 0.5) == 50.0
    assert percentile(samples, 0.95) == 95.0
    assert percentile([], 0.5) is None


@pytest.fixture
def store_with_history(tmp_path: Path) -> tuple[StateStore, Path]:
    """A store that has seen one damaged file (left open) and one repair."""
    store = StateStore(tmp_path / "state" / "state.db")
    damaged = damage.inject_resumed_duplicate(
        corpus_lines(CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl")
    )
    path = tmp_path / "p" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(damaged.data)
    Worker(store, WorkerSettings(repair=False)).process(path)
    store.record_repair(
        "/x.jsonl", "repaired", None, "b1", Counter({"duplicate_tool_result": 2}), "2 edits"
    )
    store.record_repair("/y.jsonl", "skipped", "live", None, Counter(), "in use")
    return store, tmp_path


@requires_corpus
def test_report_counts_what_the_store_knows(store_with_history: tuple[StateStore, Path]) -> None:
    store, tmp_path = store_with_history
    latencies = [0.01, 0.02, 0.03, 1.0]
    errors = [
        {"time": time.time(), "message": "boom", "suggestion": "look"},
        {"time": 0, "message": "old"},
    ]
    report = report_document(
        build_report(
            store,
            tmp_path / "no-backups",
            {
                "running": True,
                "started": time.time() - 10,
                "pid": 7,
                "latencies": latencies,
                "errors": errors,
            },
        )
    )
    assert report["schema"] == 1
    assert report["files"] == {"watched": 1, "with_findings": 1, "repaired": 1, "rechecking": 0}
    assert report["findings"]["open"] == {"duplicate_tool_result": 1}
    assert report["findings"]["repaired"] == {"duplicate_tool_result": 2}
    assert report["repairs"] == {"done": 1, "skipped": {"live": 1}, "failed": {}}
    assert report["latency_seconds"]["p95"] == 1.0 and report["latency_seconds"]["samples"] == 4
    assert [error["message"] for error in report["errors"]] == ["boom"]  # only the last hour
    assert report["healthy"] is False and any(
        "open finding" in problem for problem in report["problems"]
    )
    assert report["daemon"]["pid"] == 7 and 9 < report["daemon"]["uptime_seconds"] < 60


@requires_corpus
def test_a_file_repaired_since_it_was_read_is_not_both_open_and_repaired(
    store_with_history: tuple[StateStore, Path],
) -> None:
    store, tmp_path = store_with_history
    path = tmp_path / "p" / "s.jsonl"
    # the daemon repaired it; the worker has not read the new file yet
    store.record_repair(
        str(path), "repaired", None, "b2", Counter({"duplicate_tool_result": 1}), "1 edit"
    )
    report = report_document(build_report(store, tmp_path, {"running": True, "pid": 7}))
    assert report["findings"]["open"] == {} and report["repairs"]["done"] == 2
    assert report["files"]["rechecking"] == 1 and report["attention"] == []
    assert not any("open finding" in problem for problem in report["problems"])
    # read again (the repair put a new file in its place): what is left is counted again
    fresh = path.with_name("new.jsonl")
    fresh.write_bytes(path.read_bytes())
    fresh.replace(path)
    Worker(store, WorkerSettings(repair=False)).process(path)
    report = report_document(build_report(store, tmp_path, {"running": True, "pid": 7}))
    assert report["files"]["rechecking"] == 0 and report["findings"]["open"]


def test_no_verdict_before_the_start_up_pass_is_done(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    starting = {"running": True, "starting": True, "pid": 7, "seen_at": time.time()}
    report = build_report(store, tmp_path, starting)
    document = report_document(report)
    assert document["healthy"] is None and document["problems"] == []
    assert "**starting: no verdict" in render_markdown(report)
    metrics = render_metrics(report)
    assert "riffd_healthy" not in metrics and "riffd_starting 1" in metrics
    done = build_report(store, tmp_path, starting | {"starting": False})
    assert report_document(done)["healthy"] is True
    assert "riffd_healthy 1" in render_metrics(done) and "riffd_starting 0" in render_metrics(done)


@requires_corpus
def test_reports_are_written_atomically_and_pruned(
    store_with_history: tuple[StateStore, Path],
) -> None:
    store, tmp_path = store_with_history
    folder = tmp_path / "reports"
    for second in range(5):
        generated_at = datetime(2026, 11, 22, 10, 0, second, tzinfo=UTC)
        report = replace(build_report(store, tmp_path, None), generated_at=generated_at)
        write_report(report, folder, keep=3)
    assert sorted(path.name for path in folder.glob("report-*.json")) == [
        f"report-20261122T10000{second}Z.json" for second in (2, 3, 4)
    ]
    assert read_latest(folder) == json.loads((folder / "report-20261122T100004Z.json").read_text())
    assert not list(folder.glob(".*.tmp"))
    markdown = (folder / "latest.md").read_text()
    assert (
        markdown == render_markdown(report)
        and "needs attention" in markdown
        and "no riffd daemon runs" in markdown
    )


def test_reports_written_at_once_in_the_same_second_all_land(tmp_path: Path) -> None:
    # The scheduled job, a reload's report and `riffd report` may write in the same second (they
    # once shared one temp name, and one of them failed with ENOENT).
    store = StateStore(tmp_path / "state" / "state.db")
    folder = tmp_path / "reports"
    generated_at = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
    report = replace(build_report(store, tmp_path, None), generated_at=generated_at)
    errors: list[BaseException] = []

    def write_many() -> None:
        try:
            for _ in range(50):
                write_report(report, folder, keep=3)
        except BaseException as exc:  # any failure fails the test below
            errors.append(exc)

    threads = [threading.Thread(target=write_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert read_latest(folder) == json.loads((folder / "report-20261122T100000Z.json").read_text())
    assert not list(folder.glob(".*.tmp"))


def test_a_killed_writers_temp_file_is_removed_later(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state" / "state.db")
    folder = tmp_path / "reports"
    folder.mkdir()
    leftover, fresh = folder / ".latest.json.99999-1.tmp", folder / ".latest.json.99998-1.tmp"
    leftover.write_text("{")
    fresh.write_text("{")
    os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    write_report(build_report(store, tmp_path, None), folder, keep=3)
    assert not leftover.exists() and fresh.exists()  # a writer of a moment ago may still be at work


def test_riffd_report_and_status_without_a_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["--config", str(config), "status"]) == EXIT_NOT_RUNNING
    assert f"not running; no riffd state in {tmp_path / 'state'} yet" in capsys.readouterr().out
    # nothing to report on: said, nothing written
    assert main(["--config", str(config), "report"]) == 2
    assert "nothing to report yet" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # neither command made riffd state
    # A daemon ran here once and stopped: what it saw is shown as that, never as running.
    store = StateStore(tmp_path / "state" / "state.db")
    store.set_meta(
        "daemon",
        {"running": True, "pid": 999_999_999, "seen_at": time.time() - 60, "latencies": []},
    )
    store.close()
    assert main(["--config", str(config), "report", "--json"]) == 1  # no daemon: not healthy
    report = json.loads(capsys.readouterr().out)
    assert report["daemon"]["running"] is False and report["daemon"]["last_seen"]
    assert any("no riffd daemon runs (last seen at" in problem for problem in report["problems"])
    assert (tmp_path / "state" / "reports" / "latest.json").exists()
    assert main(["--config", str(config), "status"]) == EXIT_NOT_RUNNING
    out = capsys.readouterr().out
    assert "riffd daemon: stopped, last seen at" in out and "pid 999999999" in out
    assert "riffd health report" in out and "running" not in out.replace("no riffd daemon runs", "")
    # and its figures are said to be what it last saw, with when
    assert re.search(
        r"The files, findings, repairs and archive below are as the daemon last saw them, at "
        r"\S+ \((6\d) s before this report\); `riffd --config (\S+) scan` looks at the files as "
        r"they are now\.",
        out,
    ), out
    assert f"`riffd --config {config} scan`" in out  # (the configuration this status read)


def test_status_sees_a_lock_holder(tmp_path: Path) -> None:
    lock = StateLock(tmp_path / "state")
    assert running_pid(tmp_path / "state") is None
    lock.acquire()
    try:
        assert running_pid(tmp_path / "state") == os.getpid()
    finally:
        lock.release()
    assert running_pid(tmp_path / "state") is None


def test_status_with_a_bad_config_names_every_error_and_still_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RIFFD_STATE_DIR", raising=False)
    config = tmp_path / "config.toml"
    config.write_text(
        f"state_dir = '{tmp_path / 'state'}'\n[watcher]\ndebounse = 1\n[log]\nlevel = 'loud'\n"
    )
    # it answers: no daemon runs on that state folder
    assert main(["--config", str(config), "status"]) == 3
    captured = capsys.readouterr()
    assert "watcher.debounse" in captured.err and "log.level" in captured.err
    # the folder the file names
    assert f"no riffd state in {tmp_path / 'state'} yet" in captured.out
    # `riffd run` would stop at the errors: mending the file is advised first
    assert (
        f"(`riffd --config {config} config validate` lists what to mend first; then `riffd "
        f"--config {config} run`, or" in captured.out
    )


def test_files_with_only_informational_findings_do_not_count_as_having_findings(
    tmp_path: Path,
) -> None:
    from riffd.state.records import Watermark

    store = StateStore(tmp_path / "state.db")
    mark = Watermark("/a.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    store.save_file(mark, "s", [{"class": "redundant_tool_call"}], 0)
    store.save_file(replace(mark, path="/b.jsonl"), "s", [{"class": "duplicate_tool_result"}], 1)
    report = report_document(build_report(store, tmp_path, None))
    assert report["files"]["with_findings"] == 1
    assert report["findings"]["open"] == {"duplicate_tool_result": 1}
    assert report["findings"]["informational"] == {"redundant_tool_call": 1}
    assert "1 open finding(s) in 1 file(s)" in " ".join(report["problems"])


def test_the_report_names_every_file_that_needs_attention_and_what_deals_with_it(
    tmp_path: Path,
) -> None:
    from riffd.state.records import Watermark

    store = StateStore(tmp_path / "state.db")
    mark = Watermark("/p/waiting.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0)
    store.save_file(
        mark, "s", [{"class": "duplicate_tool_result", "lines": [7, 9], "message": "twice"}], 1
    )
    store.save_file(
        replace(mark, path="/p/bad.jsonl"),
        "s",
        [
            {"class": "parent_cycle", "lines": [40], "message": "a loop"},
            {"class": "redundant_tool_call", "lines": [3, 5], "message": "again"},
        ],
        0,
    )
    model = build_report(store, tmp_path, {"running": True})
    report = report_document(model)
    by_path = {item["path"]: item for item in report["attention"]}
    # informational findings need nothing
    assert set(by_path) == {
        "/p/waiting.jsonl",
        "/p/bad.jsonl",
    }
    assert (
        by_path["/p/waiting.jsonl"]["repairable"]
        and "`riffd fix --dry-run /p/waiting.jsonl` says what holds it"
        in by_path["/p/waiting.jsonl"]["action"]
    )
    assert (
        not by_path["/p/bad.jsonl"]["repairable"]
        and "never edits" in by_path["/p/bad.jsonl"]["action"]
    )
    text = render_markdown(model)
    assert "needs attention: /p/waiting.jsonl line 7, 9: duplicate_tool_result" in text
    assert "needs attention: /p/bad.jsonl line 40: parent_cycle" in text


def test_the_report_warns_of_transcripts_claude_code_will_delete_before_they_are_archived(
    tmp_path: Path,
) -> None:
    from riffd.archive.ingest import ingest_file
    from riffd.archive.store import Archive
    from riffd.daemon.jobs import archive_summary
    from riffd.state.records import Watermark

    claude = tmp_path / "claude"
    claude.mkdir()
    # deleted after 20 days: warned from 13
    (claude / "settings.json").write_text('{"cleanupPeriodDays": 20}')
    store = StateStore(tmp_path / "state" / "state.db")
    archive = Archive(tmp_path / "state" / "archive.db")
    files = {}
    for name, days_old in (("old-unarchived", 15), ("old-archived", 15), ("recent", 2)):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b'{"type":"user","uuid":"u1"}\n')
        files[name] = path
        mtime_ns = int((time.time() - days_old * 86400) * 1e9)
        store.save_file(
            Watermark(
                str(path), 1, 1, path.stat().st_size, 1, 0, "", 0, "", path.stat().st_size, mtime_ns
            ),
            "s",
            [],
            0,
        )
    ingest_file(archive, files["old-archived"])
    figures = archive_summary(archive, store, claude)
    assert (
        figures["cleanup_at_risk"] == [str(files["old-unarchived"])]
        and figures["cleanup_days"] == 20
    )
    report = report_document(
        build_report(store, tmp_path / "backups", {"running": True, "archive": figures})
    )
    assert any(
        "1 transcript(s) not (fully) archived are due for deletion by Claude Code's cleanup "
        "(cleanupPeriodDays 20)" in problem
        for problem in report["problems"]
    )
    archive.close()
    store.close()


def test_errors_kept_by_several_threads_are_never_lost_nor_break_a_reader() -> None:
    """The worker resolves a file's errors while the scheduler and the main thread add and copy
    theirs."""
    import threading

    from riffd.daemon.counters import ERRORS_KEPT, Counters

    counters, failures, stop = Counters(), [], threading.Event()

    def keep(about: str) -> None:
        try:
            while not stop.is_set():
                counters.error("boom", "look", about=about)
                counters.resolved(about)
        except Exception as exc:
            failures.append(exc)

    def read() -> None:
        try:
            while not stop.is_set():
                assert all(isinstance(error, dict) for error in counters.recent_errors())
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=keep, args=(f"/p/{n}.jsonl",)) for n in range(3)]
    threads += [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert failures == []
    # each error taken back by its own thread
    assert counters.recent_errors() == [] and counters.errors_met > 0
    counters.error("kept", about="/p/other.jsonl")
    counters.resolved("/p/unrelated.jsonl")
    assert [error["message"] for error in counters.recent_errors()] == ["kept"]
    for number in range(ERRORS_KEPT + 5):
        counters.error(f"e{number}")
    assert len(counters.recent_errors()) == ERRORS_KEPT  # the newest kept


def test_advice_inside_the_quiet_period_says_when_and_what_repairs_now(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state" / "state.db")
    duplicate = damage.inject_resumed_duplicate(damage.generated_session(segments=2))
    damaged = damage.inject_duplicate_uuid(duplicate.lines)
    path = tmp_path / "p" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(damaged.lines))  # modified now
    Worker(store, WorkerSettings(repair=False)).process(path)
    snapshot = {"running": True, "pid": 7, "quiet_period": 120.0, "seen_at": time.time()}
    report = report_document(build_report(store, tmp_path, snapshot))
    by_class = {item["class"]: item for item in report["attention"]}
    assert set(by_class) == {"duplicate_tool_result", "duplicate_uuid"}
    due = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime + 120))
    waiting = by_class["duplicate_tool_result"]
    assert waiting["state"] == "waiting_for_repair"
    assert f"riffd repairs it by itself at {due}" in waiting["action"]
    assert f"`riffd fix --quiet-period 0 {path}` repairs it now" in waiting["action"]
    # damage riffd does not repair, in a file a repair waits for: look again after it, no `ack` yet
    assert "riffd ack" not in by_class["duplicate_uuid"]["action"]
    assert "look again after that repair" in by_class["duplicate_uuid"]["action"]
    # past the quiet period: no time, and no command that would skip it
    old = time.time() - 7200
    os.utime(path, (old, old))
    fresh = path.with_name("new.jsonl")
    fresh.write_bytes(path.read_bytes())
    os.utime(fresh, (old, old))
    fresh.replace(path)
    Worker(store, WorkerSettings(repair=False)).process(path)
    report = report_document(build_report(store, tmp_path, snapshot))
    action = next(item["action"] for item in report["attention"] if item["repairable"])
    # how often it looks again: the daemon's look_again_after of its 120 s quiet period
    assert (
        "soon after no Claude Code process has the session open (it looks again every 60 s)"
        in action
    )


def test_roots_not_there_as_folders_are_said_as_the_report_is_made(tmp_path: Path) -> None:
    """With a root missing or a file, `status` said `watcher: native over /does/not/exist` and
    exit 0, where the daemon watched nothing there."""
    store = StateStore(tmp_path / "state.db")
    there, missing, a_file = tmp_path / "there", tmp_path / "missing", tmp_path / "afile"
    there.mkdir()
    a_file.write_text("")
    daemon = {"running": True, "pid": 7, "roots": [str(there), str(missing), str(a_file)]}
    report = report_document(build_report(store, tmp_path, daemon))
    assert report["watcher"]["missing_roots"] == [str(missing), str(a_file)]
    assert [problem for problem in report["problems"] if "root" in problem] == [
        f"the root {a_file} is not a folder: nothing is watched there; name a folder in the "
        "config's `roots`"
    ]
    missing.mkdir()  # (as things are when the report is made)
    a_file.unlink()
    report = report_document(build_report(store, tmp_path, daemon))
    assert report["watcher"]["missing_roots"] == [str(a_file)]
    assert not [problem for problem in report["problems"] if "root" in problem]
    store.close()
