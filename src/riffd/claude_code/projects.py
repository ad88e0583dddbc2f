"""Claude Code's project-folder naming rule: every character of the working folder outside
[A-Za-z0-9] becomes `-` (UTF-16 code units; names over 200 characters cut and hashed), so a
project's folder is found from its own path (shared/transcript-format.md, section 1).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

MAX_FOLDER_NAME = 200  # longer names are cut to this and get `-<hash>` appended


SESSION_ID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _sanitized(path: str) -> str:
    """Every UTF-16 code unit outside [A-Za-z0-9] becomes `-`, without cutting the result."""
    return "".join(
        char if char.isascii() and char.isalnum() else ("--" if ord(char) > 0xFFFF else "-")
        for char in path
    )


def project_folder_name(path: str) -> str:
    """Given a project's working directory, return the name of its Claude Code folder (for a name
    over 200 characters, the 200-character prefix: the folder on disk has `-<hash>` appended to
    it)."""
    return _sanitized(path)[:MAX_FOLDER_NAME]


def folder_matches(folder_name: str, project_path: str) -> bool:
    """Return True when `folder_name` is the Claude Code folder of `project_path` (long names by
    prefix)."""
    full = _sanitized(project_path)
    if len(full) <= MAX_FOLDER_NAME:
        return folder_name == full
    return folder_name.startswith(full[:MAX_FOLDER_NAME] + "-")


def spellings(project_path: str | os.PathLike[str]) -> list[str]:
    """The absolute forms of a project path Claude Code may have recorded: as given, and symlinks
    resolved (Claude Code names the folder after its process's working directory, which the OS
    reports resolved)."""
    given = os.path.abspath(os.path.expanduser(os.fspath(project_path)))
    resolved = os.path.realpath(given)
    return [given] if resolved == given else [given, resolved]


def find_project_folders(project_path: str | os.PathLike[str], roots: Iterable[Path]) -> list[Path]:
    """Given a project's working directory and the transcript roots, return its Claude Code folders
    that exist (usually one; a long name matched by prefix, or a symlinked path, may give more),
    sorted, no repeats."""
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        for spelling in spellings(project_path):
            full = _sanitized(spelling)
            if len(full) <= MAX_FOLDER_NAME:
                candidates = [root / full]
            else:
                prefix = full[:MAX_FOLDER_NAME] + "-"
                candidates = sorted(
                    entry for entry in root.iterdir() if entry.name.startswith(prefix)
                )
            found.extend(
                candidate
                for candidate in candidates
                if candidate.is_dir() and candidate not in found
            )
    return sorted(found)


def named_session(path: str | os.PathLike[str]) -> str | None:
    """The session a transcript's path names, None when only its lines can say: a main transcript's
    file name (`<id>.jsonl`: `claude --resume` finds a session so, whatever `sessionId` its lines
    carry; a file continued from another keeps that one's id in its copied lines), a 2.1.x
    subagent's folder (`<id>/subagents/agent-*.jsonl`); a 2.0.x `agent-<id>.jsonl` names none."""
    path = Path(path)
    if path.parent.name == "subagents":
        found = path.parent.parent.name
    elif path.name.startswith("agent-"):
        return None
    else:
        found = path.name.removesuffix(".jsonl")
    return found if SESSION_ID.fullmatch(found) else None
