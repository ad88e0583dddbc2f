"""What `riffd run` costs: append latency, incremental cost on a big file, idle CPU, start-up
reconciliation.

Run by hand from the repository root::

    python3 bench/daemon_bench.py                 # the full run: a few minutes on 2 cores
    python3 bench/daemon_bench.py --quick         # smaller figures, about a minute
    python3 bench/daemon_bench.py --json > result.json
    python3 bench/daemon_bench.py --only latency,append --keep
    python3 bench/daemon_bench.py --only outside --write docs/figures/daemon-outside.md
    python3 bench/daemon_bench.py --write docs/figures/daemon.md  # the table the docs include

Everything happens in a fresh temporary folder (`--tmp` picks where it is made; `--keep` keeps it):
roots, state folder, Claude folder (empty: no session is registered as running) and config file are
the bench's own, and RIFFD_CONFIG, RIFFD_STATE_DIR and CLAUDE_CONFIG_DIR are removed from the
daemon's environment, so nothing of the user's is read or touched. Transcripts are real sessions
from `../shared/corpus/real/` (`--real`) copied with fresh ids by bench/scan_bench.py's generator
(imported from it): `marot-spotter/short.jsonl` (15 lines, 10 kB) for the small files, the real
2.1.39 session chained onto itself for the big one. Every file is one valid tree with no findings.
An appended line is a real user prompt or assistant text line (alternating) with a fresh uuid,
chained onto the file's last line, written with one `write` in append mode.

The daemon is always the real entry point, `python3 -m riffd --config <tmp>/<part>/config.toml run`,
with `log.format = "json"`, `log.level = "debug"` (a quiet append logs at debug) and
`watcher.observer = "native"`, other keys at their defaults unless said. It runs under a
NOTIFY_SOCKET datagram socket the bench binds, as under systemd: READY=1 is sent once start-up
reconciliation has queued its files (so the 10 s STATUS updates are on too). The bench reads the
daemon's stderr in a thread: the worker logs one JSON line per file it processed (`path`, `outcome`,
`lines`, `ms`); each line is stamped with the bench's monotonic clock as it arrives. That is the
method used for "processed": it measures the daemon without touching its state database while it
runs (polling SQLite from here would compete with the daemon for the two cores and for the
database).

1. latency: `watcher.debounce = 0.05`; 4 session files in 2 project folders, processed once at
   start; then `--appends` appends (200), one line each, 50 ms apart, round robin over the 4 files
   (so each file gets one every 200 ms, well past the debounce). Latency of an append = arrival of
   the log line for the processing that covered it - the moment just before its `write`. It
   includes inotify, watchdog, the debounce (50 ms), the worker and the SQLite commit. A log line
   with `lines` n covers the next n appends of its file (n > 1: appends coalesced; counted).
1b. outside: the whole daemon seen from outside, as a user's machine sees it: for each size of
   `--big-mb`, a real `riffd run` (`repair.mode = "report-only"`, the archive on, `log.level =
   "info"` as by default, `watcher.debounce = 0.2`, `archive.settle_after = 3600` so no settle
   falls in the window) over one healthy session of that size. Once it has read the file (its
   INFO log line), a 3 s settle, then its idle CPU rate over `--outside-idle` (30) s; then
   `--outside-appends` (100) one-line appends, 0.5 s apart (each processed alone), and the CPU time
   of the process over them (the run time of all its threads in ns, `/proc/<pid>/task/*/schedstat`;
   the 10 ms ticks of `/proc/<pid>/stat` when a thread ended meanwhile), less the idle rate over
   the same time, per appended line: archive, tracker, state store, detection, the
   watcher and logging included. A quiet append logs at DEBUG, so after SIGTERM the store's
   `lines.processed` must have grown by exactly the appends, or the run fails. The goal: at most
   2 ms a line at every size, and the largest file at most 1.5x the smallest.
1c. paused: in process, what the outside figure is made of: the worker the daemon builds (its default
   configuration, report-only: the archive and the tracker on) on a session of the first `--big-mb`
   size; the thread CPU time of `Worker.process` for `--outside-appends` appends back to back, then
   as many `--pause` (0.5) s apart, as the daemon sees them (the CPU's caches go cold between them:
   the same work costs about three times as much), with the archive's batches written when due as
   the work thread writes them (mean per append); then the same without the archive.
2. append: in-process and exact, no daemon: sessions of about 10, 100 and 1,000 MB (`--big-mb`),
   page cache warm; for each, a full `riffd.transcript.scan.index_file` of it (best of 3), then a
   `riffd.daemon.worker.Worker` on a real `StateStore` with default settings: its first `process`
   reads the whole file, then `--big-appends` (50) times: append one line, `process` it. Reported:
   ms per append (median, p95, max), the full scan's ms, their ratio (median append / full scan),
   the detection work alone (a fresh index of the file fed each appended line, timing only
   `GrowingIndex.findings`), and the bytes one append reads (a `riffd.fsio.FileSystem` subclass counts
   every byte `pread` returns: the new line plus the fingerprint reads). Every append must come out
   "appended" with 1 line, or the run fails. damaged: the same on a 10 MB session holding
   `--findings` (0, 1,000, 10,000) orphan tool results (user lines whose tool_result names no
   tool_use, chained onto the session: each one finding), `--big-appends` clean appends each.
   Reported: ms per append (median) with that many findings, and its ratio to the clean session's
   (goal: an append costs about the same whatever the file's findings).
3. idle: `--idle-files` (5,000) small files in 100 project folders, default intervals. Once the
   daemon has logged all of them and the state database holds that many watermarks (one query,
   before the window), a 3 s settle, then its CPU time (utime + stime of all its threads, from
   `/proc/<pid>/stat`) is read before and after `--idle-window` (60) s of no activity. Reported
   as CPU seconds per minute, with its RSS (VmRSS, and peak VmHWM, from `/proc/<pid>/status`:
   these are the process's own memory, so the `ru_maxrss`-after-exec pitfall scan_bench.py works
   around does not apply). The 300 s report and 900 s rescan jobs do not fall in the window.
4. reconcile: `--reconcile-files` (10,000) small files in 100 project folders. First start: from
   spawning the process to READY, and until every file was logged as read. Then SIGTERM (exit 0
   required) and a second start with nothing changed: spawn to READY (reconciliation done: one
   stat per file), and to an empty queue (READY when reconciliation queued nothing, else the
   last queued file's log line). "No content read" is checked two ways: the store's `bytes.read`
   counter (`StateStore.counters()`, read while no daemon runs) must not grow across the second
   start, and the second daemon's `rchar` (`/proc/<pid>/io`: every byte its read calls returned,
   Python's imports and SQLite included) is printed next to the files' total size.

Prints the machine, then a table (stderr with `--json`, whose object goes to stdout). Exit 1 only
when a measurement fails (a daemon that dies or exits non-zero, a timeout, a wrong outcome).
Linux only (`/proc`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import figures
import orjson
import scan_bench

from riffd.daemon.worker import Worker, WorkerSettings
from riffd.fsio import FileSystem
from riffd.state.store import StateStore
from riffd.transcript.incremental import GrowingIndex
from riffd.transcript.reader import iter_chunks
from riffd.transcript.scan import index_file

MB = 1_000_000
SMALL_SOURCE = "marot-spotter/short.jsonl"
BIG_SOURCE = scan_bench.SINGLE_SOURCE  # the real 2.1.39 session
PROJECTS = 100
CLEAN_ENV = (
    "RIFFD_CONFIG",
    "RIFFD_STATE_DIR",
    "CLAUDE_CONFIG_DIR",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
)
STARTED = re.compile(r"started \(pid \d+\): (\d+) file\(s\) to look at")


class BenchError(Exception):
    """A measurement failed (not a slow figure: a wrong outcome, a dead daemon, a timeout)."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of `values` (fraction 0.5 = median)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


