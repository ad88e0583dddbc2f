"""Conversation structure: the active chain across compactions, branches, roots, cycles, and
sidechains named by their agent in all three layouts; `riffd show` in its three formats."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import CORPUS_DIR, requires_corpus
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.transcript.conversation import EXTERNAL, ORPHAN, ROOT, SIDECHAIN_ROOT, conversation_of
from riffd.transcript.scan import index_file
from riffd.transcript.sidechains import (
    BESIDE,
    COMPACTION_AGENT,
    INLINE,
    SUBAGENTS,
    UNKNOWN_AGENT,
    Sidechain,
    find_sidechains,
)
from riffd.transcript.targets import agent_files_of

MAROT_SESSION = CORPUS_DIR / "marot-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
KIMUSON_SESSION = (
    CORPUS_DIR / "d-kimuson-claude-code-viewer" / "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)
REWIND_COMPACT = CORPUS_DIR / "daaain-claude-code-log" / "dag_compact_after_rewind.jsonl"
SESSION_ID = "0badc0de-0000-4000-8000-000000000001"


# --- generated transcripts
# ------------------------------------------------------------------------------------


def record(
    uuid: str, parent: str | None, kind: str = "user", content: Any = "hello", **extra: Any
) -> dict[str, Any]:
    """One conversation line as Claude Code writes it (enough fields for riffd)."""
    line: dict[str, Any] = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION_ID,
        "isSidechain": False,
        **extra,
    }
    if kind in ("user", "assistant"):
        line["message"] = {"role": kind, "content": content}
    return line


def task_use(uuid: str, parent: str, tool_id: str, agent: str, prompt: str) -> dict[str, Any]:
    block = {
        "type": "tool_use",
        "id": tool_id,
        "name": "Task",
        "input": {"description": "a task", "subagent_type": agent, "prompt": prompt},
    }
    return record(uuid, parent, "assistant", [block])


def task_result(
    uuid: str, parent: str, tool_id: str, agent_id: str | None = None
) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": [{"type": "text", "text": "done"}],
    }
    result: dict[str, Any] = {"status": "completed", "content": [{"type": "text", "text": "done"}]}
    if agent_id is not None:
        result["agentId"] = agent_id
    return record(uuid, parent, "user", [block], toolUseResult=result)


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in records))
    return path


def compacted_session(compactions: int) -> list[dict[str, Any]]:
    """A session compacted `compactions` times: each boundary has a null parent and names the line
    before it."""
    lines = [record("u0", None), record("a0", "u0", "assistant", [{"type": "text", "text": "hi"}])]
    previous = "a0"
    for number in range(1, compactions + 1):
        lines.append(
            record(
                f"cb{number}",
                None,
                "system",
                subtype="compact_boundary",
                logicalParentUuid=previous,
                compactMetadata={"trigger": "auto"},
            )
        )
        lines.append(
            record(
                f"cs{number}",
                f"cb{number}",
                content="This session is being continued",
                isCompactSummary=True,
            )
        )
        lines.append(record(f"u{number}", f"cs{number}", content=f"prompt {number}"))
        lines.append(
            record(f"a{number}", f"u{number}", "assistant", [{"type": "text", "text": "ok"}])
        )
        previous = f"a{number}"
    return lines


def names_by_path(sidechains: list[Sidechain]) -> dict[str, str]:
    return {Path(sidechain.path).name: sidechain.agent for sidechain in sidechains}


# --- the active chain, branches, roots and cycles
# -----------------------------------------------------------------


@requires_corpus
def test_rewind_branch_and_compaction_of_the_real_dag_sample() -> None:
    index = index_file(REWIND_COMPACT).index
    conversation = conversation_of(index)
    at = index.line_of_uuid
    (fork,) = conversation.forks
    assert fork.line == at["a1"]
    assert fork.children == (at["b1u"], at["b2u"])
    assert fork.active_child == at["b2u"]  # the last child by file position: the second attempt
    assert [index.uuids[line] for line in conversation.chain] == [
        "u1",
        "a1",
        "b2u",
        "b2a",
        "b2u2",
        "b2a2",
        "cb",
        "cs",
        "p1u",
        "p1a",
    ]
    assert conversation.compactions == 1
    assert conversation.boundaries == [at["cb"]]
    assert conversation.segments == 2
    assert list(conversation.chain_segments) == [0] * 6 + [1] * 4
    assert conversation.segment_of(at["b1u"]) is None  # the abandoned first attempt is history
    assert [(root.line, root.kind) for root in conversation.roots] == [(at["u1"], ROOT)]


def test_a_session_compacted_nine_times_reads_as_one_conversation(tmp_path: Path) -> None:
    path = write(tmp_path / f"{SESSION_ID}.jsonl", compacted_session(9))
    conversation = conversation_of(index_file(path).index)
    assert conversation.compactions == 9
    assert conversation.segments == 10
    # the walk from the newest message reaches the first segment's root
    assert conversation.chain[0] == 0
    assert len(conversation.chain) == 2 + 9 * 4  # every line of every segment
    assert conversation.chain_segments[0] == 0 and conversation.chain_segments[-1] == 9
    # boundaries continue, they do not start over
    assert [root.kind for root in conversation.roots] == [ROOT]


def test_an_orphan_is_a_root_of_its_own_logged_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path / f"{SESSION_ID}.jsonl",
        [
            record("r1", None),
            record("r2", "r1", "assistant", [{"type": "text", "text": "hi"}]),
            record("lost-child", "never-written-parent"),
            record("r4", "lost-child", "assistant", [{"type": "text", "text": "after the gap"}]),
        ],
    )
    with caplog.at_level(logging.DEBUG, logger="riffd.transcript.conversation"):
        conversation = conversation_of(index_file(path).index)
    assert [(root.line, root.kind, root.missing_parent) for root in conversation.roots] == [
        (0, ROOT, None),
        (2, ORPHAN, "never-written-parent"),
    ]
    assert len(conversation.orphans) == 1
    assert list(conversation.chain) == [2, 3]  # resume shows the cut history only
    debug = [entry.getMessage() for entry in caplog.records if entry.levelno == logging.DEBUG]
    assert any("lost-child" in message and "never-written-parent" in message for message in debug)


def test_a_parent_cycle_stops_the_walk_with_a_warning_naming_the_uuid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path / f"{SESSION_ID}.jsonl",
        [
            record("start", None),
            record("loop-one", "loop-two", "assistant", [{"type": "text", "text": "a"}]),
            record("loop-two", "loop-one"),
        ],
    )
    index = index_file(path).index
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="riffd.transcript.conversation"):
        conversation = conversation_of(index)
    assert conversation.cycles == [[1, 2]] or conversation.cycles == [[2, 1]]
    assert conversation.cycle_at in (1, 2)
    assert sorted(conversation.chain) == [1, 2]  # each line once, then the walk stops
    warnings = [
        entry.getMessage()
        for entry in caplog.records
        if entry.name == "riffd.transcript.conversation"
    ]
    assert any("loop-one" in message and "loop-two" in message for message in warnings)


def test_a_loop_through_logical_parents_also_stops_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path / f"{SESSION_ID}.jsonl",
        [
            record("cb", None, "system", subtype="compact_boundary", logicalParentUuid="after"),
            record("after", "cb", "assistant", [{"type": "text", "text": "a"}]),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="riffd.transcript.conversation"):
        conversation = conversation_of(index_file(path).index)
    assert list(conversation.chain) == [0, 1]  # root to leaf, each line once
    assert conversation.cycle_at == 1
    assert any("uuid after" in entry.getMessage() for entry in caplog.records)


@requires_corpus
def test_parallel_tool_results_are_splits_not_forks() -> None:
    conversation = conversation_of(index_file(MAROT_SESSION).index)
    # results and hook progress hang from their tool_use lines
    assert len(conversation.branches) > 100
    assert conversation.forks == []
    assert [root.kind for root in conversation.roots] == [ROOT]
    assert conversation.segments == 2 and conversation.compactions == 1


# --- sidechains
# -------------------------------------------------------------------------------------------------


@requires_corpus
def test_every_subagent_file_of_the_real_2_1_session_is_named() -> None:
    scanned = index_file(MAROT_SESSION)
    agent_files = agent_files_of(MAROT_SESSION)
    on_disk = sorted((MAROT_SESSION.with_suffix("") / "subagents").glob("agent-*.jsonl"))
    assert agent_files == on_disk and len(on_disk) == 2
    sidechains = find_sidechains(scanned.index, agent_files)
    assert names_by_path(sidechains) == {
        "agent-a881341.jsonl": "claude-code-guide",  # the Task call's input.subagent_type
        "agent-acompact-fffbd0.jsonl": COMPACTION_AGENT,
    }
    assert all(
        sidechain.agent != UNKNOWN_AGENT and sidechain.layout == SUBAGENTS
        for sidechain in sidechains
    )
    task = next(sidechain for sidechain in sidechains if sidechain.agent_id == "a881341")
    index = scanned.index
    assert task.tool_use_id == "toolu_01VmaERAwhb19LGUwu9GenaK"
    assert task.anchor == index.uses_of(task.tool_use_id)[0]
    assert task.result_line == index.results[task.tool_use_id][0].line
    assert task.linked_by == "progress" and task.line_count == 10
    compaction = next(sidechain for sidechain in sidechains if sidechain.agent == COMPACTION_AGENT)
    (summarised_up_to,) = index.logical_parent.values()  # the compact boundary's logicalParentUuid
    assert compaction.anchor == index.line_of_uuid[summarised_up_to]
    # ordered by their anchors
    assert compaction.anchor is not None and compaction.anchor < task.anchor
    assert [sidechain.agent for sidechain in sidechains] == [COMPACTION_AGENT, "claude-code-guide"]


@requires_corpus
def test_the_task_result_alone_links_a_2_1_agent(tmp_path: Path) -> None:
    """Without the progress lines, the Task result's toolUseResult.agentId names the agent."""
    session = tmp_path / MAROT_SESSION.name
    kept = [
        raw
        for raw in MAROT_SESSION.read_bytes().splitlines(keepends=True)
        if b'"agent_progress"' not in raw
    ]
    session.write_bytes(b"".join(kept))
    shutil.copytree(MAROT_SESSION.with_suffix(""), session.with_suffix(""))
    sidechains = find_sidechains(index_file(session).index, agent_files_of(session))
    task = next(sidechain for sidechain in sidechains if sidechain.agent_id == "a881341")
    assert (task.agent, task.linked_by) == ("claude-code-guide", "tool_result")


