"""`riffd hook pre-tool-use`: a Claude Code PreToolUse hook that notices a tool call repeating a
recent one.

Claude Code runs the hook before each tool call, with the call as JSON on stdin (`session_id`,
`transcript_path`, `cwd`, `hook_event_name`, `tool_name`, `tool_input`, `tool_use_id`), and reads
the hook's answer from stdout when it exits 0 (https://code.claude.com/docs/en/hooks, "PreToolUse"
and "JSON output"). The hook reads the session's own transcript backwards from its end, only as far
as the window reaches, looking for the same call under the tracker's rules (riffd.tracker.calls).

- No earlier call, or a tool the rules never compare: no output; the call runs as usual.
- `--mode warn` (the default): `hookSpecificOutput.additionalContext` tells the model the call
  repeats the one made at HH:MM:SS; no `permissionDecision`, so permissions work as usual.
- `--mode cache`: when nothing could have changed the earlier result (a cacheable tool; for Read
  the file is unchanged since that read), `permissionDecision: "deny"` stops the call and its
  `permissionDecisionReason`, which Claude Code shows to the model, holds the earlier result
  marked `[Cached result from HH:MM:SS]`. Otherwise it warns.

Every failure lets the call run: exit 0 with nothing on stdout, at most one line on stderr. Only the
standard library, riffd.quickjson and riffd.tracker.calls are imported, and none of the modules that
are slow to import (`json`, `re`, `typing`, `datetime`; orjson's import alone takes 9 ms, and the few
lines in the window parse as fast with CPython's own `_json`): the hook runs inside every tool call
(`tests/unit/hooks` holds its imports to that).
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
import time

from riffd.hooks.answer import answered
from riffd.quickjson import dumps, loads
from riffd.tracker.calls import DEFAULT_WINDOW, CallKey, call_key, parse_time, similar

TYPE_CHECKING = False
if TYPE_CHECKING:
    import io
    from collections.abc import Iterator, Sequence
    from typing import Any

EVENT = "PreToolUse"
MODES = ("warn", "cache")
BLOCK_BYTES = 64 * 1024
# How much of a transcript's end the hook reads at most: Claude Code waits for it before every call
# (a 64 MB line, a result's image, took 47 s to split before), and a call further back is not found
SCAN_BYTES = 16 * 1024 * 1024
CACHE_MAX_CHARS = 9_000  # Claude Code caps hook text given to the model at 10,000 characters
# coarse file-system clocks: a change this close to the read may predate it on paper
MTIME_SLACK_SECONDS = 2.0
EXIT_OK = 0
EXIT_USAGE = 1  # a non-blocking error for Claude Code: it shows the message and runs the call
USAGE = "usage: riffd hook pre-tool-use [--mode warn|cache] [--window SECONDS]"


class Earlier:
    """The earlier call found in the transcript that this one repeats, with its result: its
    `tool_id`, the `time` of its tool_use line and the `result_time` of its tool_result line, the
    tool_result block (`result`), the result line's `toolUseResult` (`tool_use_result`), and
    `same`: None when the two calls are identical, else the arguments they share (an MCP call
    judged a repeat by the tracker's rule: most of its arguments, or one that names what it acts
    on)."""

    __slots__ = ("result", "result_time", "same", "time", "tool_id", "tool_use_result")

    def __init__(
        self,
        tool_id: str,
        time: float,
        result_time: float | None,
        result: dict[str, Any],
        tool_use_result: Any,
        same: tuple[str, ...] | None = None,
    ) -> None:
        self.tool_id, self.time, self.result_time = tool_id, time, result_time
        self.result, self.tool_use_result, self.same = result, tool_use_result, same


class UsageError(Exception):
    """Bad hook arguments."""


def parse_args(argv: Sequence[str]) -> tuple[str, float]:
    """Given the arguments after `riffd hook`, return (mode, window seconds); raise UsageError."""
    args = list(argv)
    if args[:1] != ["pre-tool-use"]:
        raise UsageError(f"expected the hook event `pre-tool-use`; {USAGE}")
    mode, window = "warn", DEFAULT_WINDOW
    rest = iter(args[1:])
    for arg in rest:
        name, _, value = arg.partition("=")
        if name not in ("--mode", "--window"):
            raise UsageError(f"unknown argument {arg!r}; {USAGE}")
        if not value:
            value = next(rest, "")
        if name == "--mode":
            if value not in MODES:
                raise UsageError(f"--mode must be warn or cache, not {value!r}")
            mode = value
        else:
            try:
                window = float(value)
            except ValueError:
                raise UsageError(f"--window must be a number of seconds, not {value!r}") from None
            if not (window > 0 and math.isfinite(window)):
                raise UsageError(
                    f"--window must be a finite number of seconds, more than 0, not {value!r}"
                )
    return mode, window


def main(argv: Sequence[str]) -> int:
    """Run `riffd hook ARGS` as Claude Code calls it: the hook event's JSON on stdin, the answer on
    stdout."""
    try:
        mode, window = parse_args(argv)
    except UsageError as exc:
        print(f"riffd hook: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run(mode, window, getattr(sys.stdin, "buffer", None), sys.stdout)


def run(mode: str, window: float, stdin: Any, stdout: Any) -> int:
    """Read one hook event from `stdin` (binary), write the answer (if any) to `stdout` (text);
    return 0."""
    try:
        # (started with standard input closed: no event)
        answer = answer_event(stdin.read() if stdin is not None else b"", mode, window)
    except FileNotFoundError:
        return EXIT_OK  # a new session has no transcript yet
    # any failure lets the call run: it must never block the user's session
    except Exception as exc:
        print(f"riffd hook: {type(exc).__name__}: {exc}; the call runs as usual", file=sys.stderr)
        return EXIT_OK
    if answer is not None:
        # (ASCII: a lone surrogate, from a cut emoji in a result, is written as its escape)
        answered(stdout, dumps(answer), "the call runs as usual")
    return EXIT_OK


def answer_event(
    data: bytes, mode: str, window: float, now: float | None = None
) -> dict[str, Any] | None:
    """Given the hook event's JSON, the mode and the window, return the JSON answer, or None to let
    the call run without a word. Raise ValueError for an event that is not a JSON object, OSError
    for I/O errors."""
    event = loads(data)
    if not isinstance(event, dict):
        raise ValueError("the hook event is not a JSON object")
    if event.get("hook_event_name", EVENT) != EVENT:
        return None
    tool, transcript = event.get("tool_name"), event.get("transcript_path")
    if not isinstance(tool, str) or not isinstance(transcript, str):
        return None
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
    key = call_key(tool, event.get("tool_input"), cwd)
    if key is None or not key.compared:
        return None
    now = time.time() if now is None else now
    current = event.get("tool_use_id") if isinstance(event.get("tool_use_id"), str) else None
    agent = event.get("agent_id") if isinstance(event.get("agent_id"), str) else None
    earlier = find_earlier(os.path.expanduser(transcript), key, now - window, current, agent)
    if earlier is None:
        return None
    when = time.strftime("%H:%M:%S", time.localtime(earlier.result_time or earlier.time))
    if mode == "cache" and key.cacheable and earlier.same is None:
        cached = cached_text(key, earlier)
        if cached is not None:
            return {
                "hookSpecificOutput": {
                    "hookEventName": EVENT,
                    "permissionDecision": "deny",
                    "permissionDecisionReason": (
                        f"[Cached result from {when}] riffd did not run this {tool} call again: it repeats the identical "
                        f"call {earlier.tool_id}, and nothing has changed since. Its result:\n{cached}"
                    ),
                }
            }
    made = time.strftime("%H:%M:%S", time.localtime(earlier.time))
    ago = f"{now - earlier.time:.0f} s ago, tool_use {earlier.tool_id}"
    said = (
        f"riffd: this {tool} call repeats the identical call made at {made} ({ago}); its result is "
        "already in the conversation. Reuse it unless something may have changed since."
        if earlier.same is None
        else f"riffd: this {tool} call may repeat the call made at {made} ({ago}), which had the "
        f"same {', '.join(earlier.same) or 'arguments in part'} and other arguments that differ; if "
        "it asks for the same thing, that result is already in the conversation."
    )
    return {"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": said}}


def open_regular(path: str) -> io.BufferedReader:
    """Open `path` for reading (binary) if it is a regular file; raise OSError if it is anything
    else. A FIFO, a device or a folder named as the transcript would block the hook, or never end:
    opened without blocking, looked at, then closed (FileNotFoundError for a path that does not
    exist)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file, so not a transcript", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_lines_backwards(path: str, budget: int = SCAN_BYTES) -> Iterator[bytes]:
    """Yield the lines of `path` (a regular file: see open_regular), newest first, reading blocks
    from its end (a line may be unfinished), until `budget` bytes were read: a line is joined once,
    when its start is found, however many blocks it spans."""
    with open_regular(path) as handle:
        end = handle.seek(0, os.SEEK_END)
        parts: list[bytes] = []  # the newest line not yet whole: its blocks, the last read last
        while end > 0 and budget > 0:
            start = max(0, end - min(BLOCK_BYTES, budget))
            handle.seek(start)
            block = handle.read(end - start)
            end, budget = start, budget - len(block)
            lines = block.split(b"\n")
            if len(lines) == 1:
                parts.append(block)
                continue
            newest = lines[-1] + b"".join(reversed(parts))
            if newest:
                yield newest
            for raw in reversed(lines[1:-1]):
                if raw:
                    yield raw
            parts = [lines[0]]
        if end == 0 and (first := b"".join(reversed(parts))):
            yield first  # (a line cut by the budget is not one)


