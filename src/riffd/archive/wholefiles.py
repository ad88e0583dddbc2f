"""The files of a session kept whole: every version of each, its bytes stored once.

A file (riffd.claude_code.session_files: a saved tool output, a subagent's settings, a checkpoint, a
task list, a plan) is stored as a blob (riffd.archive.blobs: named by the SHA-256 of its bytes, in
checked zstd frames). Each version of a path is a row of `session_files`: the session, the kind,
the folder it is kept relative to and its path below it, the version number, the blob, size, mode
and modification time, and when riffd took it. A version is never changed: other bytes, mode or time
at the same path are the next version.

A file is read once to hash it (known bytes then cost one row) and, when new, read again while it
is compressed, inside one transaction that records the blob, its frames and the version together,
and only when the bytes read the second time hash the same: a kill -9 at any point leaves a file
stored whole or not at all. The transaction looks at the newest version again first, so two
processes taking the same file at once add one version. (When a file has settled is the daemon's
business: riffd.daemon.keeper.)

A file is the newest version as it is when one stat says so: the same size, modification time and
mode (its type and owner's bits, what a restore writes back:
riffd.claude_code.session_files.kept_mode), and no change of its status since riffd took that
version (its ctime before then: a rewrite that kept the size and gave the time back is read again,
as is a file restored since, which hashes the same).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.archive.blobcompact import BlobCompaction
from riffd.archive.blobs import BlobStore, file_chunks, moved
from riffd.archive.connection import ArchiveConnection, WriteGroup
from riffd.archive.packs import PackDamaged
from riffd.claude_code.session_files import (
    PLAN,
    SessionFile,
    file_state,
    kept_mode,
    linked_folder,
)
from riffd.display import key_path, path_key
from riffd.fsio import NOFOLLOW, REAL_FILES, RetryingFS


@dataclass(frozen=True)
class Version:
    """One archived version of a session file."""

    session_id: str | None
    kind: str
    base: str
    relative: str
    version: int
    blob: int
    sha256: bytes
    size: int
    mode: int
    mtime_ns: int
    seen: int

    @property
    def path(self) -> Path:
        """Where the file was (and where restore puts it back)."""
        return Path(self.base) / self.relative


@dataclass(frozen=True)
class Kept:
    """What `WholeFiles.keep` did: `outcome` is stored (new bytes), known (a new version of bytes
    held already), unchanged (the archive holds it as it is), changing (it changed while it was
    read), gone, skipped (not a regular file) or linked (reached through a symlinked folder riffd
    does not follow: riffd.claude_code.session_files.linked_folder)."""

    outcome: str
    version: int | None = None
    stored_bytes: int = 0
    read_bytes: int = 0


class _Changing(Exception):
    """A file's bytes changed between the two reads (what `keep` wrote of it is undone)."""


# Files `keep` stores in one transaction inside `together` (an ingest's): one COMMIT was a third of
# the time a small file took alone
TOGETHER_FILES = 100
TOGETHER_BYTES = 16 << 20


