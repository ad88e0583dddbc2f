"""The archive: every line of every transcript kept, deduplicated, compressed and searchable.

Claude Code deletes transcripts after 30 days; the archive (SQLite, `<state dir>/archive.db`) keeps
them.

How a line is stored, losslessly: as written, in a pack (riffd.archive.packs), with the pieces of
content it shares with a line archived before cut out and a NUL byte in their place
(riffd.archive.contents). Runs of a file's lines in a pack record where each line is, so `restore`
rebuilds a transcript byte for byte as it was last archived, also after Claude Code deleted it. A
piece seen for the first time stays in its line and is recorded as a content (its place and its
key); its text is indexed for search (riffd.archive.search).

Exactly once: the archive keeps its own watermark per file (generation, bytes archived) and commits
it in the same transaction as the lines, skipping lines below it, so a restart, a re-read or a crash
in the middle archives every line once. A file rewritten by anyone (riffd's repairs included) starts
a new generation; earlier generations are never erased.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riffd.archive.contents import MARK, ROLE_TOKEN, Parsed, parse
from riffd.archive.packs import PackDamaged, PackStore, Run, tightened
from riffd.archive.reading import Reading
from riffd.archive.schema import RECOVER_ADVICE, connect
from riffd.archive.wholefiles import WholeFiles
from riffd.database import open_checked, reopen_if_damaged
from riffd.display import path_key


@dataclass
class _New:
    """A piece seen for the first time: it stays in its line, at `offset` of the stored line."""

    key: int
    offset: int
    length: int
    text: str
    role: int
    variant: int | None  # the text id of a content with the same role and normalised text


@dataclass
class _Line:
    """A line as stored: its bytes (pieces seen before cut out), the ids cut out in order, the text
    ids of those, its new pieces, its time and role."""

    stored: bytes
    cut: list[int] = field(default_factory=list)
    texts: list[int | None] = field(default_factory=list)
    new: list[_New] = field(default_factory=list)
    ts: int | None = None
    role: int = 0


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


class Archive(Reading):
    """The archive database; thread-safe (one connection behind a lock, SQLite in WAL mode)."""

    def __init__(
        self,
        path: Path,
        *,
        lock_timeout: float = 30.0,
        heal: bool = False,
        check: bool = False,
        read_only: bool = False,
    ) -> None:
        """Open (or create) the archive at `path`. `check` runs SQLite's quick check first (the
        daemon, at start); a file found damaged is moved aside and a new archive made when `heal`,
        else DatabaseDamaged is raised. `read_only` opens an existing archive without changing it
        (`riffd archive recover` reads a damaged one so); raise ArchiveError for an archive of an
        earlier format."""
        self.path = path
        self._timeout = lock_timeout
        self._lock = threading.RLock()
        if read_only:
            self._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=lock_timeout,
            )
            self.moved_aside: Path | None = None
            self.damage: str | None = None
        else:
            self._db, self.moved_aside, self.damage = open_checked(
                path,
                lambda target, create: connect(target, lock_timeout, create),
                heal=heal,
                check=check,
                advice=RECOVER_ADVICE,
            )
        self._packs = PackStore(self._db)
        self.whole = WholeFiles(
            self._db, self._lock
        )  # the session's other files (riffd.archive.wholefiles)
        self._dirty = True  # lines added since the last settle (unknown at first)
        self._next_content: int | None = None  # the next content id, within a write transaction
        self._mtimes: dict[
            str, tuple[int, int]
        ] = {}  # path -> (bytes, mtime_ns) last recorded through this object

    def reopen_if_damaged(self, error: BaseException) -> bool:
        """After a database error, check the file; when it is damaged, move it aside and continue
        with a new, empty archive (`riffd archive recover` copies what is readable of the old one).
        Return True when that happened."""
        with self._lock:
            reopened = reopen_if_damaged(
                self.path,
                self._db,
                error,
                lambda target, create: connect(target, self._timeout, create),
            )
            if reopened is None:
                return False
            self._db, self.moved_aside, self.damage = reopened
            self._packs = PackStore(self._db)
            self.whole = WholeFiles(self._db, self._lock)
            self._mtimes.clear()
            self._dirty = True
        return True

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # --- feeding ----------------------------------------------------------------------------------

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
    ) -> int:
        """Archive `lines` of `path` starting at byte `offset` (each without its newline; the last
        one has none in the file when `last_terminated` is False); lines below the file's archive
        watermark are skipped, and lines past it raise ArchiveGap (nothing stored: the archive never
        has a hole). `rewritten`: the file was rewritten (not appended to) since it was last
        archived, so start a new generation from offset 0. `prepared`: what
        `riffd.archive.contents.parse` gave for each line (with every user prompt), when a reader
        process did that. `mtime_ns`: the file's modification time when it ended with these lines
        (None: not known; restore then gives it the time of its last line). Return how many lines
        were added."""
        with self._lock:
            with self._writing():
                self._packs.start()
                added = self._add(
                    path,
                    offset,
                    lines,
                    rewritten,
                    last_terminated,
                    prepared=prepared,
                    mtime_ns=mtime_ns,
                )
                self._packs.store_open(settled=False)
            self._dirty = self._dirty or added > 0
        return added

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction (the caller holds the lock): on success the open pack as the
        transaction left it is the committed one; on failure it is forgotten (read again from the
        database when next needed)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._packs.refresh()
            yield
            self._db.execute("COMMIT")
        except BaseException:
            try:
                if (
                    self._db.in_transaction
                ):  # (a COMMIT that failed, on a deferred constraint say, leaves it open)
                    self._db.execute("ROLLBACK")
            finally:
                self._packs.forget()
            raise
        self._packs.commit()

    def add_older_generation(
        self, path: str, lines: list[bytes], *, last_terminated: bool = True
    ) -> int:
        """Archive `lines` (each without its newline) as a generation of `path` older than every one
        it has: history recovered from a damaged archive. The file's latest generation and watermark
        stay as they are. Return how many lines were added."""
        with self._lock:
            with self._writing():
                self._packs.start()
                added = self._add(path, 0, lines, False, last_terminated, older=True)
                self._packs.store_open(settled=False)
            self._dirty = self._dirty or added > 0
        return added

    def add_generation(self, path: str, chunks: Iterable[tuple[int, list[bytes], bool]]) -> int:
        """Archive a whole file as a new generation of `path` from `chunks`
        (riffd.transcript.reader.iter_chunks of it from its start: offset, lines without newlines,
        whether the last has one) in one transaction, so the new generation is there whole or not at
        all: an error on the way (a full disk, the file failing to read) leaves the archive as it
        was. Other writers wait meanwhile (up to the lock timeout). Return the lines added."""
        added = 0
        with self._lock:
            with self._writing():
                self._packs.start()
                for offset, lines, terminated in chunks:
                    added += self._add(path, offset, lines, offset == 0, terminated)
                self._packs.store_open(settled=False)
            self._dirty = self._dirty or added > 0
        return added

    def generations(self, file_id: int) -> list[int]:
        """Return the generations archived of a file, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT generation FROM runs WHERE file_id = ? ORDER BY generation",
                (file_id,),
            ).fetchall()
        return [int(row[0]) for row in rows]

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
    ) -> int:
        db = self._db
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
            if rewritten and offset == 0:
                generation, archived, count = generation + 1, 0, 0
        latest = (generation, archived, count)
        first = db.execute(
            "SELECT MIN(generation) FROM runs WHERE file_id = ?", (file_id,)
        ).fetchone()[0]
        older = (
            older and first is not None
        )  # a file with nothing archived yet: these lines are its history so far
        if older:
            generation, archived, count = first - 1, 0, 0
        run = (
            None
            if older
            else self._packs.runs.get((file_id, generation)) or self._last_run(file_id, generation)
        )
        # The generation's checksum so far (riffd.archive.packs.Run.crc), carried on by each line
        # added
        crc = 0 if run is None else run.crc
        skip = (
            0  # the bytes of the next line that the checksum holds already (a torn line's fragment)
        )
        # A torn last line (archived without its newline) that the file has completed since: the
        # completed line takes its place, so the archive keeps one line per line of the file, never
        # a fragment plus the rest, and a caller feeding the completed line from its start (below
        # the watermark) does not lose the rest.
        fragment = b""
        if run is not None and run.unterminated and run.lengths:
            fragment = self._last_of(path, run, archived)
        torn_at = archived - len(fragment)
        if (
            fragment and lines and offset == archived
        ):  # the bytes after the fragment finish its line
            lines = [fragment + lines[0], *lines[1:]]
            offset = torn_at
            if prepared is not None:
                prepared = [parse(lines[0], True), *prepared[1:]]
        if not older and offset > archived:
            raise ArchiveGap(path, archived, offset)
        position = offset
        added = added_bytes = messages = 0
        info: dict[str, Any] = {}
        newest: dict[
            int, tuple[int, int, int | None, int]
        ] = {}  # text id -> (line, generation, ts, role)
        indexed: list[tuple[int, str]] = []  # search index rows of the contents recorded
        self._next_content = None
        last = len(lines) - 1
        for number, raw in enumerate(lines):
            terminated = last_terminated or number != last
            end = position + len(raw) + terminated
            if (
                not older
                and position < archived < end
                and not (fragment and position == torn_at and raw.startswith(fragment))
            ):
                raise ArchiveMismatch(
                    path, archived, position
                )  # (a torn line is only ever replaced by its end)
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
                skip, fragment = (
                    len(fragment),
                    b"",
                )  # (the line starts with it, and the checksum holds it)
            if position >= archived:  # below the watermark: archived before (a restart, a re-read)
                line = self._prepare(raw, info, None if prepared is None else prepared[number])
                pack_id, at = self._packs.append(line.stored)
                if run is None or run.pack != pack_id:
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
                texts = line.texts + [self._record(new, pack_id, at, indexed) for new in line.new]
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
        if older:
            generation, archived, count = latest
        # The time is that of the file ending where the archive now does: unknown (NULL) unless the
        # caller knows it
        known = mtime_ns if not older and position == archived else None
        db.execute(
            "UPDATE files SET generation = ?, archived_bytes = ?, lines = ?, raw_bytes = raw_bytes + ?, "
            "stored_lines = stored_lines + ?, messages = messages + ?, "
            "session_id = COALESCE(session_id, ?), project = COALESCE(project, ?), title = COALESCE(?, title, ?), "
            "first_ts = COALESCE(first_ts, ?), last_ts = COALESCE(?, last_ts), "
            "mtime_ns = CASE WHEN ? OR ? THEN mtime_ns ELSE ? END WHERE id = ?",
            (
                generation,
                archived,
                count,
                added_bytes,
                added,
                messages,
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
        if info.get("slugs") and info.get("session"):
            self.whole.note_slugs(info["session"], info["slugs"])
        return added

    def note_mtime(self, path: str, end: int, mtime_ns: int) -> None:
        """Record the modification time of `path` when it ended at byte `end`, if the archive holds
        it up to there (a file whose last lines were archived before the time that goes with them
        was known)."""
        key = path_key(path)
        if self._mtimes.get(key) == (end, mtime_ns):
            return
        with self._lock:
            self._db.execute(
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
            return self._line(run, len(run.lengths) - 1)
        except PackDamaged as exc:
            raise ArchiveMismatch(
                path, archived, archived, f"its last archived line cannot be read ({exc})"
            ) from exc

    def _save_run(self, file_id: int, generation: int, run: Run) -> None:
        if run.lengths:
            self._db.execute(
                "INSERT OR REPLACE INTO runs(file_id, generation, first, pack, header) "
                "VALUES (?, ?, ?, ?, ?)",
                (file_id, generation, run.first, run.pack, run.encode()),
            )
            self._packs.keep_run((file_id, generation), run)
        else:
            self._db.execute(
                "DELETE FROM runs WHERE file_id = ? AND generation = ? AND first = ?",
                (file_id, generation, run.first),
            )
            self._packs.keep_run((file_id, generation), None)

    def _prepare(self, raw: bytes, info: dict[str, Any], parsed: Parsed | None = None) -> _Line:
        """Given a line (and what `parse` takes from it, when a reader process did that), return it
        as stored: pieces seen before cut out; note what it says of its file in `info`."""
        if parsed is None:
            parsed = parse(raw, "prompt" not in info)
        ts = parsed.ts
        if ts is not None:
            info.setdefault("first_ts", ts)
            info["last_ts"] = ts
        if parsed.session is not None:
            info.setdefault("session", parsed.session)
        if parsed.project is not None:
            info.setdefault("project", parsed.project)
        if parsed.title is not None:
            info["title"] = parsed.title
        if parsed.prompt is not None and "prompt" not in info:
            info["prompt"] = parsed.prompt
        if parsed.slug is not None:
            info.setdefault("slugs", set()).add(parsed.slug)
        line = _Line(raw, ts=ts, role=parsed.role)
        segments: list[bytes] = []  # the stored line's parts, when a piece is cut out
        done = shift = (
            0  # where the part after the last cut starts; the bytes cut out so far, less their marks
        )
        fresh: dict[
            int, tuple[int, int]
        ] = {}  # key -> span of a new piece: a second copy stays in its line
        for start, end, key, text in parsed.pieces or ():
            content_id, text_id = self._find(key, raw[start:end])
            if content_id is not None:
                segments += (raw[done:start], MARK)
                done, shift = end, shift + end - start - len(MARK)
                line.cut.append(content_id)
                line.texts.append(text_id)
            elif key not in fresh or raw[slice(*fresh[key])] != raw[start:end]:
                fresh[key] = (start, end)
                line.new.append(_New(key, start - shift, end - start, text, parsed.role, text_id))
        if segments:
            segments.append(raw[done:])
            line.stored = b"".join(segments)
        return line

    def _find(self, key: int, exact: bytes) -> tuple[int | None, int | None]:
        """Return (the id of the content with these exact bytes, or None; the text id of a content
        with this key, which has the same role and normalised text, or None)."""
        text_id = None
        for content_id, pack, offset, length, text in self._db.execute(
            "SELECT id, pack, offset, length, text FROM contents WHERE key = ?", (key,)
        ).fetchall():
            if length == len(exact) and pack not in self._packs.damaged:
                try:
                    if self._packs.read(pack, offset, length) == exact:
                        return int(content_id), text
                except (
                    PackDamaged
                ):  # never cut out again: the new line keeps the piece, and archiving goes on
                    pass
            text_id = text_id or text
        return None, text_id

    def _record(
        self, new: _New, pack: int, line_at: int, indexed: list[tuple[int, str]]
    ) -> int | None:
        """Record a new content, now at `line_at + new.offset` of `pack`; unless a variant of its
        text is indexed already, add its text to `indexed` (rows for the search index, written once
        per batch). Return its text id (None: no text). Ids are given here, so a content indexed is
        written once, with its text id."""
        if (
            self._next_content is None
        ):  # the write lock is held: no other writer takes ids meanwhile
            self._next_content = int(
                self._db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM contents").fetchone()[0]
            )
        content_id = self._next_content
        self._next_content += 1
        own_text = bool(new.text) and new.variant is None
        self._db.execute(
            "INSERT INTO contents(id, key, pack, offset, length, text) VALUES (?, ?, ?, ?, ?, ?)",
            (
                content_id,
                new.key,
                pack,
                line_at + new.offset,
                new.length,
                content_id if own_text else new.variant,
            ),
        )
        if not own_text:
            return new.variant
        indexed.append((content_id, f"{new.text}\n{ROLE_TOKEN.format(new.role)}"))
        return content_id

    def settle(self, *, optimize: bool = True) -> bool:
        """Compress the open pack at the settled level (it stays open: a later line reopens it),
        merge the search index into one segment (`optimize`: it rewrites the whole index) and give
        freed pages back to the file system. For when feeding pauses: the end of an ingest, a quiet
        daemon. Return False when nothing was added since the last settle of this connection."""
        with self._lock:
            if not self._dirty:
                return False
            with self._writing():
                self._packs.settle_open()
                if optimize:
                    self._db.execute("INSERT INTO search(search) VALUES ('optimize')")
            self._db.executescript(
                "PRAGMA incremental_vacuum;"
            )  # (execute would free one page only)
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
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
        with self._lock:
            total = self._packs.loose_count()
        while keep_going():
            with self._lock:
                found = self._packs.next_loose()
            if found is None:
                break
            tight = tightened(found[1])
            with self._lock:
                with self._writing():
                    self._packs.replace_loose(found[0], found[1], tight)
                self._dirty = True  # the freed pages go back at the next settle
            done += 1
            if progress is not None:
                progress(done, total)
        with self._lock:
            return done, self._packs.loose_count()
