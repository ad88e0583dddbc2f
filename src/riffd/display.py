"""How riffd writes a path down: for a person, in a command it advises, and as a key in its
databases.

A file name on Linux is bytes. One that is not UTF-8 (the byte 0xff, say) reaches Python as a str
holding surrogate escapes (U+DCFF for 0xff), which names the file exactly but cannot be written as
UTF-8: SQLite text, JSON and the terminal refuse it. riffd reads and repairs such a file under its
real name, and writes the name down three ways:

- for a person (text and JSON output, the log): `display_path`, the undecodable bytes as `\\xff`
  (the standard streams do this for every text riffd prints: `use_display_streams`; JSON documents:
  `display_json`);
- in an advised command: `shell_word` (bash's `$'...\\xff...'`, which names the real file), after
  the words that run this riffd (`riffd_launcher`);
- as a key (SQLite, riffd's own JSON files): `path_key`, a reversible text form (`key_path` gives
  the name back), equal to the path itself for every name that is text, so existing keys stay as
  they are.
"""

from __future__ import annotations

import os
import sys
from typing import Any


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


def riffd_launcher(elsewhere: bool = False) -> tuple[str, ...]:
    """The words that run this riffd from anywhere, for a command riffd writes or advises: the
    absolute path of the `riffd` console script that runs now; else, run as `python -m riffd`, this
    Python (by its absolute path, a venv's too) with `-m riffd`; else the console script on PATH.
    `elsewhere`: for a command another program runs in a folder of its choosing (Claude Code runs a
    hook, and its MCP server, in the project's): `python -P -m riffd`, so that no `riffd.py` or
    `json.py` of that folder is imported in riffd's place (`-m` puts the folder first on the path)."""
    import shutil  # (not on the hooks' path)

    if os.path.basename(sys.argv[0]) == "riffd":
        return (os.path.abspath(sys.argv[0]),)
    on_path = shutil.which("riffd")
    if os.path.basename(sys.argv[0]) == "__main__.py" or on_path is None:
        return (os.path.abspath(sys.executable), *(["-P"] if elsewhere else []), "-m", "riffd")
    return (os.path.abspath(on_path),)


RIFFD_VARIABLES = ("RIFFD_CONFIG", "RIFFD_STATE_DIR")  # riffd's own variables


def riffd_variables() -> dict[str, str]:
    """riffd's own variables set here (RIFFD_VARIABLES), as absolute paths: for a process started
    with another environment (Claude Code's, the user's shell) to find the same configuration and
    state."""
    return {
        name: os.path.abspath(os.path.expanduser(os.environ[name]))
        for name in RIFFD_VARIABLES
        if os.environ.get(name, "").strip()
    }


def config_named(named: str | os.PathLike[str] | None) -> str | None:
    """The config file `named` (by `--config` or RIFFD_CONFIG) as a command riffd advises names it,
    `~` expanded as riffd reads it; None when none is named or it is not there (riffd then goes on
    with the defaults, and a command naming it would stop at it)."""
    if named is None or not str(named).strip():
        return None
    path = os.path.expanduser(str(named).strip())
    return path if os.path.exists(path) else None


def riffd_words(config: str | os.PathLike[str] | None, *, launcher: bool = False) -> list[str]:
    """The words that run this riffd on the configuration `config`: `riffd` (`launcher`:
    riffd_launcher's absolute words), with `--config` as an absolute path when one was given (a
    command advised may run in another folder, and a path starting with `-` would be taken for an
    option)."""
    words = list(riffd_launcher() if launcher else ("riffd",))
    return words + (["--config", os.path.abspath(config)] if config is not None else [])


def riffd_invocation(
    config: str | os.PathLike[str] | None, *, launcher: bool = False, variables: bool = False
) -> str:
    """riffd_words as the shell text a command riffd advises starts with, after riffd's own
    variables set now (`variables`: for a process whose environment the user's shell may not have,
    as the MCP server's)."""
    assignments = [
        f"{name}={shell_word(value)}"
        for name, value in (riffd_variables() if variables else {}).items()
        # (--config wins over RIFFD_CONFIG; one naming no file: riffd goes on with the defaults,
        # and a command given it would stop at it)
        if not (name == "RIFFD_CONFIG" and (config is not None or not os.path.exists(value)))
    ]
    return " ".join([*assignments, shell_command(*riffd_words(config, launcher=launcher))])


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
    if _is_real_stdout(sys.stdout):
        sys.stdout = _named_stdout(sys.stdout)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=DISPLAY_ERRORS)
            # a stream that cannot change now (closed, or a test's capture)
            except (
                ValueError,
                OSError,
            ):
                continue


STDOUT_NAME = "standard output"  # what an error writing there names, as a path is named


def _is_real_stdout(stream: Any) -> bool:
    """Whether `stream` is Python's own standard output on descriptor 1 (not a test's capture, and
    not closed)."""
    import io

    try:
        return (
            stream is sys.__stdout__
            and type(stream) is io.TextIOWrapper
            and type(stream.buffer) in (io.BufferedWriter, io.FileIO)  # (FileIO: python -u)
            and stream.fileno() == 1
        )
    except (AttributeError, ValueError, OSError):
        return False


def _named_stdout(stream: Any) -> Any:
    """`stream` (sys.stdout) again, whose errors of writing name it: `riffd show FILE >/dev/full`
    then says `standard output: No space left on device`, not only the error, which reads as if a
    file riffd wrote were at fault."""
    import io

    class NamedOutput(io.FileIO):
        def write(self, data: Any) -> int:
            try:
                return super().write(data)
            except OSError as exc:  # (EPIPE stays a BrokenPipeError)
                raise OSError(exc.errno, exc.strerror, STDOUT_NAME) from None

    stream.flush()
    raw = NamedOutput(1, "w", closefd=False)
    raw.name = stream.name  # ('<stdout>', as Python names its own)
    if type(stream.buffer) is io.FileIO:  # (python -u)
        buffer: Any = raw
    else:  # buffered by the block size, as Python's own is
        buffer = io.BufferedWriter(raw, max(os.fstat(1).st_blksize, 1))
    named = io.TextIOWrapper(
        buffer,
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=stream.write_through,
    )
    named.mode = "w"  # type: ignore[misc]
    return named


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
