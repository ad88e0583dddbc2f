"""What the archive costs: ingest speed against the bare parse rate, search latency, storage against
gzip -6.

Run by hand from the repository root::

    python3 bench/archive_bench.py          # the 1 GB corpus of bench/scan_bench.py (reused if cached)
    python3 bench/archive_bench.py --quick  # a 100 MB corpus in a temporary folder, 100 queries
    python3 bench/archive_bench.py --json > result.json
    python3 bench/archive_bench.py --write docs/figures/archive.md  # the table the docs include

1. ingest: the 1 GB corpus that bench/scan_bench.py builds (its generator, imported: real sessions
   copied with fresh ids; `bench/out/projects` is reused when its manifest matches, else built and
   kept), and a corpus of distinct texts made from it (`distinct_corpus`: every string of 20+
   characters in a line's content, tool input or `toolUseResult` replaced by as many characters of
   Zipf-distributed made-up words; structure, ids and sizes kept), whose pieces do not repeat. After
   one read to warm the page cache, each in a fresh child process measured as scan_bench measures
   (wall time, the child's own peak RSS through scan_bench's launcher): the baseline (read in 1 MiB
   chunks, split lines, `orjson.loads` every line: scan_bench's BASELINE_CHILD), then `python3 -m
   riffd --config <tmp>/riffd.toml archive ingest --no-compact <corpus>` into an empty archive
   (everything archived; the packs filled meanwhile at zstd level 3), then `riffd archive compact`
   (those packs at level 17, as the daemon does once quiet). MB = 10^6 bytes. And the real corpus
   itself (`../shared/corpus/real`, 4 MB of distinct real sessions), in this process, since a
   child's start-up would be most of its time: best of 5 of `ingest_files` on every file, with its
   reader process, into a fresh archive (what `riffd archive ingest --no-compact` does before its
   `settle`, a fixed cost of about 0.3 s, the open pack compressed at level 17, which would be most
   of the time at 4 MB), against best of 5 of the same baseline here.
2. search: `--queries` (200) queries on each archive, in-process through
   `riffd.archive.store.Archive.search` (limit 20): each on a fresh `Archive` (as one `riffd archive
   search` run; the goal is judged on this), then all on one `Archive` after 20 warm-up queries (its
   pack cache warm). Words are sampled (seeded) from the texts of random lines of the corpus, 4+
   letters: a third one word, a third two words, a third one word with a filter (project, session,
   role or since). Reported: p50, p95, max in ms and the mean hit count.
3. storage: the archive's size once its last connection is closed (SQLite then checkpoints and
   removes the -wal and -shm files; any left would be counted) against the raw bytes and against
   `gzip -6`, file by file (the sum of `gzip -6 -c FILE` sizes, the real gzip binary), for (a) the
   real corpus (`../shared/corpus/real`, every `*.jsonl`), (b) the real corpus plus `--resumed` (3)
   resumed copies of each session file (what older Claude Code versions did: the history copied into
   a new session file with a new sessionId and new line uuids, content and results unchanged), and
   (c) the 1 GB corpus of step 1. Each archive is broken down by SQLite's `dbstat` (bytes per table
   and index).

4. whole sessions (bench/whole_bench.py; `--only whole` runs it alone, in about a minute): the real
   sessions laid out as the client lays them out with the files it keeps beside them (saved outputs,
   checkpoints, subagents' settings, task files, plans): the rate `WholeFiles.keep` stores files at,
   and the archive of transcripts and files against gzip -6 of every one of them.

Goals (from the issues): ingest at 50 MB/s or more; the archive, search index included, smaller than
gzip -6 (whole sessions too); search p95 under 20 ms (issue 31). A missed goal is reported, not an error; exit
1 only when a measurement fails. Archives are made in a temporary folder (`--tmp`), removed at the
end unless `--keep`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import figures
import orjson
import scan_bench
import whole_bench

MB = 1_000_000
P95_GOAL_MS = 20.0  # issue 31 (it was 50)
INGEST_GOAL_MB_S = 50.0
CLEAN_ENV = ("RIFFD_CONFIG", "RIFFD_STATE_DIR", "CLAUDE_CONFIG_DIR")
# The line fields a resumed copy renews; a quoted key followed by `:"` never occurs inside a JSON
# string value.
ENVELOPE_IDS = re.compile(
    rb'"(uuid|parentUuid|logicalParentUuid|leafUuid|sourceToolAssistantUUID|sessionId)"(\s*:\s*)"([^"\\]*)"'
)
WORD = re.compile(r"[A-Za-z]{4,}")


def resumed_copy(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Given a session file's bytes, return (a resumed copy of it, the copy's session id): every
    line's own ids (uuid, parentUuid, logicalParentUuid, leafUuid, sourceToolAssistantUUID) renewed
    consistently, every sessionId the new one, all other bytes (message content, tool results)
    unchanged."""
    ids = scan_bench.IdMaker(rng.getrandbits(64))
    session_id = ids.uuid()
    renewed: dict[bytes, bytes] = {}

    def renew(match: re.Match[bytes]) -> bytes:
        key, colon, value = match.groups()
        value = session_id if key == b"sessionId" else renewed.setdefault(value, ids.uuid())
        return b'"' + key + b'"' + colon + b'"' + value + b'"'

    return ENVELOPE_IDS.sub(renew, data), session_id.decode()


