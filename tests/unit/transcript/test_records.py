"""The fast decoder (riffd.transcript.records) agrees with the reference parse on every line it
takes.

The reference is `parse_line` (orjson, then the standard library for valid JSON orjson refuses);
what detection reads of a parsed line is `record_of(obj)`. The fast decoder may decline a line (the
reference then decides), but a Record it returns must equal the reference's, field by field. Lines
are generated as raw bytes so that they can hold what a serializer never writes: keys written twice,
keys spelled with escapes, values of unusual types, numbers beyond a double, lone surrogates,
invalid UTF-8 inside values detection never reads, and bytes flipped, cut or added anywhere (also in
real transcripts).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import corpus_transcript_params, corpus_transcripts, examples, requires_corpus
from helpers import damage
from helpers.run import run_riffd
from riffd.transcript.index import MESSAGE, TranscriptIndex
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.parallel_read import BatchEncoder, add_batch
from riffd.transcript.reader import parse_line
from riffd.transcript.records import UNSET, Block, Message, Record, fast_record, record_of
from test_incremental import Builder

READ_KEYS = [
    "uuid",
    "parentUuid",
    "leafUuid",
    "type",
    "message",
    "isSidechain",
    "sourceToolAssistantUUID",
    "subtype",
    "logicalParentUuid",
    "sessionId",
    "content",
    "id",
    "tool_use_id",
]
TRICKY_NUMBERS = [
    b"0",
    b"-0",
    b"1.5",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b"NaN",
    b"Infinity",
    b"01",
    b"1.",
    b".5",
    b"+1",
    b"1e",
]
TRICKY_STRINGS = [
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\\ud83d\\ude00"',
    b'"\\u0000"',
    b'"\\q"',
    b'"\\u12"',
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'"\xc3"',
    b'"\xc3\xa9"',
    b'"a\tb"',
    b'"a\x7fb"',
    b'"\\/"',
    b'""',
    b'" "',
    b'"tool_use"',
    b'"tool_result"',
    b'"assistant"',
    b'"user"',
    b'"compact_boundary"',
]
MUTATION_BYTES = [
    b"\xff",
    b"\x00",
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\xc3",
    b"\xed",
    b"1",
    b"e",
    b" ",
    b"\t",
    b"u",
    b"\xef\xbb\xbf",
]


def escaped(name: str, which: list[bool]) -> bytes:
    """`name` as a JSON string, each character written as a \\u escape where `which` says so."""
    return (
        b'"'
        + b"".join(
            (b"\\u%04x" % ord(char)) if flag else char.encode()
            for char, flag in zip(name, which, strict=False)
        )
        + b'"'
    )


@st.composite
def keys(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(READ_KEYS) | st.text(min_size=0, max_size=4))
    if draw(st.booleans()):
        return orjson.dumps(name)
    return escaped(name, draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name))))


def scalars() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from([b"true", b"false", b"null"]),
        st.sampled_from(TRICKY_NUMBERS),
        st.integers().map(lambda number: str(number).encode()),
        st.sampled_from(TRICKY_STRINGS),
        st.text(max_size=8).map(orjson.dumps),
        st.sampled_from(["toolu_1", "toolu_2", "u1", "u2"]).map(orjson.dumps),
    )


def objects(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    pairs = st.lists(st.tuples(keys(), children), max_size=6)
    return pairs.map(
        lambda items: b"{" + b",".join(key + b":" + value for key, value in items) + b"}"
    )


VALUES = st.recursive(
    scalars(),
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: b"[" + b",".join(items) + b"]"),
        objects(children),
    ),
    max_leaves=20,
)


def blocks() -> st.SearchStrategy[bytes]:
    """Content blocks as Claude Code writes them, with now and then a field of another type or
    written twice."""
    block = st.fixed_dictionaries(
        {"type": st.sampled_from(["tool_use", "tool_result", "text"])},
        optional={
            "id": st.sampled_from(["toolu_1", "toolu_2", ""]),
            "tool_use_id": st.sampled_from(["toolu_1", " "]),
            "content": st.text(max_size=5),
        },
    ).map(orjson.dumps)
    return st.one_of(block, objects(VALUES), VALUES)


def messages() -> st.SearchStrategy[bytes]:
    content = st.one_of(
        st.lists(blocks(), max_size=4).map(lambda items: b"[" + b",".join(items) + b"]"), VALUES
    )
    pairs = st.lists(
        st.tuples(
            st.sampled_from([b'"id"', b'"content"', b'"role"', b'"\\u0069d"']),
            st.one_of(content, VALUES),
        ),
        max_size=4,
    )
    return pairs.map(
        lambda items: b"{" + b",".join(key + b":" + value for key, value in items) + b"}"
    )


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """A transcript-like line: a JSON object whose keys are mostly the ones detection reads (or not
    an object)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(VALUES)
    items = draw(st.lists(st.tuples(keys(), st.one_of(scalars(), messages(), VALUES)), max_size=10))
    space = draw(st.sampled_from([b"", b" ", b"\t", b"\r"]))
    return (
        space + b"{" + b",".join(key + b":" + space + value for key, value in items) + b"}" + space
    )


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    raw = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.integers(0, len(raw)))
        action = draw(st.sampled_from(["replace", "insert", "delete"]))
        piece = draw(st.sampled_from(MUTATION_BYTES))
        if action == "insert" or not raw:
            raw[where:where] = piece
        elif action == "replace":
            raw[min(where, len(raw) - 1)] = piece[0]
        else:
            del raw[min(where, len(raw) - 1)]
    return bytes(raw)


