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
- a record glued after a torn one is split off (unless that closes a parent loop), a parent lost
  where the loaded conversation stops is re-pointed by a clear guess, and the optional classes are
  repaired (riffd.repair.line_damage); a plan that changes the tree so leaves the pairing to the
  next scan;
- server tool blocks not paired inside their API message are removed like orphan results;
- cycles, and lines that do not parse but hold a lost record, are never edited; while any of them
  (or a dangling parent not re-pointed, or two different lines sharing a uuid) makes the tree
  uncertain, only duplicate results are removed, because the other repairs depend on knowing the
  conversation for sure.
"""

from __future__ import annotations

import time
from dataclasses import replace

from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.repair.edits import Choices, line_edits, parse_line_object, span_of
from riffd.repair.line_damage import plan_line_damage
from riffd.repair.outcomes import still_as_scanned
from riffd.repair.plan import LineBytes, RemoveLine, RepairOptions, RepairPlan
from riffd.transcript.detect import (
    distinct_uses,
    group_blocks,
    in_latest_turn,
    latest_turn,
    unpaired_tools,
)
from riffd.transcript.findings import REPAIRABLE, Finding, FindingClass
from riffd.transcript.index import (
    BLOCK_BITS,
    ResultBlock,
    TranscriptIndex,
    is_placeholder_result,
    lines_in,
)
from riffd.transcript.reader import read_span
from riffd.transcript.scan import ScannedFile
from riffd.transcript.shape import NOT_A_TRANSCRIPT, transcript_doubt

# A tool call of the latest turn gets a placeholder result only after this long without writes: its
# tool may still be running in a Claude Code that does not register live sessions.
IN_FLIGHT_GRACE_SECONDS = 3600.0

TORN_TAIL_REASON = "the last line is the fragment of an interrupted write; it is kept in the backup and the archive"


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
    work = Choices()
    by_class: dict[tuple[FindingClass, str | None], Finding] = {
        (finding.cls, finding.tool_id): finding
        for finding in scanned.findings
        if finding.cls in REPAIRABLE
    }
    chain = loaded.on_chain
    turn = latest_turn(index, loaded)
    groups = list(unpaired_tools(index, loaded))
    # The tree first: a record split off or a parent re-pointed changes the loaded conversation,
    # so the pairing of tool calls waits for the next scan (pass 1 stays: it is safe on any tree).
    tree_changed = plan_line_damage(scanned, fetch, work, options)

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

    uncertain = (
        "the plan splits or re-points lines, so the pairing is judged again after it (run `riffd "
        "fix` again)"
        if tree_changed
        else _tree_uncertainty(scanned, fetch, work)
    )

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

    _plan_server_tools(scanned, work, options, uncertain)
    edits = line_edits(index, work, fetch, options)
    torn = next(
        (finding for finding in scanned.findings if finding.cls is FindingClass.TORN_TAIL), None
    )
    if torn is not None and FindingClass.TORN_TAIL not in options.classes:
        work.notes.append(f"the torn last line {torn.line} left alone: the class is not enabled")
    elif torn is not None and torn.line == len(index):
        span = span_of(index, torn.line - 1)
        edits.append(
            RemoveLine(span, f"{TORN_TAIL_REASON} ({span.length} bytes, not JSON, no newline)")
        )
        work.fixes.append(torn)
    return RepairPlan(scanned.identity, tuple(edits), tuple(work.fixes), tuple(work.notes))


def cuts_torn_tail(plan: RepairPlan) -> bool:
    """Whether `plan` cuts off a torn last line (whose bytes must first be in the archive, as in the
    backup)."""
    return any(finding.cls is FindingClass.TORN_TAIL for finding in plan.fixes)


# The classes whose repair cuts bytes that are nowhere else in the file (a torn record, a stray
# line, an unanswered thinking, characters replaced): `fix` puts the file in the archive first.
CUTTING = frozenset(
    {
        FindingClass.TORN_TAIL,
        FindingClass.GLUED_RECORD,
        FindingClass.MALFORMED_LINE,
        FindingClass.THINKING_ONLY_TAIL,
        FindingClass.LONE_SURROGATE,
        FindingClass.NUL_CHARACTER,
        FindingClass.INVALID_UTF8,
    }
)


def cuts_bytes(plan: RepairPlan) -> bool:
    """Whether `plan` cuts bytes found nowhere else in the file (see CUTTING): they must first be
    in the archive, as in the backup."""
    return any(finding.cls in CUTTING for finding in plan.fixes)


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
    fs: FileSystem = REAL_FILES,
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
    # EIO retried per its policy (a seam alone gets the default one)
    files = fs if isinstance(fs, RetryingFS) else RetryingFS(fs)

    def unchanged() -> None:
        still_as_scanned(identity, files)

    unchanged()
    try:
        plan = plan_repair(
            scanned, lambda line: read_span(path, *index.span(line), fs=files), options
        )
    except ValueError:
        unchanged()  # a line that no longer parses because the file changed under the planner: say that
        raise
    unchanged()
    return plan


def _fixed(
    work: Choices,
    by_class: dict[tuple[FindingClass, str | None], Finding],
    cls: FindingClass,
    tool_id: str,
) -> None:
    finding = by_class.get((cls, tool_id))
    if finding is not None and finding not in work.fixes:
        work.fixes.append(finding)


def _tree_uncertainty(scanned: ScannedFile, fetch: LineBytes, work: Choices) -> str:
    """Return why the loaded conversation cannot be trusted for risky repairs, or '' when it can.

    Judged on what the plan leaves: a line sharing a uuid stops counting once the plan removes it.
    """
    index = scanned.index
    # Only a torn last line (no newline: a write cut off) leaves the conversation before it certain;
    # a malformed line ended by a newline does not, wherever it is (once the torn tail is cut, it
    # would be the last line, and a second repair would do what the first one refused).
    torn = len(index) - 1 if index.metrics.unterminated_last_line else -1
    lost = [uuid.encode() for uuid in index.dangling.values()]
    for line in index.malformed:
        if line != torn and line not in work.remove_lines:
            raw = fetch(line)
            if any(b'"uuid":"' + uuid + b'"' in raw for uuid in lost):  # a lost record
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


def _plan_server_tools(
    scanned: ScannedFile, work: Choices, options: RepairOptions, uncertain: str
) -> None:
    """Drop the server tool blocks not paired inside their API message (a line left empty goes,
    what hung from it re-pointed)."""
    index = scanned.index
    for finding in scanned.findings:
        cls = finding.cls
        if cls not in (FindingClass.ORPHAN_SERVER_TOOL_USE, FindingClass.ORPHAN_SERVER_TOOL_RESULT):
            continue
        if cls not in options.classes:
            work.notes.append(f"{cls} {finding.tool_id} left alone: the class is not enabled")
            continue
        if uncertain:
            work.notes.append(f"{cls} {finding.tool_id} left alone: {uncertain}")
            continue
        packed = (
            index.server_uses
            if cls is FindingClass.ORPHAN_SERVER_TOOL_USE
            else index.server_results
        )
        mask = (1 << BLOCK_BITS) - 1
        for value in lines_in(packed.get(finding.tool_id or "", ())):
            if value >> BLOCK_BITS == finding.line - 1:
                work.remove_blocks.setdefault(finding.line - 1, set()).add(value & mask)
        work.fixes.append(finding)


def _removed_whole(work: Choices, line: int, fetch: LineBytes) -> bool:
    """Return True when the plan so far removes `line` or every block of its content."""
    if line in work.remove_lines:
        return True
    positions = work.remove_blocks.get(line)
    if not positions:
        return False
    content = parse_line_object(fetch(line)).get("message", {}).get("content")
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
        if not is_placeholder_result(parse_line_object(fetch(block.line)), block.block)
    ]
    return min(genuine or candidates, key=lambda block: (block.line, block.block))


def _remove_block(
    work: Choices, index: TranscriptIndex, block: ResultBlock, fetch: LineBytes
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


def _remove_tool_use(work: Choices, line: int, tool_id: str, fetch: LineBytes) -> None:
    obj = parse_line_object(fetch(line))
    content = obj.get("message", {}).get("content", [])
    for position, block in enumerate(content):
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("id") == tool_id
        ):
            work.remove_blocks.setdefault(line, set()).add(position)
