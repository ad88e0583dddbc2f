"""riffd's hooks in a Claude Code `settings.json`: added, and taken out again, touching nothing
else.

Claude Code reads hooks from `<config dir>/settings.json` (user),
`<project>/.claude/settings.json` (shared: teams commit it) and `<project>/.claude/settings.local.json`
(this machine's: where riffd writes a project's hooks, since they name a path on this machine):
`hooks.<Event>` is a list of `{"matcher": ..., "hooks": [{"type":
"command", "command": ...}]}` groups. riffd adds one group per event (PreToolUse: the redundant-call
hook; SessionStart: the live-session warning) and recognises its own by the command (`... hook
pre-tool-use`, `... hook session-start` run by a riffd executable).

- Each hook command names the riffd to run by its words (`riffd_hooks`), each quoted once, so that
  `sh -c COMMAND` (how Claude Code runs it) runs it wherever riffd is installed.
- Install is idempotent: a second run finds riffd's groups and writes nothing; a riffd hook there
  that does not run (`checking.hook_problem`) gets this riffd in place of its own.
- Every other key, group and hook is kept, in its order. The file is written as JSON with its own
  indent and final newline (as Claude Code writes it: other layouts are laid out anew), atomically, with its mode, after a copy of the previous file is kept in
  riffd's state folder, and only when it still holds the bytes the change was planned on.
- Uninstall takes riffd's groups out (and the `hooks` keys riffd made). When the rest is what it was
  before the install, the file gets back the exact bytes it had (from that copy).
- A file that does not parse, or whose `hooks` are not what Claude Code reads, is refused: riffd
  says where and changes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.display import shell_command
from riffd.fsio import REAL_FS, ensure_private_folder, replace_file
from riffd.hooks.checking import hook_problem, imports_its_folder, is_riffd_group, runnable

PRE_TOOL_USE_MATCHER = "Read|Grep|Glob|WebFetch|WebSearch|Write|Edit|MultiEdit|mcp__.*"
# Claude Code's default is 60; riffd's hooks answer in milliseconds or not at all
HOOK_TIMEOUT_SECONDS = 10


class SettingsError(Exception):
    """The settings file cannot be changed safely; the message says where and what to do."""


@dataclass(frozen=True)
class Change:
    """What an install or uninstall does to one settings file: its bytes before and after (equal:
    nothing)."""

    path: Path
    before: bytes | None  # None: the file does not exist
    after: bytes | None  # None: leave it absent
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the file would change."""
        return self.before != self.after


