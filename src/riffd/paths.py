"""Where things are: Claude Code's folders, riffd's own state, and which files are transcripts; and
how riffd writes a path down: for a person, in a command it advises, and as a key in its databases.

A file name on Linux is bytes. One that is not UTF-8 (the byte 0xff, say) reaches Python as a str
holding surrogate escapes (U+DCFF for 0xff), which names the file exactly but cannot be written as
UTF-8: SQLite text, JSON and the terminal refuse it. riffd reads and repairs such a file under its
real name, and writes the name down three ways:

- for a person (text and JSON output, the log): `display_path`, the undecodable bytes as `\\xff`
  (the standard streams do this for every text riffd prints: `use_display_streams`; JSON documents:
  `display_json`);
- in an advised command: `shell_word` (bash's `$'...\\xff...'`, which names the real file);
- as a key (SQLite, riffd's own JSON files): `path_key`, a reversible text form (`key_path` gives
  the name back), equal to the path itself for every name that is text, so existing keys stay as
  they are.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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
    """Return riffd's state folder: $RIFFD_STATE_DIR, else the platform's user state dir
    ($XDG_STATE_HOME/riffd when set, on Linux), both read from `environ` (default: the process
    environment)."""
    env = os.environ if environ is None else environ
    configured = env.get("RIFFD_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    xdg = env.get("XDG_STATE_HOME", "").strip()
    if xdg and sys.platform not in (
        "win32",
        "darwin",
    ):  # as platformdirs reads it, but from `environ`
        return Path(xdg).expanduser() / APP_NAME
    return Path(platformdirs.user_state_dir(APP_NAME))


def default_backup_dir(environ: dict[str, str] | None = None) -> Path:
    """Return where backups go by default: <state dir>/backups."""
    return state_dir(environ) / "backups"


def is_transcript_name(name: str) -> bool:
    """Return True when a file name is a session or subagent transcript riffd may read."""
    return name.endswith(".jsonl") and not name.startswith(".") and name not in NEVER_TOUCH_FILES


LinkHandler = Callable[[Path, Path], None]


def iter_transcripts(
    paths: Iterable[Path],
    on_error: Callable[[OSError], None] | None = None,
    *,
    fs: FileSystem = REAL_FS,
    on_link: LinkHandler | None = None,
    on_folder: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Yield the transcript files named by `paths`: files as given, folders walked
    (`TranscriptWalk`: symlinked folders followed, each real folder and file once, never-touch
    folders skipped). Raise FileNotFoundError for a path that does not exist. A folder that cannot
    be listed, or a link to nothing, is never taken for an empty one: its OSError (with it as
    `filename`) goes to `on_error`, or is raised when there is none; a folder deleted meanwhile
    holds nothing. `on_link(link, target)` hears of each symlinked folder followed, `on_folder` of
    each folder entered."""
    walk = TranscriptWalk(on_error, fs, on_link, on_folder)
    for path in paths:
        try:
            # Through the seam, EIO retried: a status that cannot be read is an error, never "no
            # such file".
            status = retrying_call(lambda path=path: fs.stat(path), what=f"the status of {path}")  # type: ignore[misc]
            if stat.S_ISLNK(status.st_mode):
                status = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file or folder") from None
        except OSError as exc:
            walk.failed(exc, path)
            continue
        if stat.S_ISREG(status.st_mode):
            if walk.first_visit(walk.files, status):
                yield path
            continue
        if not stat.S_ISDIR(status.st_mode):
            raise FileNotFoundError(f"{path}: neither a file nor a folder")
        yield from walk.folder(path, status)
    yield from walk.links()


