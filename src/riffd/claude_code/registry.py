"""Claude Code's registry of running processes: `<config dir>/sessions/<pid>.json`, one small JSON
object per running `claude` process (`pid`, `sessionId`, `cwd`, `startedAt` in ms), written at start
and removed at exit.

Standard library only: the SessionStart hook reads it inside Claude Code's start-up, where every
millisecond shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# A registry entry is a few hundred bytes; anything far larger is not one.
ENTRY_LIMIT = 1 << 20


@dataclass(frozen=True)
class Registration:
    """One running Claude Code process as its registry file describes it."""

    session_id: str
    pid: int
    registry_file: Path
    cwd: str | None = None
    started_at: float | None = None  # Unix seconds


def parse_registration(registry_file: Path, raw: bytes) -> Registration | None:
    """Given a registry file's name and bytes, return its entry, or None when it is not one (the pid
    may come from the file name when the entry leaves it out)."""
    try:
        entry = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict):
        return None
    session_id, pid = entry.get("sessionId"), entry.get("pid")
    if pid is None and registry_file.stem.isdigit():
        pid = int(registry_file.stem)
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
