"""The one connection an archive's writer, reader and whole files share.

`ArchiveConnection` holds the SQLite connection, the lock every statement is made under (one
connection, many threads), the lock timeout, and the packs held in memory for this connection
(riffd.archive.packs.PackStore). It opens the database, moves it aside when it is found damaged
(the writer, reader and whole files keep using this object: they see the new database), and makes
the transactions: a write transaction after which the packs in memory are what it committed, or
forgotten when it rolled back, and reads as of one moment. A bulk ingest groups its write steps
(`grouped`) in a transaction that commits every few megabytes, which spares the commits that wrote
the same pages of the content-key index and the search index over and over; a step that fails there
takes back every step since the last commit, which the ingest then does again.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from riffd.archive.packs import PackStore
from riffd.archive.schema import PAGE_BYTES, RECOVER_ADVICE, connect, names_of, readable_format
from riffd.database import open_checked, reopen_if_damaged

REPAGE_BUSY = (
    "another process has the archive open (the daemon?): stop it and run `riffd archive compact` "
    "again"
)


def repage_problem(exc: sqlite3.OperationalError) -> str:
    """Why moving the archive to new pages failed, and what to do."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return REPAGE_BUSY
    if "full" in text:
        return (
            f"{text}: moving it needs room for about two more copies of it (beside it, and in the "
            "temporary folder); make room and run `riffd archive compact` again"
        )
    return f"{text}; run `riffd archive compact` again"


class ArchiveGroupError(RuntimeError):
    """A step of a grouped write ended the group's transaction (riffd's own error, never the
    user's)."""


# Run inside a transaction on its connection
InTransaction = Callable[[sqlite3.Connection], None]


def _nothing(_db: sqlite3.Connection) -> None:
    pass


class WriteGroup:
    """The transaction of a group of write steps (`ArchiveConnection.grouped`)."""

    def __init__(
        self,
        connection: ArchiveConnection,
        limit: int,
        begin: InTransaction = _nothing,
        end: InTransaction = _nothing,
    ) -> None:
        self._connection, self._limit, self._size = connection, limit, 0
        self.begin, self.end = begin, end

    def wrote(self, size: int) -> bool:
        """A step wrote `size` bytes of lines: commit once the group holds `limit` of them; return
        whether it did."""
        self._size += size
        if self._size < self._limit:
            return False
        self.commit()
        return True

    def commit(self) -> None:
        """Commit what the steps so far did (the next step begins a new transaction); raise as
        COMMIT does (everything since the last commit is then rolled back)."""
        self._size = 0
        with self._connection.lock:
            self._connection._commit(self.end)

    def lost(self) -> None:
        """Every step since the last commit was rolled back."""
        self._size = 0

    @contextmanager
    def apart(self) -> Iterator[None]:
        """Steps in transactions of their own meanwhile (what the group did so far committed
        first): a file archived whole in this process, which would otherwise hold the lock for all
        of it."""
        self.commit()
        self._connection._group = None
        try:
            yield
        finally:
            self._connection._group = self


