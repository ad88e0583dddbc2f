"""`riffd archive ingest` of many files with a reader process (riffd.archive.ingest.ingest_files):
the archive it makes is the one `ingest_file` makes file by file, row for row; a reader that dies,
or cannot read a file, costs no line. Real files in tmp_path, a real forked reader, a real SQLite
archive."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sqlite3
import threading
from multiprocessing.connection import Connection
from pathlib import Path

import orjson
import pytest

from conftest import CORPUS_DIR, HAVE_CORPUS, corpus_transcripts, transcript_line
from helpers.damage import generated_session
from helpers.run import run_riffd
from riffd.archive.ingest import ingest_file, ingest_files
from riffd.archive.packs import Run, unpack
from riffd.archive.store import Archive

TABLES = {  # every row the archive writes, in a fixed order
    "files": "SELECT * FROM files ORDER BY id",
    "runs": "SELECT * FROM runs ORDER BY file_id, generation, first",
    "contents": "SELECT * FROM contents ORDER BY id",
    "content_keys": "SELECT * FROM content_keys ORDER BY key, id",
    "seen": "SELECT * FROM seen ORDER BY text, file_id",
    # The search index by what it holds (every word of every text): its segments differ with how
    # many lines each transaction held (an ingest with the reader stores a few batches in each)
    "search": "SELECT term, doc FROM temp.words ORDER BY term, doc",
    "loose": "SELECT * FROM loose ORDER BY pack",
    "meta": "SELECT * FROM meta ORDER BY key",
}


def _rows(db_path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the archive's tables, the packs decompressed (the open pack's segments
    joined)."""
    db = sqlite3.connect(db_path)
    try:
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, search, instance)")
        rows = {name: db.execute(query).fetchall() for name, query in TABLES.items()}
        packs = []
        for pack_id, data, raw_size in db.execute(
            "SELECT id, data, raw_size FROM packs ORDER BY id"
        ).fetchall():
            body = (
                unpack(data)
                if data
                else b"".join(
                    unpack(segment)
                    for (segment,) in db.execute(
                        "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack_id,)
                    )
                )
            )
            packs.append((pack_id, body, raw_size))
        rows["packs"] = packs
        return rows
    finally:
        db.close()


def _sessions(folder: Path) -> list[Path]:
    """Transcripts to ingest: the real corpus when there is one, and generated sessions with a
    resumed copy (pieces seen before), a torn last line and a malformed line, in `folder`."""
    folder.mkdir()
    paths = []
    if HAVE_CORPUS:
        for source in corpus_transcripts():
            copy = folder / "real" / source.relative_to(CORPUS_DIR)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
            paths.append(copy)
    for number in range(4):
        lines = generated_session(
            segments=6, session_id=f"5e55104e-0000-4000-8000-0000000000{number:02d}"
        )
        if number == 2:
            lines.insert(5, b'{"type":"user","message":\n')  # malformed, kept as written
        path = folder / f"generated-{number}.jsonl"
        data = b"".join(lines)
        path.write_bytes(data[:-40] if number == 3 else data)  # the last: a torn last line
        paths.append(path)
    return paths


def _archive(folder: Path, paths: list[Path], *, reader: bool, read_ahead: int = 8_000_000) -> Path:
    folder.mkdir()
    archive = Archive(folder / "archive.db")
    try:
        if reader:
            results = list(ingest_files(archive, paths, min_bytes=0, read_ahead=read_ahead))
            assert [path for path, _ in results] == paths
            assert all(isinstance(added, int) and added > 0 for _, added in results), results
        else:
            for path in paths:
                ingest_file(archive, path)
    finally:
        archive.close()
    return folder / "archive.db"


def _restored(db_path: Path) -> dict[str, bytes]:
    archive = Archive(db_path)
    try:
        return {path: b"".join(archive.iter_file(file_id)) for file_id, path, *_ in archive.files()}
    finally:
        archive.close()