def assert_agrees(raw: bytes) -> bool:
    """Assert the fast decoder's Record, when it gives one, is the reference's; return whether it
    gave one."""
    fast = fast_record(raw)
    reference = parse_line(raw)
    if fast is None:
        return False  # read_record then gives the reference's answer
    assert isinstance(reference, dict), (
        f"fast decoder took {raw!r}, the reference says {reference!r}"
    )
    assert fast == record_of(reference), raw
    return True


@settings(max_examples=examples(350), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_fast_records_equal_the_reference(raw: bytes) -> None:
    assert_agrees(raw)


@settings(max_examples=examples(350), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(lines()))
def test_fast_records_equal_the_reference_on_damaged_lines(raw: bytes) -> None:
    assert_agrees(raw)


@requires_corpus
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fast_records_equal_the_reference_on_damaged_real_lines(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(corpus_transcripts()))
    real = [line for line in path.read_bytes().split(b"\n") if line]
    assert_agrees(data.draw(mutated(st.sampled_from(real))))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the last of a key written twice wins, as in JSON.parse
        (
            b'{"uuid":"a","uuid":"b","type":"user","type":"assistant"}',
            Record(uuid="b", type="assistant"),
        ),
        (
            b'{"message":{"id":"m","content":"x"},"message":{"content":"y"}}',
            Record(message=Message(content="y")),
        ),
        # a key spelled with escapes is that key
        (b'{"\\u0075uid":"x"}', Record(uuid="x")),
        # a key that is absent and one that is null are told apart where the report tells them apart
        (
            b'{"message":{"content":[{"type":"tool_result"},{"type":"tool_result","tool_use_id":null}]}}',
            Record(
                message=Message(
                    content=[
                        Block(type="tool_result", tool_use_id=UNSET),
                        Block(type="tool_result", tool_use_id=None),
                    ]
                )
            ),
        ),
    ],
)
def test_fast_decoder_reads_keys_as_json_parse_does(raw: bytes, expected: Record) -> None:
    assert fast_record(raw) == expected
    assert record_of(orjson.loads(raw)) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b'{"uuid":"u","x":"\xff"}',  # invalid UTF-8 in a value detection never reads: malformed, as orjson says
        b'{"uuid":"u","x":"\xed\xa0\x80"}',  # an encoded surrogate: the standard library takes it
        b'{"uuid":"u","x":"\\ud800"}',  # a lone surrogate escape: valid JSON
        b'{"uuid":"u","x":NaN}',
        b'{"uuid":123456789012345678901234567890}',  # orjson reads a float: the fast decoder would read an int
        b'{"uuid":1e400}',
        b'\xef\xbb\xbf{"uuid":"u"}',
        b'{"message":{"content":[1,{"type":"tool_result"}]}}',
        b'{"message":"text"}',
        b"null",
        b"[1]",
        b"",
        b'{"uuid":"u","deep":' + b"[" * 2000 + b"]" * 2000 + b"}",
    ],
)
def test_fast_decoder_leaves_unusual_lines_to_the_reference(raw: bytes) -> None:
    assert fast_record(raw) is None
    assert_agrees(raw)


def test_a_line_nested_100000_deep_is_malformed_not_a_crash(tmp_path: Path) -> None:
    """Older orjson releases overflowed the C stack on deep nesting (a crash of the whole daemon);
    riffd needs one that refuses it, and reports the line as malformed like any line it cannot
    parse."""
    deep = b"[" * 100_000 + b"]" * 100_000
    (tmp_path / "s.jsonl").write_bytes(
        b'{"uuid":"a","parentUuid":null,"type":"user"}\n' + deep + b"\n"
    )
    result = run_riffd("scan", "--json", str(tmp_path / "s.jsonl"), text=False, timeout=60)
    assert result.returncode == 1, result.stderr
    findings = orjson.loads(result.stdout)["files"][0]["findings"]
    assert [(finding["class"], finding["lines"]) for finding in findings] == [
        ("malformed_line", [2])
    ]


