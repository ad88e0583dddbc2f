"""Recovering a damaged archive: every line that can still be read is copied into the new archive.

The daemon moves a damaged `archive.db` aside (riffd.database) and starts a new one, which it fills
again from the transcripts that still exist. What only the old archive held (transcripts Claude Code
has deleted, earlier generations) is read back here file by file and generation by generation; a
part that cannot be read is named and skipped, never guessed. A file the new archive does not have
gets its generations as they were; for a file it has already, they are added as older generations,
except one the new archive already holds from its start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from riffd.archive.packs import PackDamaged
from riffd.archive.schema import ArchiveError
from riffd.archive.store import Archive

# What reading a damaged database or pack may raise besides OSError.
_READ_ERRORS = (
    sqlite3.Error,
    zstandard.ZstdError,
    PackDamaged,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
)


@dataclass
class Recovery:
    """What a recovery copied, and what it could not read."""

    files: int = 0
    generations: int = 0
    lines: int = 0
    already_there: int = 0
    unreadable: list[str] = field(default_factory=list)
    versions: int = 0  # of files kept whole (riffd.archive.wholefiles)


def readable_copy(damaged: Path, folder: Path) -> Path:
    """Copy a damaged database (and its WAL) into `folder` so SQLite can read what is left of it: a
    file cut short is filled up with zeros to the length its header gives, which SQLite otherwise
    refuses whole (with the zeros, only the pages that were lost cannot be read). Return the copy's
    path."""
    copy = folder / damaged.name
    shutil.copyfile(damaged, copy)
    with contextlib.suppress(FileNotFoundError):
        shutil.copyfile(f"{damaged}-wal", f"{copy}-wal")
    with open(copy, "r+b") as handle:
        header = handle.read(100)
        if len(header) == 100 and header.startswith(b"SQLite format 3\x00"):
            page_size = int.from_bytes(header[16:18], "big")
            page_size = 65536 if page_size == 1 else page_size
            pages = int.from_bytes(header[28:32], "big")
            if page_size * pages > os.fstat(handle.fileno()).st_size:
                handle.truncate(page_size * pages)
    return copy


def recover(damaged: Path, into: Archive) -> Recovery:
    """Copy every readable generation of every file of the archive at `damaged` into `into`; return
    what was done. `damaged` itself is only read. Raise sqlite3.Error when it cannot be opened at
    all, ArchiveError when it says a format this riffd cannot read (named as `damaged`)."""
    with tempfile.TemporaryDirectory(prefix=".riffd-recover-", dir=damaged.parent) as folder:
        copy = readable_copy(damaged, Path(folder))
        try:
            return _recover(copy, into)
        except ArchiveError as exc:
            said = (
                str(exc).replace(str(copy.resolve()), str(damaged)).replace(str(copy), str(damaged))
            )
            raise ArchiveError(said) from exc


def _recover(damaged: Path, into: Archive) -> Recovery:
    result = Recovery()
    source = Archive(damaged, read_only=True)
    try:
        try:
            files = source.files()
        except _READ_ERRORS as exc:
            result.unreadable.append(f"the list of archived files: {exc}")
            return result
        for file_id, path in files:
            try:
                generations = source.generations(file_id)
            except _READ_ERRORS as exc:
                result.unreadable.append(f"{path}: {exc}")
                continue
            readable = []
            for generation in generations:
                try:
                    readable.append(list(source.iter_file(file_id, generation)))
                except (*_READ_ERRORS, OSError) as exc:
                    result.unreadable.append(f"{path} (generation {generation}): {exc}")
            if readable:
                result.files += 1
                _merge(into, path, readable, result)
        _recover_whole(source, into, result)
    finally:
        source.close()
    return result


def _recover_whole(source: Archive, into: Archive, result: Recovery) -> None:
    """Copy every readable version of every file kept whole, below what the new archive holds of its
    path, and the plan slugs of the sessions."""
    try:
        versions = source.versions.every_version()
        slugs = source.versions.all_slugs()
    except _READ_ERRORS as exc:
        result.unreadable.append(f"the list of files kept whole: {exc}")
        return
    for version in versions:
        try:
            result.versions += into.whole.add_older(version, source.versions.content(version))
        except (*_READ_ERRORS, OSError) as exc:
            result.unreadable.append(f"{version.path} (version {version.version}): {exc}")
    for session_id, names in slugs.items():
        into.whole.record_slugs(session_id, names)


def _merge(into: Archive, path: str, generations: list[list[bytes]], result: Recovery) -> None:
    present = [
        file_id for file_id, archived_path, _session in into.files_of(path) if archived_path == path
    ]
    if not present:
        for number, lines in enumerate(generations):
            result.lines += into.add_lines(
                path,
                0,
                _without_newlines(lines),
                rewritten=number > 0,
                last_terminated=_terminated(lines),
            )
            result.generations += 1
        return
    held = [
        _digest(list(into.iter_file(present[0], generation)))
        for generation in into.generations(present[0])
    ]
    for lines in reversed(generations):  # newest first: each goes before the ones added already
        if any(_digest(lines) == digest for digest in held) or _prefix_of_held(
            into, present[0], lines
        ):
            result.already_there += 1
            continue
        result.lines += into.add_older_generation(
            path, _without_newlines(lines), last_terminated=_terminated(lines)
        )
        result.generations += 1


def _prefix_of_held(into: Archive, file_id: int, lines: list[bytes]) -> bool:
    """Whether the new archive's latest generation of the file starts with these lines (the
    transcript has only grown since the old archive took them)."""
    latest = into.iter_file(file_id)
    try:
        return all(next(latest, None) == line for line in lines)
    finally:
        latest.close()  # it holds the archive's lock while open


def _digest(lines: list[bytes]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
    return digest.hexdigest()


def _without_newlines(lines: list[bytes]) -> list[bytes]:
    return [line[:-1] if line.endswith(b"\n") else line for line in lines]


def _terminated(lines: list[bytes]) -> bool:
    return not lines or lines[-1].endswith(b"\n")
