"""Indexing the content of a message line: its API message, its tool uses and results, its server
tool blocks, and whether it holds only thinking.

The index builder (riffd.transcript.index_builder) hands every user and assistant line whose message is
an object to one `MessageLines`, which fills the index's tool maps and says the line's flags and
API message group.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from riffd.transcript.findings import Finding, FindingClass
from riffd.transcript.index import (
    ASSISTANT,
    BLOCK_BITS,
    MESSAGE,
    SIDECHAIN,
    THINKING_ONLY,
    TranscriptIndex,
    add_value,
)
from riffd.transcript.records import Block, Record

SERVER_TOOL_USES = frozenset({"server_tool_use", "mcp_tool_use"})
THINKING = frozenset({"thinking", "redacted_thinking"})
RESULT_SUFFIX = "_tool_result"  # web_search_tool_result, advisor_tool_result, mcp_tool_result, ...


class MessageLines:
    """Indexes the content of message lines into one TranscriptIndex."""

    def __init__(self, index: TranscriptIndex) -> None:
        self.index = index
        # (line index, tool id) of every tool_use and tool_result block added while this is a list:
        # how incremental detection (riffd.transcript.incremental) learns which ids an append names.
        # None in scans.
        self.tool_log: list[tuple[int, str]] | None = None

    def message_line(self, line: int, record: Record) -> tuple[int, int]:
        """Index a user or assistant line whose message is an object (its group, tool uses,
        results); return its (flags, group). Only messages can be the newest leaf, the one thing the
        sidechain flag decides."""
        message = record.message
        assert message is not None
        flags = (MESSAGE | SIDECHAIN) if record.isSidechain is True else MESSAGE
        group = -1
        content = message.content
        index = self.index
        if record.type == "assistant":
            flags |= ASSISTANT
            message_id = message.id
            if type(message_id) is str:
                group_lines = index.group_lines
                group = index.group_of_message.setdefault(message_id, len(group_lines))
                if group == len(group_lines):
                    group_lines.append([line])
                else:
                    group_lines[group].append(line)
            if type(content) is list:
                tool_uses, tool_log = index.tool_uses, self.tool_log
                other = False  # a block that is neither text, thinking nor a tool_use
                for block in content:
                    if type(block) is not Block:
                        continue
                    kind = block.type
                    if kind == "tool_use":
                        tool_id = block.id
                        if type(tool_id) is str and tool_id and not tool_id.isspace():
                            add_value(tool_uses, tool_id, line)
                            if tool_log is not None:
                                tool_log.append((line, tool_id))
                    elif kind != "text" and kind not in THINKING:
                        other = True
                if other:
                    self._server_blocks(line, content)
                first = content[0] if content else None
                if (
                    type(first) is Block
                    and first.type in THINKING
                    and all(type(block) is Block and block.type in THINKING for block in content)
                ):
                    flags |= THINKING_ONLY
        elif type(content) is list and self._index_results(line, content):
            source = record.sourceToolAssistantUUID
            if type(source) is str:
                index.uses_source_tool_field = True
                if source != record.parentUuid:
                    index.source_tool_line[line] = source
        return flags, group

    def _server_blocks(self, line: int, content: list[Any]) -> None:
        """Index the server tools' use and result blocks of an assistant line (the API pairs them
        inside one assistant message)."""
        index = self.index
        for position, block in enumerate(content):
            kind = block.type if type(block) is Block else None
            if type(kind) is not str:
                continue
            if kind in SERVER_TOOL_USES:
                tool_id = block.id
                if type(tool_id) is str and tool_id:
                    add_value(index.server_uses, tool_id, line << BLOCK_BITS | position)
            elif kind.endswith(RESULT_SUFFIX) and kind != "tool_result":
                result_of = block.tool_use_id
                if type(result_of) is str and result_of:
                    add_value(index.server_results, result_of, line << BLOCK_BITS | position)
                    index.server_result_type[result_of] = kind

    def _index_results(self, line: int, content: list[Any]) -> bool:
        """Record the tool_result blocks of a user line's content; return whether it holds one."""
        found = False
        results = self.index.packed_results
        packed_line = line << BLOCK_BITS
        for position, block in enumerate(content):
            if type(block) is not Block:
                self._invalid_block(
                    line,
                    position,
                    "invalid_type",
                    f"content block is a JSON {type(block).__name__}, not an object",
                )
                continue
            if block.type != "tool_result":
                continue
            tool_id = block.tool_use_id
            if type(tool_id) is str and tool_id and not tool_id.isspace():
                add_value(results, tool_id, packed_line | position)
                self.index.metrics.blocks_valid += 1
                if self.tool_log is not None:
                    self.tool_log.append((line, tool_id))
                found = True
            elif tool_id is UNSET:
                self._invalid_block(line, position, "missing_field", "has no tool_use_id")
            elif type(tool_id) is not str:
                self._invalid_block(
                    line,
                    position,
                    "invalid_type",
                    f"tool_use_id is {type(tool_id).__name__}, not a string",
                )
            else:
                self._invalid_block(line, position, "missing_field", "tool_use_id is empty")
        if found:
            self.index.result_lines.append(line)
        return found

    def _invalid_block(self, line: int, position: int, kind: str, why: str) -> None:
        index = self.index
        index.metrics.blocks_invalid += 1
        failures = index.metrics.failures_by_type
        failures[kind] = failures.get(kind, 0) + 1
        index.line_findings.append(
            Finding(
                FindingClass.INVALID_TOOL_RESULT,
                index.path,
                (line + 1,),
                f"tool_result block {position} {why}; it is kept as it is",
                uuids=(index.uuids[line] or "",),
                offset=index.offsets[line],
                detail=kind,
            )
        )
