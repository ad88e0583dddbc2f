"""Claude Code's user configuration file (`~/.claude.json`, or `$CLAUDE_CONFIG_DIR/.claude.json`)
and the MCP servers it registers for the user: the top-level `mcpServers` object, where `claude mcp
add --scope user NAME -- COMMAND ARGS...` writes `{"type": "stdio", "command": ..., "args": [...],
"env": {}}`.

The file holds much more than MCP servers (the client rewrites it often), so a server is added and
taken out as text: one member inserted after the last one, in the file's own indent, and the same
text cut out again, every other byte left as it was. Adding then removing gives the file back byte
for byte. Each edit is checked: the edited text must parse to the document with only that change.

Claude Code changes the file holding `<file>.lock` (proper-lockfile: a folder made by mkdir, stale
once its time is 10 s old) from its read to its write; riffd takes the same lock for its own
(`held_lock`), so neither writes over the other's change.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.display import RIFFD_VARIABLES  # (an entry may carry them: riffd's state and config)

SERVERS = "mcpServers"
LOCK_STALE_SECONDS = 10.0  # proper-lockfile's default, which Claude Code keeps
LOCK_WAIT_SECONDS = 5.0


class ConfigFileError(Exception):
    """The file cannot be edited safely; the message says where and what to do."""


def user_config_path(environ: dict[str, str] | None = None) -> Path:
    """Claude Code's user configuration: $CLAUDE_CONFIG_DIR/.claude.json, else ~/.claude.json."""
    env = os.environ if environ is None else environ
    folder = env.get("CLAUDE_CONFIG_DIR")
    return Path(folder).expanduser() / ".claude.json" if folder else Path.home() / ".claude.json"


