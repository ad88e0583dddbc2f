"""The tool-call tracker's rules: when two tool calls are the same call, and what a call's key and
result size are.

A known tool (Read, Grep, Glob, WebFetch, WebSearch, Write, Edit, MultiEdit) is compared on the
input fields its rule names; tools with side effects (shells, agents, to-do lists, MCP tools whose
name holds a side-effect word) are never compared; other tools are the same call when more than half
of their inputs, or one identifying input, are equal. A call's key is its tool and a digest of its
normalised input.

The tracker (riffd.tracker.tracker) and the PreToolUse hook (riffd.hooks.pre_tool_use) both import this
module, and the hook must start in a few milliseconds: standard library only, and no module that is
slow to import (dataclasses, hashlib's OpenSSL, orjson, whose import alone takes about 9 ms).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

try:
    from _blake2 import blake2b  # what hashlib.blake2b is, without loading OpenSSL (3 ms)
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

# seconds; the same default as the `tracker.window` config key (a test checks)
DEFAULT_WINDOW = 300.0


class Rule(NamedTuple):
    """How one known tool's calls are compared.

    `fields`: the input properties that must all be equal (None: every property). `path`: the
    property naming the file or folder the call reads or writes (a read after a write of that file
    is not a repeat). `mutates`: the call changes that file. `cacheable`: the hook's cache mode may
    hand back the earlier result instead of running the call again (only when nothing could have
    changed it).
    """

    fields: tuple[str, ...] | None
    path: str | None = None
    mutates: bool = False
    cacheable: bool = False


# The similarity rules, one line per tool. Grep and Glob compare every property (pattern, path, glob
# and every option); their results depend on files anything may have changed, so they are never
# served from the cache. WebFetch already keeps its own 15-minute cache, so a repeated fetch or
# search within the window is safe to serve again.
RULES: Mapping[str, Rule] = {
    "Read": Rule(("file_path", "offset", "limit", "pages"), path="file_path", cacheable=True),
    "Grep": Rule(None, path="path"),
    "Glob": Rule(None, path="path"),
    "WebFetch": Rule(("url", "prompt"), cacheable=True),
    "WebSearch": Rule(None, cacheable=True),  # the query, and its domain filters when given
    "Write": Rule(("file_path", "content"), path="file_path", mutates=True),
    "Edit": Rule(
        ("file_path", "old_string", "new_string", "replace_all"), path="file_path", mutates=True
    ),
    "MultiEdit": Rule(("file_path", "edits"), path="file_path", mutates=True),
}

# Never compared: shells, agents, task and to-do lists, interactive tools, anything with side
# effects. Their repeats are deliberate (run the tests again, ask again) or their results change by
# design.
NEVER_CACHED = frozenset(
    {
        "Bash",
        "BashOutput",
        "KillBash",
        "KillShell",
        "PowerShell",
        "Task",
        "Agent",
        "TaskOutput",
        "TaskStop",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskUpdate",
        "TodoWrite",
        "TodoRead",
        "AskUserQuestion",
        "ExitPlanMode",
        "EnterPlanMode",
        "NotebookEdit",
        "SlashCommand",
        "Skill",
    }
)

# Tools that change a file without being compared themselves: a read of that file afterwards is not
# a repeat.
MUTATES_ONLY: Mapping[str, str] = {"NotebookEdit": "notebook_path"}

# Unknown tools (MCP included): two calls are the same when more than half of their input properties
# are equal, or when one of these identifying properties is.
IDENTIFYING = ("path", "file_path", "url", "query", "id")

# An unknown tool whose name holds one of these words is taken to have side effects (or to be
# interactive) and is never compared: mcp__github__create_issue, mcp__playwright__browser_click, ...
SIDE_EFFECT_WORDS = frozenset(
    {
        "add",
        "apply",
        "approve",
        "ask",
        "cancel",
        "click",
        "close",
        "comment",
        "commit",
        "confirm",
        "create",
        "delete",
        "deploy",
        "drag",
        "drop",
        "edit",
        "eval",
        "evaluate",
        "exec",
        "execute",
        "fill",
        "hover",
        "input",
        "insert",
        "install",
        "kill",
        "merge",
        "move",
        "navigate",
        "open",
        "patch",
        "post",
        "press",
        "prompt",
        "push",
        "put",
        "remove",
        "rename",
        "reply",
        "restart",
        "run",
        "select",
        "send",
        "set",
        "start",
        "stop",
        "submit",
        "type",
        "update",
        "upload",
        "wait",
        "write",
    }
)
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def has_side_effects(tool: str) -> bool:
    """Given a tool name, return True when its calls are never compared: a known never-cached tool,
    or an unknown tool whose own name (after an MCP `mcp__server__` prefix) holds a side-effect
    word."""
    if tool in NEVER_CACHED:
        return True
    if tool in RULES:
        return False
    own_name = tool.rsplit("__", 1)[-1]
    return any(word.lower() in SIDE_EFFECT_WORDS for word in _WORDS.findall(own_name))


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    ).encode()


def _digest(value: Any) -> bytes:
    return blake2b(_canonical(value), digest_size=16).digest()


def _normal_path(value: Any, cwd: str | None) -> Any:
    if not isinstance(value, str) or not value:
        return value
    if cwd and not os.path.isabs(value):
        value = os.path.join(cwd, value)
    return os.path.normpath(value)


class CallKey(NamedTuple):
    """What the rules compare of one call: `key` (a digest of the compared input), per-property
    digests for unknown tools, and the file the call reads or writes."""

    tool: str
    key: bytes
    properties: Mapping[str, bytes] | None  # unknown tools only
    path: str | None
    mutates: bool
    compared: bool  # False for a call kept only as a file change (NotebookEdit)
    cacheable: bool


def call_key(tool: str, tool_input: Any, cwd: str | None = None) -> CallKey | None:
    """Given a tool name, its input and the session's working directory, return what the similarity
    rules compare, or None for a call that is never compared and changes no file (Bash, Task,
    TodoWrite, ...).

    Properties that are null count as absent; Read's `offset` 0 or 1 is the start of the file, as no
    offset is; relative paths are taken from `cwd`, and Grep/Glob without `path` search `cwd`.
    """
    if not isinstance(tool_input, dict):
        tool_input = {}
    given = {name: value for name, value in tool_input.items() if value is not None}
    rule = RULES.get(tool)
    if rule is None and tool in MUTATES_ONLY:
        path = _normal_path(given.get(MUTATES_ONLY[tool]), cwd)
        if not isinstance(path, str):
            return None
        return CallKey(tool, b"", None, path, True, False, False)
    if rule is None and has_side_effects(tool):
        return None
    if rule is None:
        for name in ("path", "file_path"):
            if name in given:
                given[name] = _normal_path(given[name], cwd)
        properties = {name: _digest(value) for name, value in given.items()}
        path = given.get("file_path", given.get("path"))
        return CallKey(
            tool,
            _digest(given),
            properties,
            path if isinstance(path, str) else None,
            False,
            True,
            False,
        )
    if rule.path is not None:
        if rule.path in given:
            given[rule.path] = _normal_path(given[rule.path], cwd)
        elif tool in ("Grep", "Glob") and cwd:
            given[rule.path] = os.path.normpath(cwd)
    if tool == "Read" and given.get("offset") in (0, 1):
        del given["offset"]
    compared = (
        given
        if rule.fields is None
        else {name: given[name] for name in rule.fields if name in given}
    )
    path = given.get(rule.path) if rule.path else None
    return CallKey(
        tool,
        _digest(compared),
        None,
        path if isinstance(path, str) else None,
        rule.mutates,
        True,
        rule.cacheable,
    )


def similar(earlier: CallKey, later: CallKey) -> bool:
    """Given two calls' keys, return True when the later repeats the earlier under the tool's
    rule."""
    if earlier.tool != later.tool or not (earlier.compared and later.compared):
        return False
    if earlier.key == later.key:
        return True
    if earlier.properties is None or later.properties is None:
        return False
    first, second = earlier.properties, later.properties
    if any(name in first and first[name] == second.get(name) for name in IDENTIFYING):
        return True
    names = first.keys() | second.keys()
    equal = sum(1 for name in names if name in first and first[name] == second.get(name))
    return 2 * equal > len(names)


def parse_time(text: Any) -> float | None:
    """Given an ISO-8601 `timestamp` field, return it as seconds since the epoch, or None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment.timestamp()


def result_size(content: Any) -> int:
    """Given a tool_result block's `content` (a string or a list of blocks), return its size in
    bytes."""
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        size = 0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                size += len(part["text"].encode())
            else:
                size += len(_canonical(part))
        return size
    return 0
