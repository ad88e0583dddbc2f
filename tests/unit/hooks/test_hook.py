"""`riffd hook pre-tool-use`, driven as Claude Code drives it: a process, the event's JSON on
stdin."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helpers.run import riffd_env, run_riffd
from riffd.hooks.pre_tool_use import (
    CACHE_MAX_CHARS,
    UsageError,
    iter_lines_backwards,
    parse_args,
)

SESSION = "11111111-2222-3333-4444-555555555555"
TEXT = "import os\n\nprint(os.getcwd())\n"


def stamp(moment: float) -> str:
    return (
        datetime.fromtimestamp(moment, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def tool_use(tool: str, tool_input: dict[str, Any], tool_id: str, moment: float) -> dict[str, Any]:
    return {
        "type": "assistant",
        "uuid": f"u-{tool_id}",
        "sessionId": SESSION,
        "cwd": "/work",
        "timestamp": stamp(moment),
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tool_id, "name": tool, "input": tool_input}],
        },
    }


def tool_result(
    tool_id: str, content: Any, moment: float, tool_use_result: Any = None, is_error: bool = False
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "user",
        "uuid": f"r-{tool_id}",
        "sessionId": SESSION,
        "cwd": "/work",
        "timestamp": stamp(moment),
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_id,
                    "content": content,
                    "is_error": is_error,
                }
            ],
        },
    }
    if tool_use_result is not None:
        line["toolUseResult"] = tool_use_result
    return line


def read_result(path: Path, text: str = TEXT) -> dict[str, Any]:
    """The toolUseResult Claude Code writes for a whole-file Read (shape taken from the real
    samples)."""
    count = text.count("\n")
    return {
        "type": "text",
        "file": {
            "filePath": str(path),
            "content": text,
            "numLines": count,
            "startLine": 1,
            "totalLines": count,
        },
    }


@pytest.fixture
def session(tmp_path: Path) -> tuple[Path, Path, float]:
    """A source file last modified an hour ago, and a transcript that read it 60 s ago (after 10,000
    old lines)."""
    source = tmp_path / "work" / "a.py"
    source.parent.mkdir()
    source.write_text(TEXT)
    an_hour_ago = time.time() - 3600
    os.utime(source, (an_hour_ago, an_hour_ago))
    now = time.time()
    old = [
        tool_use("Bash", {"command": f"echo {number}"}, f"old{number}", now - 7200)
        for number in range(10_000)
    ]
    lines = [
        *old,
        tool_use("Read", {"file_path": str(source)}, "t1", now - 60),
        tool_result(
            "t1",
            "     1\timport os\n     2\t\n     3\tprint(os.getcwd())\n",
            now - 59,
            read_result(source),
        ),
    ]
    transcript = tmp_path / "projects" / "-work" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    write_lines(transcript, lines)
    return transcript, source, now - 59


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))


def event(
    transcript: Path, tool: str, tool_input: dict[str, Any], tool_id: str = "current"
) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "transcript_path": str(transcript),
        "cwd": "/work",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": tool_id,
    }


def run_hook(stdin: bytes, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run the hook as settings.json would: a new process, the event on stdin."""
    return run_riffd("hook", "pre-tool-use", *args, input=stdin, text=False, timeout=timeout)


