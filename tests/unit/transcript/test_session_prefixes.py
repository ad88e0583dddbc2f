"""Naming sessions: an ambiguous prefix lists each match with the time of its last record (what
`riffd sessions` shows), not the file's modification time a repair or a restore changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from riffd.mcp_server.memory import resume_command
from riffd.transcript.sessions import (
    AmbiguousSession,
    by_prefix,
    go_back_command,
    last_activity,
    local_time,
    resume_id,
)


def _session(folder: Path, session_id: str, stamp: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    record = {"type": "user", "uuid": "u1", "sessionId": session_id, "timestamp": stamp}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def test_an_ambiguous_prefix_names_each_session_by_its_last_record(tmp_path: Path) -> None:
    first = _session(tmp_path / "p", "abcd0000-0000-4000-8000-000000000001", "2026-10-01T11:00:00Z")
    second = _session(
        tmp_path / "p", "abcd0000-0000-4000-8000-000000000002", "2026-10-02T11:00:00Z"
    )
    os.utime(first, (2_000_000_000, 2_000_000_000))  # as a repair leaves it: far from its record
    with pytest.raises(AmbiguousSession) as raised:
        by_prefix("abcd", [first, second])
    said = str(raised.value)
    assert local_time(last_activity(first)) in said and local_time(last_activity(second)) in said
    assert local_time(2_000_000_000) not in said


def test_the_last_activity_of_a_file_gone_meanwhile_is_no_error(tmp_path: Path) -> None:
    assert last_activity(tmp_path / "gone.jsonl") == 0.0


X = "7e7e7e7e-1111-4222-8333-444455556666"
Y = "1af7fc5e-0b7d-4c2e-9aaa-123456789abc"


@pytest.mark.parametrize(
    ("path", "lines_say", "resumes"),
    [
        (f"/p/-app/{X}.jsonl", Y, X),  # renamed: the client finds it by its file name
        (f"/p/-app/{X}.jsonl", None, X),
        (f"/p/-app/{X.upper()}.jsonl", Y, X.upper()),
        (f"/p/-app/{X}/subagents/agent-a1.jsonl", Y, X),  # 2.1.x: the session's folder
        ("/p/-app/agent-a1.jsonl", Y, Y),  # 2.0.x: named by no session but its lines
        ("/p/-app/agent-a1.jsonl", None, None),
        ("/p/-app/it's here.jsonl", Y, None),  # the client takes no name that is not a UUID
        (f"/p/-app/{X[:8]}.jsonl", Y, None),
    ],
)
def test_the_id_claude_resumes_a_transcript_by(
    path: str, lines_say: str | None, resumes: str
) -> None:
    assert resume_id(path, lines_say) == resumes


def test_the_mcp_servers_resume_command_names_the_file_and_restores_by_the_archive_id() -> None:
    command = resume_command(Y, "/home/me/app", False, f"/p/-home-me-app/{X}.jsonl")
    assert command == (
        f"riffd archive restore {Y}; test -e /p/-home-me-app/{X}.jsonl && cd /home/me/app && "
        f"claude --resume {X}"
    )
    assert resume_command(Y, None, True, None) == f"claude --resume {Y}"
    assert resume_command(Y, None, True, "/p/-home-me-app/notes.jsonl") is None


@pytest.mark.parametrize("layout", ["subagents", "2.0"])
def test_a_subagents_hit_goes_back_by_its_sessions_main_transcript(
    tmp_path: Path, layout: str
) -> None:
    """A hit in a subagent's transcript: `claude --resume` needs the session's main transcript, so
    the restore comes first when that one is gone, whether or not the subagent's file is there."""
    project = tmp_path / "-home-me-app"
    project.mkdir()
    if layout == "subagents":
        agent = project / X / "subagents" / "agent-a1.jsonl"
    else:
        agent = project / "agent-a1.jsonl"
    agent.parent.mkdir(parents=True, exist_ok=True)
    agent.write_text("{}\n")
    main = project / f"{X}.jsonl"
    resume = f"test -e {main} && cd /home/me/app && claude --resume {X}"
    assert go_back_command(agent, X, "/home/me/app") == f"riffd archive restore {X}; {resume}"
    main.write_text("{}\n")
    assert go_back_command(agent, X, "/home/me/app") == resume.partition(" && ")[2]
    main.unlink()
    agent.unlink()
    assert go_back_command(agent, X, "/home/me/app", riffd="riffd --config /c.toml") == (
        f"riffd --config /c.toml archive restore {X}; {resume}"
    )