def _line_time(raw: bytes) -> float | None:
    """The `timestamp` of a raw line, read without parsing the line."""
    at = raw.find(b'"timestamp":')
    if at < 0:
        return None
    # Claude Code writes no space after the colon; others may
    start = raw.find(b'"', at + 12, at + 16) + 1
    stop = raw.find(b'"', start, start + 40) if start > 0 else -1
    return parse_time(raw[start:stop].decode("ascii", "replace")) if stop > 0 else None


def find_earlier(
    transcript: str, key: CallKey, cutoff: float, current: str | None, agent: str | None
) -> Earlier | None:
    """Return the newest call in `transcript` made after `cutoff` (seconds since the epoch) that
    `key` repeats, has a result that is not an error, is in the conversation Claude Code loads,
    and whose file (if any) was not written or edited since; else None.

    Lines are read newest first and the scan stops at the first line older than `cutoff`. Only lines
    of the main conversation count, or of the subagent `agent` when the call is a subagent's. The
    conversation is followed as Claude Code loads it (riffd.transcript.loaded): the `parentUuid`
    walk from the newest line, the other lines of each API message on it (the calls a message makes
    at once, each on a line of its own), the results hanging from them; a call on a branch a rewind
    left, or before a compact boundary on the walk, is not in it. A write on any branch counts as a
    change (it happened on disk)."""
    lines = _recent_lines(transcript, cutoff, agent)
    loaded, results_loaded, end = _loaded(lines)
    results: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {}
    changed: set[str] = set()
    for number, (record, when) in enumerate(lines[:end]):
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        if record.get("type") == "user":
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tool_id = block.get("tool_use_id")
                    if isinstance(tool_id, str):
                        results.setdefault(tool_id, (block, record, number in results_loaded))
            continue
        found = _call_of(
            content, record, key, current, number in loaded, results, changed, when or cutoff
        )
        if found is not None:
            return found
    return None


