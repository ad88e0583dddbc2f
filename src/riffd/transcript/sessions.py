"""What a session is, in a line: its id, project, title (a title Claude Code gave it, else its first
prompt) and dates, read from the first lines of its transcript; and finding a session by what a user
types (an id prefix, `latest`)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from riffd.claude_code.folders import claude_config_dir
from riffd.claude_code.projects import named_session
from riffd.display import shell_command, shell_word
from riffd.transcript.reader import parse_line

HEAD_LINES = 400  # the title and project are near the start; the rest of the file is not read
TITLE_CHARS = 80
# What a user may type for a session: any prefix of its id, in either case (ids are lower case:
# `session_key` gives the form to look up).
ID_PREFIX = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{0,35}")
TAIL_CHUNK = 65536  # the last record's time is read backwards from the end, this much at a time
TAIL_LIMIT = 4 << 20  # ... up to this much: a file whose last 4 MiB hold no time shows its mtime
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_WRAPPERS = re.compile(r"<(command-name|command-message|local-command-stdout|system-reminder)>")


@dataclass
class SessionInfo:
    """One session as `riffd sessions` lists it."""

    session_id: str
    project: str | None = None
    title: str | None = None
    first_ts: float | None = None
    last_ts: float | None = None


def resume_id(path: str | os.PathLike[str], session_id: str | None) -> str | None:
    """The id `claude --resume` takes for the session of the transcript at `path`, None when there
    is none. The client (2.1.332) finds a session by its transcript's file name (`<id>.jsonl`), not
    by the `sessionId` its lines carry (they differ in a renamed file: the client then says "No
    conversation found" for the lines' id), and refuses a prefix or a name that is not a UUID. A
    subagent's transcript resumes with its session's: the folder it is under (2.1.x), or the
    `sessionId` its lines carry (2.0.x `agent-<id>.jsonl`, named by no session)."""
    path = Path(path)
    found = named_session(path) or (session_id if path.name.startswith("agent-") else None)
    return found if found is not None and _UUID.fullmatch(found) else None


def claude_resume(path: str | os.PathLike[str], session_id: str | None) -> str | None:
    """The `claude --resume <id>` that resumes the session of the transcript at `path` (None: no id
    the client takes: see resume_id). When the transcript lies in another Claude Code folder than
    the one this process sees (`CLAUDE_CONFIG_DIR`, else ~/.claude), the client is told it: it
    looks for the session only in its own folder's projects."""
    resume = resume_id(path, session_id)
    if resume is None:
        return None
    command = shell_command("claude", "--resume", resume)
    folder = claude_folder_of(main_transcript(path, session_id))
    # (resolved: ~/.claude may be a link to the folder the roots name, which is then the same)
    if folder is not None and os.path.realpath(folder) != os.path.realpath(claude_config_dir()):
        command = f"CLAUDE_CONFIG_DIR={shell_word(os.path.abspath(folder))} {command}"
    return command


def claude_folder_of(main: Path) -> Path | None:
    """The Claude Code folder a main transcript lies in (`<folder>/projects/<project>/<id>.jsonl`),
    or None when it lies elsewhere."""
    projects = main.parent.parent
    return projects.parent if projects.name == "projects" else None


def go_back_command(
    path: str | os.PathLike[str],
    session_id: str | None,
    project: str | None,
    *,
    exists: bool | None = None,
    riffd: str = "riffd",
) -> str | None:
    """The shell command that goes back to the session of the transcript at `path` now: `claude
    --resume` (claude_resume; None when there is none) in its project, after `riffd archive
    restore` (`riffd`: the shell words that run this riffd on the same state, as
    riffd.display.riffd_invocation gives them) when the session's main
    transcript is gone (`exists`: whether it is there, else looked at; the client finds no
    conversation without it): of the whole session id (a prefix another archived session shares
    would restore neither), or of the archived path when its lines name none.

    After the restore, the resume runs when the main transcript is there (`test -e`), not on the
    restore's exit status: a restore exits 1 when another file of the session differs and is left
    as it is (a subagent's transcript that went on), though the session is back; and it leaves the
    main transcript out when the session could not come back whole."""
    resume = claude_resume(path, session_id)
    if resume is None:
        return None
    if project:
        resume = f"{shell_command('cd', project)} && {resume}"
    main = main_transcript(path, session_id)
    if exists if exists is not None else main.exists():
        return resume
    restore = f"{riffd} {shell_command('archive', 'restore', session_id or os.fspath(path))}"
    if not main.is_absolute():  # (where it goes back to is not known: the restore's status says)
        return f"{restore} && {resume}"
    return f"{restore}; {shell_command('test', '-e', main)} && {resume}"


def main_transcript(path: str | os.PathLike[str], session_id: str | None) -> Path:
    """The main transcript of the session of the transcript at `path` (itself unless it is a
    subagent's: `<session>/subagents/agent-*.jsonl` beside `<session>.jsonl`, or 2.0.x's
    `agent-*.jsonl`, beside the `<sessionId>.jsonl` its lines name)."""
    path = Path(path)
    if path.parent.name == "subagents":
        folder = path.parent.parent
        return folder.parent / f"{folder.name}.jsonl"
    if path.name.startswith("agent-") and session_id:
        return path.with_name(f"{session_id}.jsonl")
    return path


def describe_lines(lines: Iterable[bytes], fallback_id: str) -> SessionInfo:
    """Given a transcript's first lines, return what they say of the session."""
    info = SessionInfo(fallback_id)
    prompt = named = None
    for count, raw in enumerate(lines):
        if count >= HEAD_LINES:
            break
        obj = parse_line(raw.rstrip(b"\r\n"))
        if not isinstance(obj, dict):
            continue
        if info.project is None and isinstance(obj.get("cwd"), str):
            info.project = obj["cwd"]
        if isinstance(obj.get("sessionId"), str) and info.session_id == fallback_id:
            info.session_id = obj["sessionId"]
        stamp = _epoch(obj.get("timestamp"))
        if stamp is not None:
            info.first_ts = info.first_ts if info.first_ts is not None else stamp
            info.last_ts = stamp
        kind = obj.get("type")
        for key in ("customTitle", "aiTitle", "title", "summary"):
            if (
                kind in ("custom-title", "ai-title", "summary")
                and isinstance(obj.get(key), str)
                and obj[key].strip()
            ):
                named = obj[key]
        if (
            prompt is None
            and kind == "user"
            and not obj.get("isMeta")
            and not obj.get("isSidechain")
        ):
            prompt = prompt_text(obj.get("message"))
    title = named or prompt
    info.title = shorten(title) if title else None
    return info


def session_key(text: str) -> str:
    """What a user typed for a session id (or a prefix of one), in the form ids have: lower case."""
    return text.lower() if ID_PREFIX.fullmatch(text) else text


def describe_file(path: Path) -> SessionInfo:
    """Read the first lines of the transcript at `path` and return what they say, with the time of
    its last record as the last date (`last_activity`)."""
    lines: list[bytes] = []
    with open(path, "rb") as handle:
        for raw in handle:
            lines.append(raw)
            if len(lines) >= HEAD_LINES:
                break
    info = describe_lines(lines, path.stem)
    info.session_id = named_session(path) or info.session_id  # (the name, as the client goes by it)
    info.last_ts = last_activity(path)
    return info


def last_activity(path: Path) -> float:
    """The time of the last record of the transcript at `path` that has one (read backwards from its
    end); its mtime when none has (or it cannot be read). A repair or a restore changes the mtime,
    not this."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            tail = b""
            position = end
            while position > 0 and end - position < TAIL_LIMIT:
                step = min(TAIL_CHUNK, position)
                position -= step
                handle.seek(position)
                tail = handle.read(step) + tail
                lines = tail.split(b"\n")
                complete = lines if position == 0 else lines[1:]  # the first may be cut
                for raw in reversed(complete):
                    stamp = _line_time(raw)
                    if stamp is not None:
                        return stamp
                tail = lines[0] if position > 0 else b""
    except OSError:
        pass
    try:
        return path.stat().st_mtime
    except OSError:  # gone meanwhile
        return 0.0


def _line_time(raw: bytes) -> float | None:
    if b'"timestamp"' not in raw:
        return None
    obj = parse_line(raw.rstrip(b"\r"))
    return _epoch(obj.get("timestamp")) if isinstance(obj, dict) else None


def prompt_text(message: Any) -> str | None:
    """The text a user typed in a message (not a command wrapper or a system reminder), or None."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    texts = (
        [content]
        if isinstance(content, str)
        else [
            block.get("text")
            for block in content or []
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        if isinstance(content, list)
        else []
    )
    for text in texts:
        if isinstance(text, str) and text.strip() and not _WRAPPERS.search(text):
            return text
    return None


def shorten(text: str) -> str:
    """`text` on one line, cut to TITLE_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= TITLE_CHARS else flat[: TITLE_CHARS - 1] + "…"


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def local_time(seconds: float | None) -> str:
    """A moment as riffd prints it everywhere: local time with its offset, to the minute."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="minutes")


def session_files(
    folders: Iterable[Path], on_error: Callable[[OSError], None] | None = None
) -> list[Path]:
    """The session transcripts (not subagents') directly in the project folders `folders`; a folder
    that cannot be listed goes to `on_error`."""
    found = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError as exc:
            if on_error is not None:
                on_error(exc)
            continue
        found += [
            folder / name
            for name in names
            if name.endswith(".jsonl")
            and not name.startswith(("agent-", "."))
            and (folder / name).is_file()
        ]
    return sorted(found)


def project_folders(
    roots: Iterable[Path], on_error: Callable[[OSError], None] | None = None
) -> list[Path]:
    """Every project folder under the transcript roots, symlinked ones too, each real folder once
    (by device and inode; by its real path when it also has one there). A link that cannot be
    followed (to nothing, say), and a root that exists but cannot be listed, go to `on_error` as an
    OSError naming it."""
    found: list[tuple[Path, bool, tuple[int, int]]] = []
    for root in roots:
        try:
            names = sorted(os.listdir(root))
        except FileNotFoundError:
            continue  # a root that is not there (yet): no sessions, nothing wrong
        except OSError as exc:
            if on_error is not None:
                on_error(exc)
            continue
        for name in names:
            path = root / name
            try:
                status = os.stat(path)
            except OSError as exc:
                if on_error is not None and os.path.islink(path):
                    on_error(
                        OSError(
                            exc.errno,
                            f"a symlink to {os.readlink(path)} that cannot be followed "
                            f"({exc.strerror})",
                            str(path),
                        )
                    )
                continue
            if stat.S_ISDIR(status.st_mode):
                found.append((path, os.path.islink(path), (status.st_dev, status.st_ino)))
    seen: set[tuple[int, int]] = set()
    kept: set[Path] = set()
    # real folders before links (stable)
    for path, _is_link, key in sorted(found, key=lambda item: item[1]):
        if key not in seen:
            seen.add(key)
            kept.add(path)
    return [path for path, _is_link, _key in found if path in kept]


class AmbiguousSession(FileNotFoundError):
    """An id prefix that more than one session starts with; the message lists them."""


def by_prefix(prefix: str, files: Iterable[Path]) -> list[Path]:
    """The session files whose id starts with `prefix`; raise AmbiguousSession when they are several
    sessions."""
    matches = [path for path in files if path.stem.startswith(prefix)]
    if len({path.stem for path in matches}) > 1:
        listed = "; ".join(
            f"{path.stem} ({path.parent.name}, {local_time(last_activity(path))})"
            for path in sorted(matches, key=lambda item: item.stem)[:10]
        )
        raise AmbiguousSession(
            f"{prefix}: {len(matches)} sessions start with it: {listed}; type more of the id"
        )
    return matches
