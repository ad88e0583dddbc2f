"""What a search filtered by session or project costs, with the spans of text ids
(riffd.archive.textspans) and without them, on one archive.

Run by hand from the repository root, on an archive archive_bench made and kept::

    python3 bench/archive_bench.py --keep ...        # prints where it kept the distinct archive
    python3 bench/filtered_bench.py --archive DIR/state-distinct/archive.db
    python3 bench/filtered_bench.py --archive ... --write docs/figures/filtered.md

The words: the `--words` words held by most texts in the archive's search index (where a filter
walked furthest). The filters: every session the archive holds, every project, and the prefix `/`
that every file has (for which the spans are left out: walking serves it best). Each word is
searched under each filter (`Archive.search(word, ...)`, limit 20) on a fresh read-only
`Archive`, as one `riffd archive search` run opens it, once on the archive and once on a copy
without `file_texts` (its anchor: a search that walks every match, as before the spans), the two
alternating. Printed: p50, p95 and max of each, their ratio, and whether every search found the same
hits in both.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import figures  # noqa: E402

from riffd.archive.store import Archive  # noqa: E402


def common_words(db: sqlite3.Connection, count: int) -> list[tuple[str, int]]:
    """The `count` words (of letters, four or more) of most texts in the search index, each with
    how many texts hold it: where a filtered search walked furthest."""
    db.execute("CREATE VIRTUAL TABLE temp.vocabulary USING fts5vocab(main, search, row)")
    return [
        (str(word), int(texts))
        for word, texts in db.execute(
            "SELECT term, doc FROM temp.vocabulary WHERE term GLOB '[a-z][a-z][a-z][a-z]*' "
            "AND term NOT GLOB '*[^a-z]*' ORDER BY doc DESC LIMIT ?",
            (count,),
        )
    ]


def without_spans(db_path: Path, folder: Path) -> Path:
    """A copy of the archive with no `file_texts`: searched as an archive made before them."""
    copy = folder / "archive.db"
    # (SQLite's own copy: what the archive's write-ahead log holds too)
    source = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db = sqlite3.connect(copy)
    source.backup(db)
    source.close()
    db.execute("DROP TABLE IF EXISTS file_texts")
    db.commit()
    db.close()
    return copy


def timed(
    db_path: Path, word: str, where: dict[str, str]
) -> tuple[float, list[tuple[object, ...]]]:
    started = time.perf_counter()
    archive = Archive(db_path, read_only=True)
    try:
        hits = archive.search(word, **where)
    finally:
        archive.close()
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, [(hit.session_id, hit.path, hit.line, hit.snippet) for hit in hits]


def figures_of(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50": statistics.median(times),
        "p95": times[min(len(times) - 1, int(0.95 * len(times)))],
        "max": times[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--archive", type=Path, required=True, help="an archive.db to search")
    parser.add_argument("--words", type=int, default=2, help="how many common words; default 2")
    parser.add_argument("--write", type=Path, metavar="FILE", help="also write the docs' table")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="riffd-filtered-bench-") as folder:
        db = sqlite3.connect(f"file:{args.archive}?mode=ro", uri=True)
        try:
            if (
                db.execute("SELECT name FROM sqlite_schema WHERE name = 'file_texts'").fetchone()
                is None
            ):
                print(
                    f"{args.archive} has no file_texts: open it to write once with this riffd "
                    "(`riffd --config ... archive compact`), then run again",
                    file=sys.stderr,
                )
                return 1
            common = common_words(db, args.words)
            words = [word for word, _texts in common]
            sessions = [
                row[0]
                for row in db.execute(
                    "SELECT DISTINCT session_id FROM files WHERE session_id IS NOT NULL"
                )
            ]
            projects = [
                row[0]
                for row in db.execute(
                    "SELECT DISTINCT project FROM files WHERE project IS NOT NULL"
                )
            ]
            seen = db.execute("SELECT COUNT(*) FROM seen").fetchone()[0]
        finally:
            db.close()
        anchor_path = without_spans(args.archive, Path(folder))
        kinds = {
            "session": [{"session": session} for session in sessions],
            # each project, and a prefix every file has (the filter a walk serves best)
            "project": [{"project": project} for project in projects] + [{"project": "/"}],
        }
        times: dict[str, tuple[list[float], list[float]]] = {kind: ([], []) for kind in kinds}
        same = True
        for word in words:
            for kind, filters in kinds.items():
                for where in filters:
                    took, hits = timed(args.archive, word, where)
                    took_anchor, hits_anchor = timed(anchor_path, word, where)
                    times[kind][0].append(took)
                    times[kind][1].append(took_anchor)
                    same = same and hits == hits_anchor
    rows = []
    for kind, (spans, anchor) in times.items():
        with_spans, walking = figures_of(spans), figures_of(anchor)
        rows += [
            (
                f"by {kind}, {len(spans)} searches: without spans (the anchor: every match walked)",
                f"{walking['p50']:.1f} ms",
                f"{walking['p95']:.1f} ms",
                f"{walking['max']:.1f} ms",
                "",
            ),
            (
                f"by {kind}: with `file_texts`",
                f"**{with_spans['p50']:.1f} ms**",
                f"**{with_spans['p95']:.1f} ms**",
                f"{with_spans['max']:.1f} ms",
                f"p50 {with_spans['p50'] / walking['p50']:.2f}, p95 {with_spans['p95'] / walking['p95']:.2f}",
            ),
        ]
    table = figures.markdown_table(["search", "p50", "p95", "max", "ratio to the anchor"], rows)
    notes = [
        "The words "
        + ", ".join(f"{word!r} ({texts:,} texts)" for word, texts in common)
        + f" (held by most texts), in each of {len(sessions)} sessions and {len(projects)} projects and "
        f"under `/`, an archive of {seen:,} texts seen; each on a fresh read-only "
        f"`Archive`, the two archives alternating. Same hits in every search: {'yes' if same else 'NO'}."
    ]
    print(table)
    print(*notes, sep="\n")
    if args.write:
        figures.write(
            args.write, figures.shown_command("filtered_bench.py", sys.argv[1:]), table, notes
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
