"""Detection on real transcripts: healthy corpus files give nothing, injected damage gives exactly
its finding."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from conftest import (
    CORPUS_DIR,
    corpus_base_lines,
    corpus_lines,
    corpus_transcript_params,
    corpus_transcripts,
    requires_corpus,
    scan_transcript_bytes,
)
from helpers import damage
from riffd.transcript.findings import INFORMATIONAL, Finding, FindingClass
from riffd.transcript.index import is_placeholder_result
from riffd.transcript.reader import BOM, parse_line
from riffd.transcript.scan import scan_file

# The Messages API's own words (section 3 of the format notes), written out here on purpose.
API_TEXTS = {
    FindingClass.MISSING_TOOL_RESULT: "`tool_use` ids were found without `tool_result` blocks immediately after: {}",
    FindingClass.ORPHAN_TOOL_RESULT: (
        "unexpected `tool_use_id` found in `tool_result` blocks: {}. Each `tool_result` block must have a "
        "corresponding `tool_use` block in the previous message."
    ),
    FindingClass.DUPLICATE_TOOL_RESULT: (
        "each tool_use must have a single result. Found multiple `tool_result` blocks with id: {}"
    ),
    FindingClass.DUPLICATE_TOOL_USE: "`tool_use` ids must be unique",
    # measured with Claude Code 2.1.332 (advisor on) and, for the others, 2.1.75
    FindingClass.ORPHAN_SERVER_TOOL_RESULT: (
        "unexpected `tool_use_id` found in `advisor_tool_result` blocks: {}"
    ),
    FindingClass.ORPHAN_SERVER_TOOL_USE: (
        "tool use with id `{}` was found without a corresponding result block"
    ),
    FindingClass.LONE_SURROGATE: "The request body is not valid JSON: no low surrogate in string",
}


def finding_keys(findings) -> list[tuple]:
    return sorted((f.cls.value, f.lines, f.tool_id, f.detail) for f in findings)


def expected_keys(expected: list[damage.Expect]) -> list[tuple]:
    return sorted((e.cls.value, e.lines, e.tool_id, e.detail) for e in expected)


@requires_corpus
def test_corpus_is_there():
    assert len(corpus_transcripts()) >= 11, CORPUS_DIR
    assert any(path.parent.name == "subagents" for path in corpus_transcripts())


@pytest.mark.parametrize("path", corpus_transcript_params())
def test_real_transcript_gives_no_finding(path: Path):
    report = scan_file(path)
    assert report.error is None
    assert [finding.to_json() for finding in report.findings] == []
    assert report.metrics["blocks_invalid"] == 0
    assert report.metrics["duplicates_detected"] == 0
    assert report.metrics["lines"] == len(corpus_lines(path))


@requires_corpus
@pytest.mark.parametrize("name", sorted(damage.INJECTORS))
def test_injected_damage_gives_exactly_its_findings(name: str, tmp_path: Path):
    injector = damage.INJECTORS[name]
    injected = 0
    for base, lines in corpus_base_lines().items():
        try:
            damaged = injector(lines, None)
        except damage.NoPoint:
            continue
        injected += 1
        _path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
        assert finding_keys(scanned.findings) == expected_keys(damaged.expected), base.name
        for finding in scanned.findings:
            template = API_TEXTS.get(finding.cls)
            assert finding.api_error == (template.format(finding.tool_id) if template else None)
    assert injected >= 3, f"{name} found a place in only {injected} corpus files"


@requires_corpus
def test_every_finding_class_has_an_injector():
    base = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"
    produced = set()
    for injector in damage.INJECTORS.values():
        try:
            damaged = injector(corpus_lines(base), None)
        except damage.NoPoint:  # another injector gives its class here
            continue
        for expect in damaged.expected:
            produced.add(expect.cls)
    assert produced == set(FindingClass) - INFORMATIONAL  # informational classes are not damage


@requires_corpus
def test_resumed_duplicate_names_both_results(tmp_path: Path):
    damaged = damage.inject_resumed_duplicate(
        corpus_lines(CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl")
    )
    _path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    (finding,) = scanned.findings
    assert finding.cls is FindingClass.DUPLICATE_TOOL_RESULT
    assert finding.lines == (damaged.marks["synthetic"] + 1, damaged.marks["genuine"] + 1)
    index = scanned.index
    blocks = index.results[damaged.tool_id]
    records = [parse_line(raw.rstrip(b"\n")) for raw in damaged.lines]
    assert [
        (block.line, is_placeholder_result(records[block.line], block.block)) for block in blocks
    ] == [
        (damaged.marks["synthetic"], True),
        (damaged.marks["genuine"], False),
    ]
    assert finding.api_error == API_TEXTS[FindingClass.DUPLICATE_TOOL_RESULT].format(
        damaged.tool_id
    )


def test_parallel_results_off_the_walk_are_loaded_not_missing(tmp_path: Path):
    lines = damage.generated_session(segments=1, turns=2, parallel=3)
    _path, scanned = scan_transcript_bytes(tmp_path, b"".join(lines))
    assert scanned.findings == []
    tree = damage.Tree(lines)
    off_walk = [line for line in scanned.index.result_lines if line not in tree.on_chain]
    assert len(off_walk) == 2 * 2  # all but the last result of each 3-call turn hang off the walk
    assert all(line in scanned.loaded.segment_of for line in off_walk)


# --- the reader's edge cases ----------------------------------------------------------------------

USE_ID = "toolu_01EdgeCase00000000000001"


def small_session(
    result_block: dict | None = None, tool_use_result: object = "ok", prompt: object = "hi"
) -> list[dict]:
    """Prompt, tool_use, tool_result, closing text: four records of one healthy conversation."""
    result = (
        {"type": "tool_result", "tool_use_id": USE_ID, "content": "fine"}
        if result_block is None
        else result_block
    )
    return [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "sessionId": "s",
            "message": {"role": "user", "content": prompt},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "sessionId": "s",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "tool_use", "id": USE_ID, "name": "Bash", "input": {}}],
            },
        },
        {
            "type": "user",
            "uuid": "r1",
            "parentUuid": "a1",
            "sessionId": "s",
            "toolUseResult": tool_use_result,
            "message": {"role": "user", "content": [result]},
        },
        {
            "type": "assistant",
            "uuid": "a2",
            "parentUuid": "r1",
            "sessionId": "s",
            "message": {
                "id": "msg_2",
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
            },
        },
    ]


def as_bytes(records: list[dict], newline: bytes = b"\n") -> bytes:
    return b"".join(json.dumps(record).encode() + newline for record in records)


def test_bom_at_start_is_not_damage(tmp_path: Path):
    _path, scanned = scan_transcript_bytes(tmp_path, BOM + as_bytes(small_session()))
    assert scanned.findings == []
    assert scanned.index.uuids[0] == "u1"
    assert scanned.index.metrics.blocks_valid == 1


def test_blank_lines_are_counted_not_reported(tmp_path: Path):
    records = [json.dumps(record).encode() + b"\n" for record in small_session()]
    data = records[0] + b"\n" + records[1] + b"   \n\n" + records[2] + records[3] + b"\n"
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert scanned.findings == []
    assert scanned.index.metrics.blank_lines == 4
    assert scanned.index.metrics.lines == 8


def test_crlf_line_ends_are_not_damage(tmp_path: Path):
    _path, scanned = scan_transcript_bytes(tmp_path, as_bytes(small_session(), b"\r\n"))
    assert scanned.findings == []
    assert len(scanned.loaded.chain) == 4


@pytest.mark.parametrize("prompt", ["typed prompt", [{"type": "text", "text": "list prompt"}]])
@pytest.mark.parametrize("tool_use_result", ["Error: plain string", {"stdout": "x", "stderr": ""}])
def test_content_and_tool_use_result_shapes(tmp_path: Path, prompt, tool_use_result):
    _path, scanned = scan_transcript_bytes(
        tmp_path, as_bytes(small_session(prompt=prompt, tool_use_result=tool_use_result))
    )
    assert scanned.findings == []
    assert scanned.index.metrics.blocks_processed == 1


@pytest.mark.parametrize(
    ("is_error", "synthetic"),
    [(True, True), (False, False), (None, False), ("absent", False)],
)
def test_is_error_values(tmp_path: Path, is_error, synthetic):
    block = {
        "type": "tool_result",
        "tool_use_id": USE_ID,
        "content": "[Tool call interrupted by user]",
    }
    if is_error != "absent":
        block["is_error"] = is_error
    _path, scanned = scan_transcript_bytes(tmp_path, as_bytes(small_session(result_block=block)))
    assert scanned.findings == []
    (result,) = scanned.index.results[USE_ID]
    record = parse_line(_path.read_bytes().splitlines()[result.line])
    assert isinstance(record, dict)
    assert is_placeholder_result(record, result.block) is synthetic


def test_unknown_record_types_are_kept_out_of_the_tree(tmp_path: Path):
    records = small_session()
    records.insert(
        2, {"type": "brand-new-kind", "payload": {"nested": [1, 2]}, "timestamp": "2030-01-01"}
    )
    records.append({"type": "speculation-accept", "uuid": None})
    _path, scanned = scan_transcript_bytes(tmp_path, as_bytes(records))
    assert scanned.findings == []
    assert scanned.index.metrics.lines == 6


def test_huge_line_is_read_whole(tmp_path: Path):
    block = {"type": "tool_result", "tool_use_id": USE_ID, "content": "x" * (5 * 1024 * 1024)}
    data = as_bytes(small_session(result_block=block))
    assert len(data) > 5 * 1024 * 1024
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert scanned.findings == []
    assert scanned.index.lengths[2] > 5 * 1024 * 1024
    assert sum(scanned.index.lengths) == len(data)


def test_unterminated_last_line_that_parses_is_fine(tmp_path: Path):
    data = as_bytes(small_session())[:-1]
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert scanned.findings == []
    assert scanned.index.metrics.unterminated_last_line is True
    assert scanned.loaded.leaf == 3


def test_unterminated_last_line_that_does_not_parse_is_a_torn_tail(tmp_path: Path):
    data = as_bytes(small_session()) + b'{"type":"assistant","uuid":"a3","parentUuid":"a2","mess'
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert [(f.cls, f.lines) for f in scanned.findings] == [(FindingClass.TORN_TAIL, (5,))]
    assert scanned.findings[0].offset == len(as_bytes(small_session()))


def test_terminated_bad_last_line_is_malformed_not_torn(tmp_path: Path):
    data = as_bytes(small_session()) + b'{"type":"assistant","uuid":"a3","parentUuid":"a2","mess\n'
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert [(f.cls, f.lines) for f in scanned.findings] == [(FindingClass.MALFORMED_LINE, (5,))]


@requires_corpus
def test_nul_run_is_malformed_with_its_reason(tmp_path: Path):
    damaged = damage.inject_nul_run(corpus_lines(CORPUS_DIR / "marot-spotter" / "short.jsonl"))
    _path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    (finding,) = scanned.findings
    assert finding.cls is FindingClass.MALFORMED_LINE
    assert "NUL" in finding.message


# --- compaction -----------------------------------------------------------------------------------


@requires_corpus
def test_compact_boundary_continues_to_its_logical_parent():
    path = CORPUS_DIR / "daaain-claude-code-log" / "dag_compact_after_rewind.jsonl"
    tree = damage.Tree(corpus_lines(path))
    loaded = tree.loaded
    boundary = next(
        i
        for i, record in enumerate(tree.records)
        if record and record.get("subtype") == "compact_boundary"
    )
    assert tree.index.parents[boundary] < 0
    assert boundary in tree.on_chain
    logical = tree.index.line_of_uuid[tree.records[boundary]["logicalParentUuid"]]
    assert logical in tree.on_chain
    assert loaded.segment_of[boundary] == 0 and loaded.segment_of[logical] == 1
    # The rewound branch (a prompt and its answer that the conversation left) is history, not
    # loaded.
    rewound = [i for i in range(len(tree.lines)) if i not in loaded.segment_of]
    assert len(rewound) == 2
    assert all(tree.index.parents[i] < boundary for i in rewound)
    assert scan_file(path).findings == []


def test_many_compactions_still_pair(tmp_path: Path):
    lines = damage.generated_session(segments=9, turns=3, parallel=2)
    _path, scanned = scan_transcript_bytes(tmp_path, b"".join(lines))
    assert scanned.findings == []
    assert set(scanned.loaded.segment_of.values()) == set(range(9))
    assert len(scanned.loaded.segment_of) == len(lines)
    metrics = scanned.index.metrics
    assert (metrics.blocks_processed, metrics.blocks_valid, metrics.unique_tool_use_ids) == (
        54,
        54,
        54,
    )


def test_ids_reused_in_another_segment_are_not_duplicates(tmp_path: Path):
    lines = damage.generated_session(segments=9, turns=1, parallel=1)
    data = b"".join(lines).replace(b"toolu_01Gen010000", b"toolu_01Gen000000")
    _path, scanned = scan_transcript_bytes(tmp_path, data)
    assert scanned.findings == []
    assert scanned.index.metrics.unique_tool_use_ids == 8


def test_damage_in_an_early_segment_is_found(tmp_path: Path):
    lines = damage.generated_session(segments=9, turns=2, parallel=2)
    first_boundary = next(i for i, raw in enumerate(lines) if b"compact_boundary" in raw)
    damaged = damage.inject_removed_result(
        lines, lambda points: next(p for p in points if p[1] < first_boundary)
    )
    _path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    assert finding_keys(scanned.findings) == expected_keys(damaged.expected)
    assert scanned.findings[0].line <= first_boundary


def test_a_result_across_a_boundary_is_an_orphan_and_leaves_its_use_unanswered(tmp_path: Path):
    lines = damage.generated_session(segments=2, turns=1, parallel=1)
    tree = damage.Tree(lines)
    boundary = next(i for i, raw in enumerate(lines) if b"compact_boundary" in raw)
    summary = boundary + 1
    ((use, result, tool_id),) = [pair for pair in tree.pairs() if pair[1] < boundary]
    # The result is written after the compact summary, as its child: the use stays before the
    # boundary.
    record = dict(tree.records[result], parentUuid=tree.uuid(summary))
    del record["sourceToolAssistantUUID"]
    after = lines[summary + 1 :]
    after[0] = damage.set_parent(after[0], record["uuid"])
    before = lines[:result] + lines[result + 1 : summary + 1]
    before[result] = damage.set_parent(before[result], tree.uuid(use))
    moved = [*before, damage.dumps(record), *after]
    _path, scanned = scan_transcript_bytes(tmp_path, b"".join(moved))
    assert sorted((f.cls, f.lines, f.tool_id) for f in scanned.findings) == [
        (FindingClass.MISSING_TOOL_RESULT, (use + 1,), tool_id),
        (FindingClass.ORPHAN_TOOL_RESULT, (summary + 1,), tool_id),
    ]


# --- metrics --------------------------------------------------------------------------------------


@requires_corpus
def test_metrics_count_blocks_duplicates_and_ids(tmp_path: Path):
    base = corpus_lines(
        CORPUS_DIR / "d-kimuson-claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
    )
    _path, healthy = scan_transcript_bytes(tmp_path, b"".join(base))
    assert Counter(
        {
            k: v
            for k, v in healthy.index.metrics.to_json().items()
            if k.startswith("blocks") or k == "unique_tool_use_ids"
        }
    ) == Counter({"blocks_processed": 12, "blocks_valid": 12, "unique_tool_use_ids": 12})

    in_line = damage.inject_duplicate_in_line(base)
    _path, scanned = scan_transcript_bytes(tmp_path, in_line.data)
    metrics = scanned.index.metrics
    assert (metrics.blocks_processed, metrics.blocks_valid, metrics.blocks_invalid) == (13, 13, 0)
    assert (metrics.duplicates_detected, metrics.unique_tool_use_ids) == (1, 12)

    invalid = damage.inject_invalid_type(damage.inject_invalid_missing_field(base).lines)
    _path, scanned = scan_transcript_bytes(tmp_path, invalid.data)
    metrics = scanned.index.metrics
    assert (metrics.blocks_processed, metrics.blocks_valid, metrics.blocks_invalid) == (14, 12, 2)
    assert metrics.failures_by_type == {"missing_field": 1, "invalid_type": 1}

    many = damage.inject_many_results(base)
    _path, scanned = scan_transcript_bytes(tmp_path, many.data)
    assert scanned.index.metrics.duplicates_detected == damage.OOM_EXTRA_RESULTS - 1
    assert scanned.index.metrics.blocks_valid == 12 + damage.OOM_EXTRA_RESULTS - 1


def test_a_finding_as_json_is_every_field_in_order_without_nones() -> None:
    full = Finding(
        FindingClass.GLUED_RECORD,
        "/p.jsonl",
        (3, 9),
        "why",
        uuids=("u1", "u2"),
        tool_id="toolu_1",
        offset=120,
        detail="in_line",
        api_error="400",
    )
    # a new field shows up here; `breaks` (which clients it breaks, by class) comes last
    assert [*[field.name for field in fields(Finding)][1:], "breaks"] == list(full.to_json())[1:]
    expected = {("class" if name == "cls" else name): value for name, value in asdict(full).items()}
    assert full.to_json() == expected | {
        "class": "glued_record",
        "lines": [3, 9],
        "uuids": ["u1", "u2"],
        "breaks": "breaks resume in current clients",
    }
    assert next(iter(full.to_json())) == "class"
    bare = Finding(FindingClass.DUPLICATE_TOOL_RESULT, "/p.jsonl", (), "why")
    assert bare.breaks is None  # not measured with the real client
    assert bare.to_json() == {
        "class": "duplicate_tool_result",
        "path": "/p.jsonl",
        "lines": [],
        "message": "why",
        "uuids": [],
    }
    assert Finding.from_json(full.to_json()) == full and Finding.from_json(bare.to_json()) == bare
