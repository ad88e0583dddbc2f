"""What the archive holds of each session, and whether it is whole: what `riffd sessions` says.

Per session: its transcript, its subagents' transcripts, and its files kept whole by kind (saved
tool outputs, subagents' settings, checkpoints, task files, plans, other files). Whole:
- a session still on disk is whole when the archive holds every file of it as it is now: each
  transcript up to its size, each file kept whole as its newest version (one stat per file, no
  reads);
- a deleted session is whole when the archive holds its transcript and every saved output its
  transcripts name (`<project>/<session>/tool-results/<name>` in a `<persisted-output>` text), which
  the archived lines are read for: a session forked from another (`claude --resume A
  --fork-session`) names A's saved outputs, in A's folder.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riffd.claude_code.projects import SESSION_ID
from riffd.claude_code.session_files import (
    FILE_HISTORY,
    PLAN,
    SESSION_OTHER,
    SUBAGENT_META,
    TASKS,
    TODOS,
    TOOL_RESULT,
    file_state,
    plan_files,
    session_config,
    session_files,
)

# What `riffd sessions --json` calls each kind
HOLDS = {
    TOOL_RESULT: "saved_outputs",
    SUBAGENT_META: "subagent_settings",
    FILE_HISTORY: "checkpoints",
    TASKS: "task_files",
    PLAN: "plans",
    TODOS: "todo_files",
    SESSION_OTHER: "other_files",
}


@dataclass
class Holdings:
    """What one archive holds, read once for a listing of sessions."""

    sizes: dict[str, int]  # archived path -> bytes held (transcripts)
    subagents: dict[str, int]  # session -> its subagents' transcripts archived
    kinds: dict[str, dict[str, int]]  # session -> kind -> files kept whole
    # path -> (size, mtime_ns, kept mode) of its newest version
    whole_files: dict[str, tuple[int, int, int]]
    slugs: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, archive: Any) -> Holdings:
        """Read what the open `riffd.archive.store.Archive` holds."""
        subagents: dict[str, int] = {}
        for _file_id, path, session in archive.all_files():
            if session and _is_subagent(path):
                subagents[session] = subagents.get(session, 0) + 1
        return cls(
            archive.archived_bytes(),
            subagents,
            archive.versions.counts(),
            archive.versions.held(),
            archive.versions.all_slugs(),
        )

    def holds(self, session_id: str, transcript: bool) -> dict[str, Any]:
        """What the archive holds of a session, by kind (`transcript`: its main transcript is
        archived)."""
        kinds = self.kinds.get(session_id, {})
        return {
            "transcript": transcript,
            "subagents": self.subagents.get(session_id, 0),
            **{name: kinds.get(kind, 0) for kind, name in HOLDS.items()},
        }

    def whole_on_disk(
        self, session_id: str, main: Path, roots: list[Path], configs: list[Path]
    ) -> bool:
        """Whether the archive holds every file of a session on disk as it is now."""
        transcripts = [main, *sorted((main.parent / session_id / "subagents").glob("*.jsonl"))]
        for path in transcripts:
            try:
                if self.sizes.get(str(path)) != path.stat().st_size:
                    return False
            except OSError:
                continue
        found = list(session_files(session_id, [main.parent], roots, configs, lambda _exc: None))
        own = session_config(main)  # its plans are in its own config folder
        found += plan_files(self.slugs.get(session_id, []), [own] if own else configs)
        for item in found:
            try:
                status = os.lstat(item.path)
            except OSError:
                continue
            if self.whole_files.get(str(item.path)) != file_state(status):
                return False
        return True


def whole_when_deleted(archive: Any, session_id: str, holdings: Holdings) -> bool:
    """Whether the archive holds a deleted session's transcript and every saved output its
    transcripts name, whatever session's folder it is in (its archived lines read; only lines that
    name a saved output are searched)."""
    files = archive.files_of(session_id)
    if not any(not _is_subagent(path) for _file_id, path, _session in files):
        return False
    held = {tail for path in holdings.whole_files if (tail := output_tail(path)) is not None}
    return named_outputs(archive, [file_id for file_id, _path, _session in files]).keys() <= held


# A saved output's path in a transcript's line: `.../<project>/<session>/tool-results/<name>`
NAMED_OUTPUT = re.compile(
    rb"/([^/\\\"\s]+)/("
    + SESSION_ID.pattern.encode()
    + rb")/tool-results/([A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*)"
)


def named_outputs(archive: Any, file_ids: list[int]) -> dict[str, str]:
    """The saved outputs the archived lines of these transcripts name, by the end of their path
    (`<project>/<session>/tool-results/<name>`, as `output_tail` gives it), each with the session
    whose folder holds it. Raise PackDamaged when the lines cannot be read."""
    found: dict[str, str] = {}
    for file_id in file_ids:
        # (it holds the archive's lock while open)
        with contextlib.closing(archive.iter_file(file_id)) as lines:
            for line in lines:
                if b"/tool-results/" in line:
                    for project, session, name in NAMED_OUTPUT.findall(line):
                        tail = b"/".join((project, session, b"tool-results", name))
                        found[tail.decode("utf-8", "surrogateescape")] = session.decode()
    return found


def output_tail(path: str) -> str | None:
    """The end of a saved output's path that a transcript's line names it by:
    `<project>/<session>/tool-results/<name>`; None for a path not in a `tool-results` folder."""
    parts = path.split(os.sep)
    at = next(
        (
            index
            for index in range(2, len(parts) - 1)
            if parts[index] == "tool-results" and SESSION_ID.fullmatch(parts[index - 1])
        ),
        None,
    )
    return None if at is None else "/".join(parts[at - 2 :])


def _is_subagent(path: str) -> bool:
    return f"{os.sep}subagents{os.sep}" in path or Path(path).name.startswith("agent-")
