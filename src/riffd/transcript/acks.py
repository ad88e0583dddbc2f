"""Acknowledged findings: damage a user has looked at and accepts (a malformed line mid-file riffd
never edits).

`riffd ack FILE:LINE` records each finding at that line in `<state dir>/acknowledged.json`. An
acknowledged finding is still listed everywhere, marked so, but no longer makes a report unhealthy,
`status` or `scan` exit 1, or `fix` say that findings remain.

A finding is recognised by what it is, not by where it is, so that an acknowledgement survives
appends and repairs that move lines: by its class with its line uuids (and tool id) when its lines
have uuids, else by its class with the sha256 of the line's bytes (a malformed line has no uuid). A
line that changes is a new finding.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from riffd.fsio import REAL_FILES, FileSystem, replace_file
from riffd.transcript.reader import retrying

ACKS_NAME = "acknowledged.json"
_CHUNK = 1 << 16


class AckFileError(Exception):
    """The acknowledgements file cannot be read; the message names it and says what to do."""


@dataclass(frozen=True)
class Ack:
    """One acknowledged finding: where it was when acknowledged, what identifies it, when, and
    why."""

    path: str
    cls: str
    line: int
    key: str
    at: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the acknowledgement as stored (and printed by `riffd ack --list --json`)."""
        out = asdict(self)
        out["class"] = out.pop("cls")
        return out


def acks_path(state_dir: Path) -> Path:
    """Return where the acknowledgements of the riffd whose state is in `state_dir` are kept."""
    return state_dir / ACKS_NAME


def load_acks(state_dir: Path) -> list[Ack]:
    """Return the acknowledgements in `state_dir` (none when the file does not exist); raise
    AckFileError when the file cannot be read or is not what riffd writes."""
    path = acks_path(state_dir)
    try:
        data = _loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise AckFileError(
            f"{path}: cannot be read ({exc}); fix or remove it (it only holds acknowledgements, "
            "made again with `riffd ack FILE:LINE`)"
        ) from exc
    items = data.get("acknowledged") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise AckFileError(f'{path}: no "acknowledged" list in it; fix or remove it')
    acks = []
    for number, item in enumerate(items, 1):
        try:
            acks.append(
                Ack(
                    str(item["path"]),
                    str(item["class"]),
                    int(item["line"]),
                    str(item["key"]),
                    str(item.get("at", "")),
                    str(item.get("note", "")),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AckFileError(
                f"{path}: entry {number} is not an acknowledgement ({exc!r}); fix or remove it"
            ) from exc
    return acks


def save_acks(state_dir: Path, acks: Iterable[Ack]) -> Path:
    """Write the acknowledgements to `state_dir` atomically (private: they name transcripts); return
    the file."""
    path = acks_path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    document = {"acknowledged": [ack.to_json() for ack in acks]}
    try:
        data = orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
    # a path that is not UTF-8: the standard library escapes it, and reads it back the same
    except TypeError:
        data = json.dumps(document, indent=2).encode() + b"\n"
    replace_file(path, data)
    return path


def _loads(data: bytes) -> Any:
    """The acknowledgements file's JSON (orjson; the standard library for the escaped surrogates of
    a path that is not UTF-8, which orjson refuses: see save_acks); raise ValueError when it is not
    JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def line_digest(path: str, offset: int, fs: FileSystem = REAL_FILES) -> str | None:
    """Return the sha256 of the line starting at byte `offset` of `path` (without its newline), or
    None when it cannot be read (EIO retried per `fs`'s policy: see riffd.transcript.reader)."""
    import hashlib  # here, not at the top: OpenSSL adds about 3.5 MB to every `riffd scan`, which rarely needs it

    digest = hashlib.sha256()
    fs = retrying(fs)
    try:
        fd = fs.open_file(path)
    except OSError:
        return None
    try:
        position = offset
        while True:
            chunk = fs.pread(fd, _CHUNK, position)
            end = chunk.find(b"\n")
            digest.update(chunk if end < 0 else chunk[:end])
            if end >= 0 or len(chunk) < _CHUNK:
                return digest.hexdigest()
            position += len(chunk)
    except OSError:
        return None
    finally:
        fs.close(fd)


def finding_key(finding: dict[str, Any], fs: FileSystem = REAL_FILES) -> str | None:
    """Return what identifies `finding` (a finding as JSON, with its file's `path`) across appends
    and repairs, or None when it cannot be told (a line without uuid that cannot be read)."""
    cls = str(finding.get("class"))
    uuids = [uuid for uuid in finding.get("uuids") or () if uuid]
    if uuids:
        return f"{cls}|{finding.get('tool_id') or ''}|{','.join(uuids)}"
    offset = finding.get("offset")
    if isinstance(offset, int):
        digest = line_digest(str(finding["path"]), offset, fs)
        return None if digest is None else f"{cls}|sha256:{digest}"
    return f"{cls}|line:{(finding.get('lines') or [0])[0]}"


class Acknowledged:
    """Tells which findings are acknowledged; reads a line only for a finding whose file and class
    have an acknowledgement and which has no uuid to go by."""

    def __init__(self, acks: Iterable[Ack], fs: FileSystem = REAL_FILES) -> None:
        self.fs = retrying(fs)
        self._keys: dict[tuple[str, str], dict[str, Ack]] = {}
        for ack in acks:
            self._keys.setdefault((ack.path, ack.cls), {})[ack.key] = ack

    def __bool__(self) -> bool:
        return bool(self._keys)

    def of(self, path: str, finding: dict[str, Any]) -> Ack | None:
        """Return the acknowledgement of `finding` (JSON) in the file `path`, or None."""
        path = os.path.abspath(path)
        keys = self._keys.get((path, str(finding.get("class"))))
        if not keys:
            return None
        key = finding_key({**finding, "path": path}, self.fs)
        return keys.get(key) if key is not None else None


def acknowledged_in(state_dir: Path) -> Acknowledged:
    """Return the acknowledgements in `state_dir` as an Acknowledged (empty when the file is
    unreadable: a broken file must not hide damage, so nothing counts as acknowledged then, and a
    line on stderr says so: else a finding the user acknowledged counted again, and an exit code
    changed, without a word)."""
    try:
        return Acknowledged(load_acks(state_dir))
    except AckFileError as exc:
        import sys

        print(
            f"riffd: warning: acknowledgements not applied: {exc}; until then every finding counts",
            file=sys.stderr,
        )
        return Acknowledged(())
