"""Where things are: Claude Code's folders, riffd's own state, and which files are transcripts; and how riffd names a
path to a person (a file name that is not UTF-8 included) and in a command it advises."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import platformdirs

from riffd.fsio import REAL_FS, FileSystem, retrying_call

APP_NAME = "riffd"

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


def state_dir(environ: dict[str, str] | None = None) -> Path:
    """Return riffd's state folder: $RIFFD_STATE_DIR, else the platform's user state dir ($XDG_STATE_HOME/riffd when
    set, on Linux), both read from `environ` (default: the process environment)."""
    env = os.environ if environ is None else environ
    configured = env.get("RIFFD_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    xdg = env.get("XDG_STATE_HOME", "").strip()
    if xdg and sys.platform not in ("win32", "darwin"):  # as platformdirs reads it, but from `environ`
        return Path(xdg).expanduser() / APP_NAME
    return Path(platformdirs.user_state_dir(APP_NAME))


def default_backup_dir(environ: dict[str, str] | None = None) -> Path:
    """Return where backups go by default: <state dir>/backups."""
    return state_dir(environ) / "backups"


def is_transcript_name(name: str) -> bool:
    """Return True when a file name is a session or subagent transcript riffd may read."""
    return name.endswith(".jsonl") and not name.startswith(".") and name not in NEVER_TOUCH_FILES


def iter_transcripts(paths: Iterable[Path], on_error: Callable[[OSError], None] | None = None, *,
                     fs: FileSystem = REAL_FS) -> Iterator[Path]:
    """Yield the transcript files named by `paths` (files as given; folders walked, sorted, no symlinked
    folders followed, never-touch folders skipped). Raise FileNotFoundError for a path that does not exist. A folder
    that cannot be listed is never taken for an empty one: its OSError (with the folder as `filename`) goes to
    `on_error`, or is raised when there is none; a folder deleted meanwhile holds nothing."""
    for path in paths:
        try:
            # Through the seam, EIO retried: a status that cannot be read is an error, never "no such file".
            mode = retrying_call(lambda path=path: fs.stat(path), what=f"the status of {path}").st_mode  # type: ignore[misc]
            if stat.S_ISLNK(mode):
                mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file or folder") from None
        except OSError as exc:
            if exc.filename is None:
                exc.filename = str(path)
            if on_error is None:
                raise
            on_error(exc)
            continue
        if stat.S_ISREG(mode):
            yield path
            continue
        if not stat.S_ISDIR(mode):
            raise FileNotFoundError(f"{path}: neither a file nor a folder")
        yield from _walk(path, on_error, fs)


def _walk(folder: Path, on_error: Callable[[OSError], None] | None, fs: FileSystem) -> Iterator[Path]:
    try:
        entries = sorted(retrying_call(lambda: fs.entries(folder), what=f"the listing of {folder}"))
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(folder)
        if on_error is None:
            raise
        on_error(exc)
        return
    for name, is_folder in entries:
        if not is_folder and is_transcript_name(name):
            yield folder / name
    for name, is_folder in entries:
        if is_folder and name not in NEVER_TOUCH_DIRS and not name.startswith("."):
            yield from _walk(folder / name, on_error, fs)


def session_id_for(path: Path) -> str:
    """Return the session a transcript belongs to: the folder name for `<session>/subagents/agent-*.jsonl`,
    else the file's stem."""
    if path.parent.name == "subagents":
        return path.parent.parent.name
    return path.stem


def is_inside(path: Path, folder: Path) -> bool:
    """Return True when `path` is `folder` or lies below it (after resolving both)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def shell_word(text: str | os.PathLike[str]) -> str:
    """Return `text` as one word a POSIX shell reads back as it is: shlex.quote's form; a name with bytes that are not
    UTF-8 (held as surrogate escapes) in bash's and zsh's $'...', its bytes as \\xNN, so the command names the real
    file."""
    import shlex  # advice only: most commands never print one

    text = os.fspath(text)
    if not any("\udc80" <= char <= "\udcff" for char in text):
        return shlex.quote(text)
    escaped = []
    for char in text:
        if "\udc80" <= char <= "\udcff":
            escaped.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif char in "\\'":
            escaped.append("\\" + char)
        elif char < " " or char == "\x7f":
            escaped.append(f"\\x{ord(char):02x}")
        else:
            escaped.append(char)
    return "$'" + "".join(escaped) + "'"


def shell_command(*words: str | os.PathLike[str]) -> str:
    """Return a command riffd advises, every word quoted by `shell_word`: what a user copies runs as meant, whatever a
    session id or a path holds."""
    return " ".join(map(shell_word, words))