def answer(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert isinstance(output, dict)
    return output


def local(moment: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(moment))


def test_warn_lets_the_call_run_and_tells_the_model(session: tuple[Path, Path, float]) -> None:
    transcript, source, read_at = session
    output = answer(
        run_hook(json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode())
    )
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse" and "permissionDecision" not in specific
    # (the call's time, as "s ago" says it; the result came a second later)
    assert (
        f"repeats the identical call made at {local(read_at - 1)}" in specific["additionalContext"]
    )
    assert "t1" in specific["additionalContext"]


def test_cache_hands_back_the_earlier_result_when_the_file_is_unchanged(
    session: tuple[Path, Path, float],
) -> None:
    transcript, source, read_at = session
    result = run_hook(
        json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
        "--mode",
        "cache",
    )
    specific = answer(result)["hookSpecificOutput"]
    assert specific["permissionDecision"] == "deny"
    reason = specific["permissionDecisionReason"]
    assert reason.startswith(f"[Cached result from {local(read_at)}]")
    assert reason.endswith("     3\tprint(os.getcwd())\n")
    # the file changed since that read: no cache, a warning
    source.write_text(TEXT)
    changed = answer(
        run_hook(
            json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
            "--mode=cache",
        )
    )["hookSpecificOutput"]
    assert (
        "permissionDecision" not in changed
        and "repeats the identical call" in changed["additionalContext"]
    )


def test_cache_needs_an_unchanged_size_and_a_cacheable_tool(
    session: tuple[Path, Path, float],
) -> None:
    transcript, source, _ = session
    source.write_text(TEXT + "# one more line\n")
    an_hour_ago = time.time() - 3600
    os.utime(source, (an_hour_ago, an_hour_ago))  # an old mtime, but not the size that read saw
    output = answer(
        run_hook(
            json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
            "--mode",
            "cache",
        )
    )
    assert "permissionDecision" not in output["hookSpecificOutput"]
    now = time.time()
    lines = [
        tool_use("Grep", {"pattern": "os", "path": "/work"}, "g1", now - 30),
        tool_result("g1", "a.py", now - 29),
    ]
    write_lines(transcript, lines)
    grep = answer(
        run_hook(
            json.dumps(event(transcript, "Grep", {"pattern": "os"})).encode(), "--mode", "cache"
        )
    )
    # a search may see changed files: warn only
    assert "permissionDecision" not in grep["hookSpecificOutput"]


def fetched(tmp_path: Path, text: str) -> tuple[Path, dict[str, str], float]:
    """A transcript whose WebFetch of example.com gave `text` 18 s ago; its input; now."""
    transcript = tmp_path / "s.jsonl"
    now = time.time()
    fetch = {"url": "https://example.com/a", "prompt": "summarise"}
    write_lines(
        transcript,
        [
            tool_use("WebFetch", fetch, "w1", now - 20),
            tool_result("w1", [{"type": "text", "text": text}], now - 18),
        ],
    )
    return transcript, fetch, now


def test_cache_serves_a_repeated_fetch(tmp_path: Path) -> None:
    transcript, fetch, now = fetched(tmp_path, "A summary.")
    specific = answer(
        run_hook(json.dumps(event(transcript, "WebFetch", fetch)).encode(), "--mode", "cache")
    )
    assert specific["hookSpecificOutput"]["permissionDecisionReason"].endswith(
        "Its result:\nA summary."
    )
    big = [
        tool_use("WebFetch", fetch, "w1", now - 20),
        tool_result("w1", "x" * (CACHE_MAX_CHARS + 1), now - 18),
    ]
    write_lines(transcript, big)
    too_big = answer(
        run_hook(json.dumps(event(transcript, "WebFetch", fetch)).encode(), "--mode", "cache")
    )
    assert "permissionDecision" not in too_big["hookSpecificOutput"]


def test_a_cached_result_with_a_cut_emoji_is_answered_not_a_traceback(tmp_path: Path) -> None:
    """A fetched text ending in half an emoji (JSON's lone surrogate escape) made the answer
    unwritable: exit 1 with a traceback, the cached answer lost."""
    transcript, fetch, _now = fetched(tmp_path, "Cut \ud83d")
    result = run_hook(json.dumps(event(transcript, "WebFetch", fetch)).encode(), "--mode", "cache")
    assert b"Traceback" not in result.stderr, result.stderr
    reason = answer(result)["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.endswith("Its result:\nCut \ud83d")


def test_a_hook_started_with_standard_input_closed_lets_the_call_run() -> None:
    for words in (["pre-tool-use", "--mode", "warn"], ["session-start"]):
        done = subprocess.run(
            [sys.executable, "-m", "riffd", "hook", *words],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=riffd_env(),
            timeout=60,
            preexec_fn=lambda: os.close(0),
        )
        assert done.returncode == 0 and done.stdout == b"", done.stderr
        assert b"Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Read", {"file_path": "/work/other.py"}),  # another file
        ("Read", {"file_path": "/work/a.py", "offset": 40}),  # another range
        ("Bash", {"command": "echo 1"}),  # never compared, although the transcript has it
    ],
)
def test_no_match_means_no_answer(
    session: tuple[Path, Path, float], tool: str, tool_input: dict[str, Any]
) -> None:
    transcript, _, _ = session
    result = run_hook(json.dumps(event(transcript, tool, tool_input)).encode(), "--mode", "cache")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_the_window_an_edit_and_the_call_itself_end_the_search(
    session: tuple[Path, Path, float],
) -> None:
    transcript, source, _ = session
    read = json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode()
    assert run_hook(read, "--window", "30").stdout == b""  # the read was 60 s ago
    now = time.time()
    with transcript.open("ab") as handle:
        for line in (
            tool_use(
                "Edit",
                {"file_path": str(source), "old_string": "os", "new_string": "sys"},
                "e1",
                now - 5,
            ),
            tool_result("e1", "ok", now - 4),
        ):
            handle.write(json.dumps(line).encode() + b"\n")
    assert run_hook(read).stdout == b""  # edited since: reading it again is right
    lone = transcript.with_name("lone.jsonl")
    write_lines(lone, [tool_use("Read", {"file_path": str(source)}, "current", now - 1)])
    assert (
        run_hook(json.dumps(event(lone, "Read", {"file_path": str(source)})).encode()).stdout == b""
    )


