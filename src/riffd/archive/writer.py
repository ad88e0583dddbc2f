"""The archive's writing side: lines into packs, exactly once, generation by generation.

`ArchiveWriter` writes through the archive's connection (riffd.archive.connection), in one write
transaction per batch of lines; it checks the lines offered at the end of a file against the last
line the reader (riffd.archive.reading) reads back, and cuts out of each line the pieces the archive
holds already (riffd.archive.dedup).

Exactly once: the archive keeps its own watermark per file (generation, bytes archived) and commits
it in the same transaction as the lines, skipping lines below it, so a restart, a re-read or a crash
in the middle archives every line once. Lines offered from past it are refused (`ArchiveGap`), as
are lines across it that do not line up with what it holds there (`ArchiveMismatch`): the archive
never has a hole. A file rewritten by anyone (riffd's repairs included) starts a new generation;
earlier generations are never erased.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Any

from riffd.archive import textspans
from riffd.archive.connection import ArchiveConnection
from riffd.archive.contents import Parsed, parse
from riffd.archive.dedup import Deduplicator
from riffd.archive.packs import RUN_LINES, PackDamaged, Run, tightened
from riffd.archive.reading import ArchiveReader
from riffd.archive.search import FTS_DEFAULT, fts_settings
from riffd.archive.wholefiles import note_slugs
from riffd.claude_code.projects import named_session
from riffd.display import path_key


class ArchiveGap(Exception):
    """Lines offered from past the archive's watermark of a file: the bytes between were never
    archived (a write that failed on a full disk or a lock, lines read while the archive was off).
    Nothing is stored: the file's lines are archived from its watermark instead
    (riffd.archive.ingest.ingest_file), never with a hole."""

    def __init__(self, path: str, archived: int, offset: int, why: str = "") -> None:
        self.path, self.archived, self.offset = path, archived, offset
        super().__init__(
            f"{path}: the archive holds it up to byte {archived}, and lines from byte {offset} were "
            f"offered{f'; {why}' if why else ''}"
        )


class ArchiveMismatch(ArchiveGap):
    """Lines offered across the archive's watermark of a file that do not line up with what it holds
    there: a line that straddles the watermark, or that ends at it with other bytes than the
    archive's last line (the file was rewritten, and the archive never heard of it). Nothing is
    stored: the file is archived with ingest_file, which sees the rewrite and starts a new
    generation."""


class ArchiveMovedOn(Exception):
    """Lines offered for the end of a file's generation that is no longer where the caller saw it
    (`expect` of `add_lines`): another process archived the file further, or a new generation of it,
    since. Nothing is stored; the caller knows where the lines belong."""

    def __init__(self, path: str, expected: tuple[int, int], found: tuple[int, int]) -> None:
        self.path, self.expected, self.found = path, expected, found
        super().__init__(
            f"{path}: the archive holds generation {found[0]} up to byte {found[1]}, not generation "
            f"{expected[0]} up to byte {expected[1]}"
        )


class ArchiveWriter:
    """Adds lines to the archive through `connection`; `reader` reads back what it checks."""

    def __init__(self, connection: ArchiveConnection, reader: ArchiveReader) -> None:
        self._connection, self._reader = connection, reader
        self._dedup = Deduplicator(connection)
        self._dirty = True  # lines added since the last settle (unknown at first)
        # path -> (bytes, mtime_ns) last recorded through this object
        self._mtimes: dict[str, tuple[int, int]] = {}

    def reopened(self) -> None:
        """The connection continues with a new database (the old one was damaged): what was known of
        the old one is forgotten."""
        with self._connection.lock:
            self._mtimes.clear()
            self._dirty = True

    def add_lines(
        self,
        path: str,
        offset: int,
        lines: list[bytes],
        *,
        rewritten: bool = False,
        last_terminated: bool = True,
        prepared: list[Parsed] | None = None,
        mtime_ns: int | None = None,
        expect: tuple[int, int] | None = None,
    ) -> int:
        """Archive `lines` of `path` starting at byte `offset` (each without its newline; the last
        one has none in the file when `last_terminated` is False); lines below the file's archive
        watermark are skipped, and lines past it raise ArchiveGap (nothing stored: the archive never
        has a hole). `rewritten`: the file was rewritten (not appended to) since it was last
        archived, so start a new generation from offset 0. `prepared`: what
        `riffd.archive.contents.parse` gave for each line (with every user prompt), when a reader
        process did that. `mtime_ns`: the file's modification time when it ended with these lines
        (None: not known; restore then gives it the time of its last line). `expect`: the file's
        (generation, bytes archived) the lines follow; ArchiveMovedOn when the archive holds another
        (nothing stored). Return how many lines were added."""
        return self._write(
            lambda: self._add(
                path,
                offset,
                lines,
                rewritten,
                last_terminated,
                prepared=prepared,
                mtime_ns=mtime_ns,
                expect=expect,
            )
        )

    def add_older_generation(
        self, path: str, lines: list[bytes], *, last_terminated: bool = True
    ) -> int:
        """Archive `lines` (each without its newline) as a generation of `path` older than every one
        it has: history recovered from a damaged archive. The file's latest generation and watermark
        stay as they are. Return how many lines were added."""
        return self._write(lambda: self._add(path, 0, lines, False, last_terminated, older=True))

    def add_generation(self, path: str, chunks: Iterable[tuple[int, list[bytes], bool]]) -> int:
        """Archive a whole file as a new generation of `path` from `chunks`
        (riffd.transcript.reader.iter_chunks of it from its start: offset, lines without newlines,
        whether the last has one) in one transaction, so the new generation is there whole or not at
        all: an error on the way (a full disk, the file failing to read) leaves the archive as it
        was. Other writers wait meanwhile (up to the lock timeout). Return the lines added."""
        return self._write(
            lambda: sum(
                self._add(path, offset, lines, offset == 0, terminated)
                for offset, lines, terminated in chunks
            )
        )

    def _write(self, add: Callable[[], int]) -> int:
        """Run `add` in one write transaction, the open pack taken into it and written back (its
        changed segments) before the commit; return the lines it added."""
        with self._connection.lock:
            with self._connection.writing():
                self._connection.packs.start()
                added = add()
                self._connection.packs.store_open(settled=False)
            self._dirty = self._dirty or added > 0
        return added

    def _add(
        self,
        path: str,
        offset: int,
        lines: list[bytes],
        rewritten: bool,
        last_terminated: bool,
        *,
        older: bool = False,
        prepared: list[Parsed] | None = None,
        mtime_ns: int | None = None,
        expect: tuple[int, int] | None = None,
    ) -> int:
        """Inside a write transaction: archive `lines` of `path` from byte `offset` (see
        `add_lines`; `older`: as a generation older than every one it has). Return the lines
        added."""
        db, packs = self._connection.db, self._connection.packs
        key = path_key(path)  # a name that is not UTF-8 too (riffd.display)
        row = db.execute(
            "SELECT id, generation, archived_bytes, lines FROM files WHERE path = ?", (key,)
        ).fetchone()
        if row is None:
            new_id = db.execute("INSERT INTO files(path) VALUES (?)", (key,)).lastrowid
            assert new_id is not None
            file_id, generation, archived, count = new_id, 0, 0, 0
        else:
            file_id, generation, archived, count = row
            if expect is not None and (generation, archived) != expect:
                raise ArchiveMovedOn(path, expect, (generation, archived))
            if rewritten and offset == 0:
                generation, archived, count = generation + 1, 0, 0
        latest = (generation, archived, count)
        if older:
            first = db.execute(
                "SELECT MIN(generation) FROM runs WHERE file_id = ?", (file_id,)
            ).fetchone()[0]
            # (a file with nothing archived yet: these lines are its history so far)
            older = first is not None
            if older:
                generation, archived, count = first - 1, 0, 0
        run = (
            None
            if older
            else packs.runs.get((file_id, generation)) or self._reader.last_run(file_id, generation)
        )
        # The generation's checksum so far (riffd.archive.packs.Run.crc), carried on by each line
        crc = 0 if run is None else run.crc
        # The bytes of the next line that the checksum holds already (a torn line's fragment)
        skip = 0
        # A torn last line (archived without its newline) that the file has completed since: the
        # completed line takes its place, so the archive keeps one line per line of the file, never
        # a fragment plus the rest, and a caller feeding the completed line from its start (below
        # the watermark) does not lose the rest.
        fragment = b""
        if run is not None and run.unterminated and run.lengths:
            fragment = self._last_of(path, run, archived)
        torn_at = archived - len(fragment)
        if fragment and lines and offset == archived:  # the bytes after it finish its line
            lines = [fragment + lines[0], *lines[1:]]
            offset = torn_at
            if prepared is not None:
                prepared = [parse(lines[0], True), *prepared[1:]]
        if not older and offset > archived:
            raise ArchiveGap(path, archived, offset)
        position = offset
        added = added_bytes = messages = 0
        info: dict[str, Any] = {}
        # text id -> (line, generation, ts, role)
        newest: dict[int, tuple[int, int, int | None, int]] = {}
        indexed: list[tuple[int, str]] = []  # search index rows of the contents recorded
        self._dedup.begin()
        if prepared is not None:  # (parsed beforehand: every key of the batch looked up at once)
            self._dedup.prefetch(
                key for parsed in prepared for _start, _end, key, _text in parsed.pieces or ()
            )
        last = len(lines) - 1
        for number, raw in enumerate(lines):
            terminated = last_terminated or number != last
            end = position + len(raw) + terminated
            if (
                not older
                and position < archived < end
                and not (fragment and position == torn_at and raw.startswith(fragment))
            ):
                # (a torn line is only ever replaced by its end)
                raise ArchiveMismatch(path, archived, position)
            if (
                not older
                and not fragment
                and position < archived == end
                and run is not None
                and run.lengths
                and raw + b"\n" * terminated != self._last_of(path, run, archived)
            ):
                raise ArchiveMismatch(path, archived, position)
            if fragment and position == torn_at and end > archived:
                assert run is not None
                run.offsets.pop()
                run.lengths.pop()
                run.cuts.pop(len(run.lengths), None)
                run.unterminated = False
                count, archived = count - 1, torn_at
                added, added_bytes = added - 1, added_bytes - len(fragment)  # replaced, not added
                # (the line starts with it, and the checksum holds it)
                skip, fragment = len(fragment), b""
            if position >= archived:  # below the watermark: archived before (a restart, a re-read)
                line = self._dedup.stored(raw, info, None if prepared is None else prepared[number])
                pack_id, at = packs.append(line.stored)
                if run is None or run.pack != pack_id or len(run.lengths) >= RUN_LINES:
                    if run is not None:
                        self._save_run(file_id, generation, run)
                    run = Run(pack_id, count)
                if crc is not None:
                    crc = zlib.crc32(raw[skip:] if skip else raw, crc)
                skip, run.crc = 0, crc
                run.offsets.append(at)
                run.lengths.append(len(line.stored))
                if line.cut:
                    run.cuts[len(run.lengths) - 1] = line.cut
                run.unterminated = not terminated
                texts = line.texts + [
                    self._dedup.record(new, pack_id, at, indexed) for new in line.new
                ]
                for text_id in filter(None, texts):
                    newest[text_id] = (count, generation, line.ts, line.role)
                messages += bool(line.cut or line.new)
                count += 1
                added += 1
                added_bytes += end - position
                archived = end
            position = end
        if run is not None:
            self._save_run(file_id, generation, run)
        self._dedup.flush()
        db.executemany("INSERT INTO search(rowid, text) VALUES (?, ?)", indexed)
        db.executemany(
            "INSERT INTO seen(text, file_id, generation, line, ts, role) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(text, file_id) DO UPDATE SET generation = excluded.generation, line = excluded.line, "
            "ts = excluded.ts, role = excluded.role WHERE COALESCE(excluded.ts, 0) >= COALESCE(seen.ts, 0)",
            [
                (text, file_id, gen, line, ts, role)
                for text, (line, gen, ts, role) in newest.items()
            ],
        )
        if newest:
            textspans.keep(db, file_id, newest)
        if older:
            generation, archived, count = latest
        # The time is that of the file ending where the archive now does: unknown (NULL) unless
        # the caller knows it
        known = mtime_ns if not older and position == archived else None
        # A main transcript is its file name's session, whatever id its (copied) lines carry
        named = named_session(path)
        db.execute(
            "UPDATE files SET generation = ?, archived_bytes = ?, lines = ?, raw_bytes = raw_bytes + ?, "
            "stored_lines = stored_lines + ?, messages = messages + ?, "
            "session_id = COALESCE(?, session_id, ?), project = COALESCE(project, ?), title = COALESCE(?, title, ?), "
            "first_ts = COALESCE(first_ts, ?), last_ts = COALESCE(?, last_ts), "
            "mtime_ns = CASE WHEN ? OR ? THEN mtime_ns ELSE ? END WHERE id = ?",
            (
                generation,
                archived,
                count,
                added_bytes,
                added,
                messages,
                named,
                info.get("session"),
                info.get("project"),
                info.get("title"),
                info.get("prompt"),
                info.get("first_ts"),
                info.get("last_ts"),
                older,
                added == 0 and known is None,
                known,
                file_id,
            ),
        )
        if known is not None:
            self._mtimes[key] = (archived, known)
        if info.get("slugs") and (named or info.get("session")):
            note_slugs(db, named or info["session"], info["slugs"])
        return added

    def note_mtime(self, path: str, end: int, mtime_ns: int) -> None:
        """Record the modification time of `path` when it ended at byte `end`, if the archive holds
        it up to there (a file whose last lines were archived before the time that goes with them
        was known)."""
        key = path_key(path)
        if self._mtimes.get(key) == (end, mtime_ns):
            return
        with self._connection.lock:
            self._connection.db.execute(
                "UPDATE files SET mtime_ns = ? WHERE path = ? AND archived_bytes = ?",
                (mtime_ns, key, end),
            )
            self._mtimes[key] = (end, mtime_ns)

    def _last_of(self, path: str, run: Run, archived: int) -> bytes:
        """The last line of a file's last run, which lines offered at its end are checked against;
        ArchiveMismatch when it cannot be read (a damaged pack): the file is then archived from its
        start as a new generation (riffd.archive.ingest.where_to_start), never appended to a
        generation whose end cannot be checked."""
        try:
            return self._reader.line(run, len(run.lengths) - 1)
        except PackDamaged as exc:
            raise ArchiveMismatch(
                path, archived, archived, f"its last archived line cannot be read ({exc})"
            ) from exc

    def _save_run(self, file_id: int, generation: int, run: Run) -> None:
        db, packs = self._connection.db, self._connection.packs
        if run.lengths:
            db.execute(
                "INSERT OR REPLACE INTO runs(file_id, generation, first, pack, header) "
                "VALUES (?, ?, ?, ?, ?)",
                (file_id, generation, run.first, run.pack, run.encode()),
            )
            packs.keep_run((file_id, generation), run)
        else:
            db.execute(
                "DELETE FROM runs WHERE file_id = ? AND generation = ? AND first = ?",
                (file_id, generation, run.first),
            )
            packs.keep_run((file_id, generation), None)

    def settle(self, *, optimize: bool = True) -> bool:
        """Compress the open pack at the settled level (it stays open: a later line reopens it),
        give the search index FTS5's own settings back (riffd.archive.search.fts_settings: only an
        archive a killed ingest of a development build left otherwise, never released, needs it),
        merge it into one segment (`optimize`: it rewrites the whole index) and give freed pages
        back to the file system. For when feeding pauses: the end of an ingest, a quiet daemon.
        Return False when nothing was added since the last settle of this connection."""
        with self._connection.lock:
            if not self._dirty:
                return False
            with self._connection.writing():
                self._connection.packs.settle_open()
                fts_settings(self._connection.db, FTS_DEFAULT)
                if optimize:
                    self._connection.db.execute("INSERT INTO search(search) VALUES ('optimize')")
            db = self._connection.db
            db.executescript("PRAGMA incremental_vacuum;")  # (execute would free one page only)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._dirty = False
        return True

    def compact(
        self,
        keep_going: Callable[[], bool] = lambda: True,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[int, int]:
        """Compress the loose packs again at the settled level, one at a time, outside the lock;
        each is replaced in its own transaction (`PackStore.replace_loose`). Stops when
        `keep_going()` is false between packs; `progress(done, total)` after each. Return (packs
        compacted, packs still loose)."""
        done = 0
        with self._connection.lock:
            total = self._connection.packs.loose_count()
        while keep_going():
            with self._connection.lock:
                found = self._connection.packs.next_loose()
            if found is None:
                break
            tight = tightened(found[1])
            with self._connection.lock:
                with self._connection.writing():
                    self._connection.packs.replace_loose(found[0], found[1], tight)
                self._dirty = True  # the freed pages go back at the next settle
            done += 1
            if progress is not None:
                progress(done, total)
        with self._connection.lock:
            return done, self._connection.packs.loose_count()