class ArchiveConnection:
    """The archive database at `path`, behind one lock (SQLite in WAL mode), with its packs."""

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
        self.lock_timeout = lock_timeout
        self.read_only = read_only
        self.lock = threading.RLock()
        # where a damaged archive went (then `damage` says why)
        self.moved_aside: Path | None = None
        self.damage: str | None = None
        if read_only:
            self.db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=lock_timeout,
            )
            try:
                readable_format(self.db, names_of(self.db))
            except sqlite3.DatabaseError:
                pass  # damaged: read as far as it can be (`riffd archive recover`)
            except BaseException:
                self.db.close()
                raise
        else:
            self.db, self.moved_aside, self.damage = open_checked(
                path, self._connect, heal=heal, check=check, advice=RECOVER_ADVICE
            )
        self.packs = PackStore(self.db)
        self._group: WriteGroup | None = None  # inside `grouped`

    def _connect(self, target: Path, create: bool) -> sqlite3.Connection:
        return connect(target, self.lock_timeout, create)

    def reopen_if_damaged(self, error: BaseException) -> bool:
        """After a database error, check the file; when it is damaged, move it aside and continue
        with a new, empty archive (`riffd archive recover` copies what is readable of the old one).
        Return True when that happened (the packs held in memory are then a new, empty store)."""
        with self.lock:
            reopened = reopen_if_damaged(self.path, self.db, error, self._connect)
            if reopened is None:
                return False
            self.db, self.moved_aside, self.damage = reopened
            self.packs = PackStore(self.db)
        return True

    def repage(self) -> str | None:
        """Rewrite an archive made with pages smaller than PAGE_BYTES (riffd 0.2 and earlier made 1 KiB
        pages) with pages of that size: a search reads its packs through them a third faster. It
        needs the database to itself (no daemon, no other riffd reading it), room for two copies of
        it, and holds the lock meanwhile (VACUUM: about 2 s a 250 MB archive); SQLite's rollback
        journal makes it whole or nothing, a kill included. Return None when done or nothing was to
        do, else why it was not done and what to do (the archive's contents are then as they
        were)."""
        with self.lock:
            if self.db.execute("PRAGMA page_size").fetchone()[0] >= PAGE_BYTES:
                return None
            waits = int(self.db.execute("PRAGMA busy_timeout").fetchone()[0])
            # Leaving WAL mode and the rewrite need the database to itself: asked once, not waited
            # for (a reader of another process keeps it busy)
            self.db.execute("PRAGMA busy_timeout = 0")
            try:
                why = self._rewrite_pages()
            finally:
                self.packs.forget()
                self.db.execute(f"PRAGMA busy_timeout = {waits}")
            # Back to WAL mode, waiting as any statement does for a reader that came meanwhile; if
            # even that fails, the next riffd to open the archive sets it (riffd.archive.schema)
            try:
                mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                mode = str(exc)
            if mode != "wal":
                why = (why or "the pages were moved") + (
                    f"; it is left in rollback-journal mode ({mode}) until riffd next opens it"
                )
            if why is None and self.db.execute("PRAGMA page_size").fetchone()[0] < PAGE_BYTES:
                # (another process opened it between the two steps: SQLite then keeps WAL mode and
                # the pages)
                why = REPAGE_BUSY
            return why

    def _rewrite_pages(self) -> str | None:
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if self.db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] != "delete":
                return REPAGE_BUSY
            self.db.execute(f"PRAGMA page_size = {PAGE_BYTES}")
            self.db.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            return repage_problem(exc)
        return None

    def close(self) -> None:
        """Close the database."""
        with self.lock:
            self.db.close()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction, under the lock: on success the open pack as the transaction left
        it is the committed one; on failure the transaction is rolled back and the packs held in
        memory are forgotten (read again from the database when next needed). A ROLLBACK made
        inside ends it early (the packs are forgotten then too). Inside `grouped`, a step of the
        group's transaction instead (`_step`)."""
        with self.lock:
            if self._group is not None:
                with self._step():
                    yield
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.packs.refresh()
                yield
                if not self.db.in_transaction:  # ended inside
                    self.packs.forget()
                    return
                self.db.execute("COMMIT")
            except BaseException:
                self._roll_back()
                raise
            self.packs.commit()

    @contextmanager
    def grouped(
        self, limit: int, *, begin: InTransaction = _nothing, end: InTransaction = _nothing
    ) -> Iterator[WriteGroup]:
        """Under the lock, the write steps (`writing`) of a bulk ingest in few transactions, each
        committed once the steps said to have written `limit` bytes (`WriteGroup.wrote`), when
        asked (`WriteGroup.commit`: before the ingest says what it stored) and at the end, also when
        the block ends by an exception (what the steps did is then committed, as it was when each
        step committed). A step that fails rolls back every step since the last commit (the caller
        counts them lost and archives from the archive's watermark again); so does a kill, which the
        next ingest repairs the same way. A ROLLBACK made by a step inside a group raises
        ArchiveGroupError. `begin` runs in each of the group's transactions once it has begun, `end`
        before it commits (what they do is committed with the steps, or rolled back with them: a
        setting the group's transactions want and no other process is to see)."""
        with self.lock:
            group = self._group = WriteGroup(self, limit, begin, end)
            try:
                yield group
            finally:
                self._group = None
                group.commit()

    def _commit(self, end: InTransaction = _nothing) -> None:
        if not self.db.in_transaction:
            return
        try:
            end(self.db)
            self.db.execute("COMMIT")
        except BaseException:
            self._roll_back()
            raise

    def _roll_back(self) -> None:
        """Roll the open transaction back (a COMMIT that failed, on a deferred constraint say, leaves
        it open) and forget the packs held in memory."""
        try:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        finally:
            self.packs.forget()

    @contextmanager
    def _step(self) -> Iterator[None]:
        """One write step of a group, in its transaction (begun by the first step). Not a savepoint:
        FTS5 writes its pending words out at every savepoint, and SQLite copies each page a
        savepoint's step changes first (a 1 GB ingest spent 3 of its 18 s of storing CPU releasing
        them). A step that fails rolls back the whole transaction, every step since the group's last
        commit."""
        assert self._group is not None
        try:
            if not self.db.in_transaction:
                self.db.execute("BEGIN IMMEDIATE")
                self.packs.refresh()
                self._group.begin(self.db)
            yield
            if not self.db.in_transaction:
                raise ArchiveGroupError("a step of a grouped write rolled the whole group back")
        except BaseException:
            try:
                self._roll_back()
            finally:
                self._group.lost()
            raise
        # (as far as this process goes: a failed commit of the group forgets them)
        self.packs.commit()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Read as of one moment: every read in the block sees the archive as one transaction left
        it, whatever another process (the daemon) writes meanwhile. The lock is held throughout."""
        with self.lock:
            self.db.execute("BEGIN")
            try:
                yield
            finally:
                self.db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read as of one moment (the lock held), unless a transaction is open already (a
        `snapshot`, or a write that reads)."""
        with self.lock:
            if self.db.in_transaction:
                yield
                return
            with self.snapshot():
                yield
