"""Claude Code's registry of running processes: `<config dir>/sessions/<pid>.json`, one small JSON
object per running `claude` process (`pid`, `sessionId`, `cwd`, `startedAt` in ms), written at start
and removed at exit.

Standard library only, and none of its modules that are slow to import (`json`, `dataclasses`,
`pathlib`: JSON through riffd.quickjson): the SessionStart hook reads it inside Claude Code's
start-up, where every millisecond shows.
"""

from __future__ import annotations

import os

from riffd.quickjson import loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from os import PathLike

# A registry entry is a few hundred bytes; anything far larger is not one.
ENTRY_LIMIT = 1 << 20


class Registration:
    """One running Claude Code process as its registry file describes it: its `session_id` and
    `pid`, the `registry_file`, the `cwd` and when it started (`started_at`, Unix seconds), when the
    entry says."""

    __slots__ = ("cwd", "pid", "registry_file", "session_id", "started_at")

    def __init__(
        self,
        session_id: str,
        pid: int,
        registry_file: str | PathLike[str],
        cwd: str | None = None,
        started_at: float | None = None,
    ) -> None:
        self.session_id, self.pid, self.registry_file = session_id, pid, registry_file
        self.cwd, self.started_at = cwd, started_at

    def _fields(self) -> tuple[object, ...]:
        return (self.session_id, self.pid, self.registry_file, self.cwd, self.started_at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registration) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Registration(session_id={self.session_id!r}, pid={self.pid!r}, registry_file="
            f"{self.registry_file!r}, cwd={self.cwd!r}, started_at={self.started_at!r})"
        )


