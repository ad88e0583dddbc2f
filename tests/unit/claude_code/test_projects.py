"""Project folder names, and resolving a file, a session id or a project path to transcripts (real
files in tmp_path); `riffd scan --project` and `riffd show` by session id and project path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, requires_corpus
from riffd.claude_code.projects import (
    MAX_FOLDER_NAME,
    find_project_folders,
    folder_matches,
    project_folder_name,
)
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.transcript.targets import agent_files_of, resolve_target

SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
SESSION_SOURCE = CORPUS_DIR / "d-kimuson-claude-code-viewer" / f"{SESSION}.jsonl"
MAROT_SESSION = CORPUS_DIR / "marot-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


def test_every_character_outside_ascii_letters_and_digits_becomes_a_dash() -> None:
    assert project_folder_name("/home/u/my.proj_x") == "-home-u-my-proj-x"
    assert project_folder_name("/home/u/a b:c\\d") == "-home-u-a-b-c-d"
    assert project_folder_name("C:\\Users\\me\\app") == "C--Users-me-app"
    assert project_folder_name("/srv/café") == "-srv-caf-"  # one BMP character, one dash
    assert project_folder_name("/srv/a😀b") == "-srv-a--b"  # an emoji is two UTF-16 code units
    assert project_folder_name("/a//b") == "-a--b"  # no collapsing


def test_long_names_are_cut_and_matched_by_prefix(tmp_path: Path) -> None:
    project = "/home/u/" + "deep/" * 50 + "app"
    full = project.replace("/", "-")
    assert len(full) > MAX_FOLDER_NAME
    assert project_folder_name(project) == full[:MAX_FOLDER_NAME]
    root = tmp_path / "projects"
    on_disk = root / f"{full[:MAX_FOLDER_NAME]}-k3j9x2"  # Claude Code appends -<hash>
    on_disk.mkdir(parents=True)
    (root / full[: MAX_FOLDER_NAME - 1]).mkdir()  # a shorter neighbour is not a match
    assert folder_matches(on_disk.name, project)
    assert find_project_folders(project, [root]) == [on_disk]
    short = root / project_folder_name("/home/u/app")
    short.mkdir()
    assert find_project_folders("/home/u/app", [root, tmp_path / "missing-root"]) == [short]
    assert find_project_folders("/home/u/other", [root]) == []


@pytest.fixture
def claude_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code projects root holding one project (its working directory is
    tmp_path/work/my.app) with a real 1.0.x session, and the real 2.1.x session with its subagents
    folder."""
    claude = tmp_path / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    project_dir = tmp_path / "work" / "my.app"
    project_dir.mkdir(parents=True)
    folder = claude / "projects" / project_folder_name(str(project_dir))
    folder.mkdir(parents=True)
    (folder / f"{SESSION}.jsonl").write_bytes(SESSION_SOURCE.read_bytes())
    (folder / MAROT_SESSION.name).write_bytes(MAROT_SESSION.read_bytes())
    subagents = MAROT_SESSION.with_suffix("") / "subagents"
    (folder / MAROT_SESSION.stem / "subagents").mkdir(parents=True)
    for agent in subagents.iterdir():
        (folder / MAROT_SESSION.stem / "subagents" / agent.name).write_bytes(agent.read_bytes())
    return claude / "projects"


@requires_corpus
def test_resolve_a_file_a_session_id_and_a_project_path(claude_root: Path, tmp_path: Path) -> None:
    (folder,) = claude_root.iterdir()
    roots = [claude_root]
    assert resolve_target(str(SESSION_SOURCE), roots) == [SESSION_SOURCE]
    assert resolve_target(SESSION, roots) == [folder / f"{SESSION}.jsonl"]
    marot = folder / MAROT_SESSION.name
    with_agents = resolve_target(MAROT_SESSION.stem, roots)
    assert with_agents[0] == marot
    assert sorted(path.name for path in with_agents[1:]) == [
        "agent-a881341.jsonl",
        "agent-acompact-fffbd0.jsonl",
    ]
    assert resolve_target(MAROT_SESSION.stem, roots, subagents=False) == [marot]
    project = str(tmp_path / "work" / "my.app")
    assert resolve_target(project, roots, subagents=False) == sorted(
        [marot, folder / f"{SESSION}.jsonl"]
    )
    assert len(resolve_target(project, roots)) == 4  # with the two agent files
    assert resolve_target(str(folder), roots, subagents=False) == sorted(
        [folder / f"{SESSION}.jsonl", marot]
    )


@requires_corpus
def test_resolve_says_what_it_tried(claude_root: Path, tmp_path: Path) -> None:
    missing_id = "00000000-1111-2222-3333-444444444444"
    with pytest.raises(FileNotFoundError, match=f"no session {missing_id}.*{claude_root}"):
        resolve_target(missing_id, [claude_root])
    with pytest.raises(FileNotFoundError, match="looked for -nowhere-at-all in"):
        resolve_target("/nowhere/at/all", [claude_root])


def test_agent_files_of_both_layouts(tmp_path: Path) -> None:
    session = tmp_path / "s-1.jsonl"
    session.write_text(json.dumps({"type": "user", "uuid": "u", "sessionId": "s-1"}) + "\n")
    (tmp_path / "s-1" / "subagents").mkdir(parents=True)
    (tmp_path / "s-1" / "subagents" / "agent-new.jsonl").write_text("{}\n")
    (tmp_path / "s-1" / "subagents" / "agent-new.meta.json").write_text("{}")
    (tmp_path / "agent-old.jsonl").write_text(
        json.dumps({"type": "summary"})
        + "\n"
        + json.dumps({"uuid": "x", "sessionId": "s-1"})
        + "\n"
    )
    (tmp_path / "agent-other.jsonl").write_text(
        json.dumps({"uuid": "y", "sessionId": "s-2"}) + "\n"
    )
    assert agent_files_of(session) == [
        tmp_path / "s-1" / "subagents" / "agent-new.jsonl",
        tmp_path / "agent-old.jsonl",
    ]


@requires_corpus
def test_scan_project_reads_the_projects_claude_folder(
    claude_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan", "--project", str(tmp_path / "work" / "my.app")]) == EXIT_OK
    assert "scanned 4 file(s)" in capsys.readouterr().err
    assert main(["scan", "--project", str(tmp_path / "work" / "elsewhere")]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert (
        "no Claude Code project folder" in err
        and project_folder_name(str(tmp_path / "work")) in err
    )


@requires_corpus
def test_show_by_session_id_and_by_project_path(
    claude_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", MAROT_SESSION.stem, "--format", "json"]) == EXIT_OK
    (session,) = json.loads(capsys.readouterr().out)["sessions"]
    assert set(session["agents"]) == {"claude-code-guide", "compaction"}
    assert main(["show", str(tmp_path / "work" / "my.app")]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"{SESSION}.jsonl" in out and MAROT_SESSION.name in out
    assert "sidechains: 2: general-purpose 2" in out