def riffd_hooks(launcher: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The hook group riffd adds per event, running the riffd that `launcher` names (its words: the
    console script's path, or a Python and `-m riffd`), each word quoted once for `sh -c`, as Claude
    Code runs a hook command."""
    return {
        "PreToolUse": {
            "matcher": PRE_TOOL_USE_MATCHER,
            "hooks": [
                {
                    "type": "command",
                    "command": shell_command(*launcher, "hook", "pre-tool-use", "--mode", "warn"),
                    "timeout": HOOK_TIMEOUT_SECONDS,
                }
            ],
        },
        "SessionStart": {
            "matcher": "resume",
            "hooks": [
                {
                    "type": "command",
                    "command": shell_command(*launcher, "hook", "session-start"),
                    "timeout": HOOK_TIMEOUT_SECONDS,
                }
            ],
        },
    }


_HOOK_WORDS = re.compile(r"\s+hook\s+(pre-tool-use|session-start)\b")


def _load(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # (a FIFO would be waited on for good)
            raise SettingsError(f"{path}: not a regular file; riffd changed nothing")
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    if not raw.strip():
        return raw, {}
    try:
        document = json.loads(
            raw.decode("utf-8-sig"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_not_json,
            parse_float=_finite,
        )
    except _NotKept as exc:
        raise SettingsError(f"{path}: {exc}; riffd changed nothing") from exc
    except _DuplicateKey as exc:
        raise SettingsError(
            f"{path}: the key {exc} appears twice in one object; Claude Code reads only the last, "
            "and rewriting the file would drop the other: remove one, then run this again; riffd "
            "changed nothing"
        ) from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text ({exc}); riffd changed nothing") from exc
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); fix it "
            "(Claude Code cannot read it either), then run this again; riffd changed nothing"
        ) from exc
    except ValueError as exc:  # (an integer of more digits than Python converts)
        raise SettingsError(f"{path}: {exc}; riffd changed nothing") from exc
    if not isinstance(document, dict):
        raise SettingsError(
            f"{path}: holds {type(document).__name__}, not a JSON object; riffd changed nothing"
        )
    hooks = document.get("hooks")
    if hooks is not None and not (
        isinstance(hooks, dict) and all(isinstance(v, list) for v in hooks.values())
    ):
        raise SettingsError(
            f'{path}: "hooks" is not an object of lists, as Claude Code reads it; riffd changed '
            "nothing"
        )
    return raw, document


class _DuplicateKey(ValueError):
    """A JSON object with one key twice."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(json.dumps(key))
            seen.add(key)
    return document


class _NotKept(ValueError):
    """A value the file holds that riffd would not write back as it is."""


def _not_json(constant: str) -> Any:
    raise _NotKept(f"it holds {constant}, which is not JSON (Claude Code cannot read it either)")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise _NotKept(
            f"the number {text[:40]} is past what riffd can write back (it would be Infinity, "
            "which Claude Code cannot read)"
        )
    return number


def _style(raw: bytes | None) -> tuple[int | str, bool]:
    """The file's indent (2 when it has none to go by) and whether it ends with a newline."""
    if not raw:
        return 2, True
    text = raw.decode("utf-8-sig")
    found = re.search(r"\n([ \t]+)\S", text)
    indent: int | str = 2
    if found:
        whitespace = found.group(1)
        indent = len(whitespace) if set(whitespace) == {" "} else whitespace
    return indent, text.endswith("\n")


def _dump(document: dict[str, Any], raw: bytes | None) -> bytes:
    indent, newline = _style(raw)
    # (a lone surrogate, which JSON escapes and UTF-8 cannot hold, written as its escape again)
    return (
        json.dumps(document, indent=indent, ensure_ascii=False) + ("\n" if newline else "")
    ).encode("utf-8", "backslashreplace")


def plan_install(
    path: Path,
    launcher: Sequence[str],
    runs: Callable[[str], str | None] = hook_problem,
) -> Change:
    """What `hook install` does to the settings file at `path` for the riffd `launcher` names: add
    riffd's hooks; a riffd hook already there stays when it runs (`runs(command)` is None), else it
    gets `launcher` in place of its own (its options kept). Raise SettingsError when the file must
    not be touched."""
    raw, document = _load(path)
    updated = copy.deepcopy(document)
    if updated.get("hooks") is None:  # (`"hooks": null` is none)
        updated["hooks"] = {}
    hooks = updated["hooks"]
    notes: list[str] = []

    def runs_here(command: str) -> str | None:
        # never run a command from another user's file, or one not in riffd's form: it is kept
        return runs(command) if runnable(path, command) else None

    for event, group in riffd_hooks(launcher).items():
        groups = hooks.setdefault(event, [])
        ours = [existing for existing in groups if is_riffd_group(existing)]
        if not ours:
            groups.append(group)
            notes.append(f"{event}: added `{group['hooks'][0]['command']}`")
            continue
        for existing in ours:
            for hook in existing["hooks"]:
                notes.append(_mend(event, hook, shell_command(*launcher), runs_here))
    if updated == document:
        return Change(path, raw, raw, tuple(notes))
    after = _dump(updated, raw)
    if raw and raw.strip() and _dump(document, raw) != raw:
        indent, _ = _style(raw)
        notes.append(
            f"the file is written out anew as JSON indented by {indent!r} (as Claude Code writes "
            "it): its other lines keep their keys and values, not their layout (`--dry-run` shows "
            "every line that changes)"
        )
    return Change(path, raw, after, tuple(notes))


def _mend(
    event: str, hook: dict[str, Any], launcher: str, runs: Callable[[str], str | None]
) -> str:
    """Give a riffd hook that does not run `launcher` (the text before its `hook EVENT`) in place
    of its own, in `hook`; return the note that says what became of it."""
    command = hook["command"]
    problem = runs(command)
    if problem is None and imports_its_folder(command):
        problem = (
            "it runs in the project's folder, which `-m` without `-P` puts first on Python's "
            "path: a project's riffd.py would run in its place"
        )
    if problem is None:
        return f"{event}: riffd's hook is there already (`{command}`)"
    found = _HOOK_WORDS.search(command)
    mended = command if found is None else launcher + command[found.start() :]
    if mended == command:
        return (
            f"{event}: riffd's hook `{command}` does not run ({problem}), and this riffd would "
            "write the same command: run `riffd hook install` with the riffd Claude Code should run"
        )
    hook["command"] = mended
    return f"{event}: `{command}` did not run ({problem}); now `{mended}`"


def holds_riffd_hooks(path: Path) -> bool:
    """Whether the settings file at `path` holds a riffd hook (False when it is absent or does not
    parse)."""
    try:
        _, document = _load(path)
    except SettingsError:
        return False
    hooks = document.get("hooks") or {}
    return any(is_riffd_group(group) for groups in hooks.values() for group in groups)


def plan_uninstall(path: Path, state_dir: Path) -> Change:
    """What `hook uninstall` does: riffd's groups out; the exact bytes of before the install when
    the rest is as it was then (the copy the install kept in `state_dir`), or no file when there was
    none."""
    raw, document = _load(path)
    if raw is None:
        return Change(path, None, None, ("no settings file: nothing to take out",))
    updated = copy.deepcopy(document)
    hooks = updated.get("hooks") or {}
    notes = []
    for event in list(hooks):
        kept = [group for group in hooks[event] if not is_riffd_group(group)]
        if len(kept) != len(hooks[event]):
            notes.append(f"{event}: riffd's hook taken out")
            hooks[event] = kept
    if updated == document:
        return Change(path, raw, raw, ("riffd's hooks are not in it: nothing to take out",))
    original = _before_install(path, state_dir)
    if original is not None and _without_empty(updated, original[1]) == original[1]:
        if original[0] is None:
            return Change(
                path,
                raw,
                None,
                (*notes, "there was no settings file before the install: removed again"),
            )
        return Change(
            path,
            raw,
            original[0],
            (*notes, "the file is back to its bytes from before the install"),
        )
    for event in [event for event, groups in hooks.items() if not groups]:
        del hooks[event]
    if "hooks" in updated and not updated["hooks"]:
        del updated["hooks"]
    return Change(path, raw, _dump(updated, raw), tuple(notes))


def _without_empty(updated: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """`updated` without the empty event lists and `hooks` object that are not in `original`."""
    result = copy.deepcopy(updated)
    hooks = result.get("hooks")
    if isinstance(hooks, dict):
        found = original.get("hooks")
        before: dict[str, Any] = found if isinstance(found, dict) else {}
        for event in [
            event for event, groups in hooks.items() if not groups and event not in before
        ]:
            del hooks[event]
        if not hooks and "hooks" not in original:
            del result["hooks"]
    return result


def backup_folder(state_dir: Path, path: Path) -> Path:
    """Where the copies of one settings file are kept: <state dir>/settings-backups/<hash of its
    path>/."""
    key = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:16]
    return state_dir / "settings-backups" / key


def _before_install(path: Path, state_dir: Path) -> tuple[bytes | None, dict[str, Any]] | None:
    """The newest copy taken by an install: its bytes (None: there was no file) and document; None
    without one."""
    folder = backup_folder(state_dir, path)
    copies = sorted(folder.glob("install-*.json")) if folder.is_dir() else []
    if not copies:
        return None
    if copies[-1].name.endswith("-absent.json"):
        return None, {}
    raw = copies[-1].read_bytes()
    try:
        document = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return (raw, document) if isinstance(document, dict) else None


def apply(change: Change, state_dir: Path, kind: str, what: str = "the hooks") -> Path | None:
    """Write `change` (nothing when it changes nothing): first a private copy of the previous file
    in riffd's state folder (returned), then the new bytes by atomic replace, keeping the file's
    mode; a symlinked settings file (a dotfile manager's) has its target replaced, the link stays.
    Raise SettingsError for a read-only file (saying to add `what` by hand)."""
    if not change.changed:
        return None
    # a dotfile manager's link stays
    target = change.path.resolve() if change.path.is_symlink() else change.path
    # marked read-only (root or not)
    if change.before is not None and not target.stat().st_mode & 0o222:
        raise SettingsError(
            f"{change.path} is read-only: riffd changes nothing (make it writable, or add {what} "
            "yourself: --dry-run prints what riffd would write)"
        )
    folder = backup_folder(state_dir, change.path)
    # 0700, whatever the umask: copies of the user's settings
    ensure_private_folder(REAL_FS, folder)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"{time.time() % 1:.6f}"[1:]
    saved = folder / f"{kind}-{stamp}{'-absent' if change.before is None else ''}.json"
    replace_file(saved, change.before or b"", 0o600)
    replace_file(folder / "path.txt", (str(change.path.absolute()) + "\n").encode(), 0o600)

    def unchanged() -> None:  # (what another program wrote stays)
        if _bytes_of(target) != change.before:
            raise SettingsError(
                f"{change.path} changed while riffd was changing it (another program, Claude Code "
                "say, wrote it); riffd changed nothing: run this again"
            )

    unchanged()
    if change.after is None:  # a link stays: its target goes, as it was before the install
        target.unlink(missing_ok=True)
        return saved
    target.parent.mkdir(parents=True, exist_ok=True)
    try:  # the new file keeps the old one's mode and owner (riffd run by root must not take a user's file)
        status = target.stat()
        mode = status.st_mode & 0o7777
    except FileNotFoundError:  # a new file: private, and its folder's owner's
        status, mode = target.parent.stat(), 0o600
    owner = (status.st_uid, status.st_gid)
    try:
        # (looked at again once the new bytes are on disk: the last instant before the rename)
        replace_file(target, change.after, mode, owner=owner, last_look=unchanged)
    except PermissionError as exc:
        if owner == (os.geteuid(), os.getegid()):
            raise
        raise SettingsError(
            f"{change.path}: cannot write it with its owner (uid {status.st_uid}, gid "
            f"{status.st_gid}) kept ({exc.strerror}); riffd changed nothing: run this as its "
            "owner"
        ) from exc
    return saved


def _bytes_of(path: Path) -> bytes | None:
    """The bytes of the file at `path` (None: there is none)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
