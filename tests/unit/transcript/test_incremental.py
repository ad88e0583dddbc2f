"""Incremental detection equals a full detection after every appended line.

The daemon judges each append with `riffd.transcript.incremental` (the cost of the append); a full
walk (`riffd.transcript.scan.analyse`) is the reference. Random transcripts are built from the
shapes that change what Claude Code loads: rewinds and new roots, multi-line API messages, parallel
tool calls with results hanging from any line of the message, compact boundaries (their logical
parent known, unknown or still to come), sidechains, parents that arrive after their child, lines
written twice, duplicate and missing results, malformed, blank and non-object lines, summaries,
server tool blocks (paired or not, split by user and local_command lines), thinking-only messages,
records glued after a torn one, characters that are not text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from helpers import damage
from riffd.transcript.incremental import GrowingIndex, IncrementalDetection
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.scan import analyse

PATH = "/p/-home-u-proj/0b1f5e2e-4a4c-4c2b-9b1e-1f2d3c4b5a69.jsonl"
SESSION = "0b1f5e2e-4a4c-4c2b-9b1e-1f2d3c4b5a69"


def full_findings(lines: list[bytes]) -> tuple[list[dict[str, Any]], tuple[int, ...]]:
    builder = IndexBuilder(PATH)
    builder.add_lines(0, lines, True)
    index, _loaded, findings = analyse(builder)
    metrics = index.metrics
    return [finding.to_json() for finding in findings], (
        metrics.loaded_lines,
        metrics.duplicates_detected,
        metrics.blocks_valid,
        metrics.blocks_processed,
    )


def appended_findings(
    growing: GrowingIndex, offset: int, batch: list[bytes]
) -> tuple[list[dict[str, Any]], tuple]:
    growing.add_lines(offset, batch, True)
    findings = growing.findings()
    metrics = growing.index.metrics
    return [finding.to_json() for finding in findings], (
        metrics.loaded_lines,
        metrics.duplicates_detected,
        metrics.blocks_valid,
        metrics.blocks_processed,
    )


def check_line_by_line(lines: list[bytes], batches: list[int]) -> IncrementalDetection:
    """Feed `lines` in batches of the given sizes (cycled); after each, incremental == full."""
    growing = GrowingIndex(PATH)
    offset = 0
    done = 0
    step = 0
    while done < len(lines):
        size = batches[step % len(batches)] if batches else 1
        step += 1
        batch = lines[done : done + size]
        got = appended_findings(growing, offset, batch)
        offset += sum(len(raw) + 1 for raw in batch)
        done += len(batch)
        want = full_findings(lines[:done])
        assert got == want, (
            f"after line {done} of {len(lines)}:\n" + b"\n".join(lines[:done]).decode()
        )
    assert isinstance(growing.detection, IncrementalDetection)
    return growing.detection


class Builder:
    """Draws a random transcript, one line at a time, from a hypothesis data stream."""

    def __init__(self, data: st.DataObject, size: int) -> None:
        self.data = data
        self.pool = [f"u{n:04d}-0000-4000-8000-000000000000" for n in range(size + 8)]
        self.used = 0  # uuids handed out so far (pool order)
        self.tool_ids: list[str] = []
        self.message_ids: list[str] = []
        self.lines: list[bytes] = []
        self.last: str | None = None  # the newest main-chain uuid

    def draw(self, strategy: st.SearchStrategy, label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def parent(self) -> str | None:
        kind = self.draw(
            st.sampled_from(["last"] * 6 + ["earlier", "root", "unknown", "future"]), "parent"
        )
        if kind == "last" or (kind == "earlier" and not self.used):
            return self.last
        if kind == "earlier":
            return self.pool[self.draw(st.integers(0, self.used - 1), "earlier")]
        if kind == "root":
            return None
        if kind == "unknown":
            return "ffffffff-0000-4000-8000-00000000dead"
        return self.pool[min(self.used + self.draw(st.integers(1, 4), "ahead"), len(self.pool) - 1)]

    def uuid(self) -> str:
        uuid = self.pool[min(self.used, len(self.pool) - 1)]
        self.used += 1
        return uuid

    def emit(self, record: dict[str, Any], chain: bool = True) -> None:
        record.setdefault("sessionId", SESSION)
        self.lines.append(orjson.dumps(record))
        if chain and "uuid" in record and not record.get("isSidechain"):
            self.last = record["uuid"]

    def tool_id(self, fresh: bool) -> str:
        if fresh or not self.tool_ids:
            tool_id = f"toolu_{len(self.tool_ids):04d}"
            self.tool_ids.append(tool_id)
            return tool_id
        return self.tool_ids[self.draw(st.integers(0, len(self.tool_ids) - 1), "tool")]

    def step(self) -> None:
        kind = self.draw(
            st.sampled_from(
                [
                    "prompt",
                    "assistant",
                    "assistant",
                    "result",
                    "result",
                    "progress",
                    "compact",
                    "sidechain",
                    "repeat",
                    "summary",
                    "malformed",
                    "blank",
                    "not_object",
                    "bad_block",
                    "server",
                    "server",
                    "thinking",
                    "local_command",
                    "glued",
                    "characters",
                ]
            ),
            "kind",
        )
        base = {"parentUuid": self.parent(), "uuid": self.uuid()}
        if kind == "prompt":
            self.emit({**base, "type": "user", "message": {"role": "user", "content": "do it"}})
        elif kind in ("assistant", "sidechain"):
            same = self.message_ids and self.draw(st.booleans(), "same message")
            if not same:
                self.message_ids.append(f"msg_{len(self.message_ids):04d}")
            uses = [
                {
                    "type": "tool_use",
                    "id": self.tool_id(self.draw(st.integers(0, 5), "fresh") > 0),
                    "name": "Bash",
                    "input": {},
                }
                for _ in range(self.draw(st.integers(0, 2), "uses"))
            ]
            record = {
                **base,
                "type": "assistant",
                "message": {
                    "id": self.message_ids[-1],
                    "role": "assistant",
                    "content": uses or [{"type": "text", "text": "ok"}],
                },
            }
            if kind == "sidechain":
                record["isSidechain"] = True
            self.emit(record)
        elif kind == "result":
            blocks = []
            for _ in range(self.draw(st.integers(1, 2), "results")):
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": self.tool_id(self.draw(st.integers(0, 6), "orphan") == 0),
                    "content": "out",
                }
                if self.draw(st.integers(0, 4), "synthetic") == 0:
                    block.update(
                        is_error=True, content="[Request interrupted by user for tool use]"
                    )
                blocks.append(block)
            record = {**base, "type": "user", "message": {"role": "user", "content": blocks}}
            if self.draw(st.integers(0, 3), "source") == 0:
                record["sourceToolAssistantUUID"] = self.parent() or self.pool[0]
            self.emit(record)
        elif kind == "progress":
            self.emit({**base, "type": "progress", "data": {"type": "hook_progress"}})
        elif kind == "compact":
            logical = self.parent() or "ffffffff-0000-4000-8000-00000000beef"
            self.emit(
                {
                    **base,
                    "parentUuid": None,
                    "type": "system",
                    "subtype": "compact_boundary",
                    "logicalParentUuid": logical,
                }
            )
        elif kind in ("server", "thinking"):
            same = self.message_ids and self.draw(st.booleans(), "same message")
            if not same:
                self.message_ids.append(f"msg_{len(self.message_ids):04d}")
            server = f"srvtoolu_{self.draw(st.integers(0, 3), 'server id')}"
            block = self.draw(
                st.sampled_from(
                    [
                        {"type": "server_tool_use", "id": server, "name": "advisor", "input": {}},
                        {"type": "advisor_tool_result", "tool_use_id": server, "content": {}},
                        {"type": "web_search_tool_result", "tool_use_id": server, "content": []},
                    ]
                ),
                "server block",
            )
            if kind == "thinking":
                block = {"type": "thinking", "thinking": "hm", "signature": "x"}
            content = {"id": self.message_ids[-1], "role": "assistant", "content": [block]}
            self.emit({**base, "type": "assistant", "message": content})
        elif kind == "local_command":
            self.emit({**base, "type": "system", "subtype": "local_command", "content": "/usage"})
        elif kind == "glued":
            record = {**base, "type": "user", "message": {"role": "user", "content": "glued"}}
            torn = self.draw(
                st.sampled_from([b'{"parentUuid":"x","type":"ass', b"\x00" * 8]), "torn"
            )
            record.setdefault("sessionId", SESSION)
            self.lines.append(torn + orjson.dumps(record))
        elif kind == "characters":
            text = self.draw(
                st.sampled_from([b"\\ud83d", b"\\u0000", b"caf\xe9", b"\\ud83d\\ude00"]),
                "characters",
            )
            line = orjson.dumps(
                {**base, "sessionId": SESSION, "type": "user", "message": {"content": "HERE"}}
            )
            self.lines.append(line.replace(b"HERE", text))
            self.last = base["uuid"]
        elif kind == "repeat" and self.lines:
            self.used -= 1
            self.lines.append(self.lines[self.draw(st.integers(0, len(self.lines) - 1), "repeat")])
        elif kind == "summary":
            self.used -= 1
            self.emit(
                {"type": "summary", "summary": "t", "leafUuid": self.parent() or self.pool[0]},
                chain=False,
            )
        elif kind == "malformed":
            self.used -= 1
            self.lines.append(b'{"type":"user","uuid":"' + self.pool[0].encode() + b'","mess')
        elif kind == "blank":
            self.used -= 1
            self.lines.append(b"")
        elif kind == "not_object":
            self.used -= 1
            self.lines.append(b"[1,2]")
        else:  # a result block without tool_use_id, or a repeat with nothing to repeat yet
            self.emit(
                {
                    **base,
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [{"type": "tool_result", "content": "x"}, 3],
                    },
                }
            )


@settings(
    max_examples=examples(300),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data(), size=st.integers(1, 60), batches=st.lists(st.integers(1, 3), max_size=4))
def test_incremental_equals_full_after_every_line(
    data: st.DataObject, size: int, batches: list[int]
):
    builder = Builder(data, size)
    for _ in range(size):
        builder.step()
    check_line_by_line(builder.lines, batches)


@settings(
    max_examples=examples(60),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    names=st.lists(st.sampled_from(sorted(damage.INJECTORS)), min_size=1, max_size=4),
    data=st.data(),
)
def test_incremental_equals_full_on_damaged_sessions(names: list[str], data: st.DataObject):
    """Damage of every kind riffd knows, injected into a generated session of 4 compacted
    segments."""
    lines = damage.generated_session(segments=4, turns=2, parallel=2)
    lines = damage.injected(
        lines, names, lambda name, points: data.draw(st.sampled_from(points), label=name)
    )
    # the daemon indexes whole lines only
    whole = [raw.rstrip(b"\n") for raw in lines if raw.endswith(b"\n")]
    check_line_by_line(whole, [1])


def test_a_growing_session_is_walked_in_full_once(tmp_path: Path):
    """A session that grows the usual way is judged without a second full walk: each append costs
    its own lines. Its parallel tool calls' results hang from each call's own line, so each result
    opens a branch."""
    lines = damage.generated_session(segments=3, turns=3, parallel=3)
    whole = [raw.rstrip(b"\n") for raw in lines]
    detector = check_line_by_line(whole, [1])
    assert detector.full_walks == 1
    assert len(whole) > 40


def test_a_parent_that_arrives_after_its_child_makes_it_walk_again():
    lines = [
        orjson.dumps(
            {
                "type": "user",
                "uuid": "b",
                "parentUuid": "a",
                "message": {"role": "user", "content": "x"},
            }
        ),
        orjson.dumps(
            {
                "type": "user",
                "uuid": "a",
                "parentUuid": None,
                "message": {"role": "user", "content": "y"},
            }
        ),
        orjson.dumps(
            {
                "type": "user",
                "uuid": "c",
                "parentUuid": "b",
                "message": {"role": "user", "content": "z"},
            }
        ),
    ]
    detector = check_line_by_line(lines, [1])
    assert detector.full_walks == 2  # the first, and line 2's: it changed line 1's parent


def test_a_compact_boundary_without_a_logical_parent_continues_nowhere():
    """Found by review: a boundary with no (or a null) logicalParentUuid must not continue at a line
    whose uuid is the empty string; the full walk did, and the incremental one did not notice the
    line arriving."""
    for logical in ({}, {"logicalParentUuid": None}):
        hi = {"role": "user", "content": "hi"}
        lines = [
            orjson.dumps({"type": "user", "uuid": "a", "parentUuid": None, "message": hi}),
            orjson.dumps(
                {
                    "type": "system",
                    "subtype": "compact_boundary",
                    "uuid": "b",
                    "parentUuid": None,
                    **logical,
                }
            ),
            orjson.dumps({"type": "user", "uuid": "c", "parentUuid": "b", "message": hi}),
            orjson.dumps({"type": "progress", "uuid": "", "parentUuid": "a"}),
        ]
        check_line_by_line(lines, [1])
        builder = IndexBuilder(PATH)
        builder.add_lines(0, lines, True)
        index = analyse(builder)[0]
        # c and the boundary: nothing before a boundary that names none
        assert index.metrics.loaded_lines == 2


def subagent_files(tmp_path: Path) -> tuple[Path, Path, str]:
    session = "11111111-2222-4333-8444-555555555555"
    (tmp_path / session / "subagents").mkdir(parents=True)
    return (
        tmp_path / f"{session}.jsonl",
        tmp_path / session / "subagents" / "agent-a1.jsonl",
        session,
    )


def record(session: str, uuid: str, parent: str | None, text: str = "go", **extra: Any) -> bytes:
    return orjson.dumps(
        {
            "type": "user",
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": session,
            "message": {"role": "user", "content": text},
            **extra,
        }
    )


def same_as_full(growing: GrowingIndex, path: Path, lines: list[bytes]) -> None:
    got = [finding.to_json() for finding in growing.findings()], growing.index.metrics.loaded_lines
    builder = IndexBuilder(str(path))
    builder.add_lines(0, lines, True)
    full, _loaded, findings = analyse(builder)
    assert got == ([finding.to_json() for finding in findings], full.metrics.loaded_lines)


def test_a_parent_found_in_the_session_file_yields_to_one_written_later_in_the_agent_file(
    tmp_path: Path,
):
    """Found by review: a subagent line's parent found in its session file, then a line of the agent
    file itself with that uuid: it is the parent, as a fresh read of the file says."""
    session_file, agent_file, session = subagent_files(tmp_path)
    session_file.write_bytes(record(session, "P", None) + b"\n")
    lines = [
        record(session, "s1", "P", isSidechain=True),
        orjson.dumps({"type": "progress", "uuid": "P", "parentUuid": None, "sessionId": session}),
    ]
    growing = GrowingIndex(str(agent_file))
    offset = 0
    for done, raw in enumerate(lines, 1):
        offset = growing.add_lines(offset, [raw], True)
        same_as_full(growing, agent_file, lines[:done])
    assert growing.index.metrics.loaded_lines == 2


def test_a_session_file_rewritten_then_grown_is_searched_again_from_its_start(tmp_path: Path):
    """Found by review: a subagent's dangling parent appended to the session file, which is then
    rewritten shorter and grows past where it was searched: the parent is found, not reported
    dangling."""
    session_file, agent_file, session = subagent_files(tmp_path)
    session_file.write_bytes(
        record(session, "q1", None, "p" * 300)
        + b"\n"
        + record(session, "q2", None, "p" * 300)
        + b"\n"
    )
    lines = [record(session, "c1", "X", isSidechain=True)]
    growing = GrowingIndex(str(agent_file))
    offset = growing.add_lines(0, lines, True)
    assert [finding.cls for finding in growing.findings()] == ["dangling_parent"]
    with open(session_file, "ab") as handle:
        handle.write(record(session, "X", None, "p" * 10) + b"\n")
    # rewritten without q1
    session_file.write_bytes(b"\n".join(session_file.read_bytes().split(b"\n")[1:]))
    with open(session_file, "ab") as handle:
        handle.write(record(session, "q3", None, "p" * 400) + b"\n")
    more = [record(session, "c2", "c1", isSidechain=True)]
    lines += more
    growing.add_lines(offset, more, True)
    same_as_full(growing, agent_file, lines)
    assert growing.index.dangling == {}


def test_a_prompt_after_progress_and_system_lines_is_judged_without_a_map_of_every_tool():
    """A new prompt chained onto the progress and system lines written after the last message joins
    them to the loaded chain; they name no tool id, so the append does not build the map from every
    line to the tool ids it names (a walk of every tool of the file, once per daemon and file: 0.2 s
    on a 1 GB session), and its findings still equal a full detection's."""
    session = [raw.rstrip(b"\n") for raw in damage.generated_session(segments=3, parallel=3)]
    last = orjson.loads(session[-1])
    base = {"sessionId": last["sessionId"], "isSidechain": False, "cwd": "/home/user/project"}
    progress = {**base, "type": "progress", "uuid": "p-1", "parentUuid": last["uuid"]}
    system = {**base, "type": "system", "subtype": "turn_duration", "uuid": "s-1"}
    prompt = {**base, "type": "user", "uuid": "u-1", "parentUuid": "s-1"}
    tail = [
        orjson.dumps(progress),
        orjson.dumps({**system, "parentUuid": "p-1", "content": "done"}),
        orjson.dumps({**prompt, "message": {"role": "user", "content": "next"}}),
    ]
    growing = GrowingIndex(PATH)
    offset = growing.add_lines(0, session, True)
    growing.findings()
    for raw in tail:
        got, _metrics = appended_findings(growing, offset, [raw])
        offset += len(raw) + 1
    assert got == full_findings(session + tail)[0]
    detection = growing.detection
    assert isinstance(detection, IncrementalDetection)
    assert detection.full_walks == 1 and detection._tools_of is None
