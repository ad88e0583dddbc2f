"""`riffd run` as a real subprocess in a sandbox of its own, for the tests that drive the daemon.

A `Sandbox` holds a transcript root, a Claude Code folder and a state folder, all named in a TOML
file (the daemon's environment has no RIFFD_CONFIG, CLAUDE_CONFIG_DIR or RIFFD_STATE_DIR:
tests/helpers/run.py). The test plays the service manager: it binds the sd_notify datagram socket
and waits for `READY=1` before acting, so start-up needs no sleep. Every other wait polls a real
condition (a file, a report, a watermark, a notify message) in short steps up to a generous
deadline, and fails with the daemon's stderr. The `sandbox` fixture (tests/conftest.py) gives one,
closed after the test.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from conftest import CORPUS_DIR, corpus_lines
from helpers import damage
from helpers.run import run_riffd, start_riffd
from riffd.state.store import StateStore, Watermark

DEADLINE = 20.0  # seconds any one condition may take before the test fails
POLL = 0.05  # seconds between two looks at a condition
LINE_PAUSE = 0.01  # seconds between two appends of the writer, as a streaming client leaves
QUIET_PERIOD = 1.0
REPORT_INTERVAL = 1.0
TOOL_HEAVY = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"
PROJECT = "-home-user-project"
DUPLICATE = "duplicate_tool_result"
# What every test starts from; a test overrides single keys ("section.key": value).
BASE_SETTINGS: dict[str, object] = {
    "watcher.observer": "native",
    "watcher.debounce": 0.05,
    "watcher.rescan_interval": 60.0,
    "repair.mode": "repair",
    "repair.quiet_period": QUIET_PERIOD,
    "reports.interval": REPORT_INTERVAL,
}

T = TypeVar("T")


# --- the service manager's side of sd_notify
# ---------------------------------------------------------


class NotifyListener:
    """A bound AF_UNIX datagram socket that collects every sd_notify message, as systemd would
    receive it."""

    def __init__(self, path: Path) -> None:
        assert len(os.fsencode(path)) < 100, f"socket path too long for AF_UNIX: {path}"
        self.path = path
        self.messages: list[dict[str, str]] = []
        self.changed = threading.Condition()
        self._closed = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(POLL)  # so the reader notices close() without a wake-up datagram
        self._thread = threading.Thread(target=self._read, name=f"notify-{path.name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                datagram = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(
                line.partition("=")[::2] for line in datagram.decode().split("\n") if line
            )
            with self.changed:
                self.messages.append(fields)
                self.changed.notify_all()

    def find(self, key: str, value: str = "1", start: int = 0) -> int | None:
        """Return the index of the first message from `start` on that carries `key=value`, or
        None."""
        with self.changed:
            for position in range(start, len(self.messages)):
                if self.messages[position].get(key) == value:
                    return position
        return None

    def count(self, key: str, value: str = "1") -> int:
        """Return how many messages carried `key=value`."""
        with self.changed:
            return sum(1 for message in self.messages if message.get(key) == value)

    def close(self) -> None:
        """Stop reading and close the socket."""
        self._closed.set()
        self._thread.join(timeout=5)
        self._sock.close()


# --- the sandbox: folders, config, daemons
# -------------------------------------------------------------


def toml_value(value: object) -> str:
    """Return a Python value as TOML (JSON's strings, numbers, booleans and arrays are valid
    TOML)."""
    return json.dumps(value, default=str)  # paths as strings


def write_config(path: Path, top: dict[str, object], settings: dict[str, object]) -> None:
    """Write a riffd config (top-level keys, then "section.key" settings by section) the way editors
    save: a temp file beside it, renamed over it."""
    sections: dict[str, list[str]] = {}
    for dotted, value in settings.items():
        section, _, key = dotted.partition(".")
        sections.setdefault(section, []).append(f"{key} = {toml_value(value)}")
    text = "".join(f"{key} = {toml_value(value)}\n" for key, value in top.items())
    for section, lines in sections.items():
        text += f"\n[{section}]\n" + "\n".join(lines) + "\n"
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def append_like_claude(
    path: Path,
    lines: list[bytes],
    pause: float = LINE_PAUSE,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Append `lines` as Claude Code does (section 4b): for each line open with O_APPEND, write
    once, close."""
    for number, line in enumerate(lines, 1):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if progress is not None:
            progress(number)
        if pause:
            time.sleep(pause)  # the writer's cadence, not a wait for the daemon


def session_id_of(lines: list[bytes]) -> str:
    """Return the sessionId the lines of a transcript carry."""
    for line in lines:
        session_id = json.loads(line).get("sessionId")
        if session_id:
            return str(session_id)
    raise AssertionError("no line carries a sessionId")


def report_time(report: dict[str, Any]) -> float:
    """Return when a health report was generated, as a Unix time."""
    return datetime.fromisoformat(report["generated_at"]).timestamp()


