"""`riffd hook`: wiring riffd into Claude Code (`install`, `uninstall`) and the hooks Claude Code
runs (`pre-tool-use`, `session-start`). The console script runs the two hooks directly, without this
parser; here they are for `--help` and `python -m riffd`."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

from riffd.claude_code.settings import (
    project_local_settings_path,
    project_settings_path,
    user_settings_path,
)
from riffd.commands.arguments import positive_number
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.display import riffd_launcher, shell_command
from riffd.hooks import session_start
from riffd.hooks.install import (
    SettingsError,
    apply,
    holds_riffd_hooks,
    plan_install,
    plan_uninstall,
)
from riffd.hooks.pre_tool_use import MODES, run
from riffd.tracker.calls import DEFAULT_WINDOW


def register(commands: Any) -> None:
    """Add `hook pre-tool-use` to the riffd command parser (the console script runs it without that
    parser)."""
    hook = commands.add_parser(
        "hook",
        help="Claude Code hook commands (settings.json runs them)",
        description="Commands Claude Code runs as hooks; they read the hook's JSON on stdin and answer on stdout.",
    )
    events = hook.add_subparsers(dest="event", metavar="EVENT", parser_class=type(hook))
    pre = events.add_parser(
        "pre-tool-use",
        help="note (or serve from the cache) a tool call that repeats a recent identical call",
        description="A PreToolUse hook: look at the session's transcript for the same call within the window. "
        "warn lets the call run and tells the model it repeats an earlier call; cache stops it and hands back the "
        "earlier result when nothing could have changed it. Any error lets the call run.",
    )
    pre.add_argument("--mode", choices=MODES, default="warn", help="warn (default) or cache")
    pre.add_argument(
        "--window",
        type=positive_number,
        default=DEFAULT_WINDOW,
        metavar="SECONDS",
        help=f"how far back a call counts as recent (default: {DEFAULT_WINDOW:.0f})",
    )
    pre.set_defaults(run=run_command)
    start = events.add_parser(
        "session-start",
        help="warn when the session being resumed is still open in another Claude Code process",
        description="A SessionStart hook: when the session that starts is registered (<config dir>/sessions/) to "
        "another live Claude Code process, tell the user, naming that process: resuming while it runs a tool writes "
        "a second, interrupted result beside the real one. Any error lets the session start.",
    )
    start.set_defaults(run=lambda args: session_start.run(sys.stdin.buffer, sys.stdout))
    for name, verb in (("install", "add"), ("uninstall", "take out")):
        command = events.add_parser(
            name,
            help=f"{verb} riffd's hooks in Claude Code's settings.json",
            description=f"{verb.capitalize()} riffd's PreToolUse hook (redundant tool calls, warn mode) and "
            "SessionStart hook (a resume of a session open elsewhere) in Claude Code's user settings "
            "($CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json) or a project's .claude/settings.local.json. "
            "Every other key and hook stays as it is; the previous file is kept in <state dir>/settings-backups/; "
            "the new one is written atomically. Install twice changes nothing the second time; uninstall after "
            "install gives the file back byte for byte when nothing else changed in it. A file that does not parse "
            "is refused.",
        )
        command.add_argument(
            "--dry-run", action="store_true", help="show the change; write nothing"
        )
        command.add_argument(
            "--project",
            type=Path,
            metavar="DIR",
            help="the project's DIR/.claude/settings.local.json (this machine's; the hooks name a "
            "path on it) instead of the user settings"
            + (
                "; its settings.json too, where an older riffd wrote them"
                if name == "uninstall"
                else ""
            ),
        )
        command.set_defaults(run=run_install if name == "install" else run_uninstall)


def run_command(args: Any) -> int:
    """`riffd hook pre-tool-use` reached through the full command line: the same code as the console
    script."""
    return run(args.mode, args.window, sys.stdin.buffer, sys.stdout)


def _settings_path(args: argparse.Namespace) -> Path:
    return project_local_settings_path(args.project) if args.project else user_settings_path()


def run_install(args: argparse.Namespace) -> int:
    """`riffd hook install`: exit 0 added (or there already), 2 refused."""
    if args.project and not Path(args.project).is_dir():
        print(
            f"riffd: error: --project {args.project}: no such folder; name the project's folder "
            "(where you run `claude`)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    path = _settings_path(args)
    try:
        change = plan_install(path, riffd_launcher(elsewhere=True))
    except SettingsError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.project and holds_riffd_hooks(project_settings_path(args.project)):
        print(
            f"riffd: note: {project_settings_path(args.project)} (shared: teams commit it) holds riffd's "
            "hooks too, with a path of one machine (an older riffd wrote them there): "
            f"`{shell_command('riffd', 'hook', 'uninstall', '--project', args.project)}` takes them "
            "out of both files; then install again",
            file=sys.stderr,
        )
    code = _carry_out(args, change, "install")
    if args.project and code == EXIT_OK and not args.dry_run and _tracked_by_git(path):
        print(
            f"riffd: note: git does not ignore {path}: it names a path on this machine; add "
            "`.claude/settings.local.json` to the project's .gitignore (Claude Code does when it "
            "makes the file)",
            file=sys.stderr,
        )
    return code


def _tracked_by_git(path: Path) -> bool:
    """Whether `path` lies in a git work tree that does not ignore it (False without git)."""
    import subprocess

    try:
        checked = subprocess.run(
            ["git", "check-ignore", "-q", path.name],
            cwd=path.parent,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return checked.returncode == 1  # 0: ignored; 128: not a work tree (or git failed)


def run_uninstall(args: argparse.Namespace) -> int:
    """`riffd hook uninstall`: exit 0 taken out (or not there), 2 refused. With `--project`, out of
    the project's settings.local.json and (where an older riffd wrote them) its settings.json."""
    paths = [_settings_path(args)]
    if args.project:
        paths.append(project_settings_path(args.project))
    state_dir = config_for_folders(args).state_dir
    worst = EXIT_OK
    for path in paths:
        try:
            change = plan_uninstall(path, state_dir)
        except SettingsError as exc:
            print(f"riffd: error: {exc}", file=sys.stderr)
            worst = EXIT_ERROR
            continue
        if path != paths[0] and not change.changed:
            continue  # the shared file, without riffd's hooks: nothing to say about it
        worst = max(worst, _carry_out(args, change, "uninstall"))
    return worst


