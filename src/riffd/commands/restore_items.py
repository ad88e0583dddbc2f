"""What `riffd archive restore` writes, and where: the files of a session (or one transcript) from
the archive, in the order they go back, each with the folder below which nothing is a symlink.

A session is its transcripts (archived by lines), every file of it kept whole (each as its newest
version), the saved outputs its transcripts name in another session's folder (a session forked with
`claude --resume A --fork-session` names A's, which the client reads from A's folder), and the plans
its lines name that are in its own config folder (the folder above the root its transcript is in:
another config folder's plan of the same name is another session's).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from riffd.archive.holdings import named_outputs, output_tail
from riffd.archive.packs import PackDamaged
from riffd.claude_code.session_files import (
    CONFIG_FOLDERS,
    IN_SESSION_FOLDER,
    PLAN,
    TASKS,
    TODOS,
    TOOL_RESULT,
    session_config,
)
from riffd.transcript.sessions import ID_PREFIX, AmbiguousSession, session_key


@dataclass(frozen=True)
class Item:
    """One file to put back: where it was, its session, how to read it, its time and mode, and what
    it is; `part_of`: the session restored it belongs to (a saved output of another session's folder
    that the transcripts name too); `base`: the folder below which every folder on its way must be a
    real one (with `project_link`, but for the project folder right below it: riffd.repair.folders).
    """

    path: str
    session_id: str | None
    chunks: Callable[[], Iterable[bytes]]
    mtime_ns: int | None
    mode: int | None  # None: a transcript (archived by lines)
    sha256: bytes | None = None
    size: int | None = None
    part_of: str | None = None
    base: Path | None = None
    project_link: bool = False
    kind: str | None = None  # what a file kept whole is (riffd.claude_code.session_files)


def restore_items(archive: Any, target: str, roots: Iterable[Path]) -> tuple[list[Item], list[str]]:
    """The files `target` names (see the module), files kept whole first, then subagents'
    transcripts, the main transcripts last; and the saved outputs the transcripts name that the
    archive does not hold and that are not on disk (their paths' ends). `roots`: the configured roots, below which a
    transcript's project folder may be a link. Raise AmbiguousSession for a prefix of several
    sessions' ids."""
    target = session_key(target)
    files = archive.files_of(target)
    path_like = os.sep in target or target.endswith(".jsonl")
    sessions = [] if path_like else sorted({session for _id, _path, session in files if session})
    if not files and not path_like:
        sessions = (
            archive.versions.sessions_with_files(target) if ID_PREFIX.fullmatch(target) else []
        )
        sessions = [session for session in sessions if session == target] or sessions
        if len(sessions) > 1:
            raise AmbiguousSession(
                f"{target}: {len(sessions)} archived sessions start with it: "
                f"{'; '.join(sessions[:10])}; type more of the id"
            )
    transcripts = []
    for file_id, path, session in files:
        root = _root_of(Path(path), list(roots))
        transcripts.append(
            Item(
                path,
                session,
                functools.partial(archive.iter_file, file_id),
                archive.restore_time(file_id),
                None,
                part_of=session,
                base=root or Path(path).parent,
                project_link=root is not None,
            )
        )
    transcripts.sort(key=lambda item: (os.sep + "subagents" + os.sep) not in item.path)
    items: list[Item] = []
    missing: list[str] = []
    for session in sessions:
        own = [file_id for file_id, _path, owner in files if owner == session]
        versions, missed = _session_versions(archive, session, own, files)
        items += [_whole_item(archive, version, session) for version in versions]
        homes = {
            item.base
            for item in transcripts
            if item.part_of == session and item.project_link and item.base is not None
        }
        missing += [
            tail for tail in missed if not any(os.path.lexists(home / tail) for home in homes)
        ]
    return items + transcripts, missing


def _session_versions(
    archive: Any, session: str, own: list[int], files: list[tuple[int, str, str | None]]
) -> tuple[list[Any], list[str]]:
    """The newest version of each file of `session` kept whole (its plans: those of its own config
    folder) with the saved outputs of other sessions' folders its transcripts (`own`) name; and the
    named ones the archive does not hold."""
    versions = archive.versions.session_versions(session)
    configs = {
        config
        for _id, path, owner in files
        if owner == session and (config := session_config(Path(path)))
    } | {
        Path(version.base)
        for version in versions
        if version.kind in IN_SESSION_FOLDER and Path(version.relative).parts[0] == "projects"
    }
    versions = [
        version
        for version in versions
        if version.kind != PLAN or not configs or Path(version.base) in configs
    ]
    held = {tail for version in versions if (tail := output_tail(str(version.path)))}
    try:
        named = named_outputs(archive, own)
    except PackDamaged:  # (the transcript then fails to restore, and says why)
        named = {}
    missing, outputs = [], {}  # (the saved outputs of each other session named, read once)
    for tail, owner in sorted(named.items()):
        if tail in held:
            continue
        if owner not in outputs:
            outputs[owner] = [
                version
                for version in archive.versions.session_versions(owner)
                if version.kind == TOOL_RESULT
            ]
        found = [version for version in outputs[owner] if output_tail(str(version.path)) == tail]
        if found:
            versions += found
            held.add(tail)
        else:
            missing.append(tail)
    return versions, missing


def _whole_item(archive: Any, version: Any, session: str) -> Item:
    """A file kept whole to put back as part of `session`."""
    relative = Path(version.relative)
    in_root = version.kind in IN_SESSION_FOLDER
    return Item(
        str(version.path),
        version.session_id or session,
        functools.partial(archive.versions.content, version),
        version.mtime_ns,
        version.mode,
        version.sha256,
        version.size,
        part_of=session,
        base=Path(version.base) / relative.parts[0] if in_root else Path(version.base),
        project_link=in_root,
        kind=version.kind,
    )


def _root_of(transcript: Path, roots: list[Path]) -> Path | None:
    """The root a transcript was archived under: a configured one it is below, else the folder its
    path shows as one (`<root>/<project>/<id>.jsonl`, `<root>/<project>/<id>/subagents/...`, the
    root named `projects`); None for a file archived from elsewhere."""
    for root in roots:
        if transcript.is_relative_to(root) and len(transcript.relative_to(root).parts) > 1:
            return root
    if session_config(transcript) is None:
        return None
    return transcript.parents[3] if transcript.parent.name == "subagents" else transcript.parents[1]


def restore_targets(
    items: list[Item], to: Path | None
) -> tuple[list[tuple[Item, Path]], Path | None]:
    """Where each item is restored: its own place; with `to`, that file (one item, `to` not a
    folder), or each under its path below the folder they all share (returned second, else None),
    so no file is written over another and a session keeps its tree (one item: `to`/its name). An
    item written under `to` has `to` as its base (nothing below it may be a link)."""
    if to is None:
        return [(item, Path(item.path)) for item in items], None
    if len(items) == 1 and not to.is_dir():
        return [(replace(items[0], base=to.parent, project_link=False), to)], None
    shared = Path(os.path.commonpath([os.path.dirname(item.path) for item in items]))
    return [
        (replace(item, base=to, project_link=False), to / os.path.relpath(item.path, shared))
        for item in items
    ], shared


DAY_NS = 86400 * 10**9
# What Claude Code's cleanup deletes by the file's own age, not with its session (shared/
# transcript-format.md, section 1): a saved output even while its session is kept and resumed
OWN_AGE = (TOOL_RESULT, TASKS, PLAN, TODOS)


def renew_times(items: list[Item], claude_dir: Path | None) -> tuple[list[Item], dict[str, int]]:
    """Return `items` with the time of now for each file the client's cleanup deletes by its own
    age (`OWN_AGE`) whose archived time is older than `cleanupPeriodDays` (of its config folder)
    less a day: restored with it, the client's next start would delete it again even once its
    session is resumed. A transcript and what goes with it keep their time (by which `claude
    --continue` and the resume list order sessions). Also the paths so renewed, each with its own
    time."""
    from riffd.claude_code.settings import CLEANUP_DEFAULT_DAYS, cleanup_period_days

    now = time.time_ns()
    days: dict[Path | None, float] = {}
    renewed: list[Item] = []
    own: dict[str, int] = {}
    for item in items:
        if item.kind in OWN_AGE and item.mtime_ns is not None:
            folder = _config_folder(Path(item.path)) or claude_dir
            if folder not in days:
                days[folder] = cleanup_period_days(folder) if folder else CLEANUP_DEFAULT_DAYS
            if item.mtime_ns < now - max(days[folder] - 1, 0) * DAY_NS:
                own[item.path] = item.mtime_ns
                item = replace(item, mtime_ns=now)
        renewed.append(item)
    return renewed, own


def _config_folder(path: Path) -> Path | None:
    """The Claude Code config folder a session's file is in: above `projects/` for a transcript or
    a file of a session's folder, above `file-history/`, `tasks/`, `plans/` or `todos/` else."""
    for parent in path.parents:
        if parent.name == "projects":
            return parent.parent
    for parent in path.parents:
        if parent.name in CONFIG_FOLDERS:
            return parent.parent
    return None
