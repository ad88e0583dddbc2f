"""`riffd fix` judges the file it wrote: its summary and exit code come from scanning the new
file."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from helpers import damage
from riffd.commands.cli import main
from riffd.commands.output import EXIT_FINDINGS, EXIT_OK
from riffd.transcript.scan import scan_file


def idle(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    return path


def test_a_line_written_twice_is_repaired_and_fix_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = damage.inject_identical_line(damage.generated_session(segments=2))
    path = idle(tmp_path / "projects" / "s.jsonl", b"".join(damaged.lines))
    # Claude Code loads a uuid once: a repeated line, not a duplicate result
    assert {str(finding.cls) for finding in scan_file(path).findings} == {"repeated_line"}
    assert main(["fix", "--backup-dir", str(tmp_path / "backups"), "--json", str(path)]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    [result] = document["files"]
    assert result["outcome"] == "repaired" and result["remaining"] == []
    assert scan_file(path).findings == []


def test_what_the_repair_leaves_is_counted_from_the_new_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines
    lines = damage.inject_invalid_type(lines).lines  # riffd never edits it: it remains
    path = idle(tmp_path / "projects" / "s.jsonl", b"".join(lines))
    assert (
        main(["fix", "--backup-dir", str(tmp_path / "backups"), "--json", str(path)])
        == EXIT_FINDINGS
    )
    [result] = json.loads(capsys.readouterr().out)["files"]
    assert (
        [item["class"] for item in result["remaining"]]
        == [str(finding.cls) for finding in scan_file(path).findings]
        == ["invalid_tool_result"]
    )


def test_a_finding_riffd_never_edits_comes_with_what_to_do_about_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fix` ended on "1 finding(s) remain" and exit 1 with no word on what to do about a class it
    never edits; it says now what `riffd status` says, and the command it names works."""
    lines = damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines
    lines = damage.inject_invalid_type(lines).lines
    path = idle(tmp_path / "projects" / "s.jsonl", b"".join(lines))
    backups = ["--backup-dir", str(tmp_path / "backups")]
    assert main(["fix", *backups, str(path)]) == EXIT_FINDINGS
    err = capsys.readouterr().err
    [finding] = scan_file(path).findings
    advice = (
        f"    riffd never edits this (invalid_tool_result): `riffd show {path}` shows where; if the "
        f"session resumes well, `riffd ack {path}:{finding.line}` acknowledges it\n"
    )
    assert f"  {path}:{finding.line}: invalid_tool_result: " in err and advice in err, err
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    assert main(["ack", f"{path}:{finding.line}"]) == EXIT_OK
    assert main(["fix", *backups, str(path)]) == EXIT_OK


def test_a_skip_says_its_reason_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan with nothing safe to do: its note is the skip's reason, printed once (it was twice,
    on the `skipped` line and again as a `note:`)."""
    lines = damage.generated_session(segments=2)
    cut = damage.inject_cut_after_tool_use(lines, choose=lambda points: points[-1]).lines
    path = tmp_path / "projects" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(cut))
    os.utime(path, (time.time() - 300, time.time() - 300))  # idle, not yet for a long time
    assert main(["fix", "--backup-dir", str(tmp_path / "backups"), str(path)]) == EXIT_FINDINGS
    out = capsys.readouterr().out
    assert f"skipped {path}: nothing_safe_to_do: missing result for " in out, out
    said = re.findall(r"missing result for (\S+) not added", out)
    assert said and len(said) == len(set(said)) and "note:" not in out, out


def test_dry_run_applies_the_quiet_period_as_fix_does_and_names_the_command_that_repairs_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = damage.inject_identical_line(damage.generated_session(segments=2))
    path = tmp_path / "projects" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(damaged.lines))  # modified just now: within the quiet period
    before = path.read_bytes()
    backups = ["--backup-dir", str(tmp_path / "backups")]
    for dry_run in (["--dry-run"], []):
        assert main(["fix", *dry_run, *backups, str(path)]) == EXIT_FINDINGS
        out, _ = capsys.readouterr()
        assert "would repair" not in out and f"skipped {path}: live:" in out, out
        assert "within the quiet period of 120s" in out
        # the repair it advises keeps the backup folder asked for
        advised = f"riffd fix --quiet-period 0 --backup-dir {tmp_path / 'backups'} {path}"
        assert f"`{advised}` repairs it now" in out
        assert path.read_bytes() == before
    # a dry run that would repair does not say the findings remain: they are there until it is made
    assert main(["fix", "--dry-run", "--quiet-period", "0", *backups, str(path)]) == EXIT_FINDINGS
    _, err = capsys.readouterr()
    assert "1 would repair" in err and "finding(s) there now, before those repairs" in err, err
    assert main(["fix", "--quiet-period", "0", *backups, str(path)]) == EXIT_OK
    assert scan_file(path).findings == []


# A line that does not parse but holds a record's uuid: riffd keeps it (it is no stray fragment).
TORN_WITH_UUID = b'{"type":"user","uuid":"00000000-0000-4000-8000-0000000000ff","mess\n'


def test_fix_names_the_findings_that_remain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines
    path = idle(
        tmp_path / "projects" / "s.jsonl", b"".join([*lines[:3], TORN_WITH_UUID, *lines[3:]])
    )
    assert main(["fix", "--backup-dir", str(tmp_path / "backups"), str(path)]) == EXIT_FINDINGS
    err = capsys.readouterr().err
    assert "1 finding(s) remain:" in err
    assert f"  {path}:4: malformed_line: " in err


def test_fix_and_backups_restore_take_the_configured_quiet_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repair.quiet_period = 30` in the config: a file last written a minute ago is idle for `fix`,
    as for the daemon and `archive restore` (`fix` used 120 s whatever the config said)."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[repair]\nquiet_period = 30\n', encoding="utf-8"
    )
    damaged = damage.inject_resumed_duplicate(damage.generated_session(segments=2))
    path = tmp_path / "projects" / "s.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(damaged.lines))
    minute_ago = time.time() - 60
    os.utime(path, (minute_ago, minute_ago))
    assert main(["--config", str(config), "fix", str(path)]) == EXIT_OK
    assert scan_file(path).findings == []
    capsys.readouterr()
    # and the skip says the configured period
    path.write_bytes(b"".join(damaged.lines))
    assert main(["--config", str(config), "fix", "--dry-run", str(path)]) == EXIT_FINDINGS
    assert "within the quiet period of 30s" in capsys.readouterr().out


def test_a_class_the_config_leaves_out_is_said_to_be_left_out_and_the_advice_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With `repair.classes` leaving out a class riffd repairs by default, `fix` said "riffd never
    edits this (duplicate_tool_result)", which was not true: it names the setting now, and adding
    the class there (as it says) has `fix` repair it."""
    lines = damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines
    path = idle(tmp_path / "projects" / "s.jsonl", b"".join(lines))
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[repair]\nclasses = ["torn_tail"]\n')
    command = ["--config", str(config), "fix", "--quiet-period", "0", str(path)]
    assert main(command) == EXIT_FINDINGS
    err = capsys.readouterr().err
    assert "riffd repairs this (duplicate_tool_result) by default, but `repair.classes`" in err
    assert "never edits" not in err, err
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[repair]\n'
        'classes = ["torn_tail", "duplicate_tool_result"]\n'
    )
    assert main(command) == EXIT_OK
    assert scan_file(path).findings == []
