"""A torn last line (a write cut off by a crash or a kill) is cut off once its session is idle, and
never before its bytes are in the verified backup and in the archive: Claude Code cannot resume past
it, and nothing of it is lost. A writer that continues the line after all, during the replace, gets
it back whole."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import transcript_bytes, transcript_line
from helpers.run import run_riffd
from riffd.archive.store import Archive
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.fsio import FileSystem
from riffd.repair.backup import BackupStore
from riffd.repair.outcomes import Repaired
from riffd.repair.planner import plan_file_repair
from riffd.repair.writer import apply_plan
from riffd.state.store import StateStore
from riffd.transcript.findings import FindingClass
from riffd.transcript.scan import index_file, scan_file
from test_apply import options_for

WHOLE = transcript_bytes(12)
FRAGMENT = transcript_line(13)[:40]  # the first 40 bytes of line 13: no newline, not JSON


def torn_transcript(tmp_path: Path) -> Path:
    """A session file under a Claude Code folder whose last write was cut off an hour ago."""
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    (tmp_path / "claude" / "sessions").mkdir()
    path = project / "11111111-2222-3333-4444-555555555555.jsonl"
    path.write_bytes(WHOLE + FRAGMENT)
    os.utime(path, (os.path.getmtime(path) - 3600,) * 2)
    return path


def riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
    }
    return run_riffd(*args, env=env)


def archived_generations(archive_path: Path, path: Path) -> list[bytes]:
    archive = Archive(archive_path, read_only=True)
    try:
        ((file_id, _name, _session),) = archive.files_of(str(path))
        return [
            b"".join(archive.iter_file(file_id, generation))
            for generation in archive.generations(file_id)
        ]
    finally:
        archive.close()


def test_fix_cuts_a_torn_last_line_after_keeping_it_in_the_backup_and_the_archive(
    tmp_path: Path,
) -> None:
    path = torn_transcript(tmp_path)
    assert [finding.cls for finding in scan_file(path).findings] == [FindingClass.TORN_TAIL]
    result = riffd(tmp_path, "fix", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_bytes() == WHOLE  # every other byte as it was
    assert "remove line 13: the last line is the fragment of an interrupted write" in result.stdout
    assert "0 finding(s) remain" in result.stderr
    (record,) = BackupStore(tmp_path / "state" / "backups").list()
    assert (
        BackupStore(tmp_path / "state" / "backups").open_bytes(record.backup_id) == WHOLE + FRAGMENT
    )
    # the version it had, then the one it has: `sessions` says the archive holds it whole now
    assert archived_generations(tmp_path / "state" / "archive.db", path) == [
        WHOLE + FRAGMENT,
        WHOLE,
    ]
    (session,) = json.loads(riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    assert session["archived"] and session["whole"] is True, session
    again = riffd(tmp_path, "fix", str(path))
    assert again.returncode == 0 and path.read_bytes() == WHOLE


def test_a_torn_tail_that_cannot_be_archived_first_is_kept_and_said(tmp_path: Path) -> None:
    path = torn_transcript(tmp_path)
    (tmp_path / "state" / "archive.db").mkdir(parents=True)  # an archive that cannot be opened
    result = riffd(tmp_path, "fix", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert path.read_bytes() == WHOLE + FRAGMENT
    assert "the torn last line 13 is kept: it could not be put in the archive" in result.stdout
    assert "1 finding(s) remain" in result.stderr


def worker_settings(tmp_path: Path) -> WorkerSettings:
    """The daemon's worker on the sandbox of torn_transcript, repairing at once."""
    claude = tmp_path / "claude"
    return WorkerSettings(
        repair=True,
        quiet_period=0,
        backup_dir=tmp_path / "state" / "backups",
        claude_dir=claude,
        roots=(claude / "projects",),
    )


def test_the_daemon_cuts_a_torn_tail_once_the_archive_holds_it(tmp_path: Path) -> None:
    path = torn_transcript(tmp_path)
    settings = worker_settings(tmp_path)
    store = StateStore(tmp_path / "state" / "state.db")
    archive = Archive(tmp_path / "state" / "archive.db")
    try:
        outcome = Worker(store, settings, archive=archive).process(path)
        assert outcome.repair == "repaired", outcome
        assert path.read_bytes() == WHOLE
        state = store.file(str(path))
        assert state is not None and state.findings == []
        ((file_id, _name, _session),) = archive.files_of(str(path))
        first, *later = archive.generations(file_id)
        assert b"".join(archive.iter_file(file_id, first)) == WHOLE + FRAGMENT
        # the repaired file, a generation of its own
        assert b"".join(archive.iter_file(file_id)) == WHOLE
        assert later
    finally:
        archive.close()
        store.close()


