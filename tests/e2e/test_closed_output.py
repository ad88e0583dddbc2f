"""riffd's output read by a program that stops reading early (`riffd archive search x | head`): riffd
stops without a word and exits 141, as a shell reports grep or cat there; read to its end, the same
command prints everything and exits 0. Real `riffd` subprocesses and real pipes."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import write_config
from helpers.run import riffd_command, riffd_env
from helpers.sessiontree import line
from test_archive_sessions import _riffd

SESSION = "cccccccc-0000-4000-8000-000000000001"


def _ingested_session(tmp_path: Path) -> list[str]:
    """A session of 3000 lines (about 700 kB: ten times what a pipe holds), archived; the command
    that prints it."""
    project = tmp_path / "claude" / "projects" / "-home-user-app"
    project.mkdir(parents=True)
    lines = b"".join(
        line(SESSION, number, f"message {number} " + "x" * 100) for number in range(3000)
    )
    (project / f"{SESSION}.jsonl").write_bytes(lines)
    ingest = _riffd(tmp_path, "archive", "ingest")
    assert ingest.returncode == 0, ingest.stderr
    return riffd_command(config=write_config(tmp_path))


def test_a_reader_that_stops_early_ends_riffd_quietly_with_141(tmp_path: Path) -> None:
    command = [*_ingested_session(tmp_path), "archive", "search", "message", "--limit", "1000"]
    environment = riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude"))
    whole = subprocess.run(command, env=environment, capture_output=True, timeout=60, check=False)
    assert whole.returncode == 0, whole.stderr
    # a hit's last line says how to get back to it
    assert whole.stdout.count(b"claude --resume") == 1000
    # `| head -c 100`: read a little, then close the pipe
    with subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert len(process.stdout.read(100)) == 100
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 141
    assert stderr == b""  # no "Broken pipe", no traceback


def test_a_shell_pipeline_into_head_sees_141_and_nothing_on_stderr(tmp_path: Path) -> None:
    """As a user types it: `set -o pipefail`, the exit code is riffd's."""
    command = shlex.join(
        [*_ingested_session(tmp_path), "archive", "search", "message", "--limit", "1000"]
    )
    run = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command} | head -n 1 >/dev/null"],
        env=riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude")),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (run.returncode, run.stderr) == (141, b"")


PROBE = """
import os, sys
from riffd.commands.output import stdout_reader_gone
print(stdout_reader_gone(), file=sys.stderr)
"""


def test_only_a_stdout_whose_reader_is_gone_counts_as_gone(tmp_path: Path) -> None:
    """The check riffd makes after a BrokenPipeError: a pipe with its reader closed is gone; an open
    pipe, a file and /dev/null are not (a BrokenPipeError from one of riffd's own pipes stays an
    error)."""

    def probe(stdout: int) -> str:
        run = subprocess.run(
            [sys.executable, "-c", PROBE],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=riffd_env(),
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        return run.stderr.strip()

    read, write = os.pipe()
    try:
        assert probe(write) == "False"  # its reader is still open
        os.close(read)
        assert probe(write) == "True"
    finally:
        os.close(write)
    with open(tmp_path / "out.txt", "wb") as file:
        assert probe(file.fileno()) == "False"
    assert probe(subprocess.DEVNULL) == "False"
