"""Whether riffd's hooks in a Claude Code settings file run: each hook command riffd installed is
run as Claude Code runs it (`sh -c COMMAND`, a hook event on stdin), with an event no hook answers,
and must exit 0 within the hook's timeout. A command whose executable is gone, or whose riffd is
broken, fails there, where Claude Code shows nothing and the hook silently stops working.

`hook_problem(command)` checks one command; `check_settings(path)` every riffd hook in one file;
`hook_problems(paths)` says each broken one as a problem with the command that mends it.

Running a command found in a file is only safe when the file is the runner's own: riffd run as root
must never run what a user wrote into a settings file. So a command is run only from a file owned by
the effective user (`runnable`), and only when it is plain words in riffd's form (`riffd_words`: no
shell syntax beyond quoting, one of riffd's own launchers, then `hook pre-tool-use|session-start`
and options); any other riffd hook is left unchecked. A project's settings file comes with a clone,
and so may files beside it: a launcher is `riffd` (looked up on PATH), an absolute path to a `riffd`,
or a Python with `-P -m riffd` (`imports_its_folder`: without `-P`, as riffd wrote it before, it
is mended), and the check runs in `/`, so that neither a relative path nor `python -m` (the current
folder first on sys.path) reaches the project's own code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOOK_CHECK_SECONDS = 10.0  # the timeout riffd writes for its hooks
# An event neither hook answers (they let anything not theirs pass, silently, exit 0).
_CHECK_EVENT = json.dumps({"hook_event_name": "riffd-check", "session_id": ""}).encode()


_OURS = re.compile(r"(^|[/\s'\"])riffd['\"]?\s+hook\s+(pre-tool-use|session-start)\b")
# What riffd never writes into a hook command: a second command or a shell's substitution (`x.sh;
# riffd hook ...` is the user's own group, which uninstall must leave)
_SHELL_OPERATORS = re.compile(r"[;&|`<>\n]|\$\(")


def is_riffd_group(group: Any) -> bool:
    """Whether a hook group is riffd's: every hook in it runs `riffd hook
    pre-tool-use|session-start` alone (no other command before or after it)."""
    if (
        not isinstance(group, dict)
        or not isinstance(group.get("hooks"), list)
        or not group["hooks"]
    ):
        return False
    return all(
        isinstance(hook, dict)
        and isinstance(hook.get("command"), str)
        and _OURS.search(hook["command"])
        and not _SHELL_OPERATORS.search(hook["command"])
        for hook in group["hooks"]
    )


@dataclass(frozen=True)
class HookCheck:
    """One riffd hook command found in a settings file, and why it does not run (None: it runs)."""

    settings: Path
    event: str
    command: str
    problem: str | None


def hook_problem(command: str, timeout: float = HOOK_CHECK_SECONDS) -> str | None:
    """Run `command` as Claude Code runs a hook (`sh -c`, an event on stdin that no riffd hook
    answers); return None when it exits 0 in time, else what went wrong (the exit code and the last
    line it wrote on stderr)."""
    try:
        # in a session of its own: at the timeout the shell and all it started go (a child left
        # holding the pipes would keep riffd waiting for it)
        shell = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd="/",  # not the folder riffd runs in: a cloned project's files never run
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return f"/bin/sh cannot run it ({exc.strerror})"
    try:
        _out, err = shell.communicate(_CHECK_EVENT, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.communicate()
        return f"no answer within {timeout:g} s"
    if shell.returncode == 0:
        return None
    said = err.decode("utf-8", "replace").strip().splitlines()
    meaning = {126: "cannot be executed", 127: "not found"}.get(shell.returncode)
    return (
        f"exit {shell.returncode}"
        + (f" ({meaning})" if meaning else "")
        + (f": {said[-1]}" if said else "")
    )


def riffd_words(command: str) -> list[str] | None:
    """The words of `command` when it is riffd's form: plain words (what `shlex` splits it into,
    quoted again, is the command itself: no `;`, `$(...)`, redirection or glob), a launcher, then
    `hook pre-tool-use|session-start` and options; None when it is not."""
    from riffd.display import shell_command

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if shell_command(*words) != command or "hook" not in words:
        return None
    at = words.index("hook")
    if at + 1 >= len(words) or words[at + 1] not in ("pre-tool-use", "session-start"):
        return None
    return words if _riffd_launcher(words[:at]) else None


_PYTHON = re.compile(r"python[0-9.]*")


def _riffd_launcher(words: list[str]) -> bool:
    """Whether `words` run riffd as `riffd hook install` writes it: `riffd` on PATH, an absolute
    path to a `riffd`, or a Python (on PATH, or by an absolute path) with `-m riffd`."""
    if len(words) == 1:  # (riffd 0.2.0 quoted a launcher whole, some twice: `'... -m riffd'`)
        words = words[0].strip("'").split(" -m ") if " -m " in words[0] else [words[0].strip("'")]
        if len(words) == 1:
            return words[0] == "riffd" or (
                os.path.isabs(words[0]) and os.path.basename(words[0]) == "riffd"
            )
        words = [words[0], "-m", words[1]]
    if words[1:] in (["-m", "riffd"], ["-P", "-m", "riffd"]):
        python = words[0]
        return bool(_PYTHON.fullmatch(os.path.basename(python))) and (
            os.path.isabs(python) or os.sep not in python
        )
    return False


def imports_its_folder(command: str) -> bool:
    """Whether a riffd hook command is `python -m riffd` without `-P`: Claude Code runs it in the
    project's folder, which `-m` puts first on the path, so a project's `riffd.py` (or `json.py`)
    would run in riffd's place (riffd before 2026-11-28 wrote it so)."""
    words = riffd_words(command)
    if words is None:
        return False
    launcher = words[: words.index("hook")]
    return len(launcher) == 3 and launcher[1:] == ["-m", "riffd"]


def runnable(path: Path, command: str) -> bool:
    """Whether riffd may run `command` to check it: it comes from a file the effective user owns,
    and it is in riffd's form (`riffd_words`)."""
    try:
        owner = path.stat().st_uid
    except OSError:
        return False
    return owner == os.geteuid() and riffd_words(command) is not None


def check_settings(path: Path, by_path: bool = True) -> tuple[HookCheck, ...]:
    """Check every riffd hook in the settings file at `path` that riffd may run (`runnable`); none
    when the file is absent, does not parse, or holds no riffd hook (`hook install` says what is
    wrong with such a file). Without `by_path`, a command whose executable is looked up on PATH is
    left unchecked (a service's PATH is not the one Claude Code runs hooks with)."""
    from riffd.fsio import REAL_FILES

    try:  # (a FIFO named settings.json kept `riffd status` waiting for good)
        document = json.loads(REAL_FILES.read_file(path))
    except (OSError, ValueError):
        return ()
    hooks = document.get("hooks") if isinstance(document, dict) else None
    if not isinstance(hooks, dict):
        return ()
    found = [
        (event, hook["command"])
        for event, groups in hooks.items()
        if isinstance(groups, list)
        for group in groups
        if is_riffd_group(group)
        for hook in group["hooks"]
        if runnable(path, hook["command"])
        and (by_path or os.path.isabs(shlex.split(hook["command"])[0]))
    ]
    if not found:
        return ()
    # each check starts a Python: side by side, `status` waits for one, not for all
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(found)) as pool:
        problems = list(pool.map(hook_problem, [command for _event, command in found]))
    return tuple(
        HookCheck(path, event, command, problem)
        for (event, command), problem in zip(found, problems, strict=True)
    )


def mending_command(
    settings: Path, user_settings: Path | None = None, config: Path | None = None
) -> str:
    """The command that writes riffd's hooks into `settings` again, with a command that runs (this
    riffd by its path: it may not be on PATH, which is often why a hook broke, on the configuration
    file `config` when one is named): `riffd hook install` for the user's settings (`user_settings`,
    default Claude Code's folder's; in another folder, with `CLAUDE_CONFIG_DIR` naming it), with
    `--project DIR` for a project's `DIR/.claude/settings.local.json`; for its shared
    `settings.json` (where an older riffd wrote them, and install no longer does), `hook uninstall
    --project DIR` first, which takes them out of it."""
    from riffd.claude_code.settings import user_settings_path
    from riffd.display import riffd_words, shell_command, shell_word

    # the riffd that runs now: `riffd` may not be on PATH
    riffd = riffd_words(config, launcher=True)
    shells = user_settings_path().absolute()  # the user settings of the shell's Claude folder
    user = (user_settings or shells).absolute()
    if settings.absolute() == shells or settings.parent.name != ".claude":
        return shell_command(*riffd, "hook", "install")
    if settings.absolute() == user:  # the configuration's Claude folder's, another one
        install = shell_command(*riffd, "hook", "install")
        return f"CLAUDE_CONFIG_DIR={shell_word(str(user.parent))} {install}"
    install = shell_command(*riffd, "hook", "install", "--project", settings.parent.parent)
    if settings.name != "settings.json":
        return install
    uninstall = shell_command(*riffd, "hook", "uninstall", "--project", settings.parent.parent)
    return f"{uninstall} && {install}"


def hook_problems(
    paths: Sequence[Path],
    by_path: bool = True,
    user_settings: Path | None = None,
    config: Path | None = None,
) -> tuple[str, ...]:
    """Each riffd hook in the settings files `paths` that does not run, as a problem naming the
    file, the command, what went wrong and the command that mends it (`by_path`: see
    check_settings; `user_settings` and `config`: see mending_command)."""
    problems = []
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:  # (in ~, the project's settings.json is the user's own)
            continue
        seen.add(path.resolve())
        for check in check_settings(path, by_path):
            if check.problem is None:
                continue
            problems.append(
                f"the {check.event} hook in {path} does not run (`{check.command}`: "
                f"{check.problem}): Claude Code shows nothing and the hook does nothing; "
                f"`{mending_command(path, user_settings, config)}` writes a command that runs"
            )
    return tuple(problems)
