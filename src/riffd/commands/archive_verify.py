"""`riffd archive verify`: the archive compared, byte for byte, with the transcripts and the files
kept whole that still exist, and every pack and blob read back (riffd.archive.verify)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from riffd.commands.arguments import transcript_targets
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, riffd_advice
from riffd.display import display_json, shell_command

OUTCOMES = (
    "whole",
    "behind",
    "rewritten",
    "differs",
    "archived again",
    "not archived",
    "gone",
    "damaged pack",
    "damaged file",
)


def run_verify(args: argparse.Namespace, archive: Any) -> int:
    """`riffd archive verify` on the open archive; exit 0, 1 (files differ, or a pack or blob is
    damaged), 2 (an error)."""
    from riffd.archive.ingest import archive_key

    if args.paths:
        files, errors = transcript_targets(args.paths, roots=args.roots)
    else:
        files, errors = (
            [Path(name) for _file_id, name in archive.files() if os.path.exists(name)],
            [],
        )
    # a file named twice is verified once
    files = list(dict.fromkeys(archive_key(path) for path in files))
    counts: dict[str, int] = {}
    faults = 0
    try:
        damaged_files = 0
        # the whole archive: its packs and blobs too, with the files of deleted sessions
        if not args.paths:
            packs, damaged_files = _damage(archive, args, counts)
            faults += packs
        faults += _transcripts(archive, args, files, counts, errors)
        faults += _whole_files(archive, args, files, counts, errors)
        # what --fix stored afresh from the files is no longer damaged
        if damaged_files and args.fix:
            damaged_files = len(archive.versions.damaged())
        faults += damaged_files
    finally:
        archive.close()
    if sys.stderr.isatty() and files:
        print(file=sys.stderr)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    said = ", ".join(f"{counts[name]} {name}" for name in OUTCOMES if counts.get(name))
    checked = sum(count for name, count in counts.items() if not name.startswith("damaged"))
    print(
        f"riffd: verified {checked} file(s) against {args.archive_path}"
        + (f": {said}" if said else "")
        + (
            " (behind: lines or a version the daemon has not archived yet; rewritten: archived as a new generation "
            "at its next pass)"
            if counts.get("behind") or counts.get("rewritten")
            else ""
        ),
        file=sys.stderr,
    )
    return EXIT_ERROR if errors else EXIT_FINDINGS if faults else EXIT_OK


def _damage(archive: Any, args: argparse.Namespace, counts: dict[str, int]) -> tuple[int, int]:
    """Name every damaged pack, with the archived files whose lines it holds, and every file kept
    whole whose stored bytes cannot be read back; return how many of each."""
    from riffd.archive.verify import damaged_packs

    packs = files = 0
    for damage, users in damaged_packs(archive):
        packs += 1
        counts["damaged pack"] = counts.get("damaged pack", 0) + 1
        if args.json:
            print(
                orjson.dumps(
                    {
                        "pack": damage.packs[0],
                        "outcome": "damaged",
                        "detail": str(damage),
                        "files": [user.__dict__ for user in users],
                    }
                ).decode()
            )
            continue
        print(
            f"pack {damage.packs[0]} of the archive is damaged: {damage}; it holds lines of "
            f"{len(users)} archived file generation(s), or pieces of them:"
        )
        for user in users:
            print(
                f"    {user.path} (session {user.session_id or '-'}), {user.advice(args.fix, riffd_advice(args))}"
            )
    for version, why in archive.versions.damaged():
        files += 1
        counts["damaged file"] = counts.get("damaged file", 0) + 1
        exists = os.path.exists(version.path)
        if args.json:
            print(
                display_json(
                    {
                        "blob": version.blob,
                        "outcome": "damaged",
                        "detail": why,
                        "kind": version.kind,
                        "path": str(version.path),
                        "session_id": version.session_id,
                    }
                ).decode()
            )
            continue
        print(
            f"a file kept whole is damaged in the archive: {why}; "
            + (
                f"`{riffd_advice(args)} {shell_command('archive', 'verify', '--fix')}` stores these bytes again from "
                f"{version.path}, which still exists (every file archived with the same bytes shares "
                "them)"
                if exists
                else "every file archived with these bytes is gone, so they are lost from the archive"
            )
        )
    return packs, files


def _transcripts(
    archive: Any,
    args: argparse.Namespace,
    files: list[Path],
    counts: dict[str, int],
    errors: list[str],
) -> int:
    from riffd.archive.verify import FAULTS, check_file

    faults = 0
    for number, path in enumerate(files, 1):
        verdict = check_file(archive, path, fix=args.fix)
        if verdict.error is not None:
            errors.append(verdict.error)
            continue
        fixed = verdict.archived_again
        counted = "archived again" if fixed is not None else verdict.outcome
        counts[counted] = counts.get(counted, 0) + 1
        if args.json:
            print(
                display_json(
                    {
                        "path": str(verdict.path),
                        "outcome": verdict.outcome,
                        "detail": verdict.detail,
                        "archived_again": fixed,
                        "kind": "transcript",
                    }
                ).decode()
            )
        elif verdict.outcome in FAULTS:
            again = f"{riffd_advice(args)} {shell_command('archive', 'verify', '--fix', path)}"
            print(
                ("\r" if sys.stderr.isatty() else "")
                + f"{verdict.path}: the archive differs from the file: "
                f"{verdict.detail}; "
                + (
                    f"archived again as a new generation ({fixed} lines; the old one is kept)"
                    if fixed is not None
                    else f"`{again}` archives it again as a new generation (the old one is kept)"
                )
            )
        faults += verdict.outcome in FAULTS and fixed is None
        if sys.stderr.isatty():
            print(f"\rriffd: verified {number}/{len(files)} files ", end="", file=sys.stderr)
    return faults


def _whole_files(
    archive: Any,
    args: argparse.Namespace,
    transcripts: list[Path],
    counts: dict[str, int],
    errors: list[str],
) -> int:
    """Verify the files kept whole: of the sessions of `transcripts` (with PATHs), else every one on
    disk, and count those the archive holds that are gone."""
    from riffd.archive.verify import FAULTS, check_whole
    from riffd.commands.archive_ingest import session_files_of

    faults, seen = 0, set()
    for found in session_files_of(args, archive, transcripts, errors):
        seen.add(str(found.path))
        verdict = check_whole(archive, found, fix=args.fix)
        if verdict.error is not None:
            errors.append(verdict.error)
            continue
        counted = "archived again" if verdict.archived_again is not None else verdict.outcome
        counts[counted] = counts.get(counted, 0) + 1
        if args.json:
            print(
                display_json(
                    {
                        "path": str(found.path),
                        "outcome": verdict.outcome,
                        "detail": verdict.detail,
                        "archived_again": verdict.archived_again,
                        "kind": found.kind,
                        "session_id": found.session_id,
                    }
                ).decode()
            )
        elif verdict.outcome in FAULTS:
            print(
                f"{found.path}: the archive differs from the file: {verdict.detail}; "
                + (
                    f"archived again as version {verdict.archived_again}"
                    if verdict.archived_again is not None
                    else f"`{riffd_advice(args)} {shell_command('archive', 'verify', '--fix')}` archives it again"
                )
            )
        faults += verdict.outcome in FAULTS and verdict.archived_again is None
    if not args.paths:
        gone = [
            path
            for path in archive.versions.held()
            if path not in seen and not os.path.lexists(path)
        ]
        if gone:
            counts["gone"] = counts.get("gone", 0) + len(gone)
    return faults
