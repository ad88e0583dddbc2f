"""Claude Code's settings as riffd reads them: where the user's and a project's `settings.json`
are (and a project's settings.local.json), and `cleanupPeriodDays`, after which Claude Code deletes a session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from riffd.fsio import REAL_FILES


def user_settings_path(environ: dict[str, str] | None = None) -> Path:
    """Claude Code's user settings: $CLAUDE_CONFIG_DIR/settings.json, else
    ~/.claude/settings.json."""
    env = os.environ if environ is None else environ
    return (
        Path(env.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser() / "settings.json"
    )


def project_settings_path(project: Path) -> Path:
    """A project's shared settings (teams commit it): <project>/.claude/settings.json."""
    return project.expanduser().absolute() / ".claude" / "settings.json"


def project_local_settings_path(project: Path) -> Path:
    """A project's settings for this machine only (Claude Code keeps it out of git):
    <project>/.claude/settings.local.json."""
    return project.expanduser().absolute() / ".claude" / "settings.local.json"


# Claude Code deletes transcripts not modified for this long (cleanupPeriodDays)
CLEANUP_DEFAULT_DAYS = 30


def cleanup_period_days(claude_dir: Path) -> float:
    """Claude Code's `cleanupPeriodDays` in the user settings of `claude_dir` (30 when unset or
    unreadable)."""
    try:
        raw = REAL_FILES.read_file(claude_dir / "settings.json")  # (a FIFO is not waited on)
        value = json.loads(raw).get("cleanupPeriodDays")
    except (OSError, ValueError, AttributeError):
        return CLEANUP_DEFAULT_DAYS
    return (
        float(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        else (CLEANUP_DEFAULT_DAYS)
    )
