"""`riffd service install | uninstall | status`: run `riffd run` as a systemd user unit (Linux) or a
launchd user agent (macOS), with the file rendered by riffd.daemon.service_files."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import platformdirs

from riffd.commands.arguments import Parser
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.config import ConfigError, config_path, load_config
from riffd.daemon.service_files import (
    LAUNCHD_LABEL,
    UNIT_NAME,
    ServiceError,
    daemon_arguments,
    launchd_plist_path,
    render_plist,
    render_unit,
    service_environment,
    systemd_unit_path,
)
from riffd.paths import APP_NAME

# `enable --now` waits for READY=1, up to the unit's TimeoutStartSec=60
COMMAND_TIMEOUT_SECONDS = 120.0

_ParserT = TypeVar("_ParserT", bound=argparse.ArgumentParser)


def register(commands: argparse._SubParsersAction[_ParserT]) -> None:
    """Add `riffd service install | uninstall | status` to the `riffd` subcommands."""

    service = commands.add_parser(
        "service",
        help="run `riffd run` as a systemd user service (Linux) or launchd agent (macOS)",
        description="Install, remove or inspect the service that runs `riffd run` in the background: a systemd "
        "user unit on Linux, a launchd user agent on macOS. The file names this interpreter, the --config "
        "path and RIFFD_STATE_DIR, CLAUDE_CONFIG_DIR and RIFFD_CONFIG as they are set now.",
    )
    actions = service.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    install = actions.add_parser(
        "install", help="write the service file, then enable and start the service"
    )
    install.add_argument(
        "--dry-run", action="store_true", help="print the file and the commands; change nothing"
    )
    install.set_defaults(run=run_install)
    uninstall = actions.add_parser(
        "uninstall", help="stop and disable the service, then remove its file"
    )
    uninstall.add_argument(
        "--dry-run", action="store_true", help="print the commands; change nothing"
    )
    uninstall.set_defaults(run=run_uninstall)
    status = actions.add_parser(
        "status", help="show the service manager's status and whether the file is current"
    )
    status.set_defaults(run=run_status)


@dataclass(frozen=True)
class Command:
    """One service-manager command; `may_fail` when failure only means there was nothing to undo."""

    argv: tuple[str, ...]
    may_fail: bool = False

    def __str__(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class ServicePlan:
    """The service file for this platform and the commands that install, remove and inspect it."""

    manager: str
    path: Path
    content: str
    install: tuple[Command, ...]
    reinstall: tuple[Command, ...]  # instead of `install` when the file is already there
    uninstall: tuple[Command, ...]  # before the file is removed
    after_uninstall: tuple[Command, ...]  # after it is removed
    status: Command
    hint: str
    log_dir: Path | None = None  # a folder install must create (launchd does not create it)


def plan_service(
    platform: str,
    python: str,
    config: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
) -> ServicePlan:
    """Given sys.platform, the interpreter, the --config value and the environment, return what
    installing the service means there. Raise ServiceError on a platform without systemd or launchd
    support, or for values the service file cannot hold."""
    env = os.environ if environ is None else environ
    # A service sees neither the login shell's environment nor its folders: pin the config file the
    # CLI would read (when there is one), the state folder it would use, and the XDG folders behind
    # both.
    resolved = config_path(Path(config) if config is not None else None, env)
    if config is None and resolved.is_file():
        config = resolved
    arguments = daemon_arguments(python, config)
    environment = service_environment(env)
    if "RIFFD_STATE_DIR" not in environment:
        try:
            environment["RIFFD_STATE_DIR"] = str(
                load_config(resolved if resolved.is_file() else None, environ=env).state_dir
            )
        except ConfigError as exc:  # (the daemon would stop at them; a default folder pinned
            # here would outlast their mending, and split the state from the configured one)
            raise ServiceError(
                "the configuration has errors; mend them first (`riffd config validate` lists "
                "them): " + "; ".join(exc.errors)
            ) from None
    if platform.startswith("linux"):
        systemctl = ("systemctl", "--user")
        return ServicePlan(
            manager="systemd",
            path=systemd_unit_path(),
            content=render_unit(arguments, environment),
            install=(
                Command((*systemctl, "daemon-reload")),
                Command((*systemctl, "enable", "--now", UNIT_NAME)),
            ),
            # enable --now leaves a running daemon on the old file; try-restart starts the new one.
            reinstall=(
                Command((*systemctl, "daemon-reload")),
                Command((*systemctl, "enable", "--now", UNIT_NAME)),
                Command((*systemctl, "try-restart", UNIT_NAME)),
            ),
            uninstall=(Command((*systemctl, "disable", "--now", UNIT_NAME)),),
            after_uninstall=(Command((*systemctl, "daemon-reload")),),
            status=Command((*systemctl, "status", "--no-pager", UNIT_NAME)),
            hint="`systemctl --user` needs a systemd user instance: a login session under systemd (most "
            "containers, and WSL without systemd=true in /etc/wsl.conf, have none). Check with `systemctl --user "
            "status`. To keep riffd running while you are logged out: `loginctl enable-linger $USER`.",
        )
    if platform == "darwin":
        domain = f"gui/{os.getuid()}"
        path = launchd_plist_path()
        log_dir = Path(platformdirs.user_log_dir(APP_NAME))
        arguments = daemon_arguments(python, config, log_dir / "riffd.log")  # rotated by riffd
        bootout = Command(("launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"), may_fail=True)
        bootstrap = Command(("launchctl", "bootstrap", domain, str(path)))
        return ServicePlan(
            manager="launchd",
            path=path,
            content=render_plist(arguments, str(log_dir), environment),
            install=(bootstrap,),
            reinstall=(bootout, bootstrap),  # bootstrap refuses a label that is already loaded
            uninstall=(bootout,),
            after_uninstall=(),
            status=Command(("launchctl", "print", f"{domain}/{LAUNCHD_LABEL}")),
            hint=f"launchctl needs your logged-in GUI session ({domain}); over ssh without one, log in at the "
            f"Mac first. `launchctl print {domain}` shows the domain.",
            log_dir=log_dir,
        )
    raise ServiceError(
        f"riffd service: no service manager support on {platform!r} (systemd user units on Linux, "
        "launchd on macOS); run `riffd run` under your own supervisor"
    )


def run_install(args: argparse.Namespace) -> int:
    """`riffd service install`: write the service file, then enable and start the service."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else install(plan, dry_run=args.dry_run)


