"""Is a session live? Claude Code's own registry of running processes, then the file's mtime.

A transcript may only be rewritten while no Claude Code process is using it (see
shared/transcript-format.md, section 4). Two signals, either one is enough to call it live:
a `<claude dir>/sessions/<pid>.json` entry naming the session whose pid is still running, and a
modification time inside the quiet period (older releases did not register themselves, and a
session resumed by a tool we do not know about only shows up as recent writes).

Each Claude Code config folder has its own `projects/` and its own `sessions/` (shared/filesystems.md), so the
registry is read in every folder riffd knows of (`claude_dirs_for`): the configured one, `$CLAUDE_CONFIG_DIR`
(else ~/.claude), the folder above every root that has a `sessions/`, and the one above the `projects/` that
holds the transcript.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from riffd.fsio import NOFOLLOW, REAL_FS, FileSystem, retrying_call
from riffd.paths import claude_config_dir, session_id_for
from riffd.registry import ENTRY_LIMIT, Registration, parse_registration

log = logging.getLogger(__name__)

def pid_is_alive(pid: int) -> bool:
    """Given a process id, return True when a process with it exists (EPERM counts as alive)."""
    if pid <= 0:
        # kill(0, ...) and kill(-n, ...) address process groups, never one process.
        return False
    if sys.platform == "win32":
        # os.kill(pid, 0) sends CTRL_C_EVENT on Windows; without a safe probe, assume alive.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError as exc:
        # Anything else is unexpected; "alive" is the answer that can only cost a skipped repair.
        log.warning("cannot tell whether pid %d is running (%s); treating it as running", pid, exc)
        return True
    return True


def _read_small_file(path: Path, fs: FileSystem) -> bytes:
    fd = fs.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        chunks: list[bytes] = []
        offset = 0
        while offset < ENTRY_LIMIT:
            chunk = fs.pread(fd, 65536, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        fs.close(fd)


def live_registrations(claude_dir: Path, fs: FileSystem = REAL_FS) -> list[Registration]:
    """Given Claude Code's config folder, return the registry entries whose process is running; unreadable
    or malformed entries are skipped. Raise OSError when the registry exists but cannot be listed: a session may
    then be running unseen."""
    registry = claude_dir / "sessions"
    try:
        names = sorted(retrying_call(lambda: fs.listdir(registry), what=f"the listing of {registry}"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    running: list[Registration] = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        registry_file = registry / name
        try:
            raw = _read_small_file(registry_file, fs)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP):
                log.warning("cannot read session registry entry %s: %s", registry_file, exc)
            continue
        registration = parse_registration(registry_file, raw)
        if registration is None:
            log.debug("ignoring malformed session registry entry %s", registry_file)
            continue
        if pid_is_alive(registration.pid):
            running.append(registration)
    return running


def claude_dirs_for(path: Path, claude_dir: Path | None = None, roots: Sequence[Path] = ()) -> tuple[Path, ...]:
    """Given a transcript, the configured Claude Code folder and the watched roots, return every Claude Code config
    folder whose `sessions/` registry may name its session: `claude_dir`, $CLAUDE_CONFIG_DIR (else ~/.claude), the
    folder above each root that has a `sessions/` folder, and the folder above the `projects/` holding `path`."""
    candidates: list[Path] = [] if claude_dir is None else [claude_dir]
    candidates.append(claude_config_dir())
    candidates += [root.parent for root in roots if (root.parent / "sessions").is_dir()]
    for ancestor in Path(os.path.abspath(path)).parents:
        if ancestor.name == "projects":
            candidates.append(ancestor.parent)
            break
    unique: dict[str, Path] = {}
    for folder in candidates:
        unique.setdefault(os.path.abspath(folder), folder)
    return tuple(unique.values())


def live_session_ids(claude_dir: Path, fs: FileSystem = REAL_FS) -> set[str]:
    """Given Claude Code's config folder, return the ids of sessions a running process has registered."""
    return {registration.session_id for registration in live_registrations(claude_dir, fs)}


def session_liveness(
    path: Path,
    claude_dirs: Path | Iterable[Path],
    quiet_period: float,
    now: float | None = None,
    *,
    session_id: str | None = None,
    fs: FileSystem = REAL_FS,
) -> tuple[bool, str]:
    """Given a transcript and the Claude Code folders to look in (one, or `claude_dirs_for`), return (is_live, why):
    live when a running process registered its session (from the path, or `session_id` when given) in any of them,
    or its mtime is within `quiet_period` seconds (0 turns that rule off); a file whose mtime cannot be read counts
    as live."""
    wanted = {session_id_for(path)}
    if session_id:
        wanted.add(session_id)
    folders = [claude_dirs] if isinstance(claude_dirs, Path) else list(claude_dirs)
    registrations: list[Registration] = []
    for folder in folders:
        try:
            registrations += live_registrations(folder, fs)
        except OSError as exc:  # if in doubt, the session may be live: leave it alone
            return True, f"Claude Code's session registry {folder / 'sessions'} cannot be read ({exc})"
    for registration in registrations:
        if registration.session_id in wanted:
            return True, (
                f"session {registration.session_id} is registered as running by pid {registration.pid} "
                f"({registration.registry_file})"
            )
    current_time = time.time() if now is None else now
    if quiet_period > 0:
        try:
            modified = fs.stat(path).st_mtime_ns / 1e9
        except OSError as exc:
            return True, f"cannot read its modification time ({exc}), so it may be in use"
        age = current_time - modified
        if age < quiet_period:
            return True, (
                f"it was modified {max(age, 0.0):.0f}s ago, within the quiet period of {quiet_period:g}s"
            )
        return False, f"no running session registered and last modified {age:.0f}s ago"
    return False, "no running session registered (quiet period disabled)"
