"""riffd as a real subprocess, the one way the tests start it: `python -m riffd ARGS`.

The working tree's `src/` comes first on PYTHONPATH, so a test runs the code beside it, installed
or not. The environment is the tests' own without what would point riffd at the folders or the
service manager of whoever runs them: every `RIFFD_*` variable (RIFFD_CONFIG, RIFFD_STATE_DIR, ...),
CLAUDE_CONFIG_DIR, and systemd's NOTIFY_SOCKET and WATCHDOG_*. A test names what riffd should use
(`config=` for `--config`, `env=` for variables); XDG_CONFIG_HOME is an empty folder already (the
autouse fixture of tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
SCRUBBED = ("CLAUDE_CONFIG_DIR", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def riffd_env(**extra: str) -> dict[str, str]:
    """The environment for a riffd subprocess (or a `python -c` child that imports riffd): ours
    without RIFFD_* and SCRUBBED, with SRC_DIR first on PYTHONPATH, then `extra`."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("RIFFD_") and name not in SCRUBBED
    }
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), environ.get("PYTHONPATH")]))
    environ.update(extra)
    return environ


def riffd_command(*args: str, config: Path | None = None) -> list[str]:
    """`python -m riffd [--config CONFIG] ARGS`, with this interpreter."""
    options = ["--config", str(config)] if config is not None else []
    return [sys.executable, "-m", "riffd", *options, *args]


def run_riffd(
    *args: str,
    config: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input: str | bytes | None = None,
    text: bool = True,
    timeout: float = 120.0,
    umask: int | None = None,
) -> subprocess.CompletedProcess[Any]:
    """Run `riffd ARGS` to its end (in `cwd`, under `umask`, with `input` on stdin, the variables
    `env` added) and return it, stdout and stderr captured (as text unless `text` is false); its
    exit code is the test's to check."""
    return subprocess.run(
        riffd_command(*args, config=config),
        input=input,
        capture_output=True,
        text=text,
        env=riffd_env(**(env or {})),
        cwd=cwd,
        timeout=timeout,
        check=False,
        umask=-1 if umask is None else umask,
    )


def start_riffd(
    *args: str,
    config: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """Start `riffd ARGS` (`riffd run`, or a command a test kills or races) and return it; `popen`
    goes to subprocess.Popen (stdout, stderr, text, ...)."""
    return subprocess.Popen(
        riffd_command(*args, config=config), env=riffd_env(**(env or {})), cwd=cwd, **popen
    )


def kill_9_once_marked(script: str, *args: str | Path, marker: Path, timeout: float = 60) -> None:
    """Run `python -c script ARGS` (riffd importable), wait until it writes `marker` (the instant
    the test wants it killed at: it then waits there), SIGKILL it and reap it; fail when it never
    got there."""
    import signal
    import time

    child = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=riffd_env())
    deadline = time.monotonic() + timeout
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert marker.exists(), f"the child never got there (exit {child.poll()})"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def kill_9_at_random(
    child: subprocess.Popen[Any],
    ready: Callable[[], bool],
    wait: float,
    rng: random.Random,
    timeout: float = 60,
) -> bool:
    """Once `ready()` (polled) or `child` ended, wait a random time up to `wait` seconds and SIGKILL
    `child` if it still runs; reap it; return whether it was killed."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while child.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, wait))
    killed = child.poll() is None
    if killed:
        child.send_signal(signal.SIGKILL)
    child.wait()
    return killed


def kill_9_after(
    script: str,
    *args: str | Path,
    delay: float,
    when: Callable[[], bool] | None = None,
    timeout: float = 60,
) -> int:
    """Run `python -c script ARGS` (riffd importable; it prints "ready" once imported, then waits
    for a line on stdin before it starts the work to interrupt), let it work `delay` seconds (after
    `when()`, polled every millisecond, is first true, if given, or `timeout` seconds have passed),
    SIGKILL it and reap it; return its exit code (-SIGKILL unless it ended by itself first)."""
    import signal
    import time

    with subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=riffd_env(),
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + timeout
        while when is not None and child.poll() is None and time.monotonic() < deadline:
            if when():
                break
            time.sleep(0.001)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        return child.wait()


@contextlib.contextmanager
def killed_at_the_end(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """`process`, killed and reaped when the block ends with it still running (a test that failed
    half way, or a riffd that hung)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def said_interrupted(process: subprocess.Popen[str], timeout: float = 30) -> None:
    """Wait for a riffd the test sent Ctrl-C, and check it ended as docs/exit-codes.md says: one
    line, no traceback, exit 130. (Its standard input stays open until it has ended: `communicate`
    would close it at once, and a riffd that reads it could see the end of its input before the
    signal.)"""
    process.wait(timeout=timeout)
    _out, err = process.communicate()
    assert process.returncode == 130, err
    assert err.count("riffd: interrupted") == 1 and "Traceback" not in err, err
