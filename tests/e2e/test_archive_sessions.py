"""`riffd archive ingest` and `riffd archive restore` of whole sessions: every file Claude Code
keeps for a session comes back byte for byte with its modification time, only what is missing is put
back, and nothing is replaced without --force and a backup. Real files laid out as the client writes
them, real `riffd` subprocesses."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import write_config
from helpers.run import riffd_env, run_riffd
from helpers.sessiontree import SessionTree, build_session, delete_like_cleanup, snapshot


def _riffd(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    environment = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}  # never the user's own folder
    return run_riffd(*args, config=write_config(tmp_path), env=environment, timeout=timeout)


def _ingested(tmp_path: Path) -> SessionTree:
    tree = build_session(tmp_path / "claude")
    build_session(tmp_path / "claude", seed=2)  # another session, which no restore below touches
    result = _riffd(tmp_path, "archive", "ingest")
    assert result.returncode == 0, result.stderr
    # 7 + 7 + one shared plan
    assert "kept 15 file(s) of the sessions whole (15 new or changed" in result.stderr
    return tree


def test_a_session_deleted_by_the_cleanup_comes_back_whole_by_its_id_prefix(tmp_path: Path) -> None:
    tree = _ingested(tmp_path)
    before = snapshot(tree.files())
    delete_like_cleanup(tree)
    result = _riffd(tmp_path, "archive", "restore", tree.session_id[:8])
    assert result.returncode == 0, result.stderr
    # every file's bytes and modification time, the transcripts' too
    assert snapshot(tree.files()) == before
    # (the client's lock: not kept)
    assert not tree.ignored[0].exists() or tree.ignored[0].stat().st_size == 0
    # `restored PATH` (or `restored PATH -> TARGET` when put elsewhere)
    restored = [line.split(" ")[-1] for line in result.stdout.splitlines()]
    # the transcript last: once `claude --resume` sees it, all is there
    assert restored[-1] == str(tree.main)
    assert len(restored) == len(tree.files()) - 2  # the task list and the plan were never deleted
    # the client's were 0644
    assert {Path(path).stat().st_mode & 0o777 for path in restored} == {0o600}
    assert "2 already there" in result.stderr


def test_a_saved_output_deleted_by_its_own_age_is_put_back_alone(tmp_path: Path) -> None:
    """The client deletes each saved output by its own age while the transcript stays and is
    resumed: restore puts back only what is missing and leaves the transcript, which has grown since
    it was archived, as it is."""
    tree = _ingested(tmp_path)
    output = tree.tool_results()[0]
    before = snapshot([output])
    output.unlink()
    with open(tree.main, "ab") as transcript:
        transcript.write(b'{"type":"user","sessionId":"%s"}\n' % tree.session_id.encode())
    status = tree.main.stat()
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"restored {output}\n"
    assert snapshot([output]) == before
    assert (tree.main.stat().st_ino, tree.main.stat().st_size) == (status.st_ino, status.st_size)


def test_a_file_that_differs_is_named_and_left_and_force_replaces_it_after_a_backup(
    tmp_path: Path,
) -> None:
    tree = _ingested(tmp_path)
    checkpoint = next(path for path in tree.whole if path.parent.parent.name == "file-history")
    archived = checkpoint.read_bytes()
    checkpoint.write_bytes(b"edited by hand\n")
    long_ago = time.time() - 3600
    os.utime(checkpoint, (long_ago, long_ago))
    left = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert left.returncode == 1, left.stderr
    assert (
        f"riffd: {checkpoint} exists and differs from the archive's copy; left as it is"
        in left.stderr
    )
    assert checkpoint.read_bytes() == b"edited by hand\n"
    assert left.stdout == ""

    forced = _riffd(tmp_path, "archive", "restore", tree.session_id, "--force")
    assert forced.returncode == 0, forced.stderr
    assert checkpoint.read_bytes() == archived
    (backup,) = json.loads(_riffd(tmp_path, "backups", "list", "--json").stdout)
    assert backup["source"] == str(checkpoint) and backup["session"] == tree.session_id
    assert f"restored {checkpoint} (what was there is backed up as {backup['id']})" in forced.stdout
    # the files that are the same are left alone, --force or not
    assert forced.stdout.count("restored") == 1


def test_restore_to_a_folder_writes_the_session_tree_below_the_folder_its_files_share(
    tmp_path: Path,
) -> None:
    tree = _ingested(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = _riffd(tmp_path, "archive", "restore", tree.session_id, "--to", str(out))
    assert result.returncode == 0, result.stderr
    claude = tmp_path / "claude"
    assert (
        f"riffd: note: {len(tree.files())} archived files are restored under their paths below {claude}"
        in result.stderr
    )
    expected = {path.relative_to(claude): value for path, value in snapshot(tree.files()).items()}
    written = [path for path in out.rglob("*") if path.is_file()]
    assert {path.relative_to(out): value for path, value in snapshot(written).items()} == expected


def test_verify_compares_every_kind_of_file_and_fix_mends_a_damaged_one(tmp_path: Path) -> None:
    tree = _ingested(tmp_path)
    verified = _riffd(tmp_path, "archive", "verify", "--json")
    assert verified.returncode == 0, verified.stderr
    outcomes = {
        (item["kind"], item["outcome"]) for item in map(json.loads, verified.stdout.splitlines())
    }
    assert outcomes == {
        (kind, "whole")
        for kind in ("transcript", "tool-result", "subagent-meta", "file-history", "tasks", "plan")
    }
    # Other bytes of the same size and time as the version archived: the archive no longer tells the
    # file
    meta = next(path for path in tree.whole if path.name.endswith(".meta.json"))
    status = meta.stat()
    meta.write_bytes(meta.read_bytes().replace(b"general", b"GENERAL"))
    os.utime(meta, ns=(status.st_atime_ns, status.st_mtime_ns))
    differs = _riffd(tmp_path, "archive", "verify")
    assert differs.returncode == 1
    assert (
        f"{meta}: the archive differs from the file: byte 15 on is not version 1 as archived"
        in differs.stdout
    )
    # The command it advises, run as a user pastes it in a shell with riffd on its PATH: on the
    # same configuration (--config kept), it archives the file again
    advised = differs.stdout.split(f"{meta}: the archive differs", 1)[1].split("`")[1]
    assert advised == f"riffd --config {write_config(tmp_path)} archive verify --fix", advised
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "riffd").write_text(f'#!/bin/sh\nexec {sys.executable} -m riffd "$@"\n')
    (bin_dir / "riffd").chmod(0o755)
    shell = riffd_env(
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
        HOME=str(tmp_path / "home"),  # (the default state folder is another, empty one)
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    ran = subprocess.run(["sh", "-c", advised], env=shell, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert _riffd(tmp_path, "archive", "verify").returncode == 0
    # A frame of a saved output damaged inside the archive: named, and stored afresh from the file
    # by --fix
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        blob, frame = db.execute(
            "SELECT blob, data FROM blob_chunks ORDER BY length(data) DESC LIMIT 1"
        ).fetchone()
        db.execute(
            "UPDATE blob_chunks SET data = ? WHERE blob = ?", (frame[:-4] + b"\x00" * 4, blob)
        )
    damaged = _riffd(tmp_path, "archive", "verify")
    assert damaged.returncode == 1
    assert (
        "a file kept whole is damaged in the archive" in damaged.stdout
        and "1 damaged file" in damaged.stderr
    )
    fixed = _riffd(tmp_path, "archive", "verify", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    again = _riffd(tmp_path, "archive", "verify")
    assert again.returncode == 0, again.stdout + again.stderr
    delete_like_cleanup(tree)
    restored = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert restored.returncode == 0, restored.stderr
    assert all(
        output.read_bytes() == tree.tool_results()[1].read_bytes() for output in tree.tool_results()
    )


def test_sessions_say_what_the_archive_holds_of_each_and_whether_it_is_whole(
    tmp_path: Path,
) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    partial = build_session(claude, seed=2, project="-home-user-other")
    partial.tool_results()[0].unlink()  # deleted by its own age before riffd ever saw it
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    listed = _riffd(tmp_path, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["session_id"]: row for row in json.loads(listed.stdout)["sessions"]}
    assert rows[tree.session_id]["holds"] == {
        "transcript": True,
        "subagents": 1,
        "saved_outputs": 2,
        "subagent_settings": 1,
        "checkpoints": 3,
        "task_files": 1,
        "plans": 1,
        "todo_files": 0,
        "other_files": 0,
    }
    # as on disk
    assert rows[tree.session_id]["whole"] is True and rows[partial.session_id]["whole"] is True
    checkpoint = next(path for path in tree.whole if path.parent.parent.name == "file-history")
    checkpoint.write_bytes(b"changed since\n")
    text = _riffd(tmp_path, "sessions").stdout
    line = next(line for line in text.splitlines() if line.startswith(tree.session_id))
    assert (
        "archived, not whole (transcript, subagents: 1, saved outputs: 2, subagent settings: 1, checkpoints: 3"
        in line
    )

    delete_like_cleanup(tree)
    delete_like_cleanup(partial)
    deleted = {
        row["session_id"]: row
        for row in json.loads(_riffd(tmp_path, "sessions", "--deleted", "--json").stdout)[
            "sessions"
        ]
    }
    assert deleted[tree.session_id]["whole"] is True
    # its transcripts name two saved outputs, and the archive holds one
    assert deleted[partial.session_id]["whole"] is False
    assert deleted[partial.session_id]["holds"]["saved_outputs"] == 1

    stats = json.loads(_riffd(tmp_path, "archive", "stats", "--json").stdout)
    assert stats["kinds"]["tool-result"] == {"files": 3, "versions": 3, "bytes": 3 * 144_000}
    assert stats["kinds"]["transcript"]["files"] == 2 and stats["kinds"]["subagent"]["files"] == 2
    assert stats["kinds"]["file-history"]["files"] == 6 and stats["whole_files"]["blobs"] < 15
    assert stats["raw_all_bytes"] > stats["raw_bytes"] > 0


def test_a_file_the_archive_cannot_give_whole_is_not_restored_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    tree = _ingested(tmp_path)
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        blob, frame = db.execute(
            "SELECT blob, data FROM blob_chunks ORDER BY length(data) DESC LIMIT 1"
        ).fetchone()
        db.execute(
            "UPDATE blob_chunks SET data = ? WHERE blob = ?", (frame[:-4] + b"\x00" * 4, blob)
        )
    delete_like_cleanup(tree)
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 2
    for output in tree.tool_results():  # the two saved outputs share the damaged blob
        assert (
            f"riffd: error: {output}: not restored, the archive cannot give it whole"
            in result.stderr
        )
        assert not output.exists()
    # no temp left either
    assert sorted(path.name for path in (tree.folder / "tool-results").iterdir()) == []
    assert all(path.exists() for path in tree.whole if path.parent.name != "tool-results")
    # Its transcripts are held back: `claude --resume` never sees a session whose outputs are missing
    for transcript in tree.transcripts:
        assert not transcript.exists()
        assert (
            f"riffd: error: {transcript}: not restored: another file of session {tree.session_id} "
            "failed (above)" in result.stderr
        )
    assert "2 failed, 2 held back (another file of their session failed)" in result.stderr


def test_verify_names_a_file_that_still_has_the_bytes_of_a_damaged_blob(tmp_path: Path) -> None:
    """The two sessions' saved outputs share one blob: with one session deleted, the other's file
    still has the bytes, so they are not lost and --fix stores them again from it."""
    tree = _ingested(tmp_path)
    other = next(
        path
        for path in (tmp_path / "claude" / "projects").rglob("*.txt")
        if tree.session_id not in str(path)
    )
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        blob, frame = db.execute(
            "SELECT blob, data FROM blob_chunks ORDER BY length(data) DESC LIMIT 1"
        ).fetchone()
        db.execute(
            "UPDATE blob_chunks SET data = ? WHERE blob = ?", (frame[:-4] + b"\x00" * 4, blob)
        )
    delete_like_cleanup(tree)
    damaged = _riffd(tmp_path, "archive", "verify")
    assert damaged.returncode == 1
    assert "lost from the archive" not in damaged.stdout
    assert f"stores these bytes again from {other}, which still exists" in damaged.stdout
    assert _riffd(tmp_path, "archive", "verify", "--fix").returncode == 0
    assert _riffd(tmp_path, "archive", "restore", tree.session_id).returncode == 0
    assert all(path.read_bytes() == other.read_bytes() for path in tree.tool_results())


def test_the_ingest_says_how_many_files_it_kept_as_it_commits_them(tmp_path: Path) -> None:
    """On a terminal, `riffd archive ingest` shows how many files it has kept whole every hundred
    or so, and says the total at its end (that each count is committed then:
    test_wholefiles_together.py)."""
    import pty

    from helpers.run import riffd_command, riffd_env

    tree = build_session(tmp_path / "claude")
    folder = tree.folder / "tool-results"
    for number in range(240):
        (folder / f"x{number:08d}.txt").write_bytes(b"output %d\n" % number * 50)
    total = len(tree.files()) - 1 - 1 + 240  # not the transcript nor the client's lock
    leader, follower = pty.openpty()
    command = riffd_command("archive", "ingest", config=write_config(tmp_path))
    with subprocess.Popen(
        command,
        env=riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude")),
        stdout=subprocess.PIPE,
        stderr=follower,
    ) as ingest:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # (Linux: EIO once the child has closed its end)
                break
            if not chunk:
                break
            shown += chunk
        assert ingest.wait(timeout=60) == 0, shown
    os.close(leader)
    text = shown.decode()
    counted = [int(number) for number in re.findall(r"\rriffd: (\d+) files kept whole", text)]
    assert len(counted) == 2 and 100 <= counted[0] < counted[1] < total, text
    assert f"kept {total} file(s) of the sessions whole ({total} new or changed" in text
    state = tmp_path / "state"
    (archive,) = state.rglob("archive.db")
    with sqlite3.connect(archive) as db:
        assert db.execute("SELECT COUNT(*) FROM session_files").fetchone()[0] == total


def test_a_file_that_keeps_changing_while_the_ingest_reads_it_is_named_and_the_rest_kept(
    tmp_path: Path,
) -> None:
    """A saved output appended to every millisecond (a writer the ingest does not wait for) changes
    while it is read at each of three attempts: the ingest names it, exits 2, keeps every other
    file, and keeps no version of it."""
    import threading

    tree = build_session(tmp_path / "claude")
    growing = tree.folder / "tool-results" / "gr0w1ng00.txt"
    growing.write_bytes(b"line of a long build log\n" * 1_200_000)  # 30 MB: a read takes a while
    stop = threading.Event()

    def append() -> None:
        with open(growing, "ab", buffering=0) as out:
            while not stop.is_set():
                out.write(b"more\n")
                time.sleep(0.001)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        result = _riffd(tmp_path, "archive", "ingest", "--no-compact")
    finally:
        stop.set()
        writer.join()
    assert result.returncode == 2, result.stderr
    assert f"riffd: error: {growing}: it changed while it was read, three times" in result.stderr
    counted = re.search(r"kept (\d+) of (\d+) file\(s\)", result.stderr)
    assert counted is not None and int(counted[1]) == int(counted[2]) - 1, result.stderr
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        paths = [row[0] for row in db.execute("SELECT path FROM session_files")]
    assert paths and not [path for path in paths if path.endswith(growing.name)]


def test_stats_of_an_archive_larger_than_what_it_holds_say_why(tmp_path: Path) -> None:
    """A few hundred bytes archived take more room than they had (the database's first pages, its
    log): the percentage alone (25312% of raw) read as a fault."""
    project = tmp_path / "claude" / "projects" / "-work-tiny"
    project.mkdir(parents=True)
    line = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s", "message": {}}
    (project / "0f5b6c1e-1111-2222-3333-444444444444.jsonl").write_text(json.dumps(line) + "\n")
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    shown = _riffd(tmp_path, "archive", "stats").stdout
    stored = next(row for row in shown.splitlines() if row.startswith("bytes stored:"))
    assert re.search(r"\(\d[\d,]*\.\d% of raw: the database's own pages and its log", stored), shown