def _carry_out(args: argparse.Namespace, change: Any, kind: str) -> int:
    """Write `change` (or show it, `--dry-run`); what it does is said once it is done (a settings
    file that cannot be written leaves no "added" behind), or, in a dry run, above its diff."""

    def say_notes() -> None:
        for note in change.notes:
            print(f"{change.path}: {note}")

    if not change.changed:
        say_notes()
        print(f"{change.path}: nothing to change")
        return EXIT_OK
    if args.dry_run:
        say_notes()
        before = (change.before or b"").decode("utf-8").splitlines(keepends=True)
        after = (change.after or b"").decode("utf-8").splitlines(keepends=True)
        sys.stdout.writelines(
            difflib.unified_diff(before, after, f"{change.path} (now)", f"{change.path} ({kind})")
        )
        print(f"riffd: dry run: {change.path} not written", file=sys.stderr)
        return EXIT_OK
    try:
        saved = apply(change, config_for_folders(args).state_dir, kind)
    except SettingsError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    say_notes()
    print(
        f"riffd: {change.path} {'removed' if change.after is None else 'written'}; the previous file is kept in "
        f"{saved}"
        + (
            "; Claude Code picks the hooks up in new sessions (`/hooks` shows them)"
            if kind == "install"
            else ""
        ),
        file=sys.stderr,
    )
    return EXIT_OK
