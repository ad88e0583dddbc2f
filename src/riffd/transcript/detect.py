"""Detection: the findings of one indexed transcript, judged on the conversation Claude Code loads.

Only the loaded conversation (riffd.transcript.loaded: the chain from the newest message, its API
messages' other lines, the results hanging from them) goes to the API, so tool pairing is checked
there, segment by segment; branches left by rewinds and retries are history, not damage. The
tree's own damage (a uuid written twice, a dangling parent, a loop) is found on the whole file.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from riffd.display import shell_command
from riffd.transcript.findings import (
    CUTS_HISTORY,
    LATEST_TURN,
    Finding,
    FindingClass,
    api_error_for,
)
from riffd.transcript.index import BLOCK_BITS, FileMetrics, ResultBlock, TranscriptIndex, lines_in
from riffd.transcript.loaded import (
    LoadedConversation,
    in_latest_turn,
    latest_turn,
    loaded_conversation,
)
from riffd.transcript.messages import message_findings

# What riffd.transcript.loaded holds now, for the callers that import it from here still.
__all__ = [
    "OOM_RISK_RESULTS",
    "LoadedConversation",
    "ToolGroup",
    "assemble",
    "detect",
    "distinct_uses",
    "duplicates_of",
    "find_cycles",
    "group_blocks",
    "in_latest_turn",
    "latest_turn",
    "loaded_conversation",
    "oom_finding",
    "oom_risks",
    "pairing_findings",
    "suggestions",
    "tool_groups",
    "unpaired_tools",
]

log = logging.getLogger(__name__)

OOM_RISK_RESULTS = 100


@dataclass(frozen=True)
class ToolGroup:
    """The loaded tool uses and results of one tool id within one segment, when they do not pair
    1:1."""

    segment: int
    tool_id: str
    use_lines: list[int]  # lines holding the tool_use (a line written twice appears twice)
    result_positions: list[int]  # positions into index.results[tool_id]


def distinct_uses(index: TranscriptIndex, lines: list[int]) -> list[int]:
    """Drop repeats of a line written twice (same uuid): Claude Code loads a uuid once."""
    return [line for line in lines if index.line_of_uuid.get(index.uuids[line] or "") == line]


def unpaired_tools(index: TranscriptIndex, loaded: LoadedConversation) -> Iterator[ToolGroup]:
    """Yield the loaded (segment, tool id) groups that are not exactly one tool_use and one result.

    Works id by id, so a healthy file costs a lookup per tool id and builds nothing.
    """
    segment = loaded.segment
    packed, results = index.packed_results, index.results
    for tool_id, use_lines in index.tool_uses.items():
        answers = packed.get(tool_id)
        if (
            type(use_lines) is int
            and type(answers) is int
            and segment[use_lines] == segment[answers >> BLOCK_BITS]
        ):
            continue  # the common case, one use and one result: paired in one segment, or both not loaded
        blocks = results[tool_id] if answers is not None else []
        yield from tool_groups(tool_id, lines_in(use_lines), blocks, segment)
    for tool_id in packed:
        if tool_id not in index.tool_uses:
            yield from tool_groups(tool_id, [], results[tool_id], segment)


def group_blocks(index: TranscriptIndex, group: ToolGroup) -> list[ResultBlock]:
    """The result blocks of a tool group (the id's results are unpacked once, not once per
    block)."""
    results = index.results[group.tool_id] if group.result_positions else []
    return [results[position] for position in group.result_positions]


def tool_groups(
    tool_id: str, use_lines: Sequence[int], blocks: Sequence[ResultBlock], segment: array[int]
) -> Iterator[ToolGroup]:
    """Yield the (segment, tool id) groups of one tool id that are not one use and one result:
    `segment[line]` is a line's segment (any numbering: only equality counts), negative when the
    line is not loaded."""
    by_segment: dict[int, tuple[list[int], list[int]]] = {}
    for line in use_lines:
        if segment[line] >= 0:
            by_segment.setdefault(segment[line], ([], []))[0].append(line)
    for position, block in enumerate(blocks):
        if segment[block.line] >= 0:
            by_segment.setdefault(segment[block.line], ([], []))[1].append(position)
    for group_segment, (uses, positions) in sorted(by_segment.items()):
        if len(uses) != 1 or len(positions) != 1:
            yield ToolGroup(group_segment, tool_id, uses, positions)


def detect(index: TranscriptIndex, loaded: LoadedConversation | None = None) -> list[Finding]:
    """Given a finished index, return every finding, ordered by line."""
    loaded = loaded or loaded_conversation(index)
    cycles = find_cycles(index)
    for cycle in cycles:
        log.warning(
            "%s: parent cycle through lines %s; walks stop there",
            index.path,
            ", ".join(str(line + 1) for line in cycle),
        )
    oom = oom_risks(index)
    for tool_id in oom:
        log.warning(
            "%s: tool_use %s has %d results: loading this session may exhaust memory",
            index.path,
            tool_id,
            index.results.count(tool_id),
        )
    groups = list(unpaired_tools(index, loaded))
    return assemble(
        index,
        pairing_findings(index, latest_turn(index, loaded), groups),
        duplicates_of(groups),
        cycles,
        [oom_finding(index, tool_id) for tool_id in oom],
        loaded.count,
        message_findings(index, reversed(loaded.chain), loaded.leaf),
        loaded.segment_of.__contains__,
    )


def duplicates_of(groups: Iterable[ToolGroup]) -> int:
    """How many results the groups hold beyond one each (the `duplicates_detected` metric)."""
    return sum(
        len(group.result_positions) - 1 for group in groups if len(group.result_positions) > 1
    )


def assemble(
    index: TranscriptIndex,
    pairing: list[Finding],
    duplicates: int,
    cycles: list[list[int]],
    oom: list[Finding],
    loaded_count: int,
    messages: list[Finding],
    loaded: Callable[[int], bool],
) -> list[Finding]:
    """Given a finished index and what was found on its loaded conversation (the pairing findings
    and how many duplicate results they hold, the parent cycles, the findings of tool ids at risk of
    exhausting memory, how many lines load, the findings of its API messages, which lines load),
    return every finding in one order: by line, then class, tool id and lines. Sets the metrics
    that depend on them."""
    findings: list[Finding] = list(index.line_findings)
    findings += pairing
    findings += _tree_findings(index, cycles, loaded)
    findings += oom
    findings += messages
    index.metrics.loaded_lines = loaded_count
    index.metrics.duplicates_detected = duplicates
    findings.sort(
        key=lambda finding: (finding.line, finding.cls, finding.tool_id or "", finding.lines)
    )
    return findings


def pairing_findings(
    index: TranscriptIndex, turn: tuple[int, int], groups: list[ToolGroup]
) -> list[Finding]:
    """The findings of unpaired tool groups; a missing result of the latest `turn` is marked as
    such."""
    path = index.path
    findings: list[Finding] = []
    for group in groups:
        tool_id = group.tool_id
        blocks = group_blocks(index, group)
        if blocks:
            lines = tuple(sorted({block.line + 1 for block in blocks}))
            uuids = tuple(index.uuids[block.line] or "" for block in blocks)
            if not group.use_lines:
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
                how = (
                    "inside one line"
                    if len(lines) == 1
                    else ("including a line written twice" if same_line else "")
                )
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
        if not group.use_lines:
            continue
        distinct = distinct_uses(index, group.use_lines)
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
        if not blocks:
            line = group.use_lines[0]
            latest = in_latest_turn(index, turn, line)
            findings.append(
                Finding(
                    FindingClass.MISSING_TOOL_RESULT,
                    path,
                    (line + 1,),
                    f"tool_use {tool_id} has no tool_result on the loaded conversation"
                    + (" (latest turn: the tool may still be running)" if latest else ""),
                    uuids=(index.uuids[line] or "",),
                    tool_id=tool_id,
                    detail=LATEST_TURN if latest else None,
                    api_error=api_error_for(FindingClass.MISSING_TOOL_RESULT, tool_id),
                )
            )
    return findings


def _tree_findings(
    index: TranscriptIndex, cycles: list[list[int]], loaded: Callable[[int], bool]
) -> list[Finding]:
    path = index.path
    findings: list[Finding] = []
    for first, repeat in index.duplicate_uuid_lines:
        uuid = index.uuids[repeat] or ""
        if repeat in index.repeated_lines:
            findings.append(
                Finding(
                    FindingClass.REPEATED_LINE,
                    path,
                    (repeat + 1, first + 1),
                    f"line {repeat + 1} repeats line {first + 1} byte for byte (uuid {uuid}): "
                    "Claude Code loads it once, so the API never sees it twice",
                    uuids=(uuid,),
                    offset=index.offsets[repeat],
                )
            )
            continue
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
        cuts = loaded(line)
        findings.append(
            Finding(
                FindingClass.DANGLING_PARENT,
                path,
                (line + 1,),
                f"parentUuid {parent} names no line in this file, so line {line + 1} starts a history of its own"
                + (
                    " and the conversation Claude Code loads stops there (it loses the history "
                    "above, or the API refuses a conversation that starts with an assistant message)"
                    if cuts
                    else " (not on the conversation Claude Code loads)"
                ),
                uuids=(index.uuids[line] or "",),
                offset=index.offsets[line],
                detail=CUTS_HISTORY if cuts else None,
            )
        )
    for cycle in cycles:
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
    backwards all the way round); the index records those lines as it reads, so only they need a
    walk.
    """
    parents = index.parents
    cycles: list[list[int]] = []
    in_cycle: set[int] = set()
    for start in index.forward_parents:
        if start in in_cycle or parents[start] < 0:
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