@contextlib.contextmanager
def held_lock(path: Path, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold Claude Code's lock on its user configuration `path` (the folder `<path>.lock`), as
    Claude Code does while it changes the file: wait up to `wait` seconds for it, take over a stale
    one; raise ConfigFileError when it stays held. Without the file's folder, there is nothing to
    lock."""
    lock = path.with_name(path.name + ".lock")
    deadline = time.monotonic() + wait
    while True:
        try:
            os.mkdir(lock, 0o700)
            break
        except FileNotFoundError:
            yield  # no folder yet: no Claude Code writes there
            return
        except FileExistsError:
            pass
        with contextlib.suppress(FileNotFoundError):
            if time.time() - os.stat(lock).st_mtime > LOCK_STALE_SECONDS:
                with contextlib.suppress(OSError):  # a Claude Code that died holding it
                    os.rmdir(lock)
                continue
        if time.monotonic() > deadline:
            raise ConfigFileError(
                f"{path}: Claude Code holds {lock} (it is changing the file); riffd changed "
                "nothing: run this again in a moment"
            )
        time.sleep(0.05)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(lock)


def stdio_server(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """The entry `claude mcp add` writes for a stdio server run as `command` (an argv list), with
    the variables `env` (riffd's own: RIFFD_VARIABLES)."""
    return {"type": "stdio", "command": command[0], "args": command[1:], "env": dict(env or {})}


def server_entry(text: str, name: str, where: Path) -> Any:
    """The user-scope server `name` in `text` (None: there is none)."""
    servers = parse_document(text, where).get(SERVERS)
    return servers.get(name) if isinstance(servers, dict) else None


def is_plain_stdio(entry: Any) -> bool:
    """Whether `entry` is in the form `stdio_server` writes (a command and its arguments, nothing
    else: no env but riffd's own variables), so that another such one can take its place without
    losing anything but where it points."""
    return (
        isinstance(entry, dict)
        and set(entry) <= {"type", "command", "args", "env"}
        and entry.get("type", "stdio") == "stdio"
        and isinstance(entry.get("command"), str)
        and isinstance(entry.get("args", []), list)
        and isinstance(entry.get("env", {}), dict)
        and set(entry.get("env") or {}) <= set(RIFFD_VARIABLES)
    )


@dataclass(frozen=True)
class Member:
    """One `"key": value` of a JSON object, by character offsets into the text."""

    key: str
    key_start: int
    value_start: int
    value_end: int


def parse_document(text: str, where: Path) -> dict[str, Any]:
    """The JSON object in `text` (empty text: {}); raise ConfigFileError naming `where` when it is
    not one, or repeats a key."""
    if not text.strip():
        return {}

    def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ConfigFileError(
                f"{where}: the key {json.dumps(repeated[0])} appears twice in one object; fix it, "
                "then run this again; riffd changed nothing"
            )
        return dict(pairs)

    try:
        document = json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(
            f"{where}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); fix it "
            "(Claude Code cannot read it either), then run this again; riffd changed nothing"
        ) from exc
    if not isinstance(document, dict):
        raise ConfigFileError(f"{where}: not a JSON object; riffd changed nothing")
    servers = document.get(SERVERS)
    if servers is not None and not isinstance(servers, dict):
        raise ConfigFileError(
            f'{where}: "{SERVERS}" is not an object, as Claude Code reads it; riffd changed nothing'
        )
    return document


_WHITESPACE = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(r"[^,}\]\s]+")


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _value_end(text: str, at: int) -> int:
    """Where the JSON value starting at `at` ends (the text is known to parse)."""
    if text[at] == '"':
        string = _STRING.match(text, at)
        assert string is not None
        return string.end()
    if text[at] in "{[":
        depth, position = 0, at
        while True:
            char = text[position]
            if char == '"':
                string = _STRING.match(text, position)
                assert string is not None
                position = string.end()
                continue
            if char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    return position + 1
            position += 1
    scalar = _SCALAR.match(text, at)
    assert scalar is not None
    return scalar.end()


def members(text: str, open_at: int) -> tuple[list[Member], int]:
    """The members of the object whose `{` is at `open_at`, and the offset of its `}`."""
    found = []
    position = _skip(text, open_at + 1)
    while text[position] != "}":
        string = _STRING.match(text, position)
        assert string is not None
        key = json.loads(string.group())
        value_start = _skip(text, _skip(text, string.end()) + 1)  # past the ':'
        value_end = _value_end(text, value_start)
        found.append(Member(key, position, value_start, value_end))
        position = _skip(text, value_end)
        if text[position] == ",":
            position = _skip(text, position + 1)
    return found, position


def _indent_unit(text: str) -> str:
    found = re.search(r"\n([ \t]+)\S", text)
    return found.group(1) if found else "  "


def _line_indent(text: str, at: int) -> str:
    """The whitespace that begins the line offset `at` is on."""
    start = text.rfind("\n", 0, at) + 1
    match = _WHITESPACE.match(text, start)
    return text[start : match.end() if match else start].strip("\r\n")


def _member_text(key: str, value: Any, indent: str, unit: str, spread: bool) -> str:
    if not spread:
        return f"{json.dumps(key)}:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"
    body = json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)
    return f"{json.dumps(key, ensure_ascii=False)}: {body}"


def _insert(text: str, open_at: int, key: str, value: Any) -> str:
    """`text` with `"key": value` added as the last member of the object at `open_at`."""
    found, close_at = members(text, open_at)
    unit = _indent_unit(text)
    spread = "\n" in text or not text.strip()
    if found:
        last = found[-1]
        indent = _line_indent(text, last.key_start)
        spread = spread and "\n" in text[open_at : last.key_start + 1]
        joint = f",\n{indent}" if spread else ","
        added = joint + _member_text(key, value, indent, unit, spread)
        return text[: last.value_end] + added + text[last.value_end :]
    outer = _line_indent(text, open_at)
    inner = outer + unit
    if not spread:
        return text[: open_at + 1] + _member_text(key, value, "", unit, False) + text[close_at:]
    added = f"\n{inner}{_member_text(key, value, inner, unit, True)}\n{outer}"
    return text[: open_at + 1] + added + text[close_at:]


def _remove(text: str, open_at: int, key: str) -> str:
    """`text` without the member `key` of the object at `open_at` (the inverse of `_insert`)."""
    found, close_at = members(text, open_at)
    place = next(number for number, member in enumerate(found) if member.key == key)
    if len(found) == 1:
        return text[: open_at + 1] + text[close_at:]
    if place > 0:
        return text[: found[place - 1].value_end] + text[found[place].value_end :]
    return text[: found[0].key_start] + text[found[1].key_start :]


def _checked(after_text: str, expected: dict[str, Any], where: Path) -> str:
    """`after_text` when it parses to `expected`; else raise ConfigFileError (never written)."""
    if parse_document(after_text, where) != expected:
        raise ConfigFileError(f"{where}: riffd could not edit it safely; riffd changed nothing")
    return after_text


def with_server(text: str, name: str, entry: dict[str, Any], where: Path) -> str:
    """`text` with the user-scope server `name` set to `entry` (the same text when it is so)."""
    document = parse_document(text, where)
    servers = document.get(SERVERS)
    if isinstance(servers, dict) and servers.get(name) == entry:
        return text
    expected = json.loads(json.dumps(document))
    expected.setdefault(SERVERS, {})[name] = entry
    if not text.strip():
        return json.dumps(expected, indent=2) + "\n"
    top = _skip(text, 0)
    if servers is None:
        return _checked(_insert(text, top, SERVERS, {name: entry}), expected, where)
    block = next(member for member in members(text, top)[0] if member.key == SERVERS)
    if name in servers:
        text = _remove(text, block.value_start, name)
        block = next(member for member in members(text, top)[0] if member.key == SERVERS)
    return _checked(_insert(text, block.value_start, name, entry), expected, where)


def without_server(text: str, name: str, where: Path, *, drop_empty: bool) -> str:
    """`text` without the user-scope server `name` (the same text without one); with `drop_empty`,
    also without an `mcpServers` left empty."""
    document = parse_document(text, where)
    servers = document.get(SERVERS)
    if not isinstance(servers, dict) or name not in servers:
        return text
    expected = json.loads(json.dumps(document))
    del expected[SERVERS][name]
    top = _skip(text, 0)
    if drop_empty and not expected[SERVERS]:
        del expected[SERVERS]
        return _checked(_remove(text, top, SERVERS), expected, where)
    block = next(member for member in members(text, top)[0] if member.key == SERVERS)
    return _checked(_remove(text, block.value_start, name), expected, where)
