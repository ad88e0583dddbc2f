"""The per-transcript lock two riffd runs take before rewriting a file, and riffd's own temp files beside a
transcript (`.<name>.riffd-<hex>.tmp`), which Claude Code never lists."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import secrets
import stat
import time
from pathlib import Path

from riffd.fsio import (
    NOFOLLOW,
    REAL_FS,
    FileSystem,
    ensure_private_folder,
)

log = logging.getLogger(__name__)

# `.<name>.riffd-<12 hex>.tmp`: dot-prefixed and not ending in .jsonl, so Claude Code never lists it.
TEMP_NAME = re.compile(r"^\..+\.riffd-[0-9a-f]{12}\.tmp$")




def temp_path_for(path: Path) -> Path:
    """Given a transcript path, return a fresh temp name beside it that Claude Code ignores."""
    return path.parent / f".{path.name}.riffd-{secrets.token_hex(6)}.tmp"


def remove_stale_temps(
    folder: Path,
    older_than_seconds: float,
    *,
    fs: FileSystem = REAL_FS,
    now: float | None = None,
    locked_name: str | None = None,
) -> list[Path]:
    """Given a folder, remove riffd's own temp files (`.<name>.riffd-<hex>.tmp`) older than
    `older_than_seconds` (left by a killed run) and return them; other files are never touched.

    Temp files of `locked_name`, the transcript whose lock the caller holds, go at any age: no other
    riffd run can be writing them."""
    current_time = time.time() if now is None else now
    own_prefix = f".{locked_name}.riffd-" if locked_name else None
    try:
        names = fs.listdir(folder)
    except OSError as exc:
        log.warning("cannot list %s to clean up riffd temp files: %s", folder, exc)
        return []
    removed: list[Path] = []
    for name in names:
        if not TEMP_NAME.match(name):
            continue
        candidate = folder / name
        try:
            status = fs.stat(candidate)
            old_enough = current_time - status.st_mtime >= older_than_seconds
            ours = own_prefix is not None and name.startswith(own_prefix)
            if not stat.S_ISREG(status.st_mode) or not (old_enough or ours):
                continue
            # Only ever a copy: the original is intact until the rename, after which this name is gone.
            fs.unlink(candidate)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove the stale riffd temp file %s: %s", candidate, exc)
            continue
        removed.append(candidate)
    return removed


def lock_path_for(backup_dir: Path, path: Path) -> Path:
    """Given the backup folder and a transcript, return the lock file riffd flocks while rewriting it."""
    key = hashlib.sha256(os.fsencode(os.path.join(os.path.realpath(path.parent), path.name))).hexdigest()
    return backup_dir / ".locks" / f"{key[:32]}.lock"


class PathLock:
    """An advisory flock on `<backup dir>/.locks/<hash of path>.lock`: two riffd runs never share a file."""

    def __init__(self, fs: FileSystem, backup_dir: Path, path: Path) -> None:
        self.fs = fs
        self.lock_path = lock_path_for(backup_dir, path)
        self.lock_dir = self.lock_path.parent
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        ensure_private_folder(self.fs, self.lock_dir)
        fd = self.fs.open(self.lock_path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fs.close(fd)
            return False
        except OSError:
            self.fs.close(fd)
            raise
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            # Lock files are never deleted: unlinking one while another run waits on it splits the lock.
            self.fs.close(self.fd)
            self.fd = None
