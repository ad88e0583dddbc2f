"""Property tests: a random mix of injected damage in a real transcript is always repaired
soundly."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import corpus_base_lines, examples, requires_corpus
from helpers import damage
from riffd.repair.plan import RemoveLine
from riffd.transcript.findings import FindingClass
from riffd.transcript.reader import parse_line
from test_repair import repair_and_check

pytestmark = requires_corpus  # the bases are the real transcripts (and one generated session)


@functools.cache
def base_lines() -> dict[str, list[bytes]]:
    """The transcripts damage is injected into, by name: read when the test first runs, never at
    import."""
    bases = {path.name: lines for path, lines in corpus_base_lines().items()}
    bases["generated-9-segments"] = damage.generated_session(segments=9, turns=2, parallel=2)
    return bases


def holds_tool_blocks(raw: bytes) -> bool:
    # (bytes that are not UTF-8 read as U+FFFD, as the client reads them: a line the invalid_utf8
    # damage also hit is still the tool line it was)
    record = json.loads(raw.decode("utf-8", "replace"))
    content = (
        record.get("message", {}).get("content")
        if isinstance(record.get("message"), dict)
        else None
    )
    return isinstance(content, list) and any(
        isinstance(block, dict)
        and str(block.get("type")).endswith(("tool_use", "tool_result"))  # server tools too
        for block in content
    )


def is_stray_or_repeat(raw: bytes, original: bytes, fixed: set[FindingClass]) -> bool:
    """A line the optional repairs drop: one that is not a JSON object, a thinking-only line at
    the end, a line written again byte for byte (each with its finding fixed)."""
    record = parse_line(raw.rstrip(b"\n"))
    if not isinstance(record, dict):
        return FindingClass.MALFORMED_LINE in fixed
    if original.count(raw) > 1:
        return FindingClass.REPEATED_LINE in fixed
    content = record.get("message", {}).get("content")
    thinking = isinstance(content, list) and all(
        isinstance(block, dict) and block.get("type") == "thinking" for block in content
    )
    return thinking and FindingClass.THINKING_ONLY_TAIL in fixed


@settings(
    max_examples=examples(200),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    base=st.deferred(lambda: st.sampled_from(sorted(base_lines()))),
    names=st.lists(st.sampled_from(sorted(damage.INJECTORS)), min_size=1, max_size=4),
    data=st.data(),
)
def test_mixed_damage_is_repaired_soundly(base: str, names: list[str], data: st.DataObject):
    lines = base_lines()[base]
    applied = []
    for name in names:
        try:
            damaged = damage.INJECTORS[name](
                lines, lambda points, name=name: data.draw(st.sampled_from(points), label=name)
            )
        except damage.NoPoint:
            continue
        lines = damaged.lines
        applied.append(name)
    original = b"".join(lines)
    with tempfile.TemporaryDirectory() as directory:
        _scanned, plan, _repaired, _rescanned = repair_and_check(Path(directory), original)
    removed = [edit for edit in plan.edits if isinstance(edit, RemoveLine)]
    for edit in removed:
        raw = original[edit.span.offset : edit.span.end]
        # the torn tail: a fragment, cut off
        if edit.span.end == len(original) and not raw.endswith(b"\n"):
            assert FindingClass.TORN_TAIL in {finding.cls for finding in plan.fixes}
            with pytest.raises(ValueError):
                json.loads(raw)
            continue
        fixed = {finding.cls for finding in plan.fixes}
        if is_stray_or_repeat(raw, original, fixed):
            continue
        assert holds_tool_blocks(raw), (
            f"plan removes line {edit.span.number}, which holds no tool block"
        )
