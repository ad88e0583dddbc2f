"""Files that are not Claude Code transcripts are never edited, whoever asks: `riffd fix` or the
daemon.

A binary file named `*.jsonl` and another tool's JSON Lines with a torn last line stay byte for
byte; a scan still reports their findings, labelled.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import corpus_transcript_params, transcript_bytes, write_config
from helpers.daemon import Sandbox
from helpers.run import run_riffd
from riffd.transcript.reader import read_span
from riffd.transcript.scan import index_file, scan_file
from riffd.transcript.shape import transcript_doubt

# Bytes no text editor writes: NULs, high bytes, and newlines here and there, ending without one.
BINARY = (
    bytes(range(256)) * 3 + b"\n\x00\x01\xfe\xff" * 50 + b"PK\x03\x04" + bytes(range(200, 256)) * 6
)
OTHER_JSONL = (
    b"".join(
        json.dumps({"event": "step", "id": n, "uuid": f"u{n}", "status": "ok"}).encode() + b"\n"
        for n in range(5)
    )
    + b'{"event": "step", "id": 5, "uuid": "u5", "sta'
)


def doubt_of(path: Path) -> str:
    index = index_file(path).index
    return transcript_doubt(index, lambda line: read_span(path, *index.span(line)))


@pytest.mark.parametrize("path", corpus_transcript_params())
def test_every_real_transcript_is_recognised(path: Path) -> None:
    assert doubt_of(path) == ""


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (BINARY, "is JSON"),
        (OTHER_JSONL, "no line is a Claude Code record"),
        # Claude Code's fields, but not its types: another tool's log of sessions.
        (
            b'{"type": "request", "uuid": "a", "parentUuid": null, "sessionId": "s"}\n',
            "no line is a Claude Code record",
        ),
        # Claude Code's type and ids, without the parent field every conversation line carries.
        (
            b'{"type": "user", "uuid": "a", "sessionId": "s", "message": {"content": "hi"}}\n',
            "no line is",
        ),
        # One record of Claude Code's shape among many lines that are not JSON.
        (transcript_bytes(1) + b"\x00garbage\n" * 3, "3 of its 4 lines are not JSON"),
    ],
)
def test_files_of_other_kinds_are_not_recognised(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "file.jsonl"
    path.write_bytes(data)
    assert why in doubt_of(path)


def test_a_transcript_with_a_torn_last_line_is_recognised(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(
        b'{"type":"summary","summary":"s"}\n' + transcript_bytes(3) + b'{"type":"user","uu'
    )
    assert doubt_of(path) == ""


def test_a_scan_labels_the_findings_of_a_file_it_does_not_recognise(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    path.write_bytes(OTHER_JSONL)
    report = scan_file(path)
    assert [str(finding.cls) for finding in report.findings] == ["torn_tail"]
    assert "no line is a Claude Code record" in report.to_json()["not_a_transcript"]
    assert not any("riffd fix" in advice for advice in report.suggestions)


def riffd(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_riffd(*args, config=config)


def test_fix_leaves_a_binary_file_and_other_json_lines_byte_for_byte(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    folder = tmp_path / "claude" / "projects" / "-home-user-project"
    folder.mkdir(parents=True)
    files = {folder / "blob.jsonl": BINARY, folder / "other-tool.jsonl": OTHER_JSONL}
    for path, data in files.items():
        path.write_bytes(data)
        os.utime(path, (1_000_000_000, 1_000_000_000))  # long idle

    done = riffd(config, "fix", "--quiet-period", "0", str(folder))

    assert {path: path.read_bytes() for path in files} == files
    assert done.stdout.count("not a Claude Code transcript") >= 2, done.stdout + done.stderr
    assert "0 repaired" in done.stderr and done.returncode == 1
    assert not (tmp_path / "state" / "backups").exists() or not list(
        (tmp_path / "state" / "backups").iterdir()
    )


@pytest.mark.slow
def test_the_daemon_leaves_a_binary_file_and_other_json_lines_byte_for_byte(
    sandbox: Sandbox,
) -> None:
    files = {
        sandbox.project / "blob.jsonl": BINARY,
        sandbox.project / "other-tool.jsonl": OTHER_JSONL,
    }
    for path, data in files.items():
        path.write_bytes(data)
        # long idle: the unfinished last line is torn
        os.utime(path, (1_000_000_000, 1_000_000_000))
    daemon = sandbox.start()

    def judged(report: dict[str, object]) -> bool:
        repairs = report["repairs"]
        assert isinstance(repairs, dict)
        return (
            repairs["done"] + sum(repairs["skipped"].values()) + sum(repairs["failed"].values())
            >= 2
        )

    report = daemon.wait_until(
        lambda: sandbox.report_where(judged), "a report of both files' repairs"
    )
    assert report["repairs"]["done"] == 0 and report["repairs"]["skipped"] == {
        "nothing_safe_to_do": 2
    }
    daemon.stop()
    assert {path: path.read_bytes() for path in files} == files
    assert sandbox.backup_ids() == []