@pytest.mark.parametrize("read_ahead", [0, 100_000, 8_000_000])
def test_the_reader_makes_the_archive_one_process_makes_row_for_row(
    tmp_path: Path, read_ahead: int
) -> None:
    """First ingest, then appends (one completing the torn last line, which the archive joins to its
    fragment), each with and without the reader (given one file ahead, some, or all): the same rows
    in every table, and every file restores byte for byte."""
    paths = _sessions(tmp_path / "sessions")
    alone = _archive(tmp_path / "alone", paths, reader=False)
    shared = _archive(tmp_path / "reader", paths, reader=True, read_ahead=read_ahead)
    assert _rows(alone) == _rows(shared)
    torn = paths[-1]
    with open(torn, "ab") as out:  # the torn line finished, and more lines
        out.write(
            b"".join(
                generated_session(segments=6, session_id="5e55104e-0000-4000-8000-000000000003")
            )[-40:]
        )
        out.write(transcript_line(1) + transcript_line(2))
    with open(paths[0], "ab") as out:
        out.write(transcript_line(3))
    for db_path, reader in ((alone, False), (shared, True)):
        archive = Archive(db_path)
        try:
            if reader:
                # the completed line takes its fragment's place (not added), and two more
                results = list(ingest_files(archive, paths, min_bytes=0, read_ahead=read_ahead))
                assert [added for _, added in results][-1] == 2
            else:
                for path in paths:
                    ingest_file(archive, path)
        finally:
            archive.close()
    assert _rows(alone) == _rows(shared)
    assert _restored(shared) == {str(path): path.read_bytes() for path in paths}


def test_a_reader_killed_part_way_costs_no_line(tmp_path: Path) -> None:
    """SIGKILL the reader after the first file (given one file ahead, it has not read the rest): the
    rest are archived here, every line once, byte for byte."""
    paths = _sessions(tmp_path / "sessions")
    archive = Archive(tmp_path / "archive.db")
    results = []
    try:
        for path, added in ingest_files(archive, paths, min_bytes=0, read_ahead=0):
            results.append((path, added))
            for child in multiprocessing.active_children():
                if child.name == "riffd-ingest-reader":
                    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    finally:
        archive.close()
    assert [path for path, _ in results] == paths
    assert all(isinstance(added, int) and added > 0 for _, added in results), results
    assert _restored(tmp_path / "archive.db") == {str(path): path.read_bytes() for path in paths}
    assert _rows(tmp_path / "archive.db") == _rows(
        _archive(tmp_path / "alone", paths, reader=False)
    )
    assert not [
        child for child in multiprocessing.active_children() if child.name == "riffd-ingest-reader"
    ]


def test_a_file_the_reader_cannot_read_is_reported_and_the_others_archived(tmp_path: Path) -> None:
    """A file gone before the reader reads it: the reader reports it, this process tries it and
    reports the error; the files after it are archived by the reader as usual."""
    paths = _sessions(tmp_path / "sessions")
    missing = tmp_path / "sessions" / "gone.jsonl"
    order = [paths[0], missing, *paths[1:]]
    archive = Archive(tmp_path / "archive.db")
    try:
        results = dict(ingest_files(archive, order, min_bytes=0))
    finally:
        archive.close()
    assert isinstance(results.pop(missing), FileNotFoundError)
    assert all(isinstance(added, int) and added > 0 for added in results.values())
    assert _restored(tmp_path / "archive.db") == {str(path): path.read_bytes() for path in paths}


