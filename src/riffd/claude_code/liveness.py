"""Is a session live? Claude Code's own registry of running processes, then the file's mtime.

A transcript may only be rewritten while no Claude Code process is using it (see
shared/transcript-format.md, section 4). Two signals, either one is enough to call it live: a
`<claude dir>/sessions/<pid>.json` entry of a running process that is not proven to be another
session's, and a modification time inside the quiet period (older releases did not register
themselves, and a session resumed by a tool we do not know about only shows up as recent writes).

The registry is read failing closed: an entry whose process runs (its pid from the JSON, a number or
a string of digits, or from the file name) counts for this transcript when it names this session
(`names_session`: its id in any spelling that keeps the session's 32 hex digits), when it cannot be
read whole (empty, cut short, over 1 MiB, not JSON, no sessionId, its sessionId, pid or cwd given
twice: then it counts for every session of its folder), and when it names another session in this
transcript's project (`may_write`). An entry of a process that is gone counts for nothing, so a crashed client's
leftovers block nothing.

Each Claude Code config folder has its own `projects/` and its own `sessions/`
(shared/filesystems.md), so the registry is read in every folder riffd knows of (`claude_dirs_for`):
the configured one, `$CLAUDE_CONFIG_DIR` (else ~/.claude), the folder above every root that has a
`sessions/`, and the one above the `projects/` that holds the transcript.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from riffd.claude_code.folders import claude_config_dir, session_id_for
from riffd.claude_code.projects import find_project_folders, folder_matches, spellings
from riffd.claude_code.registry import (
    ENTRY_LIMIT,
    Registration,
    entry_fields,
    is_entry_name,
    names_session,
    pid_running,
    pids_named,
    registration_from,
)
from riffd.claude_code.written import WrittenIn, written_in
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS

log = logging.getLogger(__name__)


def look_again_after(quiet_period: float) -> float:
    """Seconds after which a session that may be live now is looked at again (the daemon's worker,
    and what its report says of it): half the quiet period, a second at least."""
    return max(quiet_period / 2, 1.0)


def pid_is_alive(pid: int) -> bool:
    """Given a process id, return True when a process with it exists (EPERM counts as alive; an
    unexpected error of the probe too, logged: riffd.claude_code.registry.pid_running)."""
    if sys.platform == "win32" and pid > 0:
        # os.kill(pid, 0) sends CTRL_C_EVENT on Windows; without a safe probe, assume alive.
        return True
    return pid_running(pid, _unsure)


def _unsure(pid: int, exc: OSError) -> None:
    log.warning("cannot tell whether pid %d is running (%s); treating it as running", pid, exc)


def _retrying(fs: FileSystem) -> RetryingFS:
    """`fs` with its retry policy: itself when it has one, else a seam with the default policy."""
    return fs if isinstance(fs, RetryingFS) else RetryingFS(fs)


class EntryUnreadable(Exception):
    """A registry entry that cannot be read whole as one (empty, cut short, too large, not a regular
    file)."""


def _read_entry(path: Path, fs: RetryingFS) -> bytes:
    """The bytes of one registry entry, through a symlink too (O_NONBLOCK: a link to a FIFO never
    blocks); raise EntryUnreadable for one that is not a regular file or is over ENTRY_LIMIT,
    OSError when it cannot be read."""
    fd = fs.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(fs.fstat(fd).st_mode):
            raise EntryUnreadable("not a regular file")
        chunks: list[bytes] = []
        offset = 0
        while offset <= ENTRY_LIMIT:
            chunk = fs.pread(fd, 65536, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        if offset > ENTRY_LIMIT:
            raise EntryUnreadable(f"over {ENTRY_LIMIT // 2**20} MiB")
        return b"".join(chunks)
    finally:
        fs.close(fd)


@dataclass(frozen=True)
class RunningEntry:
    """A registry entry that names a running process: its pid (from the JSON, else the file name
    `<pid>.json`) and what it says, or None with `trouble` when it cannot be read whole (then it may
    be any session's)."""

    registry_file: Path
    pid: int
    registration: Registration | None
    trouble: str = ""


def _registration(
    registry_file: Path, fields: dict[str, list[object]] | None, pid: int
) -> Registration | None:
    """The entry read whole, with the running `pid` (that of its JSON or of its name), or None."""
    registration = registration_from(registry_file, fields)
    if registration is None:
        return None
    return (
        registration
        if registration.pid == pid
        else Registration(
            registration.session_id, pid, registry_file, registration.cwd, registration.started_at
        )
    )


def running_entries(claude_dir: Path, fs: FileSystem = REAL_FILES) -> list[RunningEntry]:
    """Given Claude Code's config folder, return its registry entries (`sessions/<pid>.json`) whose
    process is running, each read whole or not (an empty, cut, oversized or unreadable entry of a
    running pid is kept, with why: fail closed); an entry of a process that is gone is left out.
    Raise OSError when the registry exists but cannot be listed: a session may then be running
    unseen. Reads retry EIO per `fs`'s policy (a seam gets the default one)."""
    fs = _retrying(fs)
    registry = claude_dir / "sessions"
    try:
        names = sorted(fs.listdir(registry))
    except (FileNotFoundError, NotADirectoryError):
        return []
    running: list[RunningEntry] = []
    for name in names:
        if not is_entry_name(name):
            continue
        registry_file = registry / name
        raw: bytes | None = None
        trouble = ""
        try:
            raw = _read_entry(registry_file, fs)
        except FileNotFoundError:
            if not os.path.lexists(registry_file):
                continue  # removed since the listing: its process has exited
            trouble = "a symlink to nothing"
        except EntryUnreadable as exc:
            trouble = str(exc)
        except OSError as exc:
            trouble = f"cannot be read ({exc.strerror or exc})"
        fields = entry_fields(raw) if raw is not None else None
        alive = [pid for pid in pids_named(registry_file, fields) if pid_is_alive(pid)]
        if not alive:
            continue
        registration = _registration(registry_file, fields, alive[0])
        if registration is None:
            trouble = trouble or (
                "empty"
                if not raw
                else "not a whole entry with a sessionId (cut short, or being written)"
                if fields is None
                else "not an entry as Claude Code writes one (no sessionId, or its sessionId, pid "
                "or cwd given twice)"
            )
            log.debug(
                "session registry entry %s names running pid %d but %s",
                registry_file,
                alive[0],
                trouble,
            )
        running.append(RunningEntry(registry_file, alive[0], registration, trouble))
    return running


def project_folder_of(path: Path) -> Path:
    """Given a transcript, return the project folder that holds it
    (`<project>/<session>/subagents/agent-*.jsonl` belongs to `<project>`)."""
    if path.parent.name == "subagents":
        return path.parent.parent.parent
    return path.parent


def may_write(
    registration: Registration, claude_dir: Path, path: Path, written: WrittenIn | None
) -> str | None:
    """Given a running process's complete registry entry (in `claude_dir`) naming another session,
    return None only when it is proven not to write the transcript `path` (its `cwd` names a
    project whose Claude Code folder is not the one holding `path`), else why it may, in words
    ("in CWD, the project of this transcript").

    Why that is the proof: Claude Code writes a session's lines into the project folder named after
    the working directory it started in (riffd.transcript.targets), under a session id that can
    change while the process runs (/clear, a fork, a resume start a new one, and the registry entry
    may keep the old id), so the id alone proves nothing; the project does, and a resume of another
    project's session is refused ("This conversation is from a different directory. To resume, run:
    cd ...", anthropics/claude-code#74953). Claude Code keeps no transcript open between writes, so
    /proc/<pid>/fd proves nothing either. The folders are compared by name (both spellings of `cwd`,
    long names by prefix) and by device and inode (a symlinked `projects/` or project folder), at a
    few stats per entry. The folder's name does not always follow `cwd` (a session resumed through a
    symlinked path keeps the folder of that path while the registry has the path resolved;
    CLAUDE_CODE_PROJECT_DIR_NAME names it freely), so the `cwd` the transcript's last lines were
    written in is compared too (`written`: `written_in(path)`, None when it could not be read). No
    `cwd`: nothing is proven."""
    cwd = registration.cwd
    if cwd is None or not cwd.strip():
        return "and names no working folder"
    if not _nameable(cwd):
        return f"and names a working folder no file system can name ({cwd!r})"
    if not os.path.isabs(cwd.strip()):
        return f"and names a working folder that is not a full path ({cwd!r})"
    # as written, and without blanks around it (either may be the project's)
    variants = list(dict.fromkeys([cwd, cwd.strip()]))
    names = {spelling for variant in variants for spelling in spellings(variant)}
    project = project_folder_of(Path(os.path.abspath(path)))
    if any(folder_matches(project.name, spelling) for spelling in names):
        return f"in {cwd}, the project of this transcript"
    if written is None:
        return f"in {cwd}, and the end of this transcript, which says its project, cannot be read"
    if names & {
        spelling for line in written.cwds if _nameable(line) for spelling in spellings(line)
    }:
        return f"in {cwd}, where this transcript's last lines were written"
    try:
        held = os.stat(project)
    except OSError:
        return f"in {cwd}, and this transcript's folder cannot be looked at to tell"
    for folder in (
        found
        for variant in variants
        for found in find_project_folders(variant, [claude_dir / "projects"])
    ):
        try:
            if os.path.samestat(os.stat(folder), held):
                return f"in {cwd}, the project of this transcript (its folder by another path)"
        except OSError:
            return f"in {cwd}, and its folder {folder} cannot be looked at to tell"
    return None


def _nameable(path: str) -> bool:
    """Whether `path` can name a file (no NUL byte, no lone surrogate): one that cannot, written
    in a registry entry or a transcript, made the folder lookups raise."""
    try:
        return b"\0" not in os.fsencode(path)
    except UnicodeError:
        return False


def claude_dirs_for(
    path: Path, claude_dir: Path | None = None, roots: Sequence[Path] = ()
) -> tuple[Path, ...]:
    """Given a transcript, the configured Claude Code folder and the watched roots, return every
    Claude Code config folder whose `sessions/` registry may name its session: `claude_dir`,
    $CLAUDE_CONFIG_DIR (else ~/.claude), the folder above each root that has a `sessions/` folder,
    and the folder above the `projects/` holding `path`: each root and `path` as given and with
    their symlinks resolved."""
    candidates: list[Path] = [] if claude_dir is None else [claude_dir]
    candidates.append(claude_config_dir())
    # each root as given and with its links resolved (a root that links to a Claude folder's
    # projects/), and the same for the transcript's own path (a link to a project folder)
    for root in roots:
        for spelling in dict.fromkeys((root, Path(os.path.realpath(root)))):
            if (spelling.parent / "sessions").is_dir():
                candidates.append(spelling.parent)
    for written in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        for ancestor in Path(written).parents:
            if ancestor.name == "projects":
                candidates.append(ancestor.parent)
                break
    unique: dict[str, Path] = {}
    for folder in candidates:
        unique.setdefault(os.path.abspath(folder), folder)
    return tuple(unique.values())


def same_session(session_id: str, wanted: Iterable[str]) -> bool:
    """Whether a registry entry's `session_id` names one of `wanted` (names_session)."""
    return any(names_session(session_id, other) for other in wanted)


def session_liveness(
    path: Path,
    claude_dirs: Path | Iterable[Path],
    quiet_period: float,
    now: float | None = None,
    *,
    session_id: str | None = None,
    fs: FileSystem = REAL_FILES,
) -> tuple[bool, str]:
    """Given a transcript and the Claude Code folders to look in (one, or `claude_dirs_for`), return
    (is_live, why): live (fail closed) when a running process has an entry in any of them that is
    not proven another session's: one naming its session (from the path, `session_id` when given,
    and the `sessionId` of its last lines: `written_in`), one that cannot be read whole, or one
    whose process may write it (`may_write`: same project); or when its mtime is within
    `quiet_period` seconds (0 turns that rule off); a file whose mtime cannot be read counts as
    live. An entry of a process that is gone counts for nothing. Reads retry EIO per `fs`'s policy
    (a seam gets the default one); when the transcript's last lines cannot be read, every client
    with a working folder may write it."""
    fs = _retrying(fs)
    wanted = {session_id_for(path)}
    if session_id:
        wanted.add(session_id)
    # the ids its lines were written under (a 2.0 subagent's agent-*.jsonl, a file named otherwise)
    written = written_in(path, fs)
    if written is not None:
        wanted |= written.session_ids
    folders = [claude_dirs] if isinstance(claude_dirs, Path) else list(claude_dirs)
    for folder in folders:
        try:
            entries = running_entries(folder, fs)
        except OSError as exc:  # if in doubt, the session may be live: leave it alone
            return (
                True,
                f"Claude Code's session registry {folder / 'sessions'} cannot be read ({exc})",
            )
        for entry in entries:
            registration = entry.registration
            if registration is None:
                return True, (
                    f"{entry.registry_file} names the running pid {entry.pid} but is {entry.trouble}, so "
                    f"it may be this session's (every session of {folder} waits while that process runs; "
                    "delete the entry if no Claude Code process uses it)"
                )
            if same_session(registration.session_id, wanted):
                return True, (
                    f"session {registration.session_id} is registered as running by pid "
                    f"{registration.pid} ({entry.registry_file})"
                )
            where = may_write(registration, folder, path, written)
            if where is not None:
                return True, (
                    f"pid {registration.pid} ({entry.registry_file}) runs session "
                    f"{registration.session_id} {where}: it may be writing it (Claude Code changes session "
                    "id on /clear, a fork or a resume)"
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