# --- building
# ---------------------------------------------------------------------------------------------


def big_corpus(args: argparse.Namespace) -> Path:
    """Return the projects folder of scan_bench's corpus of `args.size_mb` in `args.out` (reused,
    else built)."""
    manifest_path = args.out / scan_bench.MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    # keep scan_bench's single file as it is
    single = (manifest.get("single") or {}).get("size_mb", 0)
    namespace = argparse.Namespace(
        out=args.out,
        real=args.real,
        size_mb=args.size_mb,
        single_mb=single,
        seed=args.seed,
        rebuild=False,
    )
    scan_bench.ensure_corpus(namespace)
    return args.out / "projects"


def real_corpus(real: Path, target: Path) -> Path:
    """Copy every real transcript under `target`; return it."""
    for source in sorted(real.rglob("*.jsonl")):
        copy = target / source.relative_to(real)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    return target


def resumed_corpus(real: Path, target: Path, copies: int, seed: int) -> Path:
    """The real corpus plus `copies` resumed copies of each session file (not of subagent files)
    under `target`."""
    real_corpus(real, target)
    rng = random.Random(seed)
    for source in sorted(real.rglob("*.jsonl")):
        if source.parent.name == "subagents":
            continue
        data = source.read_bytes()
        for _ in range(copies):
            copy, session_id = resumed_copy(data, rng)
            (target / source.parent.relative_to(real) / f"{session_id}.jsonl").write_bytes(copy)
    return target


SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + [
    "th",
    "st",
    "qu",
    "sh",
    "ch",
    "ng",
]


