"""The tool-call tracker: similarity rules, never-cached tools, windows and pruning, and its
findings."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import CORPUS_DIR, requires_corpus
from riffd.config import TrackerConfig
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.reports.build import build_report
from riffd.reports.json import report_document
from riffd.reports.markdown import render_markdown
from riffd.state.store import StateStore
from riffd.tracker.calls import DEFAULT_WINDOW, NEVER_CACHED
from riffd.tracker.tracker import (
    DEFAULT_MAX_CALLS,
    RedundantCall,
    ToolCallTracker,
    redundant_calls_in,
)
from riffd.transcript.findings import INFORMATIONAL, REPAIRABLE, FindingClass

T0 = 1_760_000_000.0
SESSION = "11111111-2222-3333-4444-555555555555"


def stamp(at: float) -> str:
    return (
        datetime.fromtimestamp(T0 + at, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def use(
    tool: str, tool_input: dict[str, Any], tool_id: str, at: float, **extra: Any
) -> dict[str, Any]:
    """An assistant line holding one tool_use."""
    return {
        "type": "assistant",
        "uuid": f"u-{tool_id}",
        "sessionId": SESSION,
        "cwd": "/work",
        "timestamp": stamp(at),
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tool_id, "name": tool, "input": tool_input}],
        },
        **extra,
    }


def result(
    tool_id: str, text: str, at: float, is_error: bool = False, **extra: Any
) -> dict[str, Any]:
    """A user line holding the result of `tool_id`."""
    return {
        "type": "user",
        "uuid": f"r-{tool_id}",
        "sessionId": SESSION,
        "cwd": "/work",
        "timestamp": stamp(at),
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_id,
                    "content": text,
                    "is_error": is_error,
                }
            ],
        },
        **extra,
    }


def calls(
    tool: str,
    first: dict[str, Any],
    second: dict[str, Any],
    gap: float = 10.0,
    tracker: ToolCallTracker | None = None,
) -> list[RedundantCall]:
    """Feed two calls of `tool` `gap` seconds apart, each with a result; return the redundant calls
    found."""
    tracker = ToolCallTracker() if tracker is None else tracker
    for line in (
        use(tool, first, "t1", 0),
        result("t1", "x" * 100, 1),
        use(tool, second, "t2", gap),
        result("t2", "y" * 40, gap + 1),
    ):
        tracker.feed(SESSION, line)
    return tracker.redundant_calls()


READ = {"file_path": "/work/a.py"}


@pytest.mark.parametrize(
    ("tool", "first", "same", "different"),
    [
        (
            "Read",
            READ,
            {"file_path": "/work/./a.py", "offset": 1},
            {"file_path": "/work/a.py", "offset": 50},
        ),
        (
            "Read",
            {"file_path": "a.py", "limit": 20},
            {"file_path": "/work/a.py", "limit": 20},
            {**READ, "limit": 30},
        ),
        (
            "Grep",
            {"pattern": "def ", "path": "/work", "glob": "*.py"},
            {"pattern": "def ", "glob": "*.py"},
            {"pattern": "def ", "path": "/work", "glob": "*.py", "-i": True},
        ),
        (
            "Grep",
            {"pattern": "x", "output_mode": "content"},
            {"pattern": "x", "output_mode": "content"},
            {"pattern": "x", "output_mode": "files_with_matches"},
        ),
        (
            "Glob",
            {"pattern": "**/*.md", "path": "/work/docs"},
            {"pattern": "**/*.md", "path": "/work/docs"},
            {"pattern": "**/*.md", "path": "/work"},
        ),
        (
            "WebFetch",
            {"url": "https://a.example/x", "prompt": "summary"},
            {"url": "https://a.example/x", "prompt": "summary"},
            {"url": "https://a.example/x", "prompt": "list the links"},
        ),
        (
            "WebSearch",
            {"query": "orjson speed"},
            {"query": "orjson speed"},
            {"query": "orjson memory"},
        ),
        (
            "Write",
            {"file_path": "/work/b.txt", "content": "hi"},
            {"file_path": "/work/b.txt", "content": "hi"},
            {"file_path": "/work/b.txt", "content": "hello"},
        ),
        (
            "Edit",
            {"file_path": "/work/a.py", "old_string": "a", "new_string": "b"},
            {"file_path": "/work/a.py", "old_string": "a", "new_string": "b", "replace_all": None},
            {"file_path": "/work/a.py", "old_string": "a", "new_string": "c"},
        ),
        (
            "MultiEdit",
            {"file_path": "/work/a.py", "edits": [{"old_string": "a", "new_string": "b"}]},
            {"file_path": "/work/a.py", "edits": [{"new_string": "b", "old_string": "a"}]},
            {
                "file_path": "/work/a.py",
                "edits": [
                    {"old_string": "a", "new_string": "b"},
                    {"old_string": "c", "new_string": "d"},
                ],
            },
        ),
    ],
)
def test_each_rule_finds_the_same_call_and_only_it(
    tool: str, first: dict[str, Any], same: dict[str, Any], different: dict[str, Any]
) -> None:
    found = calls(tool, first, same)
    assert [(record.tool, record.earlier_id, record.later_id) for record in found] == [
        (tool, "t1", "t2")
    ]
    assert found[0].later_time - found[0].earlier_time == 10.0
    assert calls(tool, first, different) == []


@pytest.mark.parametrize(
    "tool",
    [
        *sorted(NEVER_CACHED),
        "mcp__github__create_issue",
        "mcp__playwright__browser_click",
        "mcp__db__runQuery",
    ],
)
def test_never_cached_tools_are_never_redundant(tool: str) -> None:
    same_input = {
        "command": "pytest -q",
        "description": "run the tests",
        "file_path": "/work/a.py",
        "id": 1,
    }
    assert calls(tool, same_input, dict(same_input)) == []


def test_unknown_and_mcp_tools_compare_by_their_properties() -> None:
    base = {"owner": "o", "repo": "r", "state": "open"}
    # two of three properties equal: more than half
    assert calls("mcp__github__list_issues", base, {**base, "state": "closed"})
    # one of two equal: exactly half is not enough
    assert (
        calls(
            "mcp__github__list_issues",
            {"owner": "o", "state": "open"},
            {"owner": "o", "state": "all"},
        )
        == []
    )
    # an identifying property equal is enough, whatever the rest
    assert calls(
        "mcp__docs__get_page",
        {"url": "https://x/y", "format": "md", "depth": 1},
        {"url": "https://x/y", "format": "html", "depth": 2},
    )
    assert calls(
        "mcp__kb__lookup", {"id": 7, "fields": "a"}, {"id": 7, "fields": "b", "expand": True}
    )
    # a different tool with the same input is another call
    tracker = ToolCallTracker()
    for line in (use("mcp__a__get", {"id": 1}, "t1", 0), use("mcp__b__get", {"id": 1}, "t2", 5)):
        tracker.feed(SESSION, line)
    assert tracker.redundant_calls() == []


@pytest.mark.parametrize(
    ("change_tool", "change_input"),
    [
        ("Write", {"file_path": "/work/a.py", "content": "new"}),
        ("Edit", {"file_path": "/work/a.py", "old_string": "a", "new_string": "b"}),
        ("MultiEdit", {"file_path": "/work/a.py", "edits": []}),
        ("NotebookEdit", {"notebook_path": "/work/a.py", "new_source": "x"}),
    ],
)
def test_a_read_after_a_write_of_that_file_is_not_redundant(
    change_tool: str, change_input: dict[str, Any]
) -> None:
    tracker = ToolCallTracker()
    for line in (
        use("Read", READ, "t1", 0),
        result("t1", "old", 1),
        use(change_tool, change_input, "t2", 2),
        result("t2", "ok", 3),
        use("Read", READ, "t3", 4),
        result("t3", "new", 5),
    ):
        tracker.feed(SESSION, line)
    assert tracker.redundant_calls() == []
    # ... but a write of another file changes nothing for this one
    other = ToolCallTracker()
    for line in (
        use("Read", READ, "t1", 0),
        result("t1", "old", 1),
        use("Write", {"file_path": "/work/other.py", "content": "x"}, "t2", 2),
        use("Read", READ, "t3", 4),
    ):
        other.feed(SESSION, line)
    assert [record.later_id for record in other.redundant_calls()] == ["t3"]


def test_the_window_is_measured_from_the_calls_own_times() -> None:
    assert calls("Read", READ, READ, gap=DEFAULT_WINDOW - 1)
    assert calls("Read", READ, READ, gap=DEFAULT_WINDOW + 1) == []
    assert calls("Read", READ, READ, gap=30, tracker=ToolCallTracker(window=20)) == []


def test_pruning_by_age_and_by_count() -> None:
    tracker = ToolCallTracker(window=60, max_calls=3)
    for number in range(4):  # four different files: the first is pushed out by count
        tracker.feed(SESSION, use("Read", {"file_path": f"/work/{number}"}, f"t{number}", number))
    assert len(tracker) == 3
    tracker.feed(SESSION, use("Read", {"file_path": "/work/0"}, "again", 5))
    assert tracker.redundant_calls() == []
    tracker.feed(SESSION, use("Read", {"file_path": "/work/3"}, "repeat", 6))
    assert [record.later_id for record in tracker.redundant_calls()] == ["repeat"]
    # by age: calls older than the window before `now` go, and then the empty session
    assert tracker.prune(T0 + 64) == 1  # the call made at 3 s (the ones before went by count)
    assert tracker.stats()["sessions_held"] == 1
    tracker.prune(T0 + 1000)
    assert len(tracker) == 0 and tracker.stats()["sessions_held"] == 0
    # a history read again after its session was pruned adds nothing twice
    tracker.feed(SESSION, use("Read", {"file_path": "/work/3"}, "repeat", 6))
    assert len(tracker) == 0 and tracker.stats()["redundant"] == 1
    # old calls far behind the session's newest one are not kept at all
    tracker.feed("s2", use("Read", READ, "new", 500))
    tracker.feed("s2", use("Read", READ, "old", 100))
    assert len(tracker) == 1


def test_feeding_is_idempotent_by_tool_use_id() -> None:
    tracker = ToolCallTracker()
    lines = [
        use("Read", READ, "t1", 0),
        result("t1", "abc", 1),
        use("Read", READ, "t2", 5),
        result("t2", "abcd", 6),
    ]
    for _ in range(3):
        for line in lines:
            tracker.feed(SESSION, line)
    assert [record.later_id for record in tracker.redundant_calls()] == ["t2"]
    assert tracker.stats()["redundant"] == 1 and tracker.stats()["calls_seen"] == 2


def test_wasted_bytes_are_the_repeated_results_size() -> None:
    tracker = ToolCallTracker()
    tracker.feed(SESSION, use("Read", READ, "t1", 0))
    tracker.feed(SESSION, result("t1", "é" * 50, 1))  # 100 bytes in UTF-8
    [found] = tracker.feed(SESSION, use("Read", READ, "t2", 5))
    # the earlier result's size, until the repeat's own result is seen
    assert found.wasted_bytes == 100
    [updated] = tracker.feed(SESSION, result("t2", "z" * 70, 6))
    assert updated.wasted_bytes == 70 and tracker.stats()["bytes_wasted"] == 70


def test_a_failed_call_may_be_retried() -> None:
    tracker = ToolCallTracker()
    for line in (
        use("Read", READ, "t1", 0),
        result("t1", "File does not exist.", 1, is_error=True),
        use("Read", READ, "t2", 5),
    ):
        tracker.feed(SESSION, line)
    assert tracker.redundant_calls() == []


def test_a_subagent_has_a_context_of_its_own() -> None:
    tracker = ToolCallTracker()
    tracker.feed(SESSION, use("Read", READ, "t1", 0))
    tracker.feed(SESSION, use("Read", READ, "t2", 5, isSidechain=True, agentId="a1"))
    assert tracker.redundant_calls() == []
    tracker.feed(SESSION, use("Read", READ, "t3", 6, isSidechain=True, agentId="a1"))
    assert [record.later_id for record in tracker.redundant_calls(session_id=SESSION)] == ["t3"]


def test_defaults_match_the_config() -> None:
    assert (TrackerConfig().window, TrackerConfig().max_calls) == (
        DEFAULT_WINDOW,
        DEFAULT_MAX_CALLS,
    )
    assert (
        FindingClass.REDUNDANT_TOOL_CALL in INFORMATIONAL
        and FindingClass.REDUNDANT_TOOL_CALL not in REPAIRABLE
    )


def write_session(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))


def chained(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Link the lines into one parent chain, as Claude Code writes them."""
    parent = None
    for line in lines:
        line["parentUuid"] = parent
        parent = line["uuid"]
    return lines


