"""`riffd archive restore` of whole sessions at its edges: never through a symlinked folder (as a user
and as root), two restores at once, a forked session's saved outputs, plans of one config folder
only, a byte-exact restore read as whole, and a FIFO where a transcript was. Real files laid out as
the client writes them, real `riffd` subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.sessiontree import SLUG, build_session, delete_like_cleanup, line, persisted, snapshot
from test_archive_sessions import _riffd

NOBODY = 65534  # the uid a user's files get in the root tests


def _ingest(tmp_path: Path) -> None:
    result = _riffd(tmp_path, "archive", "ingest")
    assert result.returncode == 0, result.stderr


def _files_below(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() or path.is_symlink())


# --- never through a symlinked folder ----------------------------------------------------------


def test_restore_never_writes_through_a_symlinked_folder_in_a_session(tmp_path: Path) -> None:
    """`<session>/tool-results` and `file-history/<session>` replaced by links to folders outside
    the roots: nothing is written there, each link is named, and the transcript is held back."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    _ingest(tmp_path)
    outside, outside2 = tmp_path / "outside", tmp_path / "outside2"
    outside.mkdir()
    outside2.mkdir()
    shutil.rmtree(tree.folder / "tool-results")
    (tree.folder / "tool-results").symlink_to(outside)
    history = claude / "file-history" / tree.session_id
    shutil.rmtree(history)
    history.symlink_to(outside2)
    tree.main.unlink()
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 2, result.stderr
    assert _files_below(outside) == [] and _files_below(outside2) == []
    for link in (tree.folder / "tool-results", history):
        assert f"{link} is a symlink (to {os.path.realpath(link)}); riffd never writes" in (
            result.stderr
        )
    assert not tree.main.exists()  # held back: its saved outputs could not go back
    assert "held back" in result.stderr


def test_restore_follows_a_symlinked_project_folder_as_the_walk_does(tmp_path: Path) -> None:
    """A project folder on another disk (a link right below the root) is where its sessions are:
    restore writes there, as ingest read there."""
    claude = tmp_path / "claude"
    disk = tmp_path / "disk" / "-home-user-app"
    disk.mkdir(parents=True)
    (claude / "projects").mkdir(parents=True)
    (claude / "projects" / "-home-user-app").symlink_to(disk)
    tree = build_session(claude)
    _ingest(tmp_path)
    before = snapshot(tree.files())
    delete_like_cleanup(tree)
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 0, result.stderr
    assert snapshot(tree.files()) == before
    assert (disk / f"{tree.session_id}.jsonl").is_file()


def test_restore_to_a_folder_never_writes_through_a_link_below_it(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    _ingest(tmp_path)
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "projects").symlink_to(outside)
    result = _riffd(tmp_path, "archive", "restore", tree.session_id, "--to", str(out))
    assert result.returncode == 2
    assert f"{out / 'projects'} is a symlink" in result.stderr
    assert _files_below(outside) == []
    assert (out / "file-history" / tree.session_id).is_dir()  # the rest is there