def word_pool(rng: random.Random, words: int = 50_000, length: int = 16_000_000) -> str:
    """A long run of words drawn Zipf-like (the n-th word's weight 1/n) from `words` made-up words
    of 2 to 5 syllables: the text a distinct corpus's strings are cut from."""
    vocabulary = sorted(
        {"".join(rng.choices(SYLLABLES, k=rng.randint(2, 5))) for _ in range(words)}
    )
    rng.shuffle(vocabulary)
    weights = [1 / rank for rank in range(1, len(vocabulary) + 1)]
    drawn = rng.choices(vocabulary, cum_weights=list(itertools.accumulate(weights)), k=length // 7)
    return " ".join(drawn)


def distinct_corpus(source: Path, target: Path, seed: int) -> Path:
    """A copy of the corpus under `source` whose texts are all distinct: every string of 20
    characters or more in a line's message content, tool input or `toolUseResult` is replaced by as
    many characters cut from a random place of a Zipf-distributed word pool (lines, structure, ids
    and sizes stay as they are). A corpus of copies of a few sessions has few distinct texts with
    many occurrences each; this one has as many texts as lines."""
    rng = random.Random(seed)
    pool = word_pool(rng)
    top = len(pool) - 1

    def renew(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) < 20:
                return value
            size = min(len(value), top // 2)
            start = rng.randrange(top - size)
            return pool[start : start + size]
        if isinstance(value, list):
            return [renew(item) for item in value]
        if isinstance(value, dict):
            return {
                key: renew(item) if key not in ("type", "id", "tool_use_id", "name") else item
                for key, item in value.items()
            }
        return value

    for path in sorted(source.rglob("*.jsonl")):
        copy = target / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as lines, open(copy, "wb") as out:
            for raw in lines:
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    out.write(raw)
                    continue
                if isinstance(line, dict):
                    message = line.get("message")
                    if isinstance(message, dict) and "content" in message:
                        line["message"] = dict(message, content=renew(message["content"]))
                    if "toolUseResult" in line:
                        line["toolUseResult"] = renew(line["toolUseResult"])
                out.write(orjson.dumps(line) + b"\n")
    return target


# --- measuring
# --------------------------------------------------------------------------------------------


def ingest(corpus: Path, work: Path, name: str) -> tuple[scan_bench.Run, scan_bench.Run, int, Path]:
    """Run `riffd archive ingest --no-compact` on `corpus` into a fresh state folder `work/name`,
    then `riffd archive compact`; return both runs, the archive's size between them, and the
    database."""
    state = work / f"state-{name}"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    config = state / "riffd.toml"
    config.write_text(f'state_dir = "{state}"\n')
    runs = []
    loose_size = 0
    for action in (["ingest", "--no-compact", str(corpus)], ["compact"]):
        command = [sys.executable, "-m", "riffd", "--config", str(config), "archive", *action]
        run = scan_bench.run_child(command, state / f"{action[0]}.out")
        if run.exit_code != 0:
            raise RuntimeError(
                f"{' '.join(action[:1])} of {corpus} exited {run.exit_code}:\n"
                f"{run.report['stderr_tail']}"
            )
        runs.append(run)
        if not loose_size:
            loose_size = archive_size(state / "archive.db")["bytes"]
    return runs[0], runs[1], loose_size, state / "archive.db"


def ingest_in_process(corpus: Path, work: Path, repeat: int = 5) -> dict[str, Any]:
    """Ingest every transcript under `corpus` into a fresh archive, `repeat` times (not settled: see
    the module), and run the baseline as many times, interleaved, in this process (BASELINE_CHILD's
    work, each file read whole: the files are small); the best of each."""
    from riffd.archive.ingest import ingest_files
    from riffd.archive.store import Archive

    files = sorted(corpus.rglob("*.jsonl"))
    size = sum(path.stat().st_size for path in files)
    ingest_times, baseline_times = [], []
    lines = 0
    for attempt in range(repeat):
        folder = work / f"in-process-{attempt}"
        folder.mkdir(parents=True)
        archive = Archive(folder / "archive.db")
        started = time.perf_counter()
        for _path, added in ingest_files(archive, files):
            if isinstance(added, OSError):
                raise added
        ingest_times.append(time.perf_counter() - started)
        archive.close()
        shutil.rmtree(folder)
        started = time.perf_counter()
        lines = 0
        for path in files:
            for line in path.read_bytes().split(b"\n"):
                if line:
                    orjson.loads(line)
                    lines += 1
        baseline_times.append(time.perf_counter() - started)
    seconds, baseline = min(ingest_times), min(baseline_times)
    return {
        "corpus": "real (in-process)",
        "bytes": size,
        "lines": lines,
        "baseline_seconds": round(baseline, 4),
        "baseline_mb_per_s": round(size / MB / baseline, 1),
        "seconds": round(seconds, 4),
        "mb_per_s": round(size / MB / seconds, 1),
        "ratio": round(baseline / seconds, 3),
    }


def archive_size(db_path: Path) -> dict[str, Any]:
    """Checkpoint the archive; return its size on disk once closed (the database, and a -wal or -shm
    file if one were left) and dbstat's bytes per table/index."""
    db = sqlite3.connect(db_path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        parts = {
            str(name): int(size)
            for name, size in db.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            )
        }
        free = (
            db.execute("PRAGMA freelist_count").fetchone()[0]
            * db.execute("PRAGMA page_size").fetchone()[0]
        )
        packs = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(raw_size), 0), COALESCE(SUM(length(data)), 0) FROM packs"
        ).fetchone()
        contents = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(length), 0), COUNT(*) FILTER (WHERE text IN (0, id)) "
            "FROM contents"
        ).fetchone()
    finally:
        db.close()  # the last connection: SQLite checkpoints and removes the -wal and -shm files
    size = sum(path.stat().st_size for path in db_path.parent.glob(db_path.name + "*"))
    return {
        "bytes": size,
        "dbstat": parts,
        "free_bytes": free,
        "packs": packs[0],
        "pack_raw_bytes": packs[1],
        "pack_stored_bytes": packs[2],
        "contents": contents[0],
        "content_raw_bytes": contents[1],
        "texts": contents[2],
    }


