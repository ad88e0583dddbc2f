"""The loaded conversation: the lines Claude Code loads when it resumes a session.

Claude Code resumes a session from its newest message: it walks `parentUuid` to the root, then
splices in the other lines of each API message on that chain (same `message.id`) and the
tool_result lines that hang from any of them. A compact boundary starts a new segment: the API sees
pairs within a segment, never across one. Detection (riffd.transcript.detect) judges that
conversation; branches left by rewinds and retries are history, not damage.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from riffd.transcript.index import ASSISTANT, COMPACT_BOUNDARY, MESSAGE, SIDECHAIN, TranscriptIndex

log = logging.getLogger(__name__)


class SegmentMap(Mapping[int, int]):
    """Read-only view of a loaded conversation's segments: line index -> segment, loaded lines
    only."""

    def __init__(self, segment: array[int], count: int) -> None:
        self._segment = segment
        self._count = count

    def __getitem__(self, line: int) -> int:
        value = self._segment[line] if 0 <= line < len(self._segment) else -1
        if value < 0:
            raise KeyError(line)
        return value

    def __contains__(self, line: object) -> bool:
        return isinstance(line, int) and 0 <= line < len(self._segment) and self._segment[line] >= 0

    def __iter__(self) -> Iterator[int]:
        return (line for line, value in enumerate(self._segment) if value >= 0)

    def __len__(self) -> int:
        return self._count


@dataclass
class LoadedConversation:
    """The lines Claude Code would load: the chain from the newest message to the root, plus spliced
    lines.

    `segment[line]` is the line's segment (0 = after the last compact boundary), -1 when not loaded.
    """

    leaf: int | None
    chain: array[int]
    segment: array[int]
    count: int
    cycle_at: int | None = None

    @property
    def segment_of(self) -> SegmentMap:
        """The loaded lines and their segments, as a mapping."""
        return SegmentMap(self.segment, self.count)

    @property
    def on_chain(self) -> set[int]:
        """The line indexes on the plain parent walk from the leaf."""
        return set(self.chain)


def newest_leaf(index: TranscriptIndex) -> int | None:
    """Return the index of the newest message line (last in file order) that is not on a sidechain.

    A file that holds only sidechain lines (a subagent transcript) uses its newest message.
    """
    flags = index.flags
    fallback = None
    for line in range(len(flags) - 1, -1, -1):
        line_flags = flags[line]
        if line_flags & MESSAGE:
            if not line_flags & SIDECHAIN:
                return line
            if fallback is None:
                fallback = line
    return fallback


def loaded_conversation(index: TranscriptIndex) -> LoadedConversation:
    """Given a finished index, return the conversation Claude Code loads from its newest message."""
    leaf = newest_leaf(index)
    segment = array("i", [-1]) * len(index)
    chain = array("i")
    if leaf is None:
        return LoadedConversation(None, chain, segment, 0)
    parents, flags = index.parents, index.flags
    cycle_at = None
    current_segment = 0
    line = leaf
    while line >= 0:
        if segment[line] >= 0:
            cycle_at = line
            log.warning(
                "%s: parent chain loops at line %d; the walk stops there", index.path, line + 1
            )
            break
        segment[line] = current_segment
        chain.append(line)
        parent = parents[line]
        if parent < 0 and flags[line] & COMPACT_BOUNDARY:
            logical = index.logical_line(line)
            if logical is not None:
                current_segment += 1
                line = logical
                continue
        line = parent
    count = len(chain)
    groups, group_lines = index.groups, index.group_lines
    seen_groups: set[int] = set()
    for line in chain:
        group = groups[line]
        if group >= 0 and group not in seen_groups:
            seen_groups.add(group)
            for sibling in group_lines[group]:
                if segment[sibling] < 0:
                    segment[sibling] = segment[line]
                    count += 1
    # Results hang from a chain line or a sibling (decided before any result is added).
    spliced = []
    for result_line in index.result_lines:
        if segment[result_line] < 0 and is_loaded_copy(index, result_line):
            for anchor in index.anchors(result_line):
                if segment[anchor] >= 0:
                    spliced.append((result_line, segment[anchor]))
                    break
    for result_line, result_segment in spliced:
        segment[result_line] = result_segment
    return LoadedConversation(leaf, chain, segment, count + len(spliced), cycle_at)


def is_loaded_copy(index: TranscriptIndex, line: int) -> bool:
    """Whether `line` is the copy of its uuid Claude Code loads (it loads a uuid once): a line
    written again does not give the API a second result."""
    uuid = index.uuids[line]
    return uuid is None or index.line_of_uuid.get(uuid) == line


def latest_turn(index: TranscriptIndex, loaded: LoadedConversation) -> tuple[int, int]:
    """Return (message group, line) of the last assistant line on the loaded chain: the latest API
    response.

    Its tool calls may still be running (parallel calls finish in any order, and their results come
    after it) until the model responds again; (-1, -1) when the chain has no assistant line.
    """
    flags, groups = index.flags, index.groups
    for line in loaded.chain:
        if flags[line] & ASSISTANT:
            return groups[line], line
    return -1, -1


def in_latest_turn(index: TranscriptIndex, turn: tuple[int, int], line: int) -> bool:
    """Return True when `line` belongs to the latest turn found by `latest_turn`."""
    group, turn_line = turn
    return line == turn_line or (group >= 0 and index.groups[line] == group)
