"""The files kept whole are stored fast, then compressed again at the settled level once the
archive is quiet: the same bytes read back, never a frame replaced that changed meanwhile, a
damaged frame left as it is (test_wholefiles.py), a kill -9 at any instant harmless. Real files, a real SQLite archive,
real `riffd` and Python processes."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import zstandard

from helpers.archive_damage import flip_frame_byte
from helpers.run import kill_9_at_random, riffd_env
from helpers.sessiontree import build_session
from riffd.archive.blobcompact import BlobCompaction, Compacted
from riffd.archive.packs import SETTLED_LEVEL
from riffd.archive.store import Archive
from riffd.claude_code.session_files import SessionFile, all_session_files, classify


def _found(claude: Path, path: Path) -> SessionFile:
    found = classify(path, [claude / "projects"], [claude])
    assert found is not None, path
    return found


def _frames(archive_path: Path) -> dict[tuple[int, int], bytes]:
    with sqlite3.connect(archive_path) as db:
        return {
            (blob, number): bytes(data)
            for blob, number, data in db.execute("SELECT blob, number, data FROM blob_chunks")
        }


def _stored_matches_frames(archive_path: Path) -> None:
    with sqlite3.connect(archive_path) as db:
        wrong = db.execute(
            "SELECT id, stored, (SELECT SUM(LENGTH(data)) FROM blob_chunks WHERE blob = id) "
            "FROM blobs WHERE stored != (SELECT SUM(LENGTH(data)) FROM blob_chunks WHERE blob = id)"
        ).fetchall()
    assert not wrong, (
        f"blobs whose stored bytes are not their frames' (id, stored, frames): {wrong}"
    )


def _pages(archive_path: Path) -> tuple[int, int]:
    """The archive file's pages, and how many of them are free."""
    with sqlite3.connect(archive_path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return (
            db.execute("PRAGMA page_count").fetchone()[0],
            db.execute("PRAGMA freelist_count").fetchone()[0],
        )


def _log_lines(count: int, seed: int) -> bytes:
    """`count` lines of a build log: text that compresses as real logs do, not repeats."""
    rng = random.Random(seed)
    return b"".join(
        b"tests/test_%05d.py::test_case_%d %s in %.3fs [%010x]\n"
        % (
            rng.randrange(3000),
            rng.randrange(90),
            rng.choice([b"PASSED", b"PASSED", b"FAILED", b"SKIPPED"]),
            rng.random() * 3,
            rng.getrandbits(40),
        )
        for _ in range(count)
    )


def test_files_stored_fast_are_compressed_again_once_and_read_back_the_same(
    tmp_path: Path,
) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    log = tree.folder / "tool-results" / "l0g0utput.txt"
    log.write_bytes(_log_lines(40_000, seed=1))  # 2.3 MB: three frames
    os.utime(log, ns=(1, time.time_ns() - 10**10))
    archive = Archive(tmp_path / "archive.db")
    for found in all_session_files([claude / "projects"], [claude]):
        archive.whole.keep(found)
    fast = _frames(tmp_path / "archive.db")
    assert len(fast) > 3
    fast_stored = archive.versions.stats()["stored_bytes"]
    # written fast: each frame is what zstd level 1 makes of its bytes
    decompress = zstandard.ZstdDecompressor().decompress
    level = zstandard.ZstdCompressor(level=1, write_checksum=True)
    assert all(level.compress(decompress(frame)) == frame for frame in fast.values())
    blobs = archive.versions.stats()["blobs"]
    pages, _free = _pages(tmp_path / "archive.db")
    done = archive.whole.compact()
    assert (done.blobs, done.left) == (blobs, 0) and done.frames >= 3
    # the pages the frames left are given back to the file system
    after, free = _pages(tmp_path / "archive.db")
    assert free == 0 and after < pages * 0.9, (pages, after, free)
    tight = _frames(tmp_path / "archive.db")
    assert tight.keys() == fast.keys()
    assert {key: decompress(frame) for key, frame in tight.items()} == {
        key: decompress(frame) for key, frame in fast.items()
    }
    # each frame smaller, or left as it was when level 17 gains nothing
    assert all(len(tight[key]) <= len(fast[key]) for key in fast)
    assert archive.versions.stats()["stored_bytes"] == fast_stored - done.saved < fast_stored * 0.95
    _stored_matches_frames(tmp_path / "archive.db")
    for version in archive.versions.session_versions(tree.session_id):
        assert b"".join(archive.versions.content(version)) == version.path.read_bytes()
    # once only: nothing is left to do, and a file kept later is the next to compact
    assert archive.whole.compact().blobs == 0
    later = tree.folder / "tool-results" / "l4t3r0utp.txt"
    later.write_bytes(_log_lines(2_000, seed=2))
    os.utime(later, ns=(1, time.time_ns() - 10**10))
    assert archive.whole.keep(_found(claude, later)).outcome == "stored"
    again = archive.whole.compact()
    assert (again.blobs, again.left) == (1, 0)
    assert _frames(tmp_path / "archive.db").items() >= tight.items()
    archive.close()


@functools.lru_cache(maxsize=64)
def _at_settled_level(data: bytes) -> bytes:
    """What level 17 makes of `data` (kept: a test asks again after each quiet period)."""
    return zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True).compress(data)


