"""Repair plans on injected damage: render them, re-scan, and check what changed and what did
not."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import (
    CORPUS_DIR,
    corpus_base_lines,
    corpus_lines,
    plan_transcript_repair,
    requires_corpus,
    scan_transcript_bytes,
)
from helpers import damage
from riffd.repair.plan import InsertLine, RemoveLine, RepairOptions, ReplaceLine, render
from riffd.repair.planner import plan_repair
from riffd.transcript.findings import FindingClass
from riffd.transcript.reader import read_span

TOOL_HEAVY = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"
KIMUSON = CORPUS_DIR / "d-kimuson-claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
pytestmark = requires_corpus  # every test here damages real transcripts


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their newlines; the last may lack one."""
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def finding_counts(findings) -> Counter:
    return Counter((f.cls, f.tool_id) for f in findings)


def assert_untouched_lines_kept(original: bytes, repaired: bytes, plan) -> None:
    """Every line the plan does not name is in the output, byte for byte and in order; nothing else
    is."""
    named = {edit.span.number for edit in plan.edits if isinstance(edit, RemoveLine | ReplaceLine)}
    untouched = [raw for number, raw in enumerate(split_lines(original), 1) if number not in named]
    new_lines = [edit.new_line for edit in plan.edits if isinstance(edit, ReplaceLine)]
    new_lines += [
        part
        for edit in plan.edits
        if isinstance(edit, InsertLine)
        for part in split_lines(edit.new_line)
    ]
    output = split_lines(repaired)
    leftovers, position = [], 0
    for raw in output:
        if position < len(untouched) and raw == untouched[position]:
            position += 1
        else:
            leftovers.append(raw)
    assert position == len(untouched), (
        f"untouched line {position + 1} of {len(untouched)} lost or moved"
    )
    assert Counter(leftovers) == Counter(line for line in new_lines if line)


def repair_and_check(tmp_path: Path, data: bytes, add_missing_results: bool = True):
    """Plan, render, re-scan, re-plan; assert the three properties; return (scanned, plan, repaired,
    rescanned)."""
    path, scanned = scan_transcript_bytes(tmp_path, data, "damaged.jsonl")
    plan = plan_transcript_repair(path, scanned, add_missing_results)
    repaired = render(data, plan.edits)
    repaired_path, rescanned = scan_transcript_bytes(tmp_path, repaired, "repaired.jsonl")
    before, after = finding_counts(scanned.findings), finding_counts(rescanned.findings)
    fixed = finding_counts(plan.fixes)
    for key, count in fixed.items():  # findings of a class without a tool id are counted
        assert after[key] <= before[key] - count, f"{key[0]} for {key[1]} still there"
    relinked = relinks(plan)
    new = after - before
    if relinked:  # lines the cut hid now load: their pairs are judged for the first time
        new = Counter({key: count for key, count in new.items() if key[0] not in PAIRING})
    assert not new, f"new findings after repair: {new}"
    assert_untouched_lines_kept(data, repaired, plan)
    second = plan_transcript_repair(repaired_path, rescanned, add_missing_results)
    if relinked and not second.is_empty:
        # a repair that splits or re-points lines leaves the pairing to the next one: one round
        # more, which must settle it
        assert not relinks(second), second.edits
        (tmp_path / "again").mkdir(exist_ok=True)
        _scanned, _second, repaired, rescanned = repair_and_check(
            tmp_path / "again", repaired, add_missing_results
        )
    assert second.is_empty or relinked, second.edits
    return scanned, plan, repaired, rescanned


PAIRING = {
    FindingClass.MISSING_TOOL_RESULT,
    FindingClass.ORPHAN_TOOL_RESULT,
    FindingClass.DUPLICATE_TOOL_RESULT,
    FindingClass.DUPLICATE_TOOL_USE,
    FindingClass.ORPHAN_SERVER_TOOL_USE,
    FindingClass.ORPHAN_SERVER_TOOL_RESULT,
}


def relinks(plan) -> bool:
    """Whether a plan splits a glued line or re-points a lost parent (the pairing waits)."""
    return any(
        finding.cls in (FindingClass.GLUED_RECORD, FindingClass.DANGLING_PARENT)
        for finding in plan.fixes
    )


def assert_only_parent_changed(old: bytes, new: bytes, parent: str) -> None:
    assert new == damage.set_parent(old, parent), (old[:200], new[:200])


def edits_by_kind(plan) -> dict[str, list[int]]:
    kinds: dict[str, list[int]] = {"remove": [], "replace": [], "insert": []}
    for edit in plan.edits:
        if isinstance(edit, RemoveLine):
            kinds["remove"].append(edit.span.number - 1)
        elif isinstance(edit, ReplaceLine):
            kinds["replace"].append(edit.span.number - 1)
        else:
            kinds["insert"].append(edit.after.number - 1)
    return {kind: sorted(lines) for kind, lines in kinds.items()}


