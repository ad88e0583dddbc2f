"""`riffd ack`: a finding riffd never edits can be acknowledged; it stays listed, marked so, and
stops counting against health, across appends, until the line changes or the acknowledgement is
taken back."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

from conftest import transcript_bytes, transcript_line
from helpers.run import run_riffd
from riffd.fsio import FileSystem
from riffd.reports.build import build_report
from riffd.reports.json import report_document
from riffd.reports.markdown import render_markdown
from riffd.state.records import Watermark
from riffd.state.store import StateStore
from riffd.transcript.acks import line_digest
from riffd.transcript.scan import scan_file

GARBAGE = b'{"type":"user","message":{"role":"us\n'  # a torn fragment a later write closed: line 6


def damaged(tmp_path: Path) -> Path:
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    path = project / "11111111-2222-3333-4444-555555555555.jsonl"
    path.write_bytes(
        transcript_bytes(5) + GARBAGE + b"".join(transcript_line(n) for n in range(6, 10))
    )
    return path


def riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),  # (no config file: the defaults)
    }
    return run_riffd(*args, env=env, cwd=tmp_path)


def test_an_acknowledged_malformed_line_is_listed_but_no_longer_counts(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    assert riffd(tmp_path, "scan", str(path)).returncode == 1
    acked = riffd(tmp_path, "ack", f"{path}:6", "--note", "resumes fine")
    assert acked.returncode == 0, acked.stderr
    assert f"acknowledged {path}:6: malformed_line" in acked.stdout
    # a stray line is repaired only when repair.classes names it: no repair is said to come
    assert "still repairs" not in acked.stdout
    stored = tmp_path / "state" / "acknowledged.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    scan = riffd(tmp_path, "scan", str(path))
    assert scan.returncode == 0, scan.stdout + scan.stderr
    assert "line 6: malformed_line (acknowledged)" in scan.stdout  # still listed
    assert "1 of them acknowledged" in scan.stderr
    listed = riffd(tmp_path, "ack", "--list", "--json")
    (entry,) = json.loads(listed.stdout)["acknowledged"]
    assert (
        entry["path"] == str(path)
        and entry["class"] == "malformed_line"
        and entry["note"] == "resumes fine"
    )
    # Claude Code goes on appending: the same line is still the acknowledged one.
    with open(path, "ab") as handle:
        handle.write(transcript_line(10))
    assert riffd(tmp_path, "scan", str(path)).returncode == 0
    # A second, different malformed line is new damage.
    with open(path, "ab") as handle:
        handle.write(b"\x00\x00 not json\n")
    assert riffd(tmp_path, "scan", str(path)).returncode == 1


def test_a_relative_path_and_a_moved_line_are_still_the_acknowledged_finding(
    tmp_path: Path,
) -> None:
    path = damaged(tmp_path)
    relative = path.relative_to(tmp_path)
    assert riffd(tmp_path, "ack", f"{relative}:6").returncode == 0
    # Lines that come before it now (a rewrite by another tool) move it to line 8: it is recognised
    # by its bytes.
    path.write_bytes(b"\n\n" + path.read_bytes())
    scan = riffd(tmp_path, "scan", str(relative))
    assert scan.returncode == 0 and "line 8: malformed_line (acknowledged)" in scan.stdout, (
        scan.stdout
    )


def test_undo_makes_it_count_again(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    assert riffd(tmp_path, "ack", f"{path}:6").returncode == 0
    undone = riffd(tmp_path, "ack", "--undo", f"{path}:6")
    assert undone.returncode == 0 and "taken back" in undone.stdout
    assert riffd(tmp_path, "scan", str(path)).returncode == 1
    again = riffd(tmp_path, "ack", "--undo", f"{path}:6")
    assert again.returncode == 2 and "nothing acknowledged there" in again.stderr


def test_mistakes_get_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    for target, expected in (
        (f"{path}:x", "is not FILE:LINE"),
        (f"{path}:0", "is not FILE:LINE"),
        (f"{path}:2", "no finding names this line; `riffd scan"),
        (f"{tmp_path}/nope.jsonl:3", "no such transcript"),
    ):
        result = riffd(tmp_path, "ack", target)
        assert result.returncode == 2, (target, result.stdout, result.stderr)
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert (
        not (tmp_path / "state" / "acknowledged.json").exists()
        or json.loads((tmp_path / "state" / "acknowledged.json").read_text())["acknowledged"] == []
    )


def test_the_report_lists_acknowledged_findings_apart_and_stays_healthy(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    assert riffd(tmp_path, "ack", f"{path}:6").returncode == 0
    store = StateStore(tmp_path / "state" / "state.db")
    findings = [finding.to_json() for finding in scan_file(path).findings]
    store.save_file(Watermark(str(path), 1, 1, 0, 0, 0, "", 0, "", 0, 0), "s", findings, 0)
    model = build_report(store, tmp_path / "state" / "backups", {"running": True})
    report = report_document(model)
    assert report["healthy"], report["problems"]
    assert report["findings"]["open"] == {} and report["findings"]["acknowledged"] == {
        "malformed_line": 1
    }
    (item,) = report["attention"]
    assert item["state"] == "acknowledged" and f"riffd ack --undo {path}:6" in item["action"]
    assert f"- acknowledged: {path} line 6: malformed_line" in render_markdown(model)
    # A broken acknowledgements file hides nothing: the finding counts, and the report says why.
    (tmp_path / "state" / "acknowledged.json").write_text("{oops")
    report = report_document(build_report(store, tmp_path / "state" / "backups", {"running": True}))
    assert not report["healthy"] and report["findings"]["open"] == {"malformed_line": 1}
    assert any("acknowledgements not applied" in problem for problem in report["problems"])
    broken = riffd(tmp_path, "ack", "--list")
    assert broken.returncode == 2 and "acknowledged.json: cannot be read" in broken.stderr
    store.close()


class FailsOnceFS(FileSystem):
    """The first read fails with EIO, as a sync client's placeholder does."""

    def __init__(self) -> None:
        self.failed = False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if not self.failed:
            self.failed = True
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().pread(fd, size, offset)


