"""A full disk under riffd's state folder, for real: a small tmpfs filled by riffd itself, so SQLite
and the report writer meet a real ENOSPC (no injected error). Nothing stored before is lost, nothing
is called damaged or moved aside, `status`, the log and the exit codes say what happened, and once
space is freed riffd catches up by itself.

Mounting a tmpfs needs root (CI runs as root); elsewhere these tests skip, saying so."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import SRC_DIR
from helpers.run import run_riffd, start_riffd
from riffd.archive.store import Archive
from riffd.database import is_full_error
from riffd.state.records import Watermark
from riffd.state.store import StateStore

SESSIONS = 20
LINES = 300


def _mount_unavailable() -> str | None:
    if sys.platform != "linux":
        return "tmpfs mounts are Linux's"
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root (these tests fill a real filesystem to meet a real ENOSPC)"
    return None


class SmallDisk:
    """A tmpfs of a few hundred KiB mounted at `path`; `grow()` gives it room."""

    def __init__(self, path: Path, kib: int) -> None:
        self.path = path
        path.mkdir(parents=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")

    def grow(self, mib: int = 64) -> None:
        subprocess.run(["mount", "-o", f"remount,size={mib}m", str(self.path)], check=True)

    def unmount(self) -> None:
        for _ in range(50):
            if (
                subprocess.run(
                    ["umount", str(self.path)], capture_output=True, check=False
                ).returncode
                == 0
            ):
                return
            time.sleep(0.1)
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """The state folder on a 400 KiB tmpfs (the fixture skips where it cannot be mounted)."""
    why = _mount_unavailable()
    if why:
        pytest.skip(why)
    disk = SmallDisk(tmp_path / "state", 400)
    try:
        yield disk
    finally:
        disk.unmount()


def _sessions(folder: Path) -> dict[Path, bytes]:
    """Write SESSIONS transcripts of distinct text (about 3 MB in all, so they cannot fit in 400 KiB
    however well the archive compresses) under `folder`; return path -> bytes."""
    rng = random.Random(7)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(9000)
    ]
    written = {}
    for number in range(SESSIONS):
        session = f"5e55104e-0000-4000-8000-{number:012d}"
        lines = []
        for line in range(LINES):
            record = {
                "type": "user" if line % 2 else "assistant",
                "uuid": f"{session}-{line}",
                "parentUuid": f"{session}-{line - 1}" if line else None,
                "sessionId": session,
                "message": {
                    "role": "user" if line % 2 else "assistant",
                    "content": " ".join(rng.choice(words) for _ in range(60)),
                },
            }
            lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        path = folder / "-home-user-project" / f"{session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))
        written[path] = path.read_bytes()
    return written


def _config(tmp_path: Path, extra: str = "") -> Path:
    """The config file (written once: a daemon reloads a config file that changes)."""
    config = tmp_path / "config.toml"
    if not config.exists() or extra:
        config.write_text(
            f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{tmp_path / "claude"}"\n'
            f'roots = ["{tmp_path / "claude" / "projects"}"]\n{extra}'
        )
    return config


def _environment(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def _riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_riffd(*args, config=_config(tmp_path), env=_environment(tmp_path))


def _archived(db_path: Path) -> dict[str, bytes]:
    """Every archived file's bytes as the archive gives them back (its newest generation), by
    path."""
    archive = Archive(db_path)
    try:
        return {path: b"".join(archive.iter_file(file_id)) for file_id, path in archive.files()}
    finally:
        archive.close()


def _quick_check(db_path: Path) -> str:
    db = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
    try:
        return str(db.execute("PRAGMA quick_check").fetchone()[0])
    finally:
        db.close()  # (a connection left open would keep the tmpfs busy)


def _leftovers(folder: Path) -> list[str]:
    """Databases riffd would have moved aside as damaged."""
    return sorted(path.name for path in folder.iterdir() if ".damaged-" in path.name)


def test_ingest_on_a_full_disk_keeps_what_it_stored_and_finishes_once_there_is_room(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    originals = _sessions(tmp_path / "claude" / "projects")
    db_path = small_disk.path / "archive.db"

    full = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert full.returncode == 2, full.stderr
    assert (
        "is full" in full.stderr
        and "not damaged" in full.stderr
        and "run the command again" in full.stderr
    )
    assert "moves it aside" not in full.stderr and "cannot be read" not in full.stderr
    assert "Traceback" not in full.stderr
    assert f"of {SESSIONS} file(s)" in full.stderr  # how far it got
    assert _quick_check(db_path) == "ok"
    assert _leftovers(small_disk.path) == []
    stored = _archived(db_path)
    assert stored, "some files fit before the disk was full"
    assert len(stored) < SESSIONS, "the disk was meant to fill up during the ingest"
    for path, data in stored.items():  # each an exact prefix of its transcript, cut at a line's end
        original = originals[Path(path)]
        assert original.startswith(data) and (not data or data.endswith(b"\n")), path

    small_disk.grow()
    again = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert again.returncode == 0, again.stderr
    archived_now = _archived(db_path)
    assert archived_now == {str(path): data for path, data in originals.items()}
    added = int(again.stderr.split("archived ")[1].split(" new line(s)")[0])
    lines_before = sum(data.count(b"\n") for data in stored.values())
    # every line once: nothing stored twice, nothing skipped
    assert added == SESSIONS * LINES - lines_before
    db = sqlite3.connect(db_path)
    try:
        assert db.execute("SELECT COUNT(*), SUM(lines), MAX(generation) FROM files").fetchone() == (
            SESSIONS,
            SESSIONS * LINES,
            0,
        )
    finally:
        db.close()


def test_a_disk_full_before_the_archive_exists_leaves_no_empty_file_to_be_called_damaged(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    _sessions(tmp_path / "claude" / "projects")
    filler = _fill(small_disk.path)
    failed = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert failed.returncode == 2 and "is full" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr
    assert not (small_disk.path / "archive.db").exists(), (
        "an empty archive.db would look damaged at the next open"
    )

    filler.unlink()
    small_disk.grow()
    done = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert done.returncode == 0, done.stderr
    assert _leftovers(small_disk.path) == []


def _wait_for(condition, timeout: float, what: str, tell=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tell()}")


@pytest.mark.slow
def test_daemon_on_a_full_state_disk_says_so_and_catches_up_once_there_is_room(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    originals = _sessions(tmp_path / "claude" / "projects")
    # reports fail on the full disk too, and come back
    _config(tmp_path, "[reports]\ninterval = 2\n")
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log_file:
        daemon = start_riffd(
            "run",
            config=_config(tmp_path),
            env=_environment(tmp_path),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(lambda: b"start-up pass done" in log_path.read_bytes(), 60, "the start-up pass")
        log = log_path.read_text()
        summary = next(line for line in log.splitlines() if "start-up pass done" in line)
        assert (
            "WARNING" in summary and "error(s) on the way" in summary and "riffd status" in summary
        ), summary

        status = _riffd(tmp_path, "status")
        assert status.returncode == 1, status.stdout + status.stderr
        assert "is full" in status.stdout and "**healthy**" not in status.stdout, status.stdout
        report = json.loads(_riffd(tmp_path, "status", "--json").stdout)["report"]
        assert not report["healthy"] and any("is full" in problem for problem in report["problems"])

        # a few ticks and reports with the disk still full: the log says so once, not every second
        time.sleep(5)
        log = log_path.read_text()
        assert log.count("could not store the live figures") <= 1
        assert "Traceback" not in log, "a failed report is one line, not a traceback"

        small_disk.grow()

        def caught_up() -> bool:
            result = _riffd(tmp_path, "status")
            return result.returncode == 0 and f"files: {SESSIONS} watched" in result.stdout

        _wait_for(
            caught_up,
            60,
            "riffd to catch up and call itself healthy",  # not the 15-minute rescan
            lambda: _riffd(tmp_path, "status").stdout + "\n" + log_path.read_text()[-4000:],
        )
        assert "has room again" in log_path.read_text()
    finally:
        code = _stop(daemon)
    log = log_path.read_text()
    assert code == 0, log[-3000:]
    assert "riffd stopped" in log and "Traceback" not in log
    assert _leftovers(small_disk.path) == []
    assert _archived(small_disk.path / "archive.db") == {
        str(path): data for path, data in originals.items()
    }
    assert "configuration reloaded" not in log


@contextmanager
def _lock_held(state: Path) -> Iterator[subprocess.Popen[str]]:
    """A real process holding the state folder's daemon lock (as a daemon does) while the block
    runs."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; sys.path.insert(0, sys.argv[2]); from pathlib import Path; "
                "from riffd.daemon.lock import StateLock; lock = StateLock(Path(sys.argv[1])); lock.acquire(); "
                "print('locked', flush=True); time.sleep(60)"
            ),
            str(state),
            str(SRC_DIR),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.communicate()


