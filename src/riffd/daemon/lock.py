"""One daemon per state folder: an advisory lock on `<state dir>/riffd.lock`, and the pid of the
daemon that holds it (for `riffd status`).

The lock file can be deleted under a running daemon (its state folder removed by hand, or by a
clean-up tool): its flock then sits on a file no other process can open, and a second daemon would
lock a new one. Two things keep the guarantee: on Linux the daemon also binds an abstract Unix
socket named after the state folder, which no file deletion removes (a second daemon, and `status`,
find it there, with the holder's pid from SO_PEERCRED); and a thread notices within a second that
the lock file is gone, takes the lock again on a new file and stops the daemon, which then starts
again in place (same pid, the lock and the socket handed over across the exec) on a fresh state
folder, filled again from the transcripts. Where there is no abstract socket (macOS) and another
daemon took the new lock file in that second, this one stops with exit 2.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

LOCK_NAME = "riffd.lock"
EXIT_RESTART = 75  # Daemon.run's code for "start me again in place" (riffd.commands.daemon execs); never an exit
# "<lock fd>,<socket fd or -1>" across the exec of a restart in place
HANDED_OVER = "RIFFD_HANDED_OVER_LOCK"
CHECK_SECONDS = 1.0

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines


class AlreadyRunning(Exception):
    """Another riffd daemon holds the state folder's lock."""


