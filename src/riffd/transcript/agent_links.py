"""What links a subagent run to the tool call that started it, read from a transcript's raw bytes.

A session's Task (or Agent) tool calls (`input.subagent_type`, `input.prompt`), its
`agent_progress` lines (`data.agentId`, `parentToolUseID`) and the `toolUseResult.agentId` of a
Task's result line name an agent's call (see riffd.transcript.sidechains). Only the few lines that
can hold a link are parsed: one pass over the raw bytes finds the lines that mention
`"subagent_type"` or `"agentId"`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from riffd.fsio import RetryingFS
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.reader import iter_raw, parse_line

LINK_NEEDLES = re.compile(rb'"subagent_type"|"agentId"')
AGENT_ID_FIELD = re.compile(rb'"agentId"\s*:\s*"([^"\\]+)"')


@dataclass(frozen=True)
class TaskCall:
    """A tool call that starts a subagent (its input has `subagent_type`): where it is and what it
    asked."""

    tool_id: str
    path: str
    line: int
    subagent_type: str | None
    prompt: str | None


@dataclass
class Links:
    """The links read from a session and its agent files, and the calls already given to a
    sidechain."""

    tasks: dict[str, TaskCall] = field(default_factory=dict)  # tool id -> the call
    # agent id -> (tool id, how it was found: "progress" or "tool_result")
    agent_tool: dict[str, tuple[str, str]] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)  # tool ids already given to a sidechain


def scan_links(index: TranscriptIndex, links: Links, *, fs: RetryingFS) -> None:
    """One pass over the raw bytes of an indexed file: parse only the lines that mention a link
    field."""
    offsets, path = index.offsets, index.path
    base = index.start
    carry = b""

    def visit(buffer: bytes, buffer_start: int, stop: int) -> None:
        position = 0
        while True:
            match = LINK_NEEDLES.search(buffer, position, stop)
            if match is None:
                return
            line_start = buffer.rfind(b"\n", 0, match.start()) + 1
            line_end = buffer.find(b"\n", match.end(), stop)
            line_end = stop if line_end < 0 else line_end
            position = line_end + 1
            line = bisect_right(offsets, buffer_start + line_start) - 1
            if line >= 0 and offsets[line] == buffer_start + line_start:
                _read_link_line(buffer[line_start:line_end], path, line, links)

    for chunk in iter_raw(path, fs=fs, start=index.start):
        buffer = carry + chunk if carry else chunk
        buffer_start = base - len(carry)
        base += len(chunk)
        complete = min(buffer.rfind(b"\n") + 1, max(index.end - buffer_start, 0))
        visit(buffer, buffer_start, complete)
        if base >= index.end:
            return  # lines appended after the index was built are not in it
        carry = buffer[complete:]
    if carry:
        visit(carry, base - len(carry), min(len(carry), max(index.end - (base - len(carry)), 0)))


def _read_link_line(raw: bytes, path: str, line: int, links: Links) -> None:
    if (
        b'"subagent_type"' not in raw
        and b'"agent_progress"' not in raw
        and b'"toolUseResult"' not in raw
    ):
        return  # an agent's own lines all carry its agentId: only these three kinds of line can link
    if b'"agent_progress"' in raw:
        # A session writes one progress line per subagent message: parse only until its agent is
        # linked.
        named = AGENT_ID_FIELD.findall(raw)
        if named and all(
            agent_id.decode("utf-8", "replace") in links.agent_tool for agent_id in named
        ):
            return
    record = parse_line(raw)
    if not isinstance(record, dict):
        return
    kind = record.get("type")
    if kind == "progress":
        data = record.get("data")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            agent_id, tool_id = data.get("agentId"), record.get("parentToolUseID")
            if isinstance(agent_id, str) and isinstance(tool_id, str):
                links.agent_tool.setdefault(agent_id, (tool_id, "progress"))
        return
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return
    if kind == "assistant":
        for block in content:
            if (
                not isinstance(block, dict)
                or block.get("type") != "tool_use"
                or not isinstance(block.get("id"), str)
            ):
                continue
            tool_input = block.get("input")
            if isinstance(tool_input, dict) and "subagent_type" in tool_input:
                subagent_type, prompt = tool_input.get("subagent_type"), tool_input.get("prompt")
                links.tasks.setdefault(
                    block["id"],
                    TaskCall(
                        block["id"],
                        path,
                        line,
                        subagent_type if isinstance(subagent_type, str) else None,
                        prompt.strip() if isinstance(prompt, str) else None,
                    ),
                )
    elif kind == "user":
        result = record.get("toolUseResult")
        agent_id = result.get("agentId") if isinstance(result, dict) else None
        answered = [
            block.get("tool_use_id")
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        if isinstance(agent_id, str) and len(answered) == 1 and isinstance(answered[0], str):
            links.agent_tool.setdefault(agent_id, (answered[0], "tool_result"))