def test_titles_and_prompts_are_those_one_process_takes(tmp_path: Path) -> None:
    """The reader sends every user prompt; the archive keeps the first of each batch it stores, as
    alone."""
    path = tmp_path / "session.jsonl"
    lines = [
        orjson.dumps(
            {"type": "user", "isMeta": True, "message": {"role": "user", "content": "meta"}}
        ),
        orjson.dumps({"type": "user", "message": {"role": "user", "content": "the first prompt"}}),
        orjson.dumps({"type": "user", "message": {"role": "user", "content": "the second prompt"}}),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    archive = Archive(tmp_path / "archive.db")
    try:
        assert [added for _, added in ingest_files(archive, [path], min_bytes=0)] == [3]
        title = archive.connection.db.execute("SELECT title FROM files").fetchone()[0]
    finally:
        archive.close()
    assert title == "the first prompt"


@pytest.fixture(autouse=True)
def _no_reader_left() -> None:
    yield
    assert not [
        child for child in multiprocessing.active_children() if child.name == "riffd-ingest-reader"
    ]


def test_thousands_of_small_files_never_stall_the_reader(tmp_path: Path) -> None:
    """1,500 files of 2 kB (3 MB): the reader is given at most JOBS_AHEAD files ahead, so the pipe
    of files to read never fills while it waits to send (`riffd archive ingest` in a real process,
    which must finish)."""

    folder = tmp_path / "projects" / "-p"
    folder.mkdir(parents=True)
    for number in range(1500):
        (folder / f"00000000-0000-4000-8000-{number:012d}.jsonl").write_bytes(
            b"".join(
                transcript_line(line, session_id=f"00000000-0000-4000-8000-{number:012d}", pad=200)
                for line in range(1, 8)
            )
        )
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    result = run_riffd(
        "archive", "ingest", "--no-compact", str(tmp_path / "projects"), config=config
    )
    assert result.returncode == 0, result.stderr
    assert "archived 10500 new line(s) from 1500 file(s)" in result.stderr


def test_a_file_named_twice_after_a_rewrite_is_one_new_generation(tmp_path: Path) -> None:
    """The same path twice (`riffd archive ingest DIR FILE`): the second finds nothing new, as in
    one process."""
    paths = _sessions(tmp_path / "sessions")[-2:]
    twice = [paths[0], paths[1], paths[0]]
    alone, shared = Archive(tmp_path / "alone.db"), Archive(tmp_path / "shared.db")
    try:
        for archive in (alone, shared):
            for path in paths:
                ingest_file(archive, path)
        # rewritten
        paths[0].write_bytes(b"".join(transcript_line(number) for number in range(1, 5)))
        assert [ingest_file(alone, path) for path in twice] == [4, 0, 0]
        assert [added for _, added in ingest_files(shared, twice, min_bytes=0)] == [4, 0, 0]
    finally:
        alone.close()
        shared.close()
    assert _rows(tmp_path / "alone.db") == _rows(tmp_path / "shared.db")


def test_a_file_rewritten_after_the_reader_was_given_it_is_read_again_here(tmp_path: Path) -> None:
    """Where to read a file from is decided before the reader reads it; a file rewritten in between
    (or archived by the daemon meanwhile) is found so when its lines arrive, and archived here from
    what it holds now: the same archive as one process that met the rewrite."""
    paths = _sessions(tmp_path / "sessions")[-3:]
    alone, shared = Archive(tmp_path / "alone.db"), Archive(tmp_path / "shared.db")
    try:
        for archive in (alone, shared):
            for path in paths:
                ingest_file(archive, path)
        for path in paths:
            with open(path, "ab") as out:
                out.write(transcript_line(90))
        rewritten = b"".join(transcript_line(number, pad=70) for number in range(1, 9))
        results = ingest_files(shared, paths, min_bytes=0)
        first = next(results)  # the reader has been given every file, and may have read them
        paths[1].write_bytes(rewritten)
        rest = list(results)
        # (the last file's torn last line is finished by the appended line, which takes its place:
        # none added)
        assert (
            [added for _, added in [first, *rest]]
            == [ingest_file(alone, path) for path in paths]
            == [1, 8, 0]
        )
    finally:
        alone.close()
        shared.close()
    assert _rows(tmp_path / "alone.db") == _rows(tmp_path / "shared.db")
    assert _restored(tmp_path / "shared.db") == {str(path): path.read_bytes() for path in paths}


def test_a_new_generation_made_by_another_process_between_two_batches_leaves_no_hole(
    tmp_path: Path,
) -> None:
    """The reader's first batch of a file is stored; then another process (the daemon) meets the
    file rewritten, shorter, and archives it as a new generation; then the reader's next batch
    arrives, offered from past that generation's watermark. The archive refuses it (ArchiveGap) and
    the file is archived here from what it holds now: no batch of the old version is put after the
    new one, and the ingest goes on (before the catch, it ended there)."""
    import msgspec

    from riffd.archive.ingest import Batch, _judged, _store_batches
    from riffd.fsio import REAL_FILES

    path = tmp_path / "s.jsonl"
    old = [transcript_line(number, pad=200) for number in range(1, 41)]
    new = [
        transcript_line(number, session_id="22222222-3333-4444-5555-666666666666")
        for number in range(1, 6)
    ]
    path.write_bytes(b"".join(old))
    read = _file_of(path)  # the file the reader reads: the old one, to its end
    archive = Archive(tmp_path / "archive.db")
    receiver, sender = multiprocessing.Pipe(duplex=False)
    judged = _judged(archive, path, REAL_FILES)
    result: list[tuple[int, bool, bool, tuple[int, int] | None]] = []

    def store() -> None:
        # each batch its own transaction: the other process comes between two transactions (the
        # ingest's hold a few batches each)
        with archive.connection.grouped(1) as group:
            result.append(_store_batches(archive, receiver, 7, path, judged, group))

    storing = threading.Thread(target=store)
    storing.start()
    encode = msgspec.msgpack.Encoder().encode
    sender.send_bytes(encode(Batch(7, 0, [line[:-1] for line in old[:20]], file=read)))
    watcher = Archive(tmp_path / "archive.db")
    for _ in range(3000):  # until the first batch is stored
        if watcher.cursor(str(path))[1] == len(b"".join(old[:20])):
            break
        threading.Event().wait(0.01)
    else:
        pytest.fail("the first batch was not stored within 30 s")
    replacement = path.with_suffix(".new")
    replacement.write_bytes(b"".join(new))
    os.replace(replacement, path)
    assert ingest_file(watcher, path) == 5  # the other process: a new generation, 5 lines
    sender.send_bytes(
        encode(Batch(7, len(b"".join(old[:20])), [line[:-1] for line in old[20:]], file=read))
    )
    sender.send_bytes(encode(Batch(7, end=True, file=read)))
    storing.join(60)
    assert not storing.is_alive()
    # 20 lines stored, the rest refused: archived here after all, reader alive
    assert result == [(20, True, True, None)]
    assert ingest_file(archive, path) == 0  # what the caller does then: nothing is missing
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id, generation=0)) == b"".join(old[:20])
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes() == b"".join(new)
    watcher.close()
    archive.close()


