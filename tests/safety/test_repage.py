"""`riffd archive compact` moves an archive of riffd 0.2 or earlier (1 KiB pages) to 4 KiB pages:
every line and search reads as before, never while another process has the archive open, and a
kill -9 at any moment of the rewrite leaves the archive whole (SQLite's rollback journal)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.run import kill_9_after, run_riffd
from helpers.tmpfs import small_tmpfs
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
    db_path, held = old_archive(tmp_path, sessions=2, lines=150)
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
        assert "keeps its 1024-byte pages" in done.stderr
        assert "another process has the archive open (the daemon?): stop it" in done.stderr
        assert page_size(db_path) == 1024
        assert holdings(reader) == held  # and it reads on, in WAL mode
        assert reader.connection.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        reader.close()


REPAGE = """
import sys
from collections.abc import Callable
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
    for round_number in range(1000):
        delay = round_number * 0.002  # later each time, until a kill comes after the move
        kill_9_after(REPAGE, db_path, delay=delay)
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


def _midway(archive: Archive, action: Callable[[], object]) -> None:
    """Run `action` once, as the archive's connection starts setting the new page size: between
    leaving WAL mode and the rewrite, where another process may open the archive."""
    done: list[bool] = []

    def trace(statement: str) -> None:
        if statement.startswith("PRAGMA page_size = ") and not done:
            done.append(True)
            action()

    archive.connection.db.set_trace_callback(trace)


def test_a_process_that_opens_the_archive_midway_is_named_not_taken_for_done(
    tmp_path: Path,
) -> None:
    """A riffd that opens the archive between the two steps sets WAL mode again, and SQLite then
    keeps the pages: the move says it was not done."""
    db_path, held = old_archive(tmp_path, sessions=1, lines=200)
    archive = Archive(db_path)
    _midway(archive, lambda: Archive(db_path).close())
    try:
        why = archive.repage()
        assert why is not None and "another process has the archive open" in why
        assert holdings(archive) == held
    finally:
        archive.close()
    assert page_size(db_path) == 1024


def test_a_reader_that_comes_midway_leaves_the_archive_whole_and_says_its_mode(
    tmp_path: Path,
) -> None:
    """A reader holding a read transaction from before the rewrite until after it keeps the
    rewrite from starting and the archive out of WAL mode for a while: both are said, nothing
    changes, and the next riffd to open it has it in WAL mode again."""
    db_path, held = old_archive(tmp_path, sessions=1, lines=200)
    archive = Archive(db_path, lock_timeout=0.5)
    reader = sqlite3.connect(db_path, isolation_level=None)

    def read() -> None:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM files").fetchone()

    _midway(archive, read)
    try:
        why = archive.repage()
        assert why is not None and "another process has the archive open" in why
        assert "left in rollback-journal mode" in why
    finally:
        reader.execute("COMMIT")
        reader.close()
        archive.close()
    again = Archive(db_path, check=True)
    try:
        assert again.moved_aside is None and holdings(again) == held
        assert again.connection.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        again.close()
    assert page_size(db_path) == 1024


def test_a_full_disk_stops_the_move_whole_and_says_to_make_room(tmp_path: Path) -> None:
    """On a disk with room for the archive but not for the move's journal (a tmpfs of 1.5 times its
    size), the archive is as it was, in WAL mode, and it is said that the disk is full and what room
    the move needs."""
    db_path, held = old_archive(tmp_path, sessions=2, lines=600)
    with small_tmpfs(tmp_path / "small", db_path.stat().st_size * 3 // 2 // 1024) as small:
        shutil.copy2(db_path, small / "archive.db")
        archive = Archive(small / "archive.db")
        try:
            why = archive.repage()
        finally:
            archive.close()
        assert why is not None and "full" in why and "make room" in why
        again = Archive(small / "archive.db", check=True)
        try:
            assert again.moved_aside is None and holdings(again) == held
            assert again.connection.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            again.close()
        assert page_size(small / "archive.db") == 1024