class TranscriptWalk:
    """One walk over transcript folders, following symlinks inside them: the one way riffd lists
    transcripts.

    Real folders are walked first (sorted, depth first) and the symlinks met are followed
    afterwards, so a file reachable both ways is named by its real path. Every folder is entered
    once by device and inode, which stops a link back up the tree and a second link to one folder; a
    symlinked transcript is named only when the file it points to is not reached by the walk
    otherwise. Costs one stat per folder and per symlink, none per file.
    """

    def __init__(
        self,
        on_error: Callable[[OSError], None] | None,
        fs: FileSystem = REAL_FS,
        on_link: LinkHandler | None = None,
        on_folder: Callable[[Path], None] | None = None,
    ) -> None:
        self.on_error, self.fs, self.on_link, self.on_folder = on_error, fs, on_link, on_folder
        self.folders: set[tuple[int, int]] = set()  # (device, inode) of every folder entered
        self.files: set[tuple[int, int]] = (
            set()
        )  # of files named as given, and targets of linked transcripts
        self._folder_links: list[Path] = []
        self._file_links: list[Path] = []

    @staticmethod
    def first_visit(seen: set[tuple[int, int]], status: os.stat_result) -> bool:
        """Record `status`'s device and inode in `seen`; return False when it was there already."""
        key = (status.st_dev, status.st_ino)
        if key in seen:
            return False
        seen.add(key)
        return True

    def failed(self, exc: OSError, path: Path) -> None:
        """Hand an error about `path` to on_error, or raise it when there is none."""
        if exc.filename is None:
            exc.filename = str(path)
        if self.on_error is None:
            raise exc
        self.on_error(exc)

    def folder(self, folder: Path, status: os.stat_result | None = None) -> Iterator[Path]:
        """Yield the transcripts in `folder` and the real folders below it, once; remember the links
        met."""
        try:
            if status is None:
                status = retrying_call(lambda: self.fs.stat(folder), what=f"the status of {folder}")
            if not self.first_visit(self.folders, status):
                return
            entries = sorted(
                retrying_call(lambda: self.fs.entries(folder), what=f"the listing of {folder}")
            )
        except FileNotFoundError:
            return
        except OSError as exc:
            self.failed(exc, folder)
            return
        if self.on_folder is not None:
            self.on_folder(folder)
        for name, is_folder, is_link in entries:
            if is_link and not name.startswith(".") and name not in NEVER_TOUCH_DIRS:
                (self._file_links if is_transcript_name(name) else self._folder_links).append(
                    folder / name
                )
            elif not is_folder and is_transcript_name(name):
                yield folder / name
        for name, is_folder, is_link in entries:
            if (
                is_folder
                and not is_link
                and name not in NEVER_TOUCH_DIRS
                and not name.startswith(".")
            ):
                yield from self.folder(folder / name)

    def links(self) -> Iterator[Path]:
        """Follow the links met (folders first, then the folders met inside them, then linked
        transcripts)."""
        while self._folder_links:
            link = self._folder_links.pop(0)
            status = self._target(link)
            if status is None or not stat.S_ISDIR(status.st_mode):
                continue
            if (status.st_dev, status.st_ino) not in self.folders and self.on_link is not None:
                self.on_link(link, Path(os.path.realpath(link)))
            yield from self.folder(link, status)
        for link in self._file_links:
            status = self._target(link)
            if status is None or not stat.S_ISREG(status.st_mode) or self._walked(link):
                continue
            if self.first_visit(self.files, status):
                yield link

    def _target(self, link: Path) -> os.stat_result | None:
        """The status of what `link` points to; None (and on_error told) for a link to nothing or
        unreadable."""
        try:
            return retrying_call(lambda: os.stat(link), what=f"the status of {link}")
        except FileNotFoundError:
            if os.path.lexists(link):
                target = os.readlink(link)
                self.failed(
                    FileNotFoundError(
                        errno.ENOENT,
                        f"a symlink to {target}, which does not exist (a disk not mounted?)",
                        str(link),
                    ),
                    link,
                )
            return None
        except OSError as exc:
            self.failed(exc, link)
            return None

    def _walked(self, link: Path) -> bool:
        """Whether the transcript `link` points to was named already by its real path (its folder
        was walked)."""
        target = Path(os.path.realpath(link))
        try:
            folder = os.stat(target.parent)
        except OSError:
            return False
        return is_transcript_name(target.name) and (folder.st_dev, folder.st_ino) in self.folders


