"""An archive of format 2, as riffd 0.2 wrote it, up to a76630d (tests/data/archive-format-2, made by
that riffd: tests/data/make_archive_format_2.py), is moved to format 3 when first opened: every
line, content, text id and search hit is as it was, pieces seen before are still found (a resumed
copy adds no content), and a kill -9 or a full disk at any moment of the move leaves it whole, as
it was, to be moved at the next open. A format newer than riffd's is refused and left untouched."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from helpers.run import kill_9_after, riffd_env, run_riffd
from helpers.tmpfs import grow_tmpfs, small_tmpfs
from riffd.archive.ingest import ingest_file
from riffd.archive.recover import recover
from riffd.archive.schema import FORMAT, ArchiveError
from riffd.archive.store import Archive
from riffd.state.database import STATE_NAME
from riffd.state.store import StateStore

FIXTURE = Path(__file__).parent.parent / "data" / "archive-format-2"
PROJECT = "-home-u-proj"
SESSION_1 = "00000000-0000-4000-8000-000000000001"


def _copy(tmp_path: Path) -> Path:
    """A copy of the fixture (archive and transcripts) in tmp_path, in WAL mode as riffd keeps an
    archive (the fixture is one file); return the archive."""
    shutil.copytree(FIXTURE, tmp_path / "fixture")
    db_path = tmp_path / "fixture" / "archive.db"
    with closing(sqlite3.connect(db_path)) as db:
        assert db.execute("PRAGMA journal_mode = WAL").fetchall() == [("wal",)]
    return db_path


FORMAT_2 = {"contents", "contents_key"}
FORMAT_3 = {"contents", "content_keys"}


def _format(db_path: Path) -> str:
    """The archive's format, checked against its tables: never one half moved."""
    db = sqlite3.connect(db_path)
    try:
        stated = str(db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0])
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_schema")}
    finally:
        db.close()
    made = {"2": FORMAT_2, "3": FORMAT_3}[stated]
    assert names & (FORMAT_2 | FORMAT_3 | {"contents_2"}) == made, (stated, names)
    return stated


def _contents(db_path: Path) -> dict[int, tuple[int, int, int, int | None, int]]:
    """Content id -> (pack, offset, length, text id, key), in either format."""
    with closing(sqlite3.connect(db_path)) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(contents)")}
        if "key" in columns:  # format 2
            rows = db.execute("SELECT id, pack, offset, length, text, key FROM contents").fetchall()
        else:
            rows = db.execute(
                "SELECT id, pack, offset, length, CASE text WHEN 0 THEN id ELSE text END, key "
                "FROM contents JOIN content_keys USING (id)"
            ).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


