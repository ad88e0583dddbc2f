"""Claude Code's registry of running processes: `<config dir>/sessions/<pid>.json`, one small JSON
object per running `claude` process (`pid`, `sessionId`, `cwd`, `startedAt` in ms), written at start
and removed at exit.

Standard library only, and none of its modules that are slow to import (`json`, `dataclasses`,
`pathlib`: JSON through riffd.quickjson): the SessionStart hook reads it inside Claude Code's
start-up, where every millisecond shows.
"""

from __future__ import annotations

import os

from riffd.quickjson import loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike

# A registry entry is a few hundred bytes; anything far larger is not one.
ENTRY_LIMIT = 1 << 20


class Registration:
    """One running Claude Code process as its registry file describes it: its `session_id` and
    `pid`, the `registry_file`, the `cwd` and when it started (`started_at`, Unix seconds), when the
    entry says."""

    __slots__ = ("cwd", "pid", "registry_file", "session_id", "started_at")

    def __init__(
        self,
        session_id: str,
        pid: int,
        registry_file: str | PathLike[str],
        cwd: str | None = None,
        started_at: float | None = None,
    ) -> None:
        self.session_id, self.pid, self.registry_file = session_id, pid, registry_file
        self.cwd, self.started_at = cwd, started_at

    def _fields(self) -> tuple[object, ...]:
        return (self.session_id, self.pid, self.registry_file, self.cwd, self.started_at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registration) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Registration(session_id={self.session_id!r}, pid={self.pid!r}, registry_file="
            f"{self.registry_file!r}, cwd={self.cwd!r}, started_at={self.started_at!r})"
        )


def clean_path(path: str) -> str:
    """`path` as `str(pathlib.PurePosixPath(path))` spells it: no empty or `.` parts, `..` kept."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    rooted = "/" if path.startswith("/") else ""
    return rooted + "/".join(parts) if parts or rooted else "."


def file_stem(path: str | PathLike[str]) -> str:
    """The last part of `path` without its suffix, as `pathlib.Path(path).stem` gives it."""
    name = clean_path(os.fspath(path)).rsplit("/", 1)[-1]
    name = "" if name in (".", "/") else name
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name


def parse_registration(registry_file: str | PathLike[str], raw: bytes) -> Registration | None:
    """Given a registry file's name and bytes, return its entry, or None when it is not one (the pid
    may come from the file name when the entry leaves it out)."""
    try:
        entry = loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict):
        return None
    session_id, pid = entry.get("sessionId"), entry.get("pid")
    stem = file_stem(registry_file)
    if pid is None and stem.isdigit():
        pid = int(stem)
    if (
        not isinstance(session_id, str)
        or not session_id
        or not isinstance(pid, int)
        or isinstance(pid, bool)
    ):
        return None
    cwd = entry.get("cwd") if isinstance(entry.get("cwd"), str) else None
    started = entry.get("startedAt")
    started_at = (
        started / 1000
        if isinstance(started, int | float) and not isinstance(started, bool)
        else None
    )
    return Registration(session_id, pid, registry_file, cwd, started_at)
