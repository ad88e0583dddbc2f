"""A pack filled during an ingest stays in its segments until it is compressed whole
(riffd.archive.packs): one of those segments damaged (16 bytes flipped with real SQLite), its pieces
are refused (PackDamaged), never read as other bytes, by search snippets and by a restore;
compaction leaves the damaged pack as it is and compresses the others, whose bytes stay the same."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import orjson
import pytest

from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PACK_BYTES, SEGMENT_BYTES, PackDamaged, unpack
from riffd.archive.spans import read_spans
from riffd.archive.store import Archive

WORDS = [a + b for a in ("ka", "lo", "mi", "nu", "pe", "ra") for b in ("ven", "dor", "lix", "um")]


def write_session(path: Path, lines: int, seed: int) -> None:
    """A session of `lines` prompts and answers, each a text of about 2 kB of random words."""
    rng = random.Random(seed)
    parent = None
    out = bytearray()
    for number in range(lines):
        uuid = f"{seed:08d}-0000-4000-8000-{number:012d}"
        role = "user" if number % 2 == 0 else "assistant"
        record = {
            "type": role,
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": f"00000000-0000-4000-8000-{seed:012d}",
            "message": {
                "role": role,
                "content": [{"type": "text", "text": " ".join(rng.choices(WORDS, k=400))}],
            },
        }
        out += orjson.dumps(record) + b"\n"
        parent = uuid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))


def _ingested(tmp_path: Path, packs: float, seed: int) -> tuple[Path, Path]:
    """A session of about `packs` packs' worth of lines, ingested (its full packs left loose):
    (the session, the archive)."""
    path = tmp_path / "projects" / "-p" / f"00000000-0000-4000-8000-{seed:012d}.jsonl"
    write_session(path, int(PACK_BYTES * packs / 2100), seed=seed)
    archive = Archive(tmp_path / "archive.db")
    ingest_file(archive, path)
    archive.close()
    return path, tmp_path / "archive.db"


def _bodies(db_path: Path) -> dict[int, bytes]:
    """Every pack's bytes (its frame, or its segments joined), read with plain SQLite."""
    with sqlite3.connect(db_path) as db:
        bodies = {}
        for pack, data in db.execute("SELECT id, data FROM packs ORDER BY id").fetchall():
            parts = db.execute(
                "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack,)
            ).fetchall()
            bodies[pack] = unpack(data) if data else b"".join(unpack(part) for (part,) in parts)
    db.close()
    return bodies


@pytest.mark.slow
def test_a_damaged_segment_of_a_full_pack_is_refused_and_never_compacted(tmp_path: Path) -> None:
    path, db_path = _ingested(tmp_path, packs=2.5, seed=31)
    before = _bodies(db_path)
    with sqlite3.connect(db_path) as db:
        # the full packs are loose, in their segments, with no frame of their own (the open pack
        # neither)
        loose = [pack for (pack,) in db.execute("SELECT pack FROM loose ORDER BY pack")]
        assert len(loose) >= 2 and loose[0] == 1
        empty = db.execute("SELECT COUNT(*) FROM packs WHERE data = x''").fetchone()[0]
        assert empty == len(loose) + 1 == len(before)
        (data,) = db.execute("SELECT data FROM segments WHERE pack = 1 AND number = 5").fetchone()
        flipped = bytearray(data)
        for offset in range(len(flipped) // 2, len(flipped) // 2 + 16):
            flipped[offset] ^= 0xFF
        db.execute("UPDATE segments SET data = ? WHERE pack = 1 AND number = 5", (bytes(flipped),))
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        pieces = db.execute(
            "SELECT pack, offset, length FROM contents WHERE pack = 1 ORDER BY offset"
        ).fetchall()
    db.close()
    inside = [piece for piece in pieces if piece[1] // SEGMENT_BYTES == 5]
    outside = [piece for piece in pieces if piece[1] // SEGMENT_BYTES not in (4, 5, 6)]
    assert inside and outside

    archive = Archive(db_path)
    try:
        store = archive.connection.packs
        # a piece in the damaged segment is refused, one elsewhere in the pack is its bytes
        damaged = read_spans(store, inside[:1])[0]
        assert isinstance(damaged, PackDamaged) and damaged.packs == (1,)
        pack, offset, length = outside[0]
        assert read_spans(store, [outside[0]]) == [before[pack][offset : offset + length]]
        with pytest.raises(PackDamaged):
            b"".join(archive.iter_file(archive.files_of(str(path))[0][0]))
        assert archive.compact() == (len(loose), 0)
    finally:
        archive.close()
    after = _bodies_tolerant(db_path)
    with sqlite3.connect(db_path) as db:
        # the damaged pack is left as it was, in its segments; the other full ones are one frame
        assert db.execute("SELECT data FROM segments WHERE pack = 1 AND number = 5").fetchone() == (
            bytes(flipped),
        )
        framed = [pack for (pack,) in db.execute("SELECT id FROM packs WHERE data != x''")]
        assert framed == loose[1:]
        assert db.execute(
            f"SELECT COUNT(*) FROM segments WHERE pack IN ({','.join(map(str, framed))})"
        ).fetchone() == (0,)
    db.close()
    assert after[1] is None
    assert {pack: body for pack, body in after.items() if pack != 1} == {
        pack: body for pack, body in before.items() if pack != 1
    }


def _bodies_tolerant(db_path: Path) -> dict[int, bytes | None]:
    """`_bodies`, None for a pack that cannot be read."""
    with sqlite3.connect(db_path) as db:
        bodies: dict[int, bytes | None] = {}
        for pack, data in db.execute("SELECT id, data FROM packs ORDER BY id").fetchall():
            parts = db.execute(
                "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack,)
            ).fetchall()
            try:
                bodies[pack] = unpack(data) if data else b"".join(unpack(part) for (part,) in parts)
            except Exception:
                bodies[pack] = None
    db.close()
    return bodies


def test_a_pack_missing_a_segment_is_refused_never_read_shifted(tmp_path: Path) -> None:
    """A loose pack one of whose segments is gone (a damaged database, a bad copy): read whole, the
    rest joined would put every byte after the hole at another place. Its size no longer matches
    what the pack holds, so it is refused (PackDamaged, naming it); a piece in the hole is refused
    too, and one in a segment still there is read from that segment, its own bytes."""
    _path, db_path = _ingested(tmp_path, packs=1.5, seed=32)
    before = _bodies(db_path)[1]
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM loose WHERE pack = 1").fetchone()[0] == 1
        db.execute("DELETE FROM segments WHERE pack = 1 AND number = 5")
        pieces = db.execute(
            "SELECT pack, offset, length FROM contents WHERE pack = 1 ORDER BY offset"
        ).fetchall()
    db.close()
    inside = [piece for piece in pieces if piece[1] // SEGMENT_BYTES == 5]
    after = [piece for piece in pieces if piece[1] // SEGMENT_BYTES == 9]
    assert inside and after
    archive = Archive(db_path)
    try:
        store = archive.connection.packs
        with pytest.raises(PackDamaged) as refused:
            store.pack(1)
        assert refused.value.packs == (1,)
        with pytest.raises(PackDamaged):  # (what `riffd archive verify` asks)
            store.readable(1)
        got = read_spans(store, inside[:1])[0]
        assert isinstance(got, PackDamaged) and got.packs == (1,)
        _pack, offset, length = after[0]
        assert read_spans(store, after[:1]) == [before[offset : offset + length]]
    finally:
        archive.close()
