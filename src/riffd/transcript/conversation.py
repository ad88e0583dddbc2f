"""Conversation structure on a finished TranscriptIndex: the active chain, branches, roots and
cycles.

The sidechains (subagent runs) of a session, each named by its agent, are in
riffd.transcript.sidechains.

`conversation_of(index)` is pure. The active chain is the walk Claude Code does on resume (the same
one detection judges): from the newest message to its root, continuing across each compact boundary
through its `logicalParentUuid`, so a session compacted many times reads as one conversation.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from dataclasses import dataclass, field

from riffd.transcript.detect import find_cycles
from riffd.transcript.index import COMPACT_BOUNDARY, DANGLING, MESSAGE, SIDECHAIN, TranscriptIndex
from riffd.transcript.loaded import newest_leaf

log = logging.getLogger(__name__)


# Root kinds.
ROOT = "root"  # parentUuid null: where a conversation starts
ORPHAN = "orphan"  # parentUuid names no line: a history cut off from its past
EXTERNAL = "external"  # a subagent file's line whose parent lives in its session's file
SIDECHAIN_ROOT = "sidechain"  # the first line of an inline subagent run


@dataclass(frozen=True)
class Branch:
    """A line with several children (line indexes, file order).

    `alternatives` are the children that continue the conversation differently (rewinds, edited
    prompts, retries): message lines that are not tool results and not a repeat of a uuid. A
    tool_use line's result, progress and the next line of a parallel call are also its children, but
    Claude Code splices those in rather than choosing between them. `active_child` is the last
    alternative by file position (the last child when there are no alternatives): the branch a
    resume follows.
    """

    line: int
    children: tuple[int, ...]
    alternatives: tuple[int, ...]
    active_child: int

    @property
    def is_fork(self) -> bool:
        """True when the conversation really splits here (two or more alternatives)."""
        return len(self.alternatives) > 1


@dataclass(frozen=True)
class Root:
    """A line that starts a history: `kind` is ROOT, ORPHAN (with the `missing_parent` uuid),
    EXTERNAL (parent in the session file, with that uuid) or SIDECHAIN_ROOT."""

    line: int
    kind: str
    missing_parent: str | None = None


@dataclass
class Conversation:
    """The structure of one transcript. Line numbers are 0-based line indexes of `path`.

    `chain` runs root to leaf along the active chain, across compact boundaries; `chain_segments[i]`
    is the segment of `chain[i]`, numbered from 0 at the oldest (the reverse of detection's
    numbering, which counts back from the newest). `boundaries` are the compact boundaries the chain
    crosses, oldest first; `compactions` counts every compact boundary in the file.
    """

    path: str
    leaf: int | None
    chain: array[int]
    chain_segments: array[int]
    boundaries: list[int]
    compactions: int
    branches: list[Branch]
    roots: list[Root]
    cycles: list[list[int]]
    cycle_at: int | None = None
    _segment_by_line: dict[int, int] | None = field(default=None, repr=False)

    @property
    def segments(self) -> int:
        """How many segments the active chain has (compactions crossed + 1; 0 for an empty file)."""
        return len(self.boundaries) + 1 if self.chain else 0

    @property
    def forks(self) -> list[Branch]:
        """The branches where the conversation really splits (rewinds, edits, retries)."""
        return [branch for branch in self.branches if branch.is_fork]

    @property
    def orphans(self) -> list[Root]:
        """The roots whose parentUuid names no line."""
        return [root for root in self.roots if root.kind == ORPHAN]

    def segment_of(self, line: int) -> int | None:
        """Return the segment of a line on the active chain, None for a line off it."""
        if self._segment_by_line is None:
            self._segment_by_line = dict(zip(self.chain, self.chain_segments, strict=True))
        return self._segment_by_line.get(line)


def conversation_of(index: TranscriptIndex) -> Conversation:
    """Given a finished index, return its conversation structure (pure; logs each orphan at debug
    level and each cycle at warning level, naming the uuids)."""
    parents, flags, uuids = index.parents, index.flags, index.uuids
    cycles = find_cycles(index)
    in_cycle = {line for cycle in cycles for line in cycle}
    for cycle in cycles:
        log.warning(
            "%s: parentUuid links loop through uuid %s (lines %s); walks stop there",
            index.path,
            ", ".join(uuids[line] or "?" for line in cycle),
            ", ".join(str(line + 1) for line in cycle),
        )
    chain, chain_segments, boundaries, cycle_at = _active_chain(index, in_cycle)
    return Conversation(
        path=index.path,
        leaf=chain[-1] if chain else None,
        chain=chain,
        chain_segments=chain_segments,
        boundaries=boundaries,
        # only system lines carry this flag, and nothing else
        compactions=flags.count(COMPACT_BOUNDARY),
        branches=_branches(index),
        roots=_roots(index, parents, uuids),
        cycles=cycles,
        cycle_at=cycle_at,
    )


def _active_chain(
    index: TranscriptIndex, in_cycle: set[int]
) -> tuple[array[int], array[int], list[int], int | None]:
    parents, flags = index.parents, index.flags
    visited = bytearray(len(index))
    chain, segments = array("i"), array("i")
    boundaries: list[int] = []
    cycle_at = None
    segment = 0
    line = newest_leaf(index)
    while line is not None and line >= 0:
        if visited[line]:
            cycle_at = line
            # a loop through logicalParentUuid: find_cycles sees parent links only
            if line not in in_cycle:
                log.warning(
                    "%s: the active chain loops at uuid %s (line %d); the walk stops there",
                    index.path,
                    index.uuids[line],
                    line + 1,
                )
            break
        visited[line] = 1
        chain.append(line)
        segments.append(segment)
        parent = parents[line]
        if parent < 0 and flags[line] & COMPACT_BOUNDARY:
            logical = index.logical_line(line)
            if logical is not None:
                boundaries.append(line)
                segment += 1
                line = logical
                continue
        line = parent
    chain.reverse()
    oldest = segment
    segments = array("i", (oldest - value for value in reversed(segments)))
    boundaries.reverse()
    return chain, segments, boundaries, cycle_at


def _branches(index: TranscriptIndex) -> list[Branch]:
    parents, flags, uuids, line_of_uuid = (
        index.parents,
        index.flags,
        index.uuids,
        index.line_of_uuid,
    )
    split = {parent for parent, count in Counter(parents).items() if count > 1 and parent >= 0}
    if not split:
        return []
    children = index.children_of(split)
    results = set(index.result_lines)
    branches = []
    for line in sorted(split):
        kids = tuple(children[line])
        alternatives = tuple(
            kid
            for kid in kids
            if flags[kid] & MESSAGE
            and kid not in results
            and line_of_uuid.get(uuids[kid] or "") == kid
        )
        branches.append(
            Branch(line, kids, alternatives, alternatives[-1] if alternatives else kids[-1])
        )
    return branches


def _roots(index: TranscriptIndex, parents: array[int], uuids: list[str | None]) -> list[Root]:
    roots = []
    for line in [line for line, parent in enumerate(parents) if parent < 0]:
        uuid = uuids[line]
        if uuid is None:
            continue  # metadata, summaries, malformed lines: not in the tree
        if parents[line] == DANGLING:
            missing = index.dangling.get(line)
            log.debug(
                "%s: line %d (uuid %s) names parent %s, which is no line of the file: it is a root of its own",
                index.path,
                line + 1,
                uuid,
                missing,
            )
            roots.append(Root(line, ORPHAN, missing))
        elif line in index.external_parent:
            roots.append(Root(line, EXTERNAL, index.external_parent[line]))
        elif index.flags[line] & COMPACT_BOUNDARY and index.logical_line(line) is not None:
            continue  # continues the conversation through logicalParentUuid
        elif index.flags[line] & SIDECHAIN:
            roots.append(Root(line, SIDECHAIN_ROOT))
        else:
            roots.append(Root(line, ROOT))
    return roots
