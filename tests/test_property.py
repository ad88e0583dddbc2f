"""Property tests: a random mix of injected damage in a real transcript is always repaired soundly."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import damage
from conftest import corpus_injection_bases, corpus_lines
from riffd.repair.plan import RemoveLine
from test_repair import repair_and_check

BASE_LINES = {path.name: corpus_lines(path) for path in corpus_injection_bases()}
BASE_LINES["generated-9-segments"] = damage.generated_session(segments=9, turns=2, parallel=2)


def holds_tool_blocks(raw: bytes) -> bool:
    record = json.loads(raw)
    content = record.get("message", {}).get("content") if isinstance(record.get("message"), dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result") for block in content
    )


@settings(max_examples=200, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(BASE_LINES)),
    names=st.lists(st.sampled_from(sorted(damage.INJECTORS)), min_size=1, max_size=4),
    data=st.data(),
)
def test_mixed_damage_is_repaired_soundly(base: str, names: list[str], data: st.DataObject):
    lines = BASE_LINES[base]
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
        assert holds_tool_blocks(raw), f"plan removes line {edit.span.number}, which holds no tool block"
