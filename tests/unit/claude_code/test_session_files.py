"""Which files belong to a session and are kept whole: classified by where they are, found by a
walk. Real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.sessiontree import SLUG, build_session
from riffd.claude_code.session_files import (
    FILE_HISTORY,
    PLAN,
    SESSION_OTHER,
    SUBAGENT_META,
    TASKS,
    TODOS,
    TOOL_RESULT,
    all_session_files,
    classify,
    config_folders,
    plan_files,
    session_files,
)

SESSION = "0f3a1c52-5d4e-4b7a-9c1d-2e3f4a5b6c7d"


def test_config_folders_are_the_folders_above_projects_roots_and_claude_dir(tmp_path: Path) -> None:
    roots = [
        tmp_path / "a" / "projects",
        tmp_path / "b" / "transcripts",
        tmp_path / "c" / "projects",
    ]
    assert config_folders(roots, tmp_path / "a") == [tmp_path / "a", tmp_path / "c"]
    assert config_folders(roots, tmp_path / "d") == [tmp_path / "a", tmp_path / "c", tmp_path / "d"]


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        (
            f"projects/p/{SESSION}/tool-results/bshw4tza8.txt",
            (SESSION, TOOL_RESULT, f"projects/p/{SESSION}/tool-results/bshw4tza8.txt"),
        ),
        (f"projects/p/{SESSION}/tool-results/pdf-1/page-1.jpg", (SESSION, TOOL_RESULT, None)),
        (f"projects/p/{SESSION}/subagents/agent-a1.meta.json", (SESSION, SUBAGENT_META, None)),
        # not a transcript
        (
            f"projects/p/{SESSION}/workflows/w1/journal.jsonl",
            (SESSION, SESSION_OTHER, None),
        ),
        (f"file-history/{SESSION}/388d6e47436fd4a5@v2", (SESSION, FILE_HISTORY, None)),
        (f"tasks/{SESSION}/1.json", (SESSION, TASKS, None)),
        # the highest task id given: carried with them
        (
            f"tasks/{SESSION}/.highwatermark",
            (SESSION, TASKS, None),
        ),
        ("plans/vast-sparking-goblet.md", (None, PLAN, None)),
        (f"todos/{SESSION}-agent-{SESSION}.json", (SESSION, TODOS, None)),
    ],
)
def test_a_session_file_is_classified_by_where_it_is(
    tmp_path: Path, relative: str, expected: tuple[str | None, str, str | None]
) -> None:
    claude = tmp_path / "claude"
    found = classify(claude / relative, [claude / "projects"], [claude])
    assert found is not None
    assert (found.session_id, found.kind) == expected[:2]
    assert (found.base, found.relative) == (claude, expected[2] or relative)


@pytest.mark.parametrize(
    "relative",
    [
        f"projects/p/{SESSION}.jsonl",  # a transcript: archived by lines
        f"projects/p/{SESSION}/subagents/agent-a1.jsonl",
        f"projects/p/{SESSION}/tool-results/.bshw4tza8.txt.tmp",  # a temp name
        f"projects/p/{SESSION}/tool-results/out.txt.tmp.123.456",
        f"projects/p/{SESSION}/.cache/x",  # a dot folder
        "projects/p/memory/MEMORY.md",  # the project's, not a session's
        "projects/p/not-a-session/tool-results/x.txt",
        "projects/p/x.txt",
        f"tasks/{SESSION}/.lock",  # the client's lock
        f"tasks/{SESSION}/sub/1.json",
        "tasks/my-team/1.json",  # a task list named for a team, not a session
        "file-history/not-a-session/x@v1",
        "plans/notes.txt",
        "todos/other.json",
        f"debug/{SESSION}.txt",  # diagnostics: not read to resume
        f"session-env/{SESSION}/sessionstart-hook-0.sh",  # written again by the hooks at every start
        "shell-snapshots/snapshot-bash-1.sh",
    ],
)
def test_what_is_not_kept_whole(tmp_path: Path, relative: str) -> None:
    claude = tmp_path / "claude"
    assert classify(claude / relative, [claude / "projects"], [claude]) is None


def test_a_walk_finds_every_file_of_a_session_as_the_client_lays_it_out(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    other = build_session(claude, seed=2)
    roots, configs = [claude / "projects"], [claude]
    everything = {found.path for found in all_session_files(roots, configs)}
    assert everything == set(tree.whole) | set(other.whole)
    assert not everything & set(tree.ignored + tree.transcripts)
    one = list(session_files(tree.session_id, [tree.project], roots, configs))
    assert {found.path for found in one} == {
        path for path in tree.whole if path.parent.name != "plans"
    }
    assert {found.session_id for found in one} == {tree.session_id}
    assert [found.path for found in plan_files([SLUG, "missing-slug"], configs)] == [
        claude / "plans" / f"{SLUG}.md"
    ]