# --- transcripts --------------------------------------------------------------------------------


class Corpus:
    """Writes sessions copied from the real samples with fresh ids, and lines to append to them."""

    def __init__(self, real: Path, seed: int) -> None:
        self.real = real
        self.ids = scan_bench.IdMaker(seed)
        self.small = scan_bench.load_source(real, SMALL_SOURCE)
        self._big: scan_bench.SessionSource | None = None
        self.user_line, self.assistant_line = self._append_templates(real / BIG_SOURCE)
        # path -> (session id, uuid of its last main-chain line)
        self.tails: dict[str, tuple[str, str]] = {}
        self.appended = 0

    @staticmethod
    def _append_templates(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        user = assistant = None
        with open(path, "rb") as handle:
            for raw in handle:
                line = orjson.loads(raw)
                message = line.get("message")
                if (
                    line.get("type") == "user"
                    and user is None
                    and isinstance(message.get("content"), str)
                ):
                    user = line
                elif (
                    line.get("type") == "assistant"
                    and assistant is None
                    and [part.get("type") for part in message.get("content", [])] == ["text"]
                ):
                    assistant = line
                if user and assistant:
                    return user, assistant
        raise BenchError(
            f"{path}: no user prompt and assistant text line to use as append templates"
        )

    def small_files(
        self, root: Path, count: int, projects: int = PROJECTS
    ) -> tuple[list[Path], int]:
        """Write `count` one-copy sessions of the small sample over `projects` folders; return
        (paths, bytes)."""
        paths = []
        total = 0
        for number in range(count):
            folder = root / f"-home-user-proj-{number % projects}"
            path, written, _copies = scan_bench.write_session(
                self.small, folder, 0, self.ids, subagents=False
            )
            paths.append(path)
            total += written
        return paths, total

    def big_file(self, root: Path, size_mb: float) -> tuple[Path, int]:
        """Write one session of about `size_mb` MB; return (path, bytes)."""
        if self._big is None:
            self._big = scan_bench.load_source(self.real, BIG_SOURCE)
        folder = root / "-home-user-proj-big"
        path, written, _copies = scan_bench.write_session(
            self._big, folder, int(size_mb * MB), self.ids, subagents=False
        )
        return path, written

    def append(self, path: Path) -> float:
        """Append one valid line to `path` with one write; return time.monotonic() just before the
        write."""
        name = str(path)
        if name not in self.tails:
            self.tails[name] = _tail_of(path)
        session_id, parent = self.tails[name]
        uuid = self.ids.uuid().decode()
        if self.appended % 2 == 0:
            line = dict(
                self.user_line, message={"role": "user", "content": f"bench prompt {self.appended}"}
            )
        else:
            message = dict(
                self.assistant_line["message"],
                id=self.ids.like(b"msg_" + b"x" * 24).decode(),
                content=[{"type": "text", "text": f"bench reply {self.appended}"}],
            )
            line = dict(
                self.assistant_line,
                message=message,
                requestId=self.ids.like(b"req_" + b"x" * 24).decode(),
            )
        line.update(
            parentUuid=parent,
            uuid=uuid,
            sessionId=session_id,
            timestamp=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        )
        data = orjson.dumps(line) + b"\n"
        self.tails[name] = (session_id, uuid)
        self.appended += 1
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            before = time.monotonic()
            os.write(fd, data)
        finally:
            os.close(fd)
        return before


def _tail_of(path: Path) -> tuple[str, str]:
    """Return (sessionId, uuid) of the last main-chain line of `path`."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - (1 << 20)))
        lines = handle.read().split(b"\n")
    for raw in reversed(lines[1:] if size > 1 << 20 else lines):
        if not raw.strip():
            continue
        line = orjson.loads(raw)
        if (
            isinstance(line.get("uuid"), str)
            and line.get("isSidechain") is not True
            and line.get("sessionId")
        ):
            return line["sessionId"], line["uuid"]
    raise BenchError(f"{path}: no main-chain line to append to")


def warm(paths: list[Path]) -> None:
    """Read files once so measurements start from a warm page cache."""
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(8 << 20):
                pass


# --- the daemon -------------------------------------------------------------------------------


@dataclass
class Daemon:
    """One `riffd run` child on its own temp roots, state folder and config; its log and notify
    messages."""

    home: Path
    roots: list[Path]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    spawned: float = 0.0
    ready: float | None = None
    log: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    other_stderr: list[str] = field(default_factory=list)
    notices: list[tuple[float, str]] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _socket: socket.socket | None = None
    _starts: int = 0

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @property
    def state_db(self) -> Path:
        return self.home / "state" / "state.db"

    def write_config(self) -> None:
        """Write the daemon's config: the bench's folders, native events, JSON debug log, plus
        `settings`."""
        (self.home / "claude").mkdir(parents=True, exist_ok=True)
        tables: dict[str, dict[str, Any]] = {
            "watcher": {"observer": "native"},
            "log": {"level": "debug", "format": "json"},
        }
        for table, values in self.settings.items():
            tables.setdefault(table, {}).update(values)
        lines = [
            f"roots = [{', '.join(json.dumps(str(root)) for root in self.roots)}]",
            f"state_dir = {json.dumps(str(self.home / 'state'))}",
            f"claude_dir = {json.dumps(str(self.home / 'claude'))}",
        ]
        for table, values in tables.items():
            lines.append(f"\n[{table}]")
            lines.extend(f"{key} = {json.dumps(value)}" for key, value in values.items())
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Spawn `python3 -m riffd --config ... run` under a notify socket; start reading its
        stderr."""
        if not self.config_path.exists():
            self.write_config()
        self._starts += 1
        address = self.home / f"notify-{self._starts}.sock"
        address.unlink(missing_ok=True)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(address))
        # this checkout's riffd, bytecode cached, as scan_bench measures its children
        env = {key: value for key, value in scan_bench.child_env().items() if key not in CLEAN_ENV}
        env["NOTIFY_SOCKET"] = str(address)
        self.log, self.other_stderr, self.notices, self.ready = [], [], [], None
        command = [sys.executable, "-m", "riffd", "--config", str(self.config_path), "run"]
        self.spawned = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.home,
        )
        self._threads = [
            threading.Thread(target=self._read_log, args=(self.process,), daemon=True),
            threading.Thread(target=self._read_notices, args=(self._socket,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_log(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            arrived = time.monotonic()
            try:
                entry = orjson.loads(raw)
            except orjson.JSONDecodeError:
                entry = None
            if isinstance(entry, dict):
                self.log.append((arrived, entry))
            else:
                self.other_stderr.append(raw.decode(errors="replace").rstrip())

    def _read_notices(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return  # closed by stop()
            arrived = time.monotonic()
            text = data.decode(errors="replace")
            self.notices.append((arrived, text))
            if "READY=1" in text.split("\n") and self.ready is None:
                self.ready = arrived

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def processed(self, path: str | None = None) -> list[tuple[float, dict[str, Any]]]:
        """The worker's log lines so far (one per processed file), optionally for one path only."""
        return [
            (arrived, entry)
            for arrived, entry in list(self.log)
            if "outcome" in entry and (path is None or entry.get("path") == path)
        ]

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> float:
        """Poll `done` (which reads only what the bench already holds) every 50 ms; return when it
        held."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.process is not None and self.process.poll() is not None:
                raise BenchError(
                    f"the daemon exited ({self.process.returncode}) while waiting for {what}:\n"
                    + self.stderr_tail()
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"timed out after {timeout:.0f} s waiting for {what}\n" + self.stderr_tail()
                )
            time.sleep(0.05)
        return time.monotonic()

    def stderr_tail(self) -> str:
        """The last lines of the daemon's stderr, for error messages."""
        lines = self.other_stderr[-15:] + [
            orjson.dumps(entry).decode() for _, entry in self.log[-5:]
        ]
        return "\n".join(lines)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM the daemon and wait for it; return its exit code (BenchError unless 0)."""
        process, self.process = self.process, None
        if process is None:
            return 0
        code: int | None = None
        try:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()  # our own child, by its pid
                process.wait()
                raise BenchError(
                    f"the daemon did not stop within {timeout:.0f} s of SIGTERM"
                ) from None
        finally:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            for thread in self._threads:
                thread.join(timeout=5)
        if code != 0:
            raise BenchError(f"the daemon exited {code} after SIGTERM:\n{self.stderr_tail()}")
        return code

    # --- /proc --------------------------------------------------------------------------------

    def cpu_seconds(self) -> float:
        """User + system CPU time of the daemon, all threads, from /proc/<pid>/stat."""
        text = Path(f"/proc/{self.pid}/stat").read_text()
        # the name may hold spaces; fields after it start at 3
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_threads(self) -> tuple[float, frozenset[int]]:
        """CPU time of the daemon's live threads in seconds, to the nanosecond (the sum of their
        run times in /proc/<pid>/task/<tid>/schedstat), and their ids: a difference of two is
        exact while no thread ended between them (the ticks of /proc/<pid>/stat are 10 ms)."""
        total, tids = 0, set()
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # (a thread ending now: the caller sees its id gone)
            tids.add(int(task.name))
        return total / 1e9, frozenset(tids)

    def memory_mb(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the daemon in MB (10^6 bytes)."""
        values = {}
        for row in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, rest = row.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024 / MB
        return values["VmRSS"], values["VmHWM"]

    def rchar(self) -> int:
        """Bytes the daemon's read calls returned so far (/proc/<pid>/io)."""
        for row in Path(f"/proc/{self.pid}/io").read_text().splitlines():
            if row.startswith("rchar:"):
                return int(row.split()[1])
        raise BenchError("/proc/<pid>/io has no rchar")

    def started_queued(self) -> int | None:
        """The number of files start-up reconciliation queued, from the daemon's "started" log
        line."""
        for _, entry in list(self.log):
            match = STARTED.search(str(entry.get("message", "")))
            if match:
                return int(match.group(1))
        return None

    def count_watermarks(self) -> int:
        """How many files the state database holds (one read query; SQLite WAL lets the daemon go
        on)."""
        with contextlib.closing(
            sqlite3.connect(f"file:{self.state_db}?mode=ro", uri=True, timeout=30)
        ) as db:
            return int(db.execute("SELECT COUNT(*) FROM files").fetchone()[0])

    def counters(self) -> dict[str, int]:
        """The store's counters; call only while no daemon runs."""
        store = StateStore(self.state_db)
        try:
            return store.counters()
        finally:
            store.close()


def _all_read(daemon: Daemon, count: int) -> Callable[[], bool]:
    def done() -> bool:
        return (
            len({entry["path"] for _, entry in daemon.processed() if entry["outcome"] == "read"})
            >= count
        )

    return done


# --- 1. latency ---------------------------------------------------------------------------------


def measure_latency(base: Path, corpus: Corpus, appends: int, spacing: float) -> dict[str, Any]:
    """Append one line every `spacing` s round robin to 4 files; return latency from append to
    processed."""
    home = base / "latency"
    root = home / "projects"
    paths, _ = corpus.small_files(root, 4, projects=2)
    daemon = Daemon(home, [root], {"watcher": {"debounce": 0.05}})
    daemon.start()
    try:
        daemon.wait("the 4 session files to be read", _all_read(daemon, len(paths)), 60)
        time.sleep(1.0)
        sent: dict[str, list[float]] = {str(path): [] for path in paths}
        begin = time.monotonic()
        for number in range(appends):
            path = paths[number % len(paths)]
            sent[str(path)].append(corpus.append(path))
            pause = begin + (number + 1) * spacing - time.monotonic()
            if pause > 0:
                time.sleep(pause)

        def covered() -> bool:
            return (
                sum(
                    entry.get("lines", 0)
                    for _, entry in daemon.processed()
                    if entry["outcome"] != "read" and entry["path"] in sent
                )
                >= appends
            )

        daemon.wait(f"{appends} appended lines to be processed", covered, 30)
        time.sleep(0.3)  # a stray extra log line would show up as a second, line-less processing
        latencies: list[float] = []
        worker_ms: list[float] = []
        coalesced = 0
        for name, times in sent.items():
            pending = list(times)
            for arrived, entry in daemon.processed(name):
                if entry["outcome"] == "read":
                    continue
                if entry["outcome"] != "appended":
                    raise BenchError(
                        f"{name}: an append was processed as {entry['outcome']!r}: {entry}"
                    )
                lines = int(entry["lines"])
                coalesced += lines > 1
                worker_ms.append(float(entry["ms"]))
                covered_now, pending = pending[:lines], pending[lines:]
                latencies.extend((arrived - before) * 1000 for before in covered_now)
            if pending:
                raise BenchError(f"{name}: {len(pending)} append(s) never processed")
        daemon.stop()
    finally:
        with contextlib.suppress(BenchError):
            daemon.stop()
    return {
        "appends": appends,
        "files": len(paths),
        "spacing_ms": spacing * 1000,
        "debounce_ms": 50.0,
        "method": "JSON log line arrival (bench clock) - time just before the append's write",
        "p50_ms": round(_percentile(latencies, 0.5), 1),
        "p95_ms": round(_percentile(latencies, 0.95), 1),
        "max_ms": round(max(latencies), 1),
        "worker_ms_p50": round(_percentile(worker_ms, 0.5), 2),
        "coalesced_processings": coalesced,
    }


# --- 2. one appended line on a big file -------------------------------------------------------


class CountingFS(FileSystem):
    """The real file system, counting the bytes every pread returns."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        self.read_bytes += len(data)
        return data


def measure_append(
    base: Path, corpus: Corpus, sizes_mb: list[float], appends: int
) -> dict[str, Any]:
    """`measure_append_one` for each size, and how flat the cost is from the smallest to the largest
    file."""
    runs = [measure_append_one(base, corpus, size_mb, appends) for size_mb in sizes_mb]
    worker = [run["append_ms_median"] for run in runs]
    detection = [run["detect_ms_median"] for run in runs]
    return {
        "sizes": runs,
        "flatness_worker": round(max(worker) / min(worker), 2),
        "flatness_detection": round(max(detection) / min(detection), 2),
    }


def measure_append_one(base: Path, corpus: Corpus, size_mb: float, appends: int) -> dict[str, Any]:
    """In process: a full scan of a big file vs a Worker processing one appended line at a time, and
    the detection work alone (`GrowingIndex.findings` on an index fed the new line)."""
    home = base / f"append-{size_mb:g}"
    root = home / "projects"
    started = time.perf_counter()
    path, size = corpus.big_file(root, size_mb)
    _say(f"  built {size / MB:,.0f} MB in {time.perf_counter() - started:.1f} s: {path}")
    warm([path])
    scans = []
    for _ in range(3):
        started = time.perf_counter()
        scanned = index_file(path)
        scans.append(time.perf_counter() - started)
        lines = len(scanned.index)
        del scanned
    full_ms = min(scans) * 1000
    (home / "claude").mkdir(parents=True, exist_ok=True)
    store = StateStore(home / "state" / "state.db")
    fs = CountingFS()
    worker = Worker(
        store,
        WorkerSettings(backup_dir=home / "backups", claude_dir=home / "claude", roots=(root,)),
        fs=fs,
    )
    try:
        started = time.perf_counter()
        first = worker.process(path)
        first_ms = (time.perf_counter() - started) * 1000
        first_bytes = fs.read_bytes
        if first.kind != "read":
            raise BenchError(f"the first processing of {path} was {first.kind!r}, not 'read'")
        times: list[float] = []
        reads: list[int] = []
        for _ in range(appends):
            corpus.append(path)
            fs.read_bytes = 0
            started = time.perf_counter()
            outcome = worker.process(path)
            times.append((time.perf_counter() - started) * 1000)
            reads.append(fs.read_bytes)
            if outcome.kind != "appended" or outcome.lines != 1:
                raise BenchError(
                    f"an append was processed as {outcome.kind!r} with {outcome.lines} line(s): "
                    f"{outcome.why}"
                )
    finally:
        store.close()
        del worker
    detect_times = measure_detection(corpus, path, appends)
    median = statistics.median(times)
    return {
        "file_bytes": size,
        "file_lines": lines,
        "full_scan_ms": round(full_ms, 1),
        "worker_first_process_ms": round(first_ms, 1),
        "worker_first_process_bytes_read": first_bytes,
        "appends": appends,
        "append_ms_median": round(median, 3),
        "append_ms_p95": round(_percentile(times, 0.95), 3),
        "append_ms_max": round(max(times), 3),
        "detect_ms_median": round(statistics.median(detect_times), 3),
        "detect_ms_max": round(max(detect_times), 3),
        "ratio_append_to_full_scan": round(median / full_ms, 5),
        "bytes_read_per_append_median": int(statistics.median(reads)),
        "bytes_read_per_append_max": max(reads),
    }


def measure_detection(corpus: Corpus, path: Path, appends: int) -> list[float]:
    """Index `path` as the worker does, judge it once in full, then time only `GrowingIndex.findings`
    after each appended line is added to the index (reading and parsing the line are not
    counted)."""
    index = GrowingIndex(str(path))
    for offset, lines, terminated in iter_chunks(path):
        index.add_lines(offset, lines, terminated)
    index.findings()
    times = []
    for _ in range(appends):
        corpus.append(path)
        for offset, lines, terminated in iter_chunks(path, start=index.end):
            index.add_lines(offset, lines, terminated)
        started = time.perf_counter()
        findings = index.findings()
        times.append((time.perf_counter() - started) * 1000)
        if findings:
            raise BenchError(f"{path}: an append made findings: {findings[0].message}")
    return times


# --- 2c. one appended line in process, with the pauses the daemon sees ---------------------------


def measure_paused(
    base: Path, corpus: Corpus, size_mb: float, appends: int, pause: float
) -> dict[str, Any]:
    """In process, the worker the daemon builds (its default configuration in report-only mode:
    the archive and the tracker on) on one healthy session of `size_mb` MB: the thread CPU time of
    `Worker.process` for `appends` one-line appends back to back, then for as many `pause` s apart,
    as the daemon sees them (the caches go cold meanwhile), each followed by the writing of the
    archive's batches that are due (`archive.write_delay`), as the daemon's work thread does, and the
    last batch written at the end: the mean per append; then the same without the archive. It tells
    what the outside figure is made of, function by function if need be."""
    from riffd.archive.store import Archive
    from riffd.config.load import loads_config
    from riffd.daemon.jobs import worker_settings
    from riffd.tracker.tracker import ToolCallTracker

    runs = []
    for archived in (True, False):
        home = base / f"paused-{'archive' if archived else 'no-archive'}"
        root = home / "projects"
        path, size = corpus.big_file(root, size_mb)
        (home / "claude").mkdir(parents=True, exist_ok=True)
        config = loads_config(
            f"roots = [{json.dumps(str(root))}]\nstate_dir = {json.dumps(str(home / 'state'))}\n"
            f'claude_dir = {json.dumps(str(home / "claude"))}\n[repair]\nmode = "report-only"\n',
            source=home / "config.toml",
        )
        store = StateStore(config.state_dir / "state.db")
        archive = Archive(config.state_dir / "archive.db") if archived else None
        worker = Worker(
            store,
            worker_settings(config),
            tracker=ToolCallTracker(config.tracker.window, config.tracker.max_calls),
            archive=archive,
        )
        times: dict[str, list[float]] = {"tight": [], "paused": []}
        try:
            worker.process(path)
            for _ in range(appends):  # (warming up: not counted)
                corpus.append(path)
                worker.process(path)
            for kind, wait in (("tight", 0.0), ("paused", pause)):
                for _ in range(appends):
                    corpus.append(path)
                    time.sleep(wait)
                    started = time.thread_time()
                    outcome = worker.process(path)
                    worker.batches.flush_due()
                    times[kind].append((time.thread_time() - started) * 1000)
                    if outcome.kind != "appended" or outcome.lines != 1:
                        raise BenchError(
                            f"an append was processed as {outcome.kind!r}: {outcome.why}"
                        )
                started = time.thread_time()
                worker.batches.flush_all()
                times[kind][-1] += (time.thread_time() - started) * 1000
        finally:
            store.close()
            if archive is not None:
                archive.close()
        tight, paused = statistics.mean(times["tight"]), statistics.mean(times["paused"])
        runs.append(
            {
                "archive": archived,
                "file_bytes": size,
                "appends": appends,
                "pause_s": pause,
                "tight_ms_mean": round(tight, 3),
                "paused_ms_mean": round(paused, 3),
                "paused_over_tight": round(paused / tight, 2),
            }
        )
    return {"runs": runs}


# --- 2b. one appended line, the whole daemon from outside ----------------------------------------


def measure_outside(
    base: Path, corpus: Corpus, sizes_mb: list[float], appends: int, idle_window: float
) -> dict[str, Any]:
    """`measure_outside_one` for each size, and the largest file's figure against the smallest's."""
    runs = [
        measure_outside_one(base, corpus, size_mb, appends, idle_window) for size_mb in sizes_mb
    ]
    per_line = [run["cpu_ms_per_line"] for run in runs]
    return {
        "sizes": runs,
        "flatness": round(per_line[-1] / per_line[0], 2) if per_line[0] > 0 else None,
    }


def measure_outside_one(
    base: Path, corpus: Corpus, size_mb: float, appends: int, idle_window: float
) -> dict[str, Any]:
    """A real `riffd run` (report-only, archive on, log at INFO as by default) over one healthy
    session of `size_mb` MB: once it has read the file, its idle CPU rate over `idle_window` s, then
    `appends` one-line appends 0.5 s apart (the debounce is 0.2 s, so each is processed alone); the
    CPU the daemon spent on them (utime + stime from /proc, all threads) less its idle rate over the
    same time, per line. A quiet append logs at DEBUG, so the appends are checked after the daemon
    stopped: the store's `lines.processed` must have grown by exactly `appends`."""
    home = base / f"outside-{size_mb:g}"
    root = home / "projects"
    started = time.perf_counter()
    path, size = corpus.big_file(root, size_mb)
    _say(f"  built {size / MB:,.0f} MB in {time.perf_counter() - started:.1f} s: {path}")
    warm([path])
    settings: dict[str, dict[str, Any]] = {
        "watcher": {"debounce": 0.2},
        "repair": {"mode": "report-only"},
        "log": {"level": "info"},
        # (no settle or compaction of the archive inside the windows measured)
        "archive": {"settle_after": 3600.0},
    }
    daemon = Daemon(home, [root], settings)
    daemon.start()
    try:
        read_at = daemon.wait(f"{path.name} to be read", _all_read(daemon, 1), 1800)
        first_s = read_at - daemon.spawned
        read_lines = sum(int(entry["lines"]) for _, entry in daemon.processed(str(path)))
        time.sleep(3.0)
        cpu_before, clock_before = daemon.cpu_seconds(), time.monotonic()
        exact_before = daemon.cpu_threads()
        time.sleep(idle_window)
        exact_after = daemon.cpu_threads()
        idle_rate = (daemon.cpu_seconds() - cpu_before) / (time.monotonic() - clock_before)
        exact_idle = _exact(exact_before, exact_after, time.monotonic() - clock_before)
        cpu_before, clock_before = daemon.cpu_seconds(), time.monotonic()
        exact_before = daemon.cpu_threads()
        for _ in range(appends):
            corpus.append(path)
            time.sleep(0.5)
        exact_after = daemon.cpu_threads()
        cpu_after, clock_after = daemon.cpu_seconds(), time.monotonic()
        rss, peak = daemon.memory_mb()
        daemon.stop()
    finally:
        with contextlib.suppress(BenchError):
            daemon.stop()
    processed = daemon.counters().get("lines.processed", 0)
    if processed != read_lines + appends:
        raise BenchError(
            f"{path}: the daemon processed {processed - read_lines} appended line(s), not {appends}"
        )
    elapsed = clock_after - clock_before
    spent = cpu_after - cpu_before - idle_rate * elapsed
    exact_spent = _exact(exact_before, exact_after, 1.0)
    exact = exact_idle is not None and exact_spent is not None
    if exact_idle is not None and exact_spent is not None:
        spent = exact_spent - exact_idle * elapsed
        idle_rate = exact_idle
    return {
        "file_bytes": size,
        "appends": appends,
        "first_read_s": round(first_s, 1),
        "idle_cpu_ms_per_s": round(idle_rate * 1000, 2),
        "window_s": round(elapsed, 1),
        "cpu_ms_total": round((cpu_after - cpu_before) * 1000, 1),
        "cpu_ms_per_line": round(spent * 1000 / appends, 2),
        # from the threads' schedstat run times (ns), else from /proc/<pid>/stat ticks (a thread
        # ended during a window: its time is in the ticks only)
        "cpu_source": "schedstat" if exact else "ticks",
        "rss_mb": round(rss, 1),
        "peak_rss_mb": round(peak, 1),
        "clock_tick_ms": round(1000 / os.sysconf("SC_CLK_TCK"), 1),
    }


def _exact(
    before: tuple[float, frozenset[int]], after: tuple[float, frozenset[int]], seconds: float
) -> float | None:
    """CPU seconds per `seconds` between two `Daemon.cpu_threads` readings; None when a thread
    ended between them (its time is lost to the sum)."""
    if not before[1] <= after[1]:
        return None
    return (after[0] - before[0]) / seconds


def measure_damaged(base: Path, corpus: Corpus, counts: list[int], appends: int) -> dict[str, Any]:
    """Per-append cost of a Worker on a 10 MB session holding each count of findings (orphan
    results)."""
    runs = []
    for count in counts:
        home = base / f"damaged-{count}"
        root = home / "projects"
        path, _size = corpus.big_file(root, 10)
        session_id, parent = _tail_of(path)
        lines = []
        for number in range(count):
            uuid = corpus.ids.uuid().decode()
            lines.append(
                orjson.dumps(
                    {
                        "type": "user",
                        "uuid": uuid,
                        "parentUuid": parent,
                        "sessionId": session_id,
                        "isSidechain": False,
                        "message": {
                            "role": "user",
                            "content": [
                                {
                                    "type": "tool_result",
                                    "tool_use_id": f"toolu_orphan{number:020d}",
                                    "content": "lost",
                                }
                            ],
                        },
                    }
                )
            )
            parent = uuid
        with open(path, "ab") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))
        corpus.tails[str(path)] = (session_id, parent)
        (home / "claude").mkdir(parents=True, exist_ok=True)
        store = StateStore(home / "state" / "state.db")
        worker = Worker(
            store,
            WorkerSettings(backup_dir=home / "backups", claude_dir=home / "claude", roots=(root,)),
        )
        try:
            first = worker.process(path)
            if first.findings != count:
                raise BenchError(f"{path}: {first.findings} findings, not the {count} made")
            times = []
            for _ in range(appends):
                corpus.append(path)
                started = time.perf_counter()
                outcome = worker.process(path)
                times.append((time.perf_counter() - started) * 1000)
                if outcome.kind != "appended" or outcome.findings != count:
                    raise BenchError(
                        f"an append was processed as {outcome.kind!r} with {outcome.findings} findings"
                    )
        finally:
            store.close()
        runs.append(
            {
                "findings": count,
                "append_ms_median": round(statistics.median(times), 3),
                "append_ms_max": round(max(times), 3),
            }
        )
    clean = runs[0]["append_ms_median"]
    for run in runs:
        run["ratio_to_first"] = round(run["append_ms_median"] / clean, 2)
    return {"file_mb": 10, "runs": runs}


# --- 3. idle CPU ------------------------------------------------------------------------------


def measure_idle(base: Path, corpus: Corpus, files: int, window: float) -> dict[str, Any]:
    """CPU seconds per minute of a daemon watching `files` processed files, over `window` s of
    quiet."""
    home = base / "idle"
    root = home / "projects"
    started = time.perf_counter()
    _paths, size = corpus.small_files(root, files)
    _say(f"  built {files:,} files ({size / MB:,.0f} MB) in {time.perf_counter() - started:.1f} s")
    daemon = Daemon(home, [root])
    daemon.start()
    try:
        done = daemon.wait(f"{files} files to be read", _all_read(daemon, files), 600)
        processing = done - daemon.spawned
        watermarks = daemon.count_watermarks()
        if watermarks != files:
            raise BenchError(f"the state database holds {watermarks} watermarks, not {files}")
        time.sleep(3.0)
        log_before = len(daemon.log)
        cpu_before, clock_before = daemon.cpu_seconds(), time.monotonic()
        _say(
            f"  all {files:,} files processed in {processing:.1f} s; measuring {window:.0f} s of idle"
        )
        time.sleep(window)
        cpu_after, clock_after = daemon.cpu_seconds(), time.monotonic()
        rss, peak = daemon.memory_mb()
        log_during = len(daemon.log) - log_before
        daemon.stop()
    finally:
        with contextlib.suppress(BenchError):
            daemon.stop()
    elapsed = clock_after - clock_before
    return {
        "files": files,
        "projects": PROJECTS,
        "first_processing_s": round(processing, 1),
        "window_s": round(elapsed, 1),
        "cpu_s": round(cpu_after - cpu_before, 3),
        "cpu_s_per_minute": round((cpu_after - cpu_before) / elapsed * 60, 3),
        "rss_mb": round(rss, 1),
        "peak_rss_mb": round(peak, 1),
        "log_lines_during_window": log_during,
    }


# --- 4. start-up reconciliation ---------------------------------------------------------------


def measure_reconcile(base: Path, corpus: Corpus, files: int) -> dict[str, Any]:
    """First start on `files` new files, then a restart with nothing changed."""
    home = base / "reconcile"
    root = home / "projects"
    started = time.perf_counter()
    _paths, size = corpus.small_files(root, files)
    _say(f"  built {files:,} files ({size / MB:,.0f} MB) in {time.perf_counter() - started:.1f} s")
    daemon = Daemon(home, [root])
    try:
        daemon.start()
        done = daemon.wait(f"{files} files to be read", _all_read(daemon, files), 900)
        assert daemon.ready is not None
        first_ready, first_all = daemon.ready - daemon.spawned, done - daemon.spawned
        _say(f"  first start: READY {first_ready:.2f} s, all processed {first_all:.1f} s")
        daemon.stop()
        before = daemon.counters()
        warm([])  # nothing: the page cache already holds the files the first start read
        daemon.start()
        daemon.wait("READY=1", lambda: daemon.ready is not None, 120)
        assert daemon.ready is not None
        daemon.wait("the started log line", lambda: daemon.started_queued() is not None, 30)
        queued = daemon.started_queued() or 0
        if queued:
            empty = daemon.wait(
                f"{queued} queued file(s)", lambda: len(daemon.processed()) >= queued, 120
            )
        else:
            empty = daemon.ready
        second_ready, second_empty = daemon.ready - daemon.spawned, empty - daemon.spawned
        time.sleep(2.0)
        rchar = daemon.rchar()
        rss, peak = daemon.memory_mb()
        daemon.stop()
        after = daemon.counters()
    finally:
        with contextlib.suppress(BenchError):
            daemon.stop()
    grew = after.get("bytes.read", 0) - before.get("bytes.read", 0)
    return {
        "files": files,
        "files_bytes": size,
        "first_start_ready_s": round(first_ready, 2),
        "first_start_all_processed_s": round(first_all, 1),
        "restart_ready_s": round(second_ready, 2),
        "restart_queue_empty_s": round(second_empty, 2),
        "restart_queued": queued,
        "restart_bytes_read_counter_growth": grew,
        "restart_lines_processed_growth": after.get("lines.processed", 0)
        - before.get("lines.processed", 0),
        "restart_rchar": rchar,
        "restart_rss_mb": round(rss, 1),
        "restart_peak_rss_mb": round(peak, 1),
        "restart_read_no_content": grew == 0,
    }


# --- reporting ----------------------------------------------------------------------------------


def rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """The table: (measure, figure)."""
    out = []
    if latency := results.get("latency"):
        out.append(
            (
                f"append -> processed, {latency['appends']} appends, debounce 50 ms",
                f"p50 {latency['p50_ms']:.0f} ms, p95 {latency['p95_ms']:.0f} ms, max {latency['max_ms']:.0f} ms"
                f" (worker p50 {latency['worker_ms_p50']:.1f} ms)",
            )
        )
    if outside := results.get("outside"):
        for run in outside["sizes"]:
            out.append(
                (
                    f"daemon CPU per appended line, from outside, {run['file_bytes'] / MB:,.0f} MB file",
                    f"{run['cpu_ms_per_line']:.2f} ms ({run['appends']} appends; idle "
                    f"{run['idle_cpu_ms_per_s']:.2f} ms/s subtracted; RSS {run['rss_mb']:.0f} MB; "
                    f"CPU from {run['cpu_source']})",
                )
            )
        if outside["flatness"] is not None:
            out.append(
                (
                    "daemon CPU per appended line, largest / smallest file (goal <= 1.5x)",
                    f"{outside['flatness']:.2f}x",
                )
            )
    if paused := results.get("paused"):
        for run in paused["runs"]:
            out.append(
                (
                    f"Worker.process per appended line in process, {run['file_bytes'] / MB:,.0f} MB "
                    f"file, archive {'on' if run['archive'] else 'off'}",
                    f"{run['tight_ms_mean']:.2f} ms back to back, {run['paused_ms_mean']:.2f} ms "
                    f"{run['pause_s']:g} s apart ({run['paused_over_tight']:.1f}x; thread CPU, "
                    f"mean of {run['appends']}, the archive's batches written included)",
                )
            )
    if appended := results.get("append"):
        for append in appended["sizes"]:
            out.append(
                (
                    f"one appended line, {append['file_bytes'] / MB:,.0f} MB file ({append['file_lines']:,} lines)",
                    f"{append['append_ms_median']:.2f} ms (p95 {append['append_ms_p95']:.2f}), of which detection "
                    f"{append['detect_ms_median']:.3f} ms; full scan {append['full_scan_ms']:,.0f} ms, "
                    f"ratio {append['ratio_append_to_full_scan']:.5f}; "
                    f"{append['bytes_read_per_append_median']:,} bytes read",
                )
            )
        out.append(
            (
                "per-append cost, largest / smallest file",
                f"worker {appended['flatness_worker']:.2f}x, detection {appended['flatness_detection']:.2f}x",
            )
        )
    if damaged := results.get("damaged"):
        for run in damaged["runs"]:
            out.append(
                (
                    f"one appended line, {damaged['file_mb']} MB file with {run['findings']:,} findings",
                    f"{run['append_ms_median']:.2f} ms (max {run['append_ms_max']:.2f}), "
                    f"{run['ratio_to_first']:.1f}x the first row",
                )
            )
    if idle := results.get("idle"):
        out.append(
            (
                f"idle CPU, {idle['files']:,} watched files",
                f"{idle['cpu_s_per_minute']:.2f} CPU s/min, RSS {idle['rss_mb']:.0f} MB "
                f"(peak {idle['peak_rss_mb']:.0f} MB)",
            )
        )
    if rec := results.get("reconcile"):
        out.append(
            (
                f"first start, {rec['files']:,} new files",
                f"READY {rec['first_start_ready_s']:.2f} s, "
                f"all processed {rec['first_start_all_processed_s']:.1f} s",
            )
        )
        out.append(
            (
                f"restart, {rec['files']:,} unchanged files",
                f"READY {rec['restart_ready_s']:.2f} s, queue empty {rec['restart_queue_empty_s']:.2f} s, "
                f"bytes.read +{rec['restart_bytes_read_counter_growth']:,} "
                f"(rchar {rec['restart_rchar'] / MB:.1f} MB vs {rec['files_bytes'] / MB:.0f} MB of files)",
            )
        )
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    """Render the results as a two-column table."""
    pairs = rows(results)
    width = max((len(measure) for measure, _ in pairs), default=7)
    lines = [f"{'measure':{width}}  figure", "-" * (width + 60)]
    lines.extend(f"{measure:{width}}  {figure}" for measure, figure in pairs)
    return "\n".join(lines)


def notes(results: dict[str, dict[str, Any]]) -> list[str]:
    """What the figures file says under its table, for the measures in `results`."""
    said = []
    if "latency" in results:
        said.append(
            "Latency is from just before an append's `write` to the arrival of the worker's JSON log "
            "line for it."
        )
    if outside := results.get("outside"):
        appends = outside["sizes"][0]["appends"]
        tick = outside["sizes"][0]["clock_tick_ms"]
        said.append(
            "Daemon CPU per appended line: the run time of all the daemon's threads, to the "
            "nanosecond from `/proc/<pid>/task/*/schedstat` (schedstat), or where a thread ended "
            f"during a window, user + system time from `/proc/<pid>/stat` (ticks, {tick:g} ms: "
            f"about {tick / appends:.2g} ms a line over {appends} appends), less its idle rate "
            "measured the same way before the appends."
        )
    other = "Other CPU figures are" if "outside" in results else "CPU is"
    return [
        " ".join([*said, f"{other} user + system time from `/proc/<pid>/stat`; MB is 10^6 bytes."])
    ]


MEASURES = ("latency", "outside", "paused", "append", "damaged", "idle", "reconcile")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add = parser.add_argument
    add(
        "--quick",
        action="store_true",
        help="smaller run: 60 appends, 20 MB file, 1,000 idle files for 20 s, 2,000 files to reconcile",
    )
    add("--appends", type=int, help="appends for the latency figure; default 200 (--quick 60)")
    add(
        "--big-mb",
        help="sizes of the big files in MB, comma-separated; default 10,100,1000 (--quick 10,50)",
    )
    add("--big-appends", type=int, help="appends to the big file; default 50 (--quick 20)")
    add(
        "--outside-appends",
        type=int,
        default=100,
        help="appends to the big file a real daemon processes (outside); default 100",
    )
    add(
        "--pause",
        type=float,
        default=0.5,
        help="seconds between appends for the in-process figure of `paused`; default 0.5",
    )
    add(
        "--outside-idle",
        type=float,
        default=30.0,
        help="seconds of idle measured before the appends (outside); default 30",
    )
    add(
        "--findings",
        default="0,1000,10000",
        help="findings in the damaged session, comma-separated (the first is "
        "the reference); default 0,1000,10000",
    )
    add("--idle-files", type=int, help="files watched while idle; default 5000 (--quick 1000)")
    add("--idle-window", type=float, help="seconds of idle measured; default 60 (--quick 20)")
    add(
        "--reconcile-files",
        type=int,
        help="files for the start-up figures; default 10000 (--quick 2000)",
    )
    add(
        "--only", default=",".join(MEASURES), help=f"comma-separated subset of {','.join(MEASURES)}"
    )
    add(
        "--real",
        type=Path,
        default=scan_bench.DEFAULT_REAL,
        help=f"real transcripts; default {scan_bench.DEFAULT_REAL}",
    )
    add("--seed", type=int, default=1, help="seed of the generated ids; default 1")
    add(
        "--tmp",
        type=Path,
        default=None,
        help="make the temporary folder under this folder (default: the system's)",
    )
    add("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    add("--json", action="store_true", help="print the results as one JSON object on stdout")
    add(
        "--write",
        type=Path,
        metavar="FILE",
        help="also write the table the docs include (docs/figures/daemon.md)",
    )
    args = parser.parse_args(argv)
    defaults = (
        {
            "appends": 60,
            "big_mb": "10,50",
            "big_appends": 20,
            "idle_files": 1000,
            "idle_window": 20.0,
            "reconcile_files": 2000,
        }
        if args.quick
        else {
            "appends": 200,
            "big_mb": "10,100,1000",
            "big_appends": 50,
            "idle_files": 5000,
            "idle_window": 60.0,
            "reconcile_files": 10000,
        }
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(args.only) - set(MEASURES)
    if unknown:
        parser.error(
            f"--only: unknown measure(s) {', '.join(sorted(unknown))}; choose from {', '.join(MEASURES)}"
        )
    try:
        args.big_mb = [float(size) for size in str(args.big_mb).split(",") if size.strip()]
    except ValueError:
        parser.error(f"--big-mb: {args.big_mb!r} is not a comma-separated list of sizes in MB")
    try:
        args.findings = [int(count) for count in str(args.findings).split(",") if count.strip()]
    except ValueError:
        parser.error(f"--findings: {args.findings!r} is not a comma-separated list of counts")
    if not args.findings or min(args.findings) < 0:
        parser.error("--findings: counts must be 0 or more")
    if (
        min(args.appends, args.big_appends, args.idle_files, args.reconcile_files) < 1
        or min(args.big_mb) <= 0
        or args.idle_window <= 0
    ):
        parser.error("counts, sizes and the window must be positive")
    args.real = args.real.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the measurements on a temp folder, print them; return 0, or 1 when a measurement
    fails."""
    args = parse_args(argv)
    if not Path("/proc/self/stat").exists():
        _say("this bench reads /proc: Linux only")
        return 1
    about = scan_bench.machine()
    _say("machine: " + ", ".join(f"{key} {value}" for key, value in about.items()))
    if args.tmp is not None:  # (a folder to make it under, made when missing)
        args.tmp.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="riffd-daemon-bench-", dir=args.tmp))
    _say(f"working in {base}")
    results: dict[str, dict[str, Any]] = {}
    failed = False
    try:
        corpus = Corpus(args.real, args.seed)
        steps: dict[str, Callable[[], dict[str, Any]]] = {
            "latency": lambda: measure_latency(base, corpus, args.appends, 0.05),
            "outside": lambda: measure_outside(
                base, corpus, args.big_mb, args.outside_appends, args.outside_idle
            ),
            "paused": lambda: measure_paused(
                base, corpus, args.big_mb[0], args.outside_appends, args.pause
            ),
            "append": lambda: measure_append(base, corpus, args.big_mb, args.big_appends),
            "damaged": lambda: measure_damaged(base, corpus, args.findings, args.big_appends),
            "idle": lambda: measure_idle(base, corpus, args.idle_files, args.idle_window),
            "reconcile": lambda: measure_reconcile(base, corpus, args.reconcile_files),
        }
        for name in args.only:
            _say(f"{name}:")
            started = time.perf_counter()
            try:
                results[name] = steps[name]()
            except (BenchError, OSError, ValueError) as exc:
                _say(f"  failed: {exc}")
                failed = True
                continue
            _say(f"  done in {time.perf_counter() - started:.0f} s: {json.dumps(results[name])}")
    finally:
        if args.keep:
            _say(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    command = " ".join(
        ["python3", "bench/daemon_bench.py", *(argv if argv is not None else sys.argv[1:])]
    )
    human = "\n".join(
        [
            table(results),
            "",
            f"command: {command}",
            "latency: JSON log line arrival - write; CPU from /proc/<pid>/stat; MB = 10^6 bytes",
        ]
    )
    if args.json:
        print(human, file=sys.stderr)
        print(
            json.dumps(
                {"machine": about, "command": command, "results": results, "failed": failed},
                indent=2,
            )
        )
    else:
        print(human)
    if args.write and results:
        figures.write(
            args.write,
            figures.shown_command("daemon_bench.py", argv if argv is not None else sys.argv[1:]),
            figures.markdown_table(("measure", "figure"), rows(results)),
            notes(results),
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
