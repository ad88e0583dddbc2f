"""`riffd archive compact` moves an archive of riffd 0.2 or earlier (1 KiB pages) to 4 KiB pages:
every line and search reads as before, never while another process has the archive open, and a
kill -9 at any moment of the rewrite leaves the archive whole (SQLite's rollback journal)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.run import riffd_env, run_riffd
from helpers.wordy import write_session
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive


def old_archive(tmp_path: Path, sessions: int, lines: int) -> tuple[Path, dict[str, bytes]]:
    """An archive on 1 KiB pages, as riffd 0.2 made it, holding `sessions` sessions; return it and
    what it holds of each file."""
    db_path = tmp_path / "state" / "archive.db"
    db_path.parent.mkdir(parents=True)
    made = sqlite3.connect(db_path)
    made.execute("PRAGMA page_size = 1024")
    made.execute("CREATE TABLE made_so (x)")  # (the page size is fixed once a table is written)
    made.execute("DROP TABLE made_so")
    made.close()
    archive = Archive(db_path)
    try:
        for seed in range(sessions):
            path = tmp_path / "projects" / "-p" / f"00000000-0000-4000-8000-{seed:012d}.jsonl"
            write_session(path, lines, seed=seed + 40)
            ingest_file(archive, path)
        assert archive.compact()[1] == 0
        archive.settle()
        held = holdings(archive)
    finally:
        archive.close()
    assert page_size(db_path) == 1024
    return db_path, held


def holdings(archive: Archive) -> dict[str, bytes]:
    return {
        path: b"".join(archive.iter_file(file_id))
        for file_id, path in ((row[0], row[1]) for row in archive.all_files())
    }


def page_size(db_path: Path) -> int:
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()


def config(tmp_path: Path) -> Path:
    path = tmp_path / "riffd.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\nroots = ["{tmp_path / "projects"}"]\n')
    return path


def test_compact_moves_an_old_archive_to_4_kib_pages_keeping_every_line(tmp_path: Path) -> None:
    db_path, held = old_archive(tmp_path, sessions=3, lines=300)
    archive = Archive(db_path)
    word = next(iter(held.values())).split(b'"text":"')[1].split(b" ")[0].decode()
    before = [hit.snippet for hit in archive.search(word)]
    archive.close()
    assert before
    done = run_riffd("archive", "compact", config=config(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "from 1024-byte to 4 KiB pages" in done.stderr
    assert page_size(db_path) == 4096
    archive = Archive(db_path)
    try:
        assert holdings(archive) == held
        assert [hit.snippet for hit in archive.search(word)] == before
        assert archive.connection.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        archive.close()
    again = run_riffd("archive", "compact", config=config(tmp_path))
    assert again.returncode == 0 and "pages" not in again.stderr  # nothing left to do, nothing said


def test_an_archive_another_process_has_open_keeps_its_pages(tmp_path: Path) -> None:
    db_path, held = old_archive(tmp_path, sessions=1, lines=200)
    reader = Archive(db_path)  # (as the daemon holds it)
    try:
        done = run_riffd("archive", "compact", config=config(tmp_path))
        assert done.returncode == 0, done.stderr
        assert "keeps its 1024-byte pages (another process has the archive open" in done.stderr
        assert "while the daemon is stopped" in done.stderr
        assert page_size(db_path) == 1024
        assert holdings(reader) == held  # and it reads on, in WAL mode
        assert reader.connection.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        reader.close()


REPAGE = """
import sys
from pathlib import Path
from riffd.archive.store import Archive
archive = Archive(Path(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()
print(archive.repage(), flush=True)
"""


@pytest.mark.slow  # kills a rewrite of a 20 MB archive at several moments
def test_a_kill_during_the_move_leaves_the_archive_whole(tmp_path: Path) -> None:
    db_path, held = old_archive(tmp_path, sessions=4, lines=2500)
    journal = db_path.parent / "archive.db-journal"
    mid_rewrite = 0  # kills that left SQLite's journal: the rewrite was under way
    for round_number in range(400):
        delay = round_number * 0.005  # later each time, until a kill comes after the move
        with subprocess.Popen(
            [sys.executable, "-c", REPAGE, str(db_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=riffd_env(),
            text=True,
        ) as child:
            assert child.stdin is not None and child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            child.stdin.write("go\n")
            child.stdin.flush()
            time.sleep(delay)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        mid_rewrite += journal.exists()
        archive = Archive(db_path, check=True)
        try:
            assert archive.moved_aside is None
            assert holdings(archive) == held
        finally:
            archive.close()
        if page_size(db_path) == 4096:
            break
    assert mid_rewrite >= 1 and page_size(db_path) == 4096
    archive = Archive(db_path)
    try:
        assert archive.repage() is None
        assert holdings(archive) == held
    finally:
        archive.close()
    assert page_size(db_path) == 4096
