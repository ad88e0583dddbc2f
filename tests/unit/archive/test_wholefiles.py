"""The files of a session kept whole: stored once by content, every version kept, taken once
settled, never half stored. Real files, a real SQLite archive, riffd's I/O seam for reads that
change under it, a real kill -9."""

from __future__ import annotations

import errno
import os
import sqlite3
import textwrap
import time
from pathlib import Path

import pytest

from helpers.archive_damage import flip_frame_byte
from helpers.run import kill_9_once_marked
from helpers.sessiontree import build_session
from riffd.archive.packs import PackDamaged
from riffd.archive.recover import recover
from riffd.archive.store import Archive
from riffd.claude_code.session_files import SessionFile, all_session_files, classify
from riffd.claude_code.walk import iter_transcripts
from riffd.daemon.keeper import Keeper, reconcile_files
from riffd.daemon.watcher import TranscriptFilter
from riffd.fsio import FileSystem, RetryingFS, RetryPolicy
from riffd.state.store import StateStore


def _found(claude: Path, path: Path) -> SessionFile:
    found = classify(path, [claude / "projects"], [claude])
    assert found is not None, path
    return found


def _next_second() -> None:
    """Wait for the clock's next second: riffd records when it took a version in whole seconds."""
    time.sleep(1.001 - time.time() % 1)