def _settled_frames(archive_path: Path, first: int = 0) -> list[bool]:
    """For each frame in order from `first`, whether it is what level 17 makes of its bytes."""
    frames = _frames(archive_path)
    decompress = zstandard.ZstdDecompressor().decompress
    return [
        _at_settled_level(decompress(frames[key])) == frames[key] for key in sorted(frames)[first:]
    ]


@pytest.mark.slow
def test_a_compaction_stopped_inside_a_blob_goes_on_where_it_stopped(tmp_path: Path) -> None:
    """The daemon compacts for at most two minutes each quiet period: a blob that takes longer is
    settled over several, each going on from the frame the last stopped at (started again from its
    first frame each time, it would never be settled, nor any blob after it)."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    log = tree.folder / "tool-results" / "l0g0utput.txt"
    data = _log_lines(60_000, seed=3)  # three frames and a half
    log.write_bytes(data)
    os.utime(log, ns=(1, time.time_ns() - 10**10))
    archive = Archive(tmp_path / "archive.db")
    archive.whole.keep(_found(claude, log))
    seen = []
    for _quiet_period in range(5):
        answers = iter([True, True])  # time for one frame: the blob, its next frame, then stop
        done = archive.whole.compact(lambda: next(answers, False))  # noqa: B023
        seen.append(_settled_frames(tmp_path / "archive.db"))
        _stored_matches_frames(tmp_path / "archive.db")
        if done.left == 0:
            break
    assert seen == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, True],
        [True, True, True, True],
    ]
    (version,) = archive.versions.session_versions(tree.session_id)
    assert b"".join(archive.versions.content(version)) == data
    assert archive.whole.compact().blobs == 0
    archive.close()


def test_a_damaged_frame_is_passed_over_and_the_next_ones_compacted(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    log = tree.folder / "tool-results" / "l0g0utput.txt"
    log.write_bytes(_log_lines(40_000, seed=6))  # three frames
    os.utime(log, ns=(1, time.time_ns() - 10**10))
    archive = Archive(tmp_path / "archive.db")
    archive.whole.keep(_found(claude, log))
    (version,) = archive.versions.session_versions(tree.session_id)
    damaged = flip_frame_byte(tmp_path / "archive.db", version.blob)
    done = archive.whole.compact()
    assert (done.blobs, done.frames, done.left) == (1, 2, 0)
    assert _frames(tmp_path / "archive.db")[(version.blob, 0)] == damaged
    assert _settled_frames(tmp_path / "archive.db", first=1) == [True, True]
    archive.close()


def test_small_files_compacted_leave_their_pages_empty_and_given_back(tmp_path: Path) -> None:
    """Frames of a few kB share pages: a frame that shrank in place would leave its page as full
    as before, so a compacted frame is a new row and the old pages empty out."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    archive = Archive(tmp_path / "archive.db")
    for number in range(200):
        path = tree.folder / "tool-results" / f"sm4ll{number:04d}.txt"
        path.write_bytes(_log_lines(40, seed=100 + number))
        os.utime(path, ns=(1, time.time_ns() - 10**10))
        archive.whole.keep(_found(claude, path))
    pages, _free = _pages(tmp_path / "archive.db")
    done = archive.whole.compact()
    assert done.frames == 200
    after, free = _pages(tmp_path / "archive.db")
    assert free == 0 and after < pages, (pages, after)  # 94 to 91 (updated in place: 94)
    archive.close()