def test_without_an_archive_the_daemon_keeps_the_torn_tail(tmp_path: Path) -> None:
    path = torn_transcript(tmp_path)
    settings = worker_settings(tmp_path)
    store = StateStore(tmp_path / "state" / "state.db")
    try:
        outcome = Worker(store, settings).process(path)
        assert outcome.repair == "skipped:nothing_safe_to_do"
        assert "the torn last line 13 is kept: the archive is off" in outcome.why
        assert path.read_bytes() == WHOLE + FRAGMENT
    finally:
        store.close()


def test_a_scan_and_the_daemon_report_a_torn_tail_alike(tmp_path: Path) -> None:
    """One finding for a torn tail, whoever finds it: `riffd scan` (a last line that is not JSON)
    and the daemon (a last line with no newline after the quiet period) say the same."""
    path = torn_transcript(tmp_path)
    (scanned,) = scan_file(path).findings
    store = StateStore(tmp_path / "state" / "state.db")
    try:
        settings = WorkerSettings(**{**worker_settings(tmp_path).__dict__, "repair": False})
        Worker(store, settings).process(path)
        state = store.file(str(path))
        assert state is not None
        assert state.findings == [scanned.to_json()]
    finally:
        store.close()
    assert scanned.cls is FindingClass.TORN_TAIL and scanned.lines == (13,)
    assert scanned.offset == len(WHOLE)


class ContinuingWriterFS(FileSystem):
    """The torn line's writer was only slow: it finishes the line in the old file just after riffd's
    swap."""

    def __init__(self, rest: bytes) -> None:
        self.rest = rest

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        old_fd = os.open(dst, os.O_WRONLY | os.O_APPEND)
        try:
            super().exchange(src, dst)
            os.write(old_fd, self.rest)
        finally:
            os.close(old_fd)


def test_a_torn_line_continued_during_the_replace_comes_back_whole(tmp_path: Path) -> None:
    path = torn_transcript(tmp_path)
    rest = transcript_line(13)[40:] + transcript_line(14)
    plan = plan_file_repair(index_file(path, with_identity=True))
    assert [finding.cls for finding in plan.fixes] == [FindingClass.TORN_TAIL]
    outcome = apply_plan(plan, options_for(tmp_path, fs=ContinuingWriterFS(rest)))
    assert isinstance(outcome, Repaired), outcome
    # line 13 as its writer meant it, then line 14
    assert path.read_bytes() == WHOLE + FRAGMENT + rest
    assert outcome.carried_over_bytes == len(FRAGMENT + rest)
    assert any("put back" in warning for warning in outcome.warnings)
    assert scan_file(path).findings == []


def test_fix_and_backups_use_the_configured_folders(tmp_path: Path) -> None:
    path = torn_transcript(tmp_path)
    config = tmp_path / "riffd.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "elsewhere"}"\n[backups]\ndir = "{tmp_path / "my-backups"}"\n'
    )
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "RIFFD_CONFIG": str(config)}
    fixed = run_riffd("fix", str(path), env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert str(tmp_path / "my-backups") in fixed.stdout  # the backup went where the config says
    # and the fragment to the configured state folder
    assert (tmp_path / "elsewhere" / "archive.db").is_file()
    listed = run_riffd("backups", "list", env=env)
    assert listed.returncode == 0 and str(path) in listed.stdout, listed.stdout + listed.stderr


def test_fix_splits_a_glued_record_after_keeping_the_torn_bytes_in_the_backup_and_the_archive(
    tmp_path: Path,
) -> None:
    """A torn record with the next record glued after it, mid-file: `fix` cuts the torn bytes
    (Claude Code skips the whole line, so the history is cut there) once the file is in the
    backup and in the archive; the record glued after them stays byte for byte."""
    path = torn_transcript(tmp_path)
    lines = WHOLE.splitlines(keepends=True)
    glued = [*lines[:6], FRAGMENT + lines[6], *lines[7:]]
    path.write_bytes(b"".join(glued))
    os.utime(path, (os.path.getmtime(path) - 3600,) * 2)
    assert FindingClass.GLUED_RECORD in {finding.cls for finding in scan_file(path).findings}
    result = riffd(tmp_path, "fix", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_bytes() == WHOLE
    (record,) = BackupStore(tmp_path / "state" / "backups").list()
    store = BackupStore(tmp_path / "state" / "backups")
    assert store.open_bytes(record.backup_id) == b"".join(glued)
    assert archived_generations(tmp_path / "state" / "archive.db", path)[0] == b"".join(glued)
