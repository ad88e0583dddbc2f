"""The command line, driven through main(argv) and as a real subprocess."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from conftest import CORPUS_DIR, REPO_DIR, requires_corpus
from helpers import damage
from helpers.run import riffd_env, run_riffd
from riffd.commands.cli import build_parser, main
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK

COMMANDS_PAGE = REPO_DIR / "docs" / "usage.md"
SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"


@pytest.fixture
def claude_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code config dir with one project holding a healthy and a damaged copy of real
    sessions."""
    claude = tmp_path / "claude"
    project = claude / "projects" / "-path-to-Demo"
    project.mkdir(parents=True)
    (claude / "sessions").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    source = CORPUS_DIR / "d-kimuson-claude-code-viewer" / f"{SESSION}.jsonl"
    (project / f"{SESSION}.jsonl").write_bytes(source.read_bytes())
    healthy = CORPUS_DIR / "marot-spotter" / "short.jsonl"
    (project / "short.jsonl").write_bytes(healthy.read_bytes())
    return claude


def damage_with_resumed_duplicate(path: Path) -> int:
    """Add the synthetic duplicate result a second resuming process writes (transcript-format 4b);
    return the number of the line added."""
    lines = path.read_bytes().splitlines(keepends=True)
    for number, raw in enumerate(lines):
        record = json.loads(raw)
        content = (record.get("message") or {}).get("content")
        if (
            record.get("type") == "user"
            and isinstance(content, list)
            and content[0].get("type") == "tool_result"
        ):
            synthetic = dict(record, uuid=str(uuid.uuid4()), toolDenialKind="interrupted")
            synthetic["message"] = {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": content[0]["tool_use_id"],
                        "content": "[Tool call interrupted by a resumed session]",
                        "is_error": True,
                    }
                ],
            }
            path.write_bytes(
                b"".join([*lines[:number], orjson.dumps(synthetic) + b"\n", *lines[number:]])
            )
            return number + 1
    raise AssertionError("no tool_result line in the sample")


def session_file(claude: Path) -> Path:
    return claude / "projects" / "-path-to-Demo" / f"{SESSION}.jsonl"