def test_a_line_that_fails_to_read_once_is_still_told_by_its_bytes(tmp_path: Path) -> None:
    """An acknowledged line without a uuid is told by the hash of its bytes, read through the seam
    with its retry policy: one EIO is retried, not taken for a line that cannot be read."""
    path = damaged(tmp_path)
    offset = len(transcript_bytes(5))  # line 6, the garbage
    fs = FailsOnceFS()
    assert line_digest(str(path), offset, fs) == hashlib.sha256(GARBAGE[:-1]).hexdigest()
    assert fs.failed


def test_an_acknowledgement_that_cannot_be_saved_is_not_said_to_be_made(tmp_path: Path) -> None:
    """A state folder that refuses the write (read-only here): `ack` printed "acknowledged ..." and
    then the error, exit 2; it now says only the error."""
    from helpers.fusefs import Mount

    path = damaged(tmp_path)
    with Mount(tmp_path / "backing", tmp_path / "mount", tmp_path / "faults.json") as mount:
        mount.faults({"ops": ["create", "rename"], "glob": "*acknowledged*", "errno": errno.EROFS})
        env = {
            "RIFFD_STATE_DIR": str(mount.mountpoint / "state"),
            "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
            "XDG_CONFIG_HOME": str(tmp_path / "no-config"),  # (no config file: the defaults)
        }
        acked = run_riffd("ack", f"{path}:6", env=env, cwd=tmp_path)
        assert acked.returncode == 2, acked.stderr
        assert acked.stdout == ""
        assert "riffd: error:" in acked.stderr and "Read-only file system" in acked.stderr
        assert "acknowledged" not in acked.stderr.replace("acknowledged.json", "")
        assert not (tmp_path / "backing" / "state" / "acknowledged.json").exists()


def test_fix_of_a_file_that_is_not_a_transcript_advises_what_works(tmp_path: Path) -> None:
    """`fix` names what to do about each finding it leaves. `repair.classes` makes riffd repair a
    malformed line in a transcript, never in a file it does not take for one: there it says riffd
    does not edit the file, and the `ack` it advises does what it says."""
    transcript = damaged(tmp_path)
    other = transcript.with_name("notes.jsonl")
    other.write_bytes(b'{"a": 1}\n{not json\n{"b": 2}\n')
    fixed = riffd(tmp_path, "fix", str(transcript), str(other))
    assert fixed.returncode == 1, fixed.stderr
    by_file = fixed.stderr.split(f"  {other}:2: malformed_line")
    assert "`repair.classes` in the config names it" in by_file[0]  # the transcript's advice
    advice = by_file[1].splitlines()[1]
    assert "riffd does not edit this file: it is not a Claude Code transcript" in advice, advice
    assert "repair.classes" not in advice
    command = advice.split("`")[-2]
    assert command == f"riffd ack {other}:2"
    acked = riffd(tmp_path, *command.split()[1:])
    assert acked.returncode == 0, acked.stderr
    assert "still repairs" not in acked.stdout  # (not such a file, whatever the classes)
    assert riffd(tmp_path, "ack", f"{transcript}:6").returncode == 0
    again = riffd(tmp_path, "fix", str(transcript), str(other))
    assert again.returncode == 0, again.stderr
    # with a class riffd repairs by default (a torn last line), or the class named in the config:
    # the same advice for each finding
    torn = transcript.with_name("torn.jsonl")
    torn.write_bytes(b'{"a": 1}\n{not json\n{"b": 2}\n{"c": ')
    config = tmp_path / "riffd.toml"
    config.write_text('[repair]\nclasses = ["malformed_line", "torn_tail"]\n')
    for words in ((), ("--config", str(config))):
        fixed = riffd(tmp_path, *words, "fix", str(torn))
        assert fixed.returncode == 1, fixed.stderr
        advice = [line for line in fixed.stderr.splitlines() if line.startswith("    ")]
        assert len(advice) == 2, fixed.stderr
        assert all("riffd does not edit this file" in line for line in advice), advice
        assert "repair.classes" not in fixed.stderr
    acked = riffd(tmp_path, "--config", str(config), "ack", f"{torn}:2", f"{torn}:4")
    assert acked.returncode == 0 and "still repairs" not in acked.stdout, acked.stdout


def test_a_broken_acknowledgements_file_is_said_where_it_changes_the_answer(tmp_path: Path) -> None:
    """`{bad` in acknowledged.json made `scan` count an acknowledged finding again and exit 1
    instead of 0, and `fix` likewise, without a word."""
    path = damaged(tmp_path)
    assert riffd(tmp_path, "ack", f"{path}:6").returncode == 0
    assert riffd(tmp_path, "scan", str(path)).returncode == 0
    stored = tmp_path / "state" / "acknowledged.json"
    stored.write_text("{bad")
    for command in (["scan", str(path)], ["fix", "--dry-run", str(path)]):
        result = riffd(tmp_path, *command)
        assert result.returncode == 1, result.stderr
        assert f"riffd: warning: acknowledgements not applied: {stored}" in result.stderr, (
            result.stderr
        )
