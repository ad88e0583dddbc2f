"""The tool-call tracker: which tool calls of a session repeat a recent identical call.

Claude Code's model sometimes reads the same file, runs the same search or fetches the same page
twice within minutes; the second result repeats what the conversation already holds and costs
context. The tracker keeps, per session, the recent tool calls (tool, normalised input, time,
size of the result), at most `max_calls` of them and none older than `window` seconds before the
session's newest call, and records each call that repeats an earlier one (`RedundantCall`).

Times are the `timestamp` of each tool_use line, and the window is measured from the session's
newest call, never from the wall clock, so reading a history again gives the same answers; only
`prune(now)` looks at the clock, to forget sessions that went quiet.

This module is imported by the PreToolUse hook, which must start in a few milliseconds: standard
library only, and no module that is slow to import (dataclasses, hashlib's OpenSSL, orjson, whose import
alone takes about 9 ms); `redundant_calls_in` imports orjson when it is called.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, NamedTuple

try:
    from _blake2 import blake2b  # what hashlib.blake2b is, without loading OpenSSL (3 ms)
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

DEFAULT_WINDOW = 300.0  # seconds; the same default as the `tracker.window` config key (a test checks)
DEFAULT_MAX_CALLS = 50  # calls per session; the same default as `tracker.max_calls`
MAX_RECORDS_PER_SESSION = 1000
MAX_RETIRED_SESSIONS = 10_000


# --- the rules ---------------------------------------------------------------------------------------


class Rule(NamedTuple):
    """How one known tool's calls are compared.

    `fields`: the input properties that must all be equal (None: every property). `path`: the property
    naming the file or folder the call reads or writes (a read after a write of that file is not a
    repeat). `mutates`: the call changes that file. `cacheable`: the hook's cache mode may hand back the
    earlier result instead of running the call again (only when nothing could have changed it).
    """

    fields: tuple[str, ...] | None
    path: str | None = None
    mutates: bool = False
    cacheable: bool = False


# The similarity rules, one line per tool. Grep and Glob compare every property (pattern, path, glob and
# every option); their results depend on files anything may have changed, so they are never served from
# the cache. WebFetch already keeps its own 15-minute cache, so a repeated fetch or search within the window
# is safe to serve again.
RULES: Mapping[str, Rule] = {
    "Read": Rule(("file_path", "offset", "limit", "pages"), path="file_path", cacheable=True),
    "Grep": Rule(None, path="path"),
    "Glob": Rule(None, path="path"),
    "WebFetch": Rule(("url", "prompt"), cacheable=True),
    "WebSearch": Rule(None, cacheable=True),  # the query, and its domain filters when given
    "Write": Rule(("file_path", "content"), path="file_path", mutates=True),
    "Edit": Rule(("file_path", "old_string", "new_string", "replace_all"), path="file_path", mutates=True),
    "MultiEdit": Rule(("file_path", "edits"), path="file_path", mutates=True),
}

# Never compared: shells, agents, task and to-do lists, interactive tools, anything with side effects. Their
# repeats are deliberate (run the tests again, ask again) or their results change by design.
NEVER_CACHED = frozenset({
    "Bash", "BashOutput", "KillBash", "KillShell", "PowerShell",
    "Task", "Agent", "TaskOutput", "TaskStop", "TaskCreate", "TaskGet", "TaskList", "TaskUpdate",
    "TodoWrite", "TodoRead", "AskUserQuestion", "ExitPlanMode", "EnterPlanMode", "NotebookEdit",
    "SlashCommand", "Skill",
})

# Tools that change a file without being compared themselves: a read of that file afterwards is not a repeat.
MUTATES_ONLY: Mapping[str, str] = {"NotebookEdit": "notebook_path"}

# Unknown tools (MCP included): two calls are the same when more than half of their input properties are
# equal, or when one of these identifying properties is.
IDENTIFYING = ("path", "file_path", "url", "query", "id")

# An unknown tool whose name holds one of these words is taken to have side effects (or to be interactive)
# and is never compared: mcp__github__create_issue, mcp__playwright__browser_click, ...
SIDE_EFFECT_WORDS = frozenset({
    "add", "apply", "approve", "ask", "cancel", "click", "close", "comment", "commit", "confirm", "create",
    "delete", "deploy", "drag", "drop", "edit", "eval", "evaluate", "exec", "execute", "fill", "hover",
    "input", "insert", "install", "kill", "merge", "move", "navigate", "open", "patch", "post", "press",
    "prompt", "push", "put", "remove", "rename", "reply", "restart", "run", "select", "send", "set", "start",
    "stop", "submit", "type", "update", "upload", "wait", "write",
})
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def has_side_effects(tool: str) -> bool:
    """Given a tool name, return True when its calls are never compared: a known never-cached tool, or an
    unknown tool whose own name (after an MCP `mcp__server__` prefix) holds a side-effect word."""
    if tool in NEVER_CACHED:
        return True
    if tool in RULES:
        return False
    own_name = tool.rsplit("__", 1)[-1]
    return any(word.lower() in SIDE_EFFECT_WORDS for word in _WORDS.findall(own_name))


# --- normalised calls --------------------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr).encode()


def _digest(value: Any) -> bytes:
    return blake2b(_canonical(value), digest_size=16).digest()


def _normal_path(value: Any, cwd: str | None) -> Any:
    if not isinstance(value, str) or not value:
        return value
    if cwd and not os.path.isabs(value):
        value = os.path.join(cwd, value)
    return os.path.normpath(value)


class CallKey(NamedTuple):
    """What the rules compare of one call: `key` (a digest of the compared input), per-property digests
    for unknown tools, and the file the call reads or writes."""

    tool: str
    key: bytes
    properties: Mapping[str, bytes] | None  # unknown tools only
    path: str | None
    mutates: bool
    compared: bool  # False for a call kept only as a file change (NotebookEdit)
    cacheable: bool


def call_key(tool: str, tool_input: Any, cwd: str | None = None) -> CallKey | None:
    """Given a tool name, its input and the session's working directory, return what the similarity rules
    compare, or None for a call that is never compared and changes no file (Bash, Task, TodoWrite, ...).

    Properties that are null count as absent; Read's `offset` 0 or 1 is the start of the file, as no offset
    is; relative paths are taken from `cwd`, and Grep/Glob without `path` search `cwd`.
    """
    if not isinstance(tool_input, dict):
        tool_input = {}
    given = {name: value for name, value in tool_input.items() if value is not None}
    rule = RULES.get(tool)
    if rule is None and tool in MUTATES_ONLY:
        path = _normal_path(given.get(MUTATES_ONLY[tool]), cwd)
        if not isinstance(path, str):
            return None
        return CallKey(tool, b"", None, path, True, False, False)
    if rule is None and has_side_effects(tool):
        return None
    if rule is None:
        for name in ("path", "file_path"):
            if name in given:
                given[name] = _normal_path(given[name], cwd)
        properties = {name: _digest(value) for name, value in given.items()}
        path = given.get("file_path", given.get("path"))
        return CallKey(tool, _digest(given), properties, path if isinstance(path, str) else None, False, True,
                       False)
    if rule.path is not None:
        if rule.path in given:
            given[rule.path] = _normal_path(given[rule.path], cwd)
        elif tool in ("Grep", "Glob") and cwd:
            given[rule.path] = os.path.normpath(cwd)
    if tool == "Read" and given.get("offset") in (0, 1):
        del given["offset"]
    compared = given if rule.fields is None else {name: given[name] for name in rule.fields if name in given}
    path = given.get(rule.path) if rule.path else None
    return CallKey(tool, _digest(compared), None, path if isinstance(path, str) else None, rule.mutates, True,
                   rule.cacheable)


def similar(earlier: CallKey, later: CallKey) -> bool:
    """Given two calls' keys, return True when the later repeats the earlier under the tool's rule."""
    if earlier.tool != later.tool or not (earlier.compared and later.compared):
        return False
    if earlier.key == later.key:
        return True
    if earlier.properties is None or later.properties is None:
        return False
    first, second = earlier.properties, later.properties
    if any(name in first and first[name] == second.get(name) for name in IDENTIFYING):
        return True
    names = first.keys() | second.keys()
    equal = sum(1 for name in names if name in first and first[name] == second.get(name))
    return 2 * equal > len(names)


def parse_time(text: Any) -> float | None:
    """Given an ISO-8601 `timestamp` field, return it as seconds since the epoch, or None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment.timestamp()