def _file_of(path: Path) -> tuple[int, int]:
    """(st_dev, st_ino) of the file at `path`: what the reader names each batch by."""
    status = path.stat()
    return status.st_dev, status.st_ino


def _playing_the_reader(
    tmp_path: Path, count: int
) -> tuple[Path, list[bytes], Archive, Connection, Connection]:
    """A transcript of `count` lines, an archive, and a pipe to send batches through as the
    reader does: (path, lines, archive, receiving end, sending end)."""
    path = tmp_path / "s.jsonl"
    lines = [transcript_line(number, pad=200) for number in range(1, count + 1)]
    path.write_bytes(b"".join(lines))
    receiver, sender = multiprocessing.Pipe(duplex=False)
    return path, lines, Archive(tmp_path / "archive.db"), receiver, sender


def test_a_refused_batch_takes_the_uncommitted_ones_with_it_and_says_so(tmp_path: Path) -> None:
    """In the ingest's transaction of several batches, a batch the archive refuses (another process
    archived the file meanwhile) rolls back the batches since the last commit: they are not counted
    as archived, and the file is then archived here from what the archive holds."""
    import msgspec

    from riffd.archive.ingest import Batch, _judged, _store_batches
    from riffd.fsio import REAL_FILES

    path, lines, archive, receiver, sender = _playing_the_reader(tmp_path, 40)
    read = _file_of(path)
    encode = msgspec.msgpack.Encoder().encode
    sender.send_bytes(encode(Batch(7, 0, [line[:-1] for line in lines[:20]], file=read)))
    gap = len(b"".join(lines[:20])) + 5  # not where the first batch ended: refused
    sender.send_bytes(encode(Batch(7, gap, [line[:-1] for line in lines[20:]], file=read)))
    sender.send_bytes(encode(Batch(7, end=True, file=read)))
    with archive.connection.grouped(1 << 30) as group:
        result = _store_batches(
            archive, receiver, 7, path, _judged(archive, path, REAL_FILES), group
        )
        assert result == (0, True, True, None)
        assert archive.cursor(str(path))[1] == 0
        assert ingest_file(archive, path) == 40
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    archive.close()


