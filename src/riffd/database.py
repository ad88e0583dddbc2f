"""Opening riffd's SQLite databases: private files, a health check, and a damaged file moved aside,
never deleted.

`state.db` (watermarks, findings, repairs) and `archive.db` (every line of every transcript) live in
the state folder. Both are created 0600, with their `-wal` and `-shm` (SQLite gives those the
database's own mode), whatever the folder's mode. A database SQLite cannot open, or whose `PRAGMA
quick_check` finds damage, is moved aside as `<name>.damaged-<UTC time>` (with its `-wal` and
`-shm`, so SQLite can still read it there) and a new one is made: the daemon never stops over a
damaged database. What to do with the old one is each owner's business (the state is rebuilt by a
rescan; `riffd archive recover` copies what is readable of an archive).

A new database is set up under a name of its own and linked into place whole, so no process ever
finds it half made (an empty file, which counts as damaged); moving a damaged one aside and making
the next is done by one process at a time (a lock on the folder), and only while the file is still
the one found damaged. Two riffd processes that start together (the daemon, `riffd status`, an
archive command) therefore never move each other's database aside.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
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
NEW = ".new-"  # a database being made: `<name>.new-<pid>-<random>`, linked into place as `<name>` when set up


class DatabaseDamaged(Exception):
    """A database file SQLite cannot use; the message names the file, the problem and what to do."""

    def __init__(self, path: Path, problem: str, advice: str) -> None:
        self.path, self.problem, self.advice = path, problem, advice
        super().__init__(f"{path} is damaged ({problem}); {advice}")

    def told(self, riffd: str) -> str:
        """The message with the commands it advises started as `riffd` (riffd.display's
        riffd_invocation: `riffd --config FILE` for a configuration not the default one)."""
        return f"{self.path} is damaged ({self.problem}); " + started_as(self.advice, riffd)


def started_as(advice: str, riffd: str) -> str:
    """`advice` with the commands it names (between backquotes, `riffd ...`) started as `riffd`
    (riffd.display.riffd_invocation: `riffd --config FILE` for a configuration not the default)."""
    return advice.replace("`riffd ", f"`{riffd} ")


def make_private(path: Path) -> None:
    """Make the existing database `path` and its sidecars 0600 (FileNotFoundError when `path` is
    gone).

    By path, never opened: closing any descriptor of a database file drops every POSIX lock this
    process holds on it, which would let another process delete the WAL under an open connection. A
    database is never created here (only `_create` makes one, whole, under a name of its own)."""
    os.chmod(path, FILE_MODE)
    for suffix in SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", FILE_MODE)


def problem_of(db: sqlite3.Connection) -> str | None:
    """Return what `PRAGMA quick_check` finds wrong with an open database (its first few problems),
    or None; raise the error of a database that is only busy (locked by another process), which is
    no damage."""
    try:
        rows = db.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if not is_damage_error(exc):
            raise
        return str(exc)
    problems = [str(row[0]) for row in rows if row[0] != "ok"]
    return "; ".join(problems) if problems else None


def is_damage_error(exc: BaseException) -> bool:
    """Return True for the sqlite3 errors that may mean a damaged file (confirm with `problem_of`),
    not a busy or locked database or a full disk."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc).lower()
    return (
        "malformed" in text
        or "not a database" in text
        or "corrupt" in text
        or type(exc) is sqlite3.DatabaseError
    )


BUSY = "not damaged: another riffd process, the daemon or a command, held it longer than the 30 s riffd waits"


def is_busy_error(exc: BaseException) -> bool:
    """Return True for the sqlite3 error of a database another connection holds locked past the
    timeout (see BUSY)."""
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


# bytes free under which a filesystem counts as full (SQLite needs whole pages, a WAL more)
FULL_BELOW = 1 << 20


# SQLite's "disk I/O error"s that a full disk gives for writes it does not report as SQLITE_FULL
# (growing the shared-memory file when it opens a database, above all)
_WRITE_IOERRS = frozenset(
    getattr(sqlite3, name)
    for name in (
        "SQLITE_IOERR_SHMSIZE",
        "SQLITE_IOERR_WRITE",
        "SQLITE_IOERR_FSYNC",
        "SQLITE_IOERR_TRUNCATE",
    )
    if hasattr(sqlite3, name)
)


