"""`riffd archive restore`: a whole session written back from the archive, checked, the way `riffd
backups restore` writes.

A session id (or a prefix only one session has) names the whole session (riffd.commands.restore_items:
its transcripts, every file of it kept whole, the saved outputs its transcripts name in another
session's folder, its plans), each as its newest version. A path names that one archived transcript.
The files kept whole go back first, the transcripts last, and a session's transcripts are held back
when any other file of it failed, so `claude --resume` never sees half a session.

What is not there is written beside its place and linked in (never over a file that appears
meanwhile: one that did and is the same counts as there), with the owner of its folder, the owner's
bits of its mode and its modification time as archived (the time of now for a file Claude Code's cleanup
would delete again by its own age: riffd.commands.restore_items.renew_times), and never through a symlinked folder below
the folder it is restored into (riffd.repair.folders). What is there and the same is left alone, as
is a transcript that has only grown since it was archived: restore puts back what is missing. What
is there and differs is named and left, unless `--force`: then a transcript is replaced as a repair
replaces one (riffd.repair.restore.put_back: only while its session is idle, under its lock, after a
verified backup, lines appended meanwhile kept), a file kept whole after a verified backup of it,
only while its session is idle. What the archive gives is checked as it is written: a file it cannot
give whole is not restored, and nothing of it is left. With `--to DIR` the files keep their paths
below the folder they all share (a single file: its name).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import hashlib
import os
import re
import sqlite3
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riffd.archive.packs import PackDamaged
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, skipped_line
from riffd.commands.restore_items import Item, renew_times, restore_items, restore_targets
from riffd.display import shell_command
from riffd.fsio import NOFOLLOW
from riffd.repair.folders import check_folders, make_folder
from riffd.repair.locks import remove_stale_temps
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FailReason,
    RestoreOutcome,
    Skipped,
    SkipReason,
)
from riffd.repair.restore import put_back, put_back_file
from riffd.transcript.sessions import AmbiguousSession

# The temp name `riffd archive restore` used before it named its temps as riffd's other writers do
# (with its pid, riffd.repair.locks.temp_path_for): one left by a killed run is removed once it is
# this old.
LEGACY_TEMP = re.compile(r"^\..+\.riffd-restore\.tmp$")
STALE_TEMP_SECONDS = 3600.0
# What a restore says, each line of a kind: restored (stdout: `restored PATH -> TARGET`), error,
# note, skipped, info (stderr)
Say = Callable[[str, str], None]
# How the outcomes are said in the summary, in its order (restored comes first)
SAID = (
    ("there", "already there"),
    ("differ", "differ (left as they are; --force replaces them after a backup)"),
    ("skipped", "skipped"),
    ("failed", "failed"),
    ("held", "held back (another file of their session failed)"),
    ("unheld", "named by the transcripts and never archived"),
)


@dataclass
class RestoreRun:
    """What `riffd archive restore` did: how many archived files it named, what came of each (the
    tally), the files it wrote (archived path, where), and every line it said, by kind."""

    items: int = 0
    tally: Counter[str] = field(default_factory=Counter)
    written: list[tuple[str, Path]] = field(default_factory=list)
    # where a file was not written (its session live, or the file changed meanwhile)
    skipped: list[Path] = field(default_factory=list)
    said: list[tuple[str, str]] = field(default_factory=list)
    summary: str = ""  # how many were restored, there, differ, ...

    @property
    def exit_code(self) -> int:
        """0 when everything is there now, 1 when a file was skipped, differs, or was never
        archived, 2 when one failed or was held back (or nothing is archived under that name)."""
        tally = self.tally
        if tally["failed"] or tally["held"] or not self.items:
            return EXIT_ERROR
        if tally["skipped"] or tally["differ"] or tally["unheld"]:
            return EXIT_FINDINGS
        return EXIT_OK

    def errors(self) -> list[str]:
        """What it said was an error."""
        return [text for kind, text in self.said if kind == "error"]


def print_said(kind: str, text: str) -> None:
    """Say one line of a restore as `riffd archive restore` prints it."""
    if kind == "restored":
        print(text)
    elif kind == "skipped":
        print(text, file=sys.stderr)
    elif kind == "info":
        print(f"riffd: {text}", file=sys.stderr)
    else:
        print(f"riffd: {kind}: {text}", file=sys.stderr)


def restore_files(archive: Any, args: argparse.Namespace) -> int:
    """Restore what `args.session` names from the open `riffd.archive.store.Archive` (see the
    module), printing as it goes, and what to do about files a session not idle held back; exit as
    RestoreRun.exit_code says."""
    config = args.loaded_config
    run = restore_session_files(
        archive,
        args.session,
        config,
        to=args.to,
        force=args.force,
        quiet_period=args.quiet_period,
        keep_times=args.keep_times,
        say=print_said,
    )
    if run.skipped:
        print(f"riffd: {_skipped_advice(run.skipped, args)}", file=sys.stderr)
    return run.exit_code


def _skipped_advice(skipped: list[Path], args: argparse.Namespace) -> str:
    """What to do about files a restore held back: the same command once the session is idle, and,
    when no Claude Code process has any of them open, the one with `--quiet-period 0` that restores
    them now."""
    from riffd.claude_code.liveness import claude_dirs_for, session_liveness
    from riffd.commands.advice import archive_restore_words

    config = args.loaded_config
    words = archive_restore_words(args)
    again = f"run `{shell_command(*words, args.session)}` again once the session is idle"
    held = any(
        session_liveness(path, claude_dirs_for(path, config.claude_dir, config.roots), 0)[0]
        for path in skipped
    )
    if held:
        return f"{len(skipped)} file(s) held back: {again}"
    now = shell_command(*words, "--quiet-period", "0", args.session)
    return (
        f"{len(skipped)} file(s) held back: {again}; no Claude Code process has it open: if you are "
        f"sure the session is closed, `{now}` restores them now"
    )


def restore_session_files(
    archive: Any,
    session: str,
    config: Any,
    *,
    to: Path | None = None,
    force: bool = False,
    quiet_period: float | None = None,
    keep_times: bool = False,
    say: Say | None = None,
) -> RestoreRun:
    """Restore what `session` (a session id, a prefix of one, or an archived path) names from the
    open archive, per `config` (see the module); each line said goes to `say` as it comes, and
    into the result. A file whose own time Claude Code's cleanup would delete it by gets the time
    of now (`renew_times`), unless `keep_times`."""
    run = RestoreRun()

    def said(kind: str, text: str) -> None:
        run.said.append((kind, text))
        if say is not None:
            say(kind, text)

    try:
        items, missing = restore_items(archive, session, config.roots)
    except AmbiguousSession as exc:
        said("error", str(exc))
        return run
    if not items:
        said(
            "error",
            f"nothing archived for {session!r} (a session id, a prefix of one, or an archived path)",
        )
        return run
    run.items = len(items)
    # (a copy elsewhere, `--to`, is no Claude Code folder: its files keep their own times)
    items, renewed = (
        (items, {}) if keep_times or to is not None else renew_times(items, config.claude_dir)
    )
    options = ApplyOptions(
        backup_dir=config.backups.dir,
        claude_dir=config.claude_dir,
        roots=config.roots,
        quiet_period=config.repair.quiet_period if quiet_period is None else quiet_period,
        stale_temp_seconds=STALE_TEMP_SECONDS,
    )
    targets, shared = restore_targets(items, to)
    if shared is not None and any(os.sep in os.path.relpath(item.path, shared) for item in items):
        said("note", f"{len(items)} archived files are restored under their paths below {shared}")
    swept: set[Path] = set()
    failed: set[str] = set()  # the sessions a file of which failed
    for item, target in targets:
        held = item.mode is None and item.part_of is not None and item.part_of in failed
        outcome = _restore_one(archive, item, target, force, options, swept, held, said)
        run.tally[outcome] += 1
        if outcome == "restored":
            run.written.append((item.path, target))
        elif outcome == "skipped":
            run.skipped.append(target)
        if outcome == "failed" and item.part_of is not None:
            failed.add(item.part_of)
    for tail in missing:
        said(
            "note",
            f"the transcripts name the saved output .../{tail}, which the archive does not hold "
            "(deleted before riffd took it); it cannot be restored",
        )
    _say_renewed(archive, run, renewed, config, said)
    run.tally["unheld"] = len(missing)
    summary = [f"{run.tally['restored']} restored"] + [
        f"{run.tally[name]} {words}" for name, words in SAID if run.tally[name]
    ]
    run.summary = f"{len(items)} archived file(s): " + ", ".join(summary)
    said("info", run.summary)
    return run


def _say_renewed(
    archive: Any, run: RestoreRun, renewed: dict[str, int], config: Any, said: Say
) -> None:
    """Say which restored files got the time of now, not their own; and, where the archive can be
    written, take them in as they now are (else `riffd sessions` would call the session not whole
    until the daemon looks at them)."""
    written = [(path, target) for path, target in run.written if path in renewed]
    if not written:
        return
    oldest = min(renewed[path] for path, _target in written)
    said(
        "note",
        f"{len(written)} restored file(s) Claude Code deletes by their own age (saved outputs, task "
        "lists, plans) have the time of now, not their own (the oldest "
        f"{time.strftime('%Y-%m-%d', time.localtime(oldest / 1e9))}), past its cleanupPeriodDays: "
        "its next start would delete them again, even once the session is resumed; `--keep-times` "
        "keeps their own",
    )
    if archive.connection.read_only:
        return  # (the MCP server's: the daemon takes them in)
    from riffd.archive.ingest import ingest_file
    from riffd.claude_code.session_files import classify, config_folders

    configs = config_folders(config.roots, config.claude_dir)
    for path, target in written:
        if os.path.abspath(path) != os.path.abspath(target):
            continue  # (restored elsewhere, `--to`: not a session's file)
        try:
            found = classify(target, config.roots, configs)
            if found is not None:
                archive.whole.keep(found)
            elif path.endswith(".jsonl"):  # (a transcript: its time noted, no line added)
                ingest_file(archive, target)
        except (OSError, sqlite3.Error) as exc:
            said("note", f"{target}: restored; the archive takes its new time later ({exc})")


def _restore_one(
    archive: Any,
    item: Item,
    target: Path,
    force: bool,
    options: ApplyOptions,
    swept: set[Path],
    held: bool,
    said: Say,
) -> str:
    """Restore one item to `target`; return what came of it: restored, there, differ, skipped,
    failed or held (not written: `held`, another file of its session failed)."""
    try:
        if item.base is not None:
            check_folders(item.base, target.parent, project_link=item.project_link)
    except OSError as exc:
        said("error", f"{item.path}: not restored: {exc.strerror or exc}")
        return "failed"
    if os.path.lexists(target):
        there = _existing(archive, item, target, force, said)
        if there is not None:
            return there
    if held:
        said(
            "error",
            f"{item.path}: not restored: another file of session {item.part_of} failed (above), "
            "and its transcripts go back only once all of it can, so that `claude --resume` never "
            "sees half a session; see what failed, then run the restore again",
        )
        return "held"
    try:
        make_folder(target.parent)
    except OSError as exc:
        said(
            "error",
            f"{item.path}: not restored: its folder {target.parent} cannot be made "
            f"({exc.strerror or exc})",
        )
        return "failed"
    if target.parent not in swept:
        swept.add(target.parent)
        sweep_leftovers(target.parent)
    try:
        outcome = _put_back(item, target, force, options)
    except PackDamaged as exc:
        said("error", damage_message(archive, item.path, item.session_id, target, exc))
        return "failed"
    if not force and _appeared(outcome):  # (another restore, say, put it there meanwhile)
        return _existing(archive, item, target, force, said) or "differ"
    if isinstance(outcome, Skipped):
        said("skipped", skipped_line(outcome.path, outcome.reason, outcome.detail))
        return "skipped"
    if isinstance(outcome, Failed):
        said("error", str(outcome.detail))
        return "failed"
    safety = (
        (
            f" (what was there is backed up as {outcome.safety_backup_id}"
            + (
                f"; {outcome.carried_over_bytes} bytes appended meanwhile are kept after it"
                if outcome.carried_over_bytes
                else ""
            )
            + ")"
        )
        if outcome.safety_backup_id
        else ""
    )
    where = "" if os.path.abspath(item.path) == os.path.abspath(target) else f" -> {target}"
    said("restored", f"restored {item.path}{where}{safety}")
    return "restored"


def _put_back(item: Item, target: Path, force: bool, options: ApplyOptions) -> RestoreOutcome:
    """Write `item` to `target`: as a new file, or with `force` over the file there (see the
    module); live also when the archived file's own session is registered, whatever the target's
    name."""
    session_options = dataclasses.replace(options, session_id=item.session_id)
    reason = "before restoring it from riffd's archive"
    if item.mode is None:
        return put_back(
            item.chunks,
            target,
            "the archive",
            replace=force,
            options=session_options,
            reason=reason,
            mtime_ns=item.mtime_ns,
        )
    assert item.mtime_ns is not None
    return put_back_file(
        item.chunks,
        target,
        "the archive",
        mode=item.mode,
        mtime_ns=item.mtime_ns,
        replace=force,
        options=session_options,
        reason=reason,
    )


def _appeared(outcome: RestoreOutcome) -> bool:
    """Whether a file appeared at the place while the restore wrote beside it."""
    return (isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED) or (
        isinstance(outcome, Failed) and outcome.reason == FailReason.DESTINATION_EXISTS
    )


def _existing(archive: Any, item: Item, target: Path, force: bool, said: Say) -> str | None:
    """For a file at `target`: there (the same), differ (left, without `force`), failed (it or the
    archive's copy cannot be read), or None (it differs and `force` replaces it)."""
    try:
        same = _compare(item, target, exact=force)
    except PackDamaged as exc:
        said("error", damage_message(archive, item.path, item.session_id, target, exc))
        return "failed"
    except OSError as exc:
        said(
            "error",
            f"{target}: cannot be compared with the archive ({exc.strerror or exc}); left as it is",
        )
        return "failed"
    if same:
        return "there"
    if force:
        return None
    said(
        "info",
        f"{target} exists and differs from the archive's copy; left as it is (--force replaces it, "
        "only while its session is idle, after a backup of it)",
    )
    return "differ"


def _compare(item: Item, target: Path, *, exact: bool) -> bool:
    """Whether the file at `target` is what the archive holds (a transcript, unless `exact`: or that
    with lines appended since); raise PackDamaged when the archive cannot give it, OSError when the
    file cannot be read. Anything but a regular file (a link, a folder, a FIFO: opened without
    waiting for a writer) is never the same."""
    try:
        fd = os.open(target, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            return False
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        if item.mode is not None:  # a file kept whole: by its hash
            digest = hashlib.sha256()
            while block := handle.read(1 << 20):
                digest.update(block)
            return digest.digest() == item.sha256
        chunks = iter(item.chunks())
        try:
            for chunk in chunks:
                if handle.read(len(chunk)) != chunk:
                    return False
        finally:
            # (a transcript's lines hold the archive's lock while open)
            getattr(chunks, "close", lambda: None)()
        return not (exact and handle.read(1))


def sweep_leftovers(folder: Path) -> None:
    """Remove riffd's temp files in `folder` that no running process writes: those of riffd
    processes that are gone (riffd.repair.locks), and the pid-less ones an earlier `riffd archive
    restore` left when killed, once an hour old (a run of that version would long have finished)."""
    remove_stale_temps(folder, STALE_TEMP_SECONDS)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in filter(LEGACY_TEMP.match, names):
        try:
            status = os.lstat(folder / name)
            if time.time() - status.st_mtime >= STALE_TEMP_SECONDS:
                os.unlink(folder / name)
        except OSError:
            continue


def damage_message(
    archive: Any, path: str, session: str | None, target: Path, damage: PackDamaged
) -> str:
    """Say that `path` was not restored because the archive cannot give it whole: which packs, which
    other archived files they hold lines of, and what the user can do."""
    users = archive.pack_users(damage.packs) if damage.packs else []
    others = sorted({user_path for user_path, _session, _generation in users if user_path != path})
    named = "; ".join(others[:5]) + (f"; and {len(others) - 5} more" if len(others) > 5 else "")
    return (
        f"{path}: not restored, the archive cannot give it whole: {damage}; nothing was written to {target}. "
        + (
            f"The damaged pack(s) hold lines of {len(others)} other archived file(s) too: {named}. "
            if others
            else ""
        )
        + "`riffd archive verify` names every damaged pack and what can be done for each file"
        + (
            f"; `riffd backups list {session}` shows riffd's own backups of this session"
            if session
            else ""
        )
    )
