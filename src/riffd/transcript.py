"""A compact index of one transcript: the tree of lines, API messages, tool uses and results.

The index keeps small per-line metadata in arrays (about 150 bytes a line with the uuid map),
never line contents, so a 1 GB transcript indexes in bounded memory. Lines are fed in file order
(`add`), then `finish` resolves what needs the whole file. Detection works on the finished index.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from riffd.findings import Finding, FindingClass
from riffd.reader import Unparsed

# Line kinds.
BLANK = 0
MALFORMED = 1
NODE = 2  # has a uuid: part of the parent tree
SUMMARY = 3
OTHER = 4  # metadata, bookkeeping and unknown record types: kept, not in the tree

# Line flags.
SIDECHAIN = 1
COMPACT_BOUNDARY = 2
HAS_RESULTS = 4
HAS_TOOL_USE = 8
MESSAGE = 16  # a user or assistant line: a candidate for the newest leaf
ASSISTANT = 64

# parents[] sentinels (>= 0 is the parent's line index).
NO_PARENT = -1
DANGLING = -2
UNRESOLVED = -3

# Texts Claude Code writes into the placeholder results it makes up (interrupt, cancel, resume).
SYNTHETIC_TEXT = re.compile(r"interrupted|cancel+ed|missing|no result|rejected", re.IGNORECASE)


@dataclass(frozen=True)
class ResultBlock:
    """One tool_result block: which line, which block of its content list, and whether it is a placeholder."""

    line: int  # line index (0-based)
    block: int
    synthetic: bool


@dataclass
class FileMetrics:
    """Counts a scan reports for one file."""

    lines: int = 0
    bytes: int = 0
    blank_lines: int = 0
    malformed_lines: int = 0
    unterminated_last_line: bool = False
    blocks_processed: int = 0
    blocks_valid: int = 0
    blocks_invalid: int = 0
    duplicates_detected: int = 0
    unique_tool_use_ids: int = 0
    loaded_lines: int = 0
    failures_by_type: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the metrics as a JSON-ready dict."""
        return dict(self.__dict__)


def _result_is_synthetic(block: dict[str, Any], line: dict[str, Any]) -> bool:
    if "toolDenialKind" in line:
        return True
    if block.get("is_error") is not True:
        return False
    content = block.get("content")
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        content = " ".join(text for text in texts if isinstance(text, str))
    return isinstance(content, str) and SYNTHETIC_TEXT.search(content[:300]) is not None


