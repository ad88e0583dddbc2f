"""Loose packs: packs filled while lines come in are stored fast, then compressed again at the
settled level (`riffd archive compact`, the end of `riffd archive ingest`, the daemon once quiet)
without changing a byte of what the archive restores or finds. Real transcripts written in tmp_path,
real `riffd` subprocesses, real SQLite."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest

from helpers.run import run_riffd
from helpers.wordy import WORDS, write_session
from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PACK_BYTES, PackDamaged
from riffd.archive.spans import read_spans
from riffd.archive.store import Archive


def riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    environment = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    result = run_riffd(*args, config=config, env=environment, timeout=300)
    assert result.returncode == 0, f"riffd {args} exited {result.returncode}:\n{result.stderr}"
    return result


def packs(db_path: Path) -> tuple[int, int]:
    """(loose packs, bytes of every pack's frame or segments)."""
    db = sqlite3.connect(db_path)
    try:
        return (
            db.execute("SELECT COUNT(*) FROM loose").fetchone()[0],
            db.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM packs").fetchone()[0]
            + db.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM segments").fetchone()[0],
        )
    finally:
        db.close()


def restored(tmp_path: Path, session: str, folder: str) -> bytes:
    (tmp_path / folder).mkdir()
    riffd(tmp_path, "archive", "restore", session, "--to", str(tmp_path / folder))
    return next((tmp_path / folder).rglob("*.jsonl")).read_bytes()


@pytest.mark.slow  # end to end: ingest, search, restore and compact 10 MB, each a riffd process
def test_packs_filled_during_an_ingest_are_compacted_later_without_changing_a_byte(
    tmp_path: Path,
) -> None:
    transcript = (
        tmp_path / "projects" / "-home-u-proj" / "00000000-0000-4000-8000-000000000007.jsonl"
    )
    original = write_session(transcript, 5000, seed=7)
    assert len(original) > 2 * PACK_BYTES
    riffd(tmp_path, "archive", "ingest", "--no-compact", str(tmp_path / "projects"))
    db_path = tmp_path / "state" / "archive.db"
    loose, loose_bytes = packs(db_path)
    # the full packs; the open one was settled at the settled level by the ingest's end
    assert loose >= 2
    word = WORDS[5]
    hits_before = riffd(tmp_path, "archive", "search", word, "--json").stdout
    assert restored(tmp_path, "00000000", "before") == original

    result = riffd(tmp_path, "archive", "compact")
    assert f"compressed {loose} pack(s) at the settled level" in result.stderr
    left, tight_bytes = packs(db_path)
    assert left == 0 and tight_bytes < loose_bytes
    assert restored(tmp_path, "00000000", "after") == original
    assert riffd(tmp_path, "archive", "search", word, "--json").stdout == hits_before
    assert "compressed" not in riffd(tmp_path, "archive", "compact").stderr  # nothing left to do


@pytest.mark.slow  # end to end: `riffd archive ingest` of 10 MB
def test_a_plain_ingest_leaves_no_loose_pack(tmp_path: Path) -> None:
    write_session(
        tmp_path / "projects" / "-home-u-proj" / "00000000-0000-4000-8000-000000000003.jsonl",
        5000,
        3,
    )
    riffd(tmp_path, "archive", "ingest", str(tmp_path / "projects"))
    loose, _size = packs(tmp_path / "state" / "archive.db")
    assert loose == 0


@pytest.mark.slow  # three packs and more of distinct text, compacted at level 17 (about 7 s)
def test_compaction_stops_when_asked_and_never_replaces_a_pack_that_changed(tmp_path: Path) -> None:
    transcript = tmp_path / "projects" / "p" / "00000000-0000-4000-8000-000000000005.jsonl"
    original = write_session(transcript, 7000, seed=5)
    archive = Archive(tmp_path / "archive.db")
    try:
        ingest_file(archive, transcript)
        loose, _size = packs(tmp_path / "archive.db")
        assert loose >= 3
        answers = iter([True, False])
        assert archive.compact(lambda: next(answers)) == (1, loose - 1)

        # A frame that is no longer what was compressed (here: rewritten behind compact's back) is
        # left alone.
        db = sqlite3.connect(tmp_path / "archive.db")
        pack_id, data = db.execute(
            "SELECT loose.pack, packs.data FROM loose JOIN packs ON packs.id = loose.pack "
            "ORDER BY loose.pack LIMIT 1"
        ).fetchone()
        db.close()
        with archive.connection.writing():  # the transaction compact itself uses
            archive.connection.packs.replace_loose(pack_id, data + b"stale", b"tight")
        assert packs(tmp_path / "archive.db")[0] == loose - 1
        assert archive.compact() == (loose - 1, 0)
        rebuilt = b"".join(archive.iter_file(archive.files()[0][0]))
        assert hashlib.sha256(rebuilt).digest() == hashlib.sha256(original).digest()
    finally:
        archive.close()


def test_normalise_changes_only_what_the_definition_says():
    """The search key's normalisation, sped up (it changes only runs that need it), equals its
    definition: CRLF as LF, every run of spaces and tabs as one space, trimmed."""
    import re

    from hypothesis import given
    from hypothesis import strategies as st

    from riffd.archive.contents import normalise

    runs = re.compile(r"[ \t]+")

    @given(
        st.text(
            alphabet=st.sampled_from([" ", "\t", "\r", "\n", "a", "é", "\u3000", "\xa0"]),
            max_size=30,
        )
    )
    def same(text: str) -> None:
        assert normalise(text) == runs.sub(" ", text.replace("\r\n", "\n")).strip()

    same()


@pytest.mark.slow  # packs of distinct text, one compacted at level 17 (about 6 s)
def test_a_snippet_read_from_part_of_a_pack_is_the_bytes_the_whole_pack_holds(
    tmp_path: Path,
) -> None:
    """Search reads pieces by decompressing their pack once, as far as the last, or only the
    segments they lie in (riffd.archive.spans): from a loose pack (in its segments), a compacted one
    (level 17) and the open pack (in segments), on a fresh connection (nothing held in memory),
    every piece is the bytes of the whole pack at its place, at the start, middle and end of a
    pack."""
    path = tmp_path / "projects" / "-p" / "00000000-0000-4000-8000-000000000005.jsonl"
    write_session(path, int(PACK_BYTES * 2.5 / 2100), seed=5)
    archive = Archive(tmp_path / "archive.db")
    ingest_file(archive, path)
    archive.close()
    kinds = set()
    for compacted in (False, True):
        archive = Archive(tmp_path / "archive.db")
        try:
            if compacted:
                assert archive.compact()[0] >= 1
                archive.close()
                archive = Archive(tmp_path / "archive.db")
            store = archive.connection.packs
            rows = archive.connection.db.execute(
                "SELECT contents.pack, offset, length, LENGTH(packs.data), "
                "packs.id IN (SELECT pack FROM loose) FROM contents "
                "JOIN packs ON packs.id = contents.pack ORDER BY contents.id"
            ).fetchall()
            assert len(rows) > 100
            whole = {pack: store.pack(pack) for pack, *_ in rows}
            store.cache.clear()  # span reads from the database again
            framed = set()
            for pack, offset, length, frame, loose in rows[::7] + rows[-3:]:
                kinds.add("segments" if not frame else "loose" if loose else "settled")
                assert read_spans(store, [(pack, offset, length)]) == [
                    whole[pack][offset : offset + length]
                ]
                if frame:
                    framed.add(pack)
            # many of a pack, in any order
            several = random.Random(3).sample([row[:3] for row in rows], 40)
            assert read_spans(store, several) == [
                whole[pack][offset : offset + length] for pack, offset, length in several
            ]
            # read in part (a frame as far as needed, only the segments needed), never whole
            # (which caches it); before compaction every pack is in its segments, after it only
            # the open pack
            assert bool(framed) == compacted and not store.cache
            # a text piece: its JSON string
            word = orjson.loads(read_spans(store, [rows[-1][:3]])[0]).split()[0]
            assert archive.search(word)
        finally:
            archive.close()
    assert kinds == {"segments", "settled"}


@pytest.fixture(scope="module")
def three_packs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of one session over three packs and a half, compacted (made once: tests copy
    it)."""
    folder = tmp_path_factory.mktemp("three-packs")
    path = folder / "projects" / "-p" / "00000000-0000-4000-8000-000000000006.jsonl"
    write_session(path, int(PACK_BYTES * 3.5 / 2100), seed=6)
    archive = Archive(folder / "archive.db")
    try:
        ingest_file(archive, path)
        assert archive.compact()[0] >= 3
        archive.settle()
    finally:
        archive.close()
    return folder / "archive.db"


@pytest.mark.slow  # the three packs' archive, compacted at level 17 (about 8 s)
def test_frames_read_side_by_side_name_only_the_damaged_pack(
    tmp_path: Path, three_packs: Path
) -> None:
    """Search decompresses the frames of several packs in threads: a damaged frame among them
    makes only its own pieces PackDamaged (naming it); every other piece is its pack's bytes."""
    shutil.copy2(three_packs, tmp_path / "archive.db")
    archive = Archive(tmp_path / "archive.db")
    store = archive.connection.packs
    rows = archive.connection.db.execute(
        "SELECT contents.pack, offset, length FROM contents JOIN packs ON packs.id = "
        "contents.pack WHERE LENGTH(packs.data) > 0 ORDER BY contents.id"
    ).fetchall()
    whole = {pack: store.pack(pack) for pack, *_ in rows}
    archive.close()
    framed = sorted(whole)
    assert len(framed) >= 3
    damaged = framed[1]
    with sqlite3.connect(tmp_path / "archive.db") as db:
        (data,) = db.execute("SELECT data FROM packs WHERE id = ?", (damaged,)).fetchone()
        flipped = bytearray(data)
        for offset in range(len(flipped) // 3, len(flipped) // 3 + 16):
            flipped[offset] ^= 0xFF
        db.execute("UPDATE packs SET data = ? WHERE id = ?", (bytes(flipped), damaged))
    db.close()
    wanted = random.Random(6).sample([tuple(row) for row in rows], 30)
    assert {pack for pack, _offset, _length in wanted} >= set(framed[:3])
    archive = Archive(tmp_path / "archive.db")
    try:
        got = read_spans(archive.connection.packs, wanted)
    finally:
        archive.close()
    for (pack, offset, length), piece in zip(wanted, got, strict=True):
        if pack == damaged:
            assert isinstance(piece, PackDamaged) and piece.packs == (damaged,)
        else:
            assert piece == whole[pack][offset : offset + length]


@pytest.mark.slow  # two packs and a 1.6 MB image line (about 4 s)
def test_a_pack_that_starts_with_an_image_is_read_in_part_not_whole(tmp_path: Path) -> None:
    """A pack whose first bytes compress worse than the rest (a pasted image) is read and
    decompressed only as far as its pieces need, like any other (an earlier version estimated how
    much of the frame to read from the share of the pack, came up short on such a pack, and
    decompressed it whole): the same bytes, and the pack never decompressed whole (which keeps it
    cached)."""
    path = tmp_path / "projects" / "-p" / "00000000-0000-4000-8000-000000000007.jsonl"
    text = write_session(path, int(PACK_BYTES * 2 / 2100), seed=7)
    image = base64.b64encode(random.Random(7).randbytes(1_200_000)).decode()
    first = {
        "type": "user",
        "uuid": "image-0000-4000-8000-000000000000",
        "parentUuid": None,
        "sessionId": "00000000-0000-4000-8000-000000000007",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": image},
                }
            ],
        },
    }
    path.write_bytes(orjson.dumps(first) + b"\n" + text)
    archive = Archive(tmp_path / "archive.db")
    try:
        ingest_file(archive, path)
        assert archive.compact()[0] >= 1
        store = archive.connection.packs
        first_pack = archive.connection.db.execute(
            "SELECT MIN(id) FROM packs WHERE LENGTH(data) > 0"
        ).fetchone()[0]
        rows = archive.connection.db.execute(
            "SELECT pack, offset, length FROM contents WHERE pack = ? ORDER BY offset",
            (first_pack,),
        ).fetchall()
        whole = store.pack(first_pack)
        middle = [row for row in rows if len(whole) * 0.4 < row[1] < len(whole) * 0.6]
        assert middle
        store.cache.clear()
        assert read_spans(store, middle[:3]) == [
            whole[offset : offset + length] for _pack, offset, length in middle[:3]
        ]
        assert not store.cache  # read in part: never decompressed whole
    finally:
        archive.close()


@pytest.mark.slow  # the three packs' archive (built once for the slow tests)
def test_search_reads_frames_where_the_system_has_no_cpu_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, three_packs: Path
) -> None:
    """macOS has no `os.sched_getaffinity`: the threads are sized by the CPU count there."""
    shutil.copy2(three_packs, tmp_path / "archive.db")
    archive = Archive(tmp_path / "archive.db")
    try:
        monkeypatch.delattr(os, "sched_getaffinity", raising=False)
        assert archive.search(WORDS[3])
    finally:
        archive.close()
