"""`riffd archive restore`: archived transcripts written back, checked, the way `riffd backups restore` writes.

A file that is not there is written beside its place and linked in (never over a file that appears meanwhile), with
the owner of its folder; one that is there is replaced only with `--force`, and then as a repair replaces a
transcript (riffd.repair.restore.put_back): only while its session is idle, under its lock, after a verified backup
of what is there, with lines appended meanwhile kept. What the archive gives is checked as it is written (each run's
checksum, the file's bytes and lines): a file the archive cannot give whole is not restored, and nothing of it is left
at its place. With `--to DIR` the files keep their names, or, when two of them share one, their paths below the folder
they all share.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from riffd.archive.packs import PackDamaged
from riffd.commands.common import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.fsio import REAL_FS, ensure_private_folder
from riffd.repair.locks import remove_stale_temps
from riffd.repair.outcomes import ApplyOptions, Failed, Skipped
from riffd.repair.restore import put_back

# The temp name `riffd archive restore` used before it named its temps as riffd's other writers do (with its pid,
# riffd.repair.locks.temp_path_for): one left by a killed run is removed once it is this old.
LEGACY_TEMP = re.compile(r"^\..+\.riffd-restore\.tmp$")
STALE_TEMP_SECONDS = 3600.0


def restore_files(archive: Any, args: argparse.Namespace) -> int:
    """Restore each file of the open `riffd.archive.store.Archive` that `args.session` names (see the module); exit 0
    when all were restored, 1 when one was skipped (its session live, the file changed), 2 when one failed or was
    refused."""
    files = archive.files_of(args.session)
    if not files:
        print(f"riffd: error: nothing archived for {args.session!r} (a session id or an archived path)",
              file=sys.stderr)
        return EXIT_ERROR
    config = args.loaded_config
    options = ApplyOptions(backup_dir=config.backups.dir, claude_dir=config.claude_dir, roots=config.roots,
                           quiet_period=config.repair.quiet_period if args.quiet_period is None else args.quiet_period,
                           stale_temp_seconds=STALE_TEMP_SECONDS)
    targets, shared = restore_targets([path for _file_id, path, _session in files], args.to)
    if shared is not None:
        print(f"riffd: note: {len(files)} archived files share names, so each is restored under its path below "
              f"{shared}", file=sys.stderr)
    failed = skipped = 0
    swept: set[Path] = set()
    for file_id, path, session in files:
        target = targets[path]
        if os.path.lexists(target) and not args.force:
            print(f"riffd: error: {target} exists; use --to for another place, or --force to replace it (only while "
                  "its session is idle, after a backup of it)", file=sys.stderr)
            failed += 1
            continue
        try:
            make_folder(target.parent)
        except OSError as exc:
            print(f"riffd: error: {path}: not restored: its folder {target.parent} cannot be made "
                  f"({exc.strerror or exc})", file=sys.stderr)
            failed += 1
            continue
        if target.parent not in swept:
            swept.add(target.parent)
            sweep_leftovers(target.parent)
        try:
            # (live also when the archived file's own session is registered, whatever the target's name)
            outcome = put_back(functools.partial(archive.iter_file, file_id), target, "the archive", replace=True,
                               options=dataclasses.replace(options, session_id=session),
                               reason="before restoring it from riffd's archive")
        except PackDamaged as exc:
            print(f"riffd: error: {damage_message(archive, path, session, target, exc)}", file=sys.stderr)
            failed += 1
            continue
        if isinstance(outcome, Skipped):
            print(f"skipped {outcome.path}: {outcome.reason}: {outcome.detail}", file=sys.stderr)
            skipped += 1
        elif isinstance(outcome, Failed):
            print(f"riffd: error: {outcome.detail}", file=sys.stderr)
            failed += 1
        else:
            safety = (f" (what was there is backed up as {outcome.safety_backup_id}"
                      + (f"; {outcome.carried_over_bytes} bytes appended meanwhile are kept after it"
                         if outcome.carried_over_bytes else "") + ")") if outcome.safety_backup_id else ""
            print(f"restored {path} -> {target}{safety}")
    return EXIT_ERROR if failed else EXIT_FINDINGS if skipped else EXIT_OK


def restore_targets(paths: list[str], to: Path | None) -> tuple[dict[str, Path], Path | None]:
    """Where each archived path is restored: its own place; with `to`, that file (one path, `to` not a folder) or
    `to`/its name, unless two paths share a name: then `to`/its path below the folder they all share (returned
    second, else None), so no file is written over another."""
    if to is None:
        return {path: Path(path) for path in paths}, None
    if len(paths) == 1 and not to.is_dir():
        return {paths[0]: to}, None
    names = [Path(path).name for path in paths]
    if len(set(names)) == len(names):
        return {path: to / name for path, name in zip(paths, names, strict=True)}, None
    shared = Path(os.path.commonpath([os.path.dirname(path) for path in paths]))
    return {path: to / os.path.relpath(path, shared) for path in paths}, shared


def make_folder(folder: Path) -> None:
    """Make `folder` and its missing parents as riffd makes folders (0700, whatever the umask), owned as the nearest
    folder above them that exists (riffd run as root leaves a user's tree theirs)."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing == folder:
        return
    made = [parent for parent in [folder, *folder.parents] if parent.is_relative_to(existing) and parent != existing]
    ensure_private_folder(REAL_FS, folder)
    owner = existing.stat()
    if os.geteuid() == 0:
        for path in made:
            os.chown(path, owner.st_uid, owner.st_gid)


def sweep_leftovers(folder: Path) -> None:
    """Remove riffd's temp files in `folder` that no running process writes: those of riffd processes that are gone
    (riffd.repair.locks), and the pid-less ones an earlier `riffd archive restore` left when killed, once an hour
    old (a run of that version would long have finished)."""
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


def damage_message(archive: Any, path: str, session: str | None, target: Path, damage: PackDamaged) -> str:
    """Say that `path` was not restored because the archive cannot give it whole: which packs, which other archived
    files they hold lines of, and what the user can do."""
    users = archive.pack_users(damage.packs) if damage.packs else []
    others = sorted({user_path for user_path, _session, _generation in users if user_path != path})
    named = "; ".join(others[:5]) + (f"; and {len(others) - 5} more" if len(others) > 5 else "")
    return (f"{path}: not restored, the archive cannot give it whole: {damage}; nothing was written to {target}. "
            + (f"The damaged pack(s) hold lines of {len(others)} other archived file(s) too: {named}. "
               if others else "")
            + "`riffd archive verify` names every damaged pack and what can be done for each file"
            + (f"; `riffd backups list {session}` shows riffd's own backups of this session" if session else ""))
