"""From what the planner chose (blocks to remove, lines to drop, placeholders to add, parents to
re-point) to the smallest line edits: each touched line rewritten with only the bytes that change,
a line left empty removed and its children re-pointed, placeholder results written as Claude Code
writes a result line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from riffd.repair.line_edit import edited_line
from riffd.repair.plan import (
    Edit,
    InsertLine,
    LineBytes,
    LineSpan,
    RemoveLine,
    RepairOptions,
    ReplaceLine,
)
from riffd.transcript.findings import Finding
from riffd.transcript.index import (
    DANGLING,
    NO_PARENT,
    TranscriptIndex,
)
from riffd.transcript.reader import parse_line

SYNTHETIC_RESULT_TEXT = (
    "[Tool result missing: the tool call never returned a result (interrupted session); "
    "riffd added this placeholder so the session can resume]"
)


def parse_line_object(raw: bytes) -> dict[str, Any]:
    """Given a line's bytes, return its JSON object (orjson, or the standard library for what orjson
    refuses)."""
    obj = parse_line(raw)
    if not isinstance(obj, dict):
        raise ValueError("planner asked to edit a line that does not parse")
    return obj


def line_edits(
    index: TranscriptIndex, work: Choices, fetch: LineBytes, options: RepairOptions
) -> list[Edit]:
    edits: list[Edit] = []
    new_content: dict[int, list[Any]] = {}
    deleted = set(work.remove_lines)

    def source(line: int) -> bytes:
        """The line's bytes as the plan has them before its content and fields change."""
        return work.rewrite.get(line) or fetch(line)

    for line, positions in work.remove_blocks.items():
        if line in deleted:
            continue
        obj = parse_line_object(source(line))
        content = obj["message"]["content"]
        kept = [block for position, block in enumerate(content) if position not in positions]
        if kept:
            new_content[line] = kept
        else:
            deleted.add(line)
    # Lines whose uuid disappears with them: their children need a new parent.
    vanished = {line for line in deleted if index.line_of_uuid.get(index.uuids[line] or "") == line}
    override: dict[int, str] = {}
    synthetic_lines: dict[int, bytes] = {}
    for anchor, tool_ids in work.synthetic_after.items():
        new_uuid = options.new_uuid()
        override[anchor] = new_uuid
        synthetic_lines[anchor] = _synthetic_line(index, anchor, tool_ids, new_uuid, fetch)

    def replacement(line: int) -> str | _Keep | None:
        """The parent uuid a child of `line` should name once `deleted` lines are gone."""
        while line in vanished:
            parent = index.parents[line]
            if parent >= 0:
                line = parent
                continue
            if parent == NO_PARENT:
                return index.external_parent.get(line)
            if parent == DANGLING:
                return index.dangling[line]
            return _KEEP
        return override.get(line) or index.uuids[line]

    repointed = vanished | set(override)
    children = index.children_of(repointed) if repointed else {}
    changes: dict[int, dict[str, Any]] = {}
    for parent_line, kids in children.items():
        target = replacement(parent_line)
        if isinstance(target, _Keep):
            continue
        for kid in kids:
            if kid not in deleted:
                changes.setdefault(kid, {})["parentUuid"] = target
    for line, logical in index.logical_parent.items():
        target_line = index.line_of_uuid.get(logical)
        if target_line in vanished and line not in deleted:
            target = replacement(target_line)
            if not isinstance(target, _Keep):
                changes.setdefault(line, {})["logicalParentUuid"] = target
    for line, leaf in index.summary_leaf.items():
        target_line = index.line_of_uuid.get(leaf)
        if target_line in vanished:
            target = replacement(target_line)
            if isinstance(target, str):
                changes.setdefault(line, {})["leafUuid"] = target

    for line, parent_uuid in work.repoint.items():
        if line not in deleted:
            changes.setdefault(line, {})["parentUuid"] = parent_uuid
    for line in sorted(deleted):
        edits.append(
            RemoveLine(
                span_of(index, line),
                work.reasons.get(line, "nothing left in the line after removing duplicate blocks"),
            )
        )
    for line in sorted((set(new_content) | set(changes) | set(work.rewrite)) - deleted):
        raw = source(line)
        fields = changes.get(line, {})
        content = new_content.get(line)
        reasons = [work.reasons[line]] if line in work.reasons else []
        if content is not None or fields.keys() - {"parentUuid"} or line not in work.repoint:
            reasons.append(_reason(content is not None, fields))
        new_line = edited_line(raw, content, fields) if content is not None or fields else raw
        edits.append(
            ReplaceLine(span_of(index, line), new_line, "; ".join(part for part in reasons if part))
        )
    for anchor, new_line in synthetic_lines.items():
        span = span_of(index, anchor)
        prefix = b"" if _terminated(index, anchor) else b"\n"
        edits.append(
            InsertLine(
                span, prefix + new_line + b"\n", "synthetic result for a tool_use that had none"
            )
        )
    return edits


class _Keep:
    """Marker: leave the child's parent as it is (its parent was already unresolved)."""


_KEEP = _Keep()


def _reason(content_changed: bool, fields: dict[str, Any]) -> str:
    parts = []
    if content_changed:
        parts.append("duplicate or orphan blocks removed")
    if fields:
        parts.append("re-pointed " + ", ".join(sorted(fields)) + " past a removed line")
    return "; ".join(parts)


def span_of(index: TranscriptIndex, line: int) -> LineSpan:
    """Where line `line` of the indexed file is (number, offset, length)."""
    offset, length = index.span(line)
    return LineSpan(line + 1, offset, length)


def _terminated(index: TranscriptIndex, line: int) -> bool:
    return not (line == len(index) - 1 and index.metrics.unterminated_last_line)


def _synthetic_line(
    index: TranscriptIndex, anchor: int, tool_ids: list[str], new_uuid: str, fetch: LineBytes
) -> bytes:
    """A user line answering `tool_ids` with is_error results, shaped like the lines around it."""
    source = parse_line_object(fetch(anchor))
    record: dict[str, Any] = {
        "parentUuid": index.uuids[anchor],
        "isSidechain": source.get("isSidechain", False),
    }
    for name in ("userType", "cwd", "sessionId", "version", "gitBranch", "agentId", "slug"):
        if name in source:
            record[name] = source[name]
    record["type"] = "user"
    record["message"] = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": tool_id,
                "content": SYNTHETIC_RESULT_TEXT,
                "is_error": True,
            }
            for tool_id in tool_ids
        ],
    }
    record["uuid"] = new_uuid
    if "timestamp" in source:
        record["timestamp"] = source["timestamp"]
    record["toolUseResult"] = "Error: " + SYNTHETIC_RESULT_TEXT
    if index.uses_source_tool_field:
        record["sourceToolAssistantUUID"] = index.uuids[anchor]
    return orjson.dumps(record)


@dataclass
class Choices:
    """What the planner chose (blocks to remove, lines to drop, placeholders after tool_use lines, the
    findings fixed, notes), before it becomes line edits."""

    remove_blocks: dict[int, set[int]] = field(default_factory=dict)
    remove_lines: set[int] = field(default_factory=set)
    # tool_use line -> missing ids
    synthetic_after: dict[int, list[str]] = field(default_factory=dict)
    fixes: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the line's new bytes before any content or field change (a split, characters replaced)
    rewrite: dict[int, bytes] = field(default_factory=dict)
    repoint: dict[int, str] = field(default_factory=dict)  # line -> its new parentUuid
    reasons: dict[int, str] = field(default_factory=dict)  # why a line changes, when not pairing
