"""The archive: lossless restore, exactly once under kill -9, incremental appends, generations,
dedup, search, export and stats. Real files in tmp_path, real `riffd` subprocesses, a real SQLite
archive."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import orjson
import pytest

from conftest import (
    CORPUS_DIR,
    REPO_DIR,
    corpus_transcripts,
    live_processes_mentioning,
    requires_corpus,
    transcript_line,
)
from helpers.damage import generated_session
from helpers.run import run_riffd, start_riffd
from riffd.archive.contents import normalise
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive

BENCH_DIR = REPO_DIR / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import archive_bench  # noqa: E402
import scan_bench  # noqa: E402

# --- helpers
# ----------------------------------------------------------------------------------------------


def _config(tmp_path: Path) -> Path:
    """Write a config whose state folder is in tmp_path; return its path."""
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    return config


def _environment(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}  # never the user's own projects


def _riffd(
    tmp_path: Path, *args: str, check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python3 -m riffd --config <tmp config> ARGS` as a real subprocess; return it."""
    result = run_riffd(*args, config=_config(tmp_path), env=_environment(tmp_path), cwd=cwd)
    if check:
        assert result.returncode == 0, f"riffd {args} exited {result.returncode}:\n{result.stderr}"
    return result


def _archive(tmp_path: Path) -> Archive:
    return Archive(tmp_path / "state" / "archive.db")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _line_count(data: bytes) -> int:
    """Lines of a file, a last one without newline included."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _copy_corpus(target: Path) -> dict[Path, str]:
    """Copy every real transcript (subagents included) under `target`; return copy -> sha256."""
    copies = {}
    for source in corpus_transcripts():
        copy = target / source.relative_to(CORPUS_DIR)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
        copies[copy] = _sha(source)
    return copies


def _content_figures(db_path: Path) -> tuple[int, int, int]:
    """(contents rows, their total bytes, indexed texts) of an archive database."""
    with sqlite3.connect(db_path) as db:
        contents, content_bytes, texts = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(length), 0), COUNT(*) FILTER (WHERE text IN (0, id)) "
            "FROM contents"
        ).fetchone()
    return int(contents), int(content_bytes), int(texts)


def _pack_bytes(db_path: Path) -> int:
    """The bytes of stored lines in all packs (uncompressed)."""
    with sqlite3.connect(db_path) as db:
        return int(db.execute("SELECT COALESCE(SUM(raw_size), 0) FROM packs").fetchone()[0])


def _runs(db: sqlite3.Connection, file_id: int) -> list[tuple[int, int, list[int]]]:
    """(generation, first line, stored lengths) of each run of a file, in order."""
    return [
        (generation, first, orjson.loads(zlib.decompress(header))["n"])
        for generation, first, header in db.execute(
            "SELECT generation, first, header FROM runs WHERE file_id = ? ORDER BY generation, first",
            (file_id,),
        )
    ]


def _archive_file_count(db_path: Path) -> int:
    with sqlite3.connect(db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM files").fetchone()[0])


def _assert_each_line_once(db_path: Path, originals: dict[str, bytes]) -> None:
    """Every archived file holds its lines 0..n-1 exactly once, in generation 0, n being the file's
    line count."""
    with sqlite3.connect(db_path) as db:
        files = {
            path: (file_id, generation, lines)
            for file_id, path, generation, lines in db.execute(
                "SELECT id, path, generation, lines FROM files"
            )
        }
        assert set(files) == set(originals)
        for path, data in originals.items():
            file_id, generation, lines = files[path]
            numbers = [
                first + offset
                for run_generation, first, lengths in _runs(db, file_id)
                for offset in range(len(lengths))
                if run_generation == 0
            ]
            assert generation == 0, f"{path}: a crash must not look like a rewrite"
            assert numbers == list(range(_line_count(data))), f"{path}: gaps or repeats"
            assert lines == len(numbers)


# --- zero loss
# --------------------------------------------------------------------------------------------


@requires_corpus
@pytest.mark.slow
def test_real_corpus_restores_byte_for_byte_after_the_originals_are_deleted(tmp_path: Path) -> None:
    copies = _copy_corpus(tmp_path / "projects")
    assert any(not copy.read_bytes().endswith(b"\n") for copy in copies), (
        "the corpus has a file without newline"
    )
    _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    _assert_each_line_once(
        tmp_path / "state" / "archive.db", {str(copy): copy.read_bytes() for copy in copies}
    )
    for copy in copies:
        copy.unlink()
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        archived_sessions = {row[0] for row in db.execute("SELECT DISTINCT session_id FROM files")}
    assert None not in archived_sessions

    # By session: every session's files into its own folder.
    for session in archived_sessions:
        folder = tmp_path / "by-session" / session
        folder.mkdir(parents=True)
        _riffd(tmp_path, "archive", "restore", session, "--to", str(folder))
    restored_by_session = {
        path.name: _sha(path) for path in (tmp_path / "by-session").rglob("*.jsonl")
    }
    assert len(restored_by_session) == len(copies)
    assert {path.stat().st_mode & 0o777 for path in (tmp_path / "by-session").rglob("*.jsonl")} == {
        0o600
    }
    assert restored_by_session == {copy.name: digest for copy, digest in copies.items()}

    # By path, one file at a time, to the original place.
    for copy, digest in copies.items():
        _riffd(tmp_path, "archive", "restore", str(copy))
        assert _sha(copy) == digest, copy


def _build_generated_corpus(root: Path, size_mb: float, seed: int) -> dict[str, bytes]:
    sources = [scan_bench.load_source(CORPUS_DIR, relative) for relative in scan_bench.SOURCES]
    scan_bench.build_corpus(sources, root, size_mb, seed)
    return {str(path): path.read_bytes() for path in sorted((root / "projects").rglob("*.jsonl"))}


@requires_corpus
@pytest.mark.slow
def test_kill_9_during_ingest_then_restart_archives_every_line_exactly_once(tmp_path: Path) -> None:
    originals = _build_generated_corpus(tmp_path, 80, seed=7)
    config = _config(tmp_path)
    db_path = tmp_path / "state" / "archive.db"
    rng = random.Random(11)
    archived_after_kill: list[int] = []
    for _round in range(12):
        process = start_riffd(
            "archive",
            "ingest",
            str(tmp_path / "projects"),
            config=config,
            env=_environment(tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # once the archive exists (a loaded machine may take long to start riffd), mid-ingest,
            # or mid-compaction once all is archived
            deadline = time.monotonic() + 30
            while not db_path.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            process.wait(timeout=rng.uniform(0.1, 0.3))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            with sqlite3.connect(db_path) as db:  # a reader recovers the WAL the killed writer left
                archived_after_kill.append(
                    int(db.execute("SELECT COALESCE(SUM(lines), 0) FROM files").fetchone()[0])
                )
        else:
            assert process.returncode == 0
            break  # finished before its kill: the rest of the work is done
    # Several kills landed in the middle of the ingest (later ones in its compaction): each one
    # after more lines were committed than before.
    assert len(archived_after_kill) >= 3
    assert (
        len(
            [
                count
                for count in archived_after_kill
                if 0 < count < sum(map(_line_count, originals.values()))
            ]
        )
        >= 3
    )
    assert archived_after_kill == sorted(archived_after_kill)
    # The reader process each ingest forked exits with it: it never waits forever on a pipe the dead
    # one held.
    assert live_processes_mentioning(str(tmp_path)) == []
    finished = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    assert "archived" in finished.stderr
    again = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    assert "archived 0 new line(s)" in again.stderr

    _assert_each_line_once(db_path, originals)
    shutil.rmtree(tmp_path / "projects")
    archive = _archive(tmp_path)
    assert archive.files_of("%") == []  # user text is never a LIKE pattern
    with sqlite3.connect(db_path) as db:
        ids = dict(db.execute("SELECT path, id FROM files"))
    for path, data in originals.items():
        assert (
            hashlib.sha256(b"".join(archive.iter_file(ids[path]))).digest()
            == hashlib.sha256(data).digest()
        ), path
    archive.close()


# --- incremental, generations
# -----------------------------------------------------------------------------


def test_appends_are_archived_incrementally(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(transcript_line(number) for number in range(1, 11)))
    archive = _archive(tmp_path)
    assert archive.cursor(str(path)) == (0, 0)
    assert ingest_file(archive, path) == 10
    assert archive.cursor(str(path)) == (0, path.stat().st_size)
    for round_number in range(3):  # each append reads only what is new
        with open(path, "ab") as out:
            out.write(
                transcript_line(11 + 2 * round_number) + transcript_line(12 + 2 * round_number)
            )
        assert ingest_file(archive, path) == 2
        assert archive.cursor(str(path)) == (0, path.stat().st_size)
        assert archive.tip(str(path)).line == transcript_line(12 + 2 * round_number)
    assert ingest_file(archive, path) == 0
    archive.close()
    _assert_each_line_once(archive.path, {str(path): path.read_bytes()})
    archive = _archive(tmp_path)
    assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == path.read_bytes()
    archive.close()


def test_two_writers_on_one_archive_never_overwrite_each_other(tmp_path: Path) -> None:
    """The daemon and `riffd archive ingest` may feed one archive at once: each one's lines, content
    shared between them and the open pack both grow must survive the other's commits and a settle in
    between."""
    first, second = _archive(tmp_path), _archive(tmp_path)
    paths = [tmp_path / "one.jsonl", tmp_path / "two.jsonl"]
    written: dict[Path, bytes] = {path: b"" for path in paths}
    shared = "the same tool output in both sessions " * 8
    for round_number in range(6):
        for writer, path in ((first, paths[0]), (second, paths[1])):
            line = transcript_line(round_number + 1, pad=round_number)
            if round_number % 2:  # a piece the other writer may have stored first
                line = line.replace(b'"content":"line', f'"content":"{shared} line'.encode())
            writer.add_lines(str(path), len(written[path]), [line[:-1]])
            written[path] += line
        if round_number == 3:
            second.settle()  # the open pack compressed by one while the other holds it in memory
    for reader in (first, second):
        for path in paths:
            assert b"".join(reader.iter_file(reader.files_of(str(path))[0][0])) == written[path]
    first.close()
    second.close()
    _assert_each_line_once(
        tmp_path / "state" / "archive.db", {str(path): data for path, data in written.items()}
    )


def test_two_writers_appending_to_one_file_keep_every_line(tmp_path: Path) -> None:
    """The daemon and `riffd archive ingest` may append to the same file's archive in turns: each
    connection keeps the file's last run decoded between its writes, which must not outlive the
    other's commit (its lines would be dropped from the run when this one saves it)."""
    first, second = _archive(tmp_path), _archive(tmp_path)
    path = tmp_path / "one.jsonl"
    written = b""
    for number in range(1, 13):
        writer = first if number % 3 else second  # two by one, one by the other
        line = transcript_line(number, pad=50 * number)
        assert writer.add_lines(str(path), len(written), [line[:-1]]) == 1
        written += line
    for reader in (first, second):
        assert b"".join(reader.iter_file(reader.files_of(str(path))[0][0])) == written
    first.close()
    second.close()
    _assert_each_line_once(tmp_path / "state" / "archive.db", {str(path): written})


