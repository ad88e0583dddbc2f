"""The files of a session kept whole: every version of each, its bytes stored once.

A file (riffd.claude_code.session_files: a saved tool output, a subagent's settings, a checkpoint, a
task list, a plan) is stored as a blob (riffd.archive.blobs: named by the SHA-256 of its bytes, in
checked zstd frames). Each version of a path is a row of `session_files`: the session, the kind,
the folder it is kept relative to and its path below it, the version number, the blob, size, mode
and modification time, and when riffd took it. A version is never changed: other bytes, mode or time
at the same path are the next version.

A file is read once to hash it, outside any transaction (`look`: known bytes then cost one row),
and, when new, read again while it is compressed, through the descriptor that hashed it (the file
read is the one stored, also when it is deleted or replaced meanwhile, and a cache serves the second
read), inside one transaction that records the blob, its frames and the version together (`store`),
and only when the bytes read the second time hash the same: a kill -9 at any point leaves a file
stored whole or not at all. The transaction looks at the newest version again first, so two
processes taking the same file at once add one version. An ingest stores the files it looked at a
hundred to a transaction (`store_together`), each a savepoint of it, their descriptors open until
then. (When a file has settled is the daemon's business: riffd.daemon.keeper.)

A file is the newest version as it is when one stat says so: the same size, modification time and
mode (its type and owner's bits, what a restore writes back:
riffd.claude_code.session_files.kept_mode), and no change of its status since riffd took that
version (its ctime before then: a rewrite that kept the size and gave the time back is read again,
as is a file restored since, which hashes the same).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass

from riffd.archive.blobcompact import BlobCompaction
from riffd.archive.blobs import BlobStore, file_chunks, moved
from riffd.archive.connection import ArchiveConnection
from riffd.archive.versions import Version, Versions
from riffd.claude_code.session_files import (
    SessionFile,
    file_state,
    kept_mode,
    linked_folder,
)
from riffd.display import path_key
from riffd.fsio import NOFOLLOW, REAL_FILES, RetryingFS


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


@dataclass
class Looked:
    """A file `WholeFiles.look` read and hashed whose bytes the archive does not hold as they are:
    its stat then, their SHA-256, whether to store them afresh (`healing`), and the descriptor
    that read them, open until `store` or `store_together` stores them (or `let_go` drops them)."""

    found: SessionFile
    base: str
    relative: str
    status: os.stat_result
    sha256: bytes
    again: bool
    healing: bool
    fd: int | None


class _Changing(Exception):
    """A file's bytes are not those hashed any more (what `_store` wrote of them is taken back)."""


_READ = os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
# `store_together`'s batches in `riffd archive ingest`: this many files, or bytes of them
TOGETHER_FILES = 100
TOGETHER_BYTES = 16 << 20


