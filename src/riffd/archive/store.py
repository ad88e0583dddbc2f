"""The archive: every line of every transcript kept, deduplicated, compressed and searchable.

Claude Code deletes transcripts after 30 days; the archive (SQLite, `<state dir>/archive.db`) keeps
them.

How a line is stored, losslessly: as written, in a pack (riffd.archive.packs), with the pieces of
content it shares with a line archived before cut out and a NUL byte in their place
(riffd.archive.dedup). Runs of a file's lines in a pack record where each line is, so `restore`
rebuilds a transcript byte for byte as it was last archived, also after Claude Code deleted it. A
piece seen for the first time stays in its line and is recorded as a content (its place and its
key); its text is indexed for search (riffd.archive.search). Every line is archived exactly once
(riffd.archive.writer).

`Archive` is what the rest of riffd opens: a writer and a reader over one connection, and the
session's other files kept whole. It lends them its name, so a caller writes `archive.cursor(path)`
or `archive.add_lines(...)` and need not know which part answers.
"""

from __future__ import annotations

from pathlib import Path

from riffd.archive.connection import ArchiveConnection
from riffd.archive.reading import ArchiveReader
from riffd.archive.versions import Versions
from riffd.archive.wholefiles import WholeFiles
from riffd.archive.writer import ArchiveGap, ArchiveMismatch, ArchiveMovedOn, ArchiveWriter

__all__ = ["Archive", "ArchiveGap", "ArchiveMismatch", "ArchiveMovedOn"]


class Archive:
    """The archive database (thread-safe: one connection behind a lock, SQLite in WAL mode): its
    `reader`, its `writer`, and the files kept `whole` with their `versions`, over one
    `connection`."""

    def __init__(
        self,
        path: Path,
        *,
        lock_timeout: float = 30.0,
        heal: bool = False,
        check: bool = False,
        read_only: bool = False,
    ) -> None:
        """Open (or create) the archive at `path` (see ArchiveConnection: `check` runs SQLite's
        quick check first, `heal` moves a damaged archive aside, `read_only` changes nothing)."""
        self.path = path
        self.connection = ArchiveConnection(
            path, lock_timeout=lock_timeout, heal=heal, check=check, read_only=read_only
        )
        self.reader = ArchiveReader(self.connection)
        self.writer = ArchiveWriter(self.connection, self.reader)
        # the session's other files kept whole: what is kept of them, and their keeper
        self.versions = Versions(self.connection)
        self.whole = WholeFiles(self.connection, self.versions)
        reader, writer = self.reader, self.writer
        # What the archive answers (riffd.archive.reading)
        self.snapshot = reader.snapshot
        self.file_id = reader.file_id
        self.cursor = reader.cursor
        self.restore_time = reader.restore_time
        self.generations = reader.generations
        self.files = reader.files
        self.files_of = reader.files_of
        self.sessions = reader.sessions
        self.all_files = reader.all_files
        self.archived_bytes = reader.archived_bytes
        self.iter_file = reader.iter_file
        self.damaged_packs = reader.damaged_packs
        self.pack_users = reader.pack_users
        self.tip = reader.tip
        self.search = reader.search
        self.behind = reader.behind
        self.stats = reader.stats
        self.export = reader.export
        # What it is given (riffd.archive.writer)
        self.add_lines = writer.add_lines
        self.add_older_generation = writer.add_older_generation
        self.add_generation = writer.add_generation
        self.note_mtime = writer.note_mtime
        self.settle = writer.settle
        self.compact = writer.compact
        self.repage = self.connection.repage
        self.close = self.connection.close

    @property
    def moved_aside(self) -> Path | None:
        """Where a damaged archive was moved aside to, at opening or since (None: it was not)."""
        return self.connection.moved_aside

    @property
    def damage(self) -> str | None:
        """What was found damaged, when the archive was moved aside."""
        return self.connection.damage

    def reopen_if_damaged(self, error: BaseException) -> bool:
        """After a database error, check the file; when it is damaged, move it aside and continue
        with a new, empty archive (`riffd archive recover` copies what is readable of the old one).
        Return True when that happened."""
        with self.connection.lock:
            if not self.connection.reopen_if_damaged(error):
                return False
            self.writer.reopened()
        return True
