"""`riffd archive restore`: a whole session written back from the archive, checked, the way `riffd
backups restore` writes.

A session id (or a prefix only one session has) names the whole session: its transcript and
subagents' transcripts, and every file kept whole (riffd.archive.wholefiles: saved tool outputs,
subagents' settings, checkpoints, its task list, its plans), each as its newest version. A path
names that one archived transcript. The files kept whole go back first, the main transcript last, so
a session is complete once `claude --resume` can see it.

What is not there is written beside its place and linked in (never over a file that appears
meanwhile), with the owner of its folder, the owner's bits of its mode and its modification time as
archived. What is there and the same is left alone, as is a transcript that has only grown since it
was archived: restore puts back what is missing. What is there and differs is named and left, unless
`--force`: then a transcript is replaced as a repair replaces one (riffd.repair.restore.put_back:
only while its session is idle, under its lock, after a verified backup, lines appended meanwhile
kept), a file kept whole after a verified backup of it, only while its session is idle. What the
archive gives is checked as it is written: a file it cannot give whole is not restored, and nothing
of it is left. With `--to DIR` the files keep their paths below the folder they all share (a single
file: its name).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.archive.packs import PackDamaged
from riffd.commands.common import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.fsio import REAL_FS, ensure_private_folder
from riffd.repair.locks import remove_stale_temps
from riffd.repair.outcomes import ApplyOptions, Failed, Skipped
from riffd.repair.restore import put_back, put_back_file
from riffd.transcript.sessions import ID_PREFIX, AmbiguousSession

# The temp name `riffd archive restore` used before it named its temps as riffd's other writers do
# (with its pid, riffd.repair.locks.temp_path_for): one left by a killed run is removed once it is
# this old.
LEGACY_TEMP = re.compile(r"^\..+\.riffd-restore\.tmp$")
STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True)
class Item:
    """One file to put back: where it was, its session, how to read it, its time and mode, and what
    it is."""

    path: str
    session_id: str | None
    chunks: Callable[[], Iterable[bytes]]
    mtime_ns: int | None
    mode: int | None  # None: a transcript (archived by lines)
    sha256: bytes | None = None
    size: int | None = None


@dataclass
class Tally:
    """What a restore did, by outcome."""

    restored: int = 0
    there: int = 0
    differ: int = 0
    skipped: int = 0
    failed: int = 0


def restore_files(archive: Any, args: argparse.Namespace) -> int:
    """Restore what `args.session` names from the open `riffd.archive.store.Archive` (see the
    module); exit 0 when everything is there now, 1 when a file was skipped (its session live, a
    file that differs left as it is), 2 when one failed or was refused."""
    try:
        items = _items(archive, args.session)
    except AmbiguousSession as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not items:
        print(
            f"riffd: error: nothing archived for {args.session!r} (a session id, a prefix of one, or an archived "
            "path)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    config = args.loaded_config
    options = ApplyOptions(
        backup_dir=config.backups.dir,
        claude_dir=config.claude_dir,
        roots=config.roots,
        quiet_period=config.repair.quiet_period if args.quiet_period is None else args.quiet_period,
        stale_temp_seconds=STALE_TEMP_SECONDS,
    )
    targets, shared = restore_targets([item.path for item in items], args.to)
    if shared is not None and any(os.sep in os.path.relpath(item.path, shared) for item in items):
        print(
            f"riffd: note: {len(items)} archived files are restored under their paths below {shared}",
            file=sys.stderr,
        )
    tally = Tally()
    swept: set[Path] = set()
    for item in items:
        _restore_one(archive, item, targets[item.path], args.force, options, swept, tally)
    said = [f"{tally.restored} restored"] + [
        f"{count} {name}"
        for count, name in (
            (tally.there, "already there"),
            (tally.differ, "differ (left as they are; --force replaces them after a backup)"),
            (tally.skipped, "skipped"),
            (tally.failed, "failed"),
        )
        if count
    ]
    print(f"riffd: {len(items)} archived file(s): " + ", ".join(said), file=sys.stderr)
    return (
        EXIT_ERROR if tally.failed else EXIT_FINDINGS if tally.skipped or tally.differ else EXIT_OK
    )


def _items(archive: Any, target: str) -> list[Item]:
    """The files `target` names, files kept whole first, then subagents' transcripts, the main
    transcripts last."""
    files = archive.files_of(target)
    path_like = os.sep in target or target.endswith(".jsonl")
    sessions = [] if path_like else sorted({session for _id, _path, session in files if session})
    if not files and not path_like:
        sessions = archive.whole.sessions_with_files(target) if ID_PREFIX.fullmatch(target) else []
        sessions = [session for session in sessions if session == target] or sessions
        if len(sessions) > 1:
            raise AmbiguousSession(
                f"{target}: {len(sessions)} archived sessions start with it: "
                f"{'; '.join(sessions[:10])}; type more of the id"
            )
    items = [
        Item(
            str(version.path),
            version.session_id,
            functools.partial(archive.whole.content, version),
            version.mtime_ns,
            version.mode,
            version.sha256,
            version.size,
        )
        for session in sessions
        for version in archive.whole.session_versions(session)
    ]
    transcripts = [
        Item(
            path,
            session,
            functools.partial(archive.iter_file, file_id),
            archive.restore_time(file_id),
            None,
        )
        for file_id, path, session in files
    ]
    transcripts.sort(key=lambda item: (os.sep + "subagents" + os.sep) not in item.path)
    return items + transcripts


def _restore_one(
    archive: Any,
    item: Item,
    target: Path,
    force: bool,
    options: ApplyOptions,
    swept: set[Path],
    tally: Tally,
) -> None:
    if os.path.lexists(target):
        try:
            same = _compare(item, target, exact=force)
        except PackDamaged as exc:
            print(
                f"riffd: error: {damage_message(archive, item.path, item.session_id, target, exc)}",
                file=sys.stderr,
            )
            tally.failed += 1
            return
        except OSError as exc:
            print(
                f"riffd: error: {target}: cannot be compared with the archive ({exc.strerror or exc}); left as it "
                "is",
                file=sys.stderr,
            )
            tally.failed += 1
            return
        if same or not force:
            if same:
                tally.there += 1
            else:
                print(
                    f"riffd: {target} exists and differs from the archive's copy; left as it is (--force replaces "
                    "it, only while its session is idle, after a backup of it)",
                    file=sys.stderr,
                )
                tally.differ += 1
            return
    try:
        make_folder(target.parent)
    except OSError as exc:
        print(
            f"riffd: error: {item.path}: not restored: its folder {target.parent} cannot be made "
            f"({exc.strerror or exc})",
            file=sys.stderr,
        )
        tally.failed += 1
        return
    if target.parent not in swept:
        swept.add(target.parent)
        sweep_leftovers(target.parent)
    session_options = dataclasses.replace(options, session_id=item.session_id)
    try:
        # (live also when the archived file's own session is registered, whatever the target's name)
        if item.mode is None:
            outcome = put_back(
                item.chunks,
                target,
                "the archive",
                replace=True,
                options=session_options,
                reason="before restoring it from riffd's archive",
                mtime_ns=item.mtime_ns,
            )
        else:
            assert item.mtime_ns is not None
            outcome = put_back_file(
                item.chunks,
                target,
                "the archive",
                mode=item.mode,
                mtime_ns=item.mtime_ns,
                replace=True,
                options=session_options,
                reason="before restoring it from riffd's archive",
            )
    except PackDamaged as exc:
        print(
            f"riffd: error: {damage_message(archive, item.path, item.session_id, target, exc)}",
            file=sys.stderr,
        )
        tally.failed += 1
        return
    if isinstance(outcome, Skipped):
        print(f"skipped {outcome.path}: {outcome.reason}: {outcome.detail}", file=sys.stderr)
        tally.skipped += 1
    elif isinstance(outcome, Failed):
        print(f"riffd: error: {outcome.detail}", file=sys.stderr)
        tally.failed += 1
    else:
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
        print(f"restored {item.path} -> {target}{safety}")
        tally.restored += 1


def _compare(item: Item, target: Path, *, exact: bool) -> bool:
    """Whether the file at `target` is what the archive holds (a transcript, unless `exact`: or that
    with lines appended since); raise PackDamaged when the archive cannot give it, OSError when the
    file cannot be read (a folder, a link: never the same)."""
    if not os.path.isfile(target) or os.path.islink(target):
        return False
    with open(target, "rb") as handle:
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
            getattr(
                chunks, "close", lambda: None
            )()  # (a transcript's lines hold the archive's lock while open)
        return not (exact and handle.read(1))


def restore_targets(paths: list[str], to: Path | None) -> tuple[dict[str, Path], Path | None]:
    """Where each archived path is restored: its own place; with `to`, that file (one path, `to` not
    a folder), or each under its path below the folder they all share (returned second, else None),
    so no file is written over another and a session keeps its tree (one path: `to`/its name)."""
    if to is None:
        return {path: Path(path) for path in paths}, None
    if len(paths) == 1 and not to.is_dir():
        return {paths[0]: to}, None
    shared = Path(os.path.commonpath([os.path.dirname(path) for path in paths]))
    return {path: to / os.path.relpath(path, shared) for path in paths}, shared


def make_folder(folder: Path) -> None:
    """Make `folder` and its missing parents as riffd makes folders (0700, whatever the umask),
    owned as the nearest folder above them that exists (riffd run as root leaves a user's tree
    theirs)."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing == folder:
        return
    made = [
        parent
        for parent in [folder, *folder.parents]
        if parent.is_relative_to(existing) and parent != existing
    ]
    ensure_private_folder(REAL_FS, folder)
    owner = existing.stat()
    if os.geteuid() == 0:
        for path in made:
            os.chown(path, owner.st_uid, owner.st_gid)


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