@requires_corpus
def test_redundant_calls_in_a_whole_transcript(tmp_path: Path) -> None:
    path = tmp_path / f"{SESSION}.jsonl"
    write_session(
        path,
        chained(
            [
                use("Read", READ, "t1", 0),
                result("t1", "abc", 1),
                use("Bash", {"command": "ls"}, "t2", 2),
                result("t2", "a.py", 3),
                use("Read", READ, "t3", 4),
                result("t3", "abc", 5),
                use("Read", READ, "t4", 400),
                result("t4", "abc", 401),
            ]
        ),
    )
    [found] = redundant_calls_in(path)
    assert (found.earlier_id, found.later_id, found.earlier_line, found.later_line) == (
        "t1",
        "t3",
        1,
        5,
    )
    assert (found.wasted_bytes, found.path, found.session_id) == (3, str(path), SESSION)
    for sample in sorted(CORPUS_DIR.rglob("*.jsonl")):  # real sessions read without trouble
        assert all(isinstance(record, RedundantCall) for record in redundant_calls_in(sample))


def test_worker_turns_repeats_into_informational_findings(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state" / "state.db")
    tracker = ToolCallTracker()
    worker = Worker(store, WorkerSettings(repair=True, quiet_period=0), tracker=tracker)
    path = tmp_path / "p" / f"{SESSION}.jsonl"
    path.parent.mkdir()
    lines = chained(
        [
            use("Read", READ, "t1", 0),
            result("t1", "abc", 1),
            use("Read", READ, "t2", 5),
            result("t2", "abcdef", 6),
        ]
    )
    write_session(path, lines)
    outcome = worker.process(path)
    assert outcome.findings == 1 and outcome.repair is None  # informational: nothing to repair
    state = store.file(str(path))
    assert state is not None and state.repairable == 0
    [finding] = state.findings
    assert (
        finding["class"] == "redundant_tool_call"
        and finding["tool_id"] == "t2"
        and finding["lines"] == [1, 3]
    )
    assert finding["detail"] == "Read" and "6 bytes" in finding["message"]
    # an append with another repeat keeps the first finding and adds the second
    more = chained(
        [
            *lines,
            use("Grep", {"pattern": "x"}, "t3", 7),
            result("t3", "no", 8),
            use("Grep", {"pattern": "x", "path": "/work"}, "t4", 9),
            result("t4", "no", 10),
        ]
    )[len(lines) :]
    with path.open("ab") as handle:
        handle.write(b"".join(json.dumps(line).encode() + b"\n" for line in more))
    worker.process(path)
    state = store.file(str(path))
    assert state is not None and [item["tool_id"] for item in state.findings] == ["t2", "t4"]
    # a fresh worker and tracker (a daemon restart) reading the file again finds the same, once each
    worker.cache.clear()
    with path.open("ab") as handle:
        handle.write(json.dumps({"type": "custom-title", "customTitle": "x"}).encode() + b"\n")
    Worker(store, WorkerSettings(repair=False), tracker=ToolCallTracker()).process(path)
    state = store.file(str(path))
    assert state is not None and [item["tool_id"] for item in state.findings] == ["t2", "t4"]
    # the health report: informational, healthy, with the tracker's figures
    daemon = {
        "running": True,
        "started": time.time(),
        "latencies": [],
        "errors": [],
        "tracker": tracker.stats(),
    }
    model = build_report(store, tmp_path / "no-backups", daemon)
    report = report_document(model)
    assert report["healthy"] is True and report["problems"] == []
    assert report["findings"]["open"] == {} and report["findings"]["informational"] == {
        "redundant_tool_call": 2
    }
    assert (
        report["tracker"]["by_tool"] == {"Read": 1, "Grep": 1}
        and report["tracker"]["bytes_wasted"] == 8
    )
    assert report["tracker"]["top_sessions"] == [
        {"session": SESSION, "redundant": 2, "bytes_wasted": 8}
    ]
    assert "redundant tool calls: 2 (Read 1, Grep 1), 8 bytes" in render_markdown(model)