def test_the_daemon_and_an_ingest_back_filling_one_file_in_turns_keep_every_line(
    tmp_path: Path,
) -> None:
    """As the daemon's catch-up and `riffd archive ingest` do (ingest_file: where to start, which
    reads the archive, then the lines): the other's lines, committed between two of this one's, are
    never dropped from the run."""
    path = tmp_path / "session.jsonl"
    daemon, command = _archive(tmp_path), _archive(tmp_path)
    number = 0
    for writer, count in ((daemon, 10), (command, 10), (daemon, 6), (command, 3), (daemon, 2)):
        with open(path, "ab") as out:
            out.write(
                b"".join(transcript_line(number + offset + 1, pad=30) for offset in range(count))
            )
        number += count
        assert ingest_file(writer, path) == count
    for reader in (daemon, command):
        assert b"".join(reader.iter_file(reader.files_of(str(path))[0][0])) == path.read_bytes()
    daemon.close()
    command.close()
    _assert_each_line_once(tmp_path / "state" / "archive.db", {str(path): path.read_bytes()})


def test_a_prompt_with_a_lone_surrogate_is_archived_and_titles_its_session(tmp_path: Path) -> None:
    """JSON may escape a lone surrogate (a prompt cut in the middle of an emoji): the line is
    archived as written, and the session's title and folder, which SQLite must hold as UTF-8, show
    U+FFFD in its place."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(
        b'{"type":"user","cwd":"/home/u/caf\\udce9","message":{"role":"user","content":"fix this '
        b'\\ud83d"}}\n' + transcript_line(2)
    )
    archive = _archive(tmp_path)
    try:
        assert ingest_file(archive, path) == 2
        assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == path.read_bytes()
        assert archive.connection.db.execute("SELECT title, project FROM files").fetchone() == (
            "fix this \ufffd",
            "/home/u/caf\ufffd",
        )
    finally:
        archive.close()


def test_lines_added_after_a_settle_survive_a_restart(tmp_path: Path) -> None:
    """The daemon settles its open pack when quiet, then more lines come: after a restart (a new
    connection reading the open pack from the database) every line must still restore byte for
    byte."""
    path = tmp_path / "session.jsonl"
    written = b""
    archive = _archive(tmp_path)
    for number in range(1, 7):
        line = transcript_line(number, pad=40 * number)
        archive.add_lines(str(path), len(written), [line[:-1]])
        written += line
        if number in (2, 4):
            assert archive.settle(optimize=False)
    archive.close()
    archive = _archive(tmp_path)
    assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == written
    # and the reopened pack grows on
    archive.add_lines(str(path), len(written), [transcript_line(7)[:-1]])
    written += transcript_line(7)
    archive.close()
    archive = _archive(tmp_path)
    assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == written
    archive.close()


_REFUSE = {
    # A statement of the transaction fails: SQLite undoes that statement, the transaction stays
    # open.
    "statement": "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON main.files BEGIN SELECT RAISE(ABORT, 'injected'); END",
    # The COMMIT itself fails (a deferred foreign key): SQLite leaves the whole transaction open.
    "commit": "PRAGMA foreign_keys = ON; CREATE TEMP TABLE parent(id INTEGER PRIMARY KEY); "
    "CREATE TEMP TABLE child(id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED); "
    "CREATE TEMP TRIGGER refuse AFTER UPDATE ON main.files BEGIN INSERT INTO child VALUES (1); END",
}


@pytest.mark.parametrize("where", sorted(_REFUSE))
def test_a_write_that_fails_stores_none_of_its_lines_and_the_next_ones_restore(
    tmp_path: Path, where: str
) -> None:
    """A write that fails part-way, or at its COMMIT, is rolled back whole: none of its bytes in the
    open pack (which the transaction grew in memory), the connection usable at once, and the lines
    archived next, into the same open pack, restore byte for byte, also from a new connection."""
    path = tmp_path / "session.jsonl"
    archive = _archive(tmp_path)
    written = b""
    for number in range(1, 4):
        line = transcript_line(number, pad=300)
        archive.add_lines(str(path), len(written), [line[:-1]])
        written += line
    archive.connection.db.executescript(_REFUSE[where])
    with pytest.raises(sqlite3.IntegrityError):
        archive.add_lines(str(path), len(written), [transcript_line(4, pad=5000)[:-1]])
    assert not archive.connection.db.in_transaction
    archive.connection.db.executescript("DROP TRIGGER refuse; PRAGMA foreign_keys = OFF;")
    for number in range(4, 7):
        line = transcript_line(number, pad=300)
        archive.add_lines(str(path), len(written), [line[:-1]])
        written += line
    assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == written
    archive.close()
    # no stored byte of the failed line
    assert _pack_bytes(archive.path) == len(written) - written.count(b"\n")
    _assert_each_line_once(archive.path, {str(path): written})
    archive = _archive(tmp_path)
    assert b"".join(archive.iter_file(archive.files_of(str(path))[0][0])) == written
    archive.close()


def test_an_archive_of_the_earlier_format_is_refused_with_what_to_do(tmp_path: Path) -> None:
    db_path = tmp_path / "state" / "archive.db"
    db_path.parent.mkdir()
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE lines (file_id INTEGER, number INTEGER)")
    before = db_path.read_bytes()
    result = _riffd(tmp_path, "archive", "stats", check=False)
    assert result.returncode == 2
    assert "archive format 1" in result.stderr and "move it away" in result.stderr
    assert db_path.read_bytes() == before  # not touched


def test_a_rewrite_starts_a_new_generation_and_never_erases_archived_lines(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lines = generated_session(segments=2, turns=2)
    original = b"".join(lines)
    path.write_bytes(original)
    archive = _archive(tmp_path)
    assert ingest_file(archive, path) == len(lines)
    file_id = archive.files_of(str(path))[0][0]

    # A repair-like rewrite: one line removed from the middle, a synthetic line appended, file
    # replaced.
    repaired = b"".join(lines[:3] + lines[4:]) + transcript_line(99)
    temporary = tmp_path / "session.jsonl.tmp"
    temporary.write_bytes(repaired)
    os.replace(temporary, path)
    assert ingest_file(archive, path) == len(lines)  # every line of the new file, as generation 1
    assert archive.cursor(str(path)) == (1, len(repaired))
    assert b"".join(archive.iter_file(file_id)) == repaired
    assert b"".join(archive.iter_file(file_id, generation=0)) == original

    # A second rewrite that shrinks the file: generation 2; both earlier ones are still whole.
    path.write_bytes(b"".join(lines[:2]))
    assert ingest_file(archive, path) == 2
    assert archive.cursor(str(path)) == (2, len(b"".join(lines[:2])))
    assert b"".join(archive.iter_file(file_id, generation=0)) == original
    assert b"".join(archive.iter_file(file_id, generation=1)) == repaired
    assert b"".join(archive.iter_file(file_id)) == b"".join(lines[:2])
    archive.close()


@pytest.mark.parametrize(
    "completion",
    [
        "the writer finishes the line",
        "the next write starts with a newline",
        "a caller feeds the completed line from its start",
    ],
)
def test_a_torn_last_line_is_restored_as_it_was_then_replaced_by_the_completed_line(
    tmp_path: Path, completion: str
) -> None:
    path = tmp_path / "session.jsonl"
    whole = b"".join(transcript_line(number) for number in range(1, 4))
    path.write_bytes(whole[:-30])  # read while Claude Code was writing its third line
    archive = _archive(tmp_path)
    assert ingest_file(archive, path) == 3
    file_id = archive.files_of(str(path))[0][0]
    assert b"".join(archive.iter_file(file_id)) == whole[:-30]  # no newline added

    if completion == "the next write starts with a newline":
        whole = whole[:-30] + b"\n" + transcript_line(4)
    path.write_bytes(whole)
    # as the daemon's worker does
    if completion == "a caller feeds the completed line from its start":
        archive.add_lines(
            str(path), len(whole) - len(transcript_line(3)), [transcript_line(3)[:-1]]
        )
    else:
        ingest_file(archive, path)
    assert b"".join(archive.iter_file(file_id)) == whole
    assert archive.cursor(str(path)) == (0, len(whole))
    archive.close()
    _assert_each_line_once(archive.path, {str(path): whole})
    with sqlite3.connect(archive.path) as db:
        headers = [
            orjson.loads(zlib.decompress(header))
            for (header,) in db.execute("SELECT header FROM runs")
        ]
        assert not any(header["u"] for header in headers), "no line is left marked as torn"
        assert db.execute("SELECT raw_bytes FROM files").fetchone()[0] == len(whole)
    archive = _archive(tmp_path)
    # The completed line is a message again (the fragment a newline cut off stays a malformed line
    # of its own).
    expected = {1, 2, 4} if completion == "the next write starts with a newline" else {1, 2, 3}
    assert {hit.line for hit in archive.search("line")} == expected
    archive.close()


# --- dedup
# ------------------------------------------------------------------------------------------------


def test_a_path_given_relative_is_archived_once_under_its_absolute_path(tmp_path: Path) -> None:
    """`riffd archive ingest .` (or `fix` of a file named from its folder) and the daemon archive
    one file once, not under two names; `restore` finds it by the relative path too."""
    session = (
        tmp_path / "projects" / "-home-user-project" / "5e55104e-0000-4000-8000-0000000000aa.jsonl"
    )
    session.parent.mkdir(parents=True)
    session.write_bytes(b"".join(transcript_line(number, pad=40) for number in range(1, 41)))

    def riffd_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
        result = _riffd(tmp_path, *args, check=False, cwd=folder)
        assert result.returncode == 0, result.stderr
        return result

    assert (
        "archived 40 new line(s)"
        in riffd_in(tmp_path / "projects", "archive", "ingest", ".").stderr
    )
    assert (
        "archived 0 new line(s)"
        in riffd_in(tmp_path, "archive", "ingest", str(tmp_path / "projects")).stderr
    )
    assert (
        "archived 0 new line(s)"
        in riffd_in(session.parent, "archive", "ingest", session.name).stderr
    )
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        assert [row[0] for row in db.execute("SELECT path FROM files")] == [str(session)]
    riffd_in(
        tmp_path,
        "archive",
        "restore",
        str(session.relative_to(tmp_path)),
        "--to",
        str(tmp_path / "out.jsonl"),
    )
    assert (tmp_path / "out.jsonl").read_bytes() == session.read_bytes()
    # a bare file name, from its folder
    exported = riffd_in(session.parent, "archive", "export", session.name)
    assert orjson.loads(exported.stdout), exported.stdout


@requires_corpus
@pytest.mark.slow
def test_ingesting_the_same_sessions_twice_adds_no_content(tmp_path: Path) -> None:
    copies = _copy_corpus(tmp_path / "projects")
    _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    db_path = tmp_path / "state" / "archive.db"
    first = _content_figures(db_path)
    pack_bytes = _pack_bytes(db_path)
    assert first[0] > 0 and first[2] > 0

    # The same paths again: nothing at all is added.
    again = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    assert "archived 0 new line(s)" in again.stderr
    assert _content_figures(db_path) == first
    assert _pack_bytes(db_path) == pack_bytes

    # The same sessions under other paths (a second machine's copy): envelopes only, no content.
    shutil.copytree(tmp_path / "projects", tmp_path / "elsewhere")
    _riffd(tmp_path, "archive", "ingest", str(tmp_path / "elsewhere"))
    assert _content_figures(db_path) == first
    with sqlite3.connect(db_path) as db:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT id FROM files WHERE path LIKE ?", (f"{tmp_path / 'elsewhere'}%",)
            )
        ]
        stored = sum(
            sum(lengths) for file_id in ids for _generation, _first, lengths in _runs(db, file_id)
        )
    added = _pack_bytes(db_path) - pack_bytes
    assert added == stored  # the copies' lines, as stored: every piece of content cut out
    assert added < pack_bytes - first[1] / 2, (
        "the copies cost more than half of what the originals did"
    )
    assert len(copies) * 2 == _archive_file_count(db_path)
    archive = _archive(tmp_path)
    for copy in copies:
        twin = tmp_path / "elsewhere" / copy.relative_to(tmp_path / "projects")
        ((file_id, _path, _session),) = archive.files_of(str(twin))
        assert b"".join(archive.iter_file(file_id)) == copy.read_bytes()
    archive.close()


@requires_corpus
def test_resumed_copies_add_only_envelopes(tmp_path: Path) -> None:
    sessions = [path for path in corpus_transcripts() if path.parent.name != "subagents"]
    for source in sessions:
        (tmp_path / "projects" / source.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp_path / "projects" / source.parent.name / source.name)
    _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    db_path = tmp_path / "state" / "archive.db"
    before = _content_figures(db_path)

    rng = random.Random(3)
    resumed: dict[Path, bytes] = {}
    for source in sessions:
        data, session_id = archive_bench.resumed_copy(source.read_bytes(), rng)
        target = tmp_path / "resumed" / source.parent.name / f"{session_id}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        resumed[target] = data
        # Really a resumed copy: other ids in every line that had them, the same content and result
        # values.
        for old, new in zip(source.read_bytes().splitlines(), data.splitlines(), strict=True):
            old_line, new_line = orjson.loads(old), orjson.loads(new)
            if isinstance(old_line.get("uuid"), str):
                assert new_line["uuid"] != old_line["uuid"]
            if isinstance(old_line.get("sessionId"), str):
                assert new_line["sessionId"] == session_id
            assert new_line.get("message") == old_line.get("message")
            assert new_line.get("toolUseResult") == old_line.get("toolUseResult")
    result = _riffd(tmp_path, "archive", "ingest", str(tmp_path / "resumed"))
    assert (
        f"archived {sum(_line_count(data) for data in resumed.values())} new line(s)"
        in result.stderr
    )
    assert _content_figures(db_path) == before
    archive = _archive(tmp_path)
    for target, data in resumed.items():
        ((file_id, _path, _session),) = archive.files_of(str(target))
        assert b"".join(archive.iter_file(file_id)) == data
    archive.close()


# --- search
# -----------------------------------------------------------------------------------------------


def _message_line(session: str, cwd: str, role: str, text: str, stamp: str, number: int) -> bytes:
    record = {
        "type": role,
        "uuid": f"{session}-{number}",
        "parentUuid": None,
        "sessionId": session,
        "cwd": cwd,
        "timestamp": stamp,
        "message": {"role": role, "content": text},
    }
    return orjson.dumps(record) + b"\n"


@pytest.fixture
def search_archive(tmp_path: Path) -> Path:
    """Two projects, three sessions, known words, roles and times; ingested through the CLI."""
    projects = tmp_path / "projects"
    (projects / "-home-ana-alpha").mkdir(parents=True)
    (projects / "-home-ana-beta").mkdir(parents=True)
    (projects / "-home-ana-alpha" / "s-alpha-1.jsonl").write_bytes(
        _message_line(
            "s-alpha-1",
            "/home/ana/alpha",
            "user",
            "please refactor the quokka parser",
            "2025-01-05T10:00:00Z",
            1,
        )
        + _message_line(
            "s-alpha-1",
            "/home/ana/alpha",
            "assistant",
            "The quokka parser is refactored.",
            "2025-01-05T10:01:00Z",
            2,
        )
        + _message_line(
            "s-alpha-1",
            "/home/ana/alpha",
            "user",
            "hello   brave\tworld",
            "2025-01-05T10:02:00Z",
            3,
        )
    )
    (projects / "-home-ana-alpha" / "s-alpha-2.jsonl").write_bytes(
        _message_line(
            "s-alpha-2",
            "/home/ana/alpha",
            "user",
            'quokka tests fail with "quotes" -x NEAR*',
            "2025-03-01T09:00:00Z",
            1,
        )
        + _message_line(
            "s-alpha-2",
            "/home/ana/alpha",
            "user",
            "  hello brave world ",
            "2025-03-01T09:01:00Z",
            2,
        )
    )
    (projects / "-home-ana-beta" / "s-beta.jsonl").write_bytes(
        _message_line(
            "s-beta",
            "/home/ana/beta",
            "assistant",
            "quokka in the beta project",
            "2025-06-01T08:00:00Z",
            1,
        )
    )
    _riffd(tmp_path, "archive", "ingest", str(projects))
    return tmp_path


def _cli_search(tmp_path: Path, *args: str) -> list[dict[str, object]]:
    result = _riffd(tmp_path, "archive", "search", *args, "--json", check=False)
    assert result.returncode in (0, 1), result.stderr
    hits = orjson.loads(result.stdout) if result.stdout.strip() else []
    assert (result.returncode == 0) == bool(hits)
    return hits


def test_search_filters_through_the_cli(search_archive: Path) -> None:
    tmp_path = search_archive
    assert {hit["session_id"] for hit in _cli_search(tmp_path, "quokka")} == {
        "s-alpha-1",
        "s-alpha-2",
        "s-beta",
    }
    assert {
        hit["session_id"] for hit in _cli_search(tmp_path, "quokka", "--project", "/home/ana/beta")
    } == {"s-beta"}
    assert {hit["line"] for hit in _cli_search(tmp_path, "quokka", "--session", "s-alpha-1")} == {
        1,
        2,
    }
    assistant = _cli_search(tmp_path, "quokka", "--role", "assistant")
    assert {(hit["session_id"], hit["role"]) for hit in assistant} == {
        ("s-alpha-1", "assistant"),
        ("s-beta", "assistant"),
    }
    assert {
        hit["session_id"] for hit in _cli_search(tmp_path, "quokka", "--since", "2025-02-01")
    } == {"s-alpha-2", "s-beta"}
    newest_first = _cli_search(tmp_path, "quokka")
    assert [hit["timestamp"] for hit in newest_first] == sorted(
        (hit["timestamp"] for hit in newest_first), reverse=True
    )
    assert "quokka parser" in str(
        _cli_search(tmp_path, "refactor", "--session", "s-alpha-1")[0]["snippet"]
    )
    assert _cli_search(tmp_path, "platypus") == []


def test_search_in_process_filters_whitespace_variants_and_fts_syntax(search_archive: Path) -> None:
    archive = _archive(search_archive)
    assert {hit.session_id for hit in archive.search("quokka parser")} == {"s-alpha-1"}
    assert {hit.session_id for hit in archive.search("quokka", project="/home/ana/alpha")} == {
        "s-alpha-1",
        "s-alpha-2",
    }
    assert {hit.line for hit in archive.search("quokka", session="s-alpha-2")} == {1}
    assert {hit.role for hit in archive.search("quokka", role="user")} == {"user"}
    assert (
        len(archive.search("quokka", since=int(time.mktime((2025, 5, 1, 0, 0, 0, 0, 0, -1))))) == 1
    )
    assert len(archive.search("quokka", limit=2)) == 2

    # Two byte-different texts that normalise alike: two contents, one search entry.
    assert (
        normalise("hello   brave\tworld")
        == normalise("  hello brave world ")
        == "hello brave world"
    )
    with sqlite3.connect(archive.path) as db:
        contents, entries = db.execute(
            # (a content's own text id is written 0)
            "SELECT COUNT(*), COUNT(DISTINCT CASE text WHEN 0 THEN id ELSE text END) FROM contents"
        ).fetchone()
    assert (contents, entries) == (6, 5)
    # One text, one hit: at its newest occurrence across the variants.
    assert {(hit.session_id, hit.line) for hit in archive.search("brave world")} == {
        ("s-alpha-2", 2)
    }

    for query in [
        '"quotes',
        "quokka*",
        "-x",
        "NEAR(quokka tests)",
        "quokka AND OR NOT",
        "'",
        '"',
        "*",
        "()",
        'tests: "quotes" -x NEAR*',
        "^quokka",
        "col:quokka",
        "",
    ]:
        archive.search(query)  # never raises
    assert {hit.session_id for hit in archive.search('"quotes" -x')} == {"s-alpha-2"}
    assert {hit.session_id for hit in archive.search("NEAR")} == {"s-alpha-2"}
    archive.close()
    assert _cli_search(search_archive, 'fail "with -x NEAR(') != []


# --- export, stats
# ----------------------------------------------------------------------------------------


@requires_corpus
def test_export_json_form_and_stats_figures(tmp_path: Path) -> None:
    copies = _copy_corpus(tmp_path / "projects")
    _riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    stats = orjson.loads(_riffd(tmp_path, "archive", "stats", "--json").stdout)
    total = sum(copy.stat().st_size for copy in copies)
    lines = sum(_line_count(copy.read_bytes()) for copy in copies)
    assert stats["raw_bytes"] == total
    assert stats["files"] == len(copies)
    assert stats["lines"] == lines
    assert stats["messages"] <= lines
    assert stats["unique_texts"] <= stats["unique_contents"]
    # While `stats` runs the database has its -wal and -shm files beside it; they are counted too.
    assert stats["stored_bytes"] >= (tmp_path / "state" / "archive.db").stat().st_size
    assert stats["ratio"] == round(stats["stored_bytes"] / total, 4)
    assert stats["oldest"] <= stats["newest"]
    human = _riffd(tmp_path, "archive", "stats").stdout
    assert f"{total:,}" in human

    session = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    source = next(copy for copy in copies if copy.name == f"{session}.jsonl")
    (exported,) = orjson.loads(_riffd(tmp_path, "archive", "export", session).stdout)
    assert exported["session_id"] == session
    assert exported["project"] == "/path/to/Demo"
    assert exported["path"] == str(source)
    originals = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    expected = [
        (number, line["message"]["content"])
        for number, line in enumerate(originals)
        if isinstance(line.get("message"), dict) and "content" in line["message"]
    ]
    assert [(message["index"], message["content"]) for message in exported["messages"]] == expected
    for message in exported["messages"]:
        original = originals[message["index"]]
        assert message["role"] == original["type"]
        assert (
            message["hash"]
            == hashlib.sha256(orjson.dumps(original["message"]["content"])).hexdigest()
        )
        assert set(message) == {"index", "hash", "role", "timestamp", "content"}
    missing = _riffd(tmp_path, "archive", "export", "no-such-session", check=False)
    assert missing.returncode == 2


def test_lines_read_back_after_a_failed_write_are_the_lines_written(tmp_path: Path) -> None:
    """A copy of the open pack read before it grew must never be read for it later: after a write
    that fails (a full disk, a lock, a refused gap) the open pack is read again from the database,
    not from a stale copy (which gave an empty line in place of each line added since, and a wrong
    torn fragment to join)."""
    from riffd.archive.store import ArchiveGap

    first = [transcript_line(number, pad=80)[:-1] for number in range(1, 21)]
    second = [
        transcript_line(number, session_id="22222222-3333-4444-5555-666666666666", pad=80)[:-1]
        for number in range(1, 21)
    ]
    db_path = tmp_path / "archive.db"
    writer = Archive(db_path)
    writer.add_lines("/p/a.jsonl", 0, first)
    writer.close()
    archive = Archive(db_path)  # a new process: nothing in memory yet
    ((a_id, _path, _session),) = archive.files_of("/p/a.jsonl")
    assert list(archive.iter_file(a_id)) == [line + b"\n" for line in first]  # reads the open pack
    archive.add_lines("/p/b.jsonl", 0, second)  # it grows
    with pytest.raises(ArchiveGap):  # a write that fails: rolled back
        archive.add_lines("/p/b.jsonl", 10**6, [b"{}"])
    ((b_id, _path, _session),) = archive.files_of("/p/b.jsonl")
    assert list(archive.iter_file(b_id)) == [line + b"\n" for line in second]
    assert archive.tip("/p/b.jsonl").line == second[-1] + b"\n"
    archive.close()


def test_a_line_ending_at_the_watermark_is_taken_only_when_it_is_the_line_archived_there(
    tmp_path: Path,
) -> None:
    """Lines offered from below a file's archive watermark are skipped as archived before (a
    restart, a re-read), but a line that ends exactly at the watermark with other bytes than the
    archive's last line shows the file was rewritten behind the archive's back (same length, other
    content): refused (ArchiveMismatch), nothing stored, so the caller archives the file as a new
    generation instead of adding the rest after lines of another version."""
    from riffd.archive.store import ArchiveMismatch

    lines = [transcript_line(number, pad=40)[:-1] for number in range(1, 6)]
    other = transcript_line(5, session_id="22222222-3333-4444-5555-666666666666", pad=40)[:-1]
    assert len(other) == len(lines[4]) and other != lines[4]
    archive = Archive(tmp_path / "archive.db")
    archive.add_lines("/p/a.jsonl", 0, lines)
    last = sum(len(line) + 1 for line in lines[:4])
    # the same line again: archived before, skipped
    assert archive.add_lines("/p/a.jsonl", last, [lines[4]]) == 0
    assert archive.add_lines("/p/a.jsonl", 0, lines) == 0
    with pytest.raises(ArchiveMismatch):
        archive.add_lines("/p/a.jsonl", last, [other, b'{"type":"user"}'])
    with pytest.raises(ArchiveMismatch):  # also when the line is not the first offered
        archive.add_lines("/p/a.jsonl", 0, [*lines[:4], other])
    ((file_id, _path, _session),) = archive.files_of("/p/a.jsonl")
    assert list(archive.iter_file(file_id)) == [line + b"\n" for line in lines]
    assert archive.cursor("/p/a.jsonl") == (0, last + len(lines[4]) + 1)
    # an append: taken
    assert archive.add_lines("/p/a.jsonl", last + len(lines[4]) + 1, [b'{"type":"user"}']) == 1
    archive.close()


def test_verify_finds_a_hole_left_by_an_earlier_version_and_fix_archives_the_file_again(
    tmp_path: Path,
) -> None:
    """An archive made before holes were refused: lines 21 to 40 were never archived (a write that
    failed while the daemon's state moved on), then 41 to 60 were, and the watermark claims the
    whole file. `riffd archive verify` names the file and the line where archive and file part (exit
    1), and counts the others for what they are; `--fix` archives the file whole as a new
    generation, keeping the old one; verify then finds it whole (exit 0)."""
    project = tmp_path / "claude" / "projects" / "-home-user-app"
    project.mkdir(parents=True)
    lines = [transcript_line(number, pad=60) for number in range(1, 61)]
    holed, whole, behind, rewritten = (
        project / f"{name}.jsonl" for name in ("holed", "whole", "behind", "rewritten")
    )
    for path in (holed, whole, behind, rewritten):
        path.write_bytes(b"".join(lines))
    _riffd(tmp_path, "archive", "ingest", str(whole), str(behind), str(rewritten))
    archive = _archive(tmp_path)
    archive.add_lines(str(holed), 0, [line[:-1] for line in lines[:20]])
    archive.close()
    # the earlier version's fault, made by hand
    db = sqlite3.connect(tmp_path / "state" / "archive.db")
    db.execute(
        "UPDATE files SET archived_bytes = ? WHERE path = ?",
        (len(b"".join(lines[:40])), str(holed)),
    )
    db.commit()
    db.close()
    archive = _archive(tmp_path)
    archive.add_lines(str(holed), len(b"".join(lines[:40])), [line[:-1] for line in lines[40:]])
    archive.close()
    with open(behind, "ab") as out:
        out.write(transcript_line(61))
    rewritten.write_bytes(b"".join(lines[:30]))

    found = _riffd(tmp_path, "archive", "verify", check=False)
    assert found.returncode == 1, found.stderr
    assert found.stdout.splitlines() == [
        f"{holed}: the archive differs from the file: line 21 (from byte {len(b''.join(lines[:20]))}) is not the line "
        f"archived; `riffd --config {_config(tmp_path)} archive verify --fix {holed}` archives it again as a new "
        "generation (the old one is kept)"
    ]
    assert (
        "verified 4 file(s)" in found.stderr
        and "1 whole, 1 behind, 1 rewritten, 1 differs" in found.stderr
    )

    # named twice: once
    fixed = _riffd(tmp_path, "archive", "verify", "--fix", str(holed), str(holed))
    assert "archived again as a new generation (60 lines; the old one is kept)" in fixed.stdout
    assert "verified 1 file(s)" in fixed.stderr and "1 archived again" in fixed.stderr
    again = _riffd(tmp_path, "archive", "verify", "--json", str(project))
    verdicts = {
        Path(item["path"]).name: item["outcome"]
        for item in map(orjson.loads, again.stdout.splitlines())
    }
    assert verdicts == {
        "holed.jsonl": "whole",
        "whole.jsonl": "whole",
        "behind.jsonl": "behind",
        "rewritten.jsonl": "rewritten",
    }
    archive = _archive(tmp_path)
    ((file_id, _path, _session),) = archive.files_of(str(holed))
    assert b"".join(archive.iter_file(file_id)) == holed.read_bytes()
    assert archive.generations(file_id) == [0, 1]  # the old generation, hole and all, is kept
    archive.close()


def test_archive_ingest_without_a_path_reads_the_roots_the_config_names(tmp_path: Path) -> None:
    """`riffd archive ingest` with no PATH archives what the daemon watches: the `roots` of the
    config file, not Claude Code's default folder (which the config replaced)."""
    mine = tmp_path / "elsewhere" / "-home-user-app" / "s.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"".join(transcript_line(number) for number in range(1, 6)))
    default = tmp_path / "claude" / "projects" / "-home-user-other" / "t.jsonl"
    default.parent.mkdir(parents=True)
    default.write_bytes(transcript_line(1))
    config = tmp_path / "roots.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nroots = ["{tmp_path / "elsewhere"}"]\n')
    result = run_riffd("archive", "ingest", config=config, env=_environment(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "archived 5 new line(s) from 1 file(s)" in result.stderr
    archive = _archive(tmp_path)
    assert [path for _id, path in archive.files()] == [str(mine)]
    archive.close()
    # Roots that do not exist (yet): said, and nothing taken from Claude Code's folder instead
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nroots = ["{tmp_path / "not-yet"}"]\n')
    result = run_riffd("archive", "ingest", config=config, env=_environment(tmp_path))
    assert result.returncode == 0, result.stderr
    assert f"{tmp_path / 'not-yet'} (in `roots`) does not exist" in result.stderr
    assert "archived 0 new line(s) from 0 file(s)" in result.stderr


def test_a_pack_settled_by_another_process_while_it_is_read_gives_its_lines(tmp_path: Path) -> None:
    """`riffd archive restore` (or verify) reading the open pack just as the daemon settles it (its
    segments folded into one frame): the pack's frame and its segments are read as of one moment.
    Before, they were read by two statements, and a settle committed between them gave a pack of no
    bytes: restore wrote empty lines and said restored. The settle is made to commit exactly there,
    by SQLite's own statement trace."""
    import threading

    from riffd.archive.ingest import ingest_file

    transcript = tmp_path / "s.jsonl"
    transcript.write_bytes(b"".join(transcript_line(number) for number in range(1, 6)))
    db_path = tmp_path / "archive.db"
    # The settle ends with a checkpoint that waits for the reader, held in the trace below, until the
    # lock timeout (30 s by default) and then gives up: a short one ends that wait.
    writer = Archive(db_path, lock_timeout=0.5)
    ingest_file(writer, transcript)  # the open pack, in segments (not settled)
    reader = Archive(db_path)  # a fresh `riffd archive restore`
    settled = threading.Event()

    def settle_now(statement: str) -> None:
        if "segments" in statement and "SELECT" in statement and not settled.is_set():
            settled.set()
            # another connection
            daemon = threading.Thread(target=lambda: writer.settle(optimize=False))
            daemon.start()
            daemon.join()

    reader.connection.db.set_trace_callback(settle_now)
    ((file_id, _path, _session),) = reader.files_of(str(transcript))
    restored = b"".join(reader.iter_file(file_id))
    reader.connection.db.set_trace_callback(None)
    assert settled.is_set()
    assert restored == transcript.read_bytes()
    reader.close()
    writer.close()