def test_an_archive_replaced_while_compacting_gets_no_mark_of_the_old_one(tmp_path: Path) -> None:
    """Another thread finds the archive damaged meanwhile and goes on in a new one: the compaction
    ends without recording how far it got there, so the blobs stored in the new one are compacted
    in their turn."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    archive = Archive(tmp_path / "archive.db")

    def output(name: str, seed: int) -> SessionFile:
        path = tree.folder / "tool-results" / name
        path.write_bytes(_log_lines(300, seed=seed))
        os.utime(path, ns=(1, time.time_ns() - 10**10))
        return _found(claude, path)

    for number in range(20):
        archive.whole.keep(output(f"0ld{number:06d}.txt", number))
    calls = 0

    def going() -> bool:
        nonlocal calls
        calls += 1
        if calls == 15:
            archive.connection.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            with open(tmp_path / "archive.db", "r+b") as database:
                database.seek(4096 * 3)
                database.write(random.Random(1).randbytes(4096 * 6))
            assert archive.reopen_if_damaged(
                sqlite3.DatabaseError("database disk image is malformed")
            )
        return True

    archive.whole.compact(going)
    assert (
        archive.connection.db.execute("SELECT value FROM meta WHERE key LIKE 'blobs_%'").fetchall()
        == []
    )
    for number in range(5):
        archive.whole.keep(output(f"n3w{number:06d}.txt", 50 + number))
    done = archive.whole.compact()
    assert (done.blobs, done.left) == (5, 0)
    archive.close()


def test_a_frame_written_afresh_meanwhile_is_not_replaced(tmp_path: Path) -> None:
    """Compaction reads a frame, compresses it outside the lock and stores the result only if the
    frame is still the one stored: `riffd archive verify --fix` may have written the blob afresh
    (from another process) in between."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    archive = Archive(tmp_path / "archive.db")
    output = tree.tool_results()[0]
    archive.whole.keep(_found(claude, output))
    (version,) = archive.versions.session_versions(tree.session_id)
    ((key, frame),) = _frames(tmp_path / "archive.db").items()
    other = Archive(tmp_path / "archive.db")  # the other process
    with sqlite3.connect(tmp_path / "archive.db") as db:
        db.execute("DELETE FROM blob_chunks WHERE blob = ?", (version.blob,))
    other.whole.keep(_found(claude, output), again=True)  # heals: the frame written afresh
    afresh = _frames(tmp_path / "archive.db")[key]
    other.close()
    data = zstandard.ZstdDecompressor().decompress(frame)
    # written afresh at the settled level at once
    assert afresh == zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True).compress(
        data
    )
    stale = zstandard.ZstdCompressor(level=19, write_checksum=True).compress(data)
    assert not BlobCompaction(archive.connection).replace_frame(key[0], key[1], frame, stale)
    assert _frames(tmp_path / "archive.db")[key] == afresh
    _stored_matches_frames(tmp_path / "archive.db")
    assert BlobCompaction(archive.connection).replace_frame(key[0], key[1], afresh, stale)
    _stored_matches_frames(tmp_path / "archive.db")
    assert b"".join(archive.versions.content(version)) == output.read_bytes()
    archive.close()


