"""`riffd scan --jobs`: files scanned in worker processes give the report a scan in one process
gives."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import transcript_bytes
from helpers.run import killed_at_the_end, said_interrupted, start_riffd


def riffd(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_CONFIG": str(tmp_path / "no-config.toml"),
    }
    return start_riffd(
        *args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, dict, str]:
    """Wait for a `riffd scan --json`; return its exit code, its report without the timing, and its
    stderr."""
    out, err = process.communicate(timeout=300)
    report = json.loads(out)
    del report["summary"]["seconds"]
    return process.returncode, report, err


def make_projects(root: Path, files: int, megabytes: float) -> Path:
    """`files` transcripts of about `megabytes` each under root/projects; every third one has a
    garbage line and a repeated line (a malformed line, a duplicate uuid), so the report has
    findings in some files, not all."""
    projects = root / "projects"
    lines = int(megabytes * 1e6 / 1_000)
    for number in range(files):
        folder = projects / f"-home-user-proj-{number % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        data = transcript_bytes(lines, pad=900)
        if number % 3 == 0:
            first = data.index(b"\n") + 1
            data = data[:first] + b"{not json\n" + data[:first] + data[first:]
        (folder / f"{number:08d}-aaaa-bbbb-cccc-dddddddddddd.jsonl").write_bytes(data)
    (projects / "-home-user-proj-0" / "empty.jsonl").write_bytes(b"")
    return projects


def test_a_parallel_scan_reports_what_a_serial_scan_reports(tmp_path: Path) -> None:
    # 40 MB: over the size where workers start
    projects = make_projects(tmp_path, files=9, megabytes=4.5)
    serial = finish(riffd(tmp_path, "scan", "--json", "--jobs", "1", str(projects)))
    parallel = finish(riffd(tmp_path, "scan", "--json", "--jobs", "2", str(projects)))
    assert serial[0] == parallel[0] == 1
    assert parallel[1] == serial[1]
    assert (
        parallel[1]["summary"]["files"] == 10 and parallel[1]["summary"]["files_with_findings"] == 3
    )
    assert [file["path"] for file in parallel[1]["files"]] == sorted(
        file["path"] for file in parallel[1]["files"]
    )
    assert "warning" not in parallel[2]


@pytest.mark.slow
def test_a_killed_worker_leaves_no_file_unscanned(tmp_path: Path) -> None:
    projects = make_projects(tmp_path, files=12, megabytes=12)
    serial = finish(riffd(tmp_path, "scan", "--json", "--jobs", "1", str(projects)))
    process = riffd(tmp_path, "scan", "--json", "--jobs", "2", str(projects))
    workers = wait_for_workers(process)
    assert workers, "the scan started no worker process"
    os.kill(workers[0], signal.SIGKILL)
    code, report, err = finish(process)
    assert "a scan worker process died" in err and "in this process" in err
    assert (code, report) == serial[:2]  # every file scanned, as in one process


def test_jobs_must_be_a_positive_number(tmp_path: Path) -> None:
    for bad in ("0", "-1", "many"):
        process = riffd(tmp_path, "scan", "--jobs", bad, str(tmp_path))
        _out, err = process.communicate(timeout=60)
        assert process.returncode == 2
        assert f"argument -j/--jobs: {bad!r} is not a number of processes (1 or more)" in err


def _workers_now(process: subprocess.Popen[str]) -> list[int]:
    """The pids of a running scan's worker processes now (its children)."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    with contextlib.suppress(OSError):
        return [int(pid) for pid in children.read_text().split()]
    return []


def _with_workers_now(process: subprocess.Popen[str], seen: list[int]) -> list[int]:
    """`seen` and the scan's workers now: the pool starts its second worker after the first."""
    return sorted({*seen, *_workers_now(process)})


def wait_for_workers(process: subprocess.Popen[str]) -> list[int]:
    """The pids of a running scan's worker processes, once it has started them (empty if it never
    does)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        workers = _workers_now(process)
        if workers:
            return workers
        time.sleep(0.01)
    return []


@pytest.mark.slow
def test_ctrl_c_stops_a_parallel_scan_with_one_line_and_exit_130(tmp_path: Path) -> None:
    projects = make_projects(tmp_path, files=12, megabytes=12)
    process = riffd(tmp_path, "scan", "--jobs", "2", str(projects))
    workers = wait_for_workers(process)
    assert workers, "the scan started no worker process"
    workers = _with_workers_now(process, workers)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "riffd: interrupted" in err and "Traceback" not in err
    for pid in workers:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )


@pytest.mark.slow
def test_ctrl_c_pressed_again_and_again_still_stops_a_parallel_scan(tmp_path: Path) -> None:
    """Ctrl-C held down: a KeyboardInterrupt raised inside the pool's own waiting left a future's
    lock held, and the scan hung in the pool's shutdown for ever (every run of riffd 0.2 here)."""
    projects = make_projects(tmp_path, files=12, megabytes=12)
    process = riffd(tmp_path, "scan", "--jobs", "2", str(projects))
    workers = wait_for_workers(process)
    assert workers, "the scan started no worker process"
    started = time.monotonic()
    while process.poll() is None and time.monotonic() - started < 1:
        workers = _with_workers_now(process, workers)
        process.send_signal(signal.SIGINT)
        time.sleep(0.002)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert err.count("riffd: interrupted") == 1 and "Traceback" not in err
    for pid in workers:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )


# the number of write(2) in /proc/PID/syscall, where a worker sends its result
WRITE_CALL = {"x86_64": 1, "aarch64": 64}.get(os.uname().machine)


