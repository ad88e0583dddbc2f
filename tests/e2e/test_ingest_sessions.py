"""`riffd archive ingest` of sessions' files at its edges: a session's folders that are symlinks out of
the roots are named and not followed, a file whose time is ahead of the clock is taken, a saved
output named by its path is taken whole (never by lines), and `riffd fix` leaves a `.jsonl` saved
output alone. Real files laid out as the client writes them, real `riffd` subprocesses."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from helpers.sessiontree import build_session, delete_like_cleanup, line
from test_archive_sessions import _riffd

SESSION = "aaaaaaaa-0000-4000-8000-000000000001"


def _archived_paths(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        return sorted(row[0] for row in db.execute("SELECT base || '/' || path FROM session_files"))


def _transcript(project: Path, session: str) -> Path:
    path = project / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(line(session, 0, "hi"))
    return path


def test_ingest_never_follows_a_sessions_folder_out_of_the_roots(tmp_path: Path) -> None:
    """A session's folder, its tool-results, a saved output and `file-history/<session>` that are
    symlinks to files outside the roots: none is archived (riffd as root would otherwise copy a
    root-only file into a user's session), each link is named once; a project folder that is a
    link is followed, as the transcript walk follows it."""
    claude = tmp_path / "claude"
    project = claude / "projects" / "-tmp-app"
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text("secret outside the roots\n")
    (outside / "sub" / "deep.txt").write_text("deep secret\n")
    sessions = [f"{letter * 8}-0000-4000-8000-00000000000{n}" for n, letter in enumerate("abce", 1)]
    for session in sessions:
        _transcript(project, session)
    links = [
        project / sessions[0],
        project / sessions[1] / "tool-results",
        claude / "file-history" / sessions[2],
        project / sessions[3] / "tool-results" / "x.txt",
    ]
    for link in links:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside / "secret.txt" if link.name == "x.txt" else outside)
    disk = tmp_path / "disk" / "-tmp-linked"  # a project folder on another disk
    (disk / SESSION.replace("a", "d") / "tool-results").mkdir(parents=True)
    (disk / SESSION.replace("a", "d") / "tool-results" / "kept.txt").write_text("kept\n")
    _transcript(disk, SESSION.replace("a", "d"))
    (claude / "projects" / "-tmp-linked").symlink_to(disk)
    result = _riffd(tmp_path, "archive", "ingest")
    assert result.returncode == 0, result.stderr
    assert _archived_paths(tmp_path) == [
        f"{claude}/projects/-tmp-linked/{SESSION.replace('a', 'd')}/tool-results/kept.txt"
    ]
    for link in links:
        assert result.stderr.count(f"riffd: note: {link}: a symlink (to ") == 1, result.stderr
    # Named by their transcripts' paths: the same
    named = _riffd(tmp_path, "archive", "ingest", *(str(project / f"{s}.jsonl") for s in sessions))
    assert named.returncode == 0, named.stderr
    assert len(_archived_paths(tmp_path)) == 1


def test_ingest_takes_a_file_whose_time_is_ahead_of_the_clock(tmp_path: Path) -> None:
    """A clock stepped back, or a network folder's server clock ahead: an ingest takes files as they
    are, whatever their time says."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    ahead = time.time_ns() + 600 * 10**9
    os.utime(output, ns=(ahead, ahead))
    result = _riffd(tmp_path, "archive", "ingest")
    assert result.returncode == 0, result.stderr
    assert str(output) in _archived_paths(tmp_path)
    before = output.read_bytes()
    delete_like_cleanup(tree)
    assert _riffd(tmp_path, "archive", "restore", tree.session_id).returncode == 0
    assert output.read_bytes() == before and output.stat().st_mtime_ns == ahead


def test_a_saved_output_named_by_its_path_is_taken_whole_never_by_lines(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    results = tree.folder / "tool-results"
    events = results / "events.jsonl"
    events.write_bytes(b'{"a":1}\n{"a":2}\n')
    other = tmp_path / "notes.txt"
    other.write_text("not a session's\n")
    given = [str(tree.tool_results()[0]), str(events), str(other)]
    result = _riffd(tmp_path, "archive", "ingest", *given)
    assert result.returncode == 2
    assert f"riffd: error: {other}: neither a transcript (*.jsonl) nor a file of a session" in (
        result.stderr
    )
    assert "archived 0 new line(s) from 0 file(s)" in result.stderr
    archived = _archived_paths(tmp_path)
    assert str(tree.tool_results()[0]) in archived and str(events) in archived
    stats = json.loads(_riffd(tmp_path, "archive", "stats", "--json").stdout)
    assert "transcript" not in stats["kinds"]  # nothing was archived by lines


def test_fix_never_rewrites_a_jsonl_saved_output(tmp_path: Path) -> None:
    """A `.jsonl` in a session's tool-results is a saved output even when its lines look like a
    damaged transcript: `riffd fix` named it leaves it byte for byte."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    copy = tree.folder / "tool-results" / "copy.jsonl"
    records = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"content": "hi"}},
        {
            "type": "assistant",
            "uuid": "u2",
            "parentUuid": "u1",
            "message": {
                "id": "m1",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}],
            },
        },
        {"type": "user", "uuid": "u3", "parentUuid": "u2", "message": {"content": "next"}},
    ]
    data = b"".join(
        json.dumps({**record, "sessionId": SESSION}).encode() + b"\n" for record in records
    )
    copy.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(copy, (long_ago, long_ago))
    result = _riffd(tmp_path, "fix", str(copy))
    assert "repaired" not in result.stdout, result.stdout
    assert copy.read_bytes() == data
    assert "saved tool outputs" in result.stdout + result.stderr