def test_the_ingest_holds_no_lock_while_it_waits_for_the_reader(tmp_path: Path) -> None:
    """A reader behind (a stalled file system): what the group stored is committed before this
    process waits for the next batch, so another writer (the daemon) is not kept out meanwhile."""
    import msgspec

    from riffd.archive.ingest import Batch, _judged, _store_batches
    from riffd.fsio import REAL_FILES

    path, lines, archive, receiver, sender = _playing_the_reader(tmp_path, 40)
    read = _file_of(path)
    encode = msgspec.msgpack.Encoder().encode
    result: list[tuple[int, bool, bool, tuple[int, int] | None]] = []
    judged = _judged(archive, path, REAL_FILES)

    def store() -> None:
        with archive.connection.grouped(1 << 30) as group:
            result.append(_store_batches(archive, receiver, 7, path, judged, group))

    storing = threading.Thread(target=store)
    storing.start()
    sender.send_bytes(encode(Batch(7, 0, [line[:-1] for line in lines[:20]], file=read)))
    other = Archive(tmp_path / "archive.db")
    for _ in range(3000):  # committed while the storing thread waits for the next batch
        if other.cursor(str(path))[1] == len(b"".join(lines[:20])):
            break
        threading.Event().wait(0.01)
    else:
        pytest.fail("the stored batch was not committed while the reader was behind")
    other.add_lines(str(tmp_path / "other.jsonl"), 0, [lines[0][:-1]])  # the lock is free
    other.close()
    sender.send_bytes(
        encode(Batch(7, len(b"".join(lines[:20])), [line[:-1] for line in lines[20:]], file=read))
    )
    sender.send_bytes(encode(Batch(7, end=True, file=read)))
    storing.join(60)
    assert result == [(40, False, True, None)]
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    archive.close()


def test_a_file_yielded_by_the_ingest_is_committed(tmp_path: Path) -> None:
    """Another process sees each file archived whole when the ingest says so (a group never spans
    two files, so a batch refused later cannot take back a file already reported)."""
    paths = [tmp_path / f"5e55104e-0000-4000-8000-00000000000{number}.jsonl" for number in range(3)]
    for path in paths:
        path.write_bytes(
            b"".join(transcript_line(line, session_id=path.stem, pad=300) for line in range(1, 201))
        )
    archive = Archive(tmp_path / "archive.db")
    for path, added in ingest_files(archive, paths, min_bytes=0):
        assert added == 200
        other = Archive(tmp_path / "archive.db", read_only=True)
        assert other.cursor(str(path))[1] == path.stat().st_size
        other.close()
    archive.close()


def test_a_reader_that_dies_mid_file_leaves_the_count_right(tmp_path: Path) -> None:
    """Two batches stored, then the reader's pipe ends: both counted, and the file archived here
    adds only the rest."""
    import msgspec

    from riffd.archive.ingest import Batch, _judged, _store_batches
    from riffd.fsio import REAL_FILES

    path, lines, archive, receiver, sender = _playing_the_reader(tmp_path, 60)
    read = _file_of(path)
    encode = msgspec.msgpack.Encoder().encode
    sender.send_bytes(encode(Batch(7, 0, [line[:-1] for line in lines[:20]], file=read)))
    second = len(b"".join(lines[:20]))
    sender.send_bytes(encode(Batch(7, second, [line[:-1] for line in lines[20:40]], file=read)))
    sender.close()
    with archive.connection.grouped(1 << 30) as group:
        result = _store_batches(
            archive, receiver, 7, path, _judged(archive, path, REAL_FILES), group
        )
        assert result == (40, True, False, None)
        with group.apart():
            assert ingest_file(archive, path) == 20
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    archive.close()