def _chunk_rows(archive_path: Path) -> dict[tuple[int, int], tuple[int, bytes]]:
    """Each frame's row id and bytes: a frame replaced is a new row."""
    with sqlite3.connect(archive_path) as db:
        return {
            (blob, number): (rowid, bytes(data))
            for rowid, blob, number, data in db.execute(
                "SELECT rowid, blob, number, data FROM blob_chunks"
            )
        }


def test_a_frame_that_would_not_be_smaller_is_left_as_it_is(tmp_path: Path) -> None:
    """Some bytes come out of level 17 larger than out of level 1 (here, letters drawn at random
    from sixteen): the frame stays as it was written, and the blob counts as settled."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    output = tree.folder / "tool-results" / "l3tters.txt"
    rng = random.Random(1)
    data = bytes(rng.choice(b"abcdefghijklmnop") for _ in range(24_000))
    output.write_bytes(data)
    os.utime(output, ns=(1, time.time_ns() - 10**10))
    archive = Archive(tmp_path / "archive.db")
    archive.whole.keep(_found(claude, output))
    before = _chunk_rows(tmp_path / "archive.db")
    ((_rowid, frame),) = before.values()
    level = zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True)
    assert len(level.compress(data)) > len(frame)  # (what makes these bytes the case)
    done = archive.whole.compact()
    assert (done.blobs, done.frames, done.saved, done.left) == (1, 0, 0, 0)
    assert _chunk_rows(tmp_path / "archive.db") == before
    archive.close()


class _Lying:
    """A compressor whose frames are valid and smaller, but of other bytes (a fault in memory, a
    library bug): what the check that a frame reads back the same is for."""

    def compress(self, data: bytes) -> bytes:
        return zstandard.ZstdCompressor(level=19).compress(data[:-1] + b"?")


def test_a_frame_that_reads_back_other_bytes_is_never_stored(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    log = tree.folder / "tool-results" / "l0g0utput.txt"
    log.write_bytes(_log_lines(5_000, seed=9))
    os.utime(log, ns=(1, time.time_ns() - 10**10))
    archive = Archive(tmp_path / "archive.db")
    archive.whole.keep(_found(claude, log))
    before = _chunk_rows(tmp_path / "archive.db")
    ((blob, number),) = before
    compaction = BlobCompaction(archive.connection)
    assert compaction._tighten(_Lying(), blob, number) == 0  # type: ignore[arg-type]
    assert _chunk_rows(tmp_path / "archive.db") == before
    settled = zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True)
    assert compaction._tighten(settled, blob, number) > 0  # (the honest one is stored)
    (version,) = archive.versions.session_versions(tree.session_id)
    assert b"".join(archive.versions.content(version)) == log.read_bytes()
    archive.close()


TWO_COMPACTIONS = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from riffd.archive.store import Archive
    archive = Archive(Path(sys.argv[1]))
    sys.stdin.readline()  # both started: go
    done = archive.whole.compact()
    archive.close()
    print(json.dumps([done.blobs, done.frames, done.saved, done.left]))
""")