def is_full_error(exc: BaseException, folder: Path | None = None) -> bool:
    """Return True for the error of a full disk or an exhausted quota: SQLite's SQLITE_FULL
    ("database or disk is full"), ENOSPC or EDQUOT; with `folder` (the database's), also SQLite's
    write I/O errors while that disk has under FULL_BELOW free (never a read error, a permission or
    a file that cannot be opened). No damage: what was committed stays, and nothing of the failed
    step does."""
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
    """Return the bytes this user may still write on the filesystem holding `folder`, or None when
    unknown."""
    try:
        status = os.statvfs(folder)
    except (OSError, AttributeError):  # gone, or no statvfs (Windows)
        return None
    return status.f_bavail * status.f_frsize


def full_disk_note(folder: Path) -> str:
    """Return a clause on the filesystem holding `folder`: "the disk holding /x is full (12 KiB
    free)"."""
    free = free_bytes(folder)
    return f"the disk holding {folder} is full" + (
        f" ({free / 1024:.0f} KiB free)" if free is not None else ""
    )


def move_aside(path: Path) -> Path:
    """Rename a damaged database and its sidecars to `<name>.damaged-<UTC time>` beside it; return
    the new path."""
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
    return sorted(
        candidate
        for candidate in path.parent.glob(f"{path.name}{DAMAGED}*")
        if not candidate.name.endswith(SIDECARS)
    )


# (path, create): with create False, never makes a file
Connect = Callable[[Path, bool], sqlite3.Connection]
EMPTY = "the file is empty (0 bytes)"
OPEN_TRIES = 20  # looks at a database that another process keeps moving aside or making meanwhile
# a `<name>.new-*` this old was left by a process killed while it made the database
STALE_AFTER_SECONDS = 600.0


