"""The words a command riffd advises is made of, where riffd builds them from a path or an id: each
reads back as the words meant (a path with spaces or quotes), and names the configuration and the
Claude Code folder the advice is for."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from riffd.archive.verify import PackUser
from riffd.display import config_named, riffd_invocation
from riffd.repair.backup import backups_command
from riffd.repair.outcomes import symlink_detail
from riffd.transcript.sessions import claude_resume
from riffd.transcript.targets import resolve_target

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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "env.toml").write_text("")
    monkeypatch.setenv("RIFFD_CONFIG", str(tmp_path / "env.toml"))
    monkeypatch.setenv("RIFFD_STATE_DIR", "/state")
    assert riffd_invocation(None, variables=True) == (
        f"RIFFD_CONFIG={tmp_path / 'env.toml'} RIFFD_STATE_DIR=/state riffd"
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


def test_a_config_file_is_named_as_riffd_reads_it_and_only_when_it_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "riffd.toml").write_text("")
    assert config_named("~/riffd.toml") == str(tmp_path / "riffd.toml")
    assert config_named("~/missing.toml") is None
    assert config_named(None) is None
    monkeypatch.setenv("RIFFD_CONFIG", str(tmp_path / "missing.toml"))  # (the MCP server's too)
    monkeypatch.delenv("RIFFD_STATE_DIR", raising=False)
    assert riffd_invocation(None, variables=True) == "riffd"


def test_a_claude_folder_reached_through_a_link_is_the_shells_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = "0bad1dea-0000-4000-8000-000000000001"
    real = tmp_path / "data" / "claude"
    (real / "projects").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "link"))
    path = real / "projects" / "-app" / f"{session}.jsonl"
    assert claude_resume(path, session) == f"claude --resume {session}"


def test_latest_without_a_session_names_the_sessions_command_of_this_riffd(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as raised:
        resolve_target("latest", [tmp_path], riffd="riffd --config /c.toml")
    assert "`riffd --config /c.toml sessions` lists them" in str(raised.value)


def test_a_backups_command_names_the_folder_unless_it_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    assert backups_command(tmp_path / "state" / "backups", "list") == "riffd backups list"
    elsewhere = tmp_path / "my backups"
    assert shlex.split(backups_command(elsewhere, "restore", "ID", "--to", "FILE")) == [
        "riffd",
        "backups",
        "--backup-dir",
        str(elsewhere),
        "restore",
        "ID",
        "--to",
        "FILE",
    ]
