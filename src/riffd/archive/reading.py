"""The archive's reading side: files and sessions, lines as written, search, how far behind, stats,
export.

`ArchiveReader` reads through the archive's connection (riffd.archive.connection), which it shares
with the writer (riffd.archive.writer, which checks the lines offered at a file's end against the
last line read back here) and the whole files.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Generator, Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from riffd.archive.connection import ArchiveConnection
from riffd.archive.contents import MARK, ROLE_NAMES, ROLES, epoch
from riffd.archive.packs import PackDamaged, Run
from riffd.archive.search import SearchHit, like_literal, search
from riffd.archive.spans import read_spans
from riffd.claude_code.projects import named_session
from riffd.display import KEY_MARK, key_path, path_key
from riffd.transcript.reader import parse_line
from riffd.transcript.sessions import ID_PREFIX, AmbiguousSession, session_key


class Tip(NamedTuple):
    """How a file's latest generation ends in the archive: its last line (with newline unless
    `unterminated`), its `lines`, and `crc`, the CRC-32 of every line without newlines (None:
    archived by a riffd that did not record it; riffd.archive.packs.Run)."""

    line: bytes
    lines: int
    unterminated: bool
    crc: int | None


class ArchiveReader:
    """What the archive answers (see the module docstring), through `connection`."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection

    def snapshot(self) -> AbstractContextManager[None]:
        """Read as of one moment: every read in the block sees the archive as one transaction left
        it, whatever another process (the daemon) writes meanwhile. The lock is held throughout."""
        return self._connection.snapshot()

    def file_id(self, path: str) -> int | None:
        """Return the id of the archived file `path` (exactly that path), or None."""
        with self._connection.lock:
            row = self._connection.db.execute(
                "SELECT id FROM files WHERE path = ?", (path_key(path),)
            ).fetchone()
        return None if row is None else int(row[0])

    def cursor(self, path: str) -> tuple[int, int]:
        """Return (generation, bytes archived) for `path` ((0, 0) when it was never archived)."""
        with self._connection.lock:
            row = self._connection.db.execute(
                "SELECT generation, archived_bytes FROM files WHERE path = ?", (path_key(path),)
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def restore_time(self, file_id: int) -> int | None:
        """The modification time (ns) to give an archived file written back: its time when it ended
        where the archive does, else the time of its last line (None: neither is known)."""
        with self._connection.lock:
            mtime_ns, last_ts = self._connection.db.execute(
                "SELECT mtime_ns, last_ts FROM files WHERE id = ?", (file_id,)
            ).fetchone()
        return (
            int(mtime_ns)
            if mtime_ns is not None
            else int(last_ts) * 10**9
            if last_ts is not None
            else None
        )

    def generations(self, file_id: int) -> list[int]:
        """Return the generations archived of a file, oldest first."""
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT DISTINCT generation FROM runs WHERE file_id = ? ORDER BY generation",
                (file_id,),
            ).fetchall()
        return [int(row[0]) for row in rows]

    def last_run(self, file_id: int, generation: int) -> Run | None:
        """The last run of a file's generation, as committed (the caller holds the lock), or
        None."""
        row = self._connection.db.execute(
            "SELECT pack, first, header FROM runs WHERE file_id = ? AND generation = ? "
            "ORDER BY first DESC LIMIT 1",
            (file_id, generation),
        ).fetchone()
        return None if row is None else Run(row[0], row[1], row[2])

    def line(self, run: Run, number: int) -> bytes:
        """Line `number` of a run as it was written (cut pieces put back; a newline unless it is
        unterminated; the caller holds the lock); raise PackDamaged when a pack it needs cannot be
        read."""
        line = self._content(run, number)
        last = number == len(run.lengths) - 1
        return line if last and run.unterminated else line + b"\n"

    def _content(self, run: Run, number: int) -> bytes:
        """Line `number` of a run without its newline (`line`)."""
        offset, length = run.offsets[number], run.lengths[number]
        line = self._connection.packs.read(run.pack, offset, length)
        for content_id in run.cuts.get(number, ()):
            place = self._connection.db.execute(
                "SELECT pack, offset, length FROM contents WHERE id = ?", (content_id,)
            ).fetchone()
            if place is None:
                raise PackDamaged(
                    (run.pack,),
                    f"line {run.first + number + 1} (in pack {run.pack}) names a piece of "
                    f"content the archive does not have ({content_id})",
                )
            pack, at, size = place
            line = line.replace(MARK, self._connection.packs.read(pack, at, size), 1)
        return line

    def _packs_of(self, run: Run) -> tuple[int, ...]:
        """The packs a run's lines are read from: its own, then those of the pieces cut out of
        them."""
        ids = sorted({content_id for cut in run.cuts.values() for content_id in cut})
        found: set[int] = set()
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            found.update(
                row[0]
                for row in self._connection.db.execute(
                    f"SELECT DISTINCT pack FROM contents WHERE id IN ({','.join('?' * len(part))})",
                    part,
                )
            )
        return (run.pack, *sorted(found - {run.pack}))

    def files(self) -> list[tuple[int, str]]:
        """Return (id, path) of every archived file, in the order they were first archived."""
        with self._connection.lock:
            rows = self._connection.db.execute("SELECT id, path FROM files ORDER BY id").fetchall()
        return [(int(row[0]), key_path(row[1])) for row in rows]

    def files_of(self, target: str) -> list[tuple[int, str, str | None]]:
        """Return (id, path, session) of the archived files a session id, path or path suffix names,
        or a prefix of one session's id (raise AmbiguousSession, listing them, when several
        sessions' ids start with it). An id or prefix may be typed in either case."""
        target = session_key(target)
        # A path as typed, from any folder (a bare file name too)
        absolute = (
            os.path.abspath(target) if os.sep in target or target.endswith(".jsonl") else target
        )
        key = path_key(target)  # paths are stored so (riffd.display): a name that is not UTF-8 too
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT id, path, session_id FROM files WHERE session_id = ? OR path IN (?, ?) "
                "OR path LIKE ? ESCAPE '\\' ORDER BY path",
                (
                    key,
                    key,
                    path_key(absolute),
                    f"%/{like_literal(key.removeprefix(KEY_MARK))}.jsonl",
                ),
            ).fetchall()
            if not rows and ID_PREFIX.fullmatch(target):
                rows = self._connection.db.execute(
                    "SELECT id, path, session_id FROM files WHERE session_id LIKE ? ESCAPE '\\' "
                    "ORDER BY path",
                    (f"{like_literal(target)}%",),
                ).fetchall()
                if len({row[2] for row in rows}) > 1:
                    listed = "; ".join(sorted({f"{row[2]} ({row[1]})" for row in rows})[:10])
                    raise AmbiguousSession(
                        f"{target}: {len({row[2] for row in rows})} archived sessions start with "
                        f"it: {listed}; type more of the id"
                    )
        return [(int(row[0]), key_path(row[1]), _session(row[1], row[2])) for row in rows]

    def sessions(self) -> list[dict[str, Any]]:
        """Every archived session file (subagents' aside): path, session, project, title, first and
        last times (Unix seconds), raw bytes seen."""
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT id, path, session_id, project, title, first_ts, last_ts, raw_bytes "
                "FROM files ORDER BY path"
            ).fetchall()
        return [
            {
                "file_id": row[0],
                "path": key_path(row[1]),
                "session_id": _session(row[1], row[2]),
                "project": row[3],
                "title": row[4],
                "first_ts": row[5],
                "last_ts": row[6],
                "raw_bytes": row[7],
            }
            for row in rows
            if not Path(row[1]).name.startswith("agent-") and "/subagents/" not in row[1]
        ]

    def all_files(self) -> list[tuple[int, str, str | None]]:
        """Return (id, path, session) of every archived file."""
        with self._connection.lock:
            rows = self._connection.db.execute(
                "SELECT id, path, session_id FROM files ORDER BY id"
            ).fetchall()
        return [(int(row[0]), key_path(row[1]), _session(row[1], row[2])) for row in rows]

    def archived_bytes(self) -> dict[str, int]:
        """Every archived path with the bytes of it the archive holds (its latest generation)."""
        with self._connection.lock:
            rows = self._connection.db.execute("SELECT path, archived_bytes FROM files").fetchall()
        return {key_path(path): int(size) for path, size in rows}

    def iter_file(
        self, file_id: int, generation: int | None = None
    ) -> Generator[bytes, None, None]:
        """Yield the lines (with newline) of an archived file's latest (or given) generation, byte
        for byte, read as of one moment and checked as they go: each run's lines against the
        checksum archived with them (runs archived by a riffd that recorded none are not checked),
        and the latest generation against the file's record of its bytes and lines. Raise
        PackDamaged, after the lines read so far, when they cannot be read or differ: a caller that
        writes them somewhere must keep nothing of a file that raised."""
        with self._connection.reading():
            self._connection.packs.refresh()
            latest, archived, lines = self._connection.db.execute(
                "SELECT generation, archived_bytes, lines FROM files WHERE id = ?", (file_id,)
            ).fetchone()
            generation = latest if generation is None else generation
            runs = [
                Run(pack, first, header)
                for pack, first, header in self._connection.db.execute(
                    "SELECT pack, first, header FROM runs WHERE file_id = ? AND generation = ? ORDER BY first",
                    (file_id, generation),
                ).fetchall()
            ]
            crc = size = count = 0
            for run in runs:
                if run.first != count:
                    raise PackDamaged(
                        (),
                        f"lines {count + 1} to {run.first} are not in the archive (generation "
                        f"{generation})",
                    )
                last = len(run.lengths) - 1
                for number in range(len(run.lengths)):
                    line = self._content(run, number)
                    crc = zlib.crc32(line, crc)
                    if number != last or not run.unterminated:
                        line += b"\n"
                    size += len(line)
                    count += 1
                    yield line
                if run.crc is not None and run.crc != crc:
                    packs = self._packs_of(run)
                    raise PackDamaged(
                        packs,
                        f"lines {run.first + 1} to {count} read back other than they were "
                        f"archived (their checksum differs): pack {run.pack} is damaged"
                        + (
                            f", or one of packs {', '.join(map(str, packs[1:]))}, which hold pieces of "
                            "them"
                            if len(packs) > 1
                            else ""
                        ),
                    )
            if generation == latest and (size, count) != (archived, lines):
                raise PackDamaged(
                    (),
                    f"the archive holds {count} line(s), {size} bytes, of it, not the {lines} "
                    f"line(s), {archived} bytes, it records",
                )

    def damaged_packs(self) -> list[PackDamaged]:
        """Decompress every pack (each frame's checksum checked, where it has one) and return the
        error of each that cannot be read, by pack id."""
        damaged = []
        with self._connection.lock:
            ids = [
                int(row[0])
                for row in self._connection.db.execute(
                    "SELECT id FROM packs ORDER BY id"
                ).fetchall()
            ]
        for pack_id in ids:
            with self._connection.lock:
                try:
                    self._connection.packs.readable(pack_id)
                except PackDamaged as exc:
                    damaged.append(exc)
        return damaged

    def pack_users(self, packs: Iterable[int]) -> list[tuple[str, str | None, int]]:
        """Return (path, session id, generation) of each archived generation of a file that has
        lines in `packs`, or pieces of its lines cut out of them (each run's record decoded: for
        naming damage, not for a hot path)."""
        wanted = set(packs)
        users: set[tuple[str, str | None, int]] = set()
        with self._connection.reading():
            pieces: set[int] = set()
            for pack in wanted:
                pieces.update(
                    row[0]
                    for row in self._connection.db.execute(
                        "SELECT id FROM contents WHERE pack = ?", (pack,)
                    )
                )
            for path, session, generation, pack, first, header in self._connection.db.execute(
                "SELECT files.path, files.session_id, runs.generation, runs.pack, runs.first, runs.header "
                "FROM runs JOIN files ON files.id = runs.file_id"
            ):
                if pack in wanted:
                    users.add((path, session, generation))
                    continue
                try:
                    run = Run(pack, first, header)
                except PackDamaged:
                    continue
                if pieces and any(
                    content_id in pieces for cut in run.cuts.values() for content_id in cut
                ):
                    users.add((path, session, generation))
        return sorted(users, key=lambda user: (user[0], user[2]))

    def tip(self, path: str) -> Tip | None:
        """Return how `path`'s latest generation ends (its last line, with newline unless it is
        unterminated; its line count; its checksum), or None when nothing of it is archived."""
        with self._connection.lock:
            self._connection.packs.refresh()
            row = self._connection.db.execute(
                "SELECT id, generation FROM files WHERE path = ?", (path_key(path),)
            ).fetchone()
            run = None if row is None else self.last_run(row[0], row[1])
            if run is None or not run.lengths:
                return None
            last = len(run.lengths) - 1
            return Tip(self.line(run, last), run.first + last + 1, run.unterminated, run.crc)

    def search(
        self,
        query: str,
        *,
        project: str | None = None,
        session: str | None = None,
        role: str | None = None,
        since: int | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Return up to `limit` places where every word of `query` occurs, newest first, filtered by
        project path prefix, session id, role and time (see riffd.archive.search)."""
        with self._connection.lock:
            self._connection.packs.refresh()
            return search(
                self._connection.db,
                partial(read_spans, self._connection.packs),
                query,
                project=project,
                session=session,
                role=role,
                since=since,
                limit=limit,
            )

    def behind(self, files: dict[str, int]) -> tuple[int, int]:
        """Given path -> bytes the daemon has read, return (files, bytes) not archived yet."""
        lagging = lagging_bytes = 0
        for path, offset in files.items():
            _generation, archived = self.cursor(path)
            if archived < offset:
                lagging += 1
                lagging_bytes += offset - archived
        return lagging, lagging_bytes

    def stats(self) -> dict[str, Any]:
        """Return sizes and counts: raw bytes seen, bytes stored, ratio, messages, sessions, oldest,
        newest."""
        with self._connection.lock:
            db = self._connection.db
            raw = db.execute(
                "SELECT COALESCE(SUM(raw_bytes), 0), COUNT(*), COUNT(DISTINCT session_id), "
                "MIN(first_ts), MAX(last_ts), COALESCE(SUM(stored_lines), 0), "
                "COALESCE(SUM(messages), 0) FROM files"
            ).fetchone()
            # (a content's own text id is 0 in format 3, its id in a format 2 archive read as it is)
            unique = db.execute(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE text IN (0, id)) FROM contents"
            ).fetchone()
        database = self._connection.path
        stored = database.stat().st_size + sum(
            path.stat().st_size
            for path in database.parent.glob(database.name + "-*")
            if path.exists()
        )
        return {
            "raw_bytes": int(raw[0]),
            "stored_bytes": stored,
            "ratio": round(stored / raw[0], 4) if raw[0] else None,
            "files": int(raw[1]),
            "sessions": int(raw[2]),
            "lines": int(raw[5]),
            "messages": int(raw[6]),
            "unique_contents": int(unique[0]),
            "unique_texts": int(unique[1]),
            "oldest": _iso(raw[3]),
            "newest": _iso(raw[4]),
        }

    def export(self, target: str) -> list[dict[str, Any]]:
        """Return each archived file of a session as the documented JSON form: session id, project,
        path, and messages with index, hash (SHA-256 of the content's exact bytes), role, timestamp
        and content."""
        out = []
        for file_id, path, session_id in self.files_of(target):
            with self._connection.lock:
                project = self._connection.db.execute(
                    "SELECT project FROM files WHERE id = ?", (file_id,)
                ).fetchone()[0]
                messages = []
                for number, raw in enumerate(self.iter_file(file_id)):
                    obj = parse_line(raw.rstrip(b"\n"))
                    message = obj.get("message") if isinstance(obj, dict) else None
                    if not isinstance(message, dict) or "content" not in message:
                        continue
                    assert isinstance(obj, dict)
                    kind = obj.get("type")
                    messages.append(
                        {
                            "index": number,
                            "hash": hashlib.sha256(orjson.dumps(message["content"])).hexdigest(),
                            "role": ROLE_NAMES.get(ROLES.get(kind, 0))
                            if isinstance(kind, str)
                            else None,
                            "timestamp": _iso(epoch(obj.get("timestamp"))),
                            "content": message["content"],
                        }
                    )
            out.append(
                {"session_id": session_id, "project": project, "path": path, "messages": messages}
            )
        return out


def _iso(seconds: int | None) -> str | None:
    return (
        datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")
        if seconds
        else None
    )


def _session(path: str, stored: str | None) -> str | None:
    """The session of an archived file: its name's, for a main transcript (an archive riffd wrote
    before 2026-11-28 may hold the first `sessionId` of its lines instead, until first opened to
    write: riffd.archive.schema), else the one stored."""
    return named_session(path) or stored
