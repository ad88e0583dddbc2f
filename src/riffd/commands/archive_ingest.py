"""`riffd archive ingest` and `riffd archive compact`: back-filling the archive, lines and whole
files, and compressing what was archived fast."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riffd.claude_code.folders import is_transcript_name, session_id_for
from riffd.claude_code.projects import SESSION_ID
from riffd.claude_code.session_files import (
    SessionFile,
    all_session_files,
    classify,
    config_folders,
    linked_folder,
    plan_files,
    saved_output_folder,
    session_files,
)
from riffd.commands.arguments import transcript_targets
from riffd.commands.output import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from riffd.archive.wholefiles import Kept, Looked


def run_ingest(args: argparse.Namespace, archive: Any) -> int:
    """`riffd archive ingest`: archive what is new in each transcript, then the files kept whole
    beside them; exit 0, or 2 when a file failed."""
    from riffd.archive.ingest import ingest_files

    given: list[SessionFile] = []
    if args.paths:
        files, errors = transcript_targets(args.paths, roots=args.roots)
        files, given = split_given(files, args, errors)
    else:  # the configured roots, and only those (not Claude Code's folder, which a config's roots replace)
        files, errors = files_under(args.roots)
    started, added, size, number = time.monotonic(), 0, 0, 0
    try:
        for number, (path, done) in enumerate(ingest_files(archive, files), 1):
            if isinstance(done, OSError):
                errors.append(f"{path}: {done.strerror or done}")
            else:
                added += done
                with contextlib.suppress(OSError):
                    size += path.stat().st_size
            if sys.stderr.isatty():
                rate = size / 1e6 / max(time.monotonic() - started, 1e-6)
                print(
                    f"\rriffd: {number}/{len(files)} files, {size / 1e6:.0f} MB, {rate:.0f} MB/s ",
                    end="",
                    file=sys.stderr,
                )
        if sys.stderr.isatty():
            print(file=sys.stderr)
        found = session_files_of(args, archive, files, errors)
        kept = keep_whole_files(archive, itertools.chain(given, found), errors)
    except BaseException as exc:
        # What was stored stays: say how far the ingest got before the error (printed by
        # _one_line_errors) or Ctrl-C (said by the command line)
        cause = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "the error"
        print(
            ("\n" if sys.stderr.isatty() else "")
            + f"riffd: stopped after archiving {added} new line(s) from "
            f"{number} of {len(files)} file(s) into {archive.path} (the file it was on keeps what was stored of "
            f"it before {cause})",
            file=sys.stderr,
        )
        archive.close()
        raise
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    print(
        f"riffd: archived {added} new line(s) from {len(files)} file(s) into {archive.path}",
        file=sys.stderr,
    )
    of = f" of {kept.looked}" if kept.held != kept.looked else ""
    print(
        f"riffd: kept {kept.held}{of} file(s) of the sessions whole ({kept.added} new or changed, "
        f"{kept.stored / 1e6:.2f} MB stored)",
        file=sys.stderr,
    )
    if not args.no_compact:
        compact(archive)
    if added:
        archive.settle()  # the last pack compressed, the search index merged
    archive.close()
    return EXIT_ERROR if errors else EXIT_OK


def split_given(
    files: list[Path], args: argparse.Namespace, errors: list[str]
) -> tuple[list[Path], list[SessionFile]]:
    """Of the files an ingest was given (`transcript_targets` of its PATHs), the transcripts, archived
    by lines, and the files of a session that are kept whole (a saved output named by its path, a
    `.jsonl` in `tool-results/` too); any other file is an error, not archived."""
    configs = config_folders(args.roots, args.loaded_config.claude_dir)
    transcripts, whole = [], []
    for path in files:
        absolute = Path(os.path.abspath(path))
        parts = absolute.parts
        # below a `projects` folder that is not a configured root: the one above `<project>/<session>/`
        others = [
            Path(*parts[: at - 1])
            for at in range(3, len(parts) - 1)
            if SESSION_ID.fullmatch(parts[at]) and parts[at - 2] == "projects"
        ]
        found = classify(absolute, args.roots, configs) or classify(absolute, others, [])
        if found is not None:
            whole.append(found)
        elif is_transcript_name(path.name) and saved_output_folder(absolute) is None:
            transcripts.append(path)
        else:
            errors.append(
                f"{path}: neither a transcript (*.jsonl) nor a file of a session that riffd keeps "
                "whole (in a session's folder, or in a config folder's file-history/, tasks/, plans/ "
                "or todos/); not archived"
            )
    return transcripts, whole


def session_files_of(
    args: argparse.Namespace, archive: Any, transcripts: list[Path], errors: list[str]
) -> Iterator[SessionFile]:
    """The files kept whole that an ingest takes: without PATH every one under the roots and in the
    config folders; with PATHs, those of the sessions of the transcripts found there (and of their
    plans)."""
    config = args.loaded_config

    def unlistable(exc: OSError) -> None:
        errors.append(
            f"{exc.filename}: cannot be listed ({exc.strerror or exc}); the files in it were not archived"
        )

    if not args.paths:
        roots = [root for root in args.roots if root.is_dir()]
        yield from all_session_files(
            roots, config_folders(args.roots, config.claude_dir), unlistable, named_link
        )
        return
    sessions: dict[str, set[Path]] = {}
    for path in transcripts:
        session = session_id_for(path)
        if SESSION_ID.fullmatch(session):
            project = path.parents[2] if path.parent.name == "subagents" else path.parent
            sessions.setdefault(session, set()).add(project)
    roots = list(
        dict.fromkeys(
            [folder.parent for folders in sessions.values() for folder in folders]
            + list(args.roots)
        )
    )
    configs = config_folders(roots, config.claude_dir)
    for session, folders in sorted(sessions.items()):
        yield from session_files(session, sorted(folders), roots, configs, unlistable, named_link)
    yield from plan_files(
        sorted({slug for session in sessions for slug in archive.versions.slugs(session)}), configs
    )


@dataclass(frozen=True)
class FilesKept:
    """What `keep_whole_files` did: files looked at, those the archive now holds as they are,
    versions added, bytes stored."""

    looked: int
    held: int
    added: int
    stored: int


def keep_whole_files(archive: Any, found: Iterable[SessionFile], errors: list[str]) -> FilesKept:
    """Archive each file as `riffd.archive.wholefiles.WholeFiles.keep` does, as it is now (an ingest
    does not wait for a file to settle): each read and hashed outside any transaction, those to
    store stored a hundred to a transaction (`store_together`). Every file not stored is named with
    why: an error when it cannot be read or changed while it was read each time (for the daemon or
    the next ingest), a note when it went meanwhile or is not a regular file or is reached through a
    symlinked folder riffd does not follow. The progress line counts a file once what it stored is
    committed."""
    from riffd.archive.wholefiles import TOGETHER_BYTES, TOGETHER_FILES, Kept

    looked_at = held = added = stored = shown = 0  # shown: files the progress line counted
    batch: list[Looked] = []  # looked at, to store together
    batch_bytes = 0

    def settled(item: SessionFile, kept: Kept | OSError) -> None:
        nonlocal held, added, stored
        # (a file that changed while it was read is taken again alone, up to three times in all)
        for _again in range(2):
            if not (isinstance(kept, Kept) and kept.outcome == "changing"):
                break
            try:
                kept = archive.whole.keep(item)
            except OSError as exc:
                kept = exc
        if isinstance(kept, OSError):
            errors.append(f"{item.path}: {kept.strerror or kept}")
        elif kept.outcome == "changing":
            errors.append(
                f"{item.path}: it changed while it was read, three times; the daemon or the next "
                "ingest takes it once it stays as it is"
            )
        else:
            held += kept.outcome in ("stored", "known", "unchanged")
            added += kept.outcome in ("stored", "known")
            stored += kept.stored_bytes
            if kept.outcome == "linked":
                named_link(linked_folder(item) or item.path)
            elif kept.outcome in NOT_TAKEN:
                print(f"riffd: note: {item.path}: {NOT_TAKEN[kept.outcome]}", file=sys.stderr)

    def store() -> None:
        nonlocal batch_bytes
        for looked, kept in zip(batch, archive.whole.store_together(batch), strict=True):
            settled(looked.found, kept)
        batch.clear()
        batch_bytes = 0

    try:
        for number, item in enumerate(found, 1):
            looked_at = number
            try:
                looked = archive.whole.look(item)
            except OSError as exc:
                looked = exc
            if isinstance(looked, (Kept, OSError)):
                settled(item, looked)
            else:
                batch.append(looked)
                batch_bytes += looked.status.st_size
                if len(batch) >= TOGETHER_FILES or batch_bytes >= TOGETHER_BYTES:
                    store()
            if not batch and number - shown >= 100 and sys.stderr.isatty():
                print(f"\rriffd: {number} files kept whole ", end="", file=sys.stderr)
                shown = number
        if batch:
            store()
    finally:  # (the descriptors of files looked at and not stored, when the ingest stops)
        archive.whole.let_go(batch)
    if shown:
        print(file=sys.stderr)
    return FilesKept(looked_at, held, added, stored)


# Why `keep` took no version of a file, for the outcomes that are not an error
NOT_TAKEN = {
    "gone": "deleted while the ingest ran; not archived",
    "skipped": "not a regular file (a FIFO, a device); not archived",
}


def named_link(link: Path) -> None:
    """Name a symlink the walk of the sessions' files met and did not follow."""
    print(
        f"riffd: note: {link}: a symlink (to {os.path.realpath(link)}) in a session's folders; "
        "not followed: riffd archives only the files in the sessions' own folders",
        file=sys.stderr,
    )


