"""Incremental detection: the findings of a growing transcript at the cost of what was appended.

The daemon keeps a session's index in memory as a `GrowingIndex` (its builder, its detection, the
search of its session file) and feeds it each append. Detecting from scratch walks
the whole loaded conversation and every tool id (`riffd.transcript.detect.detect`), so its cost
grows with the file. `IncrementalDetection` keeps what that walk decides, line by line, and updates
it:

- the loaded conversation as a state per line: on the chain (with its place from the root), a
  sibling of a chain line's API message, a tool_result spliced in from a loaded anchor, or not
  loaded; and its segment, numbered from the root (the full walk numbers from the leaf; only
  equality matters);
- an appended line that becomes the newest message extends the chain, or opens a branch: the walk
  from it stops at the first line already on the chain, and the old chain's lines below that point
  leave it; only those lines, their message siblings and the results hanging from them are judged
  again;
- only the tool ids named by appended lines, or by lines whose state changed, are paired again.

What an append can change further back (a parent that arrives after its child, a compact boundary's
logical parent or a result's `sourceToolAssistantUUID` that names a uuid not seen yet, a loop) makes
it start again from a full walk, which stays the reference: tests require the incremental findings
to equal a full detection's after every appended line.
"""

from __future__ import annotations

from array import array

from riffd.fsio import REAL_FILES, FileSystem
from riffd.transcript.detect import (
    OOM_RISK_RESULTS,
    ToolGroup,
    assemble,
    duplicates_of,
    find_cycles,
    oom_finding,
    oom_risks,
    pairing_findings,
    tool_groups,
)
from riffd.transcript.external import ExternalSearch, finish_index
from riffd.transcript.findings import Finding
from riffd.transcript.index import (
    ASSISTANT,
    BLOCK_BITS,
    COMPACT_BOUNDARY,
    MESSAGE,
    SIDECHAIN,
    TranscriptIndex,
    lines_in,
)
from riffd.transcript.index_builder import IndexBuilder, Observer
from riffd.transcript.loaded import is_loaded_copy, latest_turn, loaded_conversation
from riffd.transcript.messages import chain_from, message_findings
from riffd.transcript.reader import retrying

# A line's state on the loaded conversation.
NOT_LOADED = 0
CHAIN = 1
SIBLING = 2  # another line of the API message of a chain line
SPLICED = 3  # a tool_result line hanging from a chain line or a sibling


class StartAgain(Exception):
    """An append changed what was decided about earlier lines: detect from a full walk."""


class GrowingIndex:
    """The index of a transcript that grows, fed append by append (the daemon keeps one per file in
    memory): its builder, and once judged, the incremental detection of its findings and the search
    of its session file for parents that live there."""

    def __init__(self, path: str, *, observe: Observer | None = None) -> None:
        self.builder = IndexBuilder(path, observe=observe)
        self.detection: IncrementalDetection | None = None  # made at the first `findings`
        self.search = ExternalSearch()

    @property
    def index(self) -> TranscriptIndex:
        """The index of the lines added so far (finished by `findings`)."""
        return self.builder.index

    @property
    def end(self) -> int:
        """The byte offset just after the last line added."""
        return self.builder.index.end

    def __len__(self) -> int:
        return len(self.builder.index)

    def add_lines(self, offset: int, lines: list[bytes], last_terminated: bool = True) -> int:
        """Add lines read at byte `offset` (see IndexBuilder.add_lines); return the offset after
        them."""
        return self.builder.add_lines(offset, lines, last_terminated)

    def findings(self, *, fs: FileSystem = REAL_FILES, fd: int | None = None) -> list[Finding]:
        """Finish the index and return its findings, as a full detection would, at the cost of the
        lines added since the last call, not of the whole file. `fs` reads the session file (see
        riffd.transcript.external), retrying EIO per its policy (see
        riffd.transcript.reader.retrying); `fd` is the index's own file, open still, when given
        (its repeated lines are compared there)."""
        finish_index(self.builder, self.search, fs=retrying(fs), fd=fd)
        if self.detection is None:
            tool_log: list[tuple[int, str]] = []
            self.builder.tool_log = tool_log
            self.detection = IncrementalDetection(self.builder.index, tool_log)
        return self.detection.findings()


