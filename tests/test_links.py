"""Symlinks under the roots: a linked project folder is followed (once, without loops) by every command and the
daemon, and a transcript that is itself a link is named as one, never rewritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import damage
from conftest import CORPUS_DIR, corpus_lines, requires_corpus
from riffd.commands.cli import main
from riffd.commands.common import EXIT_FINDINGS
from riffd.daemon.report import build_report
from riffd.daemon.state import StateStore
from riffd.daemon.worker import Worker, WorkerSettings

BASE = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code config folder (CLAUDE_CONFIG_DIR) with an empty registry and a `projects/` root."""
    folder = tmp_path / "claude"
    (folder / "projects").mkdir(parents=True)
    (folder / "sessions").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(folder))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    return folder


def damaged_session(folder: Path) -> tuple[Path, bytes]:
    """Write a transcript with a resumed duplicate into `folder`, named after its session; return it and its bytes."""
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    session_id = json.loads(damaged.lines[-1])["sessionId"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(damaged.data)
    return path, damaged.data


# --- a transcript that is itself a symlink -------------------------------------------------------------------


@requires_corpus
def test_fix_names_a_symlinked_transcript_and_what_to_repair_instead(
    claude: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real, data = damaged_session(tmp_path / "elsewhere")
    link = claude / "projects" / "-p" / real.name
    link.parent.mkdir()
    link.symlink_to(real)
    assert main(["fix", "--quiet-period", "0", str(link)]) == EXIT_FINDINGS
    out = capsys.readouterr().out
    assert f"skipped {link}: symlink: " in out and "changed" not in out
    assert f"repair the file it points to instead (`riffd fix {real}`)" in out
    assert link.is_symlink() and real.read_bytes() == data


@requires_corpus
def test_the_daemon_reports_a_symlinked_transcript_as_a_symlink(claude: Path, tmp_path: Path) -> None:
    real, data = damaged_session(tmp_path / "elsewhere")
    link = claude / "projects" / "-p" / real.name
    link.parent.mkdir()
    link.symlink_to(real)
    settings = WorkerSettings(repair=True, quiet_period=0, backup_dir=tmp_path / "state" / "backups",
                              claude_dir=claude, roots=(claude / "projects",))
    store = StateStore(tmp_path / "state" / "state.db")
    worker = Worker(store, settings)
    outcome = worker.process(link)
    assert outcome.repair == "skipped:symlink" and outcome.retry_after is None
    report = build_report(store, settings.backup_dir, {"running": True})
    assert report["repairs"]["skipped"] == {"symlink": 1}
    assert link.is_symlink() and real.read_bytes() == data
    assert worker.process(link).repair is None  # not tried again until the file changes