@pytest.mark.skipif(os.geteuid() != 0, reason="the root case needs root (run the suite as root)")
def test_riffd_as_root_never_writes_a_users_bytes_into_roots_folders(tmp_path: Path) -> None:
    """A user planted `<session>/tool-results` -> a root-only folder (and a project folder link to
    another), after riffd archived their saved output: root's restore, --force or not, writes
    nothing there and replaces nothing; a user's project link to their own folder is followed."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(claude)], check=True)
    _ingest(tmp_path)
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o755)
    victim = root_only / tree.tool_results()[0].name
    victim.write_bytes(b"root's own file\n")
    os.utime(victim, (time.time() - 7200,) * 2)
    shutil.rmtree(tree.folder / "tool-results")
    (tree.folder / "tool-results").symlink_to(root_only)
    os.lchown(tree.folder / "tool-results", NOBODY, NOBODY)
    for force in ([], ["--force", "--quiet-period", "0"]):
        result = _riffd(tmp_path, "archive", "restore", *force, tree.session_id)
        assert result.returncode == 2, result.stderr
        assert f"{tree.folder / 'tool-results'} is a symlink" in result.stderr
        assert sorted(os.listdir(root_only)) == [victim.name]
        assert victim.read_bytes() == b"root's own file\n"
    # The user's link to a project folder of root's: not followed; to a folder of their own: followed
    project = tree.project
    for owner in (0, NOBODY):
        elsewhere = tmp_path / f"elsewhere-{owner}"
        elsewhere.mkdir()
        os.chown(elsewhere, owner, owner)
        shutil.rmtree(project, ignore_errors=True)
        project.unlink(missing_ok=True)
        project.symlink_to(elsewhere)
        os.lchown(project, NOBODY, NOBODY)
        result = _riffd(tmp_path, "archive", "restore", tree.session_id)
        if owner == 0:
            assert result.returncode == 2
            assert f"{project} is a symlink (to {elsewhere})" in result.stderr
            assert _files_below(elsewhere) == []
        else:
            assert result.returncode == 0, result.stderr
            restored = elsewhere / f"{tree.session_id}.jsonl"
            assert restored.stat().st_uid == NOBODY


# --- two restores at once, and what appears meanwhile ------------------------------------------


@pytest.mark.slow
def test_two_restores_at_once_both_succeed_and_replace_nothing(tmp_path: Path) -> None:
    """Without --force nothing is replaced: a file the other restore put there meanwhile is the
    archive's copy, so it counts as there."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    results = tree.folder / "tool-results"
    for number in range(300):
        (results / f"o{number:03d}.txt").write_bytes(os.urandom(3000))
        os.utime(results / f"o{number:03d}.txt", (1700000000, 1700000000))
    _ingest(tmp_path)

    def digests() -> dict[Path, str]:  # (their times are renewed: older than cleanupPeriodDays)
        return {path: digest for path, (digest, _time) in snapshot(_files_below(results)).items()}

    before = digests()
    for _attempt in range(3):
        shutil.rmtree(tree.folder)
        done: list[subprocess.CompletedProcess[str]] = []

        def restore(into: list[subprocess.CompletedProcess[str]] = done) -> None:
            into.append(_riffd(tmp_path, "archive", "restore", tree.session_id))

        runs = [threading.Thread(target=restore) for _ in range(2)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        assert [result.returncode for result in done] == [0, 0], [r.stderr for r in done]
        assert not any("backed up as" in result.stdout for result in done)
        assert digests() == before
    listed = _riffd(tmp_path, "backups", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_force_over_a_fifo_where_a_transcript_was_is_skipped_not_hung(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    _ingest(tmp_path)
    tree.main.unlink()
    os.mkfifo(tree.main)
    # (run with a deadline: a restore that hangs opening the FIFO fails the test)
    result = _riffd(
        tmp_path,
        "archive",
        "restore",
        "--force",
        "--quiet-period",
        "0",
        tree.session_id,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert f"skipped {tree.main}: changed: not a regular file" in result.stderr
    assert tree.main.is_fifo()


# --- what a session is ---------------------------------------------------------------------------


def test_a_forked_session_brings_back_the_saved_outputs_it_names_in_its_parents_folder(
    tmp_path: Path,
) -> None:
    """`claude --resume A --fork-session` copies A's lines into the fork F, naming A's saved outputs
    in A's folder. Once the cleanup deleted A, restoring F puts them back (and `riffd sessions
    --deleted` calls F whole only if the archive holds them)."""
    claude = tmp_path / "claude"
    parent = build_session(claude)
    fork_id = "f0f0f0f0-0000-4000-8000-00000000f0f0"
    fork = parent.project / f"{fork_id}.jsonl"
    fork.write_bytes(
        line(fork_id, 0, "Print many lines")
        + line(fork_id, 1, persisted(parent.tool_results()[0]))
        + line(fork_id, 2, "second prompt")
    )
    _ingest(tmp_path)
    named = parent.tool_results()[0]
    before = snapshot([named])
    delete_like_cleanup(parent)
    listed = json.loads(_riffd(tmp_path, "sessions", "--deleted", "--json").stdout)
    assert {row["session_id"]: row["whole"] for row in listed["sessions"]}[parent.session_id]
    fork.unlink()
    listed = json.loads(_riffd(tmp_path, "sessions", "--deleted", "--json").stdout)
    assert {row["session_id"]: row["whole"] for row in listed["sessions"]}[fork_id] is True
    result = _riffd(tmp_path, "archive", "restore", fork_id)
    assert result.returncode == 0, result.stderr
    assert f"restored {named}\n" in result.stdout
    assert snapshot([named]) == before and fork.is_file()
    # One the archive never held: the fork is not whole, and its restore says so (exit 1)
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        db.execute("DELETE FROM session_files WHERE path LIKE ?", (f"%/{named.name}",))
    named.unlink()
    fork.unlink()
    listed = json.loads(_riffd(tmp_path, "sessions", "--deleted", "--json").stdout)
    assert {row["session_id"]: row["whole"] for row in listed["sessions"]}[fork_id] is False
    result = _riffd(tmp_path, "archive", "restore", fork_id)
    assert result.returncode == 1, result.stderr
    tail = "/".join(named.parts[-4:])
    assert f"the transcripts name the saved output .../{tail}, which the archive" in result.stderr


def test_a_session_gets_back_only_the_plan_of_its_own_config_folder(tmp_path: Path) -> None:
    """Two config folders, each with a session whose lines name the same plan slug: each session's
    restore writes its own folder's plan, never the other's."""
    first, second = tmp_path / "X", tmp_path / "Y"
    config = tmp_path / "config.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{second}"\n'
        f'roots = ["{first / "projects"}", "{second / "projects"}"]\n'
    )
    one, two = build_session(first, seed=1), build_session(second, seed=2)
    (second / "plans" / f"{SLUG}.md").write_bytes(b"# Another plan\n")
    riffd = [sys.executable, "-m", "riffd", "--config", str(config)]
    environment = {key: value for key, value in os.environ.items() if key != "CLAUDE_CONFIG_DIR"}
    ingested = subprocess.run([*riffd, "archive", "ingest"], capture_output=True, env=environment)
    assert ingested.returncode == 0, ingested.stderr
    for tree in (one, two):
        (tree.claude / "plans" / f"{SLUG}.md").unlink()
    restored = subprocess.run(
        [*riffd, "archive", "restore", one.session_id],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert restored.returncode == 0, restored.stderr
    assert (first / "plans" / f"{SLUG}.md").read_bytes() == b"# Plan\n\n1. Edit hello.txt\n"
    assert not (second / "plans" / f"{SLUG}.md").exists()


def test_a_restored_session_reads_as_whole_and_adds_no_version(tmp_path: Path) -> None:
    """The client's modes (0644, 0640, 0755) come back private; the archive compares what restore
    keeps, so `riffd sessions` calls the session whole right after, and an ingest adds nothing."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    for number, path in enumerate(tree.whole):
        os.chmod(path, [0o644, 0o600, 0o640, 0o755][number % 4])
    _ingest(tmp_path)
    before = snapshot(tree.files())
    delete_like_cleanup(tree)
    assert _riffd(tmp_path, "archive", "restore", tree.session_id).returncode == 0
    assert snapshot(tree.files()) == before
    rows = json.loads(_riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    assert {row["session_id"]: row["whole"] for row in rows}[tree.session_id] is True
    again = _riffd(tmp_path, "archive", "ingest")
    assert "(0 new or changed" in again.stderr, again.stderr


def test_a_file_continued_from_another_is_its_names_session_and_comes_back_whole(
    tmp_path: Path,
) -> None:
    """A transcript whose first lines were copied from another session keep that one's
    `sessionId` (a resume of older releases). It was filed under that id: listed as the other
    session, and its restore by its own id brought back the transcript alone, without its saved
    outputs and checkpoints, with exit 0. An archive filed so is mended when next opened."""
    claude = tmp_path / "claude"
    first = build_session(claude, seed=1)
    second = build_session(claude, seed=2)
    second.main.write_bytes(
        first.main.read_bytes().splitlines(keepends=True)[0] + second.main.read_bytes()
    )
    assert first.session_id.encode() in second.main.read_bytes().splitlines()[0]
    _ingest(tmp_path)
    whole = [path for path in second.whole if second.session_id in str(path)]
    before = snapshot([second.main, *whole])
    on_disk = json.loads(_riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    assert sorted(row["session_id"] for row in on_disk) == sorted(
        [first.session_id, second.session_id]
    )
    delete_like_cleanup(second)

    def listed() -> dict[str, bool]:
        shown = json.loads(_riffd(tmp_path, "sessions", "--deleted", "--json").stdout)
        return {row["session_id"]: row["whole"] for row in shown["sessions"]}

    assert listed() == {second.session_id: True}
    # An archive a riffd before this one wrote: the file under the first lines' id
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        written = db.execute(
            "SELECT session_id FROM files WHERE path LIKE ?", (f"%/{second.main.name}",)
        ).fetchall()
        assert written == [(second.session_id,)]  # (searches name it so)
        db.execute(
            "UPDATE files SET session_id = ? WHERE path LIKE ?",
            (first.session_id, f"%/{second.main.name}"),
        )
        db.execute("DELETE FROM meta WHERE key = 'sessions_named'")
    db.close()
    assert listed() == {second.session_id: True}
    _ingest(tmp_path)  # (opened to write: the stored id is mended, for searches too)
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        stored = db.execute(
            "SELECT session_id FROM files WHERE path LIKE ?", (f"%/{second.main.name}",)
        ).fetchall()
    db.close()
    assert stored == [(second.session_id,)]
    result = _riffd(tmp_path, "archive", "restore", second.session_id)
    assert result.returncode == 0, result.stderr
    assert snapshot([second.main, *whole]) == before


def test_a_saved_output_with_a_name_of_255_bytes_comes_back_with_its_session(
    tmp_path: Path,
) -> None:
    """A name of 229 bytes or more in `tool-results/` (riffd keeps any file there) made restore's
    temp name too long: that file failed and the session's transcript was held back, exit 2, with
    `--to` too, and a warning to remove a partial file that was never made."""
    tree = build_session(tmp_path / "claude")
    long = tree.folder / "tool-results" / ("é" * 40 + "L" * 171 + ".txt")
    assert len(os.fsencode(long.name)) == 255
    long.write_bytes(b"a long name\n")
    _ingest(tmp_path)
    before = snapshot([tree.main, long])
    delete_like_cleanup(tree)
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 0, result.stderr
    assert "by hand" not in result.stderr
    assert snapshot([tree.main, long]) == before
    assert not [path for path in long.parent.iterdir() if path.name.startswith(".")]


def test_a_plan_slug_given_again_restores_each_session_its_own_plan(tmp_path: Path) -> None:
    """Session A's plan, deleted by its age, and later the same slug given to session C: restoring
    A wrote C's plan as A's (the newest version of the path), and A's own was never restored."""
    claude = tmp_path / "claude"
    project, plan = claude / "projects" / "-home-user-app", claude / "plans" / f"{SLUG}.md"
    project.mkdir(parents=True)
    plan.parent.mkdir()
    sessions = {
        "a0a0a0a0-0000-4000-8000-0000000000a0": (b"# A's plan\n", 1_790_000_000),
        "c0c0c0c0-0000-4000-8000-0000000000c0": (b"# C's plan\n", 1_795_000_000),
    }
    for session_id, (text, ended) in sessions.items():
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended))
        transcript = project / f"{session_id}.jsonl"
        transcript.write_bytes(line(session_id, 0, "plan it", slug=SLUG, timestamp=stamp))
        plan.write_bytes(text)
        os.utime(plan, (ended - 30, ended - 30))  # (written before the session's last line)
        _ingest(tmp_path)
    for session_id, (text, _ended) in sessions.items():
        plan.unlink()
        for transcript in project.iterdir():
            transcript.unlink()
        result = _riffd(tmp_path, "archive", "restore", session_id)
        assert result.returncode == 0, result.stderr
        assert plan.read_bytes() == text, session_id


def test_a_session_past_the_cleanup_comes_back_with_times_the_cleanup_keeps(
    tmp_path: Path,
) -> None:
    """Restored with their own times, the saved outputs of a session older than cleanupPeriodDays
    were deleted again at the client's next start, by their own age, even once it was resumed. They
    get the time of now, said; the archive takes them in so (`riffd sessions` calls it whole at
    once); the transcripts and the rest keep theirs; `--keep-times` gives every file its own."""
    claude = tmp_path / "claude"
    tree = build_session(claude, age_days=40)
    (claude / "settings.json").write_text('{"cleanupPeriodDays": 60}')
    _ingest(tmp_path)
    history = claude / "file-history" / tree.session_id
    deleted = [
        path for path in tree.whole if tree.folder in path.parents or history in path.parents
    ]
    files = [*tree.transcripts, *deleted]  # (what the cleanup deletes: its task list, plan stay)
    before = snapshot(files)
    delete_like_cleanup(tree)
    # within its config folder's 60 days: its own times
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 0, result.stderr
    assert snapshot(files) == before and "time of now" not in result.stderr

    (claude / "settings.json").unlink()  # the default, 30 days
    elsewhere = tmp_path / "copy"
    result = _riffd(tmp_path, "archive", "restore", "--to", str(elsewhere), tree.session_id)
    assert result.returncode == 0 and "time of now" not in result.stderr, result.stderr
    copies = snapshot(_files_below(elsewhere))  # (no Claude Code folder: their own times, 40 days)
    assert copies and all(
        when < time.time_ns() - 30 * 86400 * 10**9 for _d, when in copies.values()
    )
    delete_like_cleanup(tree)
    result = _riffd(tmp_path, "archive", "restore", "--keep-times", tree.session_id)
    assert result.returncode == 0, result.stderr
    assert snapshot(files) == before

    delete_like_cleanup(tree)
    started = time.time_ns()
    result = _riffd(tmp_path, "archive", "restore", tree.session_id)
    assert result.returncode == 0, result.stderr
    outputs = tree.tool_results()
    assert f"{len(outputs)} restored file(s) Claude Code deletes by their own age" in result.stderr
    after = snapshot(files)
    assert {path: digest for path, (digest, _time) in after.items()} == {
        path: digest for path, (digest, _time) in before.items()
    }
    assert all(after[path][1] >= started for path in outputs)
    # the rest goes with the session, by the transcript's time (`claude --continue` goes by it)
    assert all(after[path] == before[path] for path in files if path not in outputs)
    listed = json.loads(_riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    assert [row["whole"] for row in listed if row["session_id"] == tree.session_id] == [True]
