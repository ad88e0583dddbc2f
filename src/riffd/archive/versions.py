"""Reading the files of sessions kept whole: their versions, and each version's bytes.

`Versions` answers what the archive holds of the files riffd.archive.wholefiles keeps (the newest
version of a path, a session's files, counts and sizes, what cannot be read back) and gives a
version's bytes back, checked, from its blob (riffd.archive.blobs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.archive.blobs import BlobStore
from riffd.archive.connection import ArchiveConnection
from riffd.archive.packs import PackDamaged
from riffd.claude_code.session_files import PLAN, kept_mode
from riffd.display import key_path

# How long after a session's last line its plan may have been written (clocks, a last write in
# flight), in seconds
PLAN_SLACK = 60


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


class Versions:
    """The versions of the session files of one archive connection (its lock held for every
    statement), read."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection
        self._blobs = BlobStore(connection)

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

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of a query of the tables of files kept whole (none when the archive has not
        those tables: `present`)."""
        if not self.present:
            return []
        with self._connection.lock:
            return self._connection.db.execute(sql, params).fetchall()

    def every_version(self) -> list[Version]:
        """Every version of every file, newest first per path (what a recovery copies)."""
        rows = self._rows(_SELECT_VERSIONS + "ORDER BY base, path, version DESC")
        return [_version(row) for row in rows]

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
        rows = self._rows(
            _SELECT_VERSIONS
            + "WHERE session_id = ? OR (kind = ? AND path IN (SELECT 'plans/' || slug || '.md' FROM plan_slugs "
            "WHERE session_id = ?)) ORDER BY base, path, version",
            (session_id, PLAN, session_id),
        )
        versions = [_version(row) for row in rows]
        if every:
            return versions
        # A plan's slug may be given again to a later session, whose plan is then a newer version
        # of the same path: this session's is the newest written by its last line (or its first)
        ended = self._rows(
            "SELECT MAX(last_ts) FROM files WHERE session_id = ? AND path NOT LIKE '%/subagents/%'",
            (session_id,),
        )
        last_ns = None if not ended or ended[0][0] is None else (ended[0][0] + PLAN_SLACK) * 10**9
        newest: dict[tuple[str, str], Version] = {}
        for version in versions:
            key = (version.base, version.relative)
            if (
                version.kind != PLAN
                or key not in newest
                or last_ns is None
                or version.mtime_ns <= last_ns
            ):
                newest[key] = version
        return list(newest.values())

    def sessions_with_files(self, prefix: str = "") -> list[str]:
        """The session ids that have files kept whole (starting with `prefix`)."""
        rows = self._rows(
            "SELECT DISTINCT session_id FROM session_files WHERE session_id LIKE ? "
            "ORDER BY session_id",
            (prefix.replace("%", "").replace("_", "") + "%",),
        )
        return [row[0] for row in rows if row[0] is not None and row[0].startswith(prefix)]

    def slugs(self, session_id: str) -> list[str]:
        """The plan slugs a session's lines name."""
        rows = self._rows(
            "SELECT slug FROM plan_slugs WHERE session_id = ? ORDER BY slug", (session_id,)
        )
        return [row[0] for row in rows]

    def all_slugs(self) -> dict[str, list[str]]:
        """Session id -> the plan slugs its lines name, for every session."""
        rows = self._rows("SELECT session_id, slug FROM plan_slugs ORDER BY session_id, slug")
        found: dict[str, list[str]] = {}
        for session_id, slug in rows:
            found.setdefault(session_id, []).append(slug)
        return found

    def held(self) -> dict[str, tuple[int, int, int]]:
        """Every path the archive holds (its newest version): path -> (size, mtime_ns, kept mode),
        for a rescan to compare files with (`file_state`), one stat each."""
        rows = self._rows(
            "SELECT base, path, size, mtime_ns, mode FROM session_files AS newest WHERE version = "
            "(SELECT MAX(version) FROM session_files WHERE base = newest.base AND path = newest.path)"
        )
        return {
            os.path.join(key_path(base), key_path(path)): (size, mtime_ns, kept_mode(mode))
            for base, path, size, mtime_ns, mode in rows
        }

    def counts(self) -> dict[str, dict[str, int]]:
        """Per session: how many files of each kind the archive holds (each path once)."""
        rows = self._rows(
            "SELECT session_id, kind, COUNT(DISTINCT base || '/' || path) FROM session_files "
            "WHERE session_id IS NOT NULL GROUP BY session_id, kind"
        )
        plans = self._rows(
            "SELECT plan_slugs.session_id, COUNT(DISTINCT session_files.path) "
            "FROM plan_slugs JOIN session_files ON session_files.kind = ? AND "
            "session_files.path = 'plans/' || plan_slugs.slug || '.md' "
            "GROUP BY plan_slugs.session_id",
            (PLAN,),
        )
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
        rows = self._rows(_SELECT_VERSIONS + "ORDER BY session_files.blob, session_files.id")
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