@pytest.mark.parametrize("stdin", [b"", b"not json", b"[1, 2]", b'{"tool_name": "Read"}'])
def test_malformed_input_lets_the_call_run(stdin: bytes) -> None:
    result = run_hook(stdin, "--mode", "cache")
    assert result.returncode == 0 and result.stdout == b""
    assert len(result.stderr.splitlines()) <= 1


def test_a_missing_transcript_lets_the_call_run(tmp_path: Path) -> None:
    result = run_hook(
        json.dumps(event(tmp_path / "nope.jsonl", "Read", {"file_path": "/work/a.py"})).encode()
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_arguments() -> None:
    assert parse_args(["pre-tool-use"]) == ("warn", 300.0)
    assert parse_args(["pre-tool-use", "--mode", "cache", "--window=60"]) == ("cache", 60.0)
    for bad in (
        ["post-tool-use"],
        ["pre-tool-use", "--mode", "block"],
        ["pre-tool-use", "--window", "0"],
        ["pre-tool-use", "--verbose"],
    ):
        with pytest.raises(UsageError):
            parse_args(bad)
    result = run_hook(b"{}", "--mode", "block")
    # a non-blocking error: Claude Code runs the call
    assert result.returncode == 1 and result.stdout == b""


def test_the_console_entry_skips_the_full_command_line(session: tuple[Path, Path, float]) -> None:
    transcript, source, _ = session
    probe = (
        "import sys; from riffd.entry import main; code = main(['hook', 'pre-tool-use']); "
        "sys.stderr.write('cli loaded' if 'riffd.commands' in sys.modules else 'light'); sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        timeout=60,
        check=False,
        input=json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
        env=riffd_env(),
    )
    assert result.returncode == 0 and result.stderr == b"light"
    assert "additionalContext" in json.loads(result.stdout)["hookSpecificOutput"]


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_transcript_path_that_is_not_a_regular_file_never_blocks_the_call(
    tmp_path: Path, kind: str
) -> None:
    transcript = tmp_path / "session.jsonl"
    if kind == "fifo":
        os.mkfifo(transcript)  # opening it for reading would wait for a writer that never comes
    elif kind == "folder":
        transcript.mkdir()
    else:
        transcript = Path("/dev/zero")  # endless
    started = time.monotonic()
    result = run_hook(
        json.dumps(event(transcript, "Read", {"file_path": "/work/a.py"})).encode(), timeout=10
    )
    assert time.monotonic() - started < 5
    assert result.returncode == 0 and result.stdout == b""
    assert b"not a regular file" in result.stderr and len(result.stderr.splitlines()) == 1


# Standard-library modules the hooks must not import: each costs a millisecond or more of every
# tool call's and every session start's, on an interpreter whose site has not loaded it already
SLOW_TO_IMPORT = frozenset(
    {
        "json",
        "re",
        "enum",
        "typing",
        "dataclasses",
        "inspect",
        "pathlib",
        "urllib.parse",
        "datetime",
        "collections",
        "functools",
        "subprocess",
        "hashlib",
        "orjson",
    }
)


def imported_by_hook(args: list[str], stdin: bytes, **env: str) -> tuple[bytes, set[str]]:
    """Run `riffd hook ARGS` through the console entry in `python -S` (no site: nothing preloaded);
    return its answer and the modules it imported."""
    probe = (
        "import sys; before = set(sys.modules); from riffd.entry import main; "
        f"code = main({args!r}); "
        "sys.stderr.write(' '.join(sorted(set(sys.modules) - before))); sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        timeout=60,
        check=False,
        input=stdin,
        env=riffd_env(**env),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, set(result.stderr.decode().split())


def test_the_hooks_import_no_module_slow_to_import(
    session: tuple[Path, Path, float], tmp_path: Path
) -> None:
    """Both hooks, answering with a warning (the transcript read, a registry entry parsed, a JSON
    answer written), import riffd's own light modules and none of SLOW_TO_IMPORT."""
    transcript, source, _ = session
    stdout, modules = imported_by_hook(
        ["hook", "pre-tool-use"],
        json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
    )
    assert "additionalContext" in json.loads(stdout)["hookSpecificOutput"]
    assert not modules & SLOW_TO_IMPORT, sorted(modules & SLOW_TO_IMPORT)
    assert "riffd.tracker.calls" in modules and "riffd.commands" not in modules

    claude = tmp_path / "claude"
    (claude / "sessions").mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (claude / "sessions" / f"{other.pid}.json").write_text(
            json.dumps(
                {"pid": other.pid, "sessionId": SESSION, "startedAt": int(time.time() * 1000)}
            )
        )
        start = {
            "session_id": SESSION,
            "transcript_path": str(claude / "projects" / "-work" / f"{SESSION}.jsonl"),
            "cwd": "/work",
            "hook_event_name": "SessionStart",
            "source": "resume",
        }
        stdout, modules = imported_by_hook(
            ["hook", "session-start"], json.dumps(start).encode(), CLAUDE_CONFIG_DIR=str(claude)
        )
    finally:
        other.kill()
        other.wait()
    assert f"pid {other.pid}" in json.loads(stdout)["systemMessage"]
    assert not modules & SLOW_TO_IMPORT, sorted(modules & SLOW_TO_IMPORT)
    assert "riffd.claude_code.registry" in modules


def test_lines_read_backwards_are_the_files_lines_whatever_blocks_they_span(
    tmp_path: Path,
) -> None:
    """A line spanning many blocks was joined again at every block (a 64 MB line took the hook 47 s,
    past Claude Code's 10 s): each is now joined once; the read stops at its budget."""
    rng = random.Random(7)
    lines = [
        bytes(rng.choice(b'ab"{}') for _ in range(rng.choice([0, 1, 100, 70_000, 200_000])))
        for _ in range(60)
    ]
    path = tmp_path / "t.jsonl"
    for ending in (b"\n", b""):
        path.write_bytes(b"\n".join(lines) + ending)
        assert list(iter_lines_backwards(str(path))) == [line for line in reversed(lines) if line]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    tail = sum(len(line) + 1 for line in lines[-5:])  # (the 5th from the end: its start unseen)
    assert list(iter_lines_backwards(str(path), budget=tail)) == [
        line for line in reversed(lines[-4:]) if line
    ]


def test_a_huge_last_line_is_read_within_claude_codes_timeout(tmp_path: Path) -> None:
    transcript, fetch, _now = fetched(tmp_path, "A summary.")
    with transcript.open("ab") as handle:
        handle.write(b'{"type":"user","content":"' + b"x" * (64 * 1024 * 1024) + b'"}\n')
    result = run_hook(json.dumps(event(transcript, "WebFetch", fetch)).encode(), timeout=10)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr
    # (a call more than SCAN_BYTES back is not looked for: nothing to say)
    assert result.stdout == b""


def _linked(lines: list[dict[str, Any]], parent: str | None = None) -> list[dict[str, Any]]:
    """The lines chained as the client writes them: each line's parent the one before it."""
    for line in lines:
        line["parentUuid"] = parent
        parent = line["uuid"]
    return lines


@pytest.mark.parametrize("after", ["nothing", "compact", "rewind", "spliced"])
def test_a_call_the_loaded_conversation_no_longer_holds_is_not_said_to_be_in_it(
    tmp_path: Path, after: str
) -> None:
    """After /compact, or a rewind to before the Read, the hook still said its result "is already
    in the conversation" and cache mode served it: the model sees only the summary, or the Read is
    on a branch the client no longer loads."""
    source = tmp_path / "a.py"
    source.write_text(TEXT)
    an_hour_ago = time.time() - 3600
    os.utime(source, (an_hour_ago, an_hour_ago))
    now = time.time()
    prompt = {**tool_result("p", "read it", now - 60), "uuid": "prompt"}
    prompt["message"] = {"role": "user", "content": "read a.py"}
    lines = _linked(
        [
            prompt,
            tool_use("Read", {"file_path": str(source)}, "t1", now - 59),
            tool_result("t1", "     1\timport os\n", now - 58, read_result(source)),
        ]
    )
    later = {**tool_result("q", "", now - 20), "uuid": "later"}
    later["message"] = {"role": "user", "content": "and again"}
    if after == "compact":
        boundary = {**later, "uuid": "boundary", "type": "system", "subtype": "compact_boundary"}
        boundary |= {"parentUuid": None, "logicalParentUuid": lines[-1]["uuid"], "message": None}
        lines += [boundary, {**later, "parentUuid": "boundary"}]
    elif after == "rewind":  # (the new prompt hangs from the Read's parent: its branch is left)
        lines.append({**later, "parentUuid": None})
    elif (
        after == "spliced"
    ):  # (beside the result: the client splices a result hanging from the walk)
        lines.append({**later, "parentUuid": lines[1]["uuid"]})
    else:
        lines.append({**later, "parentUuid": lines[-1]["uuid"]})
    transcript = tmp_path / "s.jsonl"
    write_lines(transcript, lines)
    for mode in ("warn", "cache"):
        result = run_hook(
            json.dumps(event(transcript, "Read", {"file_path": str(source)})).encode(),
            "--mode",
            mode,
        )
        assert result.returncode == 0, result.stderr
        assert (result.stdout != b"") == (after in ("nothing", "spliced")), (mode, result.stdout)


def test_an_mcp_call_alike_but_not_identical_is_not_called_identical(tmp_path: Path) -> None:
    """Page 2 of the same search was "the identical call" whose result to "reuse": the tracker's
    rule for tools it does not know (most arguments, or one naming what it acts on, equal) says
    may, not is."""
    transcript = tmp_path / "s.jsonl"
    now = time.time()
    tool = "mcp__docs__search"
    first = {"query": "hooks", "limit": 10, "offset": 0}
    write_lines(
        transcript,
        [tool_use(tool, first, "m1", now - 20), tool_result("m1", "ten hits", now - 19)],
    )
    for tool_input, said in (
        (first, "repeats the identical call"),
        ({**first, "offset": 10}, "may repeat the call made at"),
    ):
        result = run_hook(json.dumps(event(transcript, tool, tool_input)).encode())
        context = answer(result)["hookSpecificOutput"]["additionalContext"]
        assert said in context, context
    assert "same limit, query and other arguments that differ" in context


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="process start times from /proc")
def test_an_entry_whose_pid_another_process_now_has_is_no_warning(tmp_path: Path) -> None:
    """An entry left by a Claude Code that is gone, its pid given to another program since: the
    hook said the session "is still open in another Claude Code process" (pid N, running since
    its start in 2023)."""
    claude = tmp_path / "claude"
    (claude / "sessions").mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = {"session_id": SESSION, "hook_event_name": "SessionStart", "source": "resume"}
    try:
        for started, warned in ((1_700_000_000_000, False), (int(time.time() * 1000), True)):
            entry = {"pid": other.pid, "sessionId": SESSION, "startedAt": started}
            (claude / "sessions" / f"{other.pid}.json").write_text(json.dumps(entry))
            done = run_riffd(
                "hook",
                "session-start",
                input=json.dumps(start).encode(),
                text=False,
                env={"CLAUDE_CONFIG_DIR": str(claude)},
            )
            assert done.returncode == 0, done.stderr
            assert (f"pid {other.pid}".encode() in done.stdout) == warned, done.stdout
    finally:
        other.kill()
        other.wait()


def test_a_repeat_of_one_of_several_calls_made_at_once_is_found(tmp_path: Path) -> None:
    """A message making two calls at once (2.1.x: a line each, the second's parent the first, each
    result hanging from its own call's line): the walk from the newest line passes the first call's
    line only, and the second call, in the same message, was missed once the hook followed it."""
    now = time.time()
    search, glob = {"query": "hooks"}, {"pattern": "**/*.py"}
    first = tool_use("WebSearch", search, "s1", now - 30)
    second = tool_use("Glob", glob, "g1", now - 30)
    for line in (first, second):
        line["message"]["id"] = "msg_1"
    first["parentUuid"], second["parentUuid"] = None, first["uuid"]
    glob_result = {**tool_result("g1", "a.py", now - 29), "parentUuid": second["uuid"]}
    search_result = {**tool_result("s1", "hits", now - 28), "parentUuid": first["uuid"]}
    following = tool_use("Read", {"file_path": "/work/x"}, "r1", now - 20)
    following["parentUuid"] = search_result["uuid"]
    transcript = tmp_path / "s.jsonl"
    write_lines(transcript, [first, second, glob_result, search_result, following])
    for tool, tool_input, tool_id in (("Glob", glob, "g1"), ("WebSearch", search, "s1")):
        result = run_hook(json.dumps(event(transcript, tool, tool_input)).encode())
        context = answer(result)["hookSpecificOutput"]["additionalContext"]
        assert f"tool_use {tool_id}" in context, context
