"""A full disk under riffd's state folder, for real: a small tmpfs filled by riffd itself, so SQLite and the report
writer meet a real ENOSPC (no injected error). Nothing stored before is lost, nothing is called damaged or moved
aside, `status`, the log and the exit codes say what happened, and once space is freed riffd catches up by itself.

Mounting a tmpfs needs root (CI runs as root); elsewhere these tests skip, saying so."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SRC_DIR
from riffd.archive.store import Archive
from riffd.daemon.state import StateStore

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
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(path)],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")

    def grow(self, mib: int = 64) -> None:
        subprocess.run(["mount", "-o", f"remount,size={mib}m", str(self.path)], check=True)

    def unmount(self) -> None:
        for _ in range(50):
            if subprocess.run(["umount", str(self.path)], capture_output=True, check=False).returncode == 0:
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
    """Write SESSIONS transcripts of distinct text (about 3 MB in all, so they cannot fit in 400 KiB however well
    the archive compresses) under `folder`; return path -> bytes."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(9000)]
    written = {}
    for number in range(SESSIONS):
        session = f"5e55104e-0000-4000-8000-{number:012d}"
        lines = []
        for line in range(LINES):
            record = {"type": "user" if line % 2 else "assistant", "uuid": f"{session}-{line}",
                      "parentUuid": f"{session}-{line - 1}" if line else None, "sessionId": session,
                      "message": {"role": "user" if line % 2 else "assistant",
                                  "content": " ".join(rng.choice(words) for _ in range(60))}}
            lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        path = folder / "-home-user-project" / f"{session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))
        written[path] = path.read_bytes()
    return written


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{tmp_path / "claude"}"\n'
                      f'roots = ["{tmp_path / "claude" / "projects"}"]\n')
    return config


def _environment(tmp_path: Path) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RIFFD_")}
    environment["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude")
    return environment


def _riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "riffd", "--config", str(_config(tmp_path)), *args],
                          capture_output=True, text=True, env=_environment(tmp_path), timeout=120, check=False)


def _archived(db_path: Path) -> dict[str, bytes]:
    """Every archived file's bytes as the archive gives them back (its newest generation), by path."""
    archive = Archive(db_path)
    try:
        return {path: b"".join(archive.iter_file(file_id)) for file_id, path in archive.files()}
    finally:
        archive.close()


def _quick_check(db_path: Path) -> str:
    with sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True) as db:
        return str(db.execute("PRAGMA quick_check").fetchone()[0])


def _leftovers(folder: Path) -> list[str]:
    """Databases riffd would have moved aside as damaged."""
    return sorted(path.name for path in folder.iterdir() if ".damaged-" in path.name)


def test_ingest_on_a_full_disk_keeps_what_it_stored_and_finishes_once_there_is_room(
        tmp_path: Path, small_disk: SmallDisk) -> None:
    originals = _sessions(tmp_path / "claude" / "projects")
    db_path = small_disk.path / "archive.db"

    full = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert full.returncode == 2, full.stderr
    assert "is full" in full.stderr and "not damaged" in full.stderr and "run the command again" in full.stderr
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
    assert added == SESSIONS * LINES - lines_before  # every line once: nothing stored twice, nothing skipped
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*), SUM(lines), MAX(generation) FROM files").fetchone() == (
            SESSIONS, SESSIONS * LINES, 0)


def test_a_disk_full_before_the_archive_exists_leaves_no_empty_file_to_be_called_damaged(
        tmp_path: Path, small_disk: SmallDisk) -> None:
    _sessions(tmp_path / "claude" / "projects")
    filler = small_disk.path / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:  # take every byte of the disk
        while os.write(descriptor, b"\0" * 4096):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    failed = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert failed.returncode == 2 and "is full" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr
    assert not (small_disk.path / "archive.db").exists(), "an empty archive.db would look damaged at the next open"

    filler.unlink()
    small_disk.grow()
    done = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects"))
    assert done.returncode == 0, done.stderr
    assert _leftovers(small_disk.path) == []


def _wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.slow
def test_daemon_on_a_full_state_disk_says_so_and_catches_up_once_there_is_room(
        tmp_path: Path, small_disk: SmallDisk) -> None:
    originals = _sessions(tmp_path / "claude" / "projects")
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log_file:
        daemon = subprocess.Popen([sys.executable, "-m", "riffd", "--config", str(_config(tmp_path)), "run"],
                                  stdout=log_file, stderr=subprocess.STDOUT, env=_environment(tmp_path))
    try:
        _wait_for(lambda: b"start-up pass done" in log_path.read_bytes(), 60, "the start-up pass")
        log = log_path.read_text()
        summary = next(line for line in log.splitlines() if "start-up pass done" in line)
        assert "WARNING" in summary and "error(s) on the way" in summary and "riffd status" in summary, summary

        status = _riffd(tmp_path, "status")
        assert status.returncode == 1, status.stdout + status.stderr
        assert "is full" in status.stdout and "**healthy**" not in status.stdout, status.stdout
        report = json.loads(_riffd(tmp_path, "status", "--json").stdout)["report"]
        assert not report["healthy"] and any("is full" in problem for problem in report["problems"])

        time.sleep(3)  # a few ticks with the disk still full: the log says it once, not every second
        assert log_path.read_text().count("could not store the live figures") <= 1

        small_disk.grow()

        def caught_up() -> bool:
            result = _riffd(tmp_path, "status")
            return result.returncode == 0 and f"files: {SESSIONS} watched" in result.stdout

        _wait_for(caught_up, 60, "riffd to catch up and call itself healthy")
        assert "the live figures are stored again" in log_path.read_text() or \
            "could not store the live figures" not in log_path.read_text()
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
    log = log_path.read_text()
    assert code == 0, log[-3000:]
    assert "riffd stopped" in log and "Traceback" not in log
    assert _leftovers(small_disk.path) == []
    assert _archived(small_disk.path / "archive.db") == {str(path): data for path, data in originals.items()}


def test_status_names_a_running_daemon_that_has_stored_no_figures_for_minutes(tmp_path: Path) -> None:
    """A daemon that holds the lock but could never store its figures (its disk was full from the start) is not
    shown as 'starting', healthy, for ever: after STUCK_SECONDS status says it and exits 1."""
    state = tmp_path / "state"
    StateStore(state / "state.db").close()  # the state a previous run left
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]); from pathlib import Path; "
        "from riffd.daemon.lock import StateLock; lock = StateLock(Path(sys.argv[1])); lock.acquire(); "
        "print('locked', flush=True); time.sleep(60)"), str(state), str(SRC_DIR)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        fresh = _riffd(tmp_path, "status")
        assert fresh.returncode == 0 and "starting" in fresh.stdout, fresh.stdout  # just started: not a problem
        long_ago = time.time() - 600
        os.utime(state / "riffd.lock", (long_ago, long_ago))  # it took the lock ten minutes ago
        stuck = _riffd(tmp_path, "status")
        assert stuck.returncode == 1, stuck.stdout
        assert "has stored no figures" in stuck.stdout and "**healthy**" not in stuck.stdout
        assert "health is judged once" not in stuck.stdout
    finally:
        holder.kill()
        holder.communicate()
