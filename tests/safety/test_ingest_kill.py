"""`riffd archive ingest` killed (SIGKILL) at random instants while it keeps a session's files
whole, a hundred to a transaction: every file the archive holds is whole, and the next ingest
completes the archive, whose every file then compares byte for byte with the file (`riffd archive
verify`). Real `riffd` subprocesses, real files, a real kill -9."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
from functools import partial
from pathlib import Path

import pytest

from conftest import write_config
from helpers.run import kill_9_at_random, riffd_command, riffd_env, run_riffd
from helpers.sessiontree import build_session


def _files_held(archive: Path) -> int:
    """The versions of files kept whole another process sees committed."""
    try:
        with sqlite3.connect(f"{archive.as_uri()}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT COUNT(*) FROM session_files").fetchone()[0])
    except sqlite3.OperationalError:  # not made yet, or its tables not yet
        return 0


def _more_held(archive: Path, than: int) -> bool:
    return _files_held(archive) > than


@pytest.mark.slow
def test_an_ingest_killed_while_it_keeps_files_whole_leaves_each_whole_or_absent(
    tmp_path: Path,
) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    folder = tree.folder / "tool-results"
    rng = random.Random(7)
    config = write_config(tmp_path)
    environment = riffd_env(CLAUDE_CONFIG_DIR=str(claude))
    archive = tmp_path / "state" / "archive.db"
    kills = 0
    for number in range(5):
        # new saved outputs each round (about 15 transactions of a hundred)
        for at in range(1500):
            (folder / f"k{number}x{at:06d}.txt").write_bytes(
                b"".join(
                    b"%d:%d:%d " % (number, at, byte) for byte in range(rng.randint(100, 1200))
                )
            )
        ingest = subprocess.Popen(
            riffd_command("archive", "ingest", "--no-compact", config=config),
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # once the files' phase has begun (a hundred of them committed, or all of them), at a
        # random instant of it
        kills += kill_9_at_random(
            ingest, partial(_more_held, archive, _files_held(archive)), 0.08, rng
        )
    assert kills >= 3, "the ingest ended before most kills: give it more files"
    # What it holds, it holds whole (a file half stored would be "differs", and stay so: its bytes'
    # hash would name the broken blob for every later version of them)
    verified = run_riffd(
        "archive", "verify", "--json", config=config, env={"CLAUDE_CONFIG_DIR": str(claude)}
    )
    outcomes = {
        item["outcome"]
        for item in map(json.loads, verified.stdout.splitlines())
        if item["kind"] == "tool-result"
    }
    assert "whole" in outcomes and outcomes <= {"whole", "not archived"}, verified.stdout[-2000:]
    done = run_riffd(
        "archive", "ingest", "--no-compact", config=config, env={"CLAUDE_CONFIG_DIR": str(claude)}
    )
    assert done.returncode == 0, done.stderr
    final = run_riffd(
        "archive", "verify", "--json", config=config, env={"CLAUDE_CONFIG_DIR": str(claude)}
    )
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr
    verdicts = [json.loads(line) for line in final.stdout.splitlines()]
    # every file compared byte for byte with the archive's newest version of it
    assert {item["outcome"] for item in verdicts} == {"whole"}
    assert {Path(item["path"]) for item in verdicts} >= {*tree.files(), *folder.iterdir()}
