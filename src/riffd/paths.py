"""riffd's own folders: its state folder and backup folder (from platformdirs, with the
environment's overrides), and whether one path lies inside another. Claude Code's folders are
`riffd.claude_code.folders`; how a path is shown and keyed is `riffd.display`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "riffd"


def state_dir(environ: dict[str, str] | None = None) -> Path:
    """Return riffd's state folder: $RIFFD_STATE_DIR, else the platform's user state dir
    ($XDG_STATE_HOME/riffd when set, on Linux), both read from `environ` (default: the process
    environment)."""
    env = os.environ if environ is None else environ
    configured = env.get("RIFFD_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    xdg = env.get("XDG_STATE_HOME", "").strip()
    # as platformdirs reads it, but from `environ`
    if xdg and sys.platform not in (
        "win32",
        "darwin",
    ):
        return Path(xdg).expanduser() / APP_NAME
    return Path(platformdirs.user_state_dir(APP_NAME))


def default_backup_dir(environ: dict[str, str] | None = None) -> Path:
    """Return where backups go by default: <state dir>/backups."""
    return state_dir(environ) / "backups"


def is_inside(path: Path, folder: Path) -> bool:
    """Return True when `path` is `folder` or lies below it (after resolving both)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