@pytest.mark.slow
def test_two_compactions_at_once_settle_every_frame_once(tmp_path: Path) -> None:
    """The daemon's compaction and `riffd archive compact` at the same time, as two processes:
    every file reads back the same, each frame is counted by the one that replaced it (the saved
    bytes add up to what the archive lost), and every blob ends settled."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    archive = Archive(tmp_path / "archive.db")
    logs = []
    for number in range(8):
        log = tree.folder / "tool-results" / f"l0g{number:04d}.txt"
        log.write_bytes(_log_lines(3_000 + 1_500 * number, seed=20 + number))
        os.utime(log, ns=(1, time.time_ns() - 10**10))
        archive.whole.keep(_found(claude, log))
        logs.append(log)
    archive.close()
    stored_before = sum(len(data) for data in _frames(tmp_path / "archive.db").values())
    children = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_COMPACTIONS, str(tmp_path / "archive.db")],
            env=riffd_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for child in children:  # both go at once
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), results
    done = [json.loads(out) for out, _err in results]
    stored_after = sum(len(data) for data in _frames(tmp_path / "archive.db").values())
    assert sum(saved for _blobs, _frames_, saved, _left in done) == stored_before - stored_after
    assert all(_settled_frames(tmp_path / "archive.db"))
    _stored_matches_frames(tmp_path / "archive.db")
    fresh = Archive(tmp_path / "archive.db")
    versions = {
        Path(version.path).name: version
        for version in fresh.versions.session_versions(tree.session_id)
    }
    for log in logs:
        assert b"".join(fresh.versions.content(versions[log.name])) == log.read_bytes()
    assert fresh.whole.compact() == Compacted(0, 0, 0, 0)
    fresh.close()


def test_riffd_archive_compact_says_it_compressed_the_files_kept_whole(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    state = tmp_path / "state"
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{state}"\nclaude_dir = "{claude}"\n')
    command = [sys.executable, "-m", "riffd", "--config", str(config), "archive"]
    ingest = subprocess.run(
        [*command, "ingest", "--no-compact", str(tree.main), *map(str, tree.whole)],
        env=riffd_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ingest.returncode == 0, ingest.stderr
    fast = _frames(state / "archive.db")
    compact = subprocess.run(
        [*command, "compact"], env=riffd_env(), capture_output=True, text=True, check=False
    )
    assert compact.returncode == 0, compact.stderr
    blobs = len({path.read_bytes() for path in tree.whole})
    assert re.search(
        rf"compressed the files kept whole at the settled level: {blobs} blob\(s\), [1-9][0-9]* "
        r"frame\(s\) [0-9.]+ kB smaller, in [0-9.]+ s",
        compact.stderr,
    ), compact.stderr
    assert sum(map(len, _frames(state / "archive.db").values())) < sum(map(len, fast.values()))
    again = subprocess.run(
        [*command, "compact"], env=riffd_env(), capture_output=True, text=True, check=False
    )
    assert again.returncode == 0 and "kept whole" not in again.stderr, again.stderr


COMPACT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from riffd.archive.store import Archive
    marker = Path(sys.argv[2])
    archive = Archive(Path(sys.argv[1]))
    def going():
        marker.write_text("compacting")
        return True
    archive.whole.compact(going)
    marker.write_text("done")
""")


@pytest.mark.slow
def test_kill_9_at_any_instant_of_a_compaction_leaves_every_file_readable(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    tree = build_session(claude)
    data = _log_lines(160_000, seed=4)  # 9 MB: 9 frames, 0.1-0.3 s each at level 17
    log = tree.folder / "tool-results" / "b1g0utput.txt"
    log.write_bytes(data)
    os.utime(log, ns=(1, time.time_ns() - 10**10))
    archive_path, marker = tmp_path / "archive.db", tmp_path / "marker"
    archive = Archive(archive_path)
    for path in [*tree.whole, log]:
        archive.whole.keep(_found(claude, path))
    versions = {
        version.path: version for version in archive.versions.session_versions(tree.session_id)
    }
    archive.close()
    rng = random.Random(5)
    kills = 0
    for _round in range(6):
        marker.unlink(missing_ok=True)
        compacting = subprocess.Popen(
            [sys.executable, "-c", COMPACT, str(archive_path), str(marker)], env=riffd_env()
        )
        kills += kill_9_at_random(compacting, marker.exists, 0.6, rng, timeout=30)
        _stored_matches_frames(archive_path)
        archive = Archive(archive_path)
        for path, version in versions.items():
            assert b"".join(archive.versions.content(version)) == path.read_bytes(), path
        archive.close()
    assert kills >= 3, "the compaction ended before most kills: make the file bigger"
    archive = Archive(archive_path)
    archive.whole.compact()
    assert b"".join(archive.versions.content(versions[log])) == data
    assert archive.whole.compact().blobs == 0
    archive.close()
