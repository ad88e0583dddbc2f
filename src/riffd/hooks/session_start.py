"""`riffd hook session-start`: a Claude Code SessionStart hook that warns before a resume damages a
transcript.

Resuming a session while another Claude Code process still runs a tool in it makes the new process
write a synthetic "interrupted" result beside the genuine one that comes later: the commonest real
damage (shared/transcript-format.md, 4b). Claude Code registers each running process in `<config
dir>/sessions/<pid>.json` (riffd.claude_code.registry), so when the session that starts is registered to another
live process, this hook says so before anything is written: `systemMessage` (shown to the user)
names the process, and `additionalContext` tells the model that a tool call which looks interrupted
may still be running.

It reads the hook's JSON on stdin (`session_id`, `transcript_path`, `cwd`, `hook_event_name`,
`source`) and never blocks: every failure, bad stdin included, exits 0 with nothing on stdout and at
most one line on stderr. Only the standard library (none of its modules that are slow to import:
`json`, `pathlib`, `typing`), riffd.quickjson and riffd.claude_code.registry are imported, so it
answers within a few milliseconds of the interpreter's own start (`tests/unit/hooks` holds it to
that).
"""

from __future__ import annotations

import os
import stat
import sys
import time

from riffd.claude_code.registry import (
    ENTRY_LIMIT,
    Registration,
    clean_path,
    entry_fields,
    file_stem,
    is_entry_name,
    names_session,
    pid_running,
    registrations_named,
)
from riffd.hooks.answer import answered
from riffd.quickjson import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from typing import Any

EVENT = "SessionStart"
EXIT_OK = 0
EXIT_USAGE = 1  # a non-blocking error for Claude Code: it shows the message and the session starts
USAGE = "usage: riffd hook session-start (run by Claude Code, with the SessionStart event's JSON on stdin)"


def main(argv: Sequence[str]) -> int:
    """Run `riffd hook session-start` as Claude Code calls it."""
    if list(argv) != ["session-start"]:
        print(f"riffd hook: unexpected arguments {list(argv)[1:]}; {USAGE}", file=sys.stderr)
        return EXIT_USAGE
    return run(getattr(sys.stdin, "buffer", None), sys.stdout)


def run(stdin: Any, stdout: Any, environ: Mapping[str, str] | None = None) -> int:
    """Read one SessionStart event from `stdin` (binary), write the warning (if any) to `stdout`;
    return 0."""
    try:
        data = stdin.read() if stdin is not None else b""  # (closed: no event)
        answer = answer_event(data, os.environ if environ is None else environ)
    except Exception as exc:  # the session must start whatever happens here
        print(
            f"riffd hook: {type(exc).__name__}: {exc}; the session starts as usual", file=sys.stderr
        )
        return EXIT_OK
    if answer is not None:
        # (ASCII: a lone surrogate, from a cut emoji in a result, is written as its escape)
        answered(stdout, dumps(answer), "the session starts as usual")
    return EXIT_OK


# How much later than its entry's `startedAt` a process may have started and still be the one that
# wrote it (the entry is written after the start; clocks step)
STARTED_SLACK = 60.0


def _started_since(pid: int, started_at: float | None) -> bool:
    """Whether the process `pid` started well after `started_at` (Unix seconds): the pid of an
    entry whose process is gone, given to another. Linux only (its start time from /proc); False
    when it cannot be told."""
    if started_at is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            # (the name, in parentheses, may hold spaces: the fields after it are counted)
            ticks = int(handle.read().rpartition(b")")[2].split()[19])
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return started > started_at + STARTED_SLACK


def answer_event(
    data: bytes, environ: Mapping[str, str], ancestors: set[int] | None = None
) -> dict[str, Any] | None:
    """Given the event's JSON, return the warning to answer with, or None. `ancestors`: the
    processes this hook runs under (the Claude Code that starts the session is one of them; default:
    looked up only when needed)."""
    event = loads(data)
    if not isinstance(event, dict):
        raise ValueError("the hook event is not a JSON object")
    if event.get("hook_event_name", EVENT) != EVENT or not isinstance(event.get("session_id"), str):
        return None
    session_id: str = event["session_id"]
    transcript = (
        event.get("transcript_path") if isinstance(event.get("transcript_path"), str) else None
    )
    names = [session_id, *([file_stem(transcript)] if transcript else [])]
    for registration in registrations(config_dirs(environ, transcript)):
        if not any(names_session(registration.session_id, name) for name in names):
            continue
        if not pid_running(registration.pid) or _started_since(
            registration.pid, registration.started_at
        ):
            continue  # (gone, or its pid now another process's: the entry outlived its process)
        if ancestors is None:
            ancestors = ancestry(os.getpid())
        if registration.pid in ancestors:
            continue  # the process that is starting this session
        return warning(session_id, registration)
    return None


