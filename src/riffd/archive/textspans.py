"""Where a file's texts lie among the text ids: what makes a search filtered by session or project
look at the search index's rows of its files only.

A search takes the texts holding its words newest first and joins each to where it was seen; with a
filter, most of a common word's texts are another session's, and it walked all of them (59,551 for
one word on 1 GB of distinct texts: 47 ms, where the session's own took 1). Text ids are given in
the order texts are first archived, so a file's own texts lie close together, but a file also sees
texts first archived elsewhere (a resumed session's copied history, a short reply every session
has), far below them. `file_texts` keeps, per file, up to FILE_SPANS spans of text ids (lo, hi)
that hold every text id it has a `seen` row for: more ids than it saw (the smallest gaps are closed
to keep the count), never fewer. A filtered search then asks the index for each span of its files,
highest first (riffd.archive.search), and meets the same rows in the same order as one walk over
every match, less those the filter would drop.

The writer keeps them with every batch's `seen` rows (`keep`), in the batch's transaction; an
archive made before them gets them, from `seen`, when first opened to write
(riffd.archive.schema), and one opened read-only without them is searched without them (`spans_of`
returns None). Only this writer keeps them: a development build of format 3 made before them, still
writing to the archive after it gained them, leaves them short, and a filtered search misses that
writer's texts (riffd 0.2, of format 2, never writes to it: the move to format 3 waits for its
daemon to be restarted, riffd.commands.archive_open).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable
from typing import Any

FILE_SPANS = 16  # spans kept per file, at most
SEARCH_SPANS = 64  # spans a search asks the index for, at most
SPAN_ROWS = 2048  # spans a search reads for its filter, at most (else it walks every match)


def merged(spans: Iterable[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """`spans` (lo, hi: inclusive) as the fewest sorted spans that cover them, then, while there
    are more than `most`, with the smallest gaps between them closed."""
    joined: list[list[int]] = []
    for low, high in sorted(spans):
        if joined and low <= joined[-1][1] + 1:
            joined[-1][1] = max(joined[-1][1], high)
        else:
            joined.append([low, high])
    if len(joined) > most:
        # keep the most - 1 widest gaps; close the others
        gaps = sorted(range(1, len(joined)), key=lambda at: joined[at][0] - joined[at - 1][1])
        kept = sorted(gaps[len(joined) - most :])
        starts = [0, *kept]
        ends = [at - 1 for at in kept] + [len(joined) - 1]
        return [(joined[start][0], joined[end][1]) for start, end in zip(starts, ends, strict=True)]
    return [(low, high) for low, high in joined]


def keep(db: sqlite3.Connection, file_id: int, text_ids: Iterable[int]) -> None:
    """Inside the writer's transaction: make the spans of `file_id` cover `text_ids` as well."""
    held = db.execute("SELECT lo, hi FROM file_texts WHERE file_id = ?", (file_id,)).fetchall()
    spans = merged([*held, *((text, text) for text in text_ids)], FILE_SPANS)
    if spans == held:
        return
    # (an append's texts mostly widen the last span: one row written)
    starts = {low for low, _high in spans}
    db.executemany(
        "DELETE FROM file_texts WHERE file_id = ? AND lo = ?",
        [(file_id, low) for low, _high in held if low not in starts],
    )
    db.executemany(
        "INSERT INTO file_texts(file_id, lo, hi) VALUES (?, ?, ?) "
        "ON CONFLICT(file_id, lo) DO UPDATE SET hi = excluded.hi",
        [(file_id, low, high) for low, high in set(spans) - set(held)],
    )


def fill(db: sqlite3.Connection) -> None:
    """Inside the caller's transaction, with `file_texts` empty: every file's spans, from `seen`
    (for an archive made before them)."""
    rows: list[tuple[int, int, int]] = []
    by_file = itertools.groupby(
        db.execute("SELECT file_id, text FROM seen ORDER BY file_id"), key=lambda row: row[0]
    )
    for file_id, seen in by_file:  # (one file's texts in memory at a time)
        rows += [
            (file_id, low, high)
            for low, high in merged(((text, text) for _file, text in seen), FILE_SPANS)
        ]
    db.executemany("INSERT INTO file_texts(file_id, lo, hi) VALUES (?, ?, ?)", rows)


def spans_of(
    db: sqlite3.Connection, of_files: str, params: list[Any]
) -> list[tuple[int, int]] | None:
    """The spans of text ids, highest first, that hold every text the files matching `of_files`
    (conditions on `files f`, with `params`) have seen: [] when they have seen none. None when the
    search is as well off walking every match: the archive keeps no spans (made before them,
    opened read-only), or the filter takes so many files (a project prefix of most of them) that
    their spans are more than SPAN_ROWS rows or hold most text ids."""
    try:
        found = db.execute(
            f"SELECT t.lo, t.hi FROM files f JOIN file_texts t ON t.file_id = f.id WHERE 1{of_files} "
            f"LIMIT {SPAN_ROWS + 1}",
            params,
        ).fetchall()
        top = db.execute("SELECT MAX(text) FROM seen").fetchone()[0] or 0
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None
    if len(found) > SPAN_ROWS:
        return None
    spans = merged(found, SEARCH_SPANS)
    if sum(high - low + 1 for low, high in spans) > top / 2:
        return None
    return spans[::-1]