@pytest.mark.parametrize("name", sorted(damage.REPAIRABLE_INJECTORS))
def test_repair_fixes_every_corpus_file(name: str, tmp_path: Path):
    repaired_any = 0
    for base, lines in corpus_base_lines().items():
        try:
            damaged = damage.REPAIRABLE_INJECTORS[name](lines, None)
        except damage.NoPoint:
            continue
        _scanned, plan, _repaired, rescanned = repair_and_check(tmp_path, damaged.data)
        assert {(f.cls, f.tool_id) for f in plan.fixes} == {
            (e.cls, e.tool_id)
            for e in damaged.expected
            if e.cls is not FindingClass.OOM_RISK and e.cls is not FindingClass.DUPLICATE_UUID
        }
        assert rescanned.findings == [], base.name
        repaired_any += 1
    assert repaired_any >= 3


def test_resumed_duplicate_keeps_the_genuine_result(tmp_path: Path):
    damaged = damage.inject_resumed_duplicate(corpus_lines(TOOL_HEAVY))
    marks = damaged.marks
    _scanned, plan, repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
    assert edits_by_kind(plan) == {
        "remove": [marks["synthetic"]],
        "replace": [marks["synthetic_assistant"]],
        "insert": [],
    }
    (replace,) = [edit for edit in plan.edits if isinstance(edit, ReplaceLine)]
    use_uuid = json.loads(damaged.lines[marks["tool_use"]])["uuid"]
    assert_only_parent_changed(
        damaged.lines[marks["synthetic_assistant"]], replace.new_line, use_uuid
    )
    assert damaged.lines[marks["genuine"]] in split_lines(repaired)
    assert b"Tool call interrupted" not in repaired
    assert [f.cls for f in plan.fixes] == [FindingClass.DUPLICATE_TOOL_RESULT]


def test_parallel_duplicate_off_the_walk_keeps_the_genuine_result(tmp_path: Path):
    for lines in (
        corpus_lines(TOOL_HEAVY),
        damage.generated_session(segments=2, turns=2, parallel=3),
    ):
        damaged = damage.inject_parallel_duplicate(lines)
        _scanned, plan, repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
        assert edits_by_kind(plan)["remove"] == [damaged.marks["synthetic"]]
        assert damaged.lines[damaged.marks["genuine"]] in split_lines(repaired)


def test_duplicate_inside_a_line_keeps_the_first_block(tmp_path: Path):
    original = corpus_lines(KIMUSON)
    damaged = damage.inject_duplicate_in_line(original)
    line = damaged.marks["result"]
    _scanned, plan, repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
    (edit,) = plan.edits
    assert isinstance(edit, ReplaceLine) and edit.span.number == line + 1
    assert json.loads(edit.new_line) == json.loads(original[line])
    assert b"replayed output" not in repaired


def test_identical_line_written_twice_loses_the_repeat(tmp_path: Path):
    original = corpus_lines(TOOL_HEAVY)
    damaged = damage.inject_identical_line(original)
    _scanned, plan, repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
    assert edits_by_kind(plan) == {"remove": [damaged.marks["repeat"]], "replace": [], "insert": []}
    assert repaired == b"".join(original)


def test_hundred_replayed_results_come_back_to_one(tmp_path: Path):
    original = corpus_lines(TOOL_HEAVY)
    damaged = damage.inject_many_results(original)
    _scanned, _plan, repaired, rescanned = repair_and_check(tmp_path, damaged.data)
    assert repaired == b"".join(original)
    assert rescanned.findings == []


def test_repeated_tool_use_is_removed_and_children_go_back(tmp_path: Path):
    for base in (KIMUSON, TOOL_HEAVY):
        original = corpus_lines(base)
        damaged = damage.inject_repeated_tool_use(original)
        _scanned, plan, repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
        assert damaged.marks["copy"] in edits_by_kind(plan)["remove"]
        assert repaired == b"".join(original)


def test_orphan_block_is_removed(tmp_path: Path):
    original = corpus_lines(TOOL_HEAVY)
    damaged = damage.inject_orphan(original)
    line = damaged.marks["result"]
    _scanned, plan, _repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
    (edit,) = plan.edits
    assert isinstance(edit, ReplaceLine)
    assert json.loads(edit.new_line) == json.loads(original[line])


