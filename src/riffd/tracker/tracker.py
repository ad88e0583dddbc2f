"""The tool-call tracker: which tool calls of a session repeat a recent identical call.

Claude Code's model sometimes reads the same file, runs the same search or fetches the same page
twice within minutes; the second result repeats what the conversation already holds and costs
context. The tracker keeps, per session, the recent tool calls (tool, normalised input, time,
size of the result), at most `max_calls` of them and none older than `window` seconds before the
session's newest call, and records each call that repeats an earlier one (`RedundantCall`).

Times are the `timestamp` of each tool_use line, and the window is measured from the session's
newest call, never from the wall clock, so reading a history again gives the same answers; only
`prune(now)` looks at the clock, to forget sessions that went quiet.

The rules that say when two calls are the same are in riffd.tracker.calls, which the PreToolUse hook
imports alone; this module keeps to the standard library too (`redundant_calls_in` imports orjson
when it is called).
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from riffd.tracker.calls import DEFAULT_WINDOW, CallKey, call_key, parse_time, result_size, similar

DEFAULT_MAX_CALLS = 50  # calls per session; the same default as `tracker.max_calls`
MAX_RECORDS_PER_SESSION = 1000
MAX_RETIRED_SESSIONS = 10_000


class RedundantCall(NamedTuple):
    """A tool call that repeats an earlier identical call of the same session within the window.

    Lines are 1-based line numbers in `path` (the transcript), None when the feeder gave none; times
    are seconds since the epoch; `wasted_bytes` is the size of the repeated result (the earlier
    result's size until the repeat's own result is seen).
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

    def __init__(
        self,
        tool_id: str,
        key: CallKey,
        time: float,
        seq: int,
        line: int | None,
        uuid: str | None,
        path: str | None,
    ) -> None:
        self.tool_id, self.key, self.time, self.seq = tool_id, key, time, seq
        # `path`: the transcript it was read from
        self.line, self.uuid, self.path = (
            line,
            uuid,
            path,
        )
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

    def __init__(
        self,
        window: float = DEFAULT_WINDOW,
        max_calls: int = DEFAULT_MAX_CALLS,
        *,
        keep_all: bool = False,
    ) -> None:
        """Keep at most `max_calls` calls per session, none older than `window` seconds before the
        session's newest call. With `keep_all`, every redundant call found is kept until the tracker
        goes away (for one whole transcript); otherwise a record lives as long as its repeat is
        held."""
        self.window = window
        self.max_calls = max_calls
        self._sessions: dict[str, _Session] = {}
        # Sessions pruned as quiet: their newest time, so reading their history again adds nothing
        # twice.
        self._retired: OrderedDict[str, float] = OrderedDict()
        self._history: dict[str, RedundantCall] | None = {} if keep_all else None
        self._lock = threading.Lock()
        self.calls_seen = 0
        self.redundant_by_tool: Counter[str] = Counter()
        self.redundant_by_session: Counter[str] = Counter()
        self.bytes_by_session: Counter[str] = Counter()

    # --- feeding
    # ---------------------------------------------------------------------------------------

    def feed(
        self,
        session_id: str,
        record: Mapping[str, Any],
        *,
        line: int | None = None,
        path: str | None = None,
    ) -> list[RedundantCall]:
        """Given a parsed user or assistant line of session `session_id` (and optionally its 0-based
        line index in the transcript `path`), learn its tool calls and results; return the redundant
        calls it revealed, and those whose repeat's result it holds (their `wasted_bytes` now that
        result's size). Feeding a tool_use id seen before does nothing, so a file may be fed again
        from its start."""
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

    def _feed_uses(
        self,
        session_id: str,
        record: Mapping[str, Any],
        content: list[Any],
        line: int | None,
        path: str | None,
    ) -> list[RedundantCall]:
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
            call = _Call(
                tool_id,
                key,
                when,
                session.seq,
                None if line is None else line + 1,
                record.get("uuid") if isinstance(record.get("uuid"), str) else None,
                path,
            )
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
        """Return the record when `call` repeats an earlier held call with no change of its file
        between."""
        if not call.key.compared:
            return None
        position = bisect.bisect_left(
            session.calls, (call.time, call.seq), key=lambda held: (held.time, held.seq)
        )
        for earlier in reversed(session.calls[:position]):
            if call.time - earlier.time > self.window:
                break
            if not earlier.failed and similar(earlier.key, call.key):
                record = RedundantCall(
                    session_id,
                    call.key.tool,
                    earlier.tool_id,
                    call.tool_id,
                    earlier.line,
                    call.line,
                    earlier.time,
                    call.time,
                    earlier.result_bytes or 0,
                    call.path,
                    earlier.uuid,
                    call.uuid,
                )
                self._keep(session_id, session, record)
                return record
            if (
                call.key.path is not None
                and earlier.key.mutates
                and earlier.key.path == call.key.path
            ):
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

    # --- upkeep and queries
    # ------------------------------------------------------------------------------

    def prune(self, now: float) -> int:
        """Drop calls older than `window` before `now` (seconds since the epoch) and sessions left
        without calls; return how many calls were dropped."""
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

    def redundant_calls(
        self, session_id: str | None = None, path: str | None = None
    ) -> list[RedundantCall]:
        """Return the redundant calls held (all found, with `keep_all`), optionally only those of
        one session or read from one transcript, oldest repeat first."""
        with self._lock:
            if self._history is not None:
                records: Iterable[RedundantCall] = list(self._history.values())
            else:
                records = [
                    record
                    for session in self._sessions.values()
                    for record in session.records.values()
                ]
        return sorted(
            (
                record
                for record in records
                if (session_id is None or record.session_id.split("/")[0] == session_id)
                and (path is None or record.path == path)
            ),
            key=lambda record: (record.later_time, record.later_line or 0),
        )

    def stats(self, top: int = 5) -> dict[str, Any]:
        """Return the report's figures: calls seen, redundant calls by tool, the sessions with most,
        and the bytes of repeated results, all since the tracker started; plus what it holds now."""
        with self._lock:
            top_sessions = [
                {
                    "session": session_id,
                    "redundant": count,
                    "bytes_wasted": self.bytes_by_session[session_id],
                }
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
    """Yield (0-based line index, parsed record) for each user or assistant line of the transcript
    `path` that holds a tool_use or tool_result block; raise OSError when it cannot be read."""
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


def redundant_calls_in(
    path: str | os.PathLike[str], window: float = DEFAULT_WINDOW, max_calls: int = DEFAULT_MAX_CALLS
) -> list[RedundantCall]:
    """Given a transcript, return every tool call in it that repeats an earlier identical call of
    its session within `window` seconds (lines 1-based); raise OSError when the file cannot be
    read."""
    name = os.fspath(path)
    tracker = ToolCallTracker(window, max_calls, keep_all=True)
    fallback = os.path.basename(name).removesuffix(".jsonl")
    for index, record in iter_message_lines(name):
        session_id = record.get("sessionId")
        tracker.feed(
            session_id if isinstance(session_id, str) else fallback, record, line=index, path=name
        )
    return tracker.redundant_calls()
