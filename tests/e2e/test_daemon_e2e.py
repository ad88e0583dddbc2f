"""End to end: `python3 -m riffd --config <tmp>/config.toml run` as a real subprocess.

Each test gets its own transcript root, Claude Code folder and state folder, all named in a TOML
file (the daemon's environment has no RIFFD_CONFIG, CLAUDE_CONFIG_DIR or RIFFD_STATE_DIR). The test
plays the service manager: it binds the sd_notify datagram socket and waits for `READY=1` before
acting, so start-up needs no sleep. Every other wait polls a real condition (a file, a report, a
watermark, a notify message) in short steps up to a generous deadline, and fails with the daemon's
stderr.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import corpus_lines, requires_corpus, transcript_bytes, transcript_line
from helpers import damage
from helpers.daemon import (
    DEADLINE,
    DUPLICATE,
    QUIET_PERIOD,
    REPORT_INTERVAL,
    TOOL_HEAVY,
    NotifyListener,
    RunningDaemon,
    Sandbox,
    append_like_claude,
    lines_committed,
    open_duplicates,
    report_time,
    resumed_duplicate,
    session_id_of,
    watermark_of,
)
from helpers.run import run_riffd
from riffd.archive.store import Archive
from riffd.transcript.findings import INFORMATIONAL
from riffd.transcript.scan import scan_file

pytestmark = pytest.mark.slow

# SIGTERM must end the daemon this fast (its drain deadline is 10 s; nothing is queued)
STOP_WITHIN = 5.0


# --- 1. readiness, watchdog, reload and stop, as systemd sees them
# ----------------------------------------


def test_notify_ready_watchdog_reload_and_stopping(sandbox: Sandbox) -> None:
    daemon = sandbox.start(watchdog_usec=1_000_000)  # returns only once READY=1 arrived
    assert "STATUS" in daemon.notify.messages[daemon.ready_at]

    first_ping = daemon.wait_notified("WATCHDOG", after=daemon.ready_at)
    daemon.wait_notified("WATCHDOG", after=first_ping)  # pings keep coming, not just one

    daemon.process.send_signal(signal.SIGHUP)
    reloading = daemon.wait_notified("RELOADING", after=daemon.ready_at)
    assert int(daemon.notify.messages[reloading]["MONOTONIC_USEC"]) > 0
    daemon.wait_notified("READY", after=reloading)

    daemon.stop()
    assert daemon.notify.find("STOPPING") is not None
    assert daemon.notify.count("READY") == 2  # start-up and the reload, nothing else


# --- 2. a damaged session written like Claude Code writes is repaired once idle
# --------------------------


@requires_corpus
def test_a_session_written_line_by_line_is_repaired_once_idle(sandbox: Sandbox) -> None:
    damaged = resumed_duplicate()
    daemon = sandbox.start()
    path = sandbox.project / f"{session_id_of(damaged.lines)}.jsonl"
    append_like_claude(path, damaged.lines)
    # riffd cannot have rewritten it yet: that waits for the quiet period
    idle_since = path.stat().st_mtime

    (backup_id,) = daemon.wait_until(sandbox.backup_ids, "a backup with its manifest")
    daemon.wait_until(lambda: scan_file(path).findings == [], "the transcript to scan clean")

    assert gzip.decompress((sandbox.backups / f"{backup_id}.gz").read_bytes()) == damaged.data
    manifest = json.loads((sandbox.backups / f"{backup_id}.json").read_text())
    assert manifest["source_path"] == str(path) and manifest["size"] == len(damaged.data)
    assert (
        datetime.fromisoformat(manifest["created_at"]).timestamp()
        >= idle_since + QUIET_PERIOD - 0.01
    )
    # Every line but the synthetic result stays; the synthetic assistant line only changes its
    # parentUuid.
    marks = damaged.marks
    use_uuid = json.loads(damaged.lines[marks["tool_use"]])["uuid"]
    expected = list(damaged.lines)
    expected[marks["synthetic_assistant"]] = damage.set_parent(
        expected[marks["synthetic_assistant"]], use_uuid
    )
    del expected[marks["synthetic"]]
    assert path.read_bytes().splitlines(keepends=True) == expected

    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["repairs"]["done"] >= 1),
        "a report counting the repair",
    )
    assert report["findings"]["repaired"].get(DUPLICATE, 0) >= 1
    assert open_duplicates(report) == 0
    daemon.stop()


def test_the_log_gives_a_repair_its_own_words(sandbox: Sandbox) -> None:
    """An idle damaged session found at start is read as a new file and repaired at once: the log
    said "repair repaired: new file" (the read's why as the repair's)."""
    damaged = resumed_duplicate()
    path = sandbox.project / f"{session_id_of(damaged.lines)}.jsonl"
    path.write_bytes(damaged.data)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    daemon = sandbox.start()
    daemon.wait_until(lambda: scan_file(path).findings == [], "the transcript to scan clean")
    daemon.stop()
    said = [
        line for line in daemon.stderr().splitlines() if f"{path}: " in line and "repair " in line
    ]
    assert any(line.endswith(" ms") and ", repair repaired in " in line for line in said), said
    assert not any("repair repaired:" in line for line in said), said


# --- 3. a live session is left alone
# -------------------------------------------------------------------


@requires_corpus
def test_a_registered_live_session_waits_until_its_process_is_gone(sandbox: Sandbox) -> None:
    damaged = resumed_duplicate()
    session_id = session_id_of(damaged.lines)
    registry = sandbox.claude / "sessions" / f"{os.getpid()}.json"
    # this test process is live
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    daemon = sandbox.start()
    path = sandbox.project / f"{session_id}.jsonl"
    append_like_claude(path, damaged.lines)
    idle_since = path.stat().st_mtime

    # Long past the quiet period, and a few reports later: still untouched, the finding open.
    report = daemon.wait_until(
        lambda: sandbox.report_after(idle_since + QUIET_PERIOD + 3 * REPORT_INTERVAL),
        "reports from well after the quiet period",
    )
    assert open_duplicates(report) == 1
    assert report["repairs"]["done"] == 0
    assert path.read_bytes() == damaged.data
    assert sandbox.backup_ids() == []

    registry.unlink()  # the Claude Code process is gone: now the session is idle
    daemon.wait_until(sandbox.backup_ids, "the repair once the session is no longer registered")
    daemon.wait_until(lambda: scan_file(path).findings == [], "the transcript to scan clean")
    daemon.stop()


@requires_corpus
def test_a_live_damaged_session_at_start_does_not_keep_the_daemon_starting(
    sandbox: Sandbox,
) -> None:
    # The start-up pass is done once every file found at start is read: a repair that waits for
    # a live session (for hours, while the user works in it) is not part of it, and `status`
    # gives its verdict (exit 1: a finding is open) rather than `starting`, exit 0.
    damaged = resumed_duplicate()
    session_id = session_id_of(damaged.lines)
    registry = sandbox.claude / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    path = sandbox.project / f"{session_id}.jsonl"
    path.write_bytes(damaged.data)
    daemon = sandbox.start()
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: not r["daemon"]["starting"]),
        "the start-up pass to be done while the live session's repair waits",
        timeout=QUIET_PERIOD + 4 * REPORT_INTERVAL + 5,
    )
    assert open_duplicates(report) == 1 and report["healthy"] is False
    assert report["repairs"]["done"] == 0 and path.read_bytes() == damaged.data
    status = sandbox.riffd("status")
    assert status.returncode == 1 and "starting" not in status.stdout.splitlines()[0], status.stdout
    daemon.stop()


def test_sessions_health_is_ok_only_for_files_the_daemon_checked(sandbox: Sandbox) -> None:
    # `sessions` (and the MCP server's list_sessions) said "-" for every session while the daemon
    # had found nothing anywhere, and "ok" for one it never read once it had found something
    sandbox.write_config(repair__mode="report-only")
    ids = [f"5e55104e-0000-4000-8000-00000000000{number}" for number in range(3)]
    clean, damaged, unseen = (sandbox.project / f"{session}.jsonl" for session in ids)
    clean.write_bytes(b"".join(damage.generated_session(segments=1, session_id=ids[0])))
    lines = damage.generated_session(segments=2, session_id=ids[1])
    damaged.write_bytes(damage.inject_resumed_duplicate(lines).data)
    daemon = sandbox.start()
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: not r["daemon"]["starting"]), "the start-up pass"
    )
    daemon.stop()
    unseen.write_bytes(b"".join(damage.generated_session(segments=1, session_id=ids[2])))
    listed = json.loads(sandbox.riffd("sessions", "--json").stdout)
    health = {Path(row["path"]).stem: row["health"] for row in listed["sessions"]}
    assert health[ids[0]] == "ok" and health[ids[1]].endswith("finding(s)"), health
    assert health[ids[2]] == "-", health
    # repaired with the daemon stopped: its "finding(s)" are of the file as it was, and say so
    fixed = sandbox.riffd("fix", "--quiet-period", "0", str(damaged))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    listed = json.loads(sandbox.riffd("sessions", "--json").stdout)
    health = {Path(row["path"]).stem: row["health"] for row in listed["sessions"]}
    assert health[ids[1]] == "1 finding(s); changed since", health
    assert health[ids[0]] == "ok" and health[ids[2]] == "-", health
    text = sandbox.riffd("sessions").stdout
    assert "1 finding(s); changed since" in text and text.count("changed since") == 1, text


@requires_corpus
def test_a_repair_still_waiting_at_shutdown_is_done_after_a_restart(sandbox: Sandbox) -> None:
    damaged = resumed_duplicate()
    session_id = session_id_of(damaged.lines)
    registry = sandbox.claude / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    daemon = sandbox.start()
    path = sandbox.project / f"{session_id}.jsonl"
    append_like_claude(path, damaged.lines)
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: open_duplicates(r) == 1), "the finding reported"
    )
    daemon.stop()

    registry.unlink()  # the session ended while riffd was down; its file did not change since
    daemon = sandbox.start()
    daemon.wait_until(sandbox.backup_ids, "the repair after the restart")
    daemon.wait_until(lambda: scan_file(path).findings == [], "the transcript to scan clean")
    daemon.stop()


# --- 4. configuration reloads
# -----------------------------------------------------------------------------


@requires_corpus
def test_sighup_applies_a_new_config_and_keeps_the_old_one_when_the_new_is_broken(
    sandbox: Sandbox,
) -> None:
    daemon = sandbox.start()
    sandbox.write_config(repair__mode="report-only")
    daemon.process.send_signal(signal.SIGHUP)
    reloading = daemon.wait_notified("RELOADING", after=daemon.ready_at)
    ready = daemon.wait_notified("READY", after=reloading)

    damaged = resumed_duplicate()
    path = sandbox.project / f"{session_id_of(damaged.lines)}.jsonl"
    append_like_claude(path, damaged.lines)
    idle_since = path.stat().st_mtime
    report = daemon.wait_until(
        lambda: sandbox.report_after(idle_since + QUIET_PERIOD + 2 * REPORT_INTERVAL),
        "reports from well after the quiet period",
    )
    assert report["daemon"]["last_reload"]["ok"] is True
    assert open_duplicates(report) == 1 and report["repairs"]["done"] == 0
    assert path.read_bytes() == damaged.data and sandbox.backup_ids() == []

    # A broken file (an unknown key) that would also switch repairs back on: rejected as a whole.
    sandbox.write_config(repair__mode="repair", watcher__debounse=0.5)
    broken_at = time.time()
    daemon.process.send_signal(signal.SIGHUP)
    reloading = daemon.wait_notified("RELOADING", after=ready)
    daemon.wait_notified("READY", after=reloading)
    report = daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: (r["daemon"]["last_reload"] or {}).get("ok") is False
        ),
        "a report of the failed reload",
    )
    assert report["healthy"] is False
    assert any("debounse" in error for error in report["daemon"]["last_reload"]["errors"])
    assert any("reload" in problem for problem in report["problems"])
    # Still running, still on the old configuration: report-only, so the session stays as it is.
    report = daemon.wait_until(
        lambda: sandbox.report_after(broken_at + 2 * REPORT_INTERVAL),
        "reports from after the failed reload",
    )
    assert daemon.process.poll() is None
    assert (
        open_duplicates(report) == 1
        and path.read_bytes() == damaged.data
        and sandbox.backup_ids() == []
    )
    # Fixed and reloaded: the config error is over at once, not an hour later.
    del sandbox.settings["watcher.debounse"]
    sandbox.write_config(repair__mode="report-only")
    daemon.process.send_signal(signal.SIGHUP)
    report = daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: (r["daemon"]["last_reload"] or {}).get("ok") is True
        ),
        "a report of the good reload",
    )
    assert not any(
        "reload" in problem or "error(s) in the last hour" in problem
        for problem in report["problems"]
    ), (report["problems"], report["errors"])
    daemon.stop()


@requires_corpus
def test_saving_the_config_file_reloads_it_without_a_signal(sandbox: Sandbox) -> None:
    sandbox.write_config(repair__mode="report-only")
    daemon = sandbox.start()
    damaged = resumed_duplicate()
    path = sandbox.project / f"{session_id_of(damaged.lines)}.jsonl"
    append_like_claude(path, damaged.lines)
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: open_duplicates(r) == 1), "the finding reported"
    )

    saved = time.monotonic()
    # an editor's save: a temp file renamed over the config
    sandbox.write_config(repair__mode="repair")
    reloading = daemon.wait_notified("RELOADING", after=daemon.ready_at, timeout=5.0)
    assert time.monotonic() - saved < 5.0
    daemon.wait_notified("READY", after=reloading)
    # The new mode takes effect for what is already known: the idle session with an open finding.
    daemon.wait_until(sandbox.backup_ids, "the repair after switching repair.mode back on")
    daemon.wait_until(lambda: scan_file(path).findings == [], "the transcript to scan clean")
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["repairs"]["done"] >= 1),
        "a report counting the repair",
    )
    assert report["daemon"]["last_reload"]["ok"] is True
    daemon.stop()


# --- 5. stopping, and what `riffd status` says
# -----------------------------------------------------------


def test_sigterm_exits_0_promptly_and_status_follows(sandbox: Sandbox) -> None:
    daemon = sandbox.start()
    running = sandbox.riffd("status")
    assert running.returncode in (0, 1), running.stderr
    assert f"pid {daemon.pid}" in running.stdout

    elapsed = daemon.stop()
    assert elapsed < STOP_WITHIN, f"SIGTERM took {elapsed:.1f} s"
    stopped = sandbox.riffd("status")
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    assert "riffd daemon: stopped, last seen at" in stopped.stdout


# --- 6. a restart in the middle of a stream of appends
# ----------------------------------------------------


@pytest.mark.parametrize(
    "stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"]
)
def test_a_restart_mid_stream_loses_nothing_and_processes_nothing_twice(
    sandbox: Sandbox, stop_signal: signal.Signals
) -> None:
    lines = damage.generated_session(segments=8, turns=3, parallel=2)
    total = len(lines)
    # the writer waits here until the new daemon runs, so the stream spans the restart
    hold_at = total * 3 // 4
    path = sandbox.project / "5e55104e-0000-4000-8000-00000000c0de.jsonl"
    daemon = sandbox.start()
    store = sandbox.open_store()
    restarted = threading.Event()
    written = [0]

    def write() -> None:
        append_like_claude(
            path,
            lines[:hold_at],
            pause=0.015,
            progress=lambda number: written.__setitem__(0, number),
        )
        restarted.wait(DEADLINE)
        append_like_claude(path, lines[hold_at:], pause=0.015)

    writer = threading.Thread(target=write, name="claude-writer")
    writer.start()
    try:
        daemon.wait_until(
            lambda: lines_committed(store, path) >= 20, "part of the stream committed"
        )
        if stop_signal == signal.SIGKILL:
            daemon.kill()
        else:
            daemon.stop()
        at_stop = lines_committed(store, path)
        daemon = sandbox.start()
        restarted.set()
    finally:
        restarted.set()
        writer.join(timeout=60)
    assert not writer.is_alive()
    assert 20 <= at_stop < total and written[0] == hold_at

    size = path.stat().st_size

    def caught_up() -> bool:
        watermark = watermark_of(store, path)
        return watermark is not None and (watermark.lines, watermark.offset) == (total, size)

    daemon.wait_until(caught_up, f"the watermark to reach {total} lines, {size} bytes")
    daemon.stop()  # and the drain at shutdown processes nothing again
    watermark = watermark_of(store, path)
    state = store.file(str(path))
    counters = store.counters()
    assert watermark is not None and (watermark.lines, watermark.offset, watermark.size) == (
        total,
        size,
        size,
    )
    assert counters["lines.processed"] == total  # not more (nothing twice), not less (nothing lost)
    assert (
        state is not None
        and [item for item in state.findings if item["class"] not in INFORMATIONAL] == []
    )
    # the generated session reads the same files every turn: each repeat is reported once, across
    # the restart
    repeats = [item["tool_id"] for item in state.findings if item["class"] in INFORMATIONAL]
    assert repeats and len(repeats) == len(set(repeats))
    # The archive, fed by the same reads, holds every line exactly once, across the kill and the
    # restart.
    archive = Archive(store.path.parent / "archive.db")
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    assert archive.stats()["lines"] == total
    archive.close()


# --- 7. changes no event reported are caught by the rescan
# -----------------------------------------------


@requires_corpus
def test_the_rescan_catches_changes_when_no_event_arrives(sandbox: Sandbox) -> None:
    sandbox.write_config(
        watcher__observer="polling", watcher__polling_interval=3600.0, watcher__rescan_interval=1.0
    )
    daemon = sandbox.start()
    lines = corpus_lines(TOOL_HEAVY)
    path = sandbox.project / "rescanned.jsonl"
    store = sandbox.open_store()
    append_like_claude(path, lines[:10], pause=0)
    daemon.wait_until(lambda: lines_committed(store, path) == 10, "the new file found by a rescan")
    append_like_claude(path, lines[10:], pause=0)
    daemon.wait_until(
        lambda: lines_committed(store, path) == len(lines), "the appends found by a rescan"
    )
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["watcher"]["rescans"] >= 3),
        "a report counting the rescans",
    )
    assert report["watcher"]["observer"] == "polling"
    # nothing came from the observer: the rescans did it all
    assert report["watcher"]["events"] == 0
    daemon.stop()


# --- 8. one daemon per state folder
# -----------------------------------------------------------------------


def test_a_second_daemon_on_the_same_state_folder_exits_2(sandbox: Sandbox) -> None:
    first = sandbox.start()
    notify = NotifyListener(sandbox.root / "notify-second.sock")
    try:
        started = time.monotonic()
        second = run_riffd(
            "run",
            config=sandbox.config,
            env={"NOTIFY_SOCKET": str(notify.path)},
            cwd=sandbox.root,
            timeout=30,
        )
        elapsed = time.monotonic() - started
    finally:
        notify.close()
    assert second.returncode == 2, second.stderr
    assert elapsed < STOP_WITHIN, f"the second daemon took {elapsed:.1f} s to give up"
    assert f"pid {first.pid}" in second.stderr
    assert notify.find("READY") is None
    assert first.process.poll() is None  # the first one is unaffected
    first.stop()


# --- state that heals, and private files
# -------------------------------------------------------------------


def repaired_once(sandbox: Sandbox, daemon: RunningDaemon, name: str) -> Path:
    """Write a damaged session as Claude Code would and wait until the daemon has repaired it;
    return its path."""
    damaged = resumed_duplicate()
    path = sandbox.project / name
    append_like_claude(path, damaged.lines)
    daemon.wait_until(
        lambda: scan_file(path).findings == [] and path.read_bytes() != damaged.data,
        f"{name} to be repaired",
    )
    return path


@requires_corpus
@pytest.mark.parametrize("database", ["state.db", "archive.db"])
@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_database_is_moved_aside_and_repairs_go_on(
    sandbox: Sandbox, database: str, how: str
) -> None:
    daemon = sandbox.start()
    repaired_once(sandbox, daemon, f"{session_id_of(resumed_duplicate().lines)}.jsonl")
    daemon.stop()
    target = sandbox.state / database
    if how == "truncated":
        with open(target, "r+b") as handle:
            handle.truncate(target.stat().st_size // 2)
    else:
        target.write_bytes(os.urandom(target.stat().st_size))
    before = target.read_bytes()

    daemon = sandbox.start()  # starts all the same
    repaired_once(sandbox, daemon, "second.jsonl")  # and repairs go on
    key = database.removesuffix(".db")
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["databases"][key]["moved_aside"]),
        "a report naming the moved database",
    )
    [moved] = report["databases"][key]["moved_aside"]
    assert Path(moved).read_bytes() == before  # kept byte for byte, beside the new one
    if database == "archive.db":
        assert any(
            moved in problem and f"riffd --config {sandbox.config} archive recover" in problem
            for problem in report["problems"]
        )
    for command in (["status"], ["report"], ["archive", "stats"]):
        result = sandbox.riffd(*command)
        assert "Traceback" not in result.stderr and result.returncode in (0, 1), (
            command,
            result.stderr,
        )
    assert moved in sandbox.riffd("report").stdout
    daemon.stop()
    if database == "archive.db":
        result = sandbox.riffd("archive", "recover")
        assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
        assert f"from {moved} into" in result.stdout


@requires_corpus
def test_every_file_riffd_writes_is_private_whatever_the_folder_mode(sandbox: Sandbox) -> None:
    sandbox.state.mkdir(mode=0o755)
    os.chmod(sandbox.state, 0o755)  # a folder given by RIFFD_STATE_DIR that others may list
    daemon = sandbox.start()
    repaired_once(sandbox, daemon, f"{session_id_of(resumed_duplicate().lines)}.jsonl")
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["repairs"]["done"] >= 1), "a report of the repair"
    )
    daemon.stop()
    modes = {
        str(path.relative_to(sandbox.state)): stat_mode(path) for path in sandbox.state.rglob("*")
    }
    assert {"state.db", "archive.db", "riffd.lock", "reports/latest.json"} <= set(modes)
    assert any(name.startswith("backups/") and name.endswith(".gz") for name in modes)
    wrong = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o700 if (sandbox.state / name).is_dir() else 0o600)
    }
    assert wrong == {}


def stat_mode(path: Path) -> int:
    return os.lstat(path).st_mode & 0o777


@requires_corpus
def test_fix_with_another_backup_folder_beside_the_daemon_repairs_each_file_once(
    sandbox: Sandbox,
) -> None:
    data = resumed_duplicate().data
    paths = []
    for number in range(30):
        path = sandbox.project / f"s{number:02d}.jsonl"
        path.write_bytes(data)
        os.utime(path, (time.time() - 3600, time.time() - 3600))  # idle: both may repair it at once
        paths.append(path)
    daemon = sandbox.start()
    other = sandbox.root / "fix-backups"
    fix = run_riffd(
        "fix",
        "--quiet-period",
        str(QUIET_PERIOD),
        "--backup-dir",
        str(other),
        "--json",
        str(sandbox.projects),
        config=sandbox.config,
    )
    for path in paths:
        daemon.wait_until(
            lambda path=path: scan_file(path).findings == [], f"{path.name} to be repaired"
        )
    daemon.stop()
    outcomes = [item["outcome"] for item in json.loads(fix.stdout)["files"]]
    assert "failed" not in outcomes and "error" not in outcomes, fix.stdout
    by_fix = len(list(other.glob("*.json"))) if other.exists() else 0
    by_daemon = len(sandbox.backup_ids())
    # one backup per repair: each repaired once
    assert by_fix + by_daemon == len(paths), (
        by_fix,
        by_daemon,
    )
    assert outcomes.count("repaired") == by_fix


def test_a_new_daemon_reports_itself_at_once_and_status_never_shows_a_stopped_one_as_running(
    sandbox: Sandbox,
) -> None:
    # the scheduled report is an hour away: the first comes anyway
    sandbox.write_config(reports__interval=3600.0)
    started = time.time()
    daemon = sandbox.start()
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid),
        "a report of the new daemon",
        timeout=15,
    )
    assert report_time(report) >= started - 1 and report["daemon"]["running"]
    status = sandbox.riffd("status")
    assert status.returncode == 0 and f"running (pid {daemon.pid})" in status.stdout, status.stdout
    log = daemon.stderr()
    assert "in repair mode" in log and "quiet period" in log and "start-up pass done" in log
    daemon.stop()
    status = sandbox.riffd("status")
    assert status.returncode == 3, status.stdout
    assert "running" not in status.stdout.replace("no riffd daemon runs", ""), status.stdout
    assert (
        "riffd daemon: stopped, last seen at" in status.stdout
        and f"(pid {daemon.pid})" in status.stdout
    )
    document = json.loads(sandbox.riffd("status", "--json").stdout)
    assert document["running"] is False and document["state"] == "stopped"
    assert (
        document["report"]["daemon"]["running"] is False
        and document["report"]["daemon"]["pid"] == daemon.pid
    )
    latest = sandbox.report()  # the report written at shutdown says so too
    assert latest is not None and latest["daemon"]["running"] is False


def test_status_shows_what_the_daemon_did_seconds_ago_not_at_its_last_report(
    sandbox: Sandbox,
) -> None:
    sandbox.write_config(reports__interval=3600.0)
    daemon = sandbox.start()
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid), "a first report"
    )
    path = sandbox.project / "s.jsonl"
    path.write_bytes(
        transcript_bytes(5) + b'{"type":"user","message":{"role":"us\n' + transcript_line(6)
    )
    status = daemon.wait_until(
        lambda: _status_where(sandbox, lambda s: s.returncode == 1),
        "status to see the malformed line",
        timeout=20,
    )
    assert f"needs attention: {path} line 6: malformed_line" in status.stdout, status.stdout
    assert f"`riffd --config {sandbox.config} ack {path}:6` acknowledges it" in status.stdout
    assert sandbox.riffd("ack", f"{path}:6").returncode == 0
    status = sandbox.riffd("status")  # the acknowledgement counts at once
    assert status.returncode == 0, status.stdout
    assert f"acknowledged: {path} line 6: malformed_line" in status.stdout
    # the daemon's last report: before
    assert (sandbox.report() or {}).get("findings", {}).get("open") == {}
    daemon.stop()


def _status_where(
    sandbox: Sandbox, condition: Callable[[subprocess.CompletedProcess[str]], bool]
) -> subprocess.CompletedProcess[str] | None:
    result = sandbox.riffd("status")
    return result if condition(result) else None


def test_status_and_report_work_while_the_config_file_is_broken(sandbox: Sandbox) -> None:
    daemon = sandbox.start()
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid), "a first report"
    )
    with open(sandbox.config, "a") as config:
        # a second [watcher]: not TOML; the daemon keeps its config
        config.write("\n[watcher]\ndebounce = 2\n")
    for command in (["status"], ["report"]):
        result = sandbox.riffd(*command)
        assert result.returncode in (0, 1), (command, result.stdout, result.stderr)
        assert (
            f"config error: {sandbox.config}: line" in result.stderr
            and "Traceback" not in result.stderr
        )
    status = daemon.wait_until(
        lambda: _status_where(sandbox, lambda s: "last reload, which failed" in s.stdout),
        "status to say the daemon runs on its previous config",
    )
    assert (
        f"- config: the daemon runs on {sandbox.config} as it was before the last reload"
        in status.stdout
    )
    assert f"running (pid {daemon.pid})" in sandbox.riffd("status").stdout
    daemon.stop()


def test_a_root_created_after_start_is_watched_within_seconds(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    # Claude Code installed, no session yet: no projects/ folder
    (box.claude / "sessions").mkdir(parents=True)
    # not the rescan: the new root itself must be noticed
    box.write_config(watcher__rescan_interval=3600.0)
    try:
        daemon = box.start()
        box.project.mkdir(parents=True)
        path = box.project / "first.jsonl"
        path.write_bytes(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).data)
        daemon.wait_until(
            lambda: box.backup_ids() and scan_file(path).findings == [],
            "the first session in the new root to be repaired",
            timeout=15,
        )
        assert "appeared: watching it" in daemon.stderr()
        daemon.stop()
    finally:
        box.close()


@requires_corpus
def test_notify_command_hears_of_damage_and_of_its_repair(sandbox: Sandbox) -> None:
    heard = sandbox.root / "heard.jsonl"
    listener = sandbox.root / "listener.py"
    listener.write_text(
        "import json, sys\n"
        f"with open({str(heard)!r}, 'a') as out:\n"
        "    out.write(json.dumps({'summary': sys.argv[-1], 'event': json.load(sys.stdin)}) + '\\n')\n"
    )
    sandbox.write_config(notify__command=f"{sys.executable} {listener}")
    daemon = sandbox.start()
    daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid),
        "the start-up pass",
    )
    path = repaired_once(sandbox, daemon, "damaged.jsonl")

    def events() -> list[dict[str, Any]] | None:
        found = (
            [json.loads(line) for line in heard.read_text().splitlines()] if heard.exists() else []
        )
        return (
            found if {item["event"]["event"] for item in found} >= {"damaged", "repaired"} else None
        )

    found = daemon.wait_until(events, "the damaged and repaired events")
    damaged, repaired = (
        next(item for item in found if item["event"]["event"] == kind)
        for kind in ("damaged", "repaired")
    )
    assert damaged["event"]["path"] == str(path) and DUPLICATE in damaged["event"]["classes"]
    assert damaged["summary"] == f"riffd: session damaged: {DUPLICATE} 1 in {path}"
    assert repaired["event"]["backup_id"] in sandbox.backup_ids()
    assert repaired["summary"].startswith(f"riffd: repaired {DUPLICATE} 1 in {path} (backup ")
    assert found.index(damaged) < found.index(repaired)
    daemon.stop()


def test_the_archive_compacted_while_quiet_between_bursts_keeps_every_line(
    sandbox: Sandbox,
) -> None:
    """The daemon compacts its archive whenever lines stop coming for `archive.settle_after` (here 1
    s), and stops compacting as soon as they come again. Bursts of appends (packs filled fast,
    stored loose) with pauses of about that length between them, so compaction and settling run
    between bursts and meet the next one: every line of every session stays in the archive byte for
    byte, and once quiet nothing is left loose."""
    import random

    sandbox.write_config(archive__settle_after=1.0)
    rng = random.Random(20261125)
    words = [
        f"{a}{b}{c}"
        for a in ("ka", "lo", "mi", "nu", "pe", "ra")
        for b in ("ven", "dor", "lix", "mup")
        for c in ("a", "o", "ert", "ist")
    ]
    paths = [
        sandbox.project / f"5e55104e-0000-4000-8000-00000000000{number}.jsonl"
        for number in range(3)
    ]
    daemon = sandbox.start()
    numbers = dict.fromkeys(paths, 0)
    for _burst in range(5):
        # about 1.2 MB a burst, each line's text its own (the archive keeps a text once)
        for _ in range(100):
            path = rng.choice(paths)
            numbers[path] += 1
            record = json.loads(transcript_line(numbers[path], session_id=path.stem))
            record["message"]["content"] += " ".join(rng.choices(words, k=2_000))
            with open(path, "ab") as out:
                out.write(json.dumps(record).encode() + b"\n")
        # while the daemon archives and compacts: what it has archived so far is the files' start
        if _burst == 2:
            verified = sandbox.riffd("archive", "verify", "--json", str(sandbox.project))
            assert verified.returncode == 0, verified.stdout + verified.stderr
            assert {json.loads(line)["outcome"] for line in verified.stdout.splitlines()} <= {
                "whole",
                "behind",
            }
        time.sleep(rng.uniform(0.5, 2.0))

    def archived_whole() -> bool:
        archive = Archive(sandbox.state / "archive.db", read_only=True)
        try:
            return all(archive.cursor(str(path))[1] == path.stat().st_size for path in paths)
        finally:
            archive.close()

    daemon.wait_until(archived_whole, "every line archived", timeout=60)
    daemon.wait_until(
        lambda: (
            "at the settled level, 0 left" in daemon.stderr().rsplit("appended, ", 1)[-1]
            and "archive settled" in daemon.stderr().rsplit("at the settled level, 0 left", 1)[-1]
        ),
        "the archive compacted and settled once quiet",
        timeout=90,
    )
    daemon.stop()
    # a compaction outlasting 1 s is no warning
    assert "maximum number of running instances" not in daemon.stderr()
    assert "malformed" not in daemon.stderr()
    archive = Archive(sandbox.state / "archive.db", read_only=True)
    try:
        for path in paths:
            ((file_id, _path, _session),) = archive.files_of(str(path))
            assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    finally:
        archive.close()
    verified = sandbox.riffd("archive", "verify")
    assert (
        verified.returncode == 0
        and "verified 3 file(s)" in verified.stderr
        and "3 whole" in verified.stderr
    )
    compact = sandbox.riffd("archive", "compact")
    # nothing was left loose
    assert compact.returncode == 0 and "compressed" not in compact.stderr, compact.stderr


def test_a_notify_command_that_does_not_split_is_a_config_error_at_start_and_on_reload(
    sandbox: Sandbox,
) -> None:
    sandbox.write_config(notify__command="notify-send 'riffd")
    started = run_riffd("run", config=sandbox.config, cwd=sandbox.root, timeout=30)
    assert started.returncode == 2 and "Traceback" not in started.stderr, started.stderr
    assert re.search(
        rf"config error: {re.escape(str(sandbox.config))}: line \d+: notify\.command: bad value",
        started.stderr,
    ), started.stderr

    sandbox.write_config(notify__command="notify-send riffd")
    daemon = sandbox.start()
    sandbox.write_config(notify__command='notify-send "riffd')
    daemon.process.send_signal(signal.SIGHUP)
    report = daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: (r["daemon"]["last_reload"] or {}).get("ok") is False
        ),
        "a report of the failed reload",
    )
    assert any(
        "notify.command: bad value" in error for error in report["daemon"]["last_reload"]["errors"]
    )
    assert daemon.process.poll() is None
    daemon.stop()