def result_size(content: Any) -> int:
    """Given a tool_result block's `content` (a string or a list of blocks), return its size in bytes."""
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        size = 0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                size += len(part["text"].encode())
            else:
                size += len(_canonical(part))
        return size
    return 0


# --- the tracker -------------------------------------------------------------------------------------


class RedundantCall(NamedTuple):
    """A tool call that repeats an earlier identical call of the same session within the window.

    Lines are 1-based line numbers in `path` (the transcript), None when the feeder gave none; times are
    seconds since the epoch; `wasted_bytes` is the size of the repeated result (the earlier result's size
    until the repeat's own result is seen).
    """

    session_id: str
    tool: str
    earlier_id: str
    later_id: str
    earlier_line: int | None
    later_line: int | None
    earlier_time: float
    later_time: float
    wasted_bytes: int
    path: str | None = None
    earlier_uuid: str | None = None
    later_uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the record as a JSON-ready dict."""
        return self._asdict()


class _Call:
    """One held call: what it was, when, where, and the size of its result once seen."""

    __slots__ = ("failed", "key", "line", "path", "result_bytes", "seq", "time", "tool_id", "uuid")

    def __init__(self, tool_id: str, key: CallKey, time: float, seq: int, line: int | None, uuid: str | None,
                 path: str | None) -> None:
        self.tool_id, self.key, self.time, self.seq = tool_id, key, time, seq
        self.line, self.uuid, self.path = line, uuid, path  # `path`: the transcript it was read from
        self.result_bytes: int | None = None
        self.failed = False


class _Session:
    """One session's held calls (ordered by time, then feed order) and the repeats among them."""

    __slots__ = ("by_id", "calls", "newest", "records", "seq")

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.by_id: dict[str, _Call] = {}
        self.records: dict[str, RedundantCall] = {}  # by the repeat's tool_use id
        self.newest = float("-inf")
        self.seq = 0


