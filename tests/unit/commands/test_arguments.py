"""Arguments at their edges, as a user types them: a clear error and exit 2, never a traceback, and
never a value that switches a protection off (nan or a negative quiet period would make every file
count as idle)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import transcript_bytes
from helpers.run import run_riffd
from riffd.commands.cli import main
from riffd.hooks.pre_tool_use import UsageError, parse_args
from riffd.repair.backup import BackupStore

FLOAT_OPTIONS = [  # (the words before the option, the option)
    (("fix", "--dry-run"), "--quiet-period"),
    (("backups", "restore", "20990101T000000.000000Z-nope-abcdef"), "--quiet-period"),
    (("backups", "prune"), "--max-age"),
    (("backups", "prune"), "--max-total-mb"),
]


def riffd(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    folders = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
    }
    return run_riffd(*args, env=folders | env, cwd=tmp_path)


@pytest.mark.parametrize(
    ("words", "option"),
    FLOAT_OPTIONS,
    ids=lambda item: " ".join(item) if isinstance(item, tuple) else item,
)
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "-inf", "ten"])
def test_a_number_option_refuses_what_is_not_a_finite_amount(
    tmp_path: Path, words: tuple[str, ...], option: str, value: str
) -> None:
    (tmp_path / "state" / "backups").mkdir(parents=True)
    result = riffd(tmp_path, *words, f"{option}={value}")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert (
        f"argument {option}: '{value}' is not a" in result.stderr
        and "Traceback" not in result.stderr
    )


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "ten"])
def test_a_search_limit_of_no_hits_is_refused_not_taken_for_no_match(
    tmp_path: Path, value: str
) -> None:
    """`--limit 0` said "no matches" (exit 1) for a word the archive holds."""
    result = riffd(tmp_path, "archive", "search", "word", f"--limit={value}")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"argument --limit: '{value}' is not" in result.stderr
    assert "no matches" not in result.stderr and "Traceback" not in result.stderr


def test_the_hook_refuses_a_window_that_is_not_finite(capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("nan", "inf", "-5", "0"):
        with pytest.raises(UsageError, match="--window must be"):
            parse_args(["pre-tool-use", "--window", value])  # as Claude Code runs it
        # through the full command line
        assert main(["hook", "pre-tool-use", "--window", value]) == 2
        assert f"argument --window: '{value}' is not" in capsys.readouterr().err
    assert parse_args(["pre-tool-use", "--window", "0.5"]) == ("warn", 0.5)


def test_since_takes_the_first_day_of_the_calendar(tmp_path: Path) -> None:
    transcript = tmp_path / "claude" / "projects" / "-p" / "session.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(
        transcript_bytes(4).replace(b'{"type"', b'{"timestamp":"2026-01-02T03:04:05.000Z","type"')
    )
    assert riffd(tmp_path, "archive", "ingest", str(transcript)).returncode == 0
    for zone in ("UTC", "Asia/Tokyo", "America/New_York"):
        result = riffd(tmp_path, "archive", "search", "line", "--since", "0001-01-01", TZ=zone)
        assert result.returncode == 0, (zone, result.stdout, result.stderr)
        assert "line 3" in result.stdout
    later = riffd(tmp_path, "archive", "search", "line", "--since", "9999-12-31")
    assert later.returncode == 1 and "Traceback" not in later.stderr  # nothing that new
    wrong = riffd(tmp_path, "archive", "search", "line", "--since", "2026-13-01")
    assert wrong.returncode == 2 and "argument --since: '2026-13-01' is not a date" in wrong.stderr


def test_restoring_a_backup_onto_a_folder_says_a_folder_is_there(tmp_path: Path) -> None:
    source = tmp_path / "session.jsonl"
    source.write_bytes(transcript_bytes(3))
    store = BackupStore(tmp_path / "state" / "backups")
    fd = os.open(source, os.O_RDONLY)
    try:
        backup_id = store.create(source, fd, source.stat().st_size).backup_id
    finally:
        os.close(fd)
    folder = tmp_path / "restored"
    folder.mkdir()
    result = riffd(tmp_path, "backups", "restore", backup_id, "--to", str(folder), "--force")
    assert result.returncode == 2
    assert (
        f"{folder}: a folder is there; give the path of a file, e.g. {folder / 'session.jsonl'}"
        in result.stderr
    )
    assert "I/O error" not in result.stderr and list(folder.iterdir()) == []
