"""End to end: a real `riffd run` started on a state folder whose archive riffd 0.2 wrote (format
2, tests/data/archive-format-2) moves it to format 3 as it starts, says so in its log, and archives
on: a session whose texts the old archive holds adds no content, and every line it then gets is
archived byte for byte."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers.daemon import Sandbox
from riffd.archive.store import Archive

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent.parent / "data" / "archive-format-2"
SESSION_3 = "00000000-0000-4000-8000-000000000003.jsonl"


def _one(db_path: Path, query: str) -> object:
    db = sqlite3.connect(db_path)
    try:
        return db.execute(query).fetchone()[0]
    finally:
        db.close()


CONTENTS = "SELECT COUNT(*) FROM contents"
FORMAT = "SELECT value FROM meta WHERE key = 'format'"


def test_the_daemon_moves_an_archive_of_format_2_as_it_starts(sandbox: Sandbox) -> None:
    sandbox.state.mkdir(parents=True, exist_ok=True)
    db_path = sandbox.state / "archive.db"
    shutil.copy2(FIXTURE / "archive.db", db_path)
    before = _one(db_path, CONTENTS)
    # a copy of a session the old archive holds, under another folder: its pieces are known
    session = sandbox.project / SESSION_3
    shutil.copy2(FIXTURE / "projects" / "-home-u-proj" / SESSION_3, session)
    daemon = sandbox.start()

    def archived_whole() -> bool:
        archive = Archive(db_path, read_only=True)
        try:
            return archive.cursor(str(session))[1] == session.stat().st_size
        finally:
            archive.close()

    daemon.wait_until(archived_whole, "the session archived")
    assert _one(db_path, FORMAT) == "3"
    assert "to format 3" in daemon.stderr()
    assert _one(db_path, CONTENTS) == before  # every piece found in what format 2 stored
    first = session.read_bytes().split(b"\n")[0]
    with open(session, "ab") as out:
        out.write(first.replace(b"000000000000", b"000000000999") + b"\n")
    daemon.wait_until(archived_whole, "the appended line archived")
    # what commands read to tell this daemon from one of riffd 0.2 (the sandbox closes the store)
    assert sandbox.open_store().meta("daemon")["archive_format"] == "3"
    daemon.stop()
    archive = Archive(db_path, read_only=True)
    try:
        ((file_id, _path, _session),) = archive.files_of(str(session))
        assert b"".join(archive.iter_file(file_id)) == session.read_bytes()
    finally:
        archive.close()
    verified = sandbox.riffd("archive", "verify", str(session))
    assert verified.returncode == 0 and "1 whole" in verified.stderr, verified.stderr
