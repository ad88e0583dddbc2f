"""A compact index of one transcript: the tree of lines, API messages, tool uses and results.

The index keeps small per-line metadata in arrays (about 260 bytes a line with the uuid map),
never line contents, so a 1 GB transcript indexes in bounded memory. An `IndexBuilder`
(riffd.transcript.index_builder) fills it from the lines in file order and finishes it; detection and
repair planning read the finished index.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from riffd.transcript.findings import Finding

# Line flags. A line with a uuid is a node of the parent tree; others (metadata, bookkeeping,
# unknown record types, summaries, malformed and blank lines) are kept and have no parent.
SIDECHAIN = 1
COMPACT_BOUNDARY = 2
MESSAGE = 4  # a user or assistant line: a candidate for the newest leaf
ASSISTANT = 8
LOCAL_COMMAND = (
    16  # a system line Claude Code sends as a user message (/usage): it ends an API message
)
THINKING_ONLY = 32  # an assistant line whose content is thinking blocks only

BLOCK_BITS = 32  # results are stored packed: line << BLOCK_BITS | block

# parents[] sentinels (>= 0 is the parent's line index).
NO_PARENT = -1
DANGLING = -2
UNRESOLVED = -3

# The tool maps (tool id -> its lines, or packed result blocks) hold one value as the int itself and
# several as a list: almost every tool id has one use and one result, and a list of one costs 88
# bytes (10 MB on a 1 GB file). `lines_in` reads a value either way; `add_value` is the only writer.
Lines = int | list[int]


def lines_in(value: Lines | tuple[()]) -> list[int] | tuple[int, ...]:
    """The values a tool map holds for one id, as a sequence (pass `()` for an id it does not
    hold)."""
    return (value,) if type(value) is int else value  # type: ignore[return-value]


def add_value(mapping: dict[str, Lines], key: str, value: int) -> None:
    """Add `value` to `key`'s values in a tool map (see `lines_in`)."""
    entry = mapping.get(key)
    if entry is None:
        mapping[key] = value
    elif type(entry) is int:
        mapping[key] = [entry, value]
    else:
        entry.append(value)  # type: ignore[union-attr]


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


class TranscriptIndex:
    """Per-line metadata of one transcript and the maps detection and repair planning need (made
    by an IndexBuilder: see riffd.transcript.index_builder)."""

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
        self.logical_parent: dict[int, str] = {}
        self.summary_leaf: dict[int, str] = {}  # summary line -> the line it titles
        # sourceToolAssistantUUID where it differs from parentUuid
        self.source_tool_line: dict[int, str] = {}
        self.group_of_message: dict[str, int] = {}
        self.group_lines: list[list[int]] = []
        # tool_use id -> its lines (one: the int itself; see lines_in)
        self.tool_uses: dict[str, Lines] = {}
        # tool_use id -> line << BLOCK_BITS | block (the same way)
        self.packed_results: dict[str, Lines] = {}
        self.results = ResultsView(self.packed_results)
        self.result_lines: list[int] = []
        # server tools (web_search, advisor, MCP): server_tool_use id -> packed blocks, and a
        # *_tool_result's tool_use_id -> packed blocks (line << BLOCK_BITS | block, see lines_in)
        self.server_uses: dict[str, Lines] = {}
        self.server_results: dict[str, Lines] = {}
        self.server_result_type: dict[str, str] = {}
        # repeats of a uuid whose bytes equal the first copy's (riffd.transcript.external compares
        # them when it finishes the index), and how many of duplicate_uuid_lines were compared
        self.repeated_lines: set[int] = set()
        self.compared_repeats = 0
        self.malformed: list[int] = []
        self.line_findings: list[Finding] = []
        self.metrics = FileMetrics()
        self.session_id: str | None = None
        self.uses_source_tool_field = False
        # lines whose parent is not before them: where cycles can be
        self.forward_parents: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def uses_of(self, tool_id: str) -> list[int] | tuple[int, ...]:
        """The lines of the tool_use blocks with this id, in file order (empty when none)."""
        return lines_in(self.tool_uses.get(tool_id, ()))

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