class IncrementalDetection:
    """Findings of one index, kept up to date as lines are added to it (see the module's docstring).

    Create it on an index fed with the file so far, with the list its builder logs the tool ids of
    added lines to (`IndexBuilder.tool_log`); after each batch of added lines and `finish`,
    `findings()` returns what `detect` would, in the same order, at the cost of the batch.
    """

    def __init__(self, index: TranscriptIndex, tool_log: list[tuple[int, str]]) -> None:
        self.index = index
        self.tool_log = tool_log
        self.full_walks = 0  # how many times it had to start from a full walk (the first included)
        self._before: dict[int, int] = {}
        self._rebuild()

    # --- the full walk ----------------------------------------------------------------------------

    def _rebuild(self) -> None:
        index = self.index
        self.full_walks += 1
        loaded = loaded_conversation(index)
        count = len(index)
        self.seen = count
        self.forward = len(index.forward_parents)
        self.exact = loaded.cycle_at is None  # a loop on the chain: every later call walks in full
        self.leaf = loaded.leaf
        self.turn = latest_turn(index, loaded)
        self.count = loaded.count
        segment = loaded.segment
        top = segment[loaded.chain[-1]] if loaded.chain else 0
        self.seg = array("i", [-1]) * count
        self.state = bytearray(count)
        self.pos = array("i", [-1]) * count
        self.is_result = bytearray(count)
        for line in index.result_lines:
            self.is_result[line] = 1
        for line in range(count):
            if segment[line] >= 0:
                self.seg[line] = top - segment[line]
                self.state[line] = SPLICED if self.is_result[line] else SIBLING
        for place, line in enumerate(reversed(loaded.chain)):
            self.pos[line] = place
            self.state[line] = CHAIN
        self.waiting: set[str] = set()  # uuids whose arrival changes an earlier decision
        # line -> tool ids it names; made when first needed
        self._tools_of: dict[int, list[str]] | None = None
        self.result_children: dict[int, list[int]] = {}
        for line in index.result_lines:
            self._note_anchors(line)
        for line in loaded.chain:
            # notes the chain's compact boundaries whose logical parent is not there yet
            self._step(line)
        self.problems: dict[str, list[ToolGroup]] = {}
        # the findings of each problem tool id, made when it changed
        self.pairing: dict[str, list[Finding]] = {}
        self.stale: set[str] = set()  # problem tool ids whose findings must be made again
        # the latest turn the pairing findings were made with
        self.turn_judged: tuple[int, int] | None = None
        for tool_id in set(index.tool_uses) | set(index.packed_results):
            self._pair(tool_id)
        self.cycles = find_cycles(index) if index.forward_parents else []
        self.oom = {tool_id: oom_finding(index, tool_id) for tool_id in oom_risks(index)}
        self.tool_log.clear()

    def _note_anchors(self, line: int) -> None:
        index = self.index
        for anchor in index.anchors(line):
            self.result_children.setdefault(anchor, []).append(line)
        source = index.source_tool_line.get(line)
        if source is not None and source not in index.line_of_uuid:
            self.waiting.add(source)

    def _step(self, line: int) -> tuple[int, bool]:
        """The next line up from `line` on a walk to the root, and whether it crossed a compact
        boundary."""
        index = self.index
        parent = index.parents[line]
        if parent < 0 and index.flags[line] & COMPACT_BOUNDARY:
            logical = index.logical_line(line)
            if logical is not None:
                return logical, True
            if line in index.logical_parent:
                self.waiting.add(index.logical_parent[line])
        return parent, False

    # --- appends ----------------------------------------------------------------------------------

    def findings(self) -> list[Finding]:
        """Every finding of the index as it is now, as `riffd.transcript.detect.detect` orders
        them."""
        index = self.index
        try:
            if not self.exact or len(index.forward_parents) != self.forward or self._woken():
                raise StartAgain
            if len(index) > self.seen:
                self._extend(len(index))
        except StartAgain:
            self._rebuild()
        if self.turn != self.turn_judged:  # a missing result is marked as the latest turn's or not
            self.stale.update(
                tool_id
                for tool_id, groups in self.problems.items()
                if any(not group.result_positions for group in groups)
            )
            self.turn_judged = self.turn
        for tool_id in self.stale:
            groups = self.problems.get(tool_id)
            if groups:
                self.pairing[tool_id] = pairing_findings(index, self.turn, groups)
            else:
                self.pairing.pop(tool_id, None)
        self.stale.clear()
        pairing = [finding for findings in self.pairing.values() for finding in findings]
        duplicates = duplicates_of(group for groups in self.problems.values() for group in groups)
        chain = chain_from(index, self.leaf) if index.server_uses or index.server_results else []
        seg = self.seg
        return assemble(
            index,
            pairing,
            duplicates,
            self.cycles,
            list(self.oom.values()),
            self.count,
            message_findings(index, chain, self.leaf),
            lambda line: seg[line] >= 0,
        )

    def _woken(self) -> bool:
        if not self.waiting:
            return False
        uuids = self.index.uuids
        return any(uuids[line] in self.waiting for line in range(self.seen, len(uuids)))

    def _extend(self, count: int) -> None:
        index = self.index
        first = self.seen
        added = count - first
        self.seg.extend(array("i", [-1]) * added)
        self.pos.extend(array("i", [-1]) * added)
        self.state.extend(bytes(added))
        self.is_result.extend(bytes(added))
        self.seen = count
        self._before = {}  # line -> its segment before this append, for lines that changed
        touched: set[str] = set()
        for line, tool_id in self.tool_log:
            if self._tools_of is not None:
                self._tools_of.setdefault(line, []).append(tool_id)
            touched.add(tool_id)
            if index.results.count(tool_id) > OOM_RISK_RESULTS:
                # made again only when its lines grow
                self.oom[tool_id] = oom_finding(index, tool_id)
        self.tool_log.clear()
        results = index.result_lines
        start = len(results)
        while start > 0 and results[start - 1] >= first:
            start -= 1
        for line in results[start:]:
            self.is_result[line] = 1
            self._note_anchors(line)
        moved = self._move_leaf(first, count)
        self._settle(moved, range(first, count))
        flags = index.flags
        # (only user and assistant lines name tool ids: the progress and system lines a new prompt
        # often joins to the chain need no line -> tool ids map, which costs a walk of every tool)
        changed = [
            line
            for line, segment in self._before.items()
            if line < first and self.seg[line] != segment and flags[line] & MESSAGE
        ]
        if changed:  # earlier lines that joined, left or moved segment: the tool ids they name are paired again
            tools_of = self._tools()
            for line in changed:
                touched.update(tools_of.get(line, ()))
        for tool_id in touched:
            self._pair(tool_id)

    def _tools(self) -> dict[int, list[str]]:
        """Line -> the tool ids it names (uses and results), made from the index the first time it
        is needed: most appends only extend the chain, and the map costs about 90 bytes a line."""
        if self._tools_of is None:
            index = self.index
            self._tools_of = {}
            for tool_id, lines in index.tool_uses.items():
                for line in lines_in(lines):
                    self._tools_of.setdefault(line, []).append(tool_id)
            for tool_id, packed in index.packed_results.items():
                for value in lines_in(packed):
                    self._tools_of.setdefault(value >> BLOCK_BITS, []).append(tool_id)
        return self._tools_of

    def _newest_leaf(self, first: int, count: int) -> int | None:
        flags = self.index.flags
        for line in range(count - 1, first - 1, -1):
            if flags[line] & MESSAGE and not flags[line] & SIDECHAIN:
                return line
        if self.leaf is not None and not flags[self.leaf] & SIDECHAIN:
            return self.leaf
        # a subagent file: its newest sidechain message
        for line in range(count - 1, first - 1, -1):
            if flags[line] & MESSAGE:
                return line
        return self.leaf

    def _move_leaf(self, first: int, count: int) -> list[int]:
        """Move the chain to the newest message; return the lines that joined or left it."""
        leaf = self._newest_leaf(first, count)
        if leaf == self.leaf or leaf is None:
            return []
        path: list[int] = []
        crossed: list[bool] = []
        on_path: set[int] = set()
        line = leaf
        while line >= 0 and self.state[line] != CHAIN:
            if line in on_path:
                raise StartAgain  # a loop: the full walk reports it
            on_path.add(line)
            path.append(line)
            line, crossing = self._step(line)
            crossed.append(crossing)
        join = line
        left: list[int] = []
        line = self.leaf if self.leaf is not None else -1
        while line >= 0 and line != join:
            if self.state[line] != CHAIN or len(left) > len(self.state):
                raise StartAgain
            left.append(line)
            line = self._step(line)[0]
        for line in left:
            self._set(line, NOT_LOADED, -1)
            self.pos[line] = -1
        place = self.pos[join] + 1 if join >= 0 else 0
        segment = self.seg[join] if join >= 0 else 0
        for line, crossing in zip(reversed(path), reversed(crossed), strict=True):
            segment += crossing  # a compact boundary starts a newer segment than the line it continues from
            self._set(line, CHAIN, segment)
            self.pos[line] = place
            place += 1
        self.leaf = leaf
        self._move_turn(path, join)
        return path + left

    def _move_turn(self, path: list[int], join: int) -> None:
        """The latest turn: the first assistant line walking up from the new leaf."""
        index = self.index
        for line in path:
            if index.flags[line] & ASSISTANT:
                self.turn = (index.groups[line], line)
                return
        if join < 0:
            self.turn = (-1, -1)
            return
        if self.turn[1] < 0 or self.state[self.turn[1]] == CHAIN:
            return  # the walk above the join point is the old chain's, which found this turn
        line = join
        while line >= 0:
            if index.flags[line] & ASSISTANT:
                self.turn = (index.groups[line], line)
                return
            line = self._step(line)[0]
        self.turn = (-1, -1)

    def _settle(self, moved: list[int], added: range) -> None:
        """Judge again the lines whose chain membership may have changed, their siblings and their
        results."""
        index = self.index
        groups, group_lines = index.groups, index.group_lines
        state, seg, pos = self.state, self.seg, self.pos
        candidates = set(moved)
        candidates.update(added)
        for line in list(candidates):
            if groups[line] >= 0:
                candidates.update(group_lines[groups[line]])
        results: set[int] = set()
        for line in candidates:
            results.update(self.result_children.get(line, ()))
            if state[line] == CHAIN:
                continue
            if self.is_result[line]:
                results.add(line)
                continue
            nearest = -1
            if groups[line] >= 0:
                for member in group_lines[groups[line]]:
                    if state[member] == CHAIN and (nearest < 0 or pos[member] > pos[nearest]):
                        nearest = member
            if nearest >= 0:
                self._set(line, SIBLING, seg[nearest])
            else:
                self._set(line, NOT_LOADED, -1)
        for line in results:
            if state[line] == CHAIN:
                continue
            if not is_loaded_copy(index, line):
                self._set(line, NOT_LOADED, -1)
                continue
            for anchor in index.anchors(line):
                if state[anchor] in (CHAIN, SIBLING):
                    self._set(line, SPLICED, seg[anchor])
                    break
            else:
                self._set(line, NOT_LOADED, -1)

    def _set(self, line: int, state: int, segment: int) -> None:
        before = self.seg[line]
        self._before.setdefault(line, before)
        self.count += (segment >= 0) - (before >= 0)
        self.state[line] = state
        self.seg[line] = segment

    def _pair(self, tool_id: str) -> None:
        index = self.index
        uses = index.uses_of(tool_id)
        blocks = index.results[tool_id] if tool_id in index.packed_results else []
        groups = list(tool_groups(tool_id, uses, blocks, self.seg))
        if groups:
            self.problems[tool_id] = groups
        else:
            self.problems.pop(tool_id, None)
        self.stale.add(tool_id)
