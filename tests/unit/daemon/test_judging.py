"""`judge` looks only at the detectors' findings for what only they can be (pending, missing,
repairable), so an append to a session holding thousands of redundant calls costs what one to a
clean session does; its verdict must stay the one a judge over every finding gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import transcript_line
from riffd.daemon.judging import TAIL_MARGIN, Seen, Verdict, judge
from riffd.daemon.outcome import WorkerSettings
from riffd.transcript.findings import (
    LATEST_TURN,
    REPAIRABLE,
    Finding,
    FindingClass,
    has_latest_turn_calls,
    pending_while_live,
    torn_tail,
)
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.scan import index_file

DETECTED = [cls for cls in FindingClass if cls is not FindingClass.REDUNDANT_TOOL_CALL]


def reference(
    seen: Seen, live: bool, settings: WorkerSettings, now: float
) -> tuple[list[Finding], int, bool, float | None]:
    """The verdict as judged over every finding, redundant calls included."""
    findings = list(seen.findings)
    if seen.redundant is not None and seen.index is not None:
        findings += seen.redundant
    if has_latest_turn_calls(findings):
        findings = pending_while_live(findings, live)
    quiet_for = now - seen.mtime
    # torn: an unfinished last line that is not JSON, once nothing was written for the quiet period
    if seen.tail_torn and seen.index is not None and quiet_for > settings.quiet_period:
        findings.append(torn_tail(seen.name, len(seen.index) + 1, seen.index.end))
    if seen.stored_repairable is not None and findings == seen.findings:
        repairable = seen.stored_repairable
    else:
        repairable = sum(1 for finding in findings if finding.cls in settings.classes)
    pending = any(finding.cls is FindingClass.PENDING_TOOL_CALL for finding in findings)
    # looked at again: a pending call after look_again_after; an unfinished last line just after
    # the quiet period is over
    waits = [settings.look_again_after] if pending else []
    if seen.tail and quiet_for <= settings.quiet_period:
        waits.append(settings.quiet_period - quiet_for + TAIL_MARGIN)
    return (
        findings,
        repairable,
        settings.repair and repairable > 0,
        min(waits) if waits else None,
    )


def finding(cls: FindingClass, number: int, latest: bool) -> Finding:
    return Finding(
        cls,
        "/p/s.jsonl",
        (number,),
        f"{cls} {number}",
        tool_id=f"toolu_{number}",
        detail=LATEST_TURN if latest else None,
    )


findings_of = st.lists(
    st.builds(finding, st.sampled_from(DETECTED), st.integers(1, 50), st.booleans()),
    max_size=6,
)


def small_index(tmp_path: Path) -> TranscriptIndex:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(transcript_line(number) for number in range(1, 4)))
    return index_file(path).index


def test_a_redundant_call_is_never_repaired() -> None:
    assert FindingClass.REDUNDANT_TOOL_CALL not in REPAIRABLE


@given(
    detected=findings_of,
    redundant=st.lists(st.integers(1, 50), max_size=8),
    with_index=st.booleans(),
    live=st.booleans(),
    tail=st.sampled_from([0, 12]),
    torn=st.booleans(),
    quiet=st.sampled_from([0.0, 1e9]),
    stored=st.sampled_from([None, 0, 3]),
    repair=st.booleans(),
    classes=st.sets(st.sampled_from(sorted(REPAIRABLE))),
)
@example(  # a torn tail counted among the repairable, after the redundant calls
    detected=[],
    redundant=[3],
    with_index=True,
    live=False,
    tail=12,
    torn=True,
    quiet=0.0,
    stored=None,
    repair=True,
    classes={FindingClass.TORN_TAIL},
)
@example(  # a pending call while live, beside redundant calls
    detected=[finding(FindingClass.MISSING_TOOL_RESULT, 7, True)],
    redundant=[2, 5],
    with_index=True,
    live=True,
    tail=0,
    torn=False,
    quiet=1e9,
    stored=None,
    repair=True,
    classes={FindingClass.MISSING_TOOL_RESULT},
)
def test_the_verdict_is_that_of_a_judge_over_every_finding(
    tmp_path_factory: pytest.TempPathFactory,
    detected: list[Finding],
    redundant: list[int],
    with_index: bool,
    live: bool,
    tail: int,
    torn: bool,
    quiet: float,
    stored: int | None,
    repair: bool,
    classes: set[FindingClass],
) -> None:
    index = small_index(tmp_path_factory.mktemp("judge")) if with_index else None
    calls = [finding(FindingClass.REDUNDANT_TOOL_CALL, number, False) for number in redundant]
    seen = Seen(
        "/p/s.jsonl",
        detected,
        index,
        calls if with_index else None,
        tail,
        1000.0,
        stored,
        tail_torn=bool(tail) and torn,
    )
    settings = WorkerSettings(repair=repair, quiet_period=quiet, classes=frozenset(classes))
    asked: list[bool] = []

    def is_live() -> bool:
        asked.append(True)
        return live

    verdict = judge(seen, is_live, settings, 2000.0)
    assert (
        verdict.findings,
        verdict.repairable,
        verdict.repair_due,
        verdict.look_again,
    ) == reference(seen, live, settings, 2000.0)
    assert isinstance(verdict, Verdict)
    # liveness is asked only when an unanswered call of the latest turn makes it matter
    assert bool(asked) == has_latest_turn_calls(detected)
