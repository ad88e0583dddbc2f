"""A batch of lines looks its pieces up in a few statements and writes its new contents at its end
(riffd.archive.dedup: `prefetch`, `flush`): the archive it makes is the one a line at a time makes,
where every piece is looked up in the database, row for row; pieces repeated within one batch, and
variants of a text within it (same key, other bytes), included. Real files in tmp_path, a real
forked reader, real SQLite archives."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from helpers.damage import generated_session
from riffd.archive.contents import MARK
from riffd.archive.ingest import ingest_files
from riffd.archive.packs import unpack
from riffd.archive.store import Archive

SESSION = "5e55104e-0000-4000-8000-00000000d0d0"
TABLES = {
    "contents": "SELECT * FROM contents ORDER BY id",
    "content_keys": "SELECT * FROM content_keys ORDER BY key, id",
    "seen": "SELECT * FROM seen ORDER BY text, file_id",
    # each term of the search index and the texts it is in (its segments differ with the
    # transactions that wrote them)
    "search": "SELECT term, doc FROM temp.terms ORDER BY term",
    "runs": "SELECT * FROM runs ORDER BY file_id, generation, first",
}


def _variant(line: bytes) -> bytes:
    """The line with every text of its message spaced out: the same normalised texts (so the same
    keys), other bytes."""
    record = orjson.loads(line)
    message = record.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = content.replace(" ", "   ")
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    block["text"] = block["text"].replace(" ", "  \t ")
    return orjson.dumps(record) + b"\n"


def _lines() -> list[bytes]:
    """A session, its texts spaced out, then the session again, then the spaced-out copy again:
    every piece and every variant seen again within the same batch."""
    session = generated_session(segments=5, session_id=SESSION)
    spaced = [_variant(line) for line in session]
    return session + spaced + session + spaced


def _rows(db_path: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(db_path)
    try:
        db.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, search, row)")
        rows = {name: db.execute(query).fetchall() for name, query in TABLES.items()}
        rows["packs"] = [
            (pack, unpack(data) if data else b"")
            for pack, data in db.execute("SELECT id, data FROM packs ORDER BY id")
        ]
        rows["segments"] = [
            (pack, number, unpack(data))
            for pack, number, data in db.execute(
                "SELECT pack, number, data FROM segments ORDER BY pack, number"
            )
        ]
        return rows
    finally:
        db.close()


def test_a_batch_stores_the_contents_a_line_at_a_time_stores(tmp_path: Path) -> None:
    lines = _lines()
    path = tmp_path / "sessions" / f"{SESSION}.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(lines))

    (tmp_path / "batch").mkdir()
    batch = Archive(tmp_path / "batch" / "archive.db")
    # the reader process parses the lines: the batch's keys are looked up at once
    results = list(ingest_files(batch, [path], min_bytes=0))
    assert results == [(path, len(lines))]
    batch.close()

    (tmp_path / "single").mkdir()
    single = Archive(tmp_path / "single" / "archive.db")
    offset = 0
    for line in lines:  # a transaction per line: each piece looked up in the database
        assert single.add_lines(str(path), offset, [line[:-1]]) == 1
        offset += len(line)
    single.close()

    alone, together = _rows(single.path), _rows(batch.path)
    assert together == alone
    # the later copies' pieces were cut out (a NUL byte in each one's place), and the variants
    # share a text without being cut out
    bodies = [body for _pack, body in together["packs"]]
    bodies += [body for _pack, _number, body in together["segments"]]
    assert sum(body.count(MARK) for body in bodies) > 20
    # (a content's own text id is written 0)
    texts = [
        content if text == 0 else text
        for content, _pack, _offset, _length, text in together["contents"]
    ]
    assert len(texts) > len(set(texts)) > 10