class WholeFiles:
    """Stores the session files of one archive connection (its lock held for every statement), their
    bytes in its blobs; `versions` reads what it holds."""

    def __init__(self, connection: ArchiveConnection, versions: Versions) -> None:
        self._connection = connection
        self._versions = versions
        self._blobs = BlobStore(connection)
        # the blobs written fast compressed again at the settled level
        self.compact = BlobCompaction(connection).compact

    # --- storing ----------------------------------------------------------------------------------

    def keep(
        self,
        found: SessionFile,
        *,
        fs: RetryingFS = REAL_FILES,
        again: bool = False,
    ) -> Kept:
        """Archive the file `found` as it is now, unless the archive holds it as it is (`look`, then
        `store`); raise OSError when it cannot be read, sqlite3.Error when the archive cannot be
        written (see the module for the rest). `again` (`riffd archive verify --fix`): archive it
        even if the archive says it holds it, and store the frames of its bytes afresh when the blob
        they hash to cannot be read back whole. Reads that fail with EIO are tried again as `fs`
        says."""
        looked = self.look(found, fs=fs, again=again)
        return looked if isinstance(looked, Kept) else self.store(looked, fs=fs)

    def look(
        self, found: SessionFile, *, fs: RetryingFS = REAL_FILES, again: bool = False
    ) -> Kept | Looked:
        """Read and hash `found`, outside any transaction (a slow read, a cloud folder's, holds no
        lock); return what `keep` returns when that settles it (unchanged, changing, gone, skipped,
        linked), else what `store` is to store. Raise OSError when it cannot be read."""
        base, relative = path_key(found.base), path_key(found.relative)
        if linked_folder(found) is not None:
            return Kept("linked")
        try:
            status = fs.stat(found.path)
        except FileNotFoundError:
            return Kept("gone")
        if not stat.S_ISREG(status.st_mode):
            return Kept("skipped")
        latest = self._versions.latest(base, relative)
        if not again and latest is not None and _as_taken(latest, status):
            return Kept("unchanged", version=latest.version)
        try:
            fd = fs.open(found.path, _READ)
        except FileNotFoundError:
            return Kept("gone")
        looked = None
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
            looked = Looked(found, base, relative, before, sha256, again, healing, fd)
            return looked
        finally:
            if looked is None:  # (else the store reads it again through it)
                fs.close(fd)

    def let_go(self, looked: Iterable[Looked], *, fs: RetryingFS = REAL_FILES) -> None:
        """Close the descriptors of files looked at and not stored (or stored: it is done once)."""
        for item in looked:
            fd, item.fd = item.fd, None
            if fd is not None:
                with contextlib.suppress(OSError):  # (only read: nothing is lost)
                    fs.close(fd)

    def store(self, looked: Looked, *, fs: RetryingFS = REAL_FILES) -> Kept:
        """Store a file `look` read, through the descriptor that read it (closed then), in a
        transaction of its own, if it is still as it was then ("changing" when not); raise as
        `keep`."""
        try:
            with self._connection.writing():
                return self._store(looked, fs)
        except _Changing:  # (what it wrote is rolled back)
            return Kept("changing")
        finally:
            self.let_go([looked], fs=fs)

    def store_together(
        self, looked: list[Looked], *, fs: RetryingFS = REAL_FILES
    ) -> list[Kept | OSError]:
        """`store` each of `looked` in one transaction (`riffd archive ingest`: a commit was a third
        of a small file's time), each file a savepoint of it: one that cannot be read (its OSError
        in its place) or changed since it was looked at ("changing") takes back only its own rows.
        Raise sqlite3.Error when the archive cannot be written: none of them is then stored, as
        after a kill -9. Each is read through the descriptor that hashed it, closed then."""
        results: list[Kept | OSError] = []
        db = self._connection.db
        try:
            with self._connection.writing():
                for item in looked:
                    db.execute("SAVEPOINT riffd_file")
                    try:
                        results.append(self._store(item, fs))
                    except (OSError, _Changing) as exc:
                        db.execute("ROLLBACK TO riffd_file")
                        results.append(exc if isinstance(exc, OSError) else Kept("changing"))
                    db.execute("RELEASE riffd_file")
        finally:
            self.let_go(looked, fs=fs)
        return results

    def _store(self, looked: Looked, fs: RetryingFS) -> Kept:
        """Inside the caller's write transaction: store `looked` through the descriptor that hashed
        it (raise _Changing when its bytes are not those hashed any more; the caller takes back
        what this wrote)."""
        found, base, relative = looked.found, looked.base, looked.relative
        before, fd = looked.status, looked.fd
        if fd is None:
            raise ValueError(f"{found.path}: stored once already (look at it again)")
        if moved(before, fs.fstat(fd)):
            raise _Changing
        # Another process may have taken it meanwhile (an ingest beside the daemon)
        latest = self._versions.latest(base, relative)
        if not looked.again and _same(latest, looked.sha256, before):
            return Kept("unchanged", version=latest.version if latest else None)
        blob, stored = self._blobs.find(looked.sha256), 0
        # (healing: the same bytes by their hash, for every version of them)
        if blob is None or looked.healing:
            blob, stored = self._blobs.store_file(fs, fd, before, looked.sha256, blob)
            if blob is None:  # the bytes changed between the two reads
                raise _Changing
        version = self._add_version(found, base, relative, blob, looked.sha256, before)
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

    def record_slugs(self, session_id: str, slugs: Iterable[str]) -> None:
        """Record, in a transaction of its own, that the session's lines name these plan slugs."""
        with self._connection.writing():
            note_slugs(self._connection.db, session_id, slugs)


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