@requires_corpus
def test_inline_sidechains_of_the_real_1_0_session_are_grouped_and_named() -> None:
    scanned = index_file(KIMUSON_SESSION)
    sidechains = find_sidechains(scanned.index)
    records = [json.loads(raw) for raw in KIMUSON_SESSION.read_bytes().splitlines()]
    sidechain_lines = [number for number, line in enumerate(records) if line.get("isSidechain")]
    assert len(sidechains) == 5
    assert sum(sidechain.line_count for sidechain in sidechains) == len(sidechain_lines)
    assert {sidechain.layout for sidechain in sidechains} == {INLINE}
    assert [sidechain.agent for sidechain in sidechains] == ["general-purpose"] * 5
    assert [sidechain.anchor for sidechain in sidechains] == sorted(
        s.anchor or 0 for s in sidechains
    )
    assert len({sidechain.tool_use_id for sidechain in sidechains}) == 5
    for sidechain in sidechains:
        assert sidechain.anchor is not None and sidechain.result_line is not None
        (use,) = [
            block
            for block in records[sidechain.anchor]["message"]["content"]
            if block["type"] == "tool_use"
        ]
        assert use["id"] == sidechain.tool_use_id and use["name"] == "Task"
        assert records[sidechain.first_line]["message"]["content"] == use["input"]["prompt"]
        assert records[sidechain.first_line]["isSidechain"] is True
        assert sidechain.anchor < sidechain.first_line < sidechain.result_line
    roots = conversation_of(scanned.index).roots
    assert sorted(root.line for root in roots if root.kind == SIDECHAIN_ROOT) == sorted(
        sidechain.first_line for sidechain in sidechains
    )