def clean_path(path: str) -> str:
    """`path` as `str(pathlib.PurePosixPath(path))` spells it: no empty or `.` parts, `..` kept."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    rooted = "/" if path.startswith("/") else ""
    return rooted + "/".join(parts) if parts or rooted else "."


def file_stem(path: str | PathLike[str]) -> str:
    """The last part of `path` without its suffix, as `pathlib.Path(path).stem` gives it."""
    name = clean_path(os.fspath(path)).rsplit("/", 1)[-1]
    name = "" if name in (".", "/") else name
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name


MAX_PID = 2**31 - 1  # above it, no process (and os.kill refuses the number)


def pid_running(pid: int, unsure: Callable[[int, OSError], None] | None = None) -> bool:
    """Whether a process with id `pid` exists (EPERM: it does). Any other error of the probe is
    told to `unsure` and answered "running": that answer can only cost a skipped repair."""
    if pid <= 0:  # kill(0, ...) and kill(-n, ...) address process groups, never one process
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (no such process; a number no pid can be)
        return False
    except PermissionError:
        return True
    except OSError as exc:
        if unsure is not None:
            unsure(pid, exc)
        return True
    return True


def pid_value(value: object) -> int | None:
    """The pid a registry entry's `pid` holds: a number (1234, or 1234.0) or digits in a string
    ("1234", "1234.0"); None for anything else, or a number no process can have."""
    pid: int | None = None
    if isinstance(value, bool):
        pid = None
    elif isinstance(value, int):
        pid = value
    elif isinstance(value, float) and value.is_integer():
        pid = int(value)
    elif isinstance(value, str):
        digits, _dot, zeros = value.strip().partition(".")
        # (past 10 digits no pid; and int() refuses over 4300)
        if digits.isascii() and digits.isdigit() and len(digits) <= 10 and not zeros.strip("0"):
            pid = int(digits)
    return pid if pid is not None and 0 < pid <= MAX_PID else None


def pid_of_entry_name(name: str) -> int | None:
    """The pid a registry file's name gives: `<pid>.json`, or a file beside one that may be it
    being written (`<pid>.json.tmp`, `<pid>.json.<anything>`), in any case; None for another
    name."""
    digits, found, rest = name.lower().partition(".json")
    if not found or not (digits.isascii() and digits.isdigit()) or len(digits) > 10:
        return None
    if rest and (not rest.startswith(".") or rest == "."):
        return None
    pid = int(digits)
    return pid if 0 < pid <= MAX_PID else None


def is_entry_name(name: str) -> bool:
    """Whether a file of `sessions/` is read as a registry entry: `*.json` (in any case), or a name
    that gives a pid (pid_of_entry_name); never a hidden one."""
    return not name.startswith(".") and (
        name.lower().endswith(".json") or pid_of_entry_name(name) is not None
    )


_HEX = frozenset("0123456789abcdef")


def session_key(session_id: str) -> str:
    """A session id as registry entries are compared by: without surrounding blanks or byte-order
    marks, in lower case, and a UUID however it is spelt (braces, `urn:uuid:`, without dashes) as
    Claude Code spells it, `8-4-4-4-12` hex digits (an entry written otherwise still names its
    session)."""
    key = session_id.strip().strip("\ufeff").strip().lower()
    bare = key.removeprefix("urn:uuid:")
    if bare.startswith("{") and bare.endswith("}"):
        bare = bare[1:-1]
    bare = bare.replace("-", "")
    if len(bare) != 32 or not _HEX.issuperset(bare):
        return key
    return f"{bare[:8]}-{bare[8:12]}-{bare[12:16]}-{bare[16:20]}-{bare[20:]}"


def _hex_digits(text: str) -> str:
    return "".join(char for char in text.lower() if char in _HEX)


def names_session(entry_id: str, session_id: str) -> bool:
    """Whether a registry entry's `entry_id` names the session `session_id`: the same by
    session_key, or holding the session's 32 hex digits in order among other characters (an id
    spelt in a way session_key does not know: `{urn:uuid:...}`, other dashes, invisible marks).
    A wrong yes only keeps a session live; a wrong no could let riffd rewrite it."""
    wanted = session_key(session_id)
    if session_key(entry_id) == wanted:
        return True
    digits = _hex_digits(wanted)
    return len(digits) == 32 and digits in _hex_digits(entry_id)


def entry_fields(raw: bytes) -> dict[str, list[object]] | None:
    """Given a registry entry's bytes, each key of its JSON object with every value it is given
    (two for a key written twice), or None when the bytes are not one JSON object. NUL bytes after
    the object (what a crash can leave at a file's end) are left out."""
    if b"\x00" not in raw[:4]:  # (else UTF-16 or UTF-32, whose last character may end in NUL)
        raw = raw.rstrip(b"\x00")
    objects: list[list[tuple[str, object]]] = []

    def keep(pairs: list[tuple[str, object]]) -> dict[str, object]:
        objects.append(pairs)
        return dict(pairs)

    try:
        entry = loads(raw, object_pairs_hook=keep)
    except (ValueError, UnicodeDecodeError, RecursionError):  # (arrays nested 100,000 deep)
        return None
    if not isinstance(entry, dict):
        return None
    fields: dict[str, list[object]] = {}
    for key, value in objects[-1]:  # (the outermost object is the last one closed)
        fields.setdefault(key, []).append(value)
    return fields


def pids_named(
    registry_file: str | PathLike[str], fields: dict[str, list[object]] | None
) -> list[int]:
    """The pids an entry names, once each: its `pid` (each, if it gives two) and its file name's
    `<pid>` (`fields`: entry_fields, None when it is not JSON)."""
    pids = [pid_value(value) for value in (fields or {}).get("pid", [])]
    pids.append(pid_of_entry_name(os.path.basename(os.fspath(registry_file))))
    return list(dict.fromkeys(pid for pid in pids if pid is not None))


def registration_from(
    registry_file: str | PathLike[str], fields: dict[str, list[object]] | None
) -> Registration | None:
    """Given a registry file's name and its `fields` (entry_fields), return its entry, or None when
    it is not one (the pid may come from the file name when the entry's is missing or of no use; a
    `sessionId` of blanks is none; an entry giving `sessionId`, `pid` or `cwd` twice, differently,
    is none)."""
    if fields is None:
        return None
    for key in ("sessionId", "pid", "cwd"):
        values = fields.get(key, [])
        if any(value != values[0] or type(value) is not type(values[0]) for value in values):
            return None
    entry = {key: values[-1] for key, values in fields.items()}
    session_id = entry.get("sessionId")
    # (its own `pid`, else, left out or of no use, its file name's)
    pid = pid_value(entry.get("pid")) or pid_of_entry_name(
        os.path.basename(os.fspath(registry_file))
    )
    if not isinstance(session_id, str) or not session_id.strip() or pid is None:
        return None
    written_cwd = entry.get("cwd")
    cwd = written_cwd if isinstance(written_cwd, str) else None
    return Registration(session_id, pid, registry_file, cwd, _seconds(entry.get("startedAt")))


def _seconds(started: object) -> float | None:
    """An entry's `startedAt` (ms) in Unix seconds, or None when it is not a time a clock shows."""
    if not isinstance(started, int | float) or isinstance(started, bool):
        return None
    try:
        seconds = started / 1000
    except OverflowError:  # (an int of hundreds of digits)
        return None
    return seconds if 0 <= seconds < 1e11 else None  # (NaN fails both; 1e11 s: year 5138)


def registrations_named(
    registry_file: str | PathLike[str], fields: dict[str, list[object]] | None
) -> list[Registration]:
    """Every session and pid an entry may name, read leniently, for a warning (never to prove a
    session idle): each `sessionId` it gives with each pid (its own, each if it gives two, and its
    file name's), with its last `cwd` and `startedAt`."""
    if fields is None:
        return []
    whole = registration_from(registry_file, fields)
    cwd, started_at = (whole.cwd, whole.started_at) if whole is not None else (None, None)
    ids = [
        value for value in fields.get("sessionId", []) if isinstance(value, str) and value.strip()
    ]
    return [
        Registration(session_id, pid, registry_file, cwd, started_at)
        for session_id in dict.fromkeys(ids)
        for pid in pids_named(registry_file, fields)
    ]
