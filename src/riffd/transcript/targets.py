"""From what a user types to transcript files: a transcript file, a session id or a unique prefix
of one, `latest`, or a project path (found by Claude Code's naming rule,
`riffd.claude_code.projects`), with the subagent files of a session."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from riffd.claude_code.folders import is_transcript_name
from riffd.claude_code.projects import (
    SESSION_ID,
    find_project_folders,
    project_folder_name,
    spellings,
)
from riffd.claude_code.walk import iter_transcripts
from riffd.paths import is_inside
from riffd.transcript.reader import iter_lines, parse_line
from riffd.transcript.sessions import (
    ID_PREFIX,
    by_prefix,
    last_activity,
    project_folders,
    session_files,
    session_key,
)

SESSION_ID_LINES = 20  # how many lines of a 2.0.x agent file are read to find its sessionId


def session_id_of_file(path: Path) -> str | None:
    """Return the `sessionId` written in the first lines of a transcript, None when none says it."""
    for number, _offset, raw, _terminated in iter_lines(path):
        record = parse_line(raw)
        if isinstance(record, dict) and isinstance(record.get("sessionId"), str):
            return str(record["sessionId"])
        if number >= SESSION_ID_LINES:
            break
    return None


def agent_files_of(session_path: Path, session_id: str | None = None) -> list[Path]:
    """Given a session transcript, return its subagent transcripts in both file layouts, sorted.

    2.1.x: `<project>/<session>/subagents/agent-<id>.jsonl`. 2.0.x: `agent-<id>.jsonl` beside the
    session, whose lines name the session in `sessionId` (only their first lines are read). Inline
    sidechains (1.0.x) live in the session file itself and are not files.
    """
    session_id = session_id or session_path.stem
    subagents = session_path.parent / session_path.stem / "subagents"
    files = sorted(subagents.glob("agent-*.jsonl")) if subagents.is_dir() else []
    for beside in sorted(session_path.parent.glob("agent-*.jsonl")):
        if beside != session_path and beside.is_file():
            try:
                if session_id_of_file(beside) == session_id:
                    files.append(beside)
            except OSError:
                continue  # an unreadable neighbour is not this session's agent
    return files


def _once(paths: list[Path]) -> list[Path]:
    """`paths` without a second name of one file (two symlinked project folders, or a link and its
    target), the real path kept before a link's."""
    seen: set[tuple[int, int]] = set()
    kept: set[Path] = set()
    for path in sorted(paths, key=lambda path: path.parent.is_symlink()):
        status = path.stat()
        if (status.st_dev, status.st_ino) not in seen:
            seen.add((status.st_dev, status.st_ino))
            kept.add(path)
    return [path for path in paths if path in kept]


def _is_agent_file(path: Path) -> bool:
    return path.name.startswith("agent-")


def resolve_target(
    text: str, roots: Sequence[Path], *, subagents: bool = True, riffd: str = "riffd"
) -> list[Path]:
    """Given what a user typed and the transcript roots, return the transcripts it names.

    A file: that file. A session id (UUID), or a prefix of one that only one session has:
    `<root>/<project>/<id>.jsonl` under any root, plus its subagent files when `subagents` (a prefix
    several sessions have raises AmbiguousSession, listing them). `latest`: the newest session of
    the project in the current folder. A folder under a root: the transcripts in it. Any other path:
    a project's working directory (it need not exist any more), giving the transcripts of its Claude
    Code folder(s); without `subagents`, only the session files. Raise FileNotFoundError saying what
    was tried when nothing matches (and the command that lists the sessions, starting with
    `riffd`: riffd.display.riffd_invocation).
    """
    path = Path(text).expanduser()
    if path.is_file():
        return [path]
    root_list = ", ".join(str(root) for root in roots) or "(no roots)"
    if text == "latest" and not path.exists():
        sessions = session_files(find_project_folders(Path.cwd(), roots))
        if not sessions:
            raise FileNotFoundError(
                f"latest: no session of the project {Path.cwd()} (the current folder) under "
                f"{root_list}; run it in a project's folder, or name a session by its id "
                f"(`{riffd} sessions` lists them)"
            )
        newest = max(sessions, key=last_activity)  # its last record, not a repair's mtime
        return [newest, *agent_files_of(newest, newest.stem)] if subagents else [newest]
    typed_id = ID_PREFIX.fullmatch(text) is not None and not path.exists()
    if typed_id:
        text = session_key(text)  # ids are lower case; a user may type them in either
    if typed_id and not SESSION_ID.fullmatch(text):
        matches = by_prefix(text, session_files(project_folders(roots)))
        if matches:
            return [
                file
                for session in matches
                for file in [session, *(agent_files_of(session, session.stem) if subagents else [])]
            ]
    if SESSION_ID.fullmatch(text) and not path.is_dir():
        sessions = _once(
            sorted(
                {found for root in roots if root.is_dir() for found in root.glob(f"*/{text}.jsonl")}
            )
        )
        if not sessions:
            raise FileNotFoundError(
                f"no session {text}: looked for <project folder>/{text}.jsonl under {root_list}"
            )
        if not subagents:
            return sessions
        return [file for session in sessions for file in [session, *agent_files_of(session, text)]]
    if path.is_dir() and any(is_inside(path, root) for root in roots):
        files = list(iter_transcripts([path]))
        return files if subagents else [file for file in files if not _is_agent_file(file)]
    folders = find_project_folders(path, roots)
    if not folders:
        tried = ", ".join(
            dict.fromkeys(project_folder_name(spelling) for spelling in spellings(path))
        )
        what = "no such file, and no" if not path.exists() else "not a transcript file, and no"
        if typed_id:
            what = f"no session starts with {text} under {root_list}, and no"
        raise FileNotFoundError(
            f"{text}: {what} Claude Code project folder for it: looked for {tried} in {root_list} "
            "(a project folder is the project path with every character outside A-Z, a-z, 0-9 replaced by '-'); "
            "a session id is a UUID"
        )
    if subagents:
        return list(iter_transcripts(folders))
    return sorted(
        file
        for folder in folders
        for file in folder.glob("*.jsonl")
        if file.is_file() and is_transcript_name(file.name) and not _is_agent_file(file)
    )