def session_id_for(path: Path) -> str:
    """Return the session a transcript belongs to: the folder name for
    `<session>/subagents/agent-*.jsonl`, else the file's stem; for a session's other files
    (riffd.transcript.sessionfiles: `<session>/tool-results/...`, `file-history/<session>/...`,
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


def is_inside(path: Path, folder: Path) -> bool:
    """Return True when `path` is `folder` or lies below it (after resolving both)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def shell_word(text: str | os.PathLike[str]) -> str:
    """Return `text` as one word a POSIX shell reads back as it is: shlex.quote's form; a name with
    bytes that are not UTF-8 (held as surrogate escapes) in bash's and zsh's $'...', its bytes as
    \\xNN, so the command names the real file."""
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
    """Return a command riffd advises, every word quoted by `shell_word`: what a user copies runs as
    meant, whatever a session id or a path holds."""
    return " ".join(map(shell_word, words))


DISPLAY_ERRORS = "riffd-display"  # the codec error handler that shows undecodable bytes as \xff
KEY_MARK = "\\bytes:"  # begins a key whose path is not all text; no absolute path does


def _display_replacement(error: UnicodeError) -> tuple[str, int]:
    """The codec error handler DISPLAY_ERRORS: a surrogate escape of a byte (U+DC80..U+DCFF) as
    `\\xNN`; any other character the encoding cannot hold as `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`
    (Python's backslashreplace)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    parts = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            parts.append(f"\\x{code - 0xDC00:02x}")
        else:
            parts.append(
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
    return "".join(parts), error.end


def _register_display_errors() -> None:
    import codecs

    try:
        codecs.lookup_error(DISPLAY_ERRORS)
    except LookupError:
        codecs.register_error(DISPLAY_ERRORS, _display_replacement)


def display_path(path: str | os.PathLike[str]) -> str:
    """Return a path (or any text) as riffd shows it to a person: itself when it is valid text, else
    with each byte that is not UTF-8 as `\\xNN` (and any other lone surrogate as `\\udNNN`)."""
    text = os.fspath(path)
    if text.isascii():
        return text
    _register_display_errors()
    return text.encode("utf-8", DISPLAY_ERRORS).decode("utf-8")


def use_display_streams() -> None:
    """Make stdout and stderr show what they cannot encode as display_path does, instead of raising:
    every path riffd prints or logs, whatever its bytes."""
    _register_display_errors()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=DISPLAY_ERRORS)
            except (
                ValueError,
                OSError,
            ):  # a stream that cannot change now (closed, or a test's capture)
                continue


def display_json(document: object, option: int | None = None) -> bytes:
    """Return `document` as JSON (orjson, with `option`); when a string in it cannot be UTF-8 (a
    path with bytes that are not), every such string as display_path shows it."""
    import orjson

    try:
        return orjson.dumps(document, option=option)
    except TypeError:
        return orjson.dumps(displayed(document), option=option)


def displayed(value: Any) -> Any:
    """Return `value` (JSON-like data) with every string in it, dict keys too, as display_path shows
    it."""
    if isinstance(value, str):
        return display_path(value)
    if isinstance(value, dict):
        return {displayed(key): displayed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [displayed(item) for item in value]
    return value


def path_key(path: str | os.PathLike[str]) -> str:
    """Return the text riffd keeps a path under (SQLite, its JSON files): the path itself when it is
    valid text (as nearly every path is); else KEY_MARK and the path with each undecodable byte as
    `\\xNN` and each backslash doubled. Text that begins with KEY_MARK is marked too, so that
    `key_path` gives back exactly what was given, whatever it was. Works on any text, not only paths
    (a message that names a path)."""
    text = os.fspath(path)
    if not text.startswith(KEY_MARK) and (
        text.isascii() or not any("\udc80" <= char <= "\udcff" for char in text)
    ):
        return text
    body = text.replace("\\", "\\\\")
    return KEY_MARK + "".join(
        f"\\x{ord(char) - 0xDC00:02x}" if "\udc80" <= char <= "\udcff" else char for char in body
    )


def key_path(key: str) -> str:
    """Return the path (or text) `path_key` made `key` from."""
    if not key.startswith(KEY_MARK):
        return key
    import re

    return re.sub(
        r"\\(\\|x([0-9a-f]{2}))",
        lambda found: "\\" if found.group(2) is None else chr(0xDC00 + int(found.group(2), 16)),
        key[len(KEY_MARK) :],
    )
