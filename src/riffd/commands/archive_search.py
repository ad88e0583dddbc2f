"""`riffd archive search`: the hits of a search of the archive, as text or JSON, and "no matches"
said on stderr when there are none."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, riffd_advice
from riffd.display import display_json
from riffd.transcript.sessions import (
    AmbiguousSession,
    claude_resume,
    go_back_command,
    local_time,
    session_key,
)


def print_hits(archive: Any, args: argparse.Namespace) -> int:
    """Search the open `archive` as `args` say; print each hit (session, time, role, project,
    title, snippet, where and how to go back), or "no matches" on stderr. Return 0 with hits, 1
    without."""
    since = args.since  # a Unix time (date_seconds)
    session = None
    if args.session:
        try:  # a prefix of one archived session's id, as every SESSION argument takes
            named = {found for _id, _path, found in archive.files_of(args.session) if found}
        except AmbiguousSession as exc:
            print(f"riffd: error: --session {exc}", file=sys.stderr)
            return EXIT_ERROR
        session = named.pop() if len(named) == 1 else session_key(args.session)
    riffd = riffd_advice(args)  # (its restore: the same configuration)
    hits = archive.search(
        args.query,
        project=args.project,
        session=session,
        role=args.role,
        since=since,
        limit=args.limit,
    )
    if args.json:
        sys.stdout.write(
            display_json(
                [
                    hit.__dict__
                    | {
                        "time": local_time(hit.timestamp) if hit.timestamp else None,
                        "resume": claude_resume(hit.path, hit.session_id),
                        "go_back": go_back_command(
                            hit.path, hit.session_id, hit.project, riffd=riffd
                        ),
                    }
                    for hit in hits
                ],
                orjson.OPT_INDENT_2,
            ).decode()
            + "\n"
        )
    for hit in [] if args.json else hits:
        title = f'"{hit.title}"' if hit.title else "-"
        print(
            f"{hit.session_id or '-'}  {local_time(hit.timestamp)}  {hit.role or '-'}  {hit.project or '-'}  "
            f"{title}\n    {hit.snippet}\n    {hit.path}:{hit.line}"
            + (
                f"; back to it: {back}"
                if (back := go_back_command(hit.path, hit.session_id, hit.project, riffd=riffd))
                else ""
            )
        )
    if not hits:
        narrowed = [
            f"{name} {value}"
            for name, value in (
                ("--project", args.project),
                ("--session", args.session),
                ("--role", args.role),
                ("--since", local_time(args.since) if args.since else None),
            )
            if value
        ]
        print(
            f"riffd: no matches for {args.query!r} in the archive"
            + (f" ({', '.join(narrowed)})" if narrowed else ""),
            file=sys.stderr,
        )
        behind = not_archived(archive, getattr(args, "roots", None))
        if behind:  # what a search cannot find yet
            print(
                f"riffd: note: {behind} transcript(s) under the roots hold lines the archive does not "
                f"have yet: `{riffd} archive ingest` adds them (a running daemon does as they change)",
                file=sys.stderr,
            )
    return EXIT_OK if hits else EXIT_FINDINGS


def not_archived(archive: Any, roots: Any) -> int:
    """How many transcripts under `roots` (the configuration's) hold bytes the archive has not
    taken in (never archived, or written since); 0 when that cannot be told."""
    from riffd.commands.arguments import transcript_targets

    try:
        files, _errors = transcript_targets([], roots=roots)
    except (OSError, ValueError):
        return 0
    behind = 0
    for path in files:
        try:
            behind += archive.cursor(str(path))[1] < path.stat().st_size
        except OSError:  # (gone since the listing)
            continue
    return behind
