"""One daemon per state folder: an advisory lock on `<state dir>/riffd.lock`, and the pid of the daemon that holds
it (for `riffd status`)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "riffd.lock"


class AlreadyRunning(Exception):
    """Another riffd daemon holds the state folder's lock."""


class StateLock:
    """An exclusive flock on `<state dir>/riffd.lock` holding the daemon's pid; `riffd status` probes it."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning naming the holder's pid."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(
                f"another riffd daemon (pid {holder}) uses {self.path.parent}; stop it first, or give this one "
                "its own state_dir"
            ) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Release the lock (the file stays: removing it could split the lock between two starters)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


def running_pid(state_dir: Path) -> int | None:
    """Return the pid of the daemon holding `state_dir`'s lock, or None when none does."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_time(state_dir: Path) -> float | None:
    """Return when the daemon holding `state_dir`'s lock took it (the lock file's mtime: it writes its pid there
    then), or None."""
    try:
        return os.stat(state_dir / LOCK_NAME).st_mtime
    except OSError:
        return None