def gzip_size(corpus: Path) -> tuple[int, int, int]:
    """Return (files, raw bytes, sum of `gzip -6 -c FILE` sizes) of every transcript under
    `corpus`."""
    files = sorted(corpus.rglob("*.jsonl"))
    raw = packed = 0
    for path in files:
        raw += path.stat().st_size
        result = subprocess.run(["gzip", "-6", "-c", str(path)], capture_output=True, check=True)
        packed += len(result.stdout)
    return len(files), raw, packed


def storage(label: str, corpus: Path, db_path: Path) -> dict[str, Any]:
    """The storage figures of one corpus and its archive."""
    files, raw, gzipped = gzip_size(corpus)
    size = archive_size(db_path)
    row = {
        "corpus": label,
        "files": files,
        "raw_bytes": raw,
        "gzip6_bytes": gzipped,
        "archive_bytes": size["bytes"],
        "archive_ratio": round(size["bytes"] / raw, 4),
        "gzip6_ratio": round(gzipped / raw, 4),
        "detail": size,
    }
    _say(
        f"  storage {label}: raw {raw / MB:,.1f} MB, archive {size['bytes'] / MB:,.2f} MB "
        f"({row['archive_ratio']:.1%}), gzip -6 {gzipped / MB:,.2f} MB ({row['gzip6_ratio']:.1%})"
    )
    return row


def sample_queries(corpus: Path, count: int, seed: int) -> list[dict[str, Any]]:
    """Sample `count` queries (words of real texts in the corpus, some with a filter); seeded."""
    from riffd.archive.contents import text_of

    rng = random.Random(seed)
    files = sorted(corpus.rglob("*.jsonl"))
    words: list[str] = []
    filters: list[dict[str, Any]] = []
    while len(words) < 4 * count:
        path = rng.choice(files)
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(rng.randrange(max(size - 65536, 1)))
            handle.readline()  # the rest of a line cut by the seek
            for raw in handle.readlines(65536)[:20]:
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                message = line.get("message") if isinstance(line, dict) else None
                if not isinstance(message, dict):
                    continue
                text = text_of(message.get("content"))
                found = WORD.findall(text)[:50]
                if found:
                    words.append(rng.choice(found))
                if isinstance(line.get("cwd"), str) and isinstance(line.get("sessionId"), str):
                    filters.append(
                        {
                            "project": line["cwd"],
                            "session": line["sessionId"],
                            "role": line.get("type"),
                            "since": line.get("timestamp"),
                        }
                    )
    queries: list[dict[str, Any]] = []
    for number in range(count):
        kind = number % 3
        query: dict[str, Any] = {"query": rng.choice(words)}
        if kind == 1:
            query["query"] += " " + rng.choice(words)
        elif kind == 2 and filters:
            chosen = rng.choice(filters)
            key = rng.choice(["project", "session", "role", "since"])
            if key == "since" and isinstance(chosen["since"], str):
                query["since"] = int(time.mktime(time.strptime(chosen["since"][:10], "%Y-%m-%d")))
            elif key in ("project", "session") or chosen["role"] in ("user", "assistant", "system"):
                query[key] = chosen[key if key != "since" else "project"]
        queries.append(query)
    return queries


