"""Commands riffd advises are quoted word by word: what a user copies runs as meant, whatever a
session id or a path holds (spaces, quotes, `$(...)`, a newline, bytes that are not UTF-8)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC_DIR, transcript_bytes
from riffd.display import shell_command, shell_word

TRICKY = [
    "plain",
    "with space",
    "it's",
    'say "hi"',
    "$(touch pwned)",
    "`id`",
    "a;b&c|d",
    "new\nline",
    "back\\slash",
    "tab\there",
    "-dash",
    "",
    "*?[x]",
    "~user",
    os.fsdecode(b"caf\xe9-\xff\\'x"),
]


@pytest.mark.parametrize("word", TRICKY, ids=repr)
def test_bash_reads_each_word_back_byte_for_byte(tmp_path: Path, word: str) -> None:
    done = subprocess.run(
        ["bash", "-c", f"printf '%s' {shell_word(word)}"],
        capture_output=True,
        cwd=tmp_path,
        timeout=10,
        check=True,
    )
    assert done.stdout == os.fsencode(word)
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_a_command_is_its_words() -> None:
    assert shlex.split(shell_command("claude", "--resume", "x; rm -rf ~")) == [
        "claude",
        "--resume",
        "x; rm -rf ~",
    ]


def riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environ = dict(
        os.environ,
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
        RIFFD_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(SRC_DIR), os.environ.get("PYTHONPATH")])),
    )
    environ.pop("RIFFD_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "riffd", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_sessions_and_scan_advise_quoted_commands(tmp_path: Path) -> None:
    session = "x$(touch pwned); echo"
    project = tmp_path / "claude" / "projects" / "-home-me-my project"
    project.mkdir(parents=True)
    path = project / "it's here.jsonl"
    data = transcript_bytes(4).replace(
        b"11111111-2222-3333-4444-555555555555", json.dumps(session)[1:-1].encode()
    )
    path.write_bytes(data + b'{"type":"user","uu')  # and a torn last line, for scan's advice

    listed = riffd(tmp_path, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["sessions"]
    assert shlex.split(row["resume"]) == ["claude", "--resume", session]

    scanned = riffd(tmp_path, "scan", "--json", str(path))
    (advice,) = json.loads(scanned.stdout)["files"][0]["suggestions"]
    command = advice.split("`")[1]
    assert shlex.split(command) == ["riffd", "fix", str(path)]
