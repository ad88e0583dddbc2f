"""Checks on the API messages of the loaded chain: server tools paired inside one assistant
message, and a chain that ends in a message of thinking only.

Claude Code writes each content block of a response as a line of its own, chained. When it resumes,
the assistant lines of the chain form one API message until a line it sends as a user message (a
user line, or a `local_command` system line such as /usage); progress, attachments and other system
lines are transparent. The API pairs a server tool's use (`server_tool_use`, `mcp_tool_use`) with
its result (`web_search_tool_result`, `advisor_tool_result`, ...) inside one assistant message: a
result whose use is not before it in its message is refused (400 `unexpected tool_use_id found in
advisor_tool_result blocks`, which current clients send again and again), a use without its result
is dropped by current clients and refused by older ones.
"""

from __future__ import annotations

from collections.abc import Iterable

from riffd.transcript.findings import Finding, FindingClass
from riffd.transcript.index import (
    ASSISTANT,
    BLOCK_BITS,
    COMPACT_BOUNDARY,
    LOCAL_COMMAND,
    MESSAGE,
    THINKING_ONLY,
    TranscriptIndex,
    lines_in,
)

_MASK = (1 << BLOCK_BITS) - 1


def chain_from(index: TranscriptIndex, leaf: int | None) -> list[int]:
    """The chain Claude Code walks from `leaf` to its root (across compact boundaries), oldest
    first; the walk stops at a loop."""
    parents, flags = index.parents, index.flags
    chain: list[int] = []
    seen: set[int] = set()
    line = -1 if leaf is None else leaf
    while line >= 0 and line not in seen:
        seen.add(line)
        chain.append(line)
        parent = parents[line]
        if parent < 0 and flags[line] & COMPACT_BOUNDARY:
            logical = index.logical_line(line)
            if logical is not None:
                line = logical
                continue
        line = parent
    chain.reverse()
    return chain


def server_blocks(index: TranscriptIndex) -> dict[int, list[tuple[int, str, bool]]]:
    """Line -> its server tool blocks, (position, tool id, is a use), in block order."""
    by_line: dict[int, list[tuple[int, str, bool]]] = {}
    for mapping, is_use in ((index.server_uses, True), (index.server_results, False)):
        for tool_id, packed in mapping.items():
            for value in lines_in(packed):
                by_line.setdefault(value >> BLOCK_BITS, []).append((value & _MASK, tool_id, is_use))
    for blocks in by_line.values():
        blocks.sort()
    return by_line


def server_tool_findings(index: TranscriptIndex, chain: Iterable[int]) -> list[Finding]:
    """The server tool blocks of the loaded `chain` (oldest first) that are not paired inside
    their API message: a result whose use is not before it, a use whose result never comes."""
    if not index.server_uses and not index.server_results:
        return []
    by_line = server_blocks(index)
    flags = index.flags
    findings: list[Finding] = []
    open_uses: dict[str, int] = {}  # tool id -> line of the use, in the current API message

    def close_message() -> None:
        for tool_id, line in open_uses.items():
            findings.append(_orphan_use(index, line, tool_id))
        open_uses.clear()

    for line in chain:
        line_flags = flags[line]
        if line_flags & COMPACT_BOUNDARY or line_flags & LOCAL_COMMAND:
            close_message()
            continue
        if not line_flags & MESSAGE:
            continue  # progress, attachments, other system lines: transparent
        if not line_flags & ASSISTANT:
            close_message()
            continue
        for _position, tool_id, is_use in by_line.get(line, ()):
            if is_use:
                open_uses[tool_id] = line
            elif open_uses.pop(tool_id, None) is None:
                findings.append(_orphan_result(index, line, tool_id))
    close_message()
    return findings


def _orphan_use(index: TranscriptIndex, line: int, tool_id: str) -> Finding:
    return Finding(
        FindingClass.ORPHAN_SERVER_TOOL_USE,
        index.path,
        (line + 1,),
        f"server tool use {tool_id} has no result in its API message (the write stopped between "
        "the two blocks): current clients drop it when they resume, older ones are refused",
        uuids=(index.uuids[line] or "",),
        tool_id=tool_id,
        api_error=f"tool use with id `{tool_id}` was found without a corresponding result block",
    )


def _orphan_result(index: TranscriptIndex, line: int, tool_id: str) -> Finding:
    kind = index.server_result_type.get(tool_id, "server_tool_result")
    return Finding(
        FindingClass.ORPHAN_SERVER_TOOL_RESULT,
        index.path,
        (line + 1,),
        f"{kind} for {tool_id} has no server_tool_use before it in its API message (compaction "
        "dropped the use, or a line written between them split the message): the API refuses the "
        "resumed session",
        uuids=(index.uuids[line] or "",),
        tool_id=tool_id,
        api_error=f"unexpected `tool_use_id` found in `{kind}` blocks: {tool_id}",
    )


def thinking_tail_finding(index: TranscriptIndex, leaf: int | None) -> Finding | None:
    """The finding of a chain that ends in an assistant message of thinking only (the process
    stopped after writing its thinking), None when it does not."""
    if leaf is None or not index.flags[leaf] & THINKING_ONLY:
        return None
    group = index.groups[leaf]
    lines = index.group_lines[group] if group >= 0 else [leaf]
    if not all(index.flags[line] & THINKING_ONLY for line in lines):
        return None
    return Finding(
        FindingClass.THINKING_ONLY_TAIL,
        index.path,
        tuple(line + 1 for line in lines),
        "the conversation ends in an assistant message that holds only thinking (the answer was "
        "never written): current clients drop it when they resume, older ones send it",
        uuids=tuple(index.uuids[line] or "" for line in lines),
    )


def message_findings(
    index: TranscriptIndex, chain: Iterable[int], leaf: int | None
) -> list[Finding]:
    """The findings of the API messages of the loaded `chain` (oldest first) ending at `leaf`."""
    findings = server_tool_findings(index, chain)
    tail = thinking_tail_finding(index, leaf)
    return [*findings, tail] if tail is not None else findings