def warning(session_id: str, other: Registration) -> dict[str, Any]:
    """The answer naming the other process that has the session open."""
    try:
        since = (
            f", running since {time.strftime('%Y-%m-%d %H:%M', time.localtime(other.started_at))}"
            if other.started_at
            else ""
        )
    except (OverflowError, ValueError, OSError):  # (a time the platform's clock cannot show)
        since = ""
    where = f" in {other.cwd}" if other.cwd else ""
    return {
        "systemMessage": (
            f"riffd: session {session_id} is still open in another Claude Code process (pid {other.pid}{where}"
            f"{since}). Resuming it here while that process runs a tool damages the transcript: a second, "
            '"interrupted" result is written beside the real one, and the session may then fail to resume. '
            f"Finish or close the other process first (registered in {other.registry_file})."
        ),
        "hookSpecificOutput": {
            "hookEventName": EVENT,
            "additionalContext": (
                f"This session is also open in another Claude Code process (pid {other.pid}). A tool call that "
                "looks interrupted may still be running there: do not assume it failed, and do not repeat it "
                "without asking the user."
            ),
        },
    }


def config_dirs(environ: Mapping[str, str], transcript: str | None) -> list[str]:
    """Claude Code's config folders whose registry may name the session: $CLAUDE_CONFIG_DIR (else
    ~/.claude) and the folder above the `projects/` holding the transcript."""
    configured = environ.get("CLAUDE_CONFIG_DIR") or os.path.join(
        os.path.expanduser("~"), ".claude"
    )
    folders = [clean_path(os.path.expanduser(configured))]
    if transcript:
        ancestor = os.path.dirname(
            os.path.normpath(os.path.abspath(os.path.expanduser(transcript)))
        )
        while True:
            if os.path.basename(ancestor) == "projects":
                folders.append(os.path.dirname(ancestor))
                break
            parent = os.path.dirname(ancestor)
            if parent == ancestor:
                break
            ancestor = parent
    return list(dict.fromkeys(folders))


def registrations(folders: list[str]) -> Iterator[Registration]:
    """Every session and pid the registry entries in `folders` may name (alive or not), read
    leniently (registrations_named)."""
    for folder in folders:
        try:
            names = os.listdir(os.path.join(folder, "sessions"))
        except OSError:
            continue
        for name in sorted(names):  # (in one order whatever the file system's)
            if not is_entry_name(name):
                continue
            path = os.path.join(folder, "sessions", name)
            try:  # without blocking, and only a regular file: a FIFO there must not hold the session's start
                with os.fdopen(
                    os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb"
                ) as handle:
                    raw = (
                        handle.read(ENTRY_LIMIT)
                        if stat.S_ISREG(os.fstat(handle.fileno()).st_mode)
                        else b""
                    )
            except OSError:
                continue
            yield from registrations_named(path, entry_fields(raw))


def ancestry(pid: int) -> set[int]:
    """Return `pid` and every process above it (from /proc on Linux, else one `ps` call)."""
    parents: dict[int, int] = {}
    if os.path.isdir("/proc/self"):
        chain, current = {pid}, pid
        for _ in range(128):
            try:
                with open(f"/proc/{current}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                break
            # the field after the state: ppid
            current = int(stat[stat.rindex(b")") + 2 :].split()[1])
            if current <= 0 or current in chain:
                break
            chain.add(current)
        return chain
    import subprocess  # macOS: no /proc (imported here: it costs milliseconds on every start)

    output = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=5, check=False
    ).stdout
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            parents[int(fields[0])] = int(fields[1])
    chain, current = {pid}, pid
    while current in parents and parents[current] not in chain and parents[current] > 0:
        current = parents[current]
        chain.add(current)
    return chain
