"""Shared test helpers: make `src/` importable, build small transcripts, and describe files as
scanned."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

# Tests run against the working tree, also when riffd is not installed into the interpreter.
REPO_DIR = Path(__file__).resolve().parent.parent  # the checkout: src/, tests/, README.md, ...
SRC_DIR = REPO_DIR / "src"
if str(SRC_DIR) not in sys.path:
    sys.path.insert(0, str(SRC_DIR))

from riffd.repair.plan import LineSpan  # noqa: E402
from riffd.transcript.scan import FileIdentity  # noqa: E402

if TYPE_CHECKING:
    from helpers.daemon import Sandbox


def write_config(tmp_path: Path) -> Path:
    """A config file naming a state folder, a Claude folder and its projects root, all under
    `tmp_path`."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{tmp_path / "claude"}"\n'
        f'roots = ["{tmp_path / "claude" / "projects"}"]\n'
    )
    return config


def dead_pid() -> int:
    """Return the pid of a process that has exited and been reaped (no process has it now: pids are
    reused only after the whole range has gone round)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def live_children(pid: int) -> list[int]:
    """The processes whose parent is `pid` and that are not zombies (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
            if int(parent) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def live_processes_mentioning(text: str, timeout: float = 5.0) -> list[int]:
    """The processes (not zombies) whose command line holds `text`, once none is left or `timeout`
    has passed: what outlives a killed riffd process (a child it forked, say)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if text.encode() in (entry / "cmdline").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def identity_of(path: Path) -> FileIdentity:
    """Given a file, return its FileIdentity as a scan would record it (stat plus sha256 of every
    byte)."""
    status = os.stat(path)
    return FileIdentity(
        path=str(path),
        dev=status.st_dev,
        ino=status.st_ino,
        size=status.st_size,
        mtime_ns=status.st_mtime_ns,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
    )


def transcript_line(
    number: int, session_id: str = "11111111-2222-3333-4444-555555555555", pad: int = 0
) -> bytes:
    """Given a line number, return one newline-terminated conversation line (user/assistant
    alternating)."""
    record = {
        "type": "user" if number % 2 else "assistant",
        "uuid": f"uuid-{number:06d}",
        "parentUuid": f"uuid-{number - 1:06d}" if number > 1 else None,
        "sessionId": session_id,
        "message": {
            "role": "user" if number % 2 else "assistant",
            "content": f"line {number} " + "x" * pad,
        },
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def transcript_bytes(count: int, pad: int = 0) -> bytes:
    """Given a line count, return a transcript of that many lines (1-based numbers in the
    content)."""
    return b"".join(transcript_line(number, pad=pad) for number in range(1, count + 1))


def line_spans(data: bytes) -> list[LineSpan]:
    """Given file bytes, return the LineSpan of every line (the last one may lack its newline)."""
    spans: list[LineSpan] = []
    offset = 0
    number = 1
    while offset < len(data):
        end = data.find(b"\n", offset)
        end = len(data) if end == -1 else end + 1
        spans.append(LineSpan(number, offset, end - offset))
        offset = end
        number += 1
    return spans


# --- corpus and scanning helpers for the detection, repair and property tests
# -------------------------

# The real transcripts: the folder RIFFD_CORPUS names (used as given, even when it does not exist,
# so that `RIFFD_CORPUS=/nonexistent` runs the suite as a plain clone would), else
# shared/corpus/real beside the checkout. Without them every test that reads them is skipped, all
# for the one reason below; the others still run.
NO_CORPUS = "no real transcripts: set RIFFD_CORPUS or put shared/ beside the checkout (../shared/corpus/real)"
CORPUS_DIR = Path(
    os.environ.get("RIFFD_CORPUS")
    or Path(__file__).resolve().parents[2] / "shared" / "corpus" / "real"
)
HAVE_CORPUS = CORPUS_DIR.is_dir()

# The one way to skip without the corpus: decorate a test (`@requires_corpus`), a module
# (`pytestmark = requires_corpus`) or a parameter (`pytest.param(..., marks=requires_corpus)`).
requires_corpus = pytest.mark.skipif(not HAVE_CORPUS, reason=NO_CORPUS)


def corpus_transcripts() -> list[Path]:
    """Return every real transcript of the corpus (`*.jsonl`, subagent files included), sorted."""
    return sorted(CORPUS_DIR.rglob("*.jsonl"))


def corpus_transcript_params() -> list:
    """Return `parametrize` values over every corpus transcript (id: its path in the corpus);
    without the corpus, one parameter skipped for NO_CORPUS, so the test still collects."""
    if not HAVE_CORPUS:
        return [pytest.param(None, id="no-corpus", marks=requires_corpus)]
    return [
        pytest.param(path, id=str(path.relative_to(CORPUS_DIR))) for path in corpus_transcripts()
    ]


def corpus_injection_bases() -> list[Path]:
    """Return the corpus transcripts damage can be injected into: session files (a subagent file's
    parents live in its session file) whose last line is complete, so appended lines stay lines."""
    return [
        path
        for path in corpus_transcripts()
        if path.parent.name != "subagents" and path.read_bytes().endswith(b"\n")
    ]


@functools.cache
def corpus_base_lines() -> dict[Path, list[bytes]]:
    """Return the lines of every injection base (corpus_injection_bases), read once per session and
    shared: call it from a test, never at import, so a module without the corpus still imports."""
    return {path: corpus_lines(path) for path in corpus_injection_bases()}


def corpus_lines(path: Path) -> list[bytes]:
    """Return the lines of a corpus file, each with its newline (the last one may lack it)."""
    data = path.read_bytes()
    return [data[span.offset : span.end] for span in line_spans(data)]


def scan_transcript_bytes(
    directory: Path, data: bytes, name: str = "session.jsonl"
) -> tuple[Path, object]:
    """Write `data` as `directory/name`, scan it with its identity, and return (path,
    ScannedFile)."""
    from riffd.transcript.scan import index_file

    path = directory / name
    path.write_bytes(data)
    return path, index_file(path, with_identity=True)


def worker_home(tmp_path: Path, **settings: object) -> tuple[Path, object]:
    """A Claude Code folder under `tmp_path` with one project (returned) and the WorkerSettings of a
    worker on it (repairs on, no quiet period, backups in tmp_path/state/backups), `settings`
    applied."""
    from riffd.daemon.outcome import WorkerSettings

    claude = tmp_path / "claude"
    (claude / "sessions").mkdir(parents=True)
    project = claude / "projects" / "-p"
    project.mkdir(parents=True)
    defaults: dict[str, object] = {
        "repair": True,
        "quiet_period": 0,
        "backup_dir": tmp_path / "state" / "backups",
        "claude_dir": claude,
        "roots": (claude / "projects",),
    }
    return project, WorkerSettings(**{**defaults, **settings})  # type: ignore[arg-type]


def plan_transcript_repair(path: Path, scanned: object, add_missing_results: bool = True) -> object:
    """Return riffd's repair plan for a scanned file, reading lines from `path`, with numbered new
    uuids, every repair class named (the opt-in ones too)."""
    from riffd.repair.plan import RepairOptions
    from riffd.repair.planner import plan_repair
    from riffd.transcript.findings import REPAIRABLE
    from riffd.transcript.reader import read_span

    counter = iter(range(1, 1_000_000))
    options = RepairOptions(
        add_missing_results=add_missing_results,
        new_uuid=lambda: f"00000000-0000-4000-8000-{next(counter):012d}",
        classes=REPAIRABLE,
    )
    return plan_repair(scanned, lambda line: read_span(path, *scanned.index.span(line)), options)  # type: ignore[attr-defined]


# Hypothesis: the default profile "dev" draws a fifth of each property test's examples (at least
# 10), for a fast run; "ci" draws them all. HYPOTHESIS_PROFILE=ci selects it (CI sets it). A test
# names its full count as `max_examples=examples(N)`; one that names none draws the profile's own
# (20, or Hypothesis's 100). "ci" draws the same examples at every run (derandomize, no example
# database): a run of CI says whether the code changed what those examples find, never whether a
# random draw this time hit something; the "dev" profile draws afresh at each run and keeps what
# failed (.hypothesis/), which is where new failures are found.
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
settings.register_profile("dev", max_examples=20)
settings.register_profile("ci", max_examples=100, derandomize=True, database=None)
settings.load_profile(HYPOTHESIS_PROFILE)  # an unknown name stops the run, saying so


def examples(full: int) -> int:
    """The number of examples a property test draws under the loaded profile: `full` in "ci", a
    fifth of it (at least 10) in "dev"."""
    return full if HYPOTHESIS_PROFILE == "ci" else max(10, full // 5)


# The kinds of test, a folder each: tests/unit/<subpackage>/ (riffd's functions in-process),
# tests/safety/ (tests that try to make riffd lose data), tests/e2e/ (riffd driven as a user drives
# it: the `riffd` command or `riffd run` as real subprocesses). Each test is marked with its folder's
# kind, so `pytest -m unit` (or safety, e2e) runs one kind; `slow` is marked by hand.
KINDS = ("unit", "safety", "e2e")
TESTS_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_configure(config: pytest.Config) -> None:
    """The riffd processes the tests start meet Ctrl-C as a terminal's foreground process does: a
    test run started in the background of a script has SIGINT ignored, which its children would
    inherit (and keep: Python leaves an ignored SIGINT so), and the tests that send them Ctrl-C
    would wait for nothing."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):  # (once, in the process that starts the workers)
        precompile_riffd()


def precompile_riffd() -> None:
    """Write the bytecode of riffd's modules once, as installing a package does: the tests start
    some 600 riffd processes, and where PYTHONDONTWRITEBYTECODE is set (CI images, this project's
    own machines) each compiled every module from source (`riffd sessions`: 0.34 s with bytecode,
    0.7 to 1.0 s without), most of the README's test run. Bytecode Python finds out of date (an
    edited module) is compiled again here, as Python would."""
    import compileall

    compileall.compile_dir(SRC_DIR / "riffd", quiet=1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the kind of the folder it lives in (KINDS), and put the slow ones in one
    group, which pytest-xdist runs one after another in one worker: they time kills and signals to
    the millisecond, and two of them at once would each slow the other."""
    for item in items:
        path = item.path.resolve()
        parts = path.relative_to(TESTS_DIR).parts if path.is_relative_to(TESTS_DIR) else ()
        if len(parts) > 1 and parts[0] in KINDS:
            item.add_marker(parts[0])
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group("slow"))


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's: the tests run without it too)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker more than the cores this process may run on (at most 8), since a test
    spends much of its time waiting for a riffd subprocess (on 2 cores: 145 s with 3 workers, 169 s
    with 2, 318 s with none, the default run of a fresh clone). PYTEST_XDIST_AUTO_NUM_WORKERS, when
    set, is left to pytest-xdist."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from riffd.forking import usable_cpus

    return min(8, usable_cpus() + 1)


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Count the slow tests left out, in a pytest-xdist worker too (see pytest_terminal_summary)."""
    _slow_left_out[0] += sum(item.get_closest_marker("slow") is not None for item in items)


_slow_left_out = [0]  # (a list: the hooks here add to it)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands its count of slow tests left out to the main process."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["slow_left_out"] = _slow_left_out[0]


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's)
def pytest_testnodedown(node: object, error: object) -> None:
    """The main process keeps the count a worker handed over (each worker collects every test)."""
    handed = getattr(node, "workeroutput", {}).get("slow_left_out", 0)
    _slow_left_out[0] = max(_slow_left_out[0], handed)


@pytest.fixture(autouse=True)
def no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads the configuration of the person running the tests: the default config path
    points into an empty folder on Linux (a test that needs a config names one: --config,
    RIFFD_CONFIG or XDG_CONFIG_HOME)."""
    monkeypatch.delenv("RIFFD_CONFIG", raising=False)
    # Linux; macOS's is fixed
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Say once per reason, at the end, how many tests were skipped and why (the sample transcripts
    missing: where to get them), instead of one line per skipped test; and, in the default run, how
    to run the slow tests it left out."""
    deselected = _slow_left_out[0]
    if deselected and config.option.markexpr == "not slow":
        terminalreporter.write_line(
            f"{deselected} slow test(s) left out; every test, every example, as CI runs them: "
            "HYPOTHESIS_PROFILE=ci python3 -m pytest -m 'slow or not slow'",
            yellow=True,
        )
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count} test(s) skipped: {reason}", yellow=True)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A daemon sandbox (tests/helpers/daemon.py) with one project folder and its config written;
    whatever daemon a failed test left running is killed after it."""
    from helpers.daemon import Sandbox

    box = Sandbox(tmp_path)
    box.project.mkdir(parents=True)
    (box.claude / "sessions").mkdir()
    box.write_config()
    yield box
    box.close()