@requires_corpus
def test_scan_of_healthy_default_roots_exits_0(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "scanned 2 file(s)" in captured.err and "0 finding(s)" in captured.err


@requires_corpus
def test_scan_reports_damage_with_line_and_api_error(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    added = damage_with_resumed_duplicate(session_file(claude_home))
    assert main(["scan"]) == EXIT_FINDINGS
    out = capsys.readouterr().out
    assert f"{session_file(claude_home)}: 1 finding(s)" in out
    assert re.search(
        rf"line \d+, {added + 1}: duplicate_tool_result|line {added}, \d+: duplicate_tool_result",
        out,
    )
    assert "each tool_use must have a single result" in out
    assert f"riffd fix {session_file(claude_home)}" in out


@requires_corpus
def test_scan_shows_a_running_tool_of_a_live_session_as_pending(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = session_file(claude_home)
    lines = path.read_bytes().splitlines(keepends=True)
    cut = max(number for number, line in enumerate(lines) if b'"type":"tool_use"' in line)
    # the tool is still running: its result is not written yet
    path.write_bytes(b"".join(lines[: cut + 1]))
    registry = claude_home / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    assert main(["scan", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"line {cut + 1}: pending_tool_call: " in out and "may still be running" in out
    registry.unlink()
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))  # the client is gone and the file quiet: now it is damage
    assert main(["scan", str(path)]) == EXIT_FINDINGS
    assert f"line {cut + 1}: missing_tool_result: " in capsys.readouterr().out


@requires_corpus
def test_scan_json_is_a_versioned_document(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage_with_resumed_duplicate(session_file(claude_home))
    assert main(["scan", "--json", str(claude_home / "projects")]) == EXIT_FINDINGS
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == 1
    assert document["summary"]["files"] == 2 and document["summary"]["findings"] == 1
    assert document["summary"]["findings_by_class"] == {"duplicate_tool_result": 1}
    (report,) = document["files"]
    (finding,) = report["findings"]
    assert finding["class"] == "duplicate_tool_result" and finding["tool_id"].startswith("toolu_")
    assert report["metrics"]["duplicates_detected"] == 1


def test_scan_of_a_missing_path_exits_2_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan", str(tmp_path / "nope")]) == EXIT_ERROR
    assert f"{tmp_path / 'nope'}: no such file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["scan", "fix"])
def test_with_no_transcripts_folder_scan_and_fix_say_so_and_exit_0(
    tmp_path: Path, command: str
) -> None:
    """Where Claude Code never ran, `scan` and `fix` with no path find nothing damaged: exit 0, and
    they name the folder they looked for (docs/exit-codes.md)."""
    home = tmp_path / "home"
    home.mkdir()
    result = run_riffd(command, env=riffd_env(HOME=str(home), CLAUDE_CONFIG_DIR=""))
    assert result.returncode == EXIT_OK, result.stderr
    assert (
        f"no Claude Code transcripts here: {home / '.claude' / 'projects'} does not exist"
        in result.stderr
    )


def test_unknown_command_exits_2_with_help_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == EXIT_ERROR
    assert "riffd --help" in capsys.readouterr().err


@requires_corpus
def test_fix_repairs_idle_session_after_verified_backup(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = session_file(claude_home)
    damage_with_resumed_duplicate(path)
    damaged = path.read_bytes()
    assert main(["fix", "--dry-run", "--quiet-period", "0"]) == EXIT_FINDINGS
    assert path.read_bytes() == damaged  # a dry run writes nothing
    assert "would repair" in capsys.readouterr().out
    assert main(["fix", "--quiet-period", "0"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"repaired {path}" in out
    assert path.read_bytes() != damaged
    source = CORPUS_DIR / "d-kimuson-claude-code-viewer" / f"{SESSION}.jsonl"
    # the injected line removed, nothing else touched
    assert path.read_bytes() == source.read_bytes()
    backups = list((claude_home.parent / "state" / "backups").glob("*.gz"))
    assert len(backups) == 1 and not backups[0].name.endswith(".jsonl")
    assert gzip.decompress(backups[0].read_bytes()) == damaged
    assert main(["scan"]) == EXIT_OK
    assert main(["fix", "--quiet-period", "0"]) == EXIT_OK  # nothing left to do
    assert len(list((claude_home.parent / "state" / "backups").glob("*.gz"))) == 1


@requires_corpus
def test_fix_leaves_a_live_session_alone(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = session_file(claude_home)
    damage_with_resumed_duplicate(path)
    damaged = path.read_bytes()
    registry = claude_home / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    assert main(["fix", "--quiet-period", "0"]) == EXIT_FINDINGS
    assert path.read_bytes() == damaged
    assert f"skipped {path}: live" in capsys.readouterr().out


@requires_corpus
def test_fix_respects_the_quiet_period(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = session_file(claude_home)
    damage_with_resumed_duplicate(path)  # just written: modified now
    damaged = path.read_bytes()
    assert main(["fix", "--quiet-period", "3600"]) == EXIT_FINDINGS
    assert path.read_bytes() == damaged
    assert "live" in capsys.readouterr().out


@requires_corpus
def test_backups_list_and_restore_round_trip(
    claude_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = session_file(claude_home)
    damage_with_resumed_duplicate(path)
    damaged = path.read_bytes()
    assert main(["fix", "--quiet-period", "0"]) == EXIT_OK
    capsys.readouterr()
    assert main(["backups", "list", "--json"]) == EXIT_OK
    (record,) = json.loads(capsys.readouterr().out)
    assert record["source"] == str(path)
    assert record["sha256"] == hashlib.sha256(damaged).hexdigest()
    assert [f["class"] for f in record["findings"]] == ["duplicate_tool_result"]
    restored = tmp_path / "restored.jsonl"
    assert main(["backups", "restore", record["id"], "--to", str(restored)]) == EXIT_OK
    assert restored.read_bytes() == damaged
    # no overwrite
    assert main(["backups", "restore", record["id"], "--to", str(restored)]) == EXIT_ERROR
    assert main(["backups", "restore", "20990101T000000.000000Z-nope-abcdef"]) == EXIT_ERROR


def test_backups_restore_refuses_a_config_with_errors_and_says_each_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`backups restore` writes a transcript by the configuration's quiet period and backup folder:
    with errors in the file it does not go on with the defaults."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))  # the default folders: here
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[repair]\nquiet_period = "x"\n')
    backup_id = "20990101T000000.000000Z-nope-abcdef"
    assert main(["--config", str(config), "backups", "restore", backup_id]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("quiet_period") == 1, err
    assert (
        "`riffd backups restore` edits files by its configuration" in err and backup_id not in err
    )
    missing = tmp_path / "not-there.toml"
    assert main(["--config", str(missing), "backups", "restore", backup_id]) == EXIT_ERROR
    assert f"riffd: error: {missing}: no such file" in capsys.readouterr().err


def test_fix_with_a_typo_in_the_config_repairs_nothing_the_file_turns_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One unknown key made `fix` use the defaults for every setting: it repaired a class the
    file's `repair.classes` left out (here the torn last line, repaired by default)."""
    from conftest import transcript_bytes

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))  # (with no config file too)
    damaged = transcript_bytes(6) + b'{"type":"user","message":{"content":"cut o'
    path = tmp_path / "claude" / "projects" / "-work-app" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(damaged)
    config = tmp_path / "riffd.toml"
    settings = (
        f'state_dir = "{tmp_path / "state"}"\n[repair]\nclasses = ["duplicate_tool_result"]\n'
    )
    config.write_text(settings + "typo = 1\n")
    assert main(["--config", str(config), "fix", "--quiet-period", "0", str(path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "repair.typo" in err and "does not run while that has errors" in err, err
    assert path.read_bytes() == damaged
    config.write_text(settings)  # mended: the file's classes hold, and leave the tail
    assert main(["--config", str(config), "fix", "--quiet-period", "0", str(path)]) != EXIT_ERROR
    assert path.read_bytes() == damaged
    config.unlink()  # no file at all: the defaults, which cut it
    assert main(["fix", "--quiet-period", "0", str(path)]) == EXIT_OK
    assert path.read_bytes() == transcript_bytes(6)


def test_real_subprocess_with_no_claude_folder_exits_0(tmp_path: Path) -> None:
    environment = {"HOME": str(tmp_path), "RIFFD_STATE_DIR": str(tmp_path / "state")}
    result = run_riffd("scan", env=environment, timeout=60)
    assert result.returncode == EXIT_OK
    assert "does not exist" in result.stderr


def _commands_and_options(
    parser: argparse.ArgumentParser, command: str = "riffd"
) -> Iterator[tuple[str, str]]:
    """Yield (command, long option) for every option, and (command, "") for every (sub)command."""
    yield command, ""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands_and_options(sub, f"{command} {name}")
        for option in action.option_strings:
            if option.startswith("--") and option not in ("--help", "--version"):
                yield command, option


def test_the_commands_page_documents_every_command_and_flag() -> None:
    page = COMMANDS_PAGE.read_text(encoding="utf-8")
    missing = [
        f"{command} {option}".strip()
        for command, option in _commands_and_options(build_parser())
        if (option and option not in page) or (not option and command not in page)
    ]
    assert not missing, f"docs/usage.md does not document: {missing}"


@requires_corpus
def test_fix_waits_an_hour_before_answering_a_tool_call_that_may_still_run(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The latest turn's tool may still be running in a Claude Code that does not register sessions:
    a placeholder now would become a duplicate when the real result lands."""
    path = session_file(claude_home)
    cut = damage.inject_cut_after_tool_use(path.read_bytes().splitlines(keepends=True))
    path.write_bytes(cut.data)
    assert main(["fix", "--quiet-period", "0"]) == EXIT_FINDINGS
    assert path.read_bytes() == cut.data
    assert "may still be running" in capsys.readouterr().out
    two_hours_ago = time.time() - 7200
    os.utime(path, (two_hours_ago, two_hours_ago))
    assert main(["fix", "--quiet-period", "0"]) == EXIT_OK
    assert path.read_bytes().startswith(cut.data)
    added = json.loads(path.read_bytes()[len(cut.data) :])
    assert added["message"]["content"][0]["tool_use_id"] == cut.tool_id
    assert added["message"]["content"][0]["is_error"] is True
    assert main(["scan"]) == EXIT_OK


@requires_corpus
def test_fix_leaves_a_live_sessions_agent_file_alone(
    claude_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 2.0.x subagent file is named agent-<id>.jsonl; only its lines' sessionId ties it to the
    live session."""
    agent = session_file(claude_home).with_name("agent-1234abcd.jsonl")
    session_file(claude_home).rename(agent)
    damage_with_resumed_duplicate(agent)
    damaged = agent.read_bytes()
    registry = claude_home / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    assert main(["fix", "--quiet-period", "0", str(agent)]) == EXIT_FINDINGS
    assert agent.read_bytes() == damaged
    assert f"skipped {agent}: live" in capsys.readouterr().out


def test_an_unsupported_platform_gets_one_line_not_a_traceback() -> None:
    code = "import sys; sys.platform = 'win32'; from riffd.entry import main; raise SystemExit(main(['status']))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=riffd_env(),
    )
    assert result.returncode == 2
    assert (
        result.stderr
        == "riffd: win32 is not supported: riffd runs on Linux (WSL2 included) and macOS\n"
    )


def test_the_command_table_is_true_to_the_commands_and_a_command_loads_only_its_module() -> None:
    from riffd.commands.cli import COMMANDS

    full = build_parser()
    subparsers = next(
        action for action in full._actions if isinstance(action, argparse._SubParsersAction)
    )
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert helps == {name: text for name, (_module, text) in COMMANDS.items()}
    code = (
        "import sys; from riffd.commands.cli import build_parser; build_parser(['--config', 'x.toml', 'status']); "
        "print(sorted(name for name in sys.modules if name.startswith('riffd.commands.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=riffd_env()
    ).stdout
    assert "riffd.commands.daemon" in loaded and "riffd.commands.archive" not in loaded
    # tomlkit and the config editor stay out of status
    assert "riffd.commands.config'" not in loaded


def test_fix_json_keeps_schema_1s_keys_in_order(tmp_path: Path) -> None:
    """`fix --json` is built from typed results; its document keeps schema 1's keys and their order."""
    from helpers import damage

    folder = tmp_path / "claude" / "projects" / "-home-me"
    folder.mkdir(parents=True)
    session = folder / "5e55104e-0000-4000-8000-00000000c0de.jsonl"
    session.write_bytes(
        b"".join(damage.inject_resumed_duplicate(damage.generated_session(3)).lines)
    )
    os.utime(
        session, (time.time() - 3600, time.time() - 3600)
    )  # idle: a dry run checks as fix does
    env = os.environ | {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    result = subprocess.run(
        [sys.executable, "-m", "riffd", "fix", "--json", "--dry-run", str(session)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    document = json.loads(result.stdout)
    assert list(document) == [
        "schema",
        "riffd",
        "dry_run",
        "recovered",
        "files",
        "summary",
        "errors",
    ]
    [entry] = document["files"]
    assert list(entry) == ["path", "plan", "notes", "outcome"]
    assert entry["outcome"] == "would_repair" and entry["plan"]["edits"]


def configured_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, Path]:
    """A configuration whose Claude folder is not the shell's, and whose root is not called
    `projects`, with a real session in it: (the config file, its Claude folder, the session)."""
    shell_claude, configured = tmp_path / "shell-claude", tmp_path / "configured-claude"
    (shell_claude / "sessions").mkdir(parents=True)
    (configured / "sessions").mkdir(parents=True)
    root = tmp_path / "synced-transcripts"
    project = root / "-path-to-Demo"
    project.mkdir(parents=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(shell_claude))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "riffd.toml"
    config.write_text(f'claude_dir = "{configured}"\nroots = ["{root}"]\n')
    path = project / f"{SESSION}.jsonl"
    path.write_bytes(
        (CORPUS_DIR / "d-kimuson-claude-code-viewer" / f"{SESSION}.jsonl").read_bytes()
    )
    return config, configured, path


@requires_corpus
def test_scan_asks_the_configured_claude_folder_whether_a_tool_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config, configured, path = configured_elsewhere(tmp_path, monkeypatch)
    lines = path.read_bytes().splitlines(keepends=True)
    cut = max(number for number, line in enumerate(lines) if b'"type":"tool_use"' in line)
    path.write_bytes(b"".join(lines[: cut + 1]))  # the tool's result is not written yet
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))  # quiet: only the registry says the client runs
    entry = configured / "sessions" / f"{os.getpid()}.json"
    entry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    from conftest import transcript_bytes

    for name in ("a", "b"):  # 34 MB in all: with --jobs 2, the files go to worker processes
        (path.parent / f"{name}.jsonl").write_bytes(transcript_bytes(57, pad=300_000))
    for jobs in ("1", "2"):
        assert main(["--config", str(config), "scan", "--jobs", jobs]) == EXIT_OK
        assert f"line {cut + 1}: pending_tool_call: " in capsys.readouterr().out
    entry.unlink()
    assert main(["--config", str(config), "scan"]) == EXIT_FINDINGS
    assert f"line {cut + 1}: missing_tool_result: " in capsys.readouterr().out


@requires_corpus
def test_fix_and_backups_restore_ask_the_configured_claude_folder_whether_a_session_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configuration whose Claude folder is not the shell's: the running client registers the
    session in the configured folder's sessions/, and `fix` and `backups restore` read that
    registry before they write."""
    config, configured, path = configured_elsewhere(tmp_path, monkeypatch)
    damage_with_resumed_duplicate(path)
    damaged = path.read_bytes()
    entry = configured / "sessions" / f"{os.getpid()}.json"
    entry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    assert main(["--config", str(config), "fix", "--quiet-period", "0"]) == EXIT_FINDINGS
    assert path.read_bytes() == damaged
    assert f"skipped {path}: live" in capsys.readouterr().out
    # Once the client is gone, the repair runs; putting the backup back waits for it the same way.
    entry.unlink()
    assert main(["--config", str(config), "fix", "--quiet-period", "0"]) == EXIT_OK
    assert path.read_bytes() != damaged
    capsys.readouterr()
    assert main(["--config", str(config), "backups", "list", "--json"]) == EXIT_OK
    (record,) = json.loads(capsys.readouterr().out)
    entry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    restore = ["--config", str(config), "backups", "restore", record["id"], "--quiet-period", "0"]
    assert main(restore) != EXIT_OK
    assert path.read_bytes() != damaged
    assert "live" in capsys.readouterr().err
    entry.unlink()
    assert main(restore) == EXIT_OK
    assert path.read_bytes() == damaged


@requires_corpus
def test_a_closed_standard_output_is_one_error_line_not_a_traceback(tmp_path: Path) -> None:
    """`riffd show FILE >&-` (stdout closed, not a pipe whose reader left) printed a traceback and
    exited 1. A command stops at the first line it prints there; one that prints nothing there runs
    (`archive ingest` says what it did on stderr)."""
    sample = CORPUS_DIR / "marot-spotter" / "short.jsonl"
    env = riffd_env(RIFFD_STATE_DIR=str(tmp_path / "state"), CLAUDE_CONFIG_DIR=str(tmp_path))

    def closed(*words: str) -> subprocess.CompletedProcess[str]:
        command = " ".join(map(shlex.quote, [sys.executable, "-m", "riffd", *words]))
        return subprocess.run(
            ["sh", "-c", f"{command} >&-"], env=env, capture_output=True, text=True, timeout=60
        )

    ingest = closed("archive", "ingest", str(sample.parent))
    assert ingest.returncode == EXIT_OK, ingest.stderr
    assert "riffd: archived " in ingest.stderr
    for words in (["show", str(sample)], ["status", "--json"], ["archive", "stats"]):
        result = closed(*words)
        assert result.returncode == EXIT_ERROR, result.stderr
        assert result.stderr.splitlines()[-1] == (
            "riffd: error: standard output: closed, so what this command prints would be lost; "
            "send it somewhere (a file, a pipe, or >/dev/null to drop it)"
        )
        assert "Traceback" not in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "python -u"])
def test_a_full_standard_output_is_named_in_one_line(tmp_path: Path, unbuffered: str) -> None:
    """`riffd show FILE >/dev/full` said `riffd: error: No space left on device`, as if a file of
    riffd's were at fault; with Python's usual buffered output, what was still buffered failed
    again at the exit: "Exception ignored" and a traceback, exit 120, and `--help` or `--version`
    there exited 0 or 120 (argparse drops the error). One line naming standard output, exit 2,
    with and without `python -u`."""
    from conftest import transcript_bytes

    sample = tmp_path / "projects" / "-p" / f"{SESSION}.jsonl"
    sample.parent.mkdir(parents=True)
    sample.write_bytes(transcript_bytes(40))
    env = riffd_env(
        RIFFD_STATE_DIR=str(tmp_path / "state"),
        CLAUDE_CONFIG_DIR=str(tmp_path),
        PYTHONUNBUFFERED=unbuffered,
    )
    for words in (
        ["show", str(sample)],
        ["scan", "--json", str(sample)],
        ["--help"],
        ["scan", "--help"],
        ["--version"],
    ):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                [sys.executable, "-m", "riffd", *words],
                env=env,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        assert result.returncode == EXIT_ERROR, (words, result.stderr)
        assert result.stderr.splitlines()[-1] == (
            "riffd: error: standard output: No space left on device"
        ), (words, result.stderr)
        assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


@requires_corpus
def test_a_restore_that_fails_says_it_was_not_restored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup put back where the disk is full: the message said "not repaired ... writing the
    repaired copy" over the original, and "the transcript is untouched" for a new file."""
    from helpers.fusefs import Mount

    with Mount(tmp_path / "backing", tmp_path / "mount", tmp_path / "faults.json") as mount:
        claude = mount.mountpoint / "claude"
        # (a project whose name holds "repaired": the message's words change, not its path)
        project = claude / "projects" / "-home-ana-unrepaired-bikes"
        project.mkdir(parents=True)
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
        monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
        path = project / f"{SESSION}.jsonl"
        path.write_bytes(
            (CORPUS_DIR / "d-kimuson-claude-code-viewer" / f"{SESSION}.jsonl").read_bytes()
        )
        damage_with_resumed_duplicate(path)
        assert main(["fix", "--quiet-period", "0"]) == EXIT_OK
        capsys.readouterr()
        assert main(["backups", "list", "--json"]) == EXIT_OK
        (record,) = json.loads(capsys.readouterr().out)
        repaired = path.read_bytes()
        mount.faults(
            {"ops": ["create"], "glob": "*/-home-ana-unrepaired-bikes/*", "errno": errno.ENOSPC}
        )
        restore = ["backups", "restore", record["id"], "--quiet-period", "0"]
        assert main(restore) == EXIT_ERROR
        err = capsys.readouterr().err
        assert f"{path}: not restored, no space left on the device" in err, err
        assert "repaired" not in err.replace("unrepaired-bikes", "")
        assert path.read_bytes() == repaired
        new = project / "copy.jsonl"
        assert main([*restore, "--to", str(new)]) == EXIT_ERROR
        err = capsys.readouterr().err
        assert f"{new}: not restored, no space left on the device" in err, err
        assert "nothing was written there" in err and not new.exists()
        mount.faults()


def test_a_fifo_named_like_a_transcript_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """A FIFO in a project folder, named as a session is: scan, fix and archive ingest of the folder
    opened it to read and waited for a writer that never came (an attack). Each names it and goes
    on."""
    from conftest import transcript_bytes

    project = tmp_path / "claude" / "projects" / "-p"
    project.mkdir(parents=True)
    os.mkfifo(project / f"{SESSION}.jsonl")
    (project / "11111111-2222-3333-4444-555555555555.jsonl").write_bytes(transcript_bytes(5))
    env = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
    }
    said = f"{project / SESSION}.jsonl: not a regular file (a FIFO, a device or a socket)"
    for words in (["scan"], ["fix", "--quiet-period", "0"], ["archive", "ingest"]):
        done = run_riffd(*words, str(tmp_path / "claude" / "projects"), env=env, timeout=60)
        assert done.returncode == EXIT_ERROR, (words, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    # the transcript beside it was read: archived
    assert "archived 5 new line(s)" in done.stderr


def test_the_daemon_started_with_stdout_closed_holds_dev_null_there(tmp_path: Path) -> None:
    """With descriptor 1 free, the daemon's next file or socket took it: its state folder's guard
    socket, which it then passed on when it started again in place (the review). Descriptor 1 is
    /dev/null now, and no child inherits it."""
    env = riffd_env(
        RIFFD_STATE_DIR=str(tmp_path / "state"), CLAUDE_CONFIG_DIR=str(tmp_path / "claude")
    )
    command = " ".join(map(shlex.quote, [sys.executable, "-m", "riffd", "run"]))
    daemon = subprocess.Popen(
        ["sh", "-c", f"exec {command} >&-"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        held = ""
        while time.monotonic() < deadline and held != os.devnull:
            with contextlib.suppress(OSError):
                held = os.readlink(f"/proc/{daemon.pid}/fd/1")
            time.sleep(0.05)
        assert held == os.devnull
        assert (tmp_path / "state").is_dir() or daemon.poll() is None
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


@pytest.mark.parametrize(
    ("group", "action"),
    [
        ("archive", "search"),
        ("config", "validate"),
        ("backups", "restore"),
        ("hook", "session-start"),
    ],
)
def test_a_command_given_no_action_shows_its_own_help(
    group: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`riffd archive` printed riffd's own help listing only `archive`, not its actions."""
    assert main([group]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"usage: riffd {group} ") and action in err, err


def test_backups_list_names_a_folder_that_is_not_one_and_a_latest_that_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file as the backup folder, and `list latest` with no session here, each said "0
    backup(s)" and exit 0; a folder not there said nothing of it."""
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "afile"
    a_file.write_text("")
    assert main(["backups", "--backup-dir", str(a_file), "list"]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"riffd: error: {a_file}: not a folder; no backups can be listed\n"
    )
    assert main(["backups", "--backup-dir", str(tmp_path / "nope"), "list"]) == EXIT_OK
    assert "0 backup(s) in" in (said := capsys.readouterr().err) and "no such folder yet" in said
    assert main(["backups", "list", "latest"]) == EXIT_ERROR
    assert "riffd: error: latest: no session of the project" in capsys.readouterr().err
    assert main(["backups", "list"]) == EXIT_OK  # the configured folder, not made yet: none
    assert "0 backup(s)" in capsys.readouterr().err


def test_fix_and_its_dry_run_stop_at_a_backup_folder_below_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fix --dry-run` said "1 would repair (the same checks as a real run)" where the real run
    stopped at `Not a directory`, naming no option."""
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    a_file = tmp_path / "afile"
    a_file.write_text("")
    for dry_run in (["--dry-run"], []):
        assert main(["fix", *dry_run, "--backup-dir", str(a_file / "b"), str(tmp_path)]) == 2
        assert capsys.readouterr().err == (
            f"riffd: error: {a_file / 'b'} (--backup-dir): {a_file} is a file, not a folder; no "
            "backup could be taken, so nothing is repaired\n"
        )


def test_prune_names_its_option_for_a_keep_of_0(capsys: pytest.CaptureFixture[str]) -> None:
    """It said `keep_per_file must be at least 1`, a name the user never typed."""
    assert main(["backups", "prune", "--keep", "0"]) == EXIT_ERROR
    assert "argument --keep: '0' is not 1 or more" in capsys.readouterr().err


def test_prune_refuses_a_config_with_errors_and_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a typo beside `backups.dir`, prune went on in the default folder ("using the default
    folders"), and it deletes."""
    config = tmp_path / "riffd.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[backups]\ndir = "{tmp_path}/b"\ntypo = 1\n'
    )
    assert main(["--config", str(config), "backups", "prune"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "backups.typo" in err and "`riffd backups prune` edits files" in err, err
    assert "using the default folders" not in err
