"""Filtered searches look only where their files' texts lie (riffd.archive.textspans), and find
exactly what a walk over every match finds."""

from __future__ import annotations

import sqlite3
import sys
from itertools import pairwise
from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from conftest import REPO_DIR
from riffd.archive import textspans
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive

if str(REPO_DIR / "bench") not in sys.path:
    sys.path.insert(0, str(REPO_DIR / "bench"))

import filtered_bench

PROJECTS = ("/home/ana/alpha", "/home/ana/beta", "/home/bo/gamma")


def _line(session: str, cwd: str, role: str, text: str, number: int) -> bytes:
    return (
        orjson.dumps(
            {
                "type": role,
                "uuid": f"{session}-{number}",
                "parentUuid": f"{session}-{number - 1}" if number > 1 else None,
                "sessionId": session,
                "cwd": cwd,
                "timestamp": f"2025-0{1 + number % 9}-{10 + number % 18}T10:00:{number % 60:02d}Z",
                "message": {"role": role, "content": text},
            }
        )
        + b"\n"
    )


def _write(
    path: Path, session: str, cwd: str, texts: list[str], first: int = 1, role: str | None = None
) -> None:
    """Append `texts` as message lines, user and assistant in turn unless `role` is given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        for number, text in enumerate(texts, first):
            out.write(_line(session, cwd, role or ("user", "assistant")[number % 2], text, number))


def _build(tmp_path: Path) -> tuple[Path, list[Path]]:
    """24 sessions in three projects, each with its own words and the reply every session has; then
    one that repeats a word of 20 of them (more places than a file keeps spans for); then appends to
    the first sessions, with new words and one of the last session's."""
    db_path = tmp_path / "state" / "archive.db"
    db_path.parent.mkdir(parents=True)
    paths = []
    archive = Archive(db_path)
    try:
        for number in range(24):
            path = tmp_path / "projects" / f"p{number % 3}" / f"s{number:02d}.jsonl"
            own = [f"zebra{number} common words", f"yak{number} common", "ok thanks common"]
            _write(path, f"s{number:02d}", PROJECTS[number % 3], own)
            ingest_file(archive, path)
            paths.append(path)
        hub = tmp_path / "projects" / "p0" / "hub.jsonl"
        # (a text is the same text in the same role: the sessions' yak lines are the user's)
        _write(
            hub,
            "hub",
            PROJECTS[0],
            [f"yak{n} common" for n in range(20)] + ["hub own common"],
            role="user",
        )
        ingest_file(archive, hub)
        paths.append(hub)
        for number in range(3):
            _write(
                paths[number],
                f"s{number:02d}",
                PROJECTS[number % 3],
                [f"late{number} common", "hub own common"],
                first=4,
            )
            ingest_file(archive, paths[number])
    finally:
        archive.close()
    return db_path, paths


def _without_spans(db_path: Path, target: Path) -> Path:
    """A copy of the archive as one made before the spans were kept (the bench's anchor)."""
    target.mkdir(parents=True)
    return filtered_bench.without_spans(db_path, target)


QUERIES = [
    *(
        {"query": word, **where}
        for word in ("common", "zebra3", "yak7", "ok thanks", "late1", "hub own", "words")
        for where in (
            {},
            *({"session": f"s{n:02d}"} for n in range(24)),
            {"session": "hub"},
            {"session": "nobody"},
            *({"project": project} for project in PROJECTS),
            {"project": "/home/ana"},
            {"project": "/nowhere"},
            {"project": PROJECTS[0], "session": "s03", "role": "assistant"},
            {"project": PROJECTS[1], "since": 1_740_000_000},
        )
    ),
    *({"query": "common", "session": f"s{n:02d}", "limit": 2} for n in range(24)),
]


def _hits(db_path: Path) -> list[object]:
    archive = Archive(db_path, read_only=True)
    try:
        return [archive.search(**query) for query in QUERIES]
    finally:
        archive.close()


def _assert_spans_hold_every_text(db_path: Path) -> None:
    db = sqlite3.connect(db_path)
    try:
        outside = db.execute(
            "SELECT COUNT(*) FROM seen s WHERE NOT EXISTS (SELECT 1 FROM file_texts t WHERE "
            "t.file_id = s.file_id AND s.text BETWEEN t.lo AND t.hi)"
        ).fetchone()[0]
        assert outside == 0
        most = db.execute(
            "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM file_texts GROUP BY file_id)"
        ).fetchone()[0]
        assert most == textspans.FILE_SPANS  # the hub's places were more than it keeps
    finally:
        db.close()


def test_a_filtered_search_finds_what_a_walk_over_every_match_finds(tmp_path: Path) -> None:
    db_path, _paths = _build(tmp_path)
    _assert_spans_hold_every_text(db_path)
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        # the filters do narrow the walk: a session's spans leave out most text ids
        top = db.execute("SELECT MAX(text) FROM seen").fetchone()[0]
        spans = textspans.spans_of(db, " AND f.session_id = ?", ["s05"])
        assert spans is not None and sum(hi - lo + 1 for lo, hi in spans) < top / 4
        assert textspans.spans_of(db, " AND f.session_id = ?", ["nobody"]) == []
    finally:
        db.close()
    reference = _without_spans(db_path, tmp_path / "reference")
    found = _hits(db_path)
    assert found == _hits(reference)
    assert sum(map(bool, found)) > len(QUERIES) / 2  # (most queries find something)


def test_an_archive_made_before_the_spans_gets_them_when_opened_to_write(tmp_path: Path) -> None:
    db_path, _paths = _build(tmp_path)
    before = _without_spans(db_path, tmp_path / "before")
    expected = _hits(before)  # searched read-only, without spans
    Archive(before).close()  # opened to write: filled from `seen`
    _assert_spans_hold_every_text(before)
    assert _hits(before) == expected


@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 40)), max_size=60),
    st.integers(1, 20),
)
def test_merged_spans_cover_every_id_in_at_most_so_many_spans(
    raw: list[tuple[int, int]], most: int
) -> None:
    spans = [(low, low + width) for low, width in raw]
    result = textspans.merged(spans, most)
    assert len(result) <= most
    assert all(low <= high for low, high in result)
    assert all(a[1] + 1 < b[0] for a, b in pairwise(result))  # sorted, apart
    assert all(any(lo <= low and high <= hi for lo, hi in result) for low, high in spans)
    exact = textspans.merged(spans, 10**6)
    if len(exact) <= most:
        assert result == exact
    covered = {n for low, high in exact for n in range(low, high + 1)}
    assert covered == {n for low, high in spans for n in range(low, high + 1)}