class WholeFiles:
    """The session files of one archive connection (its lock held for every statement), their
    bytes in its blobs."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection
        self._blobs = BlobStore(connection)
        # the blobs written fast compressed again at the settled level
        self.compact = BlobCompaction(connection).compact

    @property
    def present(self) -> bool:
        """Whether this archive has the tables (an archive opened read-only before riffd added them
        has not)."""
        with self._connection.lock:
            return (
                self._connection.db.execute(
                    "SELECT 1 FROM sqlite_schema WHERE name = 'session_files'"
                ).fetchone()
                is not None
            )

    # --- storing ----------------------------------------------------------------------------------

    @contextmanager
    def together(self) -> Iterator[WriteGroup]:
        """`keep` many files in few transactions (`riffd archive ingest`): each file is a savepoint
        of a transaction committed once the files kept, said by `WriteGroup.wrote` with the bytes
        each read, reach TOGETHER_FILES or TOGETHER_BYTES, and at the end. A file that cannot be
        read or changes while it is read takes back only its own rows; a kill takes back the files
        since the last commit, whole (their files are where they were, for the next ingest or the
        daemon)."""
        with self._connection.grouped(TOGETHER_BYTES, steps=TOGETHER_FILES) as group:
            yield group

    def keep(
        self,
        found: SessionFile,
        *,
        fs: RetryingFS = REAL_FILES,
        again: bool = False,
    ) -> Kept:
        """Archive the file `found` as it is now, unless the archive holds it as it is; raise
        OSError when it cannot be read, sqlite3.Error when the archive cannot be written (see the
        module for the rest). `again` (`riffd archive verify --fix`): archive it even if the archive
        says it holds it, and store the frames of its bytes afresh when the blob they hash to cannot
        be read back whole. Reads that fail with EIO are tried again as `fs` says."""
        base, relative = path_key(found.base), path_key(found.relative)
        if linked_folder(found) is not None:
            return Kept("linked")
        try:
            status = fs.stat(found.path)
        except FileNotFoundError:
            return Kept("gone")
        if not stat.S_ISREG(status.st_mode):
            return Kept("skipped")
        latest = self.latest(base, relative)
        if not again and latest is not None and _as_taken(latest, status):
            return Kept("unchanged", version=latest.version)
        try:
            fd = fs.open(found.path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return Kept("gone")
        try:
            before = fs.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return Kept("skipped")
            digest = hashlib.sha256()
            for chunk in file_chunks(fs, fd, before.st_size):
                digest.update(chunk)
            if moved(before, fs.fstat(fd)) or moved(before, status):
                return Kept("changing")
            sha256 = digest.digest()
            if not again and _same(latest, sha256, before):
                return Kept("unchanged", version=latest.version if latest else None)
            healing = again and self._blobs.unreadable(sha256)
            with self._connection.undoable():
                # Another process may have taken it meanwhile (an ingest beside the daemon)
                latest = self.latest(base, relative)
                if not again and _same(latest, sha256, before):
                    return Kept("unchanged", version=latest.version if latest else None)
                blob, stored = self._blobs.find(sha256), 0
                # (healing: the same bytes by their hash, for every version of them)
                if blob is None or healing:
                    blob, stored = self._blobs.store_file(fs, fd, before, sha256, blob)
                    if blob is None:  # the bytes changed between the two reads: undone
                        raise _Changing
                version = self._add_version(found, base, relative, blob, sha256, before)
        except _Changing:
            return Kept("changing")
        finally:
            fs.close(fd)
        return Kept(
            "stored" if stored else "known",
            version=version,
            stored_bytes=stored,
            read_bytes=before.st_size * (2 if stored else 1),
        )

    def _add_version(
        self,
        found: SessionFile,
        base: str,
        relative: str,
        blob: int,
        sha256: bytes,
        status: os.stat_result,
    ) -> int:
        row = self._connection.db.execute(
            "SELECT MAX(version) FROM session_files WHERE base = ? AND path = ?", (base, relative)
        ).fetchone()
        version = (row[0] or 0) + 1
        self._connection.db.execute(
            "INSERT INTO session_files(session_id, kind, base, path, version, blob, size, mode, mtime_ns, seen) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                found.session_id,
                found.kind,
                base,
                relative,
                version,
                blob,
                status.st_size,
                status.st_mode,
                status.st_mtime_ns,
                int(time.time()),
            ),
        )
        return version

    def add_older(self, version: Version, chunks: Iterable[bytes]) -> bool:
        """Add a version recovered from another archive (riffd.archive.recover) below every version
        this one holds of its path, so the newest stays the newest; return False when this archive
        holds those bytes, mode and time at that path already. Raise PackDamaged, adding nothing,
        when `chunks` are not the version's bytes."""
        base, relative = path_key(version.base), path_key(version.relative)
        with self._connection.writing():
            held = self._connection.db.execute(
                "SELECT MIN(version) FROM session_files JOIN blobs ON blobs.id = blob WHERE "
                "base = ? AND path = ? AND (blobs.hash, mode, mtime_ns) = (?, ?, ?)",
                (base, relative, version.sha256, version.mode, version.mtime_ns),
            ).fetchone()[0]
            if held is not None:
                return False
            blob = self._blobs.find(version.sha256)
            if blob is None:
                blob = self._blobs.store_chunks(
                    version.sha256,
                    version.size,
                    chunks,
                    f"{version.path} (version {version.version})",
                )
            lowest = self._connection.db.execute(
                "SELECT MIN(version) FROM session_files WHERE base = ? AND path = ?",
                (base, relative),
            ).fetchone()[0]
            self._connection.db.execute(
                "INSERT INTO session_files(session_id, kind, base, path, version, blob, size, mode, mtime_ns, seen) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    version.session_id,
                    version.kind,
                    base,
                    relative,
                    version.version if lowest is None else lowest - 1,
                    blob,
                    version.size,
                    version.mode,
                    version.mtime_ns,
                    version.seen,
                ),
            )
        return True

    def every_version(self) -> list[Version]:
        """Every version of every file, newest first per path (what a recovery copies)."""
        if not self.present:
            return []
        with self._connection.lock:
            rows = self._connection.db.execute(
                _SELECT_VERSIONS + "ORDER BY base, path, version DESC"
            ).fetchall()
        return [_version(row) for row in rows]

    def record_slugs(self, session_id: str, slugs: Iterable[str]) -> None:
        """Record, in a transaction of its own, that the session's lines name these plan slugs."""
        with self._connection.writing():
            note_slugs(self._connection.db, session_id, slugs)

    # --- reading ----------------------------------------------------------------------------------

    def latest(self, base: str, relative: str) -> Version | None:
        """The newest version of a path (keys as `path_key` makes them), or None."""
        with self._connection.lock:
            row = self._connection.db.execute(
                _SELECT_VERSIONS + "WHERE base = ? AND path = ? ORDER BY version DESC LIMIT 1",
                (base, relative),
            ).fetchone()
        return None if row is None else _version(row)

    def session_versions(self, session_id: str, *, every: bool = False) -> list[Version]:
        """The newest version of each file of a session (`every`: all versions), its plans (by the
        slugs its lines name) included, by path."""
        if not self.present:
            return []
        with self._connection.lock:
            rows = self._connection.db.execute(
                _SELECT_VERSIONS
                + "WHERE session_id = ? OR (kind = ? AND path IN (SELECT 'plans/' || slug || '.md' FROM plan_slugs "
                "WHERE session_id = ?)) ORDER BY base, path, version",
                (session_id, PLAN, session_id),
            ).fetchall()
        versions = [_version(row) for row in rows]
        if every:
            return versions
        newest: dict[tuple[str, str], Version] = {}
        for version in versions:
            newest[(version.base, version.relative)] = version
        return list(newest.values())

    def sessions_with_files(self, prefix: str = "") -> list[str]:
        """The session ids that have files kept whole (starting with `prefix`)."""
        if not self.present:
            return []
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT DISTINCT session_id FROM session_files WHERE session_id LIKE ? "
                "ORDER BY session_id",
                (prefix.replace("%", "").replace("_", "") + "%",),
            ).fetchall()
        return [row[0] for row in rows if row[0] is not None and row[0].startswith(prefix)]

    def slugs(self, session_id: str) -> list[str]:
        """The plan slugs a session's lines name."""
        if not self.present:
            return []
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT slug FROM plan_slugs WHERE session_id = ? ORDER BY slug", (session_id,)
            ).fetchall()
        return [row[0] for row in rows]

    def all_slugs(self) -> dict[str, list[str]]:
        """Session id -> the plan slugs its lines name, for every session."""
        if not self.present:
            return {}
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT session_id, slug FROM plan_slugs ORDER BY session_id, slug"
            ).fetchall()
        found: dict[str, list[str]] = {}
        for session_id, slug in rows:
            found.setdefault(session_id, []).append(slug)
        return found

    def held(self) -> dict[str, tuple[int, int, int]]:
        """Every path the archive holds (its newest version): path -> (size, mtime_ns, kept mode),
        for a rescan to compare files with (`file_state`), one stat each."""
        if not self.present:
            return {}
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT base, path, size, mtime_ns, mode FROM session_files AS newest WHERE version = "
                "(SELECT MAX(version) FROM session_files WHERE base = newest.base AND path = newest.path)"
            ).fetchall()
        return {
            os.path.join(key_path(base), key_path(path)): (size, mtime_ns, kept_mode(mode))
            for base, path, size, mtime_ns, mode in rows
        }

    def counts(self) -> dict[str, dict[str, int]]:
        """Per session: how many files of each kind the archive holds (each path once)."""
        if not self.present:
            return {}
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT session_id, kind, COUNT(DISTINCT base || '/' || path) FROM session_files "
                "WHERE session_id IS NOT NULL GROUP BY session_id, kind"
            ).fetchall()
            plans = self._connection.db.execute(
                "SELECT plan_slugs.session_id, COUNT(DISTINCT session_files.path) "
                "FROM plan_slugs JOIN session_files ON session_files.kind = ? AND "
                "session_files.path = 'plans/' || plan_slugs.slug || '.md' "
                "GROUP BY plan_slugs.session_id",
                (PLAN,),
            ).fetchall()
        found: dict[str, dict[str, int]] = {}
        for session_id, kind, count in rows:
            found.setdefault(session_id, {})[kind] = int(count)
        for session_id, count in plans:
            found.setdefault(session_id, {})[PLAN] = int(count)
        return found

    def content(self, version: Version) -> Iterator[bytes]:
        """Yield the bytes of a version, 1 MiB at a time, checked (each frame's checksum, then the
        blob's hash and size); raise PackDamaged, after the bytes read so far, when they cannot be
        read or differ (riffd.archive.blobs)."""
        return self._blobs.content(
            version.blob,
            version.sha256,
            version.size,
            f"{version.path} (version {version.version})",
        )

    def damaged(self) -> list[tuple[Version, str]]:
        """Read every blob back (checked as `content` does) and return a version of each that cannot
        be, with why: one whose file still exists when any does (every path with the same bytes
        shares the blob, and `keep(again=True)` of such a file stores it afresh)."""
        if not self.present:
            return []
        with self._connection.lock:
            rows = self._connection.db.execute(
                _SELECT_VERSIONS + "ORDER BY session_files.blob, session_files.id"
            ).fetchall()
        sharing: dict[int, list[Version]] = {}
        for version in map(_version, rows):
            sharing.setdefault(version.blob, []).append(version)
        found = []
        for versions in sharing.values():
            try:
                for _chunk in self.content(versions[0]):
                    pass
            except PackDamaged as exc:
                there = [version for version in versions if os.path.exists(version.path)]
                found.append(((there or versions)[0], str(exc)))
        return found

    def stats(self) -> dict[str, Any]:
        """Counts by kind (files, versions, bytes as taken), blobs and the bytes they hold and
        take."""
        if not self.present:
            return {"kinds": {}, "blobs": 0, "blob_bytes": 0, "stored_bytes": 0}
        with self._connection.lock:
            # (a version that repeats one of its path, as two processes storing at once could add
            # before riffd looked again inside the write, is not counted)
            kinds = self._connection.db.execute(
                "SELECT kind, COUNT(DISTINCT base || '/' || path), COUNT(*), SUM(size) FROM "
                "(SELECT DISTINCT kind, base, path, blob, mode, mtime_ns, size FROM session_files) "
                "GROUP BY kind ORDER BY kind"
            ).fetchall()
            blobs = self._connection.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(stored), 0) FROM blobs"
            ).fetchone()
        return {
            "kinds": {
                kind: {"files": files, "versions": versions, "bytes": size}
                for kind, files, versions, size in kinds
            },
            "blobs": int(blobs[0]),
            "blob_bytes": int(blobs[1]),
            "stored_bytes": int(blobs[2]),
        }


