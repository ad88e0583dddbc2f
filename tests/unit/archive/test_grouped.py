"""A bulk ingest's writes grouped into few transactions (riffd.archive.connection.grouped): each
step still whole or not at all, nothing of a group seen by another process before its commit,
what the steps did committed whatever ends the group, and the search index's merge settings
given back. Real SQLite archives, two connections for two processes, a real `riffd` process."""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import transcript_line
from helpers.run import riffd_command, riffd_env
from riffd.archive.connection import ArchiveGroupError
from riffd.archive.search import FTS_BULK, FTS_DEFAULT, bulk_begin, bulk_end, fts_settings
from riffd.archive.store import Archive, ArchiveGap

LINES = [transcript_line(number, pad=300) for number in range(1, 31)]
PATH = "/home/user/.claude/projects/-p/11111111-2222-3333-4444-555555555555.jsonl"


def _lines(part: list[bytes]) -> list[bytes]:
    return [line[:-1] for line in part]


def _archived(path: Path) -> int:
    """The bytes archived of PATH, as another process sees them."""
    other = Archive(path, read_only=True)
    try:
        return other.cursor(PATH)[1]
    finally:
        other.close()


def test_a_group_is_seen_by_another_process_only_once_committed(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive.db")
    first = len(b"".join(LINES[:10]))
    with archive.connection.grouped(2 * first) as group:
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        group.wrote(first)
        assert _archived(tmp_path / "archive.db") == 0  # held in the group's transaction
        archive.add_lines(PATH, first, _lines(LINES[10:20]))
        group.wrote(len(b"".join(LINES[10:20])))  # the limit: committed
        assert _archived(tmp_path / "archive.db") == len(b"".join(LINES[:20]))
        archive.add_lines(PATH, len(b"".join(LINES[:20])), _lines(LINES[20:]))
        group.commit()
        assert _archived(tmp_path / "archive.db") == len(b"".join(LINES))
    ((file_id, _path, _session),) = archive.files_of(PATH)
    assert b"".join(archive.iter_file(file_id)) == b"".join(LINES)
    archive.close()


def test_a_step_that_fails_takes_back_every_step_since_the_last_commit(tmp_path: Path) -> None:
    """A step that fails inside a group (a refused one, or one that fails after it wrote: a full
    disk, say) rolls back every step since the group's last commit, never a part of one; what was
    committed stays, and the archive goes on from its watermark (as the ingest does then)."""
    archive = Archive(tmp_path / "archive.db")
    first, second = len(b"".join(LINES[:10])), len(b"".join(LINES[:20]))
    connection = archive.connection
    with connection.grouped(1 << 30) as group:
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        group.commit()
        archive.add_lines(PATH, first, _lines(LINES[10:20]))
        with pytest.raises(OSError), connection.writing():
            archive.add_lines(PATH, second, _lines(LINES[20:]))
            assert archive.cursor(PATH)[1] == len(b"".join(LINES))
            raise OSError(28, "No space left on device")
        assert archive.cursor(PATH)[1] == first
        archive.add_lines(PATH, first, _lines(LINES[10:20]))
        with pytest.raises(ArchiveGap):
            archive.add_lines(PATH, second + 1, _lines(LINES[20:]))  # a hole: refused
        assert archive.cursor(PATH)[1] == first
        archive.add_lines(PATH, first, _lines(LINES[10:]))
    assert _archived(tmp_path / "archive.db") == len(b"".join(LINES))
    ((file_id, _path, _session),) = archive.files_of(PATH)
    assert b"".join(archive.iter_file(file_id)) == b"".join(LINES)
    archive.close()


def test_what_the_steps_did_is_committed_when_the_group_ends_by_an_error(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive.db")
    with pytest.raises(KeyboardInterrupt), archive.connection.grouped(1 << 30):
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        raise KeyboardInterrupt  # Ctrl-C between two steps
    assert _archived(tmp_path / "archive.db") == len(b"".join(LINES[:10]))
    archive.close()


def test_a_step_that_rolls_the_transaction_back_is_an_error_not_a_silent_loss(
    tmp_path: Path,
) -> None:
    archive = Archive(tmp_path / "archive.db")
    connection = archive.connection
    with connection.grouped(1 << 30):
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        with pytest.raises(ArchiveGroupError), connection.writing():
            connection.db.execute("ROLLBACK")
    # the group's first step went with the ROLLBACK: said, never reported as archived
    assert _archived(tmp_path / "archive.db") == 0
    archive.add_lines(PATH, 0, _lines(LINES))  # and the archive goes on
    assert _archived(tmp_path / "archive.db") == len(b"".join(LINES))
    archive.close()


def _merge_settings(where: Path | sqlite3.Connection) -> dict[str, int]:
    """The search index's merge settings, as a connection of this process or another sees them."""
    with contextlib.ExitStack() as stack:
        db = (
            where
            if isinstance(where, sqlite3.Connection)
            else stack.enter_context(contextlib.closing(sqlite3.connect(where)))
        )
        return dict(
            db.execute(
                "SELECT k, v FROM search_config WHERE k IN ('automerge', 'crisismerge', 'hashsize')"
            )
        )


def _segments(db: sqlite3.Connection) -> int:
    """How many segments the search index is in: the second varint of FTS5's structure record
    (row 10 of its data table), after its 4-byte cookie and its count of levels."""
    (record,) = db.execute("SELECT block FROM search_data WHERE id = 10").fetchone()
    values, value, shift = [], 0, 0
    for byte in record[4:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            if len(values) == 2:
                return values[1]
            value = shift = 0
    raise AssertionError("no structure record")


def test_the_bulk_settings_hold_only_inside_the_groups_transactions(tmp_path: Path) -> None:
    """The ingest's search index settings are set in each of its transactions and taken back before
    it commits: no other process sees them, and the words of each are written out under them
    (eighteen commits, eighteen segments: under FTS5's own settings, the sixteenth segment of a
    level merges them)."""
    archive = Archive(tmp_path / "archive.db")
    db = archive.connection.db
    with archive.connection.grouped(1 << 30, begin=bulk_begin, end=bulk_end) as group:
        for part in range(18):
            offset = len(b"".join(LINES[:part]))
            archive.add_lines(PATH, offset, _lines(LINES[part : part + 1]))
            assert _merge_settings(db) == FTS_BULK  # in this transaction
            assert _merge_settings(tmp_path / "archive.db") in ({}, FTS_DEFAULT)  # elsewhere
            group.commit()
            assert _merge_settings(db) == FTS_DEFAULT
    assert _segments(db) == 18
    archive.close()


class _Injected(sqlite3.OperationalError):
    """A failure injected into a group's own statements (a full disk, an I/O error)."""


@pytest.mark.parametrize("where", ["begin", "end"])
def test_a_failure_in_the_groups_own_statements_takes_back_its_transaction(
    tmp_path: Path, where: str
) -> None:
    """`begin` failing in the group's second transaction, or `end` failing after it wrote the
    words out: that transaction's steps are taken back (the watermark is where the first commit
    left it), FTS5's own settings are what is committed, and archiving on from the watermark
    restores the file byte for byte."""
    calls = {"begin": 0, "end": 0}

    def begin(db: sqlite3.Connection) -> None:
        calls["begin"] += 1
        bulk_begin(db)
        if where == "begin" and calls["begin"] == 2:
            raise _Injected("disk I/O error (injected in begin)")

    def end(db: sqlite3.Connection) -> None:
        calls["end"] += 1
        if where == "end" and calls["end"] == 2:
            db.execute("SAVEPOINT riffd_words")  # the words written out, as bulk_end does
            db.execute("RELEASE riffd_words")
            raise _Injected("disk I/O error (injected in end)")
        bulk_end(db)

    archive = Archive(tmp_path / "archive.db")
    first = len(b"".join(LINES[:10]))
    with archive.connection.grouped(1 << 30, begin=begin, end=end) as group:
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        group.commit()
        with pytest.raises(_Injected):
            archive.add_lines(PATH, first, _lines(LINES[10:20]))
            group.commit()
        assert not archive.connection.db.in_transaction  # (the write lock let go at once)
        assert _archived(tmp_path / "archive.db") == first
        assert _merge_settings(tmp_path / "archive.db") in ({}, FTS_DEFAULT)
        assert _merge_settings(archive.connection.db) in ({}, FTS_DEFAULT)
        archive.add_lines(PATH, first, _lines(LINES[10:]))  # archived on from the watermark
    assert _merge_settings(tmp_path / "archive.db") in ({}, FTS_DEFAULT)
    archive.close()
    fresh = Archive(tmp_path / "archive.db")
    ((file_id, _path, _session),) = fresh.files_of(PATH)
    assert b"".join(fresh.iter_file(file_id)) == b"".join(LINES)
    fresh.close()


KILLED_INGEST_CORPUS = 40  # files of about 400 kB of distinct words each


def test_a_killed_ingest_leaves_fts5s_own_settings_and_no_one_saw_the_bulk_ones(
    tmp_path: Path,
) -> None:
    """A real `riffd archive ingest` killed (SIGKILL) after its first commits: another process
    reading the archive throughout never saw the bulk settings, and they are not left behind."""
    rng = random.Random(5)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=7)) for _ in range(5000)]
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    for number in range(KILLED_INGEST_CORPUS):
        session = f"11111111-2222-3333-4444-{number:012d}"
        lines = [
            json.dumps(
                {
                    "type": "user",
                    "uuid": f"{session}-{line}",
                    "sessionId": session,
                    "message": {"role": "user", "content": " ".join(rng.choices(words, k=60))},
                }
            ).encode()
            + b"\n"
            for line in range(1, 800)
        ]
        (projects / f"{session}.jsonl").write_bytes(b"".join(lines))
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    db_path = tmp_path / "state" / "archive.db"
    child = subprocess.Popen(
        riffd_command("archive", "ingest", "--no-compact", str(projects), config=config),
        env=riffd_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen: list[dict[str, int]] = []
    archived = 0
    try:
        while child.poll() is None and archived < 3:
            if db_path.exists():
                with contextlib.suppress(sqlite3.OperationalError):  # (being made)
                    seen.append(_merge_settings(db_path))
                    archived = _files_archived(db_path)
    finally:
        child.kill()
        _out, errors = child.communicate()
    assert archived >= 3, f"the ingest ended before three files were archived: {errors!r}"
    assert seen and all(settings in ({}, FTS_DEFAULT) for settings in seen)
    assert _merge_settings(db_path) in ({}, FTS_DEFAULT)
    assert _files_archived(db_path) < KILLED_INGEST_CORPUS  # killed part way


def _files_archived(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT COUNT(*) FROM files WHERE archived_bytes > 0").fetchone()[0])


def test_a_settle_gives_the_search_index_fts5s_settings_back(tmp_path: Path) -> None:
    """As a killed ingest of a development build (never released) left them, committed: the
    daemon's next settle (once it added lines) puts FTS5's own back."""
    archive = Archive(tmp_path / "archive.db")
    with archive.connection.writing():
        fts_settings(archive.connection.db, FTS_BULK)
    assert _merge_settings(tmp_path / "archive.db") == FTS_BULK
    archive.add_lines(PATH, 0, _lines(LINES))
    assert archive.settle(optimize=False)
    assert _merge_settings(tmp_path / "archive.db") == FTS_DEFAULT
    archive.close()


def test_another_process_writing_between_two_commits_of_a_group(tmp_path: Path) -> None:
    """The daemon archives another file (into the same open pack) between two commits of the
    ingest's group: the group's next step reads the pack afresh, and both files restore byte for
    byte."""
    x, y = tmp_path / "x.jsonl", tmp_path / "y.jsonl"
    x.write_bytes(b"".join(LINES))
    y.write_bytes(b"".join(transcript_line(number, pad=100) for number in range(1, 41)))
    ingest, daemon = Archive(tmp_path / "archive.db"), Archive(tmp_path / "archive.db")
    half = len(b"".join(LINES[:15]))
    with ingest.connection.grouped(1) as group:
        ingest.add_lines(str(x), 0, _lines(LINES[:15]))
        assert group.wrote(half)  # committed
        daemon.add_lines(str(y), 0, y.read_bytes().splitlines())
        ingest.add_lines(str(x), half, _lines(LINES[15:]))
        group.commit()
    ingest.close()
    daemon.close()
    fresh = Archive(tmp_path / "archive.db")
    for path in (x, y):
        ((file_id, _path, _session),) = fresh.files_of(str(path))
        assert b"".join(fresh.iter_file(file_id)) == path.read_bytes()
    fresh.close()


def test_steps_apart_from_a_group_commit_one_by_one(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive.db")
    first = len(b"".join(LINES[:10]))
    with archive.connection.grouped(1 << 30) as group:
        archive.add_lines(PATH, 0, _lines(LINES[:10]))
        with group.apart():  # what the group did is committed first, then each step on its own
            assert _archived(tmp_path / "archive.db") == first
            archive.add_lines(PATH, first, _lines(LINES[10:20]))
            assert _archived(tmp_path / "archive.db") == len(b"".join(LINES[:20]))
        archive.add_lines(PATH, len(b"".join(LINES[:20])), _lines(LINES[20:]))
        assert _archived(tmp_path / "archive.db") == len(b"".join(LINES[:20]))
    assert _archived(tmp_path / "archive.db") == len(b"".join(LINES))
    archive.close()


def test_the_ingest_itself_gives_the_search_index_its_settings_back(tmp_path: Path) -> None:
    """With nothing settled after it (no lines added at its end, say), `ingest_files` leaves
    FTS5's own settings."""
    from riffd.archive.ingest import ingest_files

    path = tmp_path / "5e55104e-0000-4000-8000-000000000001.jsonl"
    path.write_bytes(b"".join(LINES))
    archive = Archive(tmp_path / "archive.db")
    assert [added for _, added in ingest_files(archive, [path], min_bytes=0)] == [len(LINES)]
    archive.close()
    assert _merge_settings(tmp_path / "archive.db") in ({}, FTS_DEFAULT)


FAILING_COMMIT = textwrap.dedent("""
    import json, random, resource, signal, sys
    from pathlib import Path
    from riffd.archive.search import bulk_begin, bulk_end
    from riffd.archive.store import Archive
    work, bulk = Path(sys.argv[1]), sys.argv[2] == "bulk"
    hooks = {"begin": bulk_begin, "end": bulk_end} if bulk else {}
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    rng = random.Random(3)
    lines = [
        json.dumps({"type": "user", "message": {"role": "user", "content": f"{n} " + " ".join(
            "".join(rng.choice("abcdefghij") for _ in range(8)) for _ in range(40))}}).encode()
        for n in range(3000)
    ]
    path = work / "x.jsonl"
    path.write_bytes(b"".join(line + b"\\n" for line in lines))
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    db = work / "archive.db"
    archive = Archive(db)
    archive.add_lines(str(path), 0, lines[:1000])
    wal = Path(str(db) + "-wal")
    error = None
    try:
        with archive.connection.grouped(1 << 30, **hooks) as group:
            archive.add_lines(str(path), offsets[1000], lines[1000:2000])
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            room = max(wal.stat().st_size, db.stat().st_size) + 8192
            resource.setrlimit(resource.RLIMIT_FSIZE, (room, hard))
            try:
                group.commit()
            except Exception as exc:
                error = exc
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    except Exception as exc:
        error = error or exc
    archived = archive.cursor(str(path))[1]
    print("failed:", repr(error), "watermark:", archived, "committed:", offsets[1000])
    archive.add_lines(str(path), archived, lines[offsets.index(archived):])
    archive.close()
    fresh = Archive(db)
    ((file_id, _path, _session),) = fresh.files_of(str(path))
    settings = dict(fresh.connection.db.execute(
        "SELECT k, v FROM search_config WHERE k IN ('automerge', 'crisismerge', 'hashsize')"))
    print("settings:", settings)
    own = settings in ({}, {"automerge": 4, "crisismerge": 16, "hashsize": 1 << 20})
    sys.exit(0 if error is not None and own and b"".join(fresh.iter_file(file_id)) == path.read_bytes() else 1)
""")


@pytest.mark.parametrize("hooks", ["plain", "bulk"])
def test_a_group_whose_commit_fails_for_want_of_room_loses_nothing_committed(
    tmp_path: Path, hooks: str
) -> None:
    """The group's COMMIT fails for real (the WAL cannot grow: RLIMIT_FSIZE, as on a full disk), also
    with the ingest's search index settings (whose words are written out just before it): the
    group's steps are rolled back, the packs held in memory forgotten, FTS5's own settings are what
    is committed, and the same connection goes on from the archive's watermark: the file restores
    byte for byte."""
    run = subprocess.run(
        [sys.executable, "-c", FAILING_COMMIT, str(tmp_path), hooks],
        env=riffd_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "failed: None" not in run.stdout