def test_a_file_archived_here_commits_batch_by_batch(tmp_path: Path) -> None:
    """A file the reader leaves to this process (here: the reader killed) is archived a transaction
    a batch, apart from the ingest's group: another process sees its watermark move part way, so a
    daemon waiting to write never waits for the whole file (a group's one transaction for a 1.1 GB
    file kept another writer out for 30 s)."""
    first, big = tmp_path / "first.jsonl", tmp_path / "big.jsonl"
    first.write_bytes(b"".join(transcript_line(number) for number in range(1, 20)))
    big.write_bytes(b"".join(transcript_line(number, pad=2000) for number in range(1, 5000)))
    archive = Archive(tmp_path / "archive.db")
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        with sqlite3.connect(tmp_path / "archive.db") as db:
            while not done.is_set():
                row = db.execute(
                    "SELECT archived_bytes FROM files WHERE path = ?", (str(big),)
                ).fetchone()
                seen.add(row[0] if row else 0)

    watcher = threading.Thread(target=watch)
    try:
        files = ingest_files(archive, [first, big], min_bytes=0, read_ahead=0)
        assert next(files)[0] == first
        readers = [
            child
            for child in multiprocessing.active_children()
            if child.name == "riffd-ingest-reader"
        ]
        assert len(readers) == 1  # (else the reader path, which also commits part way, is tested)
        os.kill(readers[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
        watcher.start()
        assert next(files) == (big, 4999)
        assert next(files, None) is None
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        archive.close()
    size = big.stat().st_size
    assert [at for at in seen if 0 < at < size], f"seen only {sorted(seen)} of {size} bytes"
    assert _restored(tmp_path / "archive.db")[str(big)] == big.read_bytes()


def test_a_transcript_archived_through_a_symlink_is_not_judged_rewritten(tmp_path: Path) -> None:
    """The archive keeps a file the daemon reaches through a link under the link's name: judging
    whether it was rewritten reads the file the link leads to, as the read does (not the link's own
    size, which made every ingest archive it again whole)."""
    from riffd.archive.generation import still_appended
    from riffd.archive.verify import verify_file

    real = tmp_path / "elsewhere" / "s.jsonl"
    real.parent.mkdir()
    real.write_bytes(b"".join(transcript_line(n, pad=1000) for n in range(1, 1200)))  # > 1 MB
    link = tmp_path / "projects" / "-p" / "s.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    archive = Archive(tmp_path / "archive.db")
    try:
        assert ingest_file(archive, link) == 1199
        assert still_appended(archive, link, archive.cursor(str(link))[1])
        assert verify_file(archive, link).outcome == "whole"
        for _run in range(2):  # the reader process: nothing new, no new generation
            assert list(ingest_files(archive, [link])) == [(link, 0)]
        file_id = archive.file_id(str(link))
        assert file_id is not None and archive.generations(file_id) == [0]
    finally:
        archive.close()


def test_a_status_that_fails_after_the_lines_are_archived_fails_nothing(tmp_path: Path) -> None:
    """The file's time is noted once its lines are archived; a status read that keeps failing
    (EIO from a cloud folder) then loses only the time, not the ingest."""
    import errno

    from riffd.fsio import FileSystem, RetryingFS, RetryPolicy

    class StatusFails(FileSystem):
        def fstat(self, fd: int) -> os.stat_result:
            raise OSError(errno.EIO, "Input/output error")

    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(transcript_line(n) for n in range(1, 11)))
    archive = Archive(tmp_path / "archive.db")
    try:
        fs = RetryingFS(StatusFails(), RetryPolicy(attempts=2, first_wait=0.001, max_wait=0.002))
        assert ingest_file(archive, path, fs=fs) == 10
        assert archive.cursor(str(path))[1] == path.stat().st_size
    finally:
        archive.close()


def test_a_close_that_fails_after_the_read_fails_nothing(tmp_path: Path) -> None:
    """Closing a file read can fail (a cloud folder's EIO); nothing read through it is lost, so
    the ingest of it stands."""
    import errno

    from riffd.fsio import FileSystem

    class CloseFails(FileSystem):
        def close(self, fd: int) -> None:
            super().close(fd)
            raise OSError(errno.EIO, "Input/output error")

    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(transcript_line(n) for n in range(1, 11)))
    archive = Archive(tmp_path / "archive.db")
    try:
        assert ingest_file(archive, path, fs=CloseFails()) == 10
        with path.open("ab") as appended:
            appended.write(transcript_line(11))
        assert ingest_file(archive, path, fs=CloseFails()) == 1  # judged, then read: both closed
        assert archive.cursor(str(path))[1] == path.stat().st_size
    finally:
        archive.close()