def search_latency(db_path: Path, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Run every query through Archive.search twice: on one Archive after 20 warm-up queries (its
    caches warm, as in a long-lived process), and on a fresh Archive each (as one `riffd archive
    search` run: nothing cached but the OS page cache). Return p50, p95, max (ms) of each and the
    mean hit count."""
    from riffd.archive.store import Archive

    def figures(times: list[float]) -> dict[str, float]:
        times = sorted(times)
        return {
            "p50_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2),
            "max_ms": round(times[-1], 2),
        }

    archive = Archive(db_path)
    try:
        for query in queries[:20]:
            archive.search(**query)
        warm: list[float] = []
        hits: list[int] = []
        for query in queries:
            started = time.perf_counter()
            found = archive.search(**query)
            warm.append((time.perf_counter() - started) * 1000)
            hits.append(len(found))
    finally:
        archive.close()
    fresh: list[float] = []
    for query in queries:
        started = time.perf_counter()
        archive = Archive(db_path)
        archive.search(**query)
        archive.close()
        fresh.append((time.perf_counter() - started) * 1000)
    return {
        "queries": len(queries),
        **figures(fresh),
        "warm": figures(warm),
        "mean_hits": round(statistics.fmean(hits), 1),
        "no_hit_queries": hits.count(0),
    }


# --- reporting
# --------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    """The human table."""
    rows = [f"{'measure':44} figure", "-" * 100]
    for ingest_row in result["ingest"]:
        label = f"{ingest_row['corpus']} corpus, {ingest_row['bytes'] / MB:,.0f} MB"
        if "compact_seconds" not in ingest_row:  # the real corpus, in this process
            rows.append(
                f"{'ingest, ' + label:44} {ingest_row['mb_per_s']:.1f} MB/s ({ingest_row['seconds']:.3f} s, "
                f"best of 5, not settled) against orjson.loads of every line "
                f"{ingest_row['baseline_mb_per_s']:.1f} MB/s: ratio {ingest_row['ratio']:.3f}"
            )
            continue
        rows.append(
            f"{'ingest, ' + label:44} {ingest_row['mb_per_s']:.1f} MB/s ({ingest_row['seconds']:.1f} s) "
            f"against orjson.loads of every line {ingest_row['baseline_mb_per_s']:.1f} MB/s: ratio "
            f"{ingest_row['ratio']:.3f}; peak RSS {ingest_row['peak_rss_mb']:.0f} MB; then compact "
            f"{ingest_row['compact_seconds']:.1f} s ({ingest_row['archive_bytes_before_compact'] / MB:,.1f} MB "
            f"before it), {ingest_row['with_compact_mb_per_s']:.1f} MB/s both together"
        )
    for search in result["search"]:
        label = (
            f"search, {search['corpus']}, archive {search['archive_bytes'] / MB:,.0f} MB, "
            f"{search['texts']:,} texts"
        )
        rows.append(
            f"{label:44} fresh Archive per query: p50 {search['p50_ms']:.1f} ms, "
            f"p95 {search['p95_ms']:.1f} ms, max {search['max_ms']:.1f} ms "
            f"(goal {P95_GOAL_MS:.0f} ms: ratio {search['p95_ms'] / P95_GOAL_MS:.2f}); "
            f"one warm Archive: p95 {search['warm']['p95_ms']:.1f} ms; {search['mean_hits']} hits on average"
        )
    for row in result["storage"]:
        rows.append(
            f"{'storage, ' + row['corpus']:44} raw {row['raw_bytes'] / MB:,.1f} MB, archive "
            f"{row['archive_bytes'] / MB:,.2f} MB ({row['archive_ratio']:.1%}), gzip -6 per file "
            f"{row['gzip6_bytes'] / MB:,.2f} MB ({row['gzip6_ratio']:.1%}): ratio "
            f"{row['archive_bytes'] / row['gzip6_bytes']:.2f}"
        )
    rows.append("")
    for row in result["storage"]:
        top = ", ".join(
            f"{name} {size / MB:,.2f}" for name, size in list(row["detail"]["dbstat"].items())[:6]
        )
        rows.append(f"dbstat {row['corpus']} (MB): {top}")
    rows.append("")
    rows += [
        f"{'goal met' if goal['met'] else 'goal missed'}: {goal['goal']} (got {goal['value']})"
        for goal in result["goals"]
    ]
    rows.append(f"command: {result['command']}")
    return "\n".join(rows)


def markdown(result: dict[str, Any]) -> str:
    """The figures as the docs' table: ingest, search and storage, each judged where it has a goal."""
    rows = []
    for row in result["ingest"]:
        met = "met" if row["mb_per_s"] >= INGEST_GOAL_MB_S else "missed"
        if "compact_seconds" not in row:  # the real corpus, in this process
            rows.append(
                (
                    f"ingest, {row['corpus'].removesuffix(' (in-process)')} corpus itself, "
                    f"{row['bytes'] / MB:,.1f} MB (in-process "
                    "with the reader process, best of 5, not settled)",
                    f"**{row['mb_per_s']:.1f} MB/s** (goal ≥ {INGEST_GOAL_MB_S:.0f}: {met}) against "
                    f"{row['baseline_mb_per_s']:.1f} MB/s: ratio {row['ratio']:.3f}",
                )
            )
            continue
        rows.append(
            (
                f"ingest, {row['corpus']} corpus, {row['bytes'] / MB:,.0f} MB",
                f"{row['mb_per_s']:.1f} MB/s ({row['seconds']:.1f} s; {met}) against "
                f"{row['baseline_mb_per_s']:.1f} MB/s: ratio {row['ratio']:.3f}; peak RSS "
                f"{row['peak_rss_mb']:.0f} MB; then compaction {row['compact_seconds']:.0f} s "
                f"({row['archive_bytes_before_compact'] / MB:,.1f} MB before it)",
            )
        )
    for search in result["search"]:
        met = "met" if search["p95_ms"] < P95_GOAL_MS else "missed"
        rows.append(
            (
                f"search, {search['corpus']} corpus: archive {search['archive_bytes'] / MB:,.0f} MB, "
                f"{search['texts']:,} texts, {search['queries']} queries",
                f"fresh: p50 {search['p50_ms']:.1f} ms, p95 {search['p95_ms']:.1f} ms (goal < "
                f"{P95_GOAL_MS:.0f} ms: {met}), max {search['max_ms']:.1f} ms; warm: p95 "
                f"{search['warm']['p95_ms']:.1f} ms",
            )
        )
    for row in result["storage"]:
        parts = composition(row["detail"]["dbstat"])
        rows.append(
            (
                f"storage, {row['corpus']}"
                + ("" if "MB" in row["corpus"] else f", {row['raw_bytes'] / MB:,.1f} MB"),
                f"archive {row['archive_bytes'] / MB:,.2f} MB ({row['archive_ratio']:.1%}) against "
                f"gzip -6 {row['gzip6_bytes'] / MB:,.2f} MB ({row['gzip6_ratio']:.1%}): ratio "
                f"{row['archive_bytes'] / row['gzip6_bytes']:.2f}; of it, the lines "
                f"{parts['lines'] / MB:,.2f} MB (ratio {parts['lines'] / row['gzip6_bytes']:.2f}), "
                f"the search index {parts['search'] / MB:,.2f}, the pieces and their keys "
                f"{parts['pieces'] / MB:,.2f}, where each text was seen "
                f"{parts['seen'] / MB:,.2f}, the rest {parts['rest'] / MB:,.2f} MB",
            )
        )
    return figures.markdown_table(("measure", "figure"), rows)


def composition(dbstat: dict[str, int]) -> dict[str, int]:
    """The archive's bytes by what they hold: the lines (packs, the open pack's segments, where each
    line is in them), the search index, the pieces of content and their key index, where each text
    was seen, and the rest (files, whole files, free pages are not in dbstat)."""
    groups = {
        "lines": ("packs", "segments", "runs", "loose"),
        # (format 3 keeps the keys in a table, format 2 in an index)
        "pieces": ("contents", "content_keys", "contents_key"),
        "seen": ("seen",),
    }
    parts = {name: sum(dbstat.get(table, 0) for table in tables) for name, tables in groups.items()}
    parts["search"] = sum(size for name, size in dbstat.items() if name.startswith("search"))
    parts["rest"] = sum(dbstat.values()) - sum(parts.values())
    return parts


def distinct_texts(db_path: Path) -> int:
    """How many texts the archive's search index holds."""
    db = sqlite3.connect(db_path)
    try:
        # (a content's own text id: 0 in format 3, its id in format 2)
        return int(db.execute("SELECT COUNT(*) FROM contents WHERE text IN (0, id)").fetchone()[0])
    finally:
        db.close()


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add = parser.add_argument
    add(
        "--quick",
        action="store_true",
        help="a 100 MB corpus in the temporary folder and 100 queries",
    )
    add(
        "--size-mb",
        type=float,
        default=None,
        help="generated corpus size in MB; default 1024 (100 with --quick)",
    )
    add("--queries", type=int, default=None, help="search queries; default 200 (100 with --quick)")
    add("--resumed", type=int, default=3, help="resumed copies per real session for (b); default 3")
    add(
        "--out",
        type=Path,
        default=scan_bench.DEFAULT_OUT,
        help="scan_bench's corpus cache (not with --quick)",
    )
    add("--real", type=Path, default=scan_bench.DEFAULT_REAL, help="the real transcripts")
    add("--tmp", type=Path, default=None, help="where the temporary folder is made")
    add("--seed", type=int, default=1, help="corpus and query seed; default 1")
    add(
        "--keep",
        action="store_true",
        help="keep the temporary folder (archives, generated corpora)",
    )
    add("--json", action="store_true", help="print the results as one JSON object on stdout")
    add(
        "--only",
        choices=["all", "whole"],
        default="all",
        help="whole: only the whole sessions (bench/whole_bench.py: the files beside the transcripts); default all",
    )
    add(
        "--write",
        type=Path,
        metavar="FILE",
        help="also write the table the docs include (docs/figures/archive.md; with --only whole, "
        "whole_bench's table: docs/figures/whole.md)",
    )
    args = parser.parse_args(argv)
    args.size_mb = args.size_mb or (100.0 if args.quick else 1024.0)
    args.queries = args.queries or (100 if args.quick else 200)
    args.real = args.real.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the corpora, measure, print; return 0, or 1 when a measurement fails."""
    args = parse_args(argv)
    for key in CLEAN_ENV:
        os.environ.pop(key, None)  # the children read only the bench's own config
    about = scan_bench.machine()
    _say("machine: " + ", ".join(f"{key} {value}" for key, value in about.items()))
    if args.tmp is not None:  # (a folder to make it under, made when missing)
        args.tmp.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="riffd-archive-bench-", dir=args.tmp))
    if args.only == "whole":
        return _whole_only(args, work)
    try:
        if args.quick:
            args.out = work / "corpus"
        args.out = args.out.resolve()
        corpus = big_corpus(args)
        size, seconds = scan_bench.warm_cache(corpus)
        _say(f"corpus: {size / MB:,.0f} MB under {corpus} (page cache warmed in {seconds:.1f} s)")
        results = work / "results"
        results.mkdir()
        started = time.perf_counter()
        distinct = distinct_corpus(corpus, work / "distinct" / "projects", args.seed)
        distinct_size, _seconds = scan_bench.warm_cache(distinct)
        _say(
            f"distinct corpus: {distinct_size / MB:,.0f} MB under {distinct} (made in "
            f"{time.perf_counter() - started:.0f} s)"
        )
        ingests = []
        archives = {}
        for label, folder, folder_size in (
            ("copies", corpus, size),
            ("distinct", distinct, distinct_size),
        ):
            baseline_run = scan_bench.measure(
                f"baseline-{label}",
                [sys.executable, "-c", scan_bench.BASELINE_CHILD, str(folder)],
                folder,
                results,
                0,
                {0},
            )
            ingest_run, compact_run, loose_size, archives[label] = ingest(folder, work, label)
            _say(
                f"  ingest   {label}: {ingest_run.seconds:7.1f} s, "
                f"peak RSS {ingest_run.peak_rss_kib * 1024 / MB:6.0f} MB; compact {compact_run.seconds:.1f} s"
            )
            ingests.append(
                {
                    "corpus": label,
                    "bytes": folder_size,
                    "lines": baseline_run.report["lines"],
                    "baseline_seconds": round(baseline_run.seconds, 2),
                    "baseline_mb_per_s": round(folder_size / MB / baseline_run.seconds, 1),
                    "seconds": round(ingest_run.seconds, 2),
                    "mb_per_s": round(folder_size / MB / ingest_run.seconds, 1),
                    "ratio": round(baseline_run.seconds / ingest_run.seconds, 3),
                    "archive_bytes_before_compact": loose_size,
                    "compact_seconds": round(compact_run.seconds, 2),
                    "with_compact_mb_per_s": round(
                        folder_size / MB / (ingest_run.seconds + compact_run.seconds), 1
                    ),
                    "peak_rss_mb": round(ingest_run.peak_rss_kib * 1024 / MB, 1),
                }
            )
        rows = []
        real = real_corpus(args.real, work / "real")
        ingests.insert(0, ingest_in_process(real, work))
        _say(f"  ingest   real, in this process: {ingests[0]['seconds']:.3f} s")
        rows.append(storage("real corpus", real, ingest(real, work, "real")[3]))
        resumed = resumed_corpus(args.real, work / "resumed", args.resumed, args.seed)
        rows.append(
            storage(
                f"real + {args.resumed} resumed copies",
                resumed,
                ingest(resumed, work, "resumed")[3],
            )
        )
        rows.append(storage(f"copies {size / MB:,.0f} MB", corpus, archives["copies"]))
        rows.append(
            storage(f"distinct {distinct_size / MB:,.0f} MB", distinct, archives["distinct"])
        )
        searches = []
        for label, folder, row in (("copies", corpus, rows[2]), ("distinct", distinct, rows[3])):
            search = search_latency(
                archives[label], sample_queries(folder, args.queries, args.seed)
            )
            search.update(
                corpus=label,
                archive_bytes=row["archive_bytes"],
                texts=distinct_texts(archives[label]),
            )
            searches.append(search)
            _say(f"  search {label}: p50 {search['p50_ms']} ms, p95 {search['p95_ms']} ms")
        whole = whole_bench.measure(args.real, args.resumed, args.seed, 100.0, work / "whole")
        _say(whole_bench.render(whole))
    except (OSError, RuntimeError, ValueError, KeyError, subprocess.CalledProcessError) as exc:
        _say(f"failed: {exc}")
        return 1
    finally:
        if args.keep:
            _say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    goals = [
        {
            "goal": f"{row['corpus']}: archive < gzip -6",
            "value": f"{row['archive_ratio']:.1%} vs {row['gzip6_ratio']:.1%}",
            "met": row["archive_bytes"] < row["gzip6_bytes"],
        }
        for row in rows
    ]
    goals += [
        {
            "goal": f"ingest >= {INGEST_GOAL_MB_S:.0f} MB/s on the {row['corpus']} corpus",
            "value": f"{row['mb_per_s']} MB/s",
            "met": row["mb_per_s"] >= INGEST_GOAL_MB_S,
        }
        for row in ingests
    ]
    goals.append(
        {
            "goal": f"search p95 < {P95_GOAL_MS:.0f} ms on the distinct corpus",
            "value": searches[-1]["p95_ms"],
            "met": searches[-1]["p95_ms"] < P95_GOAL_MS,
        }
    )
    goals.append(_whole_goal(whole))
    command = " ".join(
        ["python3", "bench/archive_bench.py", *(argv if argv is not None else sys.argv[1:])]
    )
    result = {
        "machine": about,
        "command": command,
        "ingest": ingests,
        "search": searches,
        "storage": rows,
        "whole": whole,
        "goals": goals,
    }
    human = render(result) + "\n" + whole_bench.render(whole)
    if args.json:
        print(human, file=sys.stderr)
        print(json.dumps(result, indent=2))
    else:
        print(human)
    if args.write:
        figures.write(
            args.write,
            figures.shown_command("archive_bench.py", argv if argv is not None else sys.argv[1:]),
            markdown(result),
            [
                "MB is 10^6 bytes; ingest is `riffd archive ingest --no-compact` against reading every "
                "line and `orjson.loads` on it; search is `Archive.search`, fresh per query as one "
                "`riffd archive search` run; gzip -6 is the sum over every file."
            ],
        )
    return 0


def _whole_goal(whole: dict[str, Any]) -> dict[str, Any]:
    row = whole["storage"]
    return {
        "goal": "whole sessions (transcripts and the files beside them): archive < gzip -6",
        "value": f"{row['archive_bytes'] / MB:.2f} MB vs {row['gzip6_bytes'] / MB:.2f} MB",
        "met": row["archive_bytes"] < row["gzip6_bytes"],
    }


def _whole_only(args: argparse.Namespace, work: Path) -> int:
    """`--only whole`: the whole sessions alone (bench/whole_bench.py)."""
    try:
        whole = whole_bench.measure(args.real, args.resumed, args.seed, 100.0, work)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        _say(f"failed: {exc}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    goal = _whole_goal(whole)
    human = (
        whole_bench.render(whole)
        + f"\n{'goal met' if goal['met'] else 'goal missed'}: {goal['goal']} (got "
        f"{goal['value']})"
    )
    print(human, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"whole": whole, "goals": [goal]}, indent=2))
    if args.write:
        whole_bench.write(args.write, "archive_bench.py", None, whole)
    return 0


if __name__ == "__main__":
    sys.exit(main())