def test_agent_files_beside_the_session_2_0_are_linked_by_agent_id_or_prompt(
    tmp_path: Path,
) -> None:
    session = write(
        tmp_path / f"{SESSION_ID}.jsonl",
        [
            record("u1", None, content="review and explore"),
            task_use("t1", "u1", "toolu_review", "code-reviewer", "Review the diff"),
            task_result("r1", "t1", "toolu_review", agent_id="b1"),
            task_use("t2", "r1", "toolu_explore", "Explore", "Find the config loader"),
            task_result("r2", "t2", "toolu_explore"),
            record("a9", "r2", "assistant", [{"type": "text", "text": "both done"}]),
        ],
    )

    def agent(name: str, prompt: str, session_id: str = SESSION_ID) -> None:
        lines = [
            record("x1", None, content=prompt, isSidechain=True, agentId=name),
            record(
                "x2",
                "x1",
                "assistant",
                [{"type": "text", "text": "ok"}],
                isSidechain=True,
                agentId=name,
            ),
        ]
        for line in lines:
            line["sessionId"] = session_id
        write(tmp_path / f"agent-{name}.jsonl", lines)

    agent("b1", "a prompt that matches nothing")  # linked by toolUseResult.agentId
    agent("b2", "Find the config loader")  # linked by its prompt
    agent("b3", "Review the diff", session_id="another-session")  # someone else's agent
    files = agent_files_of(session)
    assert [path.name for path in files] == ["agent-b1.jsonl", "agent-b2.jsonl"]
    sidechains = find_sidechains(index_file(session).index, files)
    assert [(s.agent, s.layout, s.linked_by, s.anchor, s.result_line) for s in sidechains] == [
        ("code-reviewer", BESIDE, "tool_result", 1, 2),
        ("Explore", BESIDE, "prompt", 3, 4),
    ]


