"""A compact index of one transcript: the tree of lines, API messages, tool uses and results.

The index keeps small per-line metadata in arrays (about 260 bytes a line with the uuid map),
never line contents, so a 1 GB transcript indexes in bounded memory. Lines are fed in file order
(`add`), then `finish` resolves what needs the whole file. Detection works on the finished index.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from riffd.transcript.building import (  # the line flags and parent sentinels, for the index's readers too
    ASSISTANT,
    BLOCK_BITS,
    COMPACT_BOUNDARY,
    DANGLING,
    MESSAGE,
    NO_PARENT,
    SIDECHAIN,
    UNRESOLVED,
    IndexBuilding,
    Lines,
    lines_in,
)
from riffd.transcript.findings import Finding, FindingClass

__all__ = [
    "ASSISTANT",
    "BLOCK_BITS",
    "COMPACT_BOUNDARY",
    "DANGLING",
    "MESSAGE",
    "NO_PARENT",
    "SIDECHAIN",
    "UNRESOLVED",
    "FileMetrics",
    "Lines",
    "ResultBlock",
    "ResultsView",
    "TranscriptIndex",
    "lines_in",
]

# Texts Claude Code writes into the placeholder results it makes up (interrupt, cancel, resume).
SYNTHETIC_TEXT = re.compile(r"interrupted|cancel+ed|missing|no result|rejected", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ResultBlock:
    """One tool_result block: which line (0-based index) and which block of its content list."""

    line: int
    block: int


class ResultsView(Mapping[str, list[ResultBlock]]):
    """Read-only view of the results by tool_use id, unpacked on access (stored as packed ints)."""

    def __init__(self, packed: dict[str, Lines]) -> None:
        self._packed = packed

    def __getitem__(self, tool_id: str) -> list[ResultBlock]:
        mask = (1 << BLOCK_BITS) - 1
        return [
            ResultBlock(value >> BLOCK_BITS, value & mask)
            for value in lines_in(self._packed[tool_id])
        ]

    def count(self, tool_id: str) -> int:
        """How many result blocks name `tool_id` (0 when none)."""
        return len(lines_in(self._packed.get(tool_id, ())))

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._packed


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


def is_placeholder_result(record: dict[str, Any], position: int) -> bool:
    """Given a parsed line and the position of a tool_result block in its content, return True when
    the block is a placeholder Claude Code made up (interrupt, cancel, a resume that saw no result),
    not a tool's real output: `is_error` true with such a text, or a line marked with
    `toolDenialKind`."""
    if "toolDenialKind" in record:
        return True
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    block = (
        content[position] if isinstance(content, list) and 0 <= position < len(content) else None
    )
    if not isinstance(block, dict) or block.get("is_error") is not True:
        return False
    text = block.get("content")
    if isinstance(text, list):
        parts: list[str] = []
        for part in text:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"][:300])
                if sum(map(len, parts)) >= 300:
                    break
        text = " ".join(parts)
    return isinstance(text, str) and SYNTHETIC_TEXT.search(text[:300]) is not None


class TranscriptIndex(IndexBuilding):
    """Per-line metadata of one transcript and the maps detection and repair planning need."""

    def __init__(self, path: str, start: int = 0) -> None:
        self.path = path
        self.start = start  # byte offset of the first line indexed
        self.end = start  # byte offset just after the last line indexed
        self.offsets = array("q")
        self.flags = bytearray()
        self.parents = array("i")
        self.groups = array("i")
        self.uuids: list[str | None] = []
        self.line_of_uuid: dict[str, int] = {}
        self.duplicate_uuid_lines: list[tuple[int, int]] = []  # (first, repeat)
        self.dangling: dict[int, str] = {}
        self.external_parent: dict[int, str] = {}  # parents that live in the parent session's file
        self.external: set[str] = (
            set()
        )  # those parents' uuids (their children stay pending: see resolve_external)
        self.logical_parent: dict[int, str] = {}
        self.summary_leaf: dict[int, str] = {}  # summary line -> the line it titles
        self.source_tool_line: dict[
            int, str
        ] = {}  # sourceToolAssistantUUID where it differs from parentUuid
        self.group_of_message: dict[str, int] = {}
        self.group_lines: list[list[int]] = []
        self.tool_uses: dict[
            str, Lines
        ] = {}  # tool_use id -> its lines (one: the int itself; see lines_in)
        self.packed_results: dict[
            str, Lines
        ] = {}  # tool_use id -> line << BLOCK_BITS | block (the same way)
        self.results = ResultsView(self.packed_results)
        self.result_lines: list[int] = []
        self.malformed: list[int] = []
        self.line_findings: list[Finding] = []
        self.metrics = FileMetrics()
        self.session_id: str | None = None
        self.uses_source_tool_field = False
        self._pending: dict[str, list[int]] = {}
        self._previous: tuple[str | None, int] = (
            None,
            NO_PARENT,
        )  # the last node line's uuid and line
        self.forward_parents: list[
            int
        ] = []  # lines whose parent is not before them: where cycles can be
        # Called with (line index, parsed record) for every user and assistant message line as it is
        # added: how the daemon feeds the tool-call tracker without parsing lines twice. None in
        # plain scans.
        self.observe: Callable[[int, dict[str, Any]], None] | None = None
        # (line index, tool id) of every tool_use and tool_result block added while this is a list:
        # how incremental detection (riffd.transcript.incremental) learns which ids an append names.
        # None in scans.
        self.tool_log: list[tuple[int, str]] | None = None
        # True: parse every line whole and add lines one by one: the slow reference the tests hold
        # the fast decoder and the column path to (riffd.transcript.building).
        self.reference_parse = False
        # The incremental detector of this index once the daemon has made one (it lives as long as
        # the index).
        self.incremental: Any = None

    def __len__(self) -> int:
        return len(self.offsets)

    def uses_of(self, tool_id: str) -> list[int] | tuple[int, ...]:
        """The lines of the tool_use blocks with this id, in file order (empty when none)."""
        return lines_in(self.tool_uses.get(tool_id, ()))

    def finish(self) -> TranscriptIndex:
        """Resolve what needs all lines read so far (dangling parents, counts, the torn tail).

        Lines may be added after `finish`, which may then be called again: parents still missing
        stay pending, so a parent that arrives later links up (the daemon feeds appends this way).
        """
        for child in self.dangling:
            if self.parents[child] == DANGLING:
                self.parents[child] = UNRESOLVED
        self.dangling = {}
        for missing_parent, children in self._pending.items():
            if missing_parent in self.external:
                continue
            for child in children:
                self.parents[child] = DANGLING
                self.dangling[child] = missing_parent
        self.metrics.lines = len(self.offsets)
        self.metrics.bytes = self.end - self.start
        self.metrics.blocks_processed = self.metrics.blocks_valid + self.metrics.blocks_invalid
        self.metrics.unique_tool_use_ids = len(self.tool_uses)
        if self.line_findings and self.offsets and self.metrics.unterminated_last_line:
            last = len(self.offsets) - 1
            tail = self.line_findings[-1]
            if (
                tail.cls is FindingClass.MALFORMED_LINE
                and tail.detail == "unterminated"
                and tail.line == last + 1
            ):
                self.metrics.malformed_lines -= 1
                self.line_findings[-1] = Finding(
                    FindingClass.TORN_TAIL,
                    self.path,
                    tail.lines,
                    "the last line is incomplete (no newline, not valid JSON): a write was cut off, or is still "
                    "going on; once the session is idle, `riffd fix` cuts it off after keeping it in the backup and "
                    "the archive",
                    offset=tail.offset,
                )
        return self

    def anchors(self, index: int) -> Iterable[int]:
        """The lines a tool_result line hangs from: its parent, and its sourceToolAssistantUUID
        line."""
        parent = self.parents[index]
        if parent >= 0:
            yield parent
        source = self.source_tool_line.get(index)
        if source is not None:
            source_line = self.line_of_uuid.get(source)
            if source_line is not None and source_line != parent:
                yield source_line

    def logical_line(self, line: int) -> int | None:
        """The line a compact boundary's `logicalParentUuid` names, None when it names none (or no
        line here)."""
        uuid = self.logical_parent.get(line)
        return None if uuid is None else self.line_of_uuid.get(uuid)

    def resolve_external(self, known_uuids: set[str]) -> None:
        """Mark dangling parents found in `known_uuids` (the parent session's lines) as cross-file
        links.

        Subagent transcripts, compaction agents above all, start from lines of their parent session:
        such a parent is not missing, it lives in the session file.
        """
        for parent in [
            parent
            for parent in self._pending
            if parent in known_uuids and parent not in self.external
        ]:
            self.external.add(
                parent
            )  # still pending: a line of this file with that uuid would be the parent
            for child in self._pending[parent]:
                self.dangling.pop(child, None)
                self.parents[child] = NO_PARENT
                self.external_parent[child] = parent

    # --- queries --------------------------------------------------------------------------------

    def span(self, line: int) -> tuple[int, int]:
        """Return (offset, length with newline) of line index `line`: lines are contiguous."""
        offset = self.offsets[line]
        following = self.offsets[line + 1] if line + 1 < len(self.offsets) else self.end
        return offset, following - offset

    @property
    def lengths(self) -> list[int]:
        """Every line's length with its newline (built on demand; the index does not store them)."""
        return [self.span(line)[1] for line in range(len(self.offsets))]

    def children_of(self, lines: set[int]) -> dict[int, list[int]]:
        """Return, for each line index in `lines`, the indexes of the lines whose parent it is (one
        pass)."""
        children: dict[int, list[int]] = {line: [] for line in lines}
        for index, parent in enumerate(self.parents):
            if parent in children:
                children[parent].append(index)
        return children
