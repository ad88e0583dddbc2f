"""What the MCP tools stand on: riffd's configuration, its archive (opened read-only, once, and
again after an error) and finding a session by what the model typed (a full id, a unique prefix of
one, or `latest`), on disk or only in the archive.

Every failure a model can cause or meet (an unknown session, an ambiguous prefix, no archive, a busy
one, a bad argument) is a `ToolProblem` whose message is one sentence saying what to do.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riffd.archive.packs import PackDamaged
from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.claude_code.projects import SESSION_ID, find_project_folders
from riffd.config import Config
from riffd.database import DatabaseDamaged, is_busy_error
from riffd.transcript.sessions import (
    ID_PREFIX,
    go_back_command,
    last_activity,
    project_folders,
    session_files,
    session_key,
)

if TYPE_CHECKING:
    from riffd.archive.store import Archive

LATEST = "latest"


class ToolProblem(Exception):
    """A tool cannot answer; the message is one sentence for the model (the server keeps
    serving)."""


@dataclass(frozen=True)
class SessionRef:
    """A session found by what was typed: its id, its main transcript on disk (None: only the
    archive holds it) and whether the archive holds it."""

    session_id: str
    path: Path | None
    archived: bool
    archived_path: str | None = None  # where the archive says its main transcript was

    @property
    def deleted(self) -> bool:
        """Whether the transcript is gone from disk and only the archive has it."""
        return self.path is None


class Memory:
    """riffd's sessions and archive as the MCP tools see them: `config` says where they are."""

    def __init__(self, config: Config, cwd: Path | None = None, riffd: str = "riffd") -> None:
        self.config = config
        self.riffd = riffd  # the shell words that run riffd in the commands it advises
        self.cwd = cwd or Path.cwd()  # Claude Code starts the server in the project's folder
        self.archive_path = config.state_dir / ARCHIVE_NAME
        self._archive: Archive | None = None

    def archive(self) -> Archive:
        """The archive, opened read-only (once; again after `forget_archive`); raise ToolProblem
        when there is none or it cannot be opened."""
        if self._archive is not None:
            return self._archive
        from riffd.archive.store import Archive  # (late: the server starts without it)

        if not self.archive_path.exists():
            raise ToolProblem(
                f"There is no archive at {self.archive_path} yet: the riffd daemon (`{self.riffd} "
                f"run`) or `{self.riffd} archive ingest` makes it."
            )
        try:
            self._archive = Archive(self.archive_path, read_only=True, lock_timeout=5.0)
        except (ArchiveError, DatabaseDamaged, sqlite3.Error, OSError) as exc:
            raise archive_problem(self.archive_path, exc, self.riffd) from exc
        return self._archive

    def forget_archive(self) -> None:
        """Close the archive so the next call opens it again (after an error)."""
        if self._archive is not None:
            try:
                self._archive.close()
            finally:
                self._archive = None

    def close(self) -> None:
        """Close what is open."""
        self.forget_archive()

    def disk_sessions(self) -> list[Path]:
        """Every session transcript under the configured roots (subagents' aside)."""
        return session_files(project_folders(self.config.roots))

    def archived_sessions(self) -> list[dict[str, Any]]:
        """Every archived session file (riffd.archive.reading.ArchiveReader.sessions); [] without
        an archive."""
        if not self.archive_path.exists():
            return []
        return self.archive().sessions()

    def find(self, text: str) -> SessionRef:
        """The session `text` names: a full id, a prefix only one session's id has, or `latest`
        (the newest session of the project in the server's folder, else the newest of all); on
        disk first, else in the archive. Raise ToolProblem for none, or several."""
        text = session_key(text.strip())
        on_disk = self.disk_sessions()
        if text == LATEST:
            return self._latest(on_disk)
        if not ID_PREFIX.fullmatch(text):
            raise ToolProblem(
                f"{text!r} is not a session id: give a full id, a prefix of it (any length, "
                "either case), or `latest` (list_sessions lists them)."
            )
        trouble: ToolProblem | None = None
        try:
            archived = {
                item["session_id"]: item for item in self.archived_sessions() if item["session_id"]
            }
        except (ToolProblem, sqlite3.Error, PackDamaged) as exc:  # the sessions on disk still count
            self.forget_archive()
            trouble = (
                exc
                if isinstance(exc, ToolProblem)
                else archive_problem(self.archive_path, exc, self.riffd)
            )
            archived = {}
        paths: dict[str, Path] = {}
        for path in on_disk:
            paths.setdefault(path.stem, path)
        if SESSION_ID.fullmatch(text) and (text in paths or text in archived):
            return self._ref(text, paths, archived)
        matches = sorted({name for name in [*paths, *archived] if name.startswith(text)})
        if not matches and trouble is not None:
            raise trouble
        if not matches:
            raise ToolProblem(
                f"No session starts with {text!r}, on disk or in the archive (list_sessions lists "
                "them; list_sessions with deleted=true lists the deleted ones)."
            )
        if len(matches) > 1:
            raise ToolProblem(
                f"{len(matches)} sessions start with {text!r} ({', '.join(matches[:5])}"
                f"{', ...' if len(matches) > 5 else ''}): give more of the id."
            )
        return self._ref(matches[0], paths, archived)

    def _ref(
        self, session_id: str, paths: dict[str, Path], archived: dict[str, dict[str, Any]]
    ) -> SessionRef:
        item = archived.get(session_id)
        return SessionRef(
            session_id, paths.get(session_id), item is not None, item["path"] if item else None
        )

    def _latest(self, on_disk: list[Path]) -> SessionRef:
        here = session_files(find_project_folders(self.cwd, self.config.roots))
        pool = here or on_disk
        if not pool:
            raise ToolProblem(
                f"There is no session on disk under {', '.join(map(str, self.config.roots))}, so "
                "none is the latest; give a session id (list_sessions with deleted=true lists "
                "archived ones)."
            )
        newest = max(pool, key=last_activity)
        try:
            held = self.archive_path.exists() and bool(self.archive().files_of(newest.stem))
        except (ToolProblem, sqlite3.Error, PackDamaged):
            self.forget_archive()
            held = False
        return SessionRef(newest.stem, newest, held)


def archive_problem(path: Path, exc: BaseException, riffd: str = "riffd") -> ToolProblem:
    """The one sentence for an archive that cannot be read now: busy (try again) or damaged/other
    (what helps)."""
    if isinstance(exc, sqlite3.Error) and is_busy_error(exc):
        return ToolProblem(
            f"The archive at {path} is busy (another riffd process holds it); try again in a "
            "moment."
        )
    return ToolProblem(
        f"The archive at {path} cannot be read ({exc}); `{riffd} archive verify` says what is "
        "wrong and what helps."
    )


def resume_command(
    session_id: str | None,
    project: str | None,
    exists: bool | None,
    path: str | os.PathLike[str] | None,
    *,
    riffd: str = "riffd",
) -> str | None:
    """The shell command that goes back to a session (riffd.transcript.sessions.go_back_command;
    `exists` None: whether its main transcript is there is looked at; by `session_id` alone, as its
    transcript's name, when no transcript path is known)."""
    if path is None:
        assert session_id is not None
        path = f"{session_id}.jsonl"
    return go_back_command(path, session_id, project, exists=exists, riffd=riffd)


def transcript_exists(path: str) -> bool:
    """Whether an archived transcript's file is still on disk."""
    return os.path.exists(path)
