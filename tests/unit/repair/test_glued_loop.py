"""A record glued after a torn one whose split would close a parent loop: riffd never edits a loop,
so the glue that hides it stays, and so does the parent the glued record is (no guess replaces a
parent that is in the file)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import plan_transcript_repair, scan_transcript_bytes
from helpers import damage
from riffd.repair.plan import ReplaceLine
from riffd.transcript.findings import FindingClass
from test_repair import repair_and_check

PROMPT, ANSWER = 4, 7  # the second turn's prompt and its closing text line


def glued_session(loop: bool) -> bytes:
    """The generated session with a torn record glued before the second prompt; with `loop`, that
    prompt's parent is the last line of its own turn."""
    lines = damage.generated_session(segments=1, turns=2, parallel=1)
    if loop:
        last = json.loads(lines[ANSWER])["uuid"]
        lines[PROMPT] = damage.set_parent(lines[PROMPT], last)
    lines[PROMPT] = lines[3][:150] + lines[PROMPT]  # a write cut off, the next one glued to it
    return b"".join(lines)


def checked(tmp_path: Path) -> Path:
    (tmp_path / "checked").mkdir()
    return tmp_path / "checked"


def findings(scanned) -> set[tuple[FindingClass, int]]:
    return {(finding.cls, finding.line) for finding in scanned.findings}


def test_a_split_that_would_close_a_loop_is_not_made(tmp_path: Path):
    data = glued_session(loop=True)
    path, scanned = scan_transcript_bytes(tmp_path, data)
    assert {
        (FindingClass.GLUED_RECORD, PROMPT + 1),
        (FindingClass.DANGLING_PARENT, PROMPT + 2),
    } <= findings(scanned)
    plan = plan_transcript_repair(path, scanned)
    touched = {edit.span.number for edit in plan.edits if isinstance(edit, ReplaceLine)}
    assert not {PROMPT + 1, PROMPT + 2} & touched, plan.edits
    assert any(
        f"glued record on line {PROMPT + 1} left alone" in note and "loop" in note
        for note in plan.notes
    ), plan.notes
    assert any(f"lost parent of line {PROMPT + 2} left alone" in note for note in plan.notes)
    _scanned, _plan, repaired, rescanned = repair_and_check(checked(tmp_path), data)
    assert FindingClass.PARENT_CYCLE not in {finding.cls for finding in rescanned.findings}
    assert repaired.splitlines()[PROMPT : PROMPT + 2] == data.splitlines()[PROMPT : PROMPT + 2]


def test_the_same_glue_without_a_loop_is_split(tmp_path: Path):
    data = glued_session(loop=False)
    path, scanned = scan_transcript_bytes(tmp_path, data)
    plan = plan_transcript_repair(path, scanned)
    assert [edit.span.number for edit in plan.edits if isinstance(edit, ReplaceLine)] == [
        PROMPT + 1
    ]
    assert {finding.cls for finding in plan.fixes} == {
        FindingClass.GLUED_RECORD,
        FindingClass.DANGLING_PARENT,
    }
    _scanned, _plan, repaired, rescanned = repair_and_check(checked(tmp_path), data)
    assert repaired == b"".join(damage.generated_session(segments=1, turns=2, parallel=1))
    assert not rescanned.findings