def test_status_names_a_running_daemon_that_has_stored_no_figures_for_minutes(
    tmp_path: Path,
) -> None:
    """A daemon that holds the lock but could never store its figures (its disk was full from the
    start) is not shown as 'starting', healthy, for ever: after STUCK_SECONDS status says it and
    exits 1."""
    state = tmp_path / "state"
    # the state a previous run left, with a finding still open
    store = StateStore(state / "state.db")
    store.save_file(
        Watermark("/p/a.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0),
        "s",
        [{"class": "duplicate_tool_result", "lines": [7, 9], "message": "answered twice"}],
        1,
    )
    store.close()
    with _lock_held(state):
        fresh = _riffd(tmp_path, "status")
        # just started: not a problem, nor are the findings the last run left (this pass judges them
        # again)
        assert fresh.returncode == 0 and "starting" in fresh.stdout, fresh.stdout
        long_ago = time.time() - 600
        os.utime(state / "riffd.lock", (long_ago, long_ago))  # it took the lock ten minutes ago
        stuck = _riffd(tmp_path, "status")
        assert stuck.returncode == 1, stuck.stdout
        assert "has stored no figures" in stuck.stdout and "**healthy**" not in stuck.stdout
        assert "health is judged once" not in stuck.stdout


def _fill(folder: Path) -> Path:
    """Take every byte left on the disk holding `folder`; return the filler file."""
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(descriptor, b"\0" * 4096):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


def _run_until_started(tmp_path: Path) -> subprocess.Popen[bytes]:
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log_file:
        daemon = start_riffd(
            "run",
            config=_config(tmp_path),
            env=_environment(tmp_path),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(
            lambda: b"start-up pass done" in log_path.read_bytes(),
            60,
            "the start-up pass",
            lambda: log_path.read_text()[-3000:],
        )
    except BaseException:
        _stop(daemon)
        raise
    return daemon


def _stop(daemon: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as systemd stops it; killed when it does not stop within a minute (no test leaves a
    daemon)."""
    daemon.send_signal(signal.SIGTERM)
    try:
        return daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
        raise


@pytest.mark.slow  # end to end: `riffd run` three times
def test_a_daemon_started_on_a_full_disk_says_so_in_one_line_and_moves_nothing_aside(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    assert _stop(_run_until_started(tmp_path)) == 0  # the state a first run leaves
    filler = _fill(small_disk.path)

    started = _riffd(tmp_path, "run")
    assert started.returncode == 2, started.stderr
    lines = [line for line in started.stderr.splitlines() if "riffd: error" in line]
    assert len(lines) == 1 and "is full" in lines[0] and "Traceback" not in started.stderr, (
        started.stderr
    )
    # SQLite cannot even read the state without room for its -shm
    status = _riffd(tmp_path, "status")
    assert status.returncode in (2, 3), status.stdout + status.stderr
    assert "is full" in status.stdout + status.stderr and "Traceback" not in status.stderr

    filler.unlink()
    assert _stop(_run_until_started(tmp_path)) == 0
    assert _leftovers(small_disk.path) == []


@pytest.mark.slow
def test_an_archive_that_cannot_be_opened_at_start_is_opened_by_a_later_rescan(
    tmp_path: Path,
) -> None:
    """The archive off at start (here: a folder in its place; in life, a full disk) is not off for
    the daemon's whole life: each rescan tries again, then archives every line read meanwhile."""
    originals = _sessions(tmp_path / "claude" / "projects")
    (tmp_path / "state" / "archive.db").mkdir(parents=True)
    # (an empty folder is 0 bytes on btrfs)
    (tmp_path / "state" / "archive.db" / "in-the-way").write_text("x")
    _config(tmp_path, "[watcher]\nrescan_interval = 1\n")
    daemon = _run_until_started(tmp_path)
    log_path = tmp_path / "daemon.log"
    try:
        assert "the archive is off" in log_path.read_text()
        assert _riffd(tmp_path, "status").returncode == 1  # said, not silent

        def rescans() -> int:
            status = _riffd(tmp_path, "status", "--json")
            return int(json.loads(status.stdout)["report"]["watcher"]["rescans"])

        first = rescans()
        _wait_for(
            lambda: rescans() >= first + 3, 30, "three more rescans, each trying the archive again"
        )
        assert log_path.read_text().count("the archive is off") == 1  # once, not at every try
        shutil.rmtree(tmp_path / "state" / "archive.db")
        _wait_for(
            lambda: "the archive is on again" in log_path.read_text(),
            30,
            "the archive to be opened again",
            lambda: log_path.read_text()[-3000:],
        )

        def archived_all() -> bool:
            db = sqlite3.connect(tmp_path / "state" / "archive.db")
            try:
                return bool(
                    db.execute("SELECT COALESCE(SUM(lines), 0) FROM files").fetchone()[0]
                    == SESSIONS * LINES
                )
            except sqlite3.Error:
                return False
            finally:
                db.close()

        _wait_for(archived_all, 30, "every line read while the archive was off to be archived")
        _wait_for(
            lambda: _riffd(tmp_path, "status").returncode == 0,
            30,
            "the error to be taken back",
            lambda: _riffd(tmp_path, "status").stdout,
        )
    finally:
        assert _stop(daemon) == 0
    assert _archived(tmp_path / "state" / "archive.db") == {
        str(path): data for path, data in originals.items()
    }


@pytest.mark.slow
def test_a_full_reports_folder_elsewhere_is_named_and_the_state_disk_is_not_blamed(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    """Here the small disk holds only the reports (`reports.dir`); the state folder has room."""
    _sessions(tmp_path / "claude" / "projects")
    reports = small_disk.path
    _fill(reports)
    state = tmp_path / "state-elsewhere"
    (tmp_path / "config.toml").write_text(
        f'state_dir = "{state}"\nclaude_dir = "{tmp_path / "claude"}"\nroots = ["{tmp_path / "claude" / "projects"}"]\n'
        f'[reports]\ndir = "{reports}"\ninterval = 1\n'
    )
    daemon = _run_until_started(tmp_path)
    try:
        time.sleep(4)  # a few reports
        status = _riffd(tmp_path, "status")
    finally:
        assert _stop(daemon) == 0
    log = (tmp_path / "daemon.log").read_text()
    assert f"the disk holding {reports} is full" in log, log[-3000:]
    assert f"the disk holding {state} is full" not in log and "has room again" not in log
    assert "Traceback" not in log
    assert status.returncode == 1 and f"the state folder {state} is full" not in status.stdout, (
        status.stdout
    )
    assert f"could not write the report to {reports}" in status.stdout, status.stdout


def test_status_of_a_daemon_finishing_its_queue_says_stopping_not_running(tmp_path: Path) -> None:
    """Between SIGTERM and its exit (the drain, up to 10 s) the daemon still holds its lock but has
    said it stops: status says stopping and exits 3, never 'running' beside 'no riffd daemon
    runs'."""
    from riffd.daemon.jobs import store_snapshot

    state = tmp_path / "state"
    with _lock_held(state) as holder:
        store = StateStore(state / "state.db")
        store_snapshot(
            store,
            {
                "running": False,
                "starting": False,
                "pid": holder.pid,
                "seen_at": time.time(),
                "started": time.time() - 60,
                "latencies": [],
            },
        )
        store.close()
        status = _riffd(tmp_path, "status")
        assert status.returncode == 3, status.stdout
        first = status.stdout.splitlines()[0]
        assert first.startswith(f"riffd daemon: stopping (pid {holder.pid})"), first
        assert "running" not in first and "is stopping" in status.stdout
        assert json.loads(_riffd(tmp_path, "status", "--json").stdout)["state"] == "stopping"


def test_a_damaged_archive_on_a_full_disk_is_moved_aside_once_and_no_empty_one_is_left(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    """The daemon moves a damaged archive aside and makes a new one; on a full disk the new one
    cannot be set up. It must not stay behind empty, to be called damaged and moved aside again at
    every start."""
    db_path = small_disk.path / "archive.db"
    db_path.write_bytes(b"not a database, " * 256)  # damaged
    filler = _fill(small_disk.path)
    for _attempt in range(2):  # two starts of the daemon
        with pytest.raises(sqlite3.Error) as caught:
            Archive(db_path, heal=True, check=True)
        assert is_full_error(caught.value, small_disk.path)
    assert not db_path.exists()
    assert len(_leftovers(small_disk.path)) == 1  # the damaged one, moved aside once
    filler.unlink()
    Archive(db_path, heal=True, check=True).close()
    assert len(_leftovers(small_disk.path)) == 1
