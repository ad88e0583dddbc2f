"""Repair planning: the smallest set of line edits that fixes tool pairing, keeping the tree valid.

Pure: the planner gets a scanned file and a way to fetch the bytes of the few lines it names,
and returns a `RepairPlan`. Rules (see the README):
- each tool_use keeps exactly one result: the one on the chain the conversation continued from;
  failing that, a genuine result over a placeholder; failing that, the first in file order;
- orphan results and repeated tool_use ids are removed the same way, block by block;
- a line left with no content is removed and its children re-pointed to its parent;
- a missing result gets one synthetic `is_error` result line right after the tool_use line;
- a file riffd does not recognise as a Claude Code transcript (riffd.transcript.shape) gets an empty
  plan that says why: nothing in it is edited, a torn last line included;
- a torn last line (unterminated, not JSON: a write cut off) is cut off; the callers keep it in the
  backup and the archive first (Claude Code cannot resume past it);
- malformed lines mid-file, dangling parents and cycles are never edited; while any of them (or two
  different lines sharing a uuid) makes the tree uncertain, only duplicate results are removed,
  because the other repairs depend on knowing the conversation for sure.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from riffd.fsio import DEFAULT_RETRY, REAL_FS, FileSystem, RetryPolicy
from riffd.repair.line_edit import edited_line
from riffd.repair.outcomes import still_as_scanned
from riffd.repair.plan import Edit, InsertLine, LineSpan, RemoveLine, RepairPlan, ReplaceLine
from riffd.transcript.detect import (
    distinct_uses,
    group_blocks,
    in_latest_turn,
    latest_turn,
    unpaired_tools,
)
from riffd.transcript.findings import REPAIRABLE, Finding, FindingClass
from riffd.transcript.index import (
    DANGLING,
    NO_PARENT,
    ResultBlock,
    TranscriptIndex,
    is_placeholder_result,
)
from riffd.transcript.reader import parse_line, read_span
from riffd.transcript.scan import ScannedFile
from riffd.transcript.shape import NOT_A_TRANSCRIPT, transcript_doubt

# A tool call of the latest turn gets a placeholder result only after this long without writes: its
# tool may still be running in a Claude Code that does not register live sessions.
IN_FLIGHT_GRACE_SECONDS = 3600.0

TORN_TAIL_REASON = "the last line is the fragment of an interrupted write; it is kept in the backup and the archive"

SYNTHETIC_RESULT_TEXT = (
    "[Tool result missing: the tool call never returned a result (interrupted session); "
    "riffd added this placeholder so the session can resume]"
)

LineBytes = Callable[[int], bytes]


@dataclass(frozen=True)
class RepairOptions:
    """Which repairs run. `new_uuid` makes uuids for synthetic lines (tests pass a fixed one).

    `classes`: the finding classes to repair (the others are left alone, with a note).
    `answer_newest_message`: whether a tool_use of the latest turn (the last assistant message on
    the chain) may get a placeholder. Its tool may still be running under a Claude Code that does
    not register its sessions; a placeholder then becomes a duplicate when the real result arrives,
    so callers set this only for long-quiet files.
    """

    add_missing_results: bool = True
    answer_newest_message: bool = True
    classes: frozenset[FindingClass] = REPAIRABLE
    new_uuid: Callable[[], str] = field(default=lambda: str(uuid_module.uuid4()))


@dataclass
class _Work:
    """Block removals and insertions decided so far, before they become line edits."""

    remove_blocks: dict[int, set[int]] = field(default_factory=dict)
    remove_lines: set[int] = field(default_factory=set)
    synthetic_after: dict[int, list[str]] = field(
        default_factory=dict
    )  # tool_use line -> missing ids
    fixes: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_repair(
    scanned: ScannedFile, line_bytes: LineBytes, options: RepairOptions | None = None
) -> RepairPlan:
    """Given a scanned file (with identity) and a reader of its lines by index, return the repair
    plan.

    Raise ValueError if the scan was made without `with_identity` (a plan must name what it was made
    for).
    """
    options = options or RepairOptions()
    if scanned.identity is None:
        raise ValueError("plan_repair needs a scan made with with_identity=True")
    index, loaded = scanned.index, scanned.loaded
    cache: dict[int, bytes] = {}

    def fetch(line: int) -> bytes:
        if line not in cache:
            cache[line] = line_bytes(line)
        return cache[line]

    doubt = transcript_doubt(index, fetch, scanned.identity.path)
    if doubt:
        return RepairPlan(
            scanned.identity, (), (), (f"{NOT_A_TRANSCRIPT}: {doubt}; left as it is",)
        )
    work = _Work()
    by_class: dict[tuple[FindingClass, str | None], Finding] = {
        (finding.cls, finding.tool_id): finding
        for finding in scanned.findings
        if finding.cls in REPAIRABLE
    }
    chain = loaded.on_chain
    turn = latest_turn(index, loaded)
    groups = list(unpaired_tools(index, loaded))

    # Pass 1: duplicate results. Safe whatever the tree looks like (one result always stays), and
    # done first so that the certainty of the tree is judged on what this plan leaves, which keeps
    # plans idempotent.
    for group in groups:
        blocks = group_blocks(index, group)
        if not group.use_lines or len(blocks) < 2:
            continue
        if FindingClass.DUPLICATE_TOOL_RESULT not in options.classes:
            work.notes.append(
                f"duplicate results for {group.tool_id} left alone: the class is not enabled"
            )
            continue
        keeper = _choose_result(index, blocks, chain, fetch)
        for block in blocks:
            if block is not keeper:
                _remove_block(work, index, block, fetch)
        _fixed(work, by_class, FindingClass.DUPLICATE_TOOL_RESULT, group.tool_id)

    uncertain = _tree_uncertainty(scanned, fetch, work)

    # Pass 2: what needs a tree riffd can trust.
    for group in groups:
        tool_id = group.tool_id
        blocks = group_blocks(index, group)
        if not group.use_lines:
            if FindingClass.ORPHAN_TOOL_RESULT not in options.classes:
                work.notes.append(
                    f"orphan result for {tool_id} left alone: its class is not enabled"
                )
            elif uncertain:
                work.notes.append(f"orphan result for {tool_id} left alone: {uncertain}")
            else:
                for block in blocks:
                    _remove_block(work, index, block, fetch)
                _fixed(work, by_class, FindingClass.ORPHAN_TOOL_RESULT, tool_id)
            continue
        distinct = distinct_uses(index, group.use_lines)
        on_chain = [line for line in distinct if line in chain]
        keeper_line = (on_chain or distinct)[0]
        if len(distinct) > 1:
            if FindingClass.DUPLICATE_TOOL_USE not in options.classes:
                work.notes.append(
                    f"repeated tool_use {tool_id} left alone: the class is not enabled"
                )
            elif uncertain:
                work.notes.append(f"repeated tool_use {tool_id} left alone: {uncertain}")
            else:
                for line in distinct:
                    if line != keeper_line:
                        _remove_tool_use(work, line, tool_id, fetch)
                _fixed(work, by_class, FindingClass.DUPLICATE_TOOL_USE, tool_id)
        if blocks:
            continue
        if (
            not options.add_missing_results
            or FindingClass.MISSING_TOOL_RESULT not in options.classes
        ):
            work.notes.append(
                f"missing result for {tool_id} not added (adding synthetic results is switched off)"
            )
        elif not options.answer_newest_message and in_latest_turn(index, turn, keeper_line):
            work.notes.append(
                f"missing result for {tool_id} not added: it is in the latest turn and its tool may still be "
                "running; riffd adds a placeholder only once the file has been quiet for a long time"
            )
        elif uncertain:
            work.notes.append(f"missing result for {tool_id} not added: {uncertain}")
        elif index.results.get(tool_id):
            work.notes.append(
                f"missing result for {tool_id} not added: a result exists off the loaded conversation "
                f"(line {index.results[tool_id][0].line + 1}); adding a second one could make things worse"
            )
        else:
            work.synthetic_after.setdefault(keeper_line, []).append(tool_id)
            _fixed(work, by_class, FindingClass.MISSING_TOOL_RESULT, tool_id)

    edits = _edits(index, work, fetch, options)
    torn = next(
        (finding for finding in scanned.findings if finding.cls is FindingClass.TORN_TAIL), None
    )
    if torn is not None and FindingClass.TORN_TAIL not in options.classes:
        work.notes.append(f"the torn last line {torn.line} left alone: the class is not enabled")
    elif torn is not None and torn.line == len(index):
        span = _span(index, torn.line - 1)
        edits.append(
            RemoveLine(span, f"{TORN_TAIL_REASON} ({span.length} bytes, not JSON, no newline)")
        )
        work.fixes.append(torn)
    return RepairPlan(scanned.identity, tuple(edits), tuple(work.fixes), tuple(work.notes))


def cuts_torn_tail(plan: RepairPlan) -> bool:
    """Whether `plan` cuts off a torn last line (whose bytes must first be in the archive, as in the
    backup)."""
    return any(finding.cls is FindingClass.TORN_TAIL for finding in plan.fixes)


def keep_torn_tail(plan: RepairPlan, why: str) -> RepairPlan:
    """Return `plan` without its cut of the torn last line, saying `why` in its notes."""
    torn = [finding for finding in plan.fixes if finding.cls is FindingClass.TORN_TAIL]
    if not torn:
        return plan
    edits = tuple(
        edit
        for edit in plan.edits
        if not (
            isinstance(edit, RemoveLine)
            and edit.span.number == torn[0].line
            and edit.reason.startswith(TORN_TAIL_REASON)
        )
    )
    fixes = tuple(finding for finding in plan.fixes if finding.cls is not FindingClass.TORN_TAIL)
    return replace(
        plan,
        edits=edits,
        fixes=fixes,
        notes=(*plan.notes, f"the torn last line {torn[0].line} is kept: {why}"),
    )


def plan_file_repair(
    scanned: ScannedFile,
    options: RepairOptions | None = None,
    *,
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
    now: float | None = None,
) -> RepairPlan:
    """Given a scan made with identity, plan its repair, reading the lines the plan names from the
    file.

    The one place of the in-flight rule: a tool call of the latest turn gets a placeholder only once
    the file has been quiet for IN_FLIGHT_GRACE_SECONDS. Raise FileChanged when the file is no
    longer the one scanned (written to, or replaced), ValueError for a scan without identity,
    OSError when a line cannot be read.
    """
    options = options or RepairOptions()
    if scanned.identity is None:
        raise ValueError("plan_file_repair needs a scan made with with_identity=True")
    if (
        time.time() if now is None else now
    ) - scanned.identity.mtime_ns / 1e9 < IN_FLIGHT_GRACE_SECONDS:
        options = replace(options, answer_newest_message=False)
    path, index, identity = scanned.identity.path, scanned.index, scanned.identity

    def unchanged() -> None:
        still_as_scanned(identity, fs, retry)

    unchanged()
    try:
        plan = plan_repair(
            scanned, lambda line: read_span(path, *index.span(line), fs=fs, retry=retry), options
        )
    except ValueError:
        unchanged()  # a line that no longer parses because the file changed under the planner: say that
        raise
    unchanged()
    return plan


def _fixed(
    work: _Work,
    by_class: dict[tuple[FindingClass, str | None], Finding],
    cls: FindingClass,
    tool_id: str,
) -> None:
    finding = by_class.get((cls, tool_id))
    if finding is not None and finding not in work.fixes:
        work.fixes.append(finding)


def _tree_uncertainty(scanned: ScannedFile, fetch: LineBytes, work: _Work) -> str:
    """Return why the loaded conversation cannot be trusted for risky repairs, or '' when it can.

    Judged on what the plan leaves: a line sharing a uuid stops counting once the plan removes it.
    """
    index = scanned.index
    # Only a torn last line (no newline: a write cut off) leaves the conversation before it certain;
    # a malformed line ended by a newline does not, wherever it is (once the torn tail is cut, it
    # would be the last line, and a second repair would do what the first one refused).
    torn = len(index) - 1 if index.metrics.unterminated_last_line else -1
    for line in index.malformed:
        if line != torn:
            return f"line {line + 1} is malformed, so the conversation around it is uncertain"
    if index.dangling:
        line = min(index.dangling)
        return f"line {line + 1} has a dangling parent"
    if scanned.loaded.cycle_at is not None or any(
        f.cls is FindingClass.PARENT_CYCLE for f in scanned.findings
    ):
        return "the parent links loop"
    for first, repeat in index.duplicate_uuid_lines:
        if _removed_whole(work, repeat, fetch):
            continue
        if fetch(first).rstrip(b"\r\n") != fetch(repeat).rstrip(b"\r\n"):
            return f"lines {first + 1} and {repeat + 1} share a uuid but differ"
    return ""


def _removed_whole(work: _Work, line: int, fetch: LineBytes) -> bool:
    """Return True when the plan so far removes `line` or every block of its content."""
    if line in work.remove_lines:
        return True
    positions = work.remove_blocks.get(line)
    if not positions:
        return False
    content = _parse(fetch(line)).get("message", {}).get("content")
    return isinstance(content, list) and len(positions) >= len(content)


def _choose_result(
    index: TranscriptIndex, blocks: list[ResultBlock], chain: set[int], fetch: LineBytes
) -> ResultBlock:
    """The result to keep: on the chain the conversation continued from, else genuine, else
    first."""
    owners = [
        block
        for block in blocks
        if index.line_of_uuid.get(index.uuids[block.line] or "") == block.line
    ]
    on_chain = [block for block in owners if block.line in chain]
    candidates = on_chain or owners or blocks
    genuine = [
        block
        for block in candidates
        if not is_placeholder_result(_parse(fetch(block.line)), block.block)
    ]
    return min(genuine or candidates, key=lambda block: (block.line, block.block))


def _remove_block(
    work: _Work, index: TranscriptIndex, block: ResultBlock, fetch: LineBytes
) -> None:
    line = block.line
    owner = index.line_of_uuid.get(index.uuids[line] or "")
    if (
        owner is not None
        and owner != line
        and fetch(owner).rstrip(b"\r\n") == fetch(line).rstrip(b"\r\n")
    ):
        # An identical line written twice: drop the repeat whole; the uuid lives on in the first
        # copy.
        work.remove_lines.add(line)
        return
    work.remove_blocks.setdefault(line, set()).add(block.block)


def _remove_tool_use(work: _Work, line: int, tool_id: str, fetch: LineBytes) -> None:
    obj = _parse(fetch(line))
    content = obj.get("message", {}).get("content", [])
    for position, block in enumerate(content):
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("id") == tool_id
        ):
            work.remove_blocks.setdefault(line, set()).add(position)


def _parse(raw: bytes) -> dict[str, Any]:
    obj = parse_line(raw)
    if not isinstance(obj, dict):
        raise ValueError("planner asked to edit a line that does not parse")
    return obj


def _edits(
    index: TranscriptIndex, work: _Work, fetch: LineBytes, options: RepairOptions
) -> list[Edit]:
    edits: list[Edit] = []
    new_content: dict[int, list[Any]] = {}
    deleted = set(work.remove_lines)
    for line, positions in work.remove_blocks.items():
        if line in deleted:
            continue
        obj = _parse(fetch(line))
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

    for line in sorted(deleted):
        edits.append(
            RemoveLine(
                _span(index, line), "nothing left in the line after removing duplicate blocks"
            )
        )
    for line in sorted(set(new_content) | set(changes)):
        raw = fetch(line)
        edits.append(
            ReplaceLine(
                _span(index, line),
                edited_line(raw, new_content.get(line), changes.get(line, {})),
                _reason(new_content.get(line) is not None, changes.get(line, {})),
            )
        )
    for anchor, new_line in synthetic_lines.items():
        span = _span(index, anchor)
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


def _span(index: TranscriptIndex, line: int) -> LineSpan:
    offset, length = index.span(line)
    return LineSpan(line + 1, offset, length)


def _terminated(index: TranscriptIndex, line: int) -> bool:
    return not (line == len(index) - 1 and index.metrics.unterminated_last_line)


def _synthetic_line(
    index: TranscriptIndex, anchor: int, tool_ids: list[str], new_uuid: str, fetch: LineBytes
) -> bytes:
    """A user line answering `tool_ids` with is_error results, shaped like the lines around it."""
    source = _parse(fetch(anchor))
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