_SELECT_VERSIONS = (
    "SELECT session_files.session_id, kind, base, path, version, blob, blobs.hash, session_files.size, "
    "mode, mtime_ns, seen FROM session_files JOIN blobs ON blobs.id = blob "
)


def _version(row: tuple[Any, ...]) -> Version:
    session_id, kind, base, path, version, blob, sha256, size, mode, mtime_ns, seen = row
    return Version(
        session_id,
        kind,
        key_path(base),
        key_path(path),
        int(version),
        int(blob),
        bytes(sha256),
        int(size),
        int(mode),
        int(mtime_ns),
        int(seen),
    )


def _as_taken(latest: Version, status: os.stat_result) -> bool:
    """Whether one stat shows the file as riffd took its newest version (see the module)."""
    return (latest.size, latest.mtime_ns, kept_mode(latest.mode)) == file_state(
        status
    ) and status.st_ctime_ns < latest.seen * 10**9


def _same(latest: Version | None, sha256: bytes, status: os.stat_result) -> bool:
    """Whether the newest version has these bytes, this time and this kept mode."""
    return latest is not None and (latest.sha256, latest.mtime_ns, kept_mode(latest.mode)) == (
        sha256,
        status.st_mtime_ns,
        kept_mode(status.st_mode),
    )


def note_slugs(db: sqlite3.Connection, session_id: str, slugs: Iterable[str]) -> None:
    """Inside the caller's write transaction (the writer's, for the lines that name them): record
    that the session's lines name these plan slugs."""
    db.executemany(
        "INSERT OR IGNORE INTO plan_slugs(session_id, slug) VALUES (?, ?)",
        [(session_id, slug) for slug in slugs],
    )