def _guard_name(state_dir: Path) -> bytes | None:
    """The abstract socket name of a state folder (Linux only; None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    digest = hashlib.sha256(os.fsencode(os.path.abspath(state_dir))).hexdigest()[:40]
    return b"\0riffd-state-" + digest.encode()


def guard_holder(state_dir: Path) -> int | None:
    """Return the pid of the daemon whose guard socket names `state_dir` (-1 when its pid cannot be
    told), or None when none listens (or the platform has no abstract sockets)."""
    name = _guard_name(state_dir)
    if name is None:
        return None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(name)
        _pid, *_ids = struct.unpack(
            "3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        )
        return int(_pid) if _pid > 0 else -1
    except ConnectionRefusedError:
        return None  # bound by a daemon that is not listening yet, or by no one (ENOENT is FileNotFoundError)
    except FileNotFoundError:
        return None
    except OSError:
        return -1  # something holds the name; its backlog is full
    finally:
        probe.close()


class StateLock:
    """An exclusive flock on `<state dir>/riffd.lock` holding the daemon's pid, and (Linux) the
    state folder's abstract socket; `riffd status` probes both. With `on_lost`, a thread keeps them
    true while the daemon runs."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self.fd: int | None = None
        self.guard: socket.socket | None = None
        self.lost = ""  # why the lock file was lost while held ("" while it is not)
        self.retaken = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, on_lost: Callable[[], object] | None = None) -> None:
        """Take the lock (or the one handed over by the process this one replaced) or raise
        AlreadyRunning naming the holder's pid. With `on_lost`, check every CHECK_SECONDS until
        `finish` that the lock file is still the one held; when it is gone, take it again, say so in
        the log and call `on_lost` (the daemon stops)."""
        if not self._adopt():
            self.guard = self._bind_guard()
            try:
                self._take()
            except BaseException:
                self._close_guard()
                raise
        if on_lost is not None:
            self._thread = threading.Thread(
                target=self._watch, args=(on_lost,), name="riffd-lock", daemon=True
            )
            self._thread.start()

    def _bind_guard(self) -> socket.socket | None:
        name = _guard_name(self.path.parent)
        if name is None:
            return None
        guard = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            guard.bind(name)
        except OSError as exc:
            guard.close()
            holder = guard_holder(self.path.parent)
            raise AlreadyRunning(
                f"another riffd daemon (pid {holder if holder and holder > 0 else '?'}) uses {self.path.parent} "
                f"(its lock file may have been deleted under it); stop it first, or give this one its own state_dir"
            ) from exc
        guard.listen(16)
        guard.settimeout(CHECK_SECONDS)
        return guard

    def _take(self) -> None:
        """Lock the file at `path` (made, with its folder, when missing); raise AlreadyRunning when
        another holds it."""
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

    def intact(self) -> bool:
        """Return True while `path` names the file this lock holds (or nothing is held); False once
        it was deleted or replaced. A status that cannot be read says nothing: True."""
        if self.fd is None:
            return True
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        held = os.fstat(self.fd)
        return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def _watch(self, on_lost: Callable[[], object]) -> None:
        while not self._stop.is_set():
            if self.guard is not None:
                try:
                    # a `status` probe: it has read our pid already
                    connection, _address = self.guard.accept()
                    connection.close()
                except TimeoutError:
                    pass
                except OSError:
                    self._stop.wait(CHECK_SECONDS)
            else:
                self._stop.wait(CHECK_SECONDS)
            if not self._stop.is_set() and not self.lost and not self.intact():
                self._retake()
                on_lost()

    def _retake(self) -> None:
        """The lock file is gone: lock a new one (so no second daemon starts and `status` finds this
        one)."""
        old = self.fd
        try:
            self._take()
            self.retaken = True
            self.lost = (
                f"{self.path} was deleted while this daemon held it (its state folder removed?): took the "
                "lock again on a new file; restarting in place so the state and the archive are made anew "
                "from the transcripts"
            )
        except AlreadyRunning as exc:
            self.lost = (
                f"{self.path} was deleted while this daemon held it, and {exc}: stopping (exit 2)"
            )
        except OSError as exc:
            self.lost = (
                f"{self.path} was deleted while this daemon held it, and it cannot be made again ({exc}): "
                "stopping (exit 2)"
            )
        if self.fd != old and old is not None:
            os.close(old)
        log.error("%s", self.lost)

    def finish(self) -> int:
        """Stop watching; release the lock, or, when it was lost and taken again, hand it (and the
        socket) to the process that replaces this one. Return Daemon.run's code: 0, EXIT_RESTART, or
        2 when the lock was lost."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * CHECK_SECONDS)
        if self.lost and self.retaken and self.fd is not None:
            os.set_inheritable(self.fd, True)
            guard = -1
            if self.guard is not None:
                guard = self.guard.fileno()
                os.set_inheritable(guard, True)
            os.environ[HANDED_OVER] = f"{self.fd},{guard}"
            return EXIT_RESTART
        self.release()
        return 2 if self.lost else 0

    def _adopt(self) -> bool:
        """Take over the lock and socket that the daemon this process replaces handed over
        (HANDED_OVER); False when there are none, or they are not this state folder's lock any
        more."""
        handed = os.environ.pop(HANDED_OVER, "")
        try:
            lock_fd, guard_fd = (int(part) for part in handed.split(","))
        except ValueError:
            return False
        try:
            held, on_disk = os.fstat(lock_fd), os.stat(self.path)
            if (held.st_dev, held.st_ino) != (on_disk.st_dev, on_disk.st_ino):
                raise FileNotFoundError(self.path)
            # the same open file: ours already, never blocks
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            for fd in (lock_fd, guard_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            return False
        os.set_inheritable(lock_fd, False)
        self.fd = lock_fd
        if guard_fd >= 0:
            os.set_inheritable(guard_fd, False)
            self.guard = socket.socket(fileno=guard_fd)
            self.guard.settimeout(CHECK_SECONDS)
        return True

    def _close_guard(self) -> None:
        if self.guard is not None:
            self.guard.close()
            self.guard = None

    def release(self) -> None:
        """Release the lock (the file stays: removing it could split the lock between two
        starters)."""
        self._stop.set()
        if self.fd is not None:
            if self.intact():
                os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None
        self._close_guard()


def restart_in_place() -> None:
    """Replace this process by a new run of the same command (same pid, same environment), which
    adopts the lock StateLock.finish handed over; return only when that cannot be done (OSError
    logged)."""
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as exc:
        log.error(
            "could not start again in place (%s %s): %s",
            sys.executable,
            " ".join(sys.orig_argv[1:]),
            exc,
        )


def running_pid(state_dir: Path) -> int | None:
    """Return the pid of the daemon holding `state_dir`'s lock (-1 when it cannot be told), or None
    when none does; a daemon whose lock file was deleted under it is found by its socket (Linux)."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return guard_holder(state_dir)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else guard_holder(state_dir) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return guard_holder(state_dir)
    finally:
        os.close(fd)


def lock_time(state_dir: Path) -> float | None:
    """Return when the daemon holding `state_dir`'s lock took it (the lock file's mtime: it writes
    its pid there then), or None."""
    try:
        return os.stat(state_dir / LOCK_NAME).st_mtime
    except OSError:
        return None