def _recent_lines(
    transcript: str, cutoff: float, agent: str | None
) -> list[tuple[dict[str, Any], float | None]]:
    """The lines of the conversation (those with a `uuid`) of context `agent` since `cutoff`,
    parsed, newest first, each with its time."""
    lines: list[tuple[dict[str, Any], float | None]] = []
    for raw in iter_lines_backwards(transcript):
        when = _line_time(raw)
        if when is not None and when < cutoff:
            break
        if b'"uuid"' not in raw:
            continue  # (not a line of the conversation: a summary, a snapshot)
        try:
            record = loads(raw)
        except ValueError:  # an unfinished last line, or one that is not JSON
            continue
        if not isinstance(record, dict) or not isinstance(record.get("uuid"), str):
            continue
        when = parse_time(record.get("timestamp"))  # the line's own, not one nested in its content
        if when is not None and when < cutoff:
            break
        if (record.get("agentId") if record.get("isSidechain") is True else None) != agent:
            continue  # another context: a subagent's, or the main conversation's when this is a subagent
        lines.append((record, when))
    return lines


def _loaded(lines: list[tuple[dict[str, Any], float | None]]) -> tuple[set[int], set[int], int]:
    """Of `lines` (newest first): those in the conversation Claude Code loads, the tool results
    among them (on the walk, or hanging from a loaded line), and how many lines are newer than a
    compact boundary on the walk (all when none is). Lines that name no parent: all are loaded."""
    if any("parentUuid" not in record for record, _when in lines):
        everything = set(range(len(lines)))
        return everything, everything, len(lines)
    where: dict[str, int] = {}
    for number, (record, _when) in enumerate(lines):
        where.setdefault(record["uuid"], number)  # (a line written twice: its newest)
    walk: set[int] = set()
    end = len(lines)
    at: int | None = 0 if lines else None
    while at is not None and at not in walk:
        record = lines[at][0]
        if record.get("subtype") == "compact_boundary" or "logicalParentUuid" in record:
            end = at  # (what came before is summarised, not in the conversation)
            break
        walk.add(at)
        parent = record.get("parentUuid")
        at = where.get(parent) if isinstance(parent, str) else None
    messages = {
        message["id"]
        for number in walk
        if isinstance(message := lines[number][0].get("message"), dict)
        and isinstance(message.get("id"), str)
    }
    loaded = walk | {
        number
        for number, (record, _when) in enumerate(lines[:end])
        if isinstance(message := record.get("message"), dict) and message.get("id") in messages
    }
    uuids = {lines[number][0]["uuid"] for number in loaded}
    hanging = {
        number
        for number, (record, _when) in enumerate(lines[:end])
        if record.get("parentUuid") in uuids
    }
    return loaded, (walk | hanging), end


