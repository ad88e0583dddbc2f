"""What commands take: the parser class whose mistakes exit 2, the argument types (numbers, dates), and the transcript files a command's PATH and --project arguments name."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """A command-line mistake; the message says what to do instead."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes raise UsageError (exit 2 with a hint), never sys.exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse drops an error writing `--help` or `--version` (exit 0, nothing shown); it
        # is riffd's one line and exit 2, as for any command's output
        if message:
            (file or sys.stderr).write(message)


def nonnegative_number(text: str) -> float:
    """argparse type of an amount (seconds, days, megabytes): a finite number of 0 or more; anything
    else (nan, inf, a negative number) is refused with the option named, exit 2."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of 0 or more")
    return value


def positive_number(text: str) -> float:
    """argparse type of an amount that must be more than 0 (a window of time): as
    nonnegative_number, 0 refused."""
    value = nonnegative_number(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not more than 0")
    return value


def count_of_one_or_more(text: str) -> int:
    """argparse type of how many of something (hits): a whole number of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not 1 or more")
    return value


def date_seconds(text: str) -> int:
    """argparse type of a date (YYYY-MM-DD, or an ISO 8601 time; local time unless it names its
    offset): the Unix time it starts at. Dates at the ends of the calendar, where local time cannot
    be computed, are taken as UTC."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date; expected one like 2026-11-01"
        ) from None
    try:
        return int(moment.timestamp())
    # e.g. 0001-01-01 east of UTC: the local day starts in year 0
    except (
        OverflowError,
        ValueError,
        OSError,
    ):
        return int(
            (
                moment.replace(tzinfo=moment.tzinfo or UTC) - datetime(1970, 1, 1, tzinfo=UTC)
            ).total_seconds()
        )


def archived_hint(target: str, archive_path: Path | None, riffd: str = "riffd") -> str:
    """For a session id (or prefix) found in no project folder: when the archive at `archive_path`
    holds it (Claude Code deleted it), the words that say so and name the command that brings it
    back (`riffd`: how it starts, riffd.display.riffd_invocation); else nothing."""
    import sqlite3

    if archive_path is None or not archive_path.exists():
        return ""
    from riffd.archive.schema import ArchiveError
    from riffd.archive.store import Archive
    from riffd.database import DatabaseDamaged
    from riffd.display import shell_command
    from riffd.transcript.sessions import AmbiguousSession

    try:
        archive = Archive(archive_path, read_only=True)
    except (ArchiveError, DatabaseDamaged, sqlite3.Error, OSError):
        return ""
    try:
        held = archive.files_of(target)
    except (AmbiguousSession, sqlite3.Error):
        return ""
    finally:
        archive.close()
    if not held:
        return ""
    from riffd.display import display_path, key_path
    from riffd.transcript.sessions import main_transcript

    # The session's main transcripts still on disk (a subagent's transcript left behind does not
    # make its session resumable: `claude --resume` reads the main one)
    mains = {main_transcript(key_path(path), session) for _id, path, session in held}
    on_disk = sorted({display_path(main) for main in mains if os.path.lexists(main)})
    if on_disk:  # its lines say that session id, its file is named otherwise: not deleted
        return (
            f"; its lines name it, but its file is named otherwise: {', '.join(on_disk[:3])}"
            f"{' ...' if len(on_disk) > 3 else ''} (pass that path)"
        )
    return (
        "; the archive holds it (Claude Code deleted it?): "
        f"`{riffd} {shell_command('archive', 'restore', target)}` brings it back"
    )


def transcript_targets(
    paths: list[Path],
    projects: Sequence[str] = (),
    *,
    archive_path: Path | None = None,
    riffd: str = "riffd",
    roots: Sequence[Path] | None = None,
) -> tuple[list[Path], list[str]]:
    """Return the transcript files named by `paths` and the `projects`' Claude Code folders (the
    `roots` when both are empty) and errors for bad paths (a session the archive at
    `archive_path` holds, but no project folder, says so, with the restore that starts with
    `riffd`). Session ids, prefixes and project paths are looked up under `roots`: the
    configuration's (default: Claude Code's own, riffd.claude_code.folders.default_roots)."""
    from riffd.claude_code.folders import default_roots
    from riffd.claude_code.walk import iter_transcripts
    from riffd.transcript.targets import resolve_target

    roots = list(roots) if roots is not None else default_roots()
    errors: list[str] = []
    files: list[Path] = []
    for project in projects:
        try:
            files.extend(resolve_target(project, roots, riffd=riffd))
        except FileNotFoundError as exc:
            errors.append(str(exc))
    if not paths and not projects:
        there = [root for root in roots if root.is_dir()]
        if not there:
            first = roots[0] if roots else None
            print(
                f"riffd: no Claude Code transcripts here: {first or 'no root'} "
                + ("is not a folder" if first and os.path.lexists(first) else "does not exist")
                + " (set CLAUDE_CONFIG_DIR or the config's roots, or pass a file or folder)",
                file=sys.stderr,
            )
        paths = there

    def unlistable(exc: OSError) -> None:
        errors.append(
            f"{exc.filename}: cannot be listed ({exc.strerror or exc}); its transcripts were not looked at"
        )

    walked: list[Path] = []
    for path in paths:
        # a session id, a unique prefix of one, or `latest`
        if not path.exists() and os.sep not in str(path):
            try:
                files.extend(resolve_target(str(path), roots, riffd=riffd))
            except FileNotFoundError as exc:
                errors.append(
                    f"{exc}; nor is it a file or folder"
                    + archived_hint(str(path), archive_path, riffd)
                )
        elif not os.path.lexists(path):
            errors.append(f"{path}: no such file or folder: check the path")
        elif path.exists() and not (path.is_file() or path.is_dir()):
            errors.append(f"{path}: neither a file nor a folder: check the path")
        else:
            walked.append(path)
    try:  # one walk: a folder reached from two paths (a root and a link to it) is read once
        files.extend(iter_transcripts(walked, on_error=unlistable))
    except FileNotFoundError as exc:
        errors.append(f"{exc}: check the path")
    return files, errors