def oom_risks(index: TranscriptIndex) -> list[str]:
    """The tool ids with more results in the file than a session can load safely."""
    return [
        tool_id
        for tool_id, packed in index.packed_results.items()
        if len(lines_in(packed)) > OOM_RISK_RESULTS
    ]


def oom_finding(index: TranscriptIndex, tool_id: str) -> Finding:
    """The finding of a tool id with more results than a session can load safely."""
    blocks = index.results[tool_id]
    return Finding(
        FindingClass.OOM_RISK,
        index.path,
        tuple(sorted({block.line + 1 for block in blocks}))[:20],
        f"tool_use {tool_id} has {len(blocks)} results in this file (more than {OOM_RISK_RESULTS}); "
        "loading it may exhaust memory: run `riffd fix` on it",
        tool_id=tool_id,
    )


def suggestions(
    path: str, findings: list[Finding], metrics: FileMetrics, backup_dir: str, riffd: str = "riffd"
) -> list[str]:
    """Given a file's findings, return plain-words advice for the user (empty when nothing
    helps), the commands it names starting with `riffd` (riffd.display.riffd_invocation)."""
    counts = Counter(finding.cls for finding in findings)
    advice: list[str] = []
    fix = f"{riffd} {shell_command('fix', path)}"
    duplicates = (
        counts[FindingClass.DUPLICATE_TOOL_RESULT] + counts[FindingClass.DUPLICATE_TOOL_USE]
    )
    if duplicates >= 3:
        advice.append(f"{duplicates} duplicates: the session was resumed repeatedly; run `{fix}`")
    elif (
        duplicates
        or counts[FindingClass.MISSING_TOOL_RESULT]
        or counts[FindingClass.ORPHAN_TOOL_RESULT]
    ):
        advice.append(
            f"the session may fail to resume with an API 400; run `{fix}` once it is closed"
        )
    if metrics.blocks_invalid >= 5 or counts[FindingClass.MALFORMED_LINE] >= 5:
        advice.append(
            "many invalid blocks or lines: the file may be damaged beyond pairing; check it with "
            f"`{riffd} {shell_command('scan', '--json', path)}`, and compare with the backups in "
            f"{backup_dir} (`{riffd} backups list`)"
        )
    if counts[FindingClass.TORN_TAIL]:
        advice.append(
            "the last line is cut off: if no Claude Code process has this session open, the write was "
            f"interrupted (crash or kill); `{fix}` cuts it off once the session is idle, after "
            "keeping it in the backup and the archive"
        )
    if counts[FindingClass.DANGLING_PARENT] or counts[FindingClass.PARENT_CYCLE]:
        advice.append(
            "broken parent links make resume show a cut history; riffd reports them and does not edit them"
        )
    return advice