def run_compact(args: argparse.Namespace, archive: Any) -> int:
    """`riffd archive compact`: compress the packs and files archived fast at the settled level, and move an
    archive of riffd 0.2 or earlier to 4 KiB pages when nothing else has it open; exit 0."""
    compact(archive)
    archive.settle(optimize=False)
    started = time.monotonic()
    pages = archive.connection.db.execute("PRAGMA page_size").fetchone()[0]
    why_not = archive.repage()
    if why_not is not None:
        print(
            f"riffd: note: the archive keeps its {pages}-byte pages (searches read 4 KiB pages "
            f"about a third faster): {why_not}",
            file=sys.stderr,
        )
    elif archive.connection.db.execute("PRAGMA page_size").fetchone()[0] != pages:
        print(
            f"riffd: moved the archive from {pages}-byte to 4 KiB pages in "
            f"{time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
    archive.close()
    return EXIT_OK


def compact(archive: Any) -> None:
    """Compact an open `riffd.archive.store.Archive` (its packs, then the blobs of the files kept
    whole), with a progress line on a terminal."""
    started = time.monotonic()
    done, _left = archive.compact(progress=_progress("packs"))
    if done:
        _compacted(f"{done} pack(s) at the settled level", started)
    started = time.monotonic()
    whole = archive.whole.compact(progress=_progress("the files kept whole (blobs)"))
    if whole.blobs:
        _compacted(
            f"the files kept whole at the settled level: {whole.blobs} blob(s), {whole.frames} "
            f"frame(s) {whole.saved / 1e3:,.1f} kB smaller,",
            started,
        )


def _compacted(what: str, started: float) -> None:
    """Say what a compaction compressed and in how long, on a line of its own (after the progress
    line a terminal shows)."""
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"riffd: compressed {what} in {time.monotonic() - started:.1f} s", file=sys.stderr)


def _progress(what: str) -> Callable[[int, int], None]:
    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(
                f"\rriffd: compressing {what} at the settled level: {done}/{total} ",
                end="",
                file=sys.stderr,
            )

    return progress


def files_under(roots: tuple[Path, ...]) -> tuple[list[Path], list[str]]:
    """The transcripts under the configured `roots` that exist, and a line for each root that does
    not or cannot be looked at."""
    present, errors = [], []
    for root in roots:
        try:
            if root.is_dir():
                present.append(root)
            else:
                print(
                    f"riffd: note: {root} (in `roots`) does not exist: nothing archived from it",
                    file=sys.stderr,
                )
        except OSError as exc:
            errors.append(
                f"{root}: cannot be looked at ({exc.strerror or exc}); its transcripts were not archived"
            )
    if not present:
        return [], errors
    files, more = transcript_targets(present)
    return files, errors + more