def run_uninstall(args: argparse.Namespace) -> int:
    """`riffd service uninstall`: stop and disable the service, then remove its file."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else uninstall(plan, dry_run=args.dry_run)


def run_status(args: argparse.Namespace) -> int:
    """`riffd service status`: whether the file is current, then the service manager's own
    status."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else show_status(plan)


def install(plan: ServicePlan, *, dry_run: bool) -> int:
    """Write `plan`'s file and run its install commands (or, with dry_run, print both); return 0
    when done, 2 when the file cannot be written or a command fails (the file then stays in place,
    and riffd says so)."""

    commands = plan.reinstall if plan.path.exists() else plan.install
    if dry_run:
        print(f"would write {plan.path}:")
        sys.stdout.write(plan.content)
        if plan.log_dir is not None:
            print(f"would create {plan.log_dir}")
        for command in commands:
            print(f"would run: {command}")
        print("riffd: dry run: nothing written, nothing run", file=sys.stderr)
        return EXIT_OK
    try:
        _write(plan.path, plan.content)
        if plan.log_dir is not None:
            plan.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        print(f"riffd: error: could not write {plan.path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"riffd: wrote {plan.path}", file=sys.stderr)
    if not _run_all(
        commands,
        plan,
        f"{plan.path} is written and stays in place: run the commands again once "
        "this is fixed, or delete the file",
    ):
        return EXIT_ERROR
    print(
        f"riffd: the {plan.manager} service is installed and started; `riffd service status` shows it",
        file=sys.stderr,
    )
    return EXIT_OK


def uninstall(plan: ServicePlan, *, dry_run: bool) -> int:
    """Run `plan`'s uninstall commands, remove its file, then run the commands that follow removal
    (or, with dry_run, print all that); return 0 when done or nothing was installed, 2 when a step
    fails."""

    if not plan.path.exists():
        print(f"riffd: {plan.path} does not exist: the service is not installed", file=sys.stderr)
        return EXIT_OK
    if dry_run:
        for command in plan.uninstall:
            print(f"would run: {command}")
        print(f"would remove {plan.path}")
        for command in plan.after_uninstall:
            print(f"would run: {command}")
        print("riffd: dry run: nothing removed, nothing run", file=sys.stderr)
        return EXIT_OK
    # The file goes even when the service manager cannot be asked (no systemd user instance: WSL,
    # containers): riffd always removes what it wrote, and says what it could not do.
    stopped = _run_all(plan.uninstall, plan, f"{plan.path} is removed all the same")
    try:
        plan.path.unlink(missing_ok=True)
    except OSError as exc:
        print(f"riffd: error: could not remove {plan.path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"riffd: removed {plan.path}", file=sys.stderr)
    if not stopped:
        print(
            f"riffd: error: {plan.manager} could not be asked to stop and disable the service (see above); if a "
            "riffd daemon still runs, stop it by hand (`riffd status` shows its pid)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if not _run_all(plan.after_uninstall, plan, f"{plan.path} is removed already"):
        return EXIT_ERROR
    return EXIT_OK


# What systemctl says when it cannot reach the user's systemd instance (no user bus: a container,
# WSL without systemd, a shell outside the login session), its exit code that of a dead service:
# "Failed to connect to bus: ..." before systemd 257, "Failed to connect to user scope bus via local
# transport: ..." since
UNREACHABLE = re.compile(r"^Failed to connect to (?:\S+ )*?bus\b", re.MULTILINE)


def show_status(plan: ServicePlan) -> int:
    """Print whether `plan`'s file exists and matches its content, then pass the service manager's
    status through; return 0 when installed, current and running, 1 otherwise, 2 when the manager
    cannot be asked."""

    current = False
    if not plan.path.exists():
        print(f"service file: {plan.path}: not installed (`riffd service install`)")
    else:
        try:
            current = plan.path.read_text(encoding="utf-8") == plan.content
        except (OSError, UnicodeDecodeError) as exc:
            print(f"service file: {plan.path}: unreadable: {exc}")
        else:
            print(
                f"service file: {plan.path}: "
                + (
                    "up to date"
                    if current
                    else "differs from what `riffd service install` would write now "
                    "(another interpreter, --config or environment); run it again to update"
                )
            )
    sys.stdout.flush()
    try:
        # Passed through: the service manager's own words, on our stdout and stderr (the latter
        # read first, to tell a manager that cannot be reached from a service that is not running)
        result = subprocess.run(
            plan.status.argv,
            check=False,
            timeout=COMMAND_TIMEOUT_SECONDS,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(
            f"riffd: error: could not run `{plan.status}`: {exc}\nhint: {plan.hint}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    sys.stderr.write(result.stderr)
    if result.returncode != 0 and UNREACHABLE.search(result.stderr):
        print(
            f"riffd: error: `{plan.status}` could not reach the service manager\nhint: {plan.hint}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK if current and result.returncode == 0 else EXIT_FINDINGS


def _config(args: argparse.Namespace) -> str | None:
    # The global --config option (`riffd --config PATH ...`) when the parser has it and it was
    # given.
    config = getattr(args, "config", None)
    return None if config is None else os.fspath(config)


def _exit_error() -> int:

    return EXIT_ERROR


def _plan_or_none(args: argparse.Namespace) -> ServicePlan | None:
    try:
        return plan_service(sys.platform, sys.executable, _config(args))
    except ServiceError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return None


def _run_all(commands: Sequence[Command], plan: ServicePlan, left_behind: str) -> bool:
    """Run `commands` in order, echoing their output on stderr; on the first failure report it with
    the hint and what was left behind, and return False."""
    for command in commands:
        try:
            result = subprocess.run(
                command.argv,
                capture_output=True,
                text=True,
                check=False,
                timeout=COMMAND_TIMEOUT_SECONDS,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            output, returncode = str(exc), None
        else:
            output, returncode = (result.stdout + result.stderr).strip(), result.returncode
        if returncode == 0:
            if output:
                print(output, file=sys.stderr)
            continue
        if command.may_fail:
            print(
                f"riffd: note: `{command}` exited {returncode} (nothing to undo): {output}",
                file=sys.stderr,
            )
            continue
        failed = "could not be run" if returncode is None else f"failed (exit {returncode})"
        print(
            f"riffd: error: `{command}` {failed}:\n{output}\nhint: {plan.hint}\n{left_behind}.",
            file=sys.stderr,
        )
        return False
    return True


def _write(path: Path, content: str) -> None:
    """Write `content` to `path` by atomic replace, so a service manager never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.riffd-{os.getpid()}.tmp")
    try:
        with open(staging, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(staging, 0o644)  # service files hold no secrets; the manager reads them as you
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