class ToolCallTracker:
    """Recent tool calls per session and the calls among them that repeat an earlier one.

    Thread-safe: the daemon's worker feeds it while the scheduler prunes it and the report reads it.
    """

    def __init__(self, window: float = DEFAULT_WINDOW, max_calls: int = DEFAULT_MAX_CALLS, *,
                 keep_all: bool = False) -> None:
        """Keep at most `max_calls` calls per session, none older than `window` seconds before the session's
        newest call. With `keep_all`, every redundant call found is kept until the tracker goes away (for one
        whole transcript); otherwise a record lives as long as its repeat is held."""
        self.window = window
        self.max_calls = max_calls
        self._sessions: dict[str, _Session] = {}
        # Sessions pruned as quiet: their newest time, so reading their history again adds nothing twice.
        self._retired: OrderedDict[str, float] = OrderedDict()
        self._history: dict[str, RedundantCall] | None = {} if keep_all else None
        self._lock = threading.Lock()
        self.calls_seen = 0
        self.redundant_by_tool: Counter[str] = Counter()
        self.redundant_by_session: Counter[str] = Counter()
        self.bytes_by_session: Counter[str] = Counter()

    # --- feeding ---------------------------------------------------------------------------------------

    def feed(self, session_id: str, record: Mapping[str, Any], *, line: int | None = None,
             path: str | None = None) -> list[RedundantCall]:
        """Given a parsed user or assistant line of session `session_id` (and optionally its 0-based line
        index in the transcript `path`), learn its tool calls and results; return the redundant calls it revealed,
        and those whose repeat's result it holds (their `wasted_bytes` now that result's size). Feeding a
        tool_use id seen before does nothing, so a file may be fed again from its start."""
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return []
        kind = record.get("type")
        if record.get("isSidechain") is True:  # a subagent has a context of its own
            session_id = f"{session_id}/{record.get('agentId') or 'sidechain'}"
        with self._lock:
            if kind == "assistant":
                return self._feed_uses(session_id, record, content, line, path)
            if kind == "user":
                return self._feed_results(session_id, content)
        return []

    def _feed_uses(self, session_id: str, record: Mapping[str, Any], content: list[Any], line: int | None,
                   path: str | None) -> list[RedundantCall]:
        found: list[RedundantCall] = []
        cwd = record.get("cwd") if isinstance(record.get("cwd"), str) else None
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            tool_id, tool = block.get("id"), block.get("name")
            if not isinstance(tool_id, str) or not isinstance(tool, str):
                continue
            key = call_key(tool, block.get("input"), cwd)
            if key is None:
                continue
            session = self._sessions.get(session_id)
            when = parse_time(record.get("timestamp"))
            if when is None:
                when = session.newest if session is not None and session.calls else 0.0
            if when <= self._retired.get(session_id, float("-inf")):
                continue  # already seen before the session was pruned as quiet
            if session is None:
                session = self._sessions[session_id] = _Session()
            if tool_id in session.by_id or when < session.newest - self.window:
                continue  # seen already, or too old to matter next to the session's newest call
            self.calls_seen += 1
            session.seq += 1
            call = _Call(tool_id, key, when, session.seq, None if line is None else line + 1,
                         record.get("uuid") if isinstance(record.get("uuid"), str) else None, path)
            record_found = self._compare(session_id, session, call)
            if record_found is not None:
                found.append(record_found)
            bisect.insort(session.calls, call, key=lambda held: (held.time, held.seq))
            session.by_id[tool_id] = call
            if when > session.newest:
                session.newest = when
            self._trim(session, session.newest - self.window)
            while len(session.calls) > self.max_calls:
                self._drop(session, session.calls[0])
        return found

    def _compare(self, session_id: str, session: _Session, call: _Call) -> RedundantCall | None:
        """Return the record when `call` repeats an earlier held call with no change of its file between."""
        if not call.key.compared:
            return None
        position = bisect.bisect_left(session.calls, (call.time, call.seq), key=lambda held: (held.time, held.seq))
        for earlier in reversed(session.calls[:position]):
            if call.time - earlier.time > self.window:
                break
            if not earlier.failed and similar(earlier.key, call.key):
                record = RedundantCall(
                    session_id, call.key.tool, earlier.tool_id, call.tool_id, earlier.line, call.line,
                    earlier.time, call.time, earlier.result_bytes or 0, call.path, earlier.uuid, call.uuid,
                )
                self._keep(session_id, session, record)
                return record
            if call.key.path is not None and earlier.key.mutates and earlier.key.path == call.key.path:
                return None  # the file changed after any older call: using it now is not a repeat
        return None

    def _feed_results(self, session_id: str, content: list[Any]) -> list[RedundantCall]:
        updated: list[RedundantCall] = []
        session = self._sessions.get(session_id)
        if session is None:
            return updated
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            call = session.by_id.get(tool_id) if isinstance(tool_id, str) else None
            if call is None or call.result_bytes is not None:
                continue
            call.result_bytes = result_size(block.get("content"))
            call.failed = block.get("is_error") is True
            record = session.records.get(call.tool_id)
            if record is not None:
                record = _replace_bytes(record, call.result_bytes)
                self._keep(session_id, session, record)
                updated.append(record)
        return updated

    def _keep(self, session_id: str, session: _Session, record: RedundantCall) -> None:
        previous = session.records.get(record.later_id)
        if previous is None:
            self.redundant_by_tool[record.tool] += 1
            self.redundant_by_session[session_id] += 1
            if len(session.records) >= MAX_RECORDS_PER_SESSION:
                del session.records[next(iter(session.records))]
        delta = record.wasted_bytes - (previous.wasted_bytes if previous else 0)
        self.bytes_by_session[session_id] += delta
        session.records[record.later_id] = record
        if self._history is not None:
            self._history[record.later_id] = record

    def _trim(self, session: _Session, oldest: float) -> None:
        while session.calls and session.calls[0].time < oldest:
            self._drop(session, session.calls[0])

    @staticmethod
    def _drop(session: _Session, call: _Call) -> None:
        session.calls.remove(call)
        session.by_id.pop(call.tool_id, None)
        session.records.pop(call.tool_id, None)

    # --- upkeep and queries ------------------------------------------------------------------------------

    def prune(self, now: float) -> int:
        """Drop calls older than `window` before `now` (seconds since the epoch) and sessions left without
        calls; return how many calls were dropped."""
        dropped = 0
        with self._lock:
            for session_id, session in list(self._sessions.items()):
                before = len(session.calls)
                self._trim(session, now - self.window)
                dropped += before - len(session.calls)
                if not session.calls:
                    del self._sessions[session_id]
                    self._retired[session_id] = session.newest
                    self._retired.move_to_end(session_id)
                    while len(self._retired) > MAX_RETIRED_SESSIONS:
                        self._retired.popitem(last=False)
        return dropped

    def redundant_calls(self, session_id: str | None = None, path: str | None = None) -> list[RedundantCall]:
        """Return the redundant calls held (all found, with `keep_all`), optionally only those of one session
        or read from one transcript, oldest repeat first."""
        with self._lock:
            if self._history is not None:
                records: Iterable[RedundantCall] = list(self._history.values())
            else:
                records = [record for session in self._sessions.values() for record in session.records.values()]
        return sorted(
            (record for record in records
             if (session_id is None or record.session_id.split("/")[0] == session_id)
             and (path is None or record.path == path)),
            key=lambda record: (record.later_time, record.later_line or 0),
        )

    def stats(self, top: int = 5) -> dict[str, Any]:
        """Return the report's figures: calls seen, redundant calls by tool, the sessions with most, and the
        bytes of repeated results, all since the tracker started; plus what it holds now."""
        with self._lock:
            top_sessions = [
                {"session": session_id, "redundant": count, "bytes_wasted": self.bytes_by_session[session_id]}
                for session_id, count in self.redundant_by_session.most_common(top)
            ]
            return {
                "window_seconds": self.window,
                "max_calls": self.max_calls,
                "calls_seen": self.calls_seen,
                "redundant": sum(self.redundant_by_tool.values()),
                "by_tool": dict(self.redundant_by_tool.most_common()),
                "top_sessions": top_sessions,
                "bytes_wasted": sum(self.bytes_by_session.values()),
                "sessions_held": len(self._sessions),
                "calls_held": sum(len(session.calls) for session in self._sessions.values()),
            }

    def __len__(self) -> int:
        with self._lock:
            return sum(len(session.calls) for session in self._sessions.values())


