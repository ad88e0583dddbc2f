"""The words a command riffd advises is made of, where riffd builds them from a path or an id: each
reads back as the words meant (a path with spaces or quotes), and names the configuration and the
Claude Code folder the advice is for."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from riffd.archive.verify import PackUser
from riffd.display import riffd_invocation
from riffd.repair.outcomes import symlink_detail
from riffd.transcript.sessions import claude_resume

ODD = '/home/me/it\'s a "project" $x/s.jsonl'


def test_the_verify_advice_for_a_damaged_pack_reads_back_as_its_words() -> None:
    user = PackUser(path=ODD, session_id=None, generation=1, latest=True, exists=True)
    (command,) = user.advice(riffd="riffd --config /c.toml").split("`")[1::2]
    assert shlex.split(command) == [
        "riffd",
        "--config",
        "/c.toml",
        "archive",
        "verify",
        "--fix",
        ODD,
    ]
    gone = PackUser(path=ODD, session_id=None, generation=1, latest=True, exists=False)
    commands = gone.advice().split("`")[1::2]
    assert shlex.split(commands[-1]) == ["riffd", "backups", "list", ODD]


def test_the_repair_a_symlink_advises_reads_back_as_its_words(tmp_path: Path) -> None:
    target = tmp_path / 'it\'s a "real" file.jsonl'
    target.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    (command,) = symlink_detail(link).split("`")[1::2]
    assert shlex.split(command) == ["riffd", "fix", str(target)]


def test_riffds_variables_are_advised_but_the_config_given_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIFFD_CONFIG", "/from/env.toml")
    monkeypatch.setenv("RIFFD_STATE_DIR", "/state")
    assert riffd_invocation(None, variables=True) == (
        "RIFFD_CONFIG=/from/env.toml RIFFD_STATE_DIR=/state riffd"
    )
    assert riffd_invocation("/given.toml", variables=True) == (
        "RIFFD_STATE_DIR=/state riffd --config /given.toml"
    )


def test_a_session_in_another_claude_folder_is_resumed_with_that_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = "0bad1dea-0000-4000-8000-000000000001"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "mine"))
    mine = tmp_path / "mine" / "projects" / "-app" / f"{session}.jsonl"
    assert claude_resume(mine, session) == f"claude --resume {session}"
    other = tmp_path / "work account" / "projects" / "-app" / f"{session}.jsonl"
    assert shlex.split(claude_resume(other, session) or "") == [
        f"CLAUDE_CONFIG_DIR={tmp_path / 'work account'}",
        "claude",
        "--resume",
        session,
    ]
    agent = other.parent / session / "subagents" / "agent-a1.jsonl"  # (by its main transcript)
    assert claude_resume(agent, session) == claude_resume(other, session)
    loose = tmp_path / "copies" / f"{session}.jsonl"  # in no Claude Code folder: nothing to tell
    assert claude_resume(loose, session) == f"claude --resume {session}"
