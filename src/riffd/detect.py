"""Detection: the findings of one indexed transcript, judged on the conversation Claude Code loads.

Claude Code resumes a session from its newest message: it walks `parentUuid` to the root, then
splices in the other lines of each API message on that chain (same `message.id`) and the
tool_result lines that hang from any of them. Only that loaded conversation goes to the API, so
tool pairing is checked there; branches left by rewinds and retries are history, not damage. A
compact boundary starts a new segment: the API sees pairs within a segment, never across one.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from riffd.findings import Finding, FindingClass, api_error_for
from riffd.transcript import COMPACT_BOUNDARY, MESSAGE, NODE, SIDECHAIN, FileMetrics, TranscriptIndex

log = logging.getLogger(__name__)

OOM_RISK_RESULTS = 100


@dataclass
class LoadedConversation:
    """The lines Claude Code would load: the chain from the newest message to the root, plus spliced lines.

    `segment_of` maps every loaded line index to its segment (0 = after the last compact boundary).
    """

    leaf: int | None
    chain: list[int]
    segment_of: dict[int, int]
    cycle_at: int | None = None

    @property
    def on_chain(self) -> set[int]:
        """The line indexes on the plain parent walk from the leaf."""
        return set(self.chain)


@dataclass
class Pairing:
    """Tool uses and results of the loaded conversation, keyed by (segment, tool id)."""

    uses: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    results: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # positions into index.results[id]


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
    chain: list[int] = []
    segment_of: dict[int, int] = {}
    cycle_at = None
    if leaf is None:
        return LoadedConversation(None, chain, segment_of)
    parents, flags = index.parents, index.flags
    segment = 0
    line = leaf
    while line >= 0:
        if line in segment_of:
            cycle_at = line
            log.warning("%s: parent chain loops at line %d; the walk stops there", index.path, line + 1)
            break
        segment_of[line] = segment
        chain.append(line)
        parent = parents[line]
        if parent < 0 and flags[line] & COMPACT_BOUNDARY:
            logical = index.line_of_uuid.get(index.logical_parent.get(line, ""))
            if logical is not None:
                segment += 1
                line = logical
                continue
        line = parent
    groups, group_lines = index.groups, index.group_lines
    for line in chain:
        group = groups[line]
        if group >= 0:
            for sibling in group_lines[group]:
                segment_of.setdefault(sibling, segment_of[line])
    for line, line_segment in list(segment_of.items()):
        for result_line in index.result_children.get(line, ()):
            segment_of.setdefault(result_line, line_segment)
    return LoadedConversation(leaf, chain, segment_of, cycle_at)


def pair_tools(index: TranscriptIndex, loaded: LoadedConversation) -> Pairing:
    """Given an index and its loaded conversation, group the loaded tool uses and results by (segment, id)."""
    pairing = Pairing()
    segment_of = loaded.segment_of
    for tool_id, lines in index.tool_uses.items():
        for line in lines:
            segment = segment_of.get(line)
            if segment is not None:
                pairing.uses.setdefault((segment, tool_id), []).append(line)
    for tool_id, blocks in index.results.items():
        for position, block in enumerate(blocks):
            segment = segment_of.get(block.line)
            if segment is not None:
                pairing.results.setdefault((segment, tool_id), []).append(position)
    return pairing


def distinct_uses(index: TranscriptIndex, lines: list[int]) -> list[int]:
    """Drop repeats of a line written twice (same uuid): Claude Code loads a uuid once."""
    return [line for line in lines if index.line_of_uuid.get(index.uuids[line] or "") == line]


def detect(index: TranscriptIndex, loaded: LoadedConversation | None = None) -> list[Finding]:
    """Given a finished index, return every finding, ordered by line."""
    loaded = loaded or loaded_conversation(index)
    pairing = pair_tools(index, loaded)
    findings: list[Finding] = list(index.line_findings)
    findings += _pairing_findings(index, loaded, pairing)
    findings += _tree_findings(index, loaded)
    findings += _oom_findings(index)
    index.metrics.loaded_lines = len(loaded.segment_of)
    index.metrics.duplicates_detected = sum(
        len(positions) - 1 for positions in pairing.results.values() if len(positions) > 1
    )
    findings.sort(key=lambda finding: (finding.line, finding.cls))
    return findings


def _pairing_findings(index: TranscriptIndex, loaded: LoadedConversation, pairing: Pairing) -> list[Finding]:
    path = index.path
    findings: list[Finding] = []
    newest_group = index.groups[loaded.leaf] if loaded.leaf is not None else -1
    for (segment, tool_id), positions in pairing.results.items():
        blocks = [index.results[tool_id][position] for position in positions]
        lines = tuple(sorted({block.line + 1 for block in blocks}))
        uuids = tuple(index.uuids[block.line] or "" for block in blocks)
        if (segment, tool_id) not in pairing.uses:
            findings.append(
                Finding(
                    FindingClass.ORPHAN_TOOL_RESULT,
                    path,
                    lines,
                    f"tool_result for {tool_id} answers no tool_use in the loaded conversation",
                    uuids=uuids,
                    tool_id=tool_id,
                    api_error=api_error_for(FindingClass.ORPHAN_TOOL_RESULT, tool_id),
                )
            )
        if len(blocks) > 1:
            same_line = len(lines) < len(blocks)
            how = "inside one line" if len(lines) == 1 else ("including a line written twice" if same_line else "")
            findings.append(
                Finding(
                    FindingClass.DUPLICATE_TOOL_RESULT,
                    path,
                    lines,
                    f"tool_use {tool_id} is answered {len(blocks)} times on the loaded conversation {how}".rstrip(),
                    uuids=uuids,
                    tool_id=tool_id,
                    api_error=api_error_for(FindingClass.DUPLICATE_TOOL_RESULT, tool_id),
                )
            )
    for (segment, tool_id), use_lines in pairing.uses.items():
        distinct = distinct_uses(index, use_lines)
        if len(distinct) > 1:
            findings.append(
                Finding(
                    FindingClass.DUPLICATE_TOOL_USE,
                    path,
                    tuple(line + 1 for line in distinct),
                    f"tool_use id {tool_id} appears in {len(distinct)} places on the loaded conversation",
                    uuids=tuple(index.uuids[line] or "" for line in distinct),
                    tool_id=tool_id,
                    api_error=api_error_for(FindingClass.DUPLICATE_TOOL_USE, tool_id),
                )
            )
        if (segment, tool_id) not in pairing.results:
            line = use_lines[0]
            latest = newest_group >= 0 and index.groups[line] == newest_group
            findings.append(
                Finding(
                    FindingClass.MISSING_TOOL_RESULT,
                    path,
                    (line + 1,),
                    f"tool_use {tool_id} has no tool_result on the loaded conversation"
                    + (" (newest message: the tool may still be running)" if latest else ""),
                    uuids=(index.uuids[line] or "",),
                    tool_id=tool_id,
                    detail="newest_message" if latest else None,
                    api_error=api_error_for(FindingClass.MISSING_TOOL_RESULT, tool_id),
                )
            )
    return findings


def _tree_findings(index: TranscriptIndex, loaded: LoadedConversation) -> list[Finding]:
    path = index.path
    findings: list[Finding] = []
    for first, repeat in index.duplicate_uuid_lines:
        uuid = index.uuids[repeat] or ""
        findings.append(
            Finding(
                FindingClass.DUPLICATE_UUID,
                path,
                (repeat + 1, first + 1),
                f"uuid {uuid} of line {repeat + 1} is already used by line {first + 1}; Claude Code loads only one",
                uuids=(uuid,),
                offset=index.offsets[repeat],
            )
        )
    for line, parent in sorted(index.dangling.items()):
        findings.append(
            Finding(
                FindingClass.DANGLING_PARENT,
                path,
                (line + 1,),
                f"parentUuid {parent} names no line in this file, so line {line + 1} starts a history of its own "
                "(resume shows a cut conversation)",
                uuids=(index.uuids[line] or "",),
                offset=index.offsets[line],
            )
        )
    for cycle in find_cycles(index):
        log.warning("%s: parent cycle through lines %s; walks stop there", path, ", ".join(str(c + 1) for c in cycle))
        findings.append(
            Finding(
                FindingClass.PARENT_CYCLE,
                path,
                tuple(sorted(line + 1 for line in cycle)),
                f"parentUuid links loop through {len(cycle)} line(s); walks stop there",
                uuids=tuple(index.uuids[line] or "" for line in cycle),
            )
        )
    return findings


def find_cycles(index: TranscriptIndex) -> list[list[int]]:
    """Return each parent cycle once, as line indexes.

    Every cycle holds a line whose parent does not come before it in the file (a loop cannot go
    backwards all the way round), so only those lines need a walk.
    """
    parents, kinds = index.parents, index.kinds
    cycles: list[list[int]] = []
    in_cycle: set[int] = set()
    for start in range(len(parents)):
        if parents[start] < start or kinds[start] != NODE or start in in_cycle:
            continue
        seen: dict[int, int] = {}
        path: list[int] = []
        line = start
        while line >= 0 and line not in seen and line not in in_cycle:
            seen[line] = len(path)
            path.append(line)
            line = parents[line]
        if line >= 0 and line in seen:
            cycle = path[seen[line] :]
            cycles.append(cycle)
            in_cycle.update(cycle)
    return cycles


def _oom_findings(index: TranscriptIndex) -> list[Finding]:
    findings = []
    for tool_id, blocks in index.results.items():
        if len(blocks) > OOM_RISK_RESULTS:
            log.warning("%s: tool_use %s has %d results: loading this session may exhaust memory",
                        index.path, tool_id, len(blocks))
            findings.append(
                Finding(
                    FindingClass.OOM_RISK,
                    index.path,
                    tuple(sorted({block.line + 1 for block in blocks}))[:20],
                    f"tool_use {tool_id} has {len(blocks)} results in this file (more than {OOM_RISK_RESULTS}); "
                    "loading it may exhaust memory: run `riffd fix` on it",
                    tool_id=tool_id,
                )
            )
    return findings


def suggestions(path: str, findings: list[Finding], metrics: FileMetrics, backup_dir: str) -> list[str]:
    """Given a file's findings, return plain-words advice for the user (empty when nothing helps)."""
    counts = Counter(finding.cls for finding in findings)
    advice: list[str] = []
    duplicates = counts[FindingClass.DUPLICATE_TOOL_RESULT] + counts[FindingClass.DUPLICATE_TOOL_USE]
    if duplicates >= 3:
        advice.append(f"{duplicates} duplicates: the session was resumed repeatedly; run `riffd fix {path}`")
    elif duplicates or counts[FindingClass.MISSING_TOOL_RESULT] or counts[FindingClass.ORPHAN_TOOL_RESULT]:
        advice.append(f"the session may fail to resume with an API 400; run `riffd fix {path}` once it is closed")
    if metrics.blocks_invalid >= 5 or counts[FindingClass.MALFORMED_LINE] >= 5:
        advice.append(
            "many invalid blocks or lines: the file may be damaged beyond pairing; check it with "
            f"`riffd scan --json {path}`, and compare with the backups in {backup_dir} (`riffd backups list`)"
        )
    if counts[FindingClass.TORN_TAIL]:
        advice.append("the last line is cut off: if no Claude Code process has this session open, the write was "
                      "interrupted (crash or kill); riffd keeps the fragment and does not edit it")
    if counts[FindingClass.DANGLING_PARENT] or counts[FindingClass.PARENT_CYCLE]:
        advice.append("broken parent links make resume show a cut history; riffd reports them and does not edit them")
    return advice

