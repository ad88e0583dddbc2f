"""Claude Code's folders: its config folder and the transcript roots under it, which names are
transcripts, and a transcript's session id (shared/transcript-format.md, section 1).
"""

from __future__ import annotations

import os
from pathlib import Path

# Folders under a project that hold no transcripts (see shared/transcript-format.md, section 1).
NEVER_TOUCH_DIRS = frozenset({"tool-results", "memory", ".cache"})


NEVER_TOUCH_FILES = frozenset({"journal.jsonl"})


def claude_config_dir(environ: dict[str, str] | None = None) -> Path:
    """Return Claude Code's config folder: $CLAUDE_CONFIG_DIR, else ~/.claude."""
    env = os.environ if environ is None else environ
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".claude"


def default_roots(environ: dict[str, str] | None = None) -> list[Path]:
    """Return the transcript roots to watch by default: <claude config dir>/projects, plus
    ~/.config/claude/projects when that exists (some installs use it)."""
    roots = [claude_config_dir(environ) / "projects"]
    extra = Path.home() / ".config" / "claude" / "projects"
    if extra.is_dir() and extra not in roots:
        roots.append(extra)
    return roots


def is_transcript_name(name: str) -> bool:
    """Return True when a file name is a session or subagent transcript riffd may read."""
    return name.endswith(".jsonl") and not name.startswith(".") and name not in NEVER_TOUCH_FILES


def session_id_for(path: Path) -> str:
    """Return the session a transcript belongs to: the folder name for
    `<session>/subagents/agent-*.jsonl`, else the file's stem; for a session's other files
    (riffd.claude_code.session_files: `<session>/tool-results/...`, `file-history/<session>/...`,
    `todos/<session>-agent-...`), the session id its path holds."""
    if path.parent.name == "subagents" and path.suffix == ".jsonl":
        return path.parent.parent.name
    if path.suffix != ".jsonl":
        import re  # (only for the files beside transcripts)

        session = re.compile(
            "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        )
        for name in [folder.name for folder in path.parents] + [path.name]:
            if found := session.match(name):
                return found.group()
    return path.stem