@dataclass
class RunningDaemon:
    """One `riffd run` subprocess, its notify socket and its captured stderr."""

    process: subprocess.Popen[bytes]
    notify: NotifyListener
    stderr_path: Path
    ready_at: int = -1  # index of the READY=1 message that ended start-up

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        """Return what the daemon wrote to stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def fail(self, message: str) -> None:
        """Fail the test with `message` and the daemon's stderr."""
        pytest.fail(
            f"{message}\n--- riffd stderr ({self.stderr_path}) ---\n{self.stderr()}", pytrace=False
        )

    def wait_until(
        self,
        condition: Callable[[], T | None],
        what: str,
        timeout: float = DEADLINE,
        alive: bool = True,
    ) -> T:
        """Poll `condition` every POLL seconds until it returns something truthy and return that;
        fail after `timeout` seconds, or at once if the daemon exits while it should be `alive`."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if alive and self.process.poll() is not None:
                self.fail(f"riffd exited with {self.process.returncode} while waiting for {what}")
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(POLL)

    def wait_notified(
        self, key: str, value: str = "1", after: int = -1, timeout: float = DEADLINE
    ) -> int:
        """Wait for a `key=value` notify message later than message `after`; return its index."""
        return (
            self.wait_until(
                lambda: _plus_one(self.notify.find(key, value, after + 1)),
                f"{key}={value} on the notify socket",
                timeout,
            )
            - 1
        )

    def stop(self, timeout: float = 10.0) -> float:
        """Send SIGTERM, wait for the exit, assert it is 0 and return how long it took."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.fail(f"riffd did not exit within {timeout:g} s of SIGTERM")
        elapsed = time.monotonic() - started
        if code != 0:
            self.fail(f"riffd exited with {code} after SIGTERM, not 0")
        return elapsed

    def kill(self) -> None:
        """SIGKILL the daemon and reap it."""
        self.process.kill()
        self.process.wait(timeout=10)


def _plus_one(position: int | None) -> int | None:
    # wait_until wants a truthy value; index 0 is a real answer.
    return None if position is None else position + 1


@dataclass
class Sandbox:
    """Temporary Claude Code folder (with one project under projects/), state folder and config
    file."""

    root: Path
    daemons: list[RunningDaemon] = field(default_factory=list)
    stores: list[StateStore] = field(default_factory=list)
    settings: dict[str, object] = field(default_factory=lambda: dict(BASE_SETTINGS))
    _starts: Iterator[int] = field(default_factory=itertools.count)

    @property
    def claude(self) -> Path:
        return self.root / "claude"

    @property
    def projects(self) -> Path:
        return self.claude / "projects"

    @property
    def project(self) -> Path:
        return self.projects / PROJECT

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def backups(self) -> Path:
        return self.state / "backups"

    def write_config(self, **settings: object) -> None:
        """Write the config: the base settings with `settings` ("section.key" spelt section__key)
        applied."""
        self.settings.update({key.replace("__", "."): value for key, value in settings.items()})
        write_config(
            self.config,
            {"roots": [self.projects], "claude_dir": self.claude, "state_dir": self.state},
            self.settings,
        )

    def start(self, watchdog_usec: int = 1_000_000) -> RunningDaemon:
        """Start `riffd run` on this sandbox and return it once it has sent READY=1."""
        number = next(self._starts)
        notify = NotifyListener(self.root / f"notify-{number}.sock")
        stderr_path = self.root / f"daemon-{number}.stderr"
        environ = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": str(watchdog_usec)}
        with open(stderr_path, "wb") as stderr:
            process = start_riffd(
                "run",
                config=self.config,
                env=environ,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        daemon = RunningDaemon(process, notify, stderr_path)
        self.daemons.append(daemon)
        daemon.ready_at = daemon.wait_notified("READY")
        return daemon

    def riffd(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a riffd command (not the daemon) on this sandbox's config and return its result."""
        return run_riffd(*args, config=self.config, cwd=self.root, timeout=timeout)

    def open_store(self) -> StateStore:
        """Open the daemon's state store beside it (SQLite in WAL mode: readers do not block its
        writes)."""
        store = StateStore(self.state / "state.db")
        self.stores.append(store)
        return store

    def report(self) -> dict[str, Any] | None:
        """Return the latest health report, or None before the first one."""
        try:
            report: dict[str, Any] = json.loads(
                (self.state / "reports" / "latest.json").read_bytes()
            )
        except FileNotFoundError:
            return None
        return report

    def report_after(self, moment: float) -> dict[str, Any] | None:
        """Return the latest report if it was generated after the Unix time `moment` (its time is in
        whole seconds, cut down, so one second is added), else None."""
        report = self.report()
        return report if report is not None and report_time(report) > moment + 1 else None

    def report_where(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """Return the latest report if `predicate` holds for it, else None."""
        report = self.report()
        return report if report is not None and predicate(report) else None

    def backup_ids(self) -> list[str]:
        """Return the ids of complete backups: a `.gz` whose `.json` manifest exists."""
        if not self.backups.is_dir():
            return []
        return sorted(
            data.stem for data in self.backups.glob("*.gz") if data.with_suffix(".json").exists()
        )

    def close(self) -> None:
        """Kill what a failed test left running and close the notify sockets."""
        for daemon in self.daemons:
            if daemon.process.poll() is None:
                daemon.kill()
            daemon.notify.close()
        for store in self.stores:
            store.close()


def watermark_of(store: StateStore, path: Path) -> Watermark | None:
    """Return the watermark the daemon committed for `path`, or None before its first commit."""
    state = store.file(str(path))
    return None if state is None else state.watermark


def lines_committed(store: StateStore, path: Path) -> int:
    """Return how many lines of `path` the daemon has committed."""
    watermark = watermark_of(store, path)
    return 0 if watermark is None else watermark.lines


def resumed_duplicate() -> damage.Damaged:
    """A real transcript with the real "resumed session duplicate" of transcript-format section
    4b."""
    return damage.inject_resumed_duplicate(corpus_lines(TOOL_HEAVY))


def open_duplicates(report: dict[str, Any]) -> int:
    return int(report["findings"]["open"].get(DUPLICATE, 0))