def _config(tmp_path: Path, state: Path, more: str = "") -> tuple[Path, dict[str, str]]:
    """A config naming `state` as the state folder (and the TOML lines `more`), and an environment
    that keeps the user's own Claude Code folder out; return both."""
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{state}"\n{more}')
    return config, {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def _state_of_format_2(tmp_path: Path) -> Path:
    """A state folder holding the fixture's archive; return it."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy2(FIXTURE / "archive.db", state / "archive.db")
    return state


def _held(archive: Archive) -> dict[str, bytes]:
    """File name -> the bytes the archive holds of it."""
    return {
        Path(path).name: b"".join(archive.iter_file(file_id))
        for file_id, path, _session in archive.all_files()
    }


def _transcripts() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in (FIXTURE / "projects" / PROJECT).iterdir()}


def _hits(archive: Archive, query: str) -> list[tuple[str | None, int, str | None, str]]:
    return sorted(
        (hit.session_id, hit.line, hit.role, hit.snippet) for hit in archive.search(query, limit=50)
    )


QUERIES = ["marker1x2", "marker2x3", "marker3x9", "kaven", "done"]


def test_a_format_2_archive_is_moved_with_every_line_content_and_hit_kept(tmp_path: Path) -> None:
    db_path = _copy(tmp_path)
    assert _format(db_path) == "2"
    before = Archive(db_path, read_only=True)  # (as `riffd archive recover` reads one)
    try:
        held, stats = _held(before), before.stats()
        hits = {query: _hits(before, query) for query in QUERIES}
    finally:
        before.close()
    contents = _contents(db_path)
    # what the fixture holds, read as format 2: each file whole, one text for the variant
    assert held == _transcripts()
    assert stats["unique_contents"] == len(contents) > stats["unique_texts"] > 20
    assert all(hits.values()) and len(hits["marker1x2"]) == 1

    archive = Archive(db_path, check=True)
    try:
        assert archive.moved_aside is None
        assert _held(archive) == held
        sizes = {"stored_bytes", "ratio"}
        assert {key: value for key, value in archive.stats().items() if key not in sizes} == {
            key: value for key, value in stats.items() if key not in sizes
        }
        assert {query: _hits(archive, query) for query in QUERIES} == hits
    finally:
        archive.close()
    assert _format(db_path) == FORMAT == "3"
    assert _contents(db_path) == contents
    with closing(sqlite3.connect(db_path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_pieces_archived_before_the_move_are_found_after_it(tmp_path: Path) -> None:
    """A resumed copy of a session archived in format 2 adds no content; a text written again with
    other whitespace is a new content under the old text, one search entry."""
    db_path = _copy(tmp_path)
    original = (FIXTURE / "projects" / PROJECT / f"{SESSION_1}.jsonl").read_bytes()
    complete = original[: original.rindex(b"\n") + 1]  # (its unfinished last line left out)
    copy = tmp_path / "projects" / PROJECT / "00000000-0000-4000-8000-000000000009.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(complete.replace(SESSION_1.encode(), b"00000000-0000-4000-8000-000000000009"))
    before = _contents(db_path)
    archive = Archive(db_path)
    try:
        assert ingest_file(archive, copy) == complete.count(b"\n")
        assert b"".join(archive.iter_file(archive.files_of(str(copy))[0][0])) == copy.read_bytes()
        assert _contents(db_path) == before  # every piece cut out, none stored again
        first = complete.split(b"\n")[0]
        text = first.split(b'"text":"')[1].split(b'"')[0]
        variant = first.replace(text, text.replace(b" ", b"   ", 2))
        copy.write_bytes(
            copy.read_bytes() + variant.replace(b"000000000000", b"000000000777") + b"\n"
        )
        ingest_file(archive, copy)
        added = {key: value for key, value in _contents(db_path).items() if key not in before}
        assert len(added) == 1
        ((new_id, (_pack, _offset, _length, text_id, key)),) = added.items()
        assert text_id is not None and text_id != new_id
        assert before[text_id][4] == key  # the old content's text
        assert b"marker1x0" in text and len(archive.search("marker1x0")) == 1
    finally:
        archive.close()


def _inflated(tmp_path: Path, rows: int) -> Path:
    """The fixture with `rows` contents more (each a copy of a real content's place under a random
    key, as format 2 wrote them), so that its move takes long enough to be interrupted."""
    db_path = _copy(tmp_path)
    rng = random.Random(7)
    # (closed at once, never left to the collector: SQLite would take a later file on the same
    # inode for this one, locked)
    with closing(sqlite3.connect(db_path)) as db, db:
        places = db.execute("SELECT pack, offset, length FROM contents").fetchall()
        start = db.execute("SELECT MAX(id) FROM contents").fetchall()[0][0] + 1
        db.executemany(
            "INSERT INTO contents(id, key, pack, offset, length, text) VALUES (?, ?, ?, ?, ?, NULL)",
            (
                (start + number, rng.getrandbits(63) - (1 << 62), *rng.choice(places))
                for number in range(rows)
            ),
        )
    return db_path


OPEN = """
import sys
from pathlib import Path
from riffd.archive.store import Archive
print("ready", flush=True)
sys.stdin.readline()
Archive(Path(sys.argv[1])).close()
print("done", flush=True)
"""


@pytest.mark.slow  # kills the move of 300,000 contents at several moments
def test_a_kill_during_the_move_leaves_the_archive_as_it_was(tmp_path: Path) -> None:
    db_path = _inflated(tmp_path, 300_000)
    contents = _contents(db_path)
    wal = Path(f"{db_path}-wal")

    def logged() -> int:
        try:
            return wal.stat().st_size
        except FileNotFoundError:  # (none yet, or the last connection's close removed it)
            return 0

    # First a kill at the moment the move's pages reach the log (seen growing), which a sweep of
    # fixed delays can miss on a machine where the move writes them in one short burst at its
    # commit; a kill that still comes too late (this process not scheduled for those milliseconds)
    # finds the archive moved, and the next try starts from a copy of it as it was. Then kills at
    # every 10 ms of the move until one comes too late.
    as_it_was = tmp_path / "as-it-was.db"
    shutil.copy2(db_path, as_it_was)

    def in_log() -> bool:
        """Whether over 1 MiB of the move's pages are in the log (each try starts with none)."""
        return logged() > (1 << 20)

    for _try in range(5):
        assert logged() == 0
        ended = kill_9_after(OPEN, db_path, delay=0, when=in_log)
        # (the log looked at before anything opens the archive: the last connection's close folds it)
        midway = ended == -signal.SIGKILL and in_log()
        moved = _format(db_path) == "3"
        assert _contents(db_path) == contents
        if midway and not moved:
            break
        for leftover in (wal, Path(f"{db_path}-shm")):
            leftover.unlink(missing_ok=True)
        shutil.copy2(as_it_was, db_path)
    else:
        raise AssertionError("no kill of 5 landed while the move's pages were in the log")
    for round_number in range(400):
        ended = kill_9_after(OPEN, db_path, delay=round_number * 0.01)
        # (0: it ended before the kill, the archive moved)
        assert ended in (0, -signal.SIGKILL), f"the open failed by itself at kill {round_number}"
        moved = _format(db_path) == "3"
        assert _contents(db_path) == contents, f"kill {round_number}"
        if moved:
            break
    assert moved
    archive = Archive(db_path, check=True)
    try:
        assert archive.moved_aside is None and _held(archive) == _transcripts()
    finally:
        archive.close()


def test_a_full_disk_during_the_move_leaves_the_archive_as_it_was(tmp_path: Path) -> None:
    """On a disk with room for the archive but not for the move (a tmpfs a little larger than it),
    the archive is not opened and is as it was (format 2), the command says the disk is full and to
    free space; once there is room, the next open moves it."""
    db_path = _inflated(tmp_path, 100_000)
    contents = _contents(db_path)
    size_kib = db_path.stat().st_size * 11 // 10 // 1024
    with small_tmpfs(tmp_path / "state", size_kib) as state:
        shutil.copy2(db_path, state / "archive.db")
        config, env = _config(tmp_path, state)
        result = run_riffd("archive", "stats", config=config, env=env)
        assert result.returncode == 2, result.stderr
        assert "full" in result.stderr and "Free some space" in result.stderr
        assert "Traceback" not in result.stderr
        assert _format(state / "archive.db") == "2" and _contents(state / "archive.db") == contents
        grow_tmpfs(state, size_kib * 4)
        result = run_riffd("archive", "stats", config=config, env=env)
        assert result.returncode == 0, result.stderr
        assert _format(state / "archive.db") == "3" and _contents(state / "archive.db") == contents
        archive = Archive(state / "archive.db", check=True)
        try:
            assert _held(archive) == _transcripts()
        finally:
            archive.close()


def test_an_archive_of_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    db_path = _copy(tmp_path)
    archive = Archive(db_path)
    archive.close()
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("UPDATE meta SET value = '4' WHERE key = 'format'")
    db.execute("PRAGMA journal_mode = DELETE")  # (all of it in the file)
    db.close()
    before = db_path.read_bytes()
    with pytest.raises(ArchiveError, match=r"newer riffd.*format 4.*up to 3"):
        Archive(db_path)
    config, env = _config(tmp_path, db_path.parent)
    result = run_riffd("archive", "stats", config=config, env=env)
    assert result.returncode == 2
    assert "newer riffd" in result.stderr and "left as it is" in result.stderr
    assert db_path.read_bytes() == before


@contextmanager
def _daemon_lock(state: Path) -> Iterator[int]:
    """A real process holding the state folder's daemon lock, as a running daemon does (one of an
    earlier riffd, say), while the block runs."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from riffd.daemon.lock import StateLock; "
            "StateLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); time.sleep(60)",
            str(state),
        ],
        stdout=subprocess.PIPE,
        env=riffd_env(),
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder.pid
    finally:
        holder.kill()
        holder.communicate()


def test_no_command_moves_the_archive_while_a_daemon_has_it(tmp_path: Path) -> None:
    """A daemon of riffd 0.2 left running after an upgrade writes format 2: while a daemon holds the
    state folder, `riffd archive` commands and `fix` leave the archive in format 2 and say to
    restart the daemon; `fix` keeps the torn tail it would have archived first. Once no daemon has
    it, the next command moves it."""
    state = _state_of_format_2(tmp_path)
    config, env = _config(tmp_path, state, f'roots = ["{tmp_path / "projects"}"]\n')
    torn = tmp_path / "projects" / PROJECT / f"{SESSION_1}.jsonl"
    torn.parent.mkdir(parents=True)
    shutil.copy2(FIXTURE / "projects" / PROJECT / torn.name, torn)
    written = torn.read_bytes()
    assert not written.endswith(b"\n")  # its last line unfinished: a torn tail
    with _daemon_lock(state):
        for command in (["archive", "stats"], ["archive", "search", "marker1x2"]):
            result = run_riffd(*command, config=config, env=env)
            assert result.returncode == 2, result.stderr
            assert "is in format 2" in result.stderr and "Restart the daemon" in result.stderr
            assert "riffd service install" in result.stderr
        result = run_riffd("fix", "--quiet-period", "0", str(torn), config=config, env=env)
        assert "Restart the daemon" in result.stdout + result.stderr
        # (its orphan tool result removed, which needs no archive) the torn tail kept
        tail = written[written.rindex(b"\n") :]
        assert torn.read_bytes().endswith(tail) and len(tail) > 100
        assert _format(state / "archive.db") == "2"
    result = run_riffd("archive", "stats", config=config, env=env)
    assert result.returncode == 0, result.stderr
    assert _format(state / "archive.db") == "3"


def test_two_processes_opening_it_at_once_move_it_once(tmp_path: Path) -> None:
    """Two riffd processes meeting a format 2 archive at the same moment (the daemon starting, a
    command): one moves it, the other finds it moved once it has the write lock."""
    db_path = _inflated(tmp_path, 100_000)
    contents = _contents(db_path)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN, str(db_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=riffd_env(),
            text=True,
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    ended = [(child, *child.communicate(timeout=60)) for child in children]  # (every pipe closed)
    for child, out, err in ended:
        assert child.returncode == 0 and out.strip() == "done", err
    assert _format(db_path) == "3" and _contents(db_path) == contents


def test_a_reader_refuses_an_archive_it_cannot_read(tmp_path: Path) -> None:
    """Opened read-only (`riffd archive recover`, `riffd sessions`, the MCP server), an archive of a
    newer format or of format 1 is refused as it is when opened to write, and left as it is."""
    db_path = _copy(tmp_path)
    for made, refused in (
        (["UPDATE meta SET value = '4' WHERE key = 'format'"], "newer riffd"),
        (
            [
                "UPDATE meta SET value = '2' WHERE key = 'format'",
                "CREATE TABLE lines (file_id INTEGER)",  # as format 1 had
            ],
            "archive format 1",
        ),
    ):
        db = sqlite3.connect(db_path, isolation_level=None)
        for statement in made:
            db.execute(statement)
        db.close()
        before = db_path.read_bytes()
        with pytest.raises(ArchiveError, match=refused):
            Archive(db_path, read_only=True)
        assert db_path.read_bytes() == before


def test_a_damaged_archive_of_format_2_is_moved_aside_as_it_is(tmp_path: Path) -> None:
    """The move rewrites the contents: a damaged archive is judged before it, and moved aside
    untouched (for `riffd archive recover`), never rewritten first, even where the damage is in a
    table the move does not read."""
    db_path = _inflated(tmp_path, 20_000)
    db = sqlite3.connect(db_path)
    page = db.execute(
        # (a table the move never reads: only a check before it finds the damage)
        "SELECT pageno FROM dbstat WHERE name = 'seen' AND pagetype = 'leaf' LIMIT 1"
    ).fetchone()[0]
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(db_path, "r+b") as handle:
        handle.seek((page - 1) * page_size)
        handle.write(b"\x0d\xff\xff\xff" + os.urandom(page_size - 4))
    damaged = db_path.read_bytes()
    archive = Archive(db_path, heal=True)
    try:
        assert archive.moved_aside is not None and archive.damage is not None
        moved = archive.moved_aside.read_bytes()
        # and `riffd archive recover` copies every line of it into the new archive
        recover(archive.moved_aside, archive)
        assert _held(archive) == _transcripts()
        # every page as it was (the first's header says WAL mode now: riffd's open sets it first)
        assert (
            moved[page_size:] == damaged[page_size:]
            and moved[100:page_size] == damaged[100:page_size]
        )
    finally:
        archive.close()


def test_a_session_archived_in_format_2_is_restored_whole_after_the_move(tmp_path: Path) -> None:
    """`riffd archive restore` of a session riffd 0.2 archived, the archive moved by that very
    command: every file of it byte for byte (its unfinished last line and malformed line too)."""
    db_path = _copy(tmp_path)
    config, env = _config(tmp_path, db_path.parent)
    target = tmp_path / "restored"
    target.mkdir()
    result = run_riffd("archive", "restore", SESSION_1, "--to", str(target), config=config, env=env)
    assert result.returncode == 0, result.stderr
    assert _format(db_path) == "3"
    (restored,) = target.rglob("*.jsonl")
    assert restored.read_bytes() == _transcripts()[f"{SESSION_1}.jsonl"]


def test_recover_refuses_an_archive_of_a_newer_format_in_one_line(tmp_path: Path) -> None:
    """`riffd archive recover FILE` of an archive a newer riffd made: exit 2, one line naming FILE
    (not the copy recover reads), no traceback, nothing recovered into the archive."""
    source = _copy(tmp_path)
    db = sqlite3.connect(source, isolation_level=None)
    db.execute("UPDATE meta SET value = '4' WHERE key = 'format'")
    db.close()
    config, env = _config(tmp_path, tmp_path / "state")
    result = run_riffd("archive", "recover", str(source), config=config, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"{source} was made by a newer riffd" in result.stderr


def test_a_daemon_of_this_riffd_that_could_not_move_it_yet_is_not_called_older(
    tmp_path: Path,
) -> None:
    """A daemon of this riffd whose own move failed at its start (the archive held by another
    process, a full disk) says in its figures which format it writes: commands then say it moves
    the archive once it can, and do not advise a restart that would change nothing."""
    state = _state_of_format_2(tmp_path)
    config, env = _config(tmp_path, state)
    with _daemon_lock(state) as pid:
        for said, advice in (
            ({"pid": pid, "archive_format": FORMAT}, "runs this riffd"),
            ({"pid": pid, "version": "0.2.0"}, "Restart the daemon"),  # as riffd 0.2 says it
        ):
            store = StateStore(state / STATE_NAME)
            try:
                store.set_meta("daemon", said)
            finally:
                store.close()
            result = run_riffd("archive", "stats", config=config, env=env)
            assert result.returncode == 2 and advice in result.stderr, result.stderr
    assert _format(state / "archive.db") == "2"