def _replace_bytes(record: RedundantCall, wasted_bytes: int) -> RedundantCall:
    return record._replace(wasted_bytes=wasted_bytes)


def iter_message_lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (0-based line index, parsed record) for each user or assistant line of the transcript `path`
    that holds a tool_use or tool_result block; raise OSError when it cannot be read."""
    import orjson  # the whole-file reader wants its speed; the hook never comes here

    with open(path, "rb") as handle:
        for index, raw in enumerate(handle):
            if b'"tool_' not in raw:
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("type") in ("user", "assistant"):
                yield index, record


def redundant_calls_in(path: str | os.PathLike[str], window: float = DEFAULT_WINDOW,
                       max_calls: int = DEFAULT_MAX_CALLS) -> list[RedundantCall]:
    """Given a transcript, return every tool call in it that repeats an earlier identical call of its session
    within `window` seconds (lines 1-based); raise OSError when the file cannot be read."""
    name = os.fspath(path)
    tracker = ToolCallTracker(window, max_calls, keep_all=True)
    fallback = os.path.basename(name).removesuffix(".jsonl")
    for index, record in iter_message_lines(name):
        session_id = record.get("sessionId")
        tracker.feed(session_id if isinstance(session_id, str) else fallback, record, line=index, path=name)
    return tracker.redundant_calls()