def test_a_file_recreated_with_other_lines_and_the_same_last_one_is_a_new_generation(
    tmp_path: Path,
) -> None:
    """A transcript deleted and written again (a new file: a sync client's copy from another
    machine, a user's edit) with a line changed in the middle, its length kept, and one more line
    after the archive's last: before, only the archive's last line was compared, and the new line
    was archived after the old ones, a version that never existed. Both ingests now archive the file
    as it is, as a new generation, and keep the old one whole."""
    old = [transcript_line(number, pad=60) for number in range(1, 11)]
    edited = [*old]
    edited[4] = old[4].replace(b"x" * 10, b"y" * 10)
    assert edited[4] != old[4] and len(edited[4]) == len(old[4])
    new = [*edited, transcript_line(11)]
    paths = [tmp_path / "alone.jsonl", tmp_path / "shared.jsonl"]
    alone, shared = Archive(tmp_path / "alone.db"), Archive(tmp_path / "shared.db")
    try:
        for archive, path in zip((alone, shared), paths, strict=True):
            path.write_bytes(b"".join(old))
            ingest_file(archive, path)
            path.unlink()
            path.write_bytes(b"".join(new))
        assert ingest_file(alone, paths[0]) == 11
        assert [added for _, added in ingest_files(shared, paths[1:], min_bytes=0)] == [11]
        for archive, path in zip((alone, shared), paths, strict=True):
            ((file_id, *_),) = archive.files_of(str(path))
            assert b"".join(archive.iter_file(file_id)) == b"".join(new)
            assert b"".join(archive.iter_file(file_id, generation=0)) == b"".join(old)
    finally:
        alone.close()
        shared.close()


@pytest.mark.parametrize("edited", [None, 4])
def test_a_generation_archived_without_a_checksum_is_compared_line_for_line(
    tmp_path: Path, edited: int | None
) -> None:
    """Run headers written by a riffd that recorded no checksum: the file is compared with the
    archive's lines. A line changed in the middle at its length is a new generation; the file as
    archived, with a line more, goes on the generation."""
    old = [transcript_line(number, pad=60) for number in range(1, 11)]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(old))
    archive = Archive(tmp_path / "archive.db")
    ingest_file(archive, path)
    db = archive.connection.db
    for file_id, generation, pack, first, header in db.execute(
        "SELECT file_id, generation, pack, first, header FROM runs"
    ).fetchall():
        run = Run(pack, first, header)
        run.crc = None  # as an earlier riffd wrote it
        db.execute(
            "UPDATE runs SET header = ? WHERE file_id = ? AND generation = ? AND first = ?",
            (run.encode(), file_id, generation, first),
        )
    db.commit()
    archive.close()
    archive = Archive(tmp_path / "archive.db")
    try:
        new = [*old]
        if edited is not None:
            new[edited] = old[edited].replace(b"x" * 10, b"y" * 10)
            assert len(new[edited]) == len(old[edited]) and new[edited] != old[edited]
        path.unlink()
        path.write_bytes(b"".join([*new, transcript_line(11)]))
        assert ingest_file(archive, path) == (1 if edited is None else 11)
        ((file_id, *_),) = archive.files_of(str(path))
        assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
        assert len(archive.generations(file_id)) == (1 if edited is None else 2)
    finally:
        archive.close()
