"""The per-transcript lock two riffd runs take before rewriting a file, and riffd's own temp files
beside a transcript (`.<name>.riffd-<pid>-<hex>.tmp`), which Claude Code never lists.

The lock is an advisory `flock` on the transcript itself, so it holds whatever backup folder each
run uses (`riffd fix --backup-dir X` beside the daemon). Claude Code takes no lock and only appends,
so the lock never blocks it. The repaired copy is locked too from the moment it exists: once it
takes the transcript's name, a second run that opens that name finds it busy. Where a filesystem has
no `flock` (some network filesystems), a lock file in the backup folder stands in, which only
excludes runs that share that folder.

A temp file's name carries the pid of the process writing it: a temp of a running riffd is never
removed; one of a process that is gone is removed by the next run that works in its folder, at the
daemon's start and by `riffd backups prune`.
"""

from __future__ import annotations

import codecs
import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import stat
import time
from pathlib import Path

from riffd.claude_code.liveness import pid_is_alive
from riffd.fsio import (
    NOFOLLOW,
    REAL_FILES,
    RetryingFS,
    ensure_private_folder,
)

log = logging.getLogger(__name__)

# `.<name>.riffd-<pid>-<12 hex>.tmp`: dot-prefixed and not ending in .jsonl, so Claude Code never
# lists it. Names without a pid were made by riffd before 0.1.0's layout; they are removed only when
# old.
TEMP_NAME = re.compile(r"^\..+\.riffd-(?:(?P<pid>[0-9]+)-)?[0-9a-f]{12}\.tmp$")
# flock errors that mean "this filesystem cannot lock", not "someone holds the lock".
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


# The bytes of a file's own name a temp name carries whole: with riffd's 35 around it (a pid of up to
# 10 digits) and the 5 a swap's journal adds (`.swap.new` for `.tmp`), 255, a name's most on every
# filesystem riffd runs on
_NAME_BYTES = 215


def temp_stem(name: str) -> str:
    """What a temp name beside the file `name` carries of it: the name itself; a name too long to
    carry whole (a saved output may have up to 255 bytes), its start, cut between characters, and a
    hash of the whole (riffd.repair.journal knows a swap's names by it)."""
    raw = os.fsencode(name)
    if len(raw) <= _NAME_BYTES:
        return name
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    start = decoder.decode(raw[: _NAME_BYTES - 17], final=False)  # (a cut character left out)
    return f"{start}~{hashlib.sha256(raw).hexdigest()[:16]}"


def temp_path_for(path: Path) -> Path:
    """Given a file's path, return a fresh temp name beside it that Claude Code ignores
    (`.<temp_stem>.riffd-<pid>-<12 hex>.tmp`)."""
    return path.parent / f".{temp_stem(path.name)}.riffd-{os.getpid()}-{secrets.token_hex(6)}.tmp"


def leftover_of_dead_process(name: str, age_seconds: float, older_than_seconds: float) -> bool:
    """Given a temp file's name and age, return True when no running process can be writing it: its
    pid is gone, or (a name without a pid) it is older than `older_than_seconds`."""
    match = TEMP_NAME.match(name)
    if match is None:
        return False
    pid = match.group("pid")
    if pid is None:
        return age_seconds >= older_than_seconds
    return int(pid) != os.getpid() and not pid_is_alive(int(pid))


def remove_stale_temps(
    folder: Path,
    older_than_seconds: float,
    *,
    fs: RetryingFS = REAL_FILES,
    now: float | None = None,
) -> list[Path]:
    """Given a folder, remove riffd's own temp files that no running process writes (see
    `leftover_of_dead_process`) and return them; other files, and temps of running riffd processes,
    are never touched. A temp is only ever a copy: the transcript is intact until the swap, after
    which riffd removes the name itself."""
    current_time = time.time() if now is None else now
    try:
        names = fs.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []  # no folder there: no temp file either (what needs it says so in its own words)
    except OSError as exc:
        log.warning("cannot list %s to clean up riffd temp files: %s", folder, exc)
        return []
    removed: list[Path] = []
    present = set(names)
    for name in names:
        if not TEMP_NAME.match(name):
            continue
        if name.removesuffix(".tmp") + ".swap" in present:
            continue  # a swap's journal names it: it may hold the original (riffd.repair.recovery decides)
        candidate = folder / name
        try:
            status = fs.stat(candidate)
            if not stat.S_ISREG(status.st_mode):
                continue
            if not leftover_of_dead_process(
                name, current_time - status.st_mtime, older_than_seconds
            ):
                continue
            fs.unlink(candidate)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove the stale riffd temp file %s: %s", candidate, exc)
            continue
        removed.append(candidate)
    return removed


def lock_path_for(backup_dir: Path, path: Path) -> Path:
    """Given the backup folder and a transcript, return the lock file that stands in for a flock of
    the transcript on filesystems that have none."""
    key = hashlib.sha256(
        os.fsencode(os.path.join(os.path.realpath(path.parent), path.name))
    ).hexdigest()
    return backup_dir / ".locks" / f"{key[:32]}.lock"


def try_flock(fs: RetryingFS, fd: int) -> bool | None:
    """Take an exclusive flock on `fd` without waiting: True when taken, False when another holder
    has it, None when the filesystem cannot lock. Raise OSError for other errors."""
    try:
        fs.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return None
        raise
    return True


class TranscriptLock:
    """The lock of one transcript while riffd rewrites it: a flock on the descriptor riffd holds
    open for the whole run, or the lock file of `lock_path_for` where the filesystem cannot
    flock."""

    def __init__(self, fs: RetryingFS, backup_dir: Path, path: Path, fd: int) -> None:
        self.fs, self.backup_dir, self.path, self.fd = fs, backup_dir, path, fd
        self._lock_file: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock; return False when another riffd run holds it. Raise OSError when it cannot
        be taken."""
        taken = try_flock(self.fs, self.fd)
        if taken is not None:
            return taken
        lock_path = lock_path_for(self.backup_dir, self.path)
        ensure_private_folder(self.fs, lock_path.parent)
        lock_fd = self.fs.open(lock_path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
        try:
            taken = try_flock(self.fs, lock_fd)
            if taken is None:
                raise OSError(
                    errno.ENOLCK,
                    "neither the transcript's filesystem nor the backup folder's can lock "
                    "files, so two riffd runs could not be kept apart",
                    str(lock_path),
                )
        except OSError:
            self.fs.close(lock_fd)
            raise
        if not taken:
            self.fs.close(lock_fd)
            return False
        self._lock_file = lock_fd
        return True

    def release(self) -> None:
        """Let go of the lock file, if one stood in (the flock goes with the transcript's
        descriptor)."""
        if self._lock_file is not None:
            # Lock files are never deleted: unlinking one while another run waits on it splits the
            # lock.
            self.fs.close(self._lock_file)
            self._lock_file = None
