"""The files Claude Code keeps for a session besides its transcripts, which the archive keeps whole.

Measured with the real client (2.1.332; shared/transcript-format.md, section 1, and the README's
archive section):
- in the session's folder beside its transcript, `<project>/<session>/`:
  `subagents/agent-<id>.meta.json` (a subagent's type and settings), `tool-results/<short id>.txt`
  (the full output of a large tool call; a PDF's pages under a folder of their own: every file in
  `tool-results/` is a saved output, whatever its name) and whatever else the client puts there; the
  other `.jsonl` files in it are transcripts, archived line by line;
- in the config folder (`<X>` for a root `<X>/projects`, and the configured `claude_dir`):
  `file-history/<session>/` (the pre-edit copies `/rewind` uses), `tasks/<session>/` (the session's
  task list, read again on resume), `plans/<slug>.md` (a plan written in plan mode, named by the
  `slug` the session's lines carry) and, from releases before the task lists,
  `todos/<session>-agent-<id>.json`. A task list's `.highwatermark` (the highest task id it gave) is
  kept with it. Claude Code deletes each of these by age (the session folder and
  `file-history/<session>/` with the session, a saved output by its own age even while its session
  is resumed), so the archive is all there is of them afterwards. Dot files (locks, temp files) and
  the client's temp files (`<name>.tmp.<pid>.<ms>`, `<name>.tmp.<hex>`, `<name>.<16 hex>.tmp`) are
  not the session's.

Symlinks: a project folder that is a symlink is followed, as the transcript walk follows it (a
project on another disk); below it nothing is: a session's folder, its `tool-results/` or
`subagents/`, a file in them, and anything below a config folder (`file-history/<session>`,
`tasks/<session>`) that is a symlink is named (`on_link`) and left, so riffd never archives (nor
restores) files out of the sessions' own folders.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from riffd.claude_code.folders import is_transcript_name
from riffd.claude_code.projects import SESSION_ID

# Kinds, by where a file is: in the session folder, or in the config folder
SUBAGENT_META = "subagent-meta"
TOOL_RESULT = "tool-result"
SESSION_OTHER = "session-other"
FILE_HISTORY = "file-history"
TASKS = "tasks"
PLAN = "plan"
TODOS = "todos"
KINDS = (SUBAGENT_META, TOOL_RESULT, SESSION_OTHER, FILE_HISTORY, TASKS, PLAN, TODOS)
# The config folder's sub-folders these kinds live in
CONFIG_FOLDERS = ("file-history", "tasks", "plans", "todos")

# The client's temp names (2.1.x): `<name>.tmp.<pid>.<ms>` (its atomic writes), `<name>.tmp.<hex>`
# (`*.jsonl.compact.tmp.<hex>` of compaction), `<name>.<16 hex>.tmp`; `.<name>.tmp.<hex>` is a dot name
_TEMP = re.compile(r"\.tmp\.[0-9a-f]+(\.[0-9]+)?$|\.[0-9a-f]{16}\.tmp$")
# Kinds of files in a session's folder below a root (kept relative to the folder above the root)
IN_SESSION_FOLDER = (SUBAGENT_META, TOOL_RESULT, SESSION_OTHER)
HIGH_WATER_MARK = ".highwatermark"
_TODOS = re.compile(rf"^({SESSION_ID.pattern})-agent-.+\.json$")
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


@dataclass(frozen=True)
class SessionFile:
    """A file of a session kept whole: its path, its session (None for a plan, named by a slug), its
    kind, and the folder it is kept relative to (`base`: the config folder, the folder above a root)
    with its path below it."""

    path: Path
    session_id: str | None
    kind: str
    base: Path
    relative: str


def config_folders(roots: Iterable[Path], claude_dir: Path | None = None) -> list[Path]:
    """Given the transcript roots and the configured Claude Code folder, return the config folders
    whose `file-history/`, `tasks/`, `plans/` and `todos/` hold sessions' files: the folder above
    each root named `projects`, and `claude_dir`; each once."""
    found: dict[str, Path] = {}
    for folder in [root.parent for root in roots if root.name == "projects"] + (
        [claude_dir] if claude_dir else []
    ):
        found.setdefault(os.path.abspath(folder), Path(os.path.abspath(folder)))
    return list(found.values())


def kept_mode(mode: int) -> int:
    """The part of a file's mode the archive keeps and compares: its type and its owner's bits (0600
    when those are none). A restore writes these (private: riffd.repair.restore), so a file restored
    byte for byte reads as the version it came from."""
    return stat.S_IFMT(mode) | (stat.S_IMODE(mode) & 0o700 or 0o600)


def file_state(status: os.stat_result) -> tuple[int, int, int]:
    """A file's (size, modification time in ns, `kept_mode`), as the archive's newest version of it
    is compared: one stat, no read."""
    return status.st_size, status.st_mtime_ns, kept_mode(status.st_mode)


def session_config(transcript: Path) -> Path | None:
    """The config folder of the session whose transcript (main or subagent's) is `transcript`: the
    folder above its root when the root is named `projects` (the client writes its plans there);
    None when it is not."""
    depth = 3 if transcript.parent.name == "subagents" else 1
    if len(transcript.parents) <= depth + 1:
        return None
    root = transcript.parents[depth]
    return root.parent if root.name == "projects" else None


def linked_folder(found: SessionFile) -> Path | None:
    """The first folder between where `found` is kept from and the file that is a symlink riffd does
    not follow (see the module: below a root, any but the root and the project folder; below a
    config folder, any), or None."""
    current, parts = os.fspath(found.base), Path(found.relative).parts[:-1]
    followed = 2 if found.kind in IN_SESSION_FOLDER else 0
    for depth, part in enumerate(parts):
        current = os.path.join(current, part)  # (strings: a Path per part cost a keep 5%)
        if depth >= followed and os.path.islink(current):
            return Path(current)
    return None


def saved_output_folder(path: Path) -> Path | None:
    """The `<session>/tool-results` folder `path` is in (at any depth), or None: everything there is a
    saved tool output, never a transcript, whatever its name."""
    parts = path.parts
    for at in range(len(parts) - 2, 0, -1):
        if parts[at] == "tool-results" and SESSION_ID.fullmatch(parts[at - 1]):
            return Path(*parts[: at + 1])
    return None


def is_kept_name(name: str) -> bool:
    """Whether a file of this name in a session's folders is the session's (not a lock, a dot file
    or a temp; but a task list's `.highwatermark`, the highest task id it gave, which the client
    carries with its tasks)."""
    return (not name.startswith(".") or name == HIGH_WATER_MARK) and not _TEMP.search(name)


def classify(path: Path, roots: Iterable[Path], configs: Iterable[Path]) -> SessionFile | None:
    """Given a file's absolute path, the transcript roots and the config folders, return what
    session file it is, or None when it is none (a transcript, which is archived by lines, is
    none)."""
    name = path.name
    if not is_kept_name(name):
        return None
    for root in roots:
        parts = _below(path, root)
        if parts is None:
            continue
        # <project>/<session>/<...>/<name>: a file in a session's folder that is not a transcript
        # (in tool-results/, every file is a saved output: a `.jsonl` there is one too)
        if (
            len(parts) < 3
            or not SESSION_ID.fullmatch(parts[1])
            or (is_transcript_name(name) and parts[2] != "tool-results")
            or any(part.startswith(".") for part in parts[:-1])
        ):
            return None
        kind = (
            SUBAGENT_META
            if parts[2] == "subagents" and name.endswith(".meta.json") and len(parts) == 4
            else TOOL_RESULT
            if parts[2] == "tool-results"
            else SESSION_OTHER
        )
        return SessionFile(path, parts[1], kind, root.parent, "/".join([root.name, *parts]))
    for config in configs:
        parts = _below(path, config)
        if parts is None or len(parts) < 2 or any(part.startswith(".") for part in parts[:-1]):
            continue
        top, relative = parts[0], "/".join(parts)
        if top == "file-history" and len(parts) >= 3 and SESSION_ID.fullmatch(parts[1]):
            return SessionFile(path, parts[1], FILE_HISTORY, config, relative)
        if top == "tasks" and len(parts) == 3 and SESSION_ID.fullmatch(parts[1]):
            return SessionFile(path, parts[1], TASKS, config, relative)
        if (
            top == "plans"
            and len(parts) == 2
            and name.endswith(".md")
            and _SLUG.fullmatch(name[:-3])
        ):
            return SessionFile(path, None, PLAN, config, relative)
        todo = _TODOS.match(name) if top == "todos" and len(parts) == 2 else None
        if todo is not None:
            return SessionFile(path, todo.group(1), TODOS, config, relative)
    return None


def _below(path: Path, folder: Path) -> tuple[str, ...] | None:
    try:
        return path.relative_to(folder).parts
    except ValueError:
        return None


OnError = Callable[[OSError], None]
OnLink = Callable[[Path], None]


def iter_files_below(
    folder: Path, on_error: OnError | None = None, on_link: OnLink | None = None
) -> Iterator[Path]:
    """Yield every regular file below `folder` (dot folders skipped), sorted; symlinks are not
    followed, `folder` itself included: each goes to `on_link`. A folder that cannot be listed goes
    to `on_error` (never taken for an empty one), or is raised."""
    try:
        if _is_link(folder):
            if on_link is not None:
                on_link(folder)
            return
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(folder)
        if on_error is None:
            raise
        on_error(exc)
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                if on_link is not None:
                    on_link(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                if not entry.name.startswith("."):
                    yield from iter_files_below(Path(entry.path), on_error, on_link)
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path)
        except OSError as exc:
            if on_error is None:
                raise
            on_error(exc)


def session_files(
    session_id: str,
    folders: Iterable[Path],
    roots: Iterable[Path],
    configs: Iterable[Path],
    on_error: OnError | None = None,
    on_link: OnLink | None = None,
) -> Iterator[SessionFile]:
    """Yield the files of one session kept whole (plans aside: they are named by slug): those in its
    folder in each project folder of `folders`, and those in the config folders; symlinks below a
    project folder or a config folder go to `on_link`, not followed."""
    roots, configs = list(roots), list(configs)
    places = [folder / session_id for folder in folders]
    for config in configs:
        places += [
            config / top / session_id
            for top in ("file-history", "tasks")
            if not _linked_top(config / top, on_link)
        ]
    for place in places:
        for path in iter_files_below(place, on_error, on_link):
            found = classify(path, roots, configs)
            if found is not None and found.session_id == session_id:
                yield found
    for config in configs:
        for path in _listed(config / "todos", on_error, on_link):
            found = classify(path, roots, configs)
            if found is not None and found.session_id == session_id:
                yield found


def plan_files(slugs: Iterable[str], configs: Iterable[Path]) -> Iterator[SessionFile]:
    """Yield the plan files of these slugs that exist in the config folders (not through a
    symlink)."""
    configs = list(configs)
    for config in configs:
        for slug in slugs:
            path = config / "plans" / f"{slug}.md"
            if _SLUG.fullmatch(slug) and not _is_link(path.parent) and _is_file(path):
                found = classify(path, (), configs)
                if found is not None:
                    yield found


def all_session_files(
    roots: Iterable[Path],
    configs: Iterable[Path],
    on_error: OnError | None = None,
    on_link: OnLink | None = None,
) -> Iterator[SessionFile]:
    """Yield every file kept whole under the roots (in the session folders of each project folder)
    and in the config folders (plans too); one stat per folder and none per file beyond the
    listing. Project folders that are symlinks are followed; any other symlink met (a session's
    folder, a folder or file in one, `file-history/<session>`) goes to `on_link`, not followed."""
    roots, configs = list(roots), list(configs)
    for root in roots:
        for project in _folders(root, on_error, follow=True):
            for folder in _folders(project, on_error, on_link):
                if SESSION_ID.fullmatch(folder.name):
                    yield from _classified(
                        iter_files_below(folder, on_error, on_link), roots, configs
                    )
    for config in configs:
        for top in ("file-history", "tasks"):
            if _linked_top(config / top, on_link):
                continue
            for folder in _folders(config / top, on_error, on_link):
                yield from _classified(iter_files_below(folder, on_error, on_link), roots, configs)
        for top in ("plans", "todos"):
            yield from _classified(_listed(config / top, on_error, on_link), roots, configs)


def _classified(
    paths: Iterable[Path], roots: list[Path], configs: list[Path]
) -> Iterator[SessionFile]:
    for path in paths:
        found = classify(path, roots, configs)
        if found is not None:
            yield found


def _folders(
    folder: Path, on_error: OnError | None, on_link: OnLink | None = None, *, follow: bool = False
) -> list[Path]:
    """The folders directly in `folder`, not dot ones. With `follow` (project folders under a root),
    symlinks to folders too, as the transcript walk follows them; else a symlink named as a session
    goes to `on_link` and is left out."""
    try:
        found = []
        for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
            if entry.name.startswith("."):
                continue
            if not follow and entry.is_symlink():
                if on_link is not None and SESSION_ID.fullmatch(entry.name):
                    on_link(Path(entry.path))
            elif entry.is_dir():
                found.append(Path(entry.path))
        return found
    except OSError as exc:
        return _failed(folder, exc, on_error)


def _listed(folder: Path, on_error: OnError | None, on_link: OnLink | None = None) -> list[Path]:
    """The regular files directly in `folder` (a symlink, or `folder` as one, to `on_link`)."""
    if _linked_top(folder, on_link):
        return []
    try:
        found = []
        for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
            if entry.is_symlink():
                if on_link is not None:
                    on_link(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
        return found
    except OSError as exc:
        return _failed(folder, exc, on_error)


def _failed(folder: Path, exc: OSError, on_error: OnError | None) -> list[Path]:
    """What a listing of `folder` that failed with `exc` gives: nothing when the folder is gone;
    else the error (naming the folder) raised, or told to `on_error`."""
    if isinstance(exc, FileNotFoundError):
        return []
    if exc.filename is None:
        exc.filename = str(folder)
    if on_error is None:
        raise exc
    on_error(exc)
    return []


def _linked_top(folder: Path, on_link: OnLink | None) -> bool:
    """Whether a config folder's `file-history/`, `tasks/`, `plans/` or `todos/` is a symlink (then
    handed to `on_link`)."""
    if not _is_link(folder):
        return False
    if on_link is not None:
        on_link(folder)
    return True


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
