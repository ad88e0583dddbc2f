"""Opening riffd's SQLite databases: private files, a health check, and a damaged file moved aside, never deleted.

`state.db` (watermarks, findings, repairs) and `archive.db` (every line of every transcript) live in the state
folder. Both are created 0600, with their `-wal` and `-shm` (SQLite gives those the database's own mode), whatever
the folder's mode. A database SQLite cannot open, or whose `PRAGMA quick_check` finds damage, is moved aside as
`<name>.damaged-<UTC time>` (with its `-wal` and `-shm`, so SQLite can still read it there) and a new one is made:
the daemon never stops over a damaged database. What to do with the old one is each owner's business (the state
is rebuilt by a rescan; `riffd archive recover` copies what is readable of an archive).

A new database is set up under a name of its own and linked into place whole, so no process ever finds it half made
(an empty file, which counts as damaged); moving a damaged one aside and making the next is done by one process at
a time (a lock on the folder), and only while the file is still the one found damaged. Two riffd processes that
start together (the daemon, `riffd status`, an archive command) therefore never move each other's database aside.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DAMAGED = ".damaged-"
SIDECARS = ("-wal", "-shm", "-journal")
NEW = ".new-"  # a database being made: `<name>.new-<pid>-<n>`, linked into place as `<name>` when set up


class DatabaseDamaged(Exception):
    """A database file SQLite cannot use; the message names the file, the problem and what to do."""

    def __init__(self, path: Path, problem: str, advice: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path} is damaged ({problem}); {advice}")


def make_private(path: Path) -> None:
    """Create `path` as an empty 0600 file when it does not exist, and make it and its sidecars 0600.

    An existing file is changed by path, never opened: closing any descriptor of a database file drops every POSIX
    lock this process holds on it, which would let another process delete the WAL under an open connection."""
    try:
        os.chmod(path, FILE_MODE)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE))
    for suffix in SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", FILE_MODE)


def problem_of(db: sqlite3.Connection) -> str | None:
    """Return what `PRAGMA quick_check` finds wrong with an open database (its first few problems), or None; raise
    the error of a database that is only busy (locked by another process), which is no damage."""
    try:
        rows = db.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if not is_damage_error(exc):
            raise
        return str(exc)
    problems = [str(row[0]) for row in rows if row[0] != "ok"]
    return "; ".join(problems) if problems else None


def is_damage_error(exc: BaseException) -> bool:
    """Return True for the sqlite3 errors that may mean a damaged file (confirm with `problem_of`), not a busy or
    locked database or a full disk."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text or "corrupt" in text or type(exc) is sqlite3.DatabaseError


BUSY = "not damaged: another riffd process, the daemon or a command, held it longer than the 30 s riffd waits"


def is_busy_error(exc: BaseException) -> bool:
    """Return True for the sqlite3 error of a database another connection holds locked past the timeout (see BUSY)."""
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


FULL_BELOW = 1 << 20  # bytes free under which a filesystem counts as full (SQLite needs whole pages, a WAL more)


# SQLite's "disk I/O error"s that a full disk gives for writes it does not report as SQLITE_FULL (growing the
# shared-memory file when it opens a database, above all)
_WRITE_IOERRS = frozenset(getattr(sqlite3, name) for name in (
    "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE")
    if hasattr(sqlite3, name))


def is_full_error(exc: BaseException, folder: Path | None = None) -> bool:
    """Return True for the error of a full disk or an exhausted quota: SQLite's SQLITE_FULL ("database or disk is
    full"), ENOSPC or EDQUOT; with `folder` (the database's), also SQLite's write I/O errors while that disk has under
    FULL_BELOW free (never a read error, a permission or a file that cannot be opened). No damage: what was
    committed stays, and nothing of the failed step does."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
        return True
    if folder is None or code not in _WRITE_IOERRS:
        return False
    free = free_bytes(folder)
    return free is not None and free < FULL_BELOW


def free_bytes(folder: Path) -> int | None:
    """Return the bytes this user may still write on the filesystem holding `folder`, or None when unknown."""
    try:
        status = os.statvfs(folder)
    except (OSError, AttributeError):  # gone, or no statvfs (Windows)
        return None
    return status.f_bavail * status.f_frsize


def full_disk_note(folder: Path) -> str:
    """Return a clause on the filesystem holding `folder`: "the disk holding /x is full (12 KiB free)"."""
    free = free_bytes(folder)
    return f"the disk holding {folder} is full" + (f" ({free / 1024:.0f} KiB free)" if free is not None else "")


def move_aside(path: Path) -> Path:
    """Rename a damaged database and its sidecars to `<name>.damaged-<UTC time>` beside it; return the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}{DAMAGED}{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}{DAMAGED}{stamp}-{counter}")
    os.rename(path, target)
    for suffix in SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{path}{suffix}", f"{target}{suffix}")
    return target


def damaged_copies(path: Path) -> list[Path]:
    """Return the moved-aside copies of the database `path`, oldest first."""
    return sorted(candidate for candidate in path.parent.glob(f"{path.name}{DAMAGED}*")
                  if not candidate.name.endswith(SIDECARS))