def open_checked(
    path: Path,
    connect: Connect,
    *,
    heal: bool,
    advice: str,
    check: bool = True,
    create: bool = True,
) -> tuple[sqlite3.Connection, Path | None, str | None]:
    """Open the database at `path` (a private file) with `connect`, which also sets it up, and (with
    `check`) run its quick check. A missing database is made whole first (`_create`; with `create`
    False, a missing one is an error). An existing empty file counts as damaged: SQLite never leaves
    one, nor does `_create`.

    Return (the connection, where a damaged file was moved, what was wrong with it). With `heal`, a
    damaged file is moved aside and a new database opened in its place; without, raise
    DatabaseDamaged (with `advice`). An error that is not damage (the database locked by another
    process past the timeout, a file that cannot be opened) is raised as it is: a busy database is
    never called damaged, nor moved. A file another process moves aside or makes while this one
    looks is looked at again, never made here in its place."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _remove_leftovers(path)
    for _attempt in range(OPEN_TRIES):
        if not os.path.lexists(path):
            if not create:
                raise sqlite3.OperationalError(
                    f"unable to open database file: {path} does not exist"
                )
            try:
                _create(path, connect)
            except FileNotFoundError:  # (the folder emptied meanwhile)
                continue
        judged = _identity(path)
        problem: str | None = None
        db: sqlite3.Connection | None = None
        if judged is None:
            if path.is_symlink() and not os.path.exists(path):
                raise sqlite3.OperationalError(
                    f"unable to open database file: {path} is a link to nothing "
                    f"({os.readlink(path)})"
                )
            continue
        if _is_empty(path):
            problem = EMPTY
        else:
            try:
                make_private(path)
                db = connect(path, False)
                problem = problem_of(db) if check else None
            except FileNotFoundError:  # moved aside by another process meanwhile
                continue
            except sqlite3.DatabaseError as exc:
                if db is not None:
                    db.close()
                # moved aside by another process meanwhile: look again
                if not os.path.lexists(path):
                    continue
                # busy, locked, cannot be opened: no damage, and never moved aside
                if not is_damage_error(exc):
                    raise
                problem = str(exc)
            else:
                if problem is None:
                    return db, None, None
                db.close()
        if not heal:
            raise DatabaseDamaged(path, problem or "unreadable", advice)
        reopened = _start_anew(path, problem or "unreadable", connect, judged)
        if reopened is not None:
            return reopened
    raise sqlite3.OperationalError(
        f"unable to open database file: {path} kept being replaced while it was opened"
    )


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0 and not os.path.exists(f"{path}-wal")
    except FileNotFoundError:
        return False


def _identity(path: Path) -> tuple[int, int] | None:
    """Return (device, inode) of the file at `path`, or None when there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (flock on the folder itself: no lock file to leave
    behind), so one riffd process at a time moves a database there aside and makes the next; where
    the filesystem has no such locks, go on without (a healing opener still checks that the file is
    the one it found damaged)."""
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


def _create(path: Path, connect: Connect) -> None:
    """Make a new, private database at `path` as a whole: set up by `connect` under a name of its
    own beside it, its log folded in, then hard-linked into place (or, on a filesystem without hard
    links, renamed there with a rename that never replaces a file). Another process opening `path`
    meanwhile finds nothing (and makes one of its own) or a finished database, never a half-made
    one; when another process put its own there first, that one is kept and this one removed. A
    database that cannot be made (a full disk) leaves nothing behind; the error names `path`."""
    temp = path.with_name(f"{path.name}{NEW}{os.getpid()}-{os.urandom(6).hex()}")
    try:
        os.close(
            os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE
            )
        )
    # (named as the database, not the passing name: the log says one reason once)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        db = connect(temp, True)
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()  # (the last connection: SQLite removes an empty -wal and the -shm)
        with contextlib.suppress(FileNotFoundError):
            # never link a database whose set-up is still in its log
            if os.path.getsize(f"{temp}-wal") > 0:
                raise sqlite3.OperationalError(
                    f"{path}: the new database's log could not be folded into it"
                )
        with open(temp, "rb") as made:
            # nothing was written: never put an empty file in place
            if made.read(16) != b"SQLite format 3\x00":
                raise sqlite3.OperationalError(
                    f"unable to open database file: {path} could not be set up"
                )
        _put_in_place(temp, path)
    finally:
        for name in (str(temp), *(f"{temp}{suffix}" for suffix in SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def _put_in_place(temp: Path, path: Path) -> None:
    """Give the made database `temp` the name `path` unless another process gave it one first (then
    theirs stays)."""
    try:
        os.link(temp, path)
        return
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno not in (
            errno.EPERM,
            errno.ENOTSUP,
            errno.EOPNOTSUPP,
            errno.EMLINK,
            errno.ENOSYS,
        ):
            raise
    # (here: most filesystems have hard links)
    from riffd.fsio import (
        EXCHANGE_UNSUPPORTED,
        rename_noreplace,
    )

    try:
        rename_noreplace(temp, path)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno in EXCHANGE_UNSUPPORTED:
            raise OSError(
                exc.errno,
                "this filesystem has neither hard links nor a rename that never replaces a "
                "file, so a database cannot be made here safely; put the state folder on another one "
                "(RIFFD_STATE_DIR)",
                str(path),
            ) from exc
        raise


def _remove_leftovers(path: Path) -> None:
    """Remove the `<name>.new-*` files of `path` older than STALE_AFTER_SECONDS: left by a process
    killed while it made the database (a made one takes milliseconds), whichever process, in
    whichever PID namespace; a name the killed process had already linked into place is only a
    second name of the database, and goes too."""
    now = time.time()
    for leftover in path.parent.glob(f"{path.name}{NEW}*"):
        with contextlib.suppress(FileNotFoundError):
            if now - leftover.lstat().st_mtime > STALE_AFTER_SECONDS:
                os.unlink(leftover)


def _start_anew(
    path: Path, problem: str, connect: Connect, judged: tuple[int, int] | None
) -> tuple[sqlite3.Connection, Path, str] | None:
    """Move the damaged database at `path` (the file `judged` names) aside and open a new, private
    one there; return None, moving nothing, when the file there is no longer the one found damaged
    (another process moved it aside and made a new one meanwhile, or filled an empty one): the
    caller looks again."""
    with _folder_lock(path.parent):
        if (
            judged is None
            or _identity(path) != judged
            or (problem == EMPTY and not _is_empty(path))
        ):
            return None
        moved = move_aside(path)
        log.error(
            "%s is damaged (%s): moved aside to %s; a new one is in its place", path, problem, moved
        )
        _create(path, connect)
    make_private(path)
    return connect(path, False), moved, problem


def reopen_if_damaged(
    path: Path, db: sqlite3.Connection, error: BaseException, connect: Connect
) -> tuple[sqlite3.Connection, Path | None, str | None] | None:
    """After `error` on the open database `db` at `path`: when the quick check confirms damage,
    close it, move the file aside and return (a new connection, where the file went, the problem;
    both None when another process moved it aside first); otherwise return None (keep using
    `db`)."""
    if not is_damage_error(error):
        return None
    judged = _identity(path)
    # A new connection reads the file as it is now; `db` may answer from pages it cached before the
    # damage.
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
    reopened = _start_anew(path, problem, connect, judged)
    return reopened if reopened is not None else (connect(path, False), None, None)
