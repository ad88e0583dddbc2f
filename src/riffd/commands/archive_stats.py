"""`riffd archive stats`: the archive's figures (what it saw, what it stores, and how much of each
kind of file it holds), as text or JSON."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from riffd.commands.archive_open import open_archive
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.display import display_json


def run_stats(args: argparse.Namespace) -> int:
    """`riffd archive stats`: print the archive's figures, with the files it holds counted by
    kind."""

    archive = open_archive(args)
    if archive is None:
        return EXIT_ERROR
    stats = archive.stats()
    whole = archive.versions.stats()
    transcripts: dict[str, dict[str, int]] = {}
    for path, size in archive.archived_bytes().items():
        kind = transcripts.setdefault(
            "subagent"
            if "/subagents/" in path or os.path.basename(path).startswith("agent-")
            else "transcript",
            {"files": 0, "bytes": 0},
        )
        kind["files"] += 1
        kind["bytes"] += size
    archive.close()
    # files (and versions, for files kept whole) and bytes by kind
    stats["kinds"] = transcripts | whole["kinds"]
    stats["whole_files"] = {
        "blobs": whole["blobs"],
        "bytes": whole["blob_bytes"],
        "stored": whole["stored_bytes"],
    }
    # `raw_bytes` and `ratio` count the lines; these count the files kept whole (every version) too
    stats["raw_all_bytes"] = stats["raw_bytes"] + sum(
        kind["bytes"] for kind in whole["kinds"].values()
    )
    stats["ratio_all"] = (
        round(stats["stored_bytes"] / stats["raw_all_bytes"], 4) if stats["raw_all_bytes"] else None
    )
    if args.json:
        sys.stdout.write(display_json(stats, orjson.OPT_INDENT_2).decode() + "\n")
        return EXIT_OK
    ratio = f"{stats['ratio_all']:,.1%} of raw" if stats["ratio_all"] is not None else "- of raw"
    if stats["ratio_all"] is not None and stats["ratio_all"] > 1:
        # (a few sessions: the tables' first pages and the write-ahead log outweigh their lines)
        ratio += ": the database's own pages and its log take room before any line is stored"
    print(
        f"raw bytes seen:   {stats['raw_all_bytes']:,} ({stats['raw_bytes']:,} in lines, the rest in files kept "
        f"whole)\nbytes stored:     {stats['stored_bytes']:,} ({ratio})\n"
        f"sessions: {stats['sessions']}, files: {stats['files']}, lines: {stats['lines']}\n"
        f"messages: {stats['messages']}, unique contents: {stats['unique_contents']}, "
        f"unique texts: {stats['unique_texts']}\noldest: {stats['oldest'] or '-'}, newest: {stats['newest'] or '-'}"
    )
    for kind, counts in stats["kinds"].items():
        versions = f" in {counts['versions']:,} version(s)" if "versions" in counts else ""
        print(f"{kind + ':':17} {counts['files']:,} file(s){versions}, {counts['bytes']:,} bytes")
    if whole["blobs"]:
        print(
            f"files kept whole: {whole['blob_bytes']:,} distinct bytes in {whole['blobs']:,} blob(s), "
            f"{whole['stored_bytes']:,} bytes stored ({whole['stored_bytes'] / whole['blob_bytes']:.1%})"
        )
    return EXIT_OK
