"""A run's header holds RUN_LINES lines at most, so what an append re-encodes does not grow with its
file: lines archived a few at a time (as the daemon does) give the runs a fresh ingest of the whole
file gives, row for row, and an archive whose runs are longer (made before the cap) takes appends in
a new run, both read back byte for byte. Real SQLite archives in tmp_path."""

from __future__ import annotations

import random
import sqlite3
import zlib
from pathlib import Path

import orjson

from conftest import transcript_line
from helpers.damage import generated_session
from riffd.archive.ingest import ingest_file
from riffd.archive.packs import RUN_LINES, Run, unpack
from riffd.archive.store import Archive


def _session_lines() -> list[bytes]:
    """A session of more than two runs' lines: a generated 2.1.x session (pieces cut out of its
    lines), then short prompts and replies, then the session again (its pieces seen before)."""
    session = generated_session(segments=4)
    filler = [transcript_line(number) for number in range(1, 2 * RUN_LINES + 200)]
    return session + filler + session


def _runs(db_path: Path) -> list[tuple[int, int, int, int, bytes]]:
    with sqlite3.connect(db_path) as db:
        return db.execute(
            "SELECT file_id, generation, first, pack, header FROM runs "
            "ORDER BY file_id, generation, first"
        ).fetchall()


def _packs(db_path: Path) -> list[bytes]:
    """Every pack's bytes, decompressed (the open pack's segments joined)."""
    with sqlite3.connect(db_path) as db:
        bodies = []
        for pack_id, data in db.execute("SELECT id, data FROM packs ORDER BY id").fetchall():
            segments = db.execute(
                "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack_id,)
            ).fetchall()
            bodies.append(unpack(data) if data else b"".join(unpack(part) for (part,) in segments))
        return bodies


def _read_back(archive: Archive, path: Path) -> bytes:
    return b"".join(archive.iter_file(archive.files_of(str(path))[0][0]))


def _append_in_small_batches(archive: Archive, path: Path, lines: list[bytes]) -> None:
    """Write `lines` to `path` and archive them as the daemon does: 1 to 5 lines per append, each
    append archived from the byte where the one before ended."""
    rng = random.Random(31)
    offset, at = 0, 0
    while at < len(lines):
        batch = lines[at : at + rng.randint(1, 5)]
        with open(path, "ab") as out:
            out.write(b"".join(batch))
        assert archive.add_lines(str(path), offset, [line[:-1] for line in batch]) == len(batch)
        offset += sum(len(line) for line in batch)
        at += len(batch)


def test_appends_in_small_batches_store_the_runs_a_fresh_ingest_stores(tmp_path: Path) -> None:
    lines = _session_lines()
    daemon_like = tmp_path / "appended" / "session.jsonl"
    daemon_like.parent.mkdir()
    appended = Archive(tmp_path / "appended" / "archive.db")
    _append_in_small_batches(appended, daemon_like, lines)
    assert _read_back(appended, daemon_like) == b"".join(lines)
    appended.close()

    whole = tmp_path / "whole" / "session.jsonl"
    whole.parent.mkdir()
    whole.write_bytes(b"".join(lines))
    ingested = Archive(tmp_path / "whole" / "archive.db")
    assert ingest_file(ingested, whole) == len(lines)
    ingested.close()

    runs = _runs(appended.path)
    assert runs == _runs(ingested.path)
    assert _packs(appended.path) == _packs(ingested.path)
    sizes = [len(Run(pack, first, header).lengths) for _, _, first, pack, header in runs]
    assert len(runs) >= 3 and max(sizes) == RUN_LINES
    assert [first for _, _, first, _, _ in runs] == [sum(sizes[:n]) for n in range(len(sizes))]


def test_an_append_to_a_longer_run_of_an_earlier_riffd_starts_a_new_run(tmp_path: Path) -> None:
    """A run of more than RUN_LINES lines (the archive of a riffd from before the cap) is left as it
    is: the next line goes to a run of its own, and the file reads back whole."""
    lines = [transcript_line(number) for number in range(1, RUN_LINES + 300)]
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(lines[:-1]))
    archive = Archive(tmp_path / "archive.db")
    assert ingest_file(archive, path) == len(lines) - 1
    archive.close()
    with sqlite3.connect(archive.path) as db:  # one run of every line, as an earlier riffd wrote it
        rows = db.execute("SELECT first, pack, header FROM runs ORDER BY first").fetchall()
        assert len(rows) >= 2 and len({pack for _, pack, _ in rows}) == 1
        whole = Run(rows[0][1], 0, rows[0][2])
        for first, pack, header in rows[1:]:
            tail = Run(pack, first, header)
            whole.cuts.update({first + line: ids for line, ids in tail.cuts.items()})
            whole.offsets += tail.offsets
            whole.lengths += tail.lengths
            whole.unterminated, whole.crc = tail.unterminated, tail.crc
        db.execute("DELETE FROM runs")
        db.execute(
            "INSERT INTO runs(file_id, generation, first, pack, header) VALUES (1, 0, 0, ?, ?)",
            (whole.pack, whole.encode()),
        )
    old_header = whole.encode()

    archive = Archive(tmp_path / "archive.db")
    assert _read_back(archive, path) == path.read_bytes()
    with open(path, "ab") as out:
        out.write(lines[-1])
    offset = path.stat().st_size - len(lines[-1])
    assert archive.add_lines(str(path), offset, [lines[-1][:-1]]) == 1
    assert _read_back(archive, path) == b"".join(lines)
    archive.close()
    runs = _runs(archive.path)
    assert [(first, header == old_header) for _, _, first, _, header in runs] == [
        (0, True),
        (len(lines) - 1, False),
    ]
    assert orjson.loads(zlib.decompress(runs[1][4]))["n"] == [len(lines[-1]) - 1]