@pytest.mark.parametrize("path", corpus_transcript_params())
def test_real_lines_take_the_fast_path_and_index_as_a_full_parse_does(path: Path) -> None:
    data = path.read_bytes()
    raw_lines = data.split(b"\n")
    declined = [
        number for number, raw in enumerate(raw_lines, 1) if raw and fast_record(raw) is None
    ]
    assert declined == [], f"{path}: lines the fast decoder declined"
    # `whole`: every line parsed whole and added one by one
    fast, whole = IndexBuilder(str(path)), IndexBuilder(str(path), reference_parse=True)
    for builder in (fast, whole):
        *complete, tail = raw_lines
        builder.add_lines(0, complete, True)
        if tail:
            builder.add_lines(len(data) - len(tail), [tail], False)
        builder.finish()
    assert builder_state(fast) == builder_state(whole)


def index_state(index: TranscriptIndex) -> dict[str, object]:
    """Everything an index holds (but the views derived from the rest)."""
    skip = ("results",)
    state = {name: value for name, value in vars(index).items() if name not in skip}
    state["metrics"] = vars(index.metrics)
    state["line_findings"] = [finding.to_json() for finding in index.line_findings]
    return state


def builder_state(builder: IndexBuilder) -> dict[str, object]:
    """Everything a builder holds: its index, and what it keeps for the lines still to come (but
    its observer and how it parses)."""
    skip = ("index", "observe", "reference_parse", "blocks")
    state = {name: value for name, value in vars(builder).items() if name not in skip}
    return {**state, "tool_log": builder.tool_log, "index": index_state(builder.index)}


def built(lines: list[bytes], sizes: list[int], how: str) -> IndexBuilder:
    """Index `lines` in batches of `sizes` (cycled): as a scan does ("scan": the fast decoder,
    batches added by columns when they can be), as the daemon does with its tracker ("observed":
    lines added one by one, the message lines also parsed whole for the observer), through the
    decoder process's messages ("columns": each batch encoded as the child of riffd.transcript.parallel_read
    does, then added from the message, in this process), or the reference ("reference": every line
    parsed whole and added one by one)."""
    seen: list[tuple[int, dict]] = []
    builder = IndexBuilder(
        "/p/-home-u-proj/0b1f5e2e-4a4c-4c2b-9b1e-1f2d3c4b5a69.jsonl",
        observe=(lambda line, obj: seen.append((line, obj))) if how == "observed" else None,
        reference_parse=how == "reference",
    )
    index = builder.index
    encoder = BatchEncoder()
    offset = done = step = 0
    while done < len(lines):
        batch = lines[done : done + sizes[step % len(sizes)]]
        step += 1
        if how == "columns":
            add_batch(builder, encoder.encode(offset, batch, True))
            offset = index.end
        else:
            offset = builder.add_lines(offset, batch, True)
        done += len(batch)
        builder.finish()
    if how == "observed":  # the observer saw every message line, whole, in order
        assert seen == [
            (line, parse_line(lines[line]))
            for line in range(len(lines))
            if index.flags[line] & MESSAGE
        ]
    return builder


def assert_built_alike(lines: list[bytes], sizes: list[int]) -> None:
    reference = builder_state(built(lines, sizes, "reference"))
    assert builder_state(built(lines, sizes, "scan")) == reference
    assert builder_state(built(lines, sizes, "observed")) == reference
    assert builder_state(built(lines, sizes, "columns")) == reference


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    size=st.integers(1, 60),
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
)
def test_batches_added_by_columns_equal_lines_added_one_by_one(
    data: st.DataObject, size: int, sizes: list[int]
):
    builder = Builder(data, size)
    for _ in range(size):
        builder.step()
    assert_built_alike(builder.lines, sizes)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(sorted(damage.INJECTORS)), min_size=1, max_size=4),
    data=st.data(),
    sizes=st.lists(st.integers(1, 200), min_size=1, max_size=3),
)
def test_damaged_sessions_index_alike_by_columns_and_line_by_line(
    names: list[str], data: st.DataObject, sizes: list[int]
):
    lines = damage.generated_session(segments=4, turns=2, parallel=2)
    lines = damage.injected(
        lines, names, lambda name, points: data.draw(st.sampled_from(points), label=name)
    )
    whole = [raw.rstrip(b"\n") for raw in lines if raw.endswith(b"\n")]
    assert_built_alike(whole, sizes)


def test_a_batch_added_again_line_by_line_keeps_a_session_id_first_named_by_a_progress_line() -> (
    None
):
    session = "5e55104e-0000-4000-8000-00000000c0de"
    first = {
        "type": "progress",
        "uuid": "u-1",
        "parentUuid": None,
        "sessionId": session,
        "data": {"x": 1},
    }
    prompt = {
        "type": "user",
        "uuid": "u-2",
        "parentUuid": "u-1",
        "message": {"role": "user", "content": "hi"},
    }
    # the same uuid: line by line, not columns
    again = dict(prompt, message={"role": "user", "content": "hi again"})
    lines = [orjson.dumps(record) for record in (first, prompt, again)]
    assert_built_alike(lines, [3])
    assert built(lines, [3], "columns").index.session_id == session