def test_meta_json_names_an_agent_nothing_else_links_and_unknown_is_the_last_resort(
    tmp_path: Path,
) -> None:
    session = write(tmp_path / f"{SESSION_ID}.jsonl", [record("u1", None)])
    subagents = tmp_path / SESSION_ID / "subagents"
    for name in ("m1", "m2"):
        write(
            subagents / f"agent-{name}.jsonl",
            [record("s1", None, content="work", isSidechain=True, agentId=name)],
        )
    (subagents / "agent-m1.meta.json").write_text(
        json.dumps({"agentType": "Plan", "spawnDepth": 1})
    )
    sidechains = find_sidechains(index_file(session).index, agent_files_of(session))
    assert [(s.agent_id, s.agent, s.linked_by, s.anchor) for s in sidechains] == [
        ("m1", "Plan", "meta", None),
        ("m2", UNKNOWN_AGENT, "none", None),
    ]


@requires_corpus
def test_a_subagent_file_read_on_its_own_hangs_from_its_session(tmp_path: Path) -> None:
    compaction = MAROT_SESSION.with_suffix("") / "subagents" / "agent-acompact-fffbd0.jsonl"
    roots = conversation_of(index_file(compaction).index).roots
    # parents in the session file are not orphans
    assert {root.kind for root in roots} == {EXTERNAL}


# --- riffd show
# -----------------------------------------------------------------------------------------------


@requires_corpus
def test_show_json_documents_the_structure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(MAROT_SESSION), "--format", "json"]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == 1 and document["errors"] == []
    (session,) = document["sessions"]
    assert session["session_id"] == MAROT_SESSION.stem
    assert session["chain"]["segments"] == 2 and session["chain"]["compactions"] == 1
    assert session["chain"]["compact_boundaries"] == [1256]
    assert session["agents"] == {
        "claude-code-guide": {"sidechains": 1, "lines": 10},
        COMPACTION_AGENT: {"sidechains": 1, "lines": 4},
    }
    assert (
        session["sidechains"][1]["anchor_line"] == 1473
        and session["sidechains"][1]["result_line"] == 1480
    )
    assert session["orphans"] == 0 and session["cycles"] == [] and session["findings"] == []
    assert isinstance(session["redundant_calls"], list)
    assert session["branches"]["forks"] == [] and session["branches"]["tool_splits"] == 185


@requires_corpus
def test_show_text_and_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(REWIND_COMPACT)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "chain: 10 lines from line 1 to line 12" in text
    assert "2 segments, 1 compaction" in text
    assert "fork at line 2: children at lines 3, 5; active: line 5" in text
    assert main(["show", str(KIMUSON_SESSION), "--format", "md"]) == EXIT_OK
    markdown = capsys.readouterr().out
    assert markdown.startswith(f"## `{KIMUSON_SESSION}`")
    assert "- **sidechains**: 5: general-purpose 5 (" in markdown
    assert "- **findings**: 0" in markdown


def test_show_reports_orphans_and_cycles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path / f"{SESSION_ID}.jsonl",
        [
            record("start", None),
            record(
                "lost-child", "never-written-parent", "assistant", [{"type": "text", "text": "a"}]
            ),
            record("loop-one", "loop-two"),
            record("loop-two", "loop-one", "assistant", [{"type": "text", "text": "b"}]),
        ],
    )
    assert main(["show", str(path), "--format", "json"]) == EXIT_OK
    (session,) = json.loads(capsys.readouterr().out)["sessions"]
    assert session["orphans"] == 1
    assert {
        "line": 2,
        "uuid": "lost-child",
        "kind": ORPHAN,
        "missing_parent": "never-written-parent",
    } in session["roots"]
    assert [sorted(cycle["uuids"]) for cycle in session["cycles"]] == [["loop-one", "loop-two"]]
    assert {finding["class"] for finding in session["findings"]} == {
        "dangling_parent",
        "parent_cycle",
    }


def test_show_an_unknown_target_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    assert main(["show", SESSION_ID]) == EXIT_ERROR
    assert f"no session {SESSION_ID}" in capsys.readouterr().err