def _call_of(
    content: list[Any],
    record: dict[str, Any],
    key: CallKey,
    current: str | None,
    loaded: bool,
    results: dict[str, tuple[dict[str, Any], dict[str, Any], bool]],
    changed: set[str],
    when: float,
) -> Earlier | None:
    """The earlier call `key` repeats among an assistant line's tool_use blocks, when the line is
    in the conversation (`loaded`) and so is its result (`results`: each with whether it is); the
    files the line's calls write are noted in `changed`."""
    cwd = record.get("cwd") if isinstance(record.get("cwd"), str) else None
    for block in reversed(content):
        if (
            not isinstance(block, dict)
            or block.get("type") != "tool_use"
            or block.get("id") == current
        ):
            continue
        name = block.get("name")
        other = call_key(name, block.get("input"), cwd) if isinstance(name, str) else None
        if other is None:
            continue
        tool_id = block.get("id")
        paired = results.get(tool_id) if isinstance(tool_id, str) else None
        if (
            loaded
            and paired is not None
            and paired[2]
            and paired[0].get("is_error") is not True
            and similar(other, key)
            and (key.path is None or key.path not in changed)
        ):
            shared = None
            if other.key != key.key:  # (alike by the rule, not identical)
                first, second = other.properties or {}, key.properties or {}
                shared = tuple(sorted(name for name in first if first[name] == second.get(name)))
            return Earlier(
                str(tool_id),
                when,
                _line_time_of(paired[1]),
                paired[0],
                paired[1].get("toolUseResult"),
                shared,
            )
        if other.mutates and other.path is not None:
            changed.add(other.path)
    return None


def _line_time_of(record: dict[str, Any]) -> float | None:
    return parse_time(record.get("timestamp"))


def cached_text(key: CallKey, earlier: Earlier) -> str | None:
    """Return the earlier result's text when it may stand in for running the call again, else None:
    text only, short enough for the model's hook channel, and for Read only when the file is
    unchanged since that read (last modified before the read began, and of the size that read
    saw)."""
    content = earlier.result.get("content")
    if isinstance(content, list):
        if not all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        ):
            return None  # images and documents cannot travel in a text reason
        content = "\n".join(part["text"] for part in content)
    if not isinstance(content, str) or len(content) > CACHE_MAX_CHARS:
        return None
    if key.tool == "Read" and not _file_unchanged(key.path, earlier):
        return None
    return content


def _file_unchanged(path: str | None, earlier: Earlier) -> bool:
    """Whether the file an earlier Read read is, by its size and mtime, still what that read saw.

    Claude Code does not record the file's mtime, so the read's own time stands in for it: a file
    last modified before the read began has not changed since. Its size then must match the content
    the read returned, which `toolUseResult.file` holds when the read covered the whole file;
    otherwise it is unknown and the call is not served from the cache.
    """
    seen = earlier.tool_use_result
    file_seen = seen.get("file") if isinstance(seen, dict) else None
    if path is None or not isinstance(file_seen, dict) or seen.get("type") != "text":
        return False
    text, first, count, total = (
        file_seen.get(name) for name in ("content", "startLine", "numLines", "totalLines")
    )
    if not isinstance(text, str) or first != 1 or not isinstance(count, int) or count != total:
        return False
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode) or status.st_mtime >= earlier.time - MTIME_SLACK_SECONDS:
        return False
    size = len(text.encode())
    if status.st_size == size:
        return True
    if status.st_size == size + 1:  # the read's text may leave out the final newline
        with open_regular(path) as handle:
            handle.seek(size)
            return handle.read(1) == b"\n"
    return False