def _count(archive_path: Path, table: str) -> int:
    with sqlite3.connect(archive_path) as db:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_a_file_is_kept_whole_and_the_same_bytes_are_stored_once(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree, other = build_session(claude), build_session(claude, seed=2)
    archive = Archive(tmp_path / "archive.db")
    outcomes = [
        archive.whole.keep(found).outcome
        for found in all_session_files([claude / "projects"], [claude])
    ]
    # one plan
    assert (
        outcomes.count("stored") + outcomes.count("known") == len(tree.whole) + len(other.whole) - 1
    )
    # The 144,000-byte output is in both saved outputs of both sessions: one blob, compressed to a
    # fraction
    blobs = archive.versions.stats()
    assert blobs["blobs"] == len({path.read_bytes() for path in tree.whole + other.whole})
    assert blobs["stored_bytes"] < 20_000
    # (a plan: by its slug, below)
    for path in (path for path in tree.whole if path.parent.name != "plans"):
        (version,) = [
            item for item in archive.versions.session_versions(tree.session_id) if item.path == path
        ]
        assert b"".join(archive.versions.content(version)) == path.read_bytes()
        status = path.stat()
        assert (version.size, version.mode, version.mtime_ns) == (
            status.st_size,
            status.st_mode,
            status.st_mtime_ns,
        )
    assert not [
        version
        for version in archive.versions.session_versions(tree.session_id)
        if version.kind == "plan"
    ]
    # its lines name the plan's slug
    archive.add_lines(str(tree.main), 0, tree.main.read_bytes().splitlines())
    (plan,) = [
        version
        for version in archive.versions.session_versions(tree.session_id)
        if version.kind == "plan"
    ]
    assert (
        b"".join(archive.versions.content(plan)) == (claude / "plans" / plan.path.name).read_bytes()
    )
    assert archive.versions.counts()[tree.session_id] == {
        "tool-result": 2,
        "subagent-meta": 1,
        "file-history": 3,
        "tasks": 1,
        "plan": 1,
    }
    archive.close()


def test_a_later_version_is_kept_beside_the_earlier_and_an_unchanged_file_is_not_read(
    tmp_path: Path,
) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    task = claude / "tasks" / tree.session_id / "1.json"
    archive = Archive(tmp_path / "archive.db")
    _next_second()  # (the file's status changed before riffd took it, as a settled file's has)
    assert archive.whole.keep(_found(claude, task)).outcome == "stored"
    first = task.read_bytes()

    class Counting(FileSystem):
        reads = 0

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            Counting.reads += 1
            return super().pread(fd, size, offset)

    assert archive.whole.keep(_found(claude, task), fs=Counting()).outcome == "unchanged"
    assert Counting.reads == 0  # one stat, compared with the newest version
    task.write_bytes(b'{"id":"1","status":"completed"}')
    os.utime(task, ns=(1, 1_700_000_000_000_000_000))
    kept = archive.whole.keep(_found(claude, task))
    assert (kept.outcome, kept.version) == ("stored", 2)
    versions = [
        version
        for version in archive.versions.session_versions(tree.session_id, every=True)
        if version.path == task
    ]
    assert [b"".join(archive.versions.content(version)) for version in versions] == [
        first,
        task.read_bytes(),
    ]
    assert versions[1].mtime_ns == 1_700_000_000_000_000_000
    (newest,) = [
        version
        for version in archive.versions.session_versions(tree.session_id)
        if version.path == task
    ]
    assert newest.version == 2
    archive.close()


def test_a_file_written_just_now_waits_for_the_settle_time(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    os.utime(output)  # written now
    archive = Archive(tmp_path / "archive.db")
    keeper = Keeper(2.0, StateStore(tmp_path / "state.db"))
    again = keeper.process(archive, _found(claude, output))
    assert again is not None and 1.5 < again <= 2.0
    assert _count(tmp_path / "archive.db", "session_files") == 0
    os.utime(output, ns=(1, time.time_ns() - 2_100_000_000))  # its time says it settled since
    assert keeper.process(archive, _found(claude, output)) is None
    assert _count(tmp_path / "archive.db", "session_files") == 1
    archive.close()


def test_a_file_whose_time_is_ahead_of_the_clock_is_taken_once_it_stays_the_same(
    tmp_path: Path,
) -> None:
    """A clock stepped back, or a network folder's server clock ahead: the file's own time never
    says it settled, so two looks a settle time apart do."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    ahead = time.time_ns() + 600 * 10**9
    os.utime(output, ns=(ahead, ahead))
    archive = Archive(tmp_path / "archive.db")
    keeper = Keeper(2.0, StateStore(tmp_path / "state.db"))
    assert keeper.settling(output, now=100.0) == 2.0
    assert keeper.settling(output, now=101.0) == pytest.approx(1.0)
    with open(output, "ab") as out:  # still written to: looked at again a settle time later
        out.write(b"more\n")
    os.utime(output, ns=(ahead, ahead))
    assert keeper.settling(output, now=102.5) == 2.0
    assert keeper.settling(output, now=104.5) is None
    # With the real clock, through the worker's entry: the first look waits, the second takes it
    assert keeper.process(archive, _found(claude, output)) == 2.0
    assert _count(tmp_path / "archive.db", "session_files") == 0
    time.sleep(2.05)
    assert keeper.process(archive, _found(claude, output)) is None
    (version,) = [
        item for item in archive.versions.session_versions(tree.session_id) if item.path == output
    ]
    assert version.mtime_ns == ahead and b"".join(archive.versions.content(version)) == (
        output.read_bytes()
    )
    archive.close()


def test_two_processes_storing_one_file_at_once_add_one_version(tmp_path: Path) -> None:
    """An ingest beside the daemon: each hashed the file before the other stored it; the second to
    write looks at the newest version again inside its transaction and adds nothing."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    first, second = Archive(tmp_path / "archive.db"), Archive(tmp_path / "archive.db")

    class StoresMeanwhile(FileSystem):
        """At its first read, the other process takes the file whole."""

        done = False

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            if not StoresMeanwhile.done:
                StoresMeanwhile.done = True
                assert first.whole.keep(_found(claude, output)).outcome == "stored"
            return super().pread(fd, size, offset)

    kept = second.whole.keep(_found(claude, output), fs=StoresMeanwhile())
    assert (kept.outcome, kept.version) == ("unchanged", 1)
    assert _count(tmp_path / "archive.db", "session_files") == 1
    # Duplicates an earlier riffd added so are not counted as versions
    with sqlite3.connect(tmp_path / "archive.db") as db:
        db.execute(
            "INSERT INTO session_files(session_id, kind, base, path, version, blob, size, mode, "
            "mtime_ns, seen) SELECT session_id, kind, base, path, 2, blob, size, mode, mtime_ns, seen "
            "FROM session_files"
        )
    assert second.versions.stats()["kinds"]["tool-result"] == {
        "files": 1,
        "versions": 1,
        "bytes": output.stat().st_size,
    }
    first.close()
    second.close()


def test_a_file_restored_byte_for_byte_is_the_version_it_came_from(tmp_path: Path) -> None:
    """Restore writes the owner's bits only (private); the archive compares what restore keeps, so
    the restored file is held as it is and no version is added."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    os.chmod(output, 0o644)  # as the client writes, umask 022
    archive = Archive(tmp_path / "archive.db")
    assert archive.whole.keep(_found(claude, output)).outcome == "stored"
    status = output.stat()
    os.chmod(output, 0o600)  # what a restore writes back
    os.utime(output, ns=(status.st_atime_ns, status.st_mtime_ns))
    queued: list[str] = []  # the daemon's rescan: one stat per file, compared with the archive's
    reconcile_files(
        TranscriptFilter((claude / "projects",), configs=(claude,)), archive, queued.append
    )
    assert str(output) not in queued
    assert archive.whole.keep(_found(claude, output)).outcome == "unchanged"
    os.chmod(output, 0o700)  # the owner's bits changed: a new version
    assert archive.whole.keep(_found(claude, output)).outcome == "known"
    archive.close()


def test_a_same_size_rewrite_that_gives_the_time_back_is_a_new_version(tmp_path: Path) -> None:
    """Size, time and mode as archived, other bytes (a tool that keeps the time, `cp -p`): the
    file's status changed after riffd took it (its ctime), so it is read again."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    task = claude / "tasks" / tree.session_id / "1.json"
    archive = Archive(tmp_path / "archive.db")
    assert archive.whole.keep(_found(claude, task)).outcome == "stored"
    status = task.stat()
    _next_second()
    task.write_bytes(task.read_bytes().replace(b"First", b"Other"))
    os.utime(task, ns=(status.st_atime_ns, status.st_mtime_ns))
    kept = archive.whole.keep(_found(claude, task))
    assert (kept.outcome, kept.version) == ("stored", 2)
    archive.close()


def test_every_file_in_tool_results_is_kept_whole_whatever_its_name(tmp_path: Path) -> None:
    """A `.jsonl` there is a saved output, not a transcript (riffd never modifies one, and the
    transcript walk never reads one); names with `.tmp.` in them are outputs too, only the client's
    own temp names are not."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    results = tree.folder / "tool-results"
    outputs = {
        results / "events.jsonl": b'{"a":1}\n{"a":2}\n',
        results / "report.tmp.txt": b"a saved output whose name holds .tmp.\n",
        results / "old.tmp": b"and one that ends so\n",
    }
    for path, data in outputs.items():
        path.write_bytes(data)
    (results / "x.txt.tmp.4242.1795668767146").write_bytes(b"the client's atomic write\n")
    (results / "x.txt.0123456789abcdef.tmp").write_bytes(b"another temp of the client\n")
    found = {item.path: item.kind for item in all_session_files([claude / "projects"], [claude])}
    assert {path: found.get(path) for path in outputs} == dict.fromkeys(outputs, "tool-result")
    assert not {path for path in found if ".tmp." in path.name and path.name[-1].isdigit()}
    assert not {path for path in found if path.name.endswith("abcdef.tmp")}
    assert not list(iter_transcripts([claude / "projects"]))[2:]  # the main and subagent only
    archive = Archive(tmp_path / "archive.db")
    for path in outputs:
        assert archive.whole.keep(_found(claude, path)).outcome in ("stored", "known")
    archive.close()


class GrowsWhileRead(FileSystem):
    """Appends to the file it reads at the `at`-th read: a writer the settle time did not see."""

    def __init__(self, path: Path, at: int) -> None:
        self.path, self.at, self.reads = path, at, 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.reads += 1
        if self.reads == self.at:
            with open(self.path, "ab") as out:
                out.write(b"more\n")
        return super().pread(fd, size, offset)


@pytest.mark.parametrize("at", [1, 2])  # while it is hashed; while it is stored
def test_a_file_that_changes_while_it_is_read_is_not_stored(tmp_path: Path, at: int) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]
    archive = Archive(tmp_path / "archive.db")
    assert (
        archive.whole.keep(_found(claude, output), fs=GrowsWhileRead(output, at)).outcome
        == "changing"
    )
    for table in ("blobs", "blob_chunks", "session_files"):
        assert _count(tmp_path / "archive.db", table) == 0, table
    os.utime(output, ns=(1, time.time_ns() - 10**10))
    assert archive.whole.keep(_found(claude, output)).outcome == "stored"
    (version,) = archive.versions.session_versions(tree.session_id)
    assert b"".join(archive.versions.content(version)) == output.read_bytes()
    archive.close()


def test_a_large_file_is_read_and_stored_a_chunk_at_a_time(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    big = tree.folder / "tool-results" / "b1g0utput.txt"
    big.write_bytes(os.urandom(1 << 20) + b"".join(b"%08d\n" % number for number in range(600_000)))
    os.utime(big, ns=(1, time.time_ns() - 10**10))

    class Largest(FileSystem):
        largest = 0

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            Largest.largest = max(Largest.largest, size)
            return super().pread(fd, size, offset)

    archive = Archive(tmp_path / "archive.db")
    assert archive.whole.keep(_found(claude, big), fs=Largest()).outcome == "stored"
    assert Largest.largest == 1 << 20
    assert _count(tmp_path / "archive.db", "blob_chunks") == -(-big.stat().st_size // (1 << 20))
    (version,) = archive.versions.session_versions(tree.session_id)
    assert max(len(chunk) for chunk in archive.versions.content(version)) == 1 << 20
    assert b"".join(archive.versions.content(version)) == big.read_bytes()
    archive.close()


def test_a_damaged_frame_is_refused_never_read_as_other_bytes_nor_compacted(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    archive = Archive(tmp_path / "archive.db")
    for path in tree.whole:
        archive.whole.keep(_found(claude, path))
    output = tree.tool_results()[0]
    (version,) = [
        item for item in archive.versions.session_versions(tree.session_id) if item.path == output
    ]
    damaged = flip_frame_byte(tmp_path / "archive.db", version.blob)
    with pytest.raises(PackDamaged, match=str(output.name)):
        b"".join(archive.versions.content(version))
    assert [found.blob for found, _why in archive.versions.damaged()] == [version.blob]
    # compaction (riffd.archive.blobcompact) leaves the damaged frame as it is, still refused
    done = archive.whole.compact()
    assert (done.blobs, done.left) == (archive.versions.stats()["blobs"], 0)
    with sqlite3.connect(tmp_path / "archive.db") as db:
        assert db.execute(
            "SELECT data FROM blob_chunks WHERE blob = ?", (version.blob,)
        ).fetchone() == (damaged,)
    with pytest.raises(PackDamaged, match=str(output.name)):
        b"".join(archive.versions.content(version))
    archive.close()


STORE_AND_STALL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from riffd.archive.store import Archive
    from riffd.fsio import FileSystem, RetryPolicy
    from riffd.claude_code.session_files import classify
    claude, path, marker = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    class Stall(FileSystem):
        reads = 0
        def pread(self, fd, size, offset):
            Stall.reads += 1
            if Stall.reads == 8:  # inside the store's transaction, frames of it written
                marker.write_text("storing")
                time.sleep(60)
            return super().pread(fd, size, offset)
    archive = Archive(Path(sys.argv[4]))
    archive.whole.keep(classify(path, [claude / "projects"], [claude]), fs=Stall())
""")


@pytest.mark.slow
def test_kill_9_while_a_file_is_stored_leaves_it_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    big = tree.folder / "tool-results" / "b1g0utput.txt"
    big.write_bytes(b"".join(b"%08d\n" % number for number in range(1_000_000)))  # 9 MB: 9 frames
    os.utime(big, ns=(1, time.time_ns() - 10**10))
    marker, archive_path = tmp_path / "marker", tmp_path / "archive.db"
    Archive(archive_path).close()
    kill_9_once_marked(
        STORE_AND_STALL, claude, big, marker, archive_path, marker=marker, timeout=30
    )
    for table in ("blobs", "blob_chunks", "session_files"):
        assert _count(archive_path, table) == 0, table
    archive = Archive(archive_path)
    assert archive.whole.keep(_found(claude, big)).outcome == "stored"
    (version,) = archive.versions.session_versions(tree.session_id)
    assert b"".join(archive.versions.content(version)) == big.read_bytes()
    archive.close()


def test_an_archive_made_before_whole_files_gains_their_tables_and_keeps_its_lines(
    tmp_path: Path,
) -> None:
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(b'{"type":"user","sessionId":"s"}\n')
    archive = Archive(tmp_path / "archive.db")
    archive.add_lines(str(transcript), 0, [transcript.read_bytes().rstrip(b"\n")])
    archive.close()
    with sqlite3.connect(tmp_path / "archive.db") as db:  # as the riffd before this one left it
        db.executescript(
            "DROP TABLE blobs; DROP TABLE blob_chunks; DROP TABLE session_files; DROP TABLE plan_slugs; "
            "ALTER TABLE files DROP COLUMN mtime_ns;"
        )
    reader = Archive(tmp_path / "archive.db", read_only=True)
    assert (
        not reader.versions.present
        and reader.versions.session_versions("s") == []
        and reader.versions.counts() == {}
    )
    assert len(reader.sessions()) == 1
    reader.close()
    archive = Archive(tmp_path / "archive.db")
    assert archive.versions.present
    ((file_id, _path, _session),) = archive.files_of(str(transcript))
    assert b"".join(archive.iter_file(file_id)) == transcript.read_bytes()
    assert archive.restore_time(file_id) is None
    archive.close()


def test_a_read_that_fails_with_eio_is_tried_again(tmp_path: Path) -> None:
    """A cloud-synced folder failing a read for a moment (EIO) costs a retry, not the file."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.tool_results()[0]

    class Flaky(FileSystem):
        failures = 0

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            if Flaky.failures < 2:
                Flaky.failures += 1
                raise OSError(errno.EIO, "Input/output error")
            return super().pread(fd, size, offset)

    archive = Archive(tmp_path / "archive.db")
    kept = archive.whole.keep(
        _found(claude, output), fs=RetryingFS(Flaky(), RetryPolicy(attempts=3, first_wait=0.01))
    )
    assert (kept.outcome, Flaky.failures) == ("stored", 2)
    (version,) = archive.versions.session_versions(tree.session_id)
    assert b"".join(archive.versions.content(version)) == output.read_bytes()
    archive.close()


def test_recover_copies_every_readable_version_below_what_the_new_archive_holds(
    tmp_path: Path,
) -> None:
    """A damaged archive moved aside holds the only copy of the files of deleted sessions: `riffd
    archive recover` copies every version it can read into the new archive, older than what the new
    one took meanwhile, and names the rest."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    old = Archive(tmp_path / "old.db")
    for path in tree.whole:
        old.whole.keep(_found(claude, path))
    old.add_lines(str(tree.main), 0, tree.main.read_bytes().splitlines())
    output = tree.tool_results()[0]
    (damaged,) = [
        version
        for version in old.versions.session_versions(tree.session_id)
        if version.path == output
    ]
    old.close()
    # its saved output's frame damaged (the other file shares it)
    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute("UPDATE blob_chunks SET data = x'00' WHERE blob = ?", (damaged.blob,))
    task = claude / "tasks" / tree.session_id / "1.json"
    first = task.read_bytes()
    # the new archive took a later version meanwhile
    task.write_bytes(b'{"id":"1","status":"completed"}')
    new = Archive(tmp_path / "new.db")
    new.whole.keep(_found(claude, task))
    result = recover(tmp_path / "old.db", new)
    # both outputs: one blob
    assert result.versions == len(tree.whole) - 2 and len(result.unreadable) == 2
    assert all(
        str(output.name) in part or str(tree.tool_results()[1].name) in part
        for part in result.unreadable
    )
    versions = [
        version
        for version in new.versions.session_versions(tree.session_id, every=True)
        if version.path == task
    ]
    assert [b"".join(new.versions.content(version)) for version in versions] == [
        first,
        task.read_bytes(),
    ]
    newest = {version.path: version for version in new.versions.session_versions(tree.session_id)}
    assert b"".join(new.versions.content(newest[task])) == task.read_bytes()
    for path in tree.whole:
        if path.parent.name not in ("tool-results", "tasks"):
            # the plan too, by its slug
            assert b"".join(new.versions.content(newest[path])) == path.read_bytes()
    new.close()


def test_an_archive_damaged_while_open_goes_on_whole_in_a_new_one(tmp_path: Path) -> None:
    """The writer, the reader and the files kept whole share one connection: when the archive is
    found damaged while open and moved aside, all three go on in the new archive at once. None
    keeps the old one's watermark, runs, open pack or versions (lines skipped as archived, a file
    called unchanged: lost for good once Claude Code deletes the session)."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    lines = tree.main.read_bytes().splitlines()
    archive = Archive(tmp_path / "archive.db")
    archive.add_lines(str(tree.main), 0, lines)
    for path in tree.whole:
        archive.whole.keep(_found(claude, path))
    archive.settle()
    with open(archive.path, "r+b") as handle:  # another program scribbles over the middle
        handle.seek(4096)
        handle.write(b"\xff" * 8192)
    assert archive.reopen_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))
    assert archive.moved_aside is not None and archive.moved_aside.exists()
    assert archive.cursor(str(tree.main)) == (0, 0)
    assert archive.add_lines(str(tree.main), 0, lines) == len(lines)
    output = tree.tool_results()[0]
    assert archive.whole.keep(_found(claude, output)).outcome == "stored"
    archive.close()
    archive = Archive(tmp_path / "archive.db")
    ((file_id, _path, _session),) = archive.files_of(str(tree.main))
    assert b"".join(archive.iter_file(file_id)) == tree.main.read_bytes()
    (version,) = [
        item for item in archive.versions.session_versions(tree.session_id) if item.path == output
    ]
    assert b"".join(archive.versions.content(version)) == output.read_bytes()
    archive.close()