def check_synthetic_line(raw: bytes, use_record: dict, tool_id: str, new_uuid: str) -> None:
    record = json.loads(raw)
    assert record["type"] == "user"
    assert record["uuid"] == new_uuid
    assert record["parentUuid"] == use_record["uuid"]
    for name in ("sessionId", "cwd", "version"):
        assert record[name] == use_record[name], name
    (block,) = record["message"]["content"]
    assert (
        block["type"] == "tool_result"
        and block["tool_use_id"] == tool_id
        and block["is_error"] is True
    )


def test_cut_file_gets_a_synthetic_result_after_the_tool_use(tmp_path: Path):
    damaged = damage.inject_cut_after_tool_use(corpus_lines(KIMUSON))
    use = damaged.marks["tool_use"]
    _scanned, plan, _repaired, rescanned = repair_and_check(tmp_path, damaged.data)
    (edit,) = plan.edits
    assert isinstance(edit, InsertLine) and edit.after.number == use + 1
    check_synthetic_line(
        edit.new_line,
        json.loads(damaged.lines[use]),
        damaged.tool_id,
        "00000000-0000-4000-8000-000000000001",
    )
    assert rescanned.loaded.leaf == use + 1


def test_removed_result_gets_a_synthetic_one_and_children_follow_it(tmp_path: Path):
    damaged = damage.inject_removed_result(corpus_lines(TOOL_HEAVY))
    use = damaged.marks["tool_use"]
    new_uuid = "00000000-0000-4000-8000-000000000001"
    _scanned, plan, _repaired, _rescanned = repair_and_check(tmp_path, damaged.data)
    kinds = edits_by_kind(plan)
    assert kinds["insert"] == [use] and kinds["remove"] == []
    tree = damage.Tree(damaged.lines)
    assert kinds["replace"] == tree.children(use)
    for edit in plan.edits:
        if isinstance(edit, ReplaceLine):
            assert_only_parent_changed(damaged.lines[edit.span.number - 1], edit.new_line, new_uuid)
        else:
            check_synthetic_line(
                edit.new_line, json.loads(damaged.lines[use]), damaged.tool_id, new_uuid
            )


def test_add_missing_results_off_adds_nothing(tmp_path: Path):
    damaged = damage.inject_cut_after_tool_use(corpus_lines(KIMUSON))
    path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    plan = plan_transcript_repair(path, scanned, add_missing_results=False)
    assert plan.is_empty and plan.fixes == ()
    assert any(damaged.tool_id in note and "switched off" in note for note in plan.notes)


@pytest.mark.parametrize("name", sorted(damage.REPORTED_INJECTORS))
def test_damage_riffd_does_not_edit_gives_an_empty_plan(name: str, tmp_path: Path):
    damaged = damage.REPORTED_INJECTORS[name](corpus_lines(TOOL_HEAVY), None)
    path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    assert scanned.findings
    plan = plan_transcript_repair(path, scanned)
    assert plan.is_empty and plan.fixes == ()


def first(points):
    return points[0]


@pytest.mark.parametrize(
    "uncertainty",
    [
        lambda lines: damage.inject_lost_record(lines, first),
        lambda lines: damage.inject_duplicate_uuid(lines, first),
    ],
    ids=["lost_record", "duplicate_uuid"],
)
def test_uncertain_tree_leaves_orphans_and_missing_alone_but_fixes_duplicates(
    uncertainty, tmp_path: Path
):
    lines = corpus_lines(KIMUSON)
    orphan = damage.inject_orphan(lines, first)
    missing = damage.inject_cut_after_tool_use(orphan.lines, lambda points: points[-1])
    duplicate = damage.inject_duplicate_in_line(missing.lines, first)
    damaged = uncertainty(duplicate.lines)
    _path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    classes = {f.cls for f in scanned.findings}
    assert {
        FindingClass.ORPHAN_TOOL_RESULT,
        FindingClass.MISSING_TOOL_RESULT,
        FindingClass.DUPLICATE_TOOL_RESULT,
    } <= classes
    _scanned, plan, _repaired, rescanned = repair_and_check(tmp_path, damaged.data)
    assert [(f.cls, f.tool_id) for f in plan.fixes] == [
        (FindingClass.DUPLICATE_TOOL_RESULT, duplicate.tool_id)
    ]
    assert any(f"orphan result for {orphan.tool_id} left alone" in note for note in plan.notes)
    assert any(f"missing result for {missing.tool_id} not added" in note for note in plan.notes)
    left = {(f.cls, f.tool_id) for f in rescanned.findings}
    assert (FindingClass.ORPHAN_TOOL_RESULT, orphan.tool_id) in left
    assert (FindingClass.MISSING_TOOL_RESULT, missing.tool_id) in left


