"""End to end: the daemon keeps every file of a session as the client writes them, and a session
deleted as Claude Code's cleanup deletes it comes back whole; kill -9 of the daemon or of an ingest
while files are stored leaves an archive that `verify` passes, and the next run completes it. Real
`riffd run` subprocesses (the harness of test_daemon_e2e), real files, a real SIGKILL."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.daemon import DEADLINE, Sandbox, append_like_claude
from helpers.run import start_riffd
from helpers.sessiontree import (
    BIG_OUTPUT,
    SLUG,
    build_session,
    delete_like_cleanup,
    line,
    persisted,
    short_id,
    snapshot,
)
from helpers.sessiontree import SessionTree as Tree
from riffd.archive.store import Archive
from riffd.claude_code.session_files import SessionFile, all_session_files, file_state

pytestmark = pytest.mark.slow

SESSION = "5e551011-0000-4000-8000-00000000f11e"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path)
    sandbox.project.mkdir(parents=True)
    (sandbox.claude / "sessions").mkdir()
    sandbox.write_config(watcher__file_settle=1.0)
    yield sandbox
    sandbox.close()


def _write_growing(path: Path, data: bytes, pieces: int = 12, pause: float = 0.08) -> None:
    """Write `data` as a slow writer does: in pieces, the file growing for about a second."""
    path.parent.mkdir(parents=True, exist_ok=True)
    step = -(-len(data) // pieces)
    for start in range(0, len(data), step):
        with open(path, "ab") as out:
            out.write(data[start : start + step])
        time.sleep(pause)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _archived_as_on_disk(box: Sandbox, tree: Tree) -> bool:
    """Whether the archive holds every file of the session as it is now: each transcript whole with
    its time, each file kept whole as its newest version."""
    if not (box.state / "archive.db").exists():
        return False
    archive = Archive(box.state / "archive.db", read_only=True)
    try:
        held = archive.versions.held()
        for path in tree.whole:
            status = path.stat()
            if held.get(str(path)) != file_state(status):
                return False
        for path in tree.transcripts:
            found = archive.files_of(str(path))
            if not found or archive.restore_time(found[0][0]) != path.stat().st_mtime_ns:
                return False
        return True
    finally:
        archive.close()


def test_a_session_written_while_the_daemon_runs_comes_back_whole_after_the_cleanup(
    box: Sandbox,
) -> None:
    """The client's order: lines appended one by one, a large output written for about a second and
    then named by a line, a subagent with its settings and its own output in the parent's folder,
    checkpoints, a task list written twice, a plan. The daemon archives each file once it stops
    changing (one version of the slow output) and every later version beside the earlier (two of the
    task list). Deleted as the cleanup deletes it, the session comes back by its id prefix, each
    file with its bytes and modification time; a saved output deleted later by its own age comes
    back alone."""
    daemon = box.start()
    rng = random.Random(7)
    tree = Tree(box.claude, SESSION, box.project)
    results, agent = tree.folder / "tool-results", "a0123456789abcdef"
    outputs = [results / f"{short_id(rng)}.txt", results / f"{short_id(rng)}.txt"]
    history, tasks = box.claude / "file-history" / SESSION, box.claude / "tasks" / SESSION
    subagent = tree.folder / "subagents" / f"agent-{agent}.jsonl"
    append_like_claude(tree.main, [line(SESSION, 0, "Print many lines")])
    # a file still being written: taken once it settles
    _write_growing(outputs[0], BIG_OUTPUT.encode())
    append_like_claude(tree.main, [line(SESSION, 1, persisted(outputs[0]))])
    _write(
        tree.folder / "subagents" / f"agent-{agent}.meta.json", b'{"agentType":"general-purpose"}'
    )
    append_like_claude(
        subagent, [line(SESSION, 10, "Print many lines", isSidechain=True, agentId=agent)]
    )
    # the subagent's, in the parent's folder
    _write(outputs[1], (BIG_OUTPUT + "and more\n").encode())
    append_like_claude(
        subagent, [line(SESSION, 11, persisted(outputs[1]), isSidechain=True, agentId=agent)]
    )
    _write(history / "388d6e47436fd4a5@v1", b"hello from the sample project\nsecond line\n")
    _write(tasks / "1.json", b'{"id":"1","status":"pending"}')
    _write(tasks / ".lock", b"")
    _write(box.claude / "plans" / f"{SLUG}.md", b"# Plan\n\n1. Edit hello.txt\n")
    append_like_claude(tree.main, [line(SESSION, 2, f"agentId: {agent}", slug=SLUG)])
    tree.transcripts += [tree.main, subagent]
    tree.whole += [
        tree.folder / "subagents" / f"agent-{agent}.meta.json",
        *outputs,
        history / "388d6e47436fd4a5@v1",
        tasks / "1.json",
        box.claude / "plans" / f"{SLUG}.md",
    ]
    daemon.wait_until(lambda: _archived_as_on_disk(box, tree), "the first versions archived")
    _write(history / "388d6e47436fd4a5@v2", b"hello from the sample project\nsecond line, edited\n")
    _write(tasks / "1.json", b'{"id":"1","status":"completed"}')
    append_like_claude(tree.main, [line(SESSION, 3, "done", slug=SLUG)])
    tree.whole.append(history / "388d6e47436fd4a5@v2")
    daemon.wait_until(lambda: _archived_as_on_disk(box, tree), "the later versions archived")

    archive = Archive(box.state / "archive.db", read_only=True)
    versions = archive.versions.session_versions(SESSION, every=True)
    archive.close()
    # settled first
    assert [version.version for version in versions if version.path == outputs[0]] == [1]
    assert [version.version for version in versions if version.path == tasks / "1.json"] == [1, 2]
    # the lock is the client's, not the session's
    assert {version.path for version in versions} == set(tree.whole)

    before = snapshot(tree.files())
    delete_like_cleanup(tree)
    restored = box.riffd("archive", "restore", SESSION[:8])
    assert restored.returncode == 0, restored.stderr
    assert snapshot(tree.files()) == before
    verified = box.riffd("archive", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    outputs[1].unlink()  # deleted by its own age; the transcript stays and is resumed
    append_like_claude(tree.main, [line(SESSION, 4, "resumed")])
    again = box.riffd("archive", "restore", SESSION[:8])
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"restored {outputs[1]}\n"
    assert snapshot([outputs[1]]) == {outputs[1]: before[outputs[1]]}
    daemon.stop()


def test_the_daemon_compresses_the_files_it_kept_whole_again_once_quiet(box: Sandbox) -> None:
    """A saved output is stored fast when the daemon takes it; once lines stop coming for
    `archive.settle_after`, the daemon compresses it again at the settled level (its log says so),
    the file still reads back byte for byte, and `riffd archive compact` finds nothing left."""
    box.write_config(watcher__file_settle=1.0, archive__settle_after=1.0)
    daemon = box.start()
    tree = Tree(box.claude, SESSION, box.project)
    output = tree.folder / "tool-results" / "0utput4ll.txt"
    data = "".join(f"{number:06d} PASSED in {number % 97 / 31:.3f}s\n" for number in range(60_000))
    _write(output, data.encode())
    append_like_claude(tree.main, [line(SESSION, 0, persisted(output))])
    tree.transcripts.append(tree.main)
    tree.whole.append(output)
    daemon.wait_until(lambda: _archived_as_on_disk(box, tree), "the session archived")
    daemon.wait_until(
        lambda: (
            "the files kept whole compressed at the settled level: 1 blob(s) settled"
            in daemon.stderr()
        ),
        "the saved output compressed again once quiet",
    )
    daemon.stop()
    with sqlite3.connect(box.state / "archive.db") as db:
        stored, frames = db.execute(
            "SELECT stored, (SELECT SUM(LENGTH(data)) FROM blob_chunks WHERE blob = blobs.id) "
            "FROM blobs"
        ).fetchone()
    assert stored == frames < len(data) // 10
    archive = Archive(box.state / "archive.db", read_only=True)
    (version,) = archive.versions.session_versions(SESSION)
    assert b"".join(archive.versions.content(version)) == data.encode()
    archive.close()
    compact = box.riffd("archive", "compact")
    assert compact.returncode == 0 and "kept whole" not in compact.stderr, compact.stderr


def _many_outputs(claude: Path, count: int, size: int) -> list[SessionFile]:
    """`count` saved outputs of `size` bytes each, every one its own bytes (no two the same blob),
    modified an hour ago; return them as the archive sees them."""
    rng = random.Random(3)
    base = b"".join(
        b"%016x %s\n" % (rng.getrandbits(64), b"x" * rng.randrange(40)) for _ in range(size // 40)
    )
    folder = claude / "projects" / "-home-user-app" / SESSION / "tool-results"
    folder.mkdir(parents=True)
    long_ago = time.time() - 3600
    for number in range(count):
        path = folder / f"out{number:05d}.txt"
        path.write_bytes(b"%d\n" % number + base[:size])
        os.utime(path, (long_ago, long_ago))
    (claude / "projects" / "-home-user-app" / f"{SESSION}.jsonl").write_bytes(
        line(SESSION, 0, "hello")
    )
    return list(all_session_files([claude / "projects"], [claude]))


def _versions_held(box: Sandbox) -> int:
    try:
        archive = Archive(box.state / "archive.db", read_only=True)
    except (sqlite3.Error, OSError):  # not made yet, or being made
        return 0
    try:
        return len(archive.versions.held())
    except sqlite3.Error:
        return 0
    finally:
        archive.close()


def _verify_whole(box: Sandbox, count: int) -> None:
    verified = box.riffd("archive", "verify", "--json", timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    outcomes = [json.loads(item) for item in verified.stdout.splitlines()]
    assert [item["outcome"] for item in outcomes if item["kind"] == "tool-result"] == [
        "whole"
    ] * count


@pytest.mark.parametrize("killed", ["daemon", "ingest"])
def test_kill_9_while_files_are_stored_leaves_an_archive_verify_passes_and_the_next_run_completes(
    box: Sandbox, killed: str
) -> None:
    count = 60
    files = _many_outputs(box.claude, count, 2_000_000)
    assert len(files) == count
    if killed == "daemon":
        daemon = box.start()
        process = daemon.process
    else:
        box.riffd("archive", "stats")  # (the archive made first, so the poll below can read it)
        process = start_riffd(
            "archive",
            "ingest",
            config=box.config,
            cwd=box.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + DEADLINE
    while (
        (held := _versions_held(box)) < 5 and process.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    process.kill()
    process.wait()
    assert 5 <= held < count, (
        f"killed with {held} of {count} files stored: not while they were being stored"
    )

    # nothing half stored: only files not taken yet
    partial = box.riffd("archive", "verify", timeout=120)
    assert partial.returncode == 0, partial.stdout + partial.stderr
    assert "not archived" in partial.stderr
    if killed == "daemon":
        daemon = box.start()
        daemon.wait_until(
            lambda: _versions_held(box) == count, "every file stored after the restart", timeout=120
        )
        daemon.stop()
    else:
        again = box.riffd("archive", "ingest", timeout=120)
        assert again.returncode == 0, again.stderr
    _verify_whole(box, count)


def test_the_rescan_takes_a_file_no_event_reported(box: Sandbox) -> None:
    box.write_config(
        watcher__observer="polling", watcher__polling_interval=3600.0, watcher__rescan_interval=1.0
    )
    daemon = box.start()
    tree = Tree(box.claude, SESSION, box.project)
    append_like_claude(tree.main, [line(SESSION, 0, "hello")])
    checkpoint = box.claude / "file-history" / SESSION / "388d6e47436fd4a5@v1"
    _write(checkpoint, b"hello\n")
    long_ago = time.time() - 3600
    os.utime(checkpoint, (long_ago, long_ago))
    tree.transcripts.append(tree.main)
    tree.whole.append(checkpoint)
    daemon.wait_until(
        lambda: _archived_as_on_disk(box, tree), "the checkpoint archived by a rescan"
    )
    report = daemon.wait_until(
        lambda: box.report_where(lambda r: r["watcher"]["rescans"] >= 2), "a report"
    )
    # nothing came from the observer: the rescans did it all
    assert report["watcher"]["events"] == 0
    daemon.stop()


def test_the_daemon_never_archives_through_a_sessions_folder_linked_out_of_the_roots(
    box: Sandbox,
) -> None:
    """A session's folder and another's `tool-results` linked to a folder outside the roots: the
    start-up rescan and the events of the linked folder (which the transcript walk follows and the
    watcher watches) archive nothing from there; each link is named once in the log."""
    outside = box.root / "elsewhere"
    outside.mkdir()
    (outside / "private.txt").write_text("not a session's file\n")
    other = SESSION.replace("f11e", "f11f")
    for session in (SESSION, other):
        append_like_claude(box.project / f"{session}.jsonl", [line(session, 0, "hi")])
    (box.project / SESSION).symlink_to(outside)
    (box.project / other).mkdir()
    (box.project / other / "tool-results").symlink_to(outside)
    kept = box.project / other / "subagents" / "agent-a1.meta.json"
    _write(kept, b'{"agentType": "general-purpose"}')
    daemon = box.start()
    daemon.wait_until(
        lambda: (box.state / "archive.db").exists() and _versions_held(box) >= 1,
        "the session's own file archived",
    )
    _write(outside / "new.txt", b"written after the start\n")  # an event in the linked folder
    (box.project / other / "subagents" / "agent-a2.meta.json").write_bytes(b"{}")
    daemon.wait_until(lambda: _versions_held(box) >= 2, "the second own file archived")
    time.sleep(2.5)  # (the settle time and more for the linked folder's file)
    daemon.stop()
    archive = Archive(box.state / "archive.db", read_only=True)
    try:
        held = sorted(archive.versions.held())
    finally:
        archive.close()
    assert held == [str(kept), str(kept.with_name("agent-a2.meta.json"))]
    for link in (box.project / SESSION, box.project / other / "tool-results"):
        assert daemon.stderr().count(f"{link}: a symlink (to {outside})") == 1, daemon.stderr()


def _the_report_measures_the_archive_against_lines_and_files(box: Sandbox, tree: Tree) -> None:
    """The report's archive size is against every byte it holds: the lines and the files kept
    whole (before, against the lines alone, while the size counted the files too)."""
    report = box.report()
    assert report is not None
    figures = report["archive"]
    lines = sum(path.stat().st_size for path in tree.transcripts)
    files = sum(path.stat().st_size for path in tree.whole)
    assert (figures["raw_bytes"], figures["whole_bytes"]) == (lines, files)
    assert figures["ratio"] == round(figures["stored_bytes"] / (lines + files), 4)
    markdown = (box.state / "reports" / "latest.md").read_text()
    assert (
        f"{figures['stored_bytes']:,} bytes on disk, {figures['ratio']:.1%} of {lines + files:,} "
        f"bytes seen ({lines:,} of transcript lines, {files:,} of files kept whole)" in markdown
    ), markdown


def test_the_start_up_lines_and_the_report_count_transcripts_and_files_apart(
    box: Sandbox,
) -> None:
    """The daemon's first lines say how many transcripts and other session files it has to read,
    and how many transcripts it watches: counted apart, as they are (before, one number of files
    to look at counted both, and the next line's number of files watched counted transcripts).
    Its last report measures the archive against both."""
    tree = build_session(box.claude)
    started = box.start()
    started.wait_until(lambda: "start-up pass done" in started.stderr(), "the start-up pass")
    started.wait_until(lambda: _archived_as_on_disk(box, tree), "the session archived")
    transcripts, others = len(tree.transcripts), len(tree.whole)
    log = started.stderr()
    assert (
        f"{transcripts} transcript(s) and {others} other session file(s) to look at (new, changed "
        "or gone since riffd last read them)" in log
    ), log
    assert f"start-up pass done: {transcripts} transcript(s) watched" in log, log
    started.stop()  # its last report: the archive's figures as it stops
    _the_report_measures_the_archive_against_lines_and_files(box, tree)
    again = box.start()
    again.wait_until(lambda: "start-up pass done" in again.stderr(), "the second start-up pass")
    log = again.stderr()
    assert "0 transcript(s) and 0 other session file(s) to look at" in log, log
    assert f"start-up pass done: {transcripts} transcript(s) watched" in log, log
    again.stop()