@pytest.mark.slow
@pytest.mark.skipif(
    WRITE_CALL is None, reason="write(2)'s number on this machine is not known here"
)
def test_ctrl_c_while_a_worker_sends_its_result_still_stops_the_scan(tmp_path: Path) -> None:
    """Ctrl-C while a worker is in the middle of sending a big result (its report of a file with
    many findings) through the pool's pipe: the scan hung for ever when it killed its workers (the
    pool then waited for the rest of that result). The scan is stopped (SIGSTOP), so that it reads
    no result, until a worker is caught in such a write; then Ctrl-C, and it goes on."""
    projects = tmp_path / "projects"
    for number in range(12):  # 40 MB: over the size where workers start
        folder = projects / f"-home-user-proj-{number % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = transcript_bytes(3000, pad=900).splitlines(keepends=True)
        # a line that is not JSON after every line: 3,000 findings, a result of ~500 KB
        data = b"".join(line + b"{not json\n" for line in lines[:-1]) + lines[-1]
        (folder / f"{number:08d}-aaaa-bbbb-cccc-dddddddddddd.jsonl").write_bytes(data)
    process = start_riffd(
        "scan",
        "--jobs",
        "2",
        str(projects),
        env={"RIFFD_STATE_DIR": str(tmp_path / "state")},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    with killed_at_the_end(process):
        workers = wait_for_workers(process)
        assert workers, "the scan started no worker process"
        # stopped once a worker scans a file (before, the workers would wait for work for ever)
        assert _reading(process, projects), "no worker was seen reading a transcript"
        process.send_signal(signal.SIGSTOP)
        assert _sending(process), "no worker was seen sending its result"
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGCONT)
        said_interrupted(process)  # (hung for ever)


@pytest.mark.slow
def test_workers_end_when_the_scan_is_killed(tmp_path: Path) -> None:
    """`kill -9` (or a plain `kill`) of a parallel scan: its workers waited for work for ever,
    adopted by init; they end within a second."""
    projects = make_projects(tmp_path, files=12, megabytes=12)
    process = riffd(tmp_path, "scan", "--jobs", "2", str(projects))
    workers = wait_for_workers(process)
    assert workers and _reading(process, projects), "no worker was seen reading a transcript"
    workers = _with_workers_now(process, workers)
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    process.communicate(timeout=30)  # (the workers held its pipes open)
    assert not left, "a worker outlived its scan"


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except OSError:
        return False


def _reading(process: subprocess.Popen[str], folder: Path, timeout: float = 30) -> bool:
    """Whether one of the scan's workers comes to have a file under `folder` open within `timeout`
    s (its workers as they are at each look: the first may not be all)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _workers_now(process):
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    if os.readlink(fd).startswith(f"{folder}/"):
                        return True
        time.sleep(0.001)
    return False


def _sending(process: subprocess.Popen[str], timeout: float = 60) -> bool:
    """Whether one of the scan's workers comes to wait in a write(2) of over 64 KiB (a result bigger
    than the pipe, which nobody reads) within `timeout` seconds. Its workers as they are at each
    look: the one that writes may have started after the first was seen, and the others wait for
    the queue's lock, not in a write."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _workers_now(process):
            try:
                call = Path(f"/proc/{pid}/syscall").read_text().split()
            except OSError:
                continue
            if len(call) > 3 and call[0] == str(WRITE_CALL) and int(call[3], 16) > 65536:
                return True
        time.sleep(0.01)
    return False


def test_one_big_file_is_decoded_by_a_second_process_with_the_same_report(tmp_path: Path) -> None:
    projects = make_projects(tmp_path, files=1, megabytes=40)
    path = next(projects.rglob("0*.jsonl"))
    alone = finish(riffd(tmp_path, "scan", "--json", "--jobs", "1", str(path)))
    process = riffd(tmp_path, "--log-level", "debug", "scan", "--json", str(path))
    code, report, err = finish(process)
    assert "read and decoded by a second process" in err and "failed" not in err
    assert "read and decoded by a second process" not in alone[2]
    assert (code, report) == alone[:2] and code == 1 and report["summary"]["findings"] == 2


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_the_start_says_one_line_and_exits_130(tmp_path: Path) -> None:
    """Ctrl-C at 16 moments of a scan's first 0.35 s, riffd's imports and its workers' start among
    them: each ends with one line and exit 130. Before, one landing in the command's imports could
    end in a RuntimeError's traceback (CPython 3.11 wraps a KeyboardInterrupt raised in a class
    body's `__set_name__`), a crash (orjson 3.13's set-up, SIGSEGV), or be lost (importlib's
    module-lock callback). A Ctrl-C that lands before any of riffd runs, in Python's own start
    (before its handler is set, its site-packages' `.pth` files, runpy), ends Python's way: such a
    run is counted apart."""
    projects = make_projects(tmp_path, files=12, megabytes=8)  # seconds of scanning
    before_riffd = 0
    for step in range(16):
        process = riffd(tmp_path, "scan", str(projects))
        time.sleep(0.04 + step * 0.02)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
        if (process.returncode == -signal.SIGINT and not err) or (
            "Traceback" in err and not re.search(r'File "[^"]*/riffd/', err)
        ):  # before Python had its handler, or in its own start (no frame is riffd's)
            before_riffd += 1
            continue
        assert process.returncode == 130, (step, err)
        assert err.count("riffd: interrupted") == 1 and "Traceback" not in err, (step, err)
    assert before_riffd <= 8, "most Ctrl-Cs landed before riffd ran: the test saw too little"
