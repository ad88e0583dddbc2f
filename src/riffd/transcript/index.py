"""A compact index of one transcript: the tree of lines, API messages, tool uses and results.

The index keeps small per-line metadata in arrays (about 270 bytes a line with the uuid map),
never line contents, so a 1 GB transcript indexes in bounded memory. Lines are fed in file order
(`add`), then `finish` resolves what needs the whole file. Detection works on the finished index.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from riffd.transcript.findings import Finding, FindingClass
from riffd.transcript.reader import Unparsed, parse_line

# Line flags. A line with a uuid is a node of the parent tree; others (metadata, bookkeeping, unknown
# record types, summaries, malformed and blank lines) are kept and have no parent.
SIDECHAIN = 1
COMPACT_BOUNDARY = 2
MESSAGE = 4  # a user or assistant line: a candidate for the newest leaf
ASSISTANT = 8

BLOCK_BITS = 32  # results are stored packed: line << BLOCK_BITS | block

# parents[] sentinels (>= 0 is the parent's line index).
NO_PARENT = -1
DANGLING = -2
UNRESOLVED = -3

# Texts Claude Code writes into the placeholder results it makes up (interrupt, cancel, resume).
SYNTHETIC_TEXT = re.compile(r"interrupted|cancel+ed|missing|no result|rejected", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ResultBlock:
    """One tool_result block: which line (0-based index) and which block of its content list."""

    line: int
    block: int


class ResultsView(Mapping[str, list[ResultBlock]]):
    """Read-only view of the results by tool_use id, unpacked on access (stored as packed ints)."""

    def __init__(self, packed: dict[str, list[int]]) -> None:
        self._packed = packed

    def __getitem__(self, tool_id: str) -> list[ResultBlock]:
        mask = (1 << BLOCK_BITS) - 1
        return [ResultBlock(value >> BLOCK_BITS, value & mask) for value in self._packed[tool_id]]

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
    """Given a parsed line and the position of a tool_result block in its content, return True when the
    block is a placeholder Claude Code made up (interrupt, cancel, a resume that saw no result), not a
    tool's real output: `is_error` true with such a text, or a line marked with `toolDenialKind`."""
    if "toolDenialKind" in record:
        return True
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    block = content[position] if isinstance(content, list) and 0 <= position < len(content) else None
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
        self.external: set[str] = set()  # those parents' uuids (their children stay pending: see resolve_external)
        self.logical_parent: dict[int, str] = {}
        self.summary_leaf: dict[int, str] = {}  # summary line -> the line it titles
        self.source_tool_line: dict[int, str] = {}  # sourceToolAssistantUUID where it differs from parentUuid
        self.group_of_message: dict[str, int] = {}
        self.group_lines: list[list[int]] = []
        self.tool_uses: dict[str, list[int]] = {}
        self.packed_results: dict[str, list[int]] = {}  # tool_use id -> [line << BLOCK_BITS | block]
        self.results = ResultsView(self.packed_results)
        self.result_lines: list[int] = []
        self.malformed: list[int] = []
        self.line_findings: list[Finding] = []
        self.metrics = FileMetrics()
        self.session_id: str | None = None
        self.uses_source_tool_field = False
        self._pending: dict[str, list[int]] = {}
        self._previous: tuple[str | None, int] = (None, NO_PARENT)  # the last node line's uuid and line
        self.forward_parents: list[int] = []  # lines whose parent is not before them: where cycles can be
        # Called with (line index, parsed record) for every user and assistant message line as it is added:
        # how the daemon feeds the tool-call tracker without parsing lines twice. None in plain scans.
        self.observe: Callable[[int, dict[str, Any]], None] | None = None
        # (line index, tool id) of every tool_use and tool_result block added while this is a list: how
        # incremental detection (riffd.transcript.incremental) learns which ids an append names. None in scans.
        self.tool_log: list[tuple[int, str]] | None = None
        # The incremental detector of this index once the daemon has made one (it lives as long as the index).
        self.incremental: Any = None

    def __len__(self) -> int:
        return len(self.offsets)

    # --- building -------------------------------------------------------------------------------

    def add_lines(self, offset: int, pieces: list[bytes], last_terminated: bool = True) -> int:
        """Record lines in file order: `pieces` are consecutive lines' bytes (no newline) starting at byte
        `offset`, each followed by a newline except, when `last_terminated` is False, the last. Return the
        offset after them.

        This is the hot path of every scan: it binds what it needs to locals once per batch and keeps
        method calls off the common line (a progress, user or assistant line with one block).
        """
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        offsets_append, flags_append = self.offsets.append, self.flags.append
        parents_append, groups_append, uuids_append = self.parents.append, self.groups.append, self.uuids.append
        line_of_uuid, pending, parents = self.line_of_uuid, self._pending, self.parents
        group_of_message, group_lines, tool_uses = self.group_of_message, self.group_lines, self.tool_uses
        claim = line_of_uuid.setdefault
        find = line_of_uuid.get
        need_session = self.session_id is None
        observe, tool_log = self.observe, self.tool_log
        previous_uuid, previous_index = self._previous
        first_index = index = len(self.offsets)
        terminated_count = len(pieces) if last_terminated else len(pieces) - 1
        for raw in pieces:
            offsets_append(offset)
            offset += len(raw) + 1
            try:
                obj = loads(raw)
            except decode_error:
                obj = parse_line(raw)
            if type(obj) is not dict:
                self._add_unusual(index, offset - len(raw) - 1, raw, obj, index - first_index < terminated_count)
                index += 1
                continue
            uuid = obj.get("uuid")
            if type(uuid) is not str:
                flags_append(0)
                parents_append(NO_PARENT)
                groups_append(-1)
                uuids_append(None)
                leaf = obj.get("leafUuid")
                if type(leaf) is str:
                    self.summary_leaf[index] = leaf
                index += 1
                continue
            uuids_append(uuid)
            first = claim(uuid, index)
            if first != index:
                self.duplicate_uuid_lines.append((first, index))
            elif pending and uuid in pending:
                for child in pending.pop(uuid):
                    parents[child] = index
                    self.forward_parents.append(child)
                    self.external_parent.pop(child, None)
            parent = obj.get("parentUuid")
            if parent is None:
                parents_append(NO_PARENT)
            elif parent == previous_uuid:  # the usual case: the line just before; no lookup needed
                parents_append(previous_index)
            elif type(parent) is str:
                parent_line = find(parent)
                if parent_line is None:
                    parents_append(UNRESOLVED)
                    pending.setdefault(parent, []).append(index)
                else:
                    parents_append(parent_line)
                    if parent_line == index:
                        self.forward_parents.append(index)
            else:
                parents_append(NO_PARENT)
            previous_uuid, previous_index = uuid, first
            flags = 0
            line_type = obj.get("type")
            group = -1
            if line_type == "assistant" or line_type == "user":
                message = obj.get("message")
                if type(message) is dict:
                    # Only messages can be the newest leaf, the one thing the sidechain flag decides.
                    flags = (MESSAGE | SIDECHAIN) if obj.get("isSidechain") is True else MESSAGE
                    if observe is not None:
                        observe(index, obj)
                    content = message.get("content")
                    if line_type == "assistant":
                        flags |= ASSISTANT
                        message_id = message.get("id")
                        if type(message_id) is str:
                            group = group_of_message.setdefault(message_id, len(group_lines))
                            if group == len(group_lines):
                                group_lines.append([index])
                            else:
                                group_lines[group].append(index)
                        if type(content) is list:
                            for block in content:
                                if type(block) is dict and block.get("type") == "tool_use":
                                    tool_id = block.get("id")
                                    if type(tool_id) is str and tool_id and not tool_id.isspace():
                                        tool_uses.setdefault(tool_id, []).append(index)
                                        if tool_log is not None:
                                            tool_log.append((index, tool_id))
                    elif type(content) is list and self._index_results(index, content):
                        source = obj.get("sourceToolAssistantUUID")
                        if type(source) is str:
                            self.uses_source_tool_field = True
                            if source != parent:
                                self.source_tool_line[index] = source
            elif line_type == "system" and obj.get("subtype") == "compact_boundary":
                flags |= COMPACT_BOUNDARY
                logical = obj.get("logicalParentUuid")
                if type(logical) is str:
                    self.logical_parent[index] = logical
            if need_session and type(obj.get("sessionId")) is str:
                self.session_id = obj["sessionId"]
                need_session = False
            flags_append(flags)
            groups_append(group)
            index += 1
        self._previous = (previous_uuid, previous_index)
        if pieces and not last_terminated:
            offset -= 1
            self.metrics.unterminated_last_line = True
        self.end = offset
        return offset

    def add(self, offset: int, raw: bytes, terminated: bool) -> None:
        """Record one line (its bytes without the newline) at `offset`; see add_lines."""
        self.add_lines(offset, [raw], terminated)

    def _add_unusual(self, index: int, offset: int, raw: bytes, obj: object, terminated: bool) -> None:
        """A blank line, a line that does not parse, or JSON that is not an object: kept, and reported."""
        self.parents.append(NO_PARENT)
        self.groups.append(-1)
        self.uuids.append(None)
        self.flags.append(0)
        if obj is None:
            self.metrics.blank_lines += 1
            return
        self.malformed.append(index)
        reason = obj.reason if isinstance(obj, Unparsed) else f"JSON {type(obj).__name__}, not an object"
        self._malformed(index, offset, reason, terminated)

    def _index_results(self, index: int, content: list[Any]) -> bool:
        found = False
        results = self.packed_results
        packed_line = index << BLOCK_BITS
        for position, block in enumerate(content):
            if type(block) is not dict:
                self._invalid_block(
                    index, position, "invalid_type", f"content block is a JSON {type(block).__name__}, not an object"
                )
                continue
            if block.get("type") != "tool_result":
                continue
            tool_id = block.get("tool_use_id")
            if type(tool_id) is str and tool_id and not tool_id.isspace():
                entry = results.get(tool_id)
                if entry is None:
                    results[tool_id] = [packed_line | position]
                else:
                    entry.append(packed_line | position)
                self.metrics.blocks_valid += 1
                if self.tool_log is not None:
                    self.tool_log.append((index, tool_id))
                found = True
            elif "tool_use_id" not in block:
                self._invalid_block(index, position, "missing_field", "has no tool_use_id")
            elif type(tool_id) is not str:
                self._invalid_block(
                    index, position, "invalid_type", f"tool_use_id is {type(tool_id).__name__}, not a string"
                )
            else:
                self._invalid_block(index, position, "missing_field", "tool_use_id is empty")
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
        """Resolve what needs all lines read so far (dangling parents, counts, the torn tail).

        Lines may be added after `finish`, which may then be called again: parents still missing stay
        pending, so a parent that arrives later links up (the daemon feeds appends this way).
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
            if tail.cls is FindingClass.MALFORMED_LINE and tail.detail == "unterminated" and tail.line == last + 1:
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
        """The lines a tool_result line hangs from: its parent, and its sourceToolAssistantUUID line."""
        parent = self.parents[index]
        if parent >= 0:
            yield parent
        source = self.source_tool_line.get(index)
        if source is not None:
            source_line = self.line_of_uuid.get(source)
            if source_line is not None and source_line != parent:
                yield source_line

    def logical_line(self, line: int) -> int | None:
        """The line a compact boundary's `logicalParentUuid` names, None when it names none (or no line here)."""
        uuid = self.logical_parent.get(line)
        return None if uuid is None else self.line_of_uuid.get(uuid)

    def resolve_external(self, known_uuids: set[str]) -> None:
        """Mark dangling parents found in `known_uuids` (the parent session's lines) as cross-file links.

        Subagent transcripts, compaction agents above all, start from lines of their parent session:
        such a parent is not missing, it lives in the session file.
        """
        for parent in [parent for parent in self._pending if parent in known_uuids and parent not in self.external]:
            self.external.add(parent)  # still pending: a line of this file with that uuid would be the parent
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
        """Return, for each line index in `lines`, the indexes of the lines whose parent it is (one pass)."""
        children: dict[int, list[int]] = {line: [] for line in lines}
        for index, parent in enumerate(self.parents):
            if parent in children:
                children[parent].append(index)
        return children