def open_checked(path: Path, connect: Callable[[Path], sqlite3.Connection], *, heal: bool, advice: str,
                 check: bool = True) -> tuple[sqlite3.Connection, Path | None, str | None]:
    """Open the database at `path` (a private file) with `connect`, which also sets it up, and (with `check`)
    run its quick check. A missing database is made whole first (`_create`). An existing empty file counts as
    damaged: SQLite never leaves one, nor does `_create`.

    Return (the connection, where a damaged file was moved, what was wrong with it). With `heal`, a damaged file is
    moved aside and a new database opened in its place; without, raise DatabaseDamaged (with `advice`). An error
    that is not damage (the database locked by another process past the timeout, a file that cannot be opened) is
    raised as it is: a busy database is never called damaged, nor moved."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.path.lexists(path):
        _create(path, connect)
    judged = _identity(path)
    problem: str | None = None
    db: sqlite3.Connection | None = None
    try:
        empty = path.stat().st_size == 0 and not os.path.exists(f"{path}-wal")
    except FileNotFoundError:
        empty = False
    if empty:
        problem = "the file is empty (0 bytes)"
    else:
        make_private(path)
        try:
            db = connect(path)
            problem = problem_of(db) if check else None
        except sqlite3.DatabaseError as exc:
            if not is_damage_error(exc):  # busy, locked, cannot be opened: no damage, and never moved aside
                if db is not None:
                    db.close()
                raise
            problem = str(exc)
        if problem is None and db is not None:
            make_private(path)
            return db, None, None
        if db is not None:
            db.close()
    if not heal:
        raise DatabaseDamaged(path, problem or "unreadable", advice)
    return _start_anew(path, problem or "unreadable", connect, judged)


def _identity(path: Path) -> tuple[int, int] | None:
    """Return (device, inode) of the file at `path`, or None when there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (flock on the folder itself: no lock file to leave behind), so one riffd
    process at a time moves a database there aside and makes the next; where the filesystem has no such locks,
    go on without (a healing opener still checks that the file is the one it found damaged)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (the lock goes with the descriptor)


def _create(path: Path, connect: Callable[[Path], sqlite3.Connection]) -> None:
    """Make a new, private database at `path` as a whole: set up by `connect` under a name of its own beside it, its
    log folded in, then hard-linked into place. Another process opening `path` meanwhile finds nothing (and makes
    one of its own) or a finished database, never a half-made one; when another process linked its own first, that
    one is kept and this one removed. A database that cannot be made (a full disk) leaves nothing behind."""
    _remove_leftovers(path)
    temp = path.with_name(f"{path.name}{NEW}{os.getpid()}-{next(_NUMBERS)}")
    make_private(temp)
    try:
        db = connect(temp)
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()  # (the last connection: SQLite removes an empty -wal and the -shm)
        with contextlib.suppress(FileNotFoundError):
            if os.path.getsize(f"{temp}-wal") > 0:  # never link a database whose set-up is still in its log
                raise sqlite3.OperationalError(f"{temp}: the new database's log could not be folded into it")
        try:
            os.link(temp, path)
        except FileExistsError:
            pass  # another process made it first: its database is the one
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
            if not os.path.lexists(path):  # a filesystem without hard links: a rename (made first, kept: rarer)
                os.rename(temp, path)
    finally:
        for name in (str(temp), *(f"{temp}{suffix}" for suffix in SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


_NUMBERS = itertools.count(1)


def _remove_leftovers(path: Path) -> None:
    """Remove what `_create` left of `path` in a process that died mid-way (killed): its `<name>.new-<pid>-<n>`
    files, when no process has that pid now (never a live one's, which may be making its own)."""
    for leftover in path.parent.glob(f"{path.name}{NEW}*"):
        pid = leftover.name[len(path.name) + len(NEW):].split("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's: alive)
        return True
    return True


def _start_anew(path: Path, problem: str, connect: Callable[[Path], sqlite3.Connection],
                judged: tuple[int, int] | None) -> tuple[sqlite3.Connection, Path | None, str | None]:
    """Move the damaged database at `path` (the file `judged` names) aside and open a new, private one there. When
    another process has done so since (the file there is another one), open the one it made."""
    moved: Path | None = None
    with _folder_lock(path.parent):
        if judged is not None and _identity(path) == judged:
            moved = move_aside(path)
            log.error("%s is damaged (%s): moved aside to %s; a new one is in its place", path, problem, moved)
        if not os.path.lexists(path):
            _create(path, connect)
    make_private(path)
    db = connect(path)
    return (db, moved, problem) if moved is not None else (db, None, None)


def reopen_if_damaged(path: Path, db: sqlite3.Connection, error: BaseException,
                      connect: Callable[[Path], sqlite3.Connection]
                      ) -> tuple[sqlite3.Connection, Path | None, str | None] | None:
    """After `error` on the open database `db` at `path`: when the quick check confirms damage, close it, move the file
    aside and return (a new connection, where the file went, the problem; both None when another process moved it
    aside first); otherwise return None (keep using `db`)."""
    if not is_damage_error(error):
        return None
    judged = _identity(path)
    # A new connection reads the file as it is now; `db` may answer from pages it cached before the damage.
    try:
        checker = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            problem = problem_of(checker)
        finally:
            checker.close()
    except sqlite3.Error:  # busy, or cannot be opened now: no damage confirmed, so nothing is moved
        return None
    if problem is None:
        return None
    db.close()
    return _start_anew(path, problem, connect, judged)