class TranscriptIndex:
    """Per-line metadata of one transcript and the maps detection and repair planning need."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offsets = array("q")
        self.lengths = array("q")
        self.kinds = bytearray()
        self.flags = bytearray()
        self.parents = array("q")
        self.groups = array("q")
        self.uuids: list[str | None] = []
        self.line_of_uuid: dict[str, int] = {}
        self.duplicate_uuid_lines: list[tuple[int, int]] = []  # (first, repeat)
        self.dangling: dict[int, str] = {}
        self.external_parent: dict[int, str] = {}  # parents that live in the parent session's file
        self.logical_parent: dict[int, str] = {}
        self.summary_leaf: dict[int, str] = {}  # summary line -> the line it titles
        self.source_tool_line: dict[int, str] = {}  # sourceToolAssistantUUID where it differs from parentUuid
        self.group_of_message: dict[str, int] = {}
        self.group_lines: list[list[int]] = []
        self.tool_uses: dict[str, list[int]] = {}
        self.results: dict[str, list[ResultBlock]] = {}
        self.result_lines: list[int] = []
        self.result_children: dict[int, list[int]] = {}
        self.line_findings: list[Finding] = []
        self.metrics = FileMetrics()
        self.session_id: str | None = None
        self.uses_source_tool_field = False
        self._pending: dict[str, list[int]] = {}
        self._finished = False

    def __len__(self) -> int:
        return len(self.offsets)

    def number(self, line: int) -> int:
        """Given a 0-based line index, return its 1-based line number."""
        return line + 1

    # --- building -------------------------------------------------------------------------------

    def add(self, offset: int, raw: bytes, terminated: bool, obj: dict[str, Any] | Unparsed | None) -> None:
        """Record the next line in file order: its place, its raw bytes' length, its parsed value."""
        index = len(self.offsets)
        self.offsets.append(offset)
        self.lengths.append(len(raw) + terminated)
        self.metrics.bytes += len(raw) + terminated
        if not terminated:
            self.metrics.unterminated_last_line = True
        self.parents.append(NO_PARENT)
        self.groups.append(-1)
        self.uuids.append(None)
        if obj is None:
            self.kinds.append(BLANK)
            self.flags.append(0)
            self.metrics.blank_lines += 1
            return
        if isinstance(obj, Unparsed):
            self.kinds.append(MALFORMED)
            self.flags.append(0)
            self._malformed(index, offset, obj.reason, terminated)
            return
        uuid = obj.get("uuid")
        if not isinstance(uuid, str):
            if obj.get("type") == "summary":
                self.kinds.append(SUMMARY)
                leaf = obj.get("leafUuid")
                if isinstance(leaf, str):
                    self.summary_leaf[index] = leaf
            else:
                self.kinds.append(OTHER)
            self.flags.append(0)
            return
        self.kinds.append(NODE)
        self.uuids[index] = uuid
        line_type = obj.get("type")
        flags = 0
        if obj.get("isSidechain") is True:
            flags |= SIDECHAIN
        if self.session_id is None and isinstance(obj.get("sessionId"), str):
            self.session_id = obj["sessionId"]
        self._link(index, uuid, obj.get("parentUuid"))
        if line_type == "system" and obj.get("subtype") == "compact_boundary":
            flags |= COMPACT_BOUNDARY
            logical = obj.get("logicalParentUuid")
            if isinstance(logical, str):
                self.logical_parent[index] = logical
        message = obj.get("message")
        if line_type in ("user", "assistant") and isinstance(message, dict):
            flags |= MESSAGE
            content = message.get("content")
            if line_type == "assistant":
                flags |= ASSISTANT
                message_id = message.get("id")
                if isinstance(message_id, str):
                    self._group(index, message_id)
                if isinstance(content, list) and self._index_tool_uses(index, content):
                    flags |= HAS_TOOL_USE
            elif isinstance(content, list) and self._index_results(index, content, obj):
                flags |= HAS_RESULTS
                source = obj.get("sourceToolAssistantUUID")
                if isinstance(source, str):
                    self.uses_source_tool_field = True
                    if source != obj.get("parentUuid"):
                        self.source_tool_line[index] = source
        self.flags.append(flags)

    def _link(self, index: int, uuid: str, parent: object) -> None:
        first = self.line_of_uuid.get(uuid)
        if first is None:
            self.line_of_uuid[uuid] = index
            for child in self._pending.pop(uuid, ()):
                self.parents[child] = index
        else:
            self.duplicate_uuid_lines.append((first, index))
        if isinstance(parent, str):
            parent_line = self.line_of_uuid.get(parent)
            if parent_line is None:
                self.parents[index] = UNRESOLVED
                self._pending.setdefault(parent, []).append(index)
            else:
                self.parents[index] = parent_line

    def _group(self, index: int, message_id: str) -> None:
        group = self.group_of_message.get(message_id)
        if group is None:
            group = len(self.group_lines)
            self.group_of_message[message_id] = group
            self.group_lines.append([index])
        else:
            self.group_lines[group].append(index)
        self.groups[index] = group

    def _index_tool_uses(self, index: int, content: list[Any]) -> bool:
        found = False
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                tool_id = block.get("id")
                if isinstance(tool_id, str) and tool_id.strip():
                    self.tool_uses.setdefault(tool_id, []).append(index)
                    found = True
        return found

    def _index_results(self, index: int, content: list[Any], line: dict[str, Any]) -> bool:
        found = False
        metrics = self.metrics
        for position, block in enumerate(content):
            if isinstance(block, dict):
                if block.get("type") != "tool_result":
                    continue
                metrics.blocks_processed += 1
                tool_id = block.get("tool_use_id")
                if tool_id is None and "tool_use_id" not in block:
                    self._invalid_block(index, position, "missing_field", "has no tool_use_id")
                elif not isinstance(tool_id, str):
                    self._invalid_block(
                        index, position, "invalid_type", f"tool_use_id is {type(tool_id).__name__}, not a string"
                    )
                elif not tool_id.strip():
                    self._invalid_block(index, position, "missing_field", "tool_use_id is empty")
                else:
                    metrics.blocks_valid += 1
                    synthetic = _result_is_synthetic(block, line)
                    self.results.setdefault(tool_id, []).append(ResultBlock(index, position, synthetic))
                    found = True
            else:
                metrics.blocks_processed += 1
                self._invalid_block(
                    index, position, "invalid_type", f"content block is a JSON {type(block).__name__}, not an object"
                )
        if found:
            self.result_lines.append(index)
        return found

    def _invalid_block(self, index: int, position: int, kind: str, why: str) -> None:
        self.metrics.blocks_invalid += 1
        failures = self.metrics.failures_by_type
        failures[kind] = failures.get(kind, 0) + 1
        self.line_findings.append(
            Finding(
                FindingClass.INVALID_TOOL_RESULT,
                self.path,
                (index + 1,),
                f"tool_result block {position} {why}; it is kept as it is",
                uuids=(self.uuids[index] or "",),
                offset=self.offsets[index],
                detail=kind,
            )
        )

    def _malformed(self, index: int, offset: int, reason: str, terminated: bool) -> None:
        self.metrics.malformed_lines += 1
        # Whether an unterminated malformed line is the torn tail is known only at `finish`.
        self.line_findings.append(
            Finding(
                FindingClass.MALFORMED_LINE,
                self.path,
                (index + 1,),
                f"line is {reason}; it is kept as it is",
                offset=offset,
                detail=None if terminated else "unterminated",
            )
        )

    def finish(self) -> TranscriptIndex:
        """Resolve what needs the whole file (dangling parents, result lines by anchor, the torn tail)."""
        if self._finished:
            return self
        self._finished = True
        for missing_parent, children in self._pending.items():
            for child in children:
                self.parents[child] = DANGLING
                self.dangling[child] = missing_parent
        self._pending.clear()
        for index in self.result_lines:
            for anchor in self._anchors(index):
                self.result_children.setdefault(anchor, []).append(index)
        self.metrics.lines = len(self.offsets)
        self.metrics.unique_tool_use_ids = len(self.tool_uses)
        if self.line_findings and self.offsets:
            last = len(self.offsets) - 1
            tail = self.line_findings[-1]
            if tail.cls is FindingClass.MALFORMED_LINE and tail.detail == "unterminated" and tail.line == last + 1:
                self.metrics.malformed_lines -= 1
                self.line_findings[-1] = Finding(
                    FindingClass.TORN_TAIL,
                    self.path,
                    tail.lines,
                    "the last line is incomplete (no newline, not valid JSON): a write was cut off, or is still "
                    "going on; it is kept as it is",
                    offset=tail.offset,
                )
        return self

    def _anchors(self, index: int) -> Iterable[int]:
        """The lines a tool_result line hangs from: its parent, and its sourceToolAssistantUUID line."""
        parent = self.parents[index]
        if parent >= 0:
            yield parent
        source = self.source_tool_line.get(index)
        if source is not None:
            source_line = self.line_of_uuid.get(source)
            if source_line is not None and source_line != parent:
                yield source_line

    def resolve_external(self, known_uuids: set[str]) -> None:
        """Mark dangling parents found in `known_uuids` (the parent session's lines) as cross-file links.

        Subagent transcripts, compaction agents above all, start from lines of their parent session:
        such a parent is not missing, it lives in the session file.
        """
        for line, parent in list(self.dangling.items()):
            if parent in known_uuids:
                del self.dangling[line]
                self.parents[line] = NO_PARENT
                self.external_parent[line] = parent

    # --- queries --------------------------------------------------------------------------------

    def span(self, line: int) -> tuple[int, int]:
        """Return (offset, length) of line index `line`."""
        return self.offsets[line], self.lengths[line]

    def children_of(self, lines: set[int]) -> dict[int, list[int]]:
        """Return, for each line index in `lines`, the indexes of the lines whose parent it is (one pass)."""
        children: dict[int, list[int]] = {line: [] for line in lines}
        for index, parent in enumerate(self.parents):
            if parent in children:
                children[parent].append(index)
        return children