def test_uncertain_tree_leaves_a_repeated_tool_use_alone(tmp_path: Path):
    lines = corpus_lines(KIMUSON)
    repeated = damage.inject_repeated_tool_use(lines, lambda points: points[-1])
    damaged = damage.inject_lost_record(repeated.lines, first)
    path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    assert FindingClass.DUPLICATE_TOOL_USE in {f.cls for f in scanned.findings}
    plan = plan_transcript_repair(path, scanned)
    assert plan.is_empty
    assert any(f"repeated tool_use {repeated.tool_id} left alone" in note for note in plan.notes)


def test_repointed_line_keeps_its_spacing(tmp_path: Path):
    """A file written with spaces after separators: re-pointing touches the parentUuid value
    only."""
    spaced = [json.dumps(json.loads(raw)).encode() + b"\n" for raw in corpus_lines(TOOL_HEAVY)]
    assert b'"parentUuid": "' in spaced[5]
    damaged = damage.inject_repeated_tool_use(spaced)
    path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    plan = plan_transcript_repair(path, scanned)
    use_uuid = json.loads(damaged.lines[damaged.marks["tool_use"]])["uuid"]
    replaced = [edit for edit in plan.edits if isinstance(edit, ReplaceLine)]
    assert replaced
    for edit in replaced:
        assert_only_parent_changed(damaged.lines[edit.span.number - 1], edit.new_line, use_uuid)
    assert render(damaged.data, plan.edits) == b"".join(spaced)


def test_newest_message_is_left_unanswered_when_asked(tmp_path: Path):
    """With answer_newest_message off, a tool call of the latest turn (its tool may still be
    running) gets no placeholder, while a result missing mid-conversation still does."""
    base = corpus_lines(CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl")
    for injected, expect_insert in (
        (damage.inject_cut_after_tool_use(base), False),
        (damage.inject_removed_result(base), True),
    ):
        path, scanned = scan_transcript_bytes(
            tmp_path, injected.data, name=f"{injected.name}.jsonl"
        )
        plan = plan_repair(
            scanned,
            lambda line, p=path, s=scanned: read_span(p, *s.index.span(line)),
            RepairOptions(answer_newest_message=False),
        )
        inserts = [edit for edit in plan.edits if isinstance(edit, InsertLine)]
        assert bool(inserts) is expect_insert, injected.name
        if not expect_insert:
            assert any("may still be running" in note for note in plan.notes)


def test_plan_is_a_fixed_point_when_a_duplicate_copy_is_what_made_the_tree_uncertain(
    tmp_path: Path,
):
    """Regression (found by test_property): an orphan block added to a result line that had been
    written twice makes the two copies differ (a shared uuid: uncertain). The plan removes the copy
    as a duplicate, so it must also remove the orphan in the same plan, not leave it for a second
    run."""
    lines = corpus_lines(CORPUS_DIR / "marot-spotter" / "short.jsonl")
    lines = damage.inject_duplicate_in_line(
        lines, lambda points: next(p for p in points if p[1] == 10)
    ).lines
    lines = damage.inject_identical_line(
        lines, lambda points: next(p for p in points if p[1] == 11)
    ).lines
    lines = damage.inject_orphan(lines, lambda points: 11).lines
    repair_and_check(tmp_path, b"".join(lines))


def test_a_malformed_line_that_cutting_the_torn_tail_leaves_last_still_stops_placeholders(
    tmp_path: Path,
) -> None:
    """Regression (found by test_property): tool calls without results, then a malformed line that
    holds a lost record, then a torn tail. Only the torn tail is exempt from "such a line makes the
    conversation uncertain"; the malformed line, once the cut left it last, was exempt too, so a
    second repair added the placeholders the first one refused."""
    lines = damage.generated_session(segments=1, turns=2, parallel=2)
    lines = damage.INJECTORS["cut_after_tool_use"](lines, lambda points: points[-1]).lines
    lines = damage.INJECTORS["lost_record"](lines, lambda points: points[-1]).lines
    lines = damage.INJECTORS["torn_tail"](lines, lambda points: points[-1]).lines
    scanned, plan, _repaired, rescanned = repair_and_check(tmp_path, b"".join(lines))
    assert {finding.cls for finding in scanned.findings} >= {
        FindingClass.MISSING_TOOL_RESULT,
        FindingClass.TORN_TAIL,
    }
    assert [finding.cls for finding in plan.fixes] == [FindingClass.TORN_TAIL]
    assert any(
        "is malformed, so the conversation around it is uncertain" in note for note in plan.notes
    )
    assert FindingClass.MISSING_TOOL_RESULT in {finding.cls for finding in rescanned.findings}
