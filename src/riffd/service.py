"""`riffd service install | uninstall | status`: run `riffd run` as a systemd user unit (Linux) or a launchd
user agent (macOS).

The service files are rendered here from one template each; `systemd/riffd.service` and
`launchd/io.github.riffd.riffd.plist.in` in the repository are those templates rendered with example values,
and a test keeps them identical. A service does not see the login shell's environment, so the interpreter,
the `--config` path and riffd's environment overrides are written into the file.
"""

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
from xml.sax.saxutils import escape

import platformdirs

from riffd.paths import APP_NAME

UNIT_NAME = "riffd.service"
LAUNCHD_LABEL = "io.github.riffd.riffd"
# The overrides a service must be told about: it does not see the login shell's environment.
PASSED_ENVIRONMENT = ("RIFFD_STATE_DIR", "CLAUDE_CONFIG_DIR", "RIFFD_CONFIG")
COMMAND_TIMEOUT_SECONDS = 120.0  # `enable --now` waits for READY=1, up to the unit's TimeoutStartSec=60

_ParserT = TypeVar("_ParserT", bound=argparse.ArgumentParser)
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9/._+:=@,-]+")
# A placeholder alone on its line (replaced with the line included, so an empty value leaves no blank line),
# or inside a line.
_PLACEHOLDER = re.compile(r"^@(?P<line>[A-Z_]+)@\n|@(?P<inline>[A-Z_]+)@", re.MULTILINE)


class ServiceError(ValueError):
    """A service file cannot be written for these values; the message says why."""


def register(commands: argparse._SubParsersAction[_ParserT]) -> None:
    """Add `riffd service install | uninstall | status` to the `riffd` subcommands."""
    from riffd.cli import _Parser

    service = commands.add_parser(
        "service",
        help="run `riffd run` as a systemd user service (Linux) or launchd agent (macOS)",
        description="Install, remove or inspect the service that runs `riffd run` in the background: a systemd "
        "user unit on Linux, a launchd user agent on macOS. The file names this interpreter, the --config "
        "path and RIFFD_STATE_DIR, CLAUDE_CONFIG_DIR and RIFFD_CONFIG as they are set now.",
    )
    actions = service.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    install = actions.add_parser("install", help="write the service file, then enable and start the service")
    install.add_argument("--dry-run", action="store_true",
                         help="print the file and the commands; change nothing")
    install.set_defaults(run=run_install)
    uninstall = actions.add_parser("uninstall", help="stop and disable the service, then remove its file")
    uninstall.add_argument("--dry-run", action="store_true", help="print the commands; change nothing")
    uninstall.set_defaults(run=run_uninstall)
    status = actions.add_parser("status", help="show the service manager's status and whether the file is current")
    status.set_defaults(run=run_status)


# --- rendering -----------------------------------------------------------------------------------


def daemon_arguments(python: str, config: str | os.PathLike[str] | None = None) -> list[str]:
    """Given an interpreter and an optional config file, return the argv of the daemon: `python -m riffd
    [--config PATH] run`, with the config path made absolute (a service starts in another folder)."""
    arguments = [python, "-m", "riffd"]
    if config is not None:
        arguments += ["--config", _absolute(os.fspath(config))]
    return [*arguments, "run"]


def service_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return riffd's environment overrides that are set (and not empty) in `environ` (default: os.environ),
    each made an absolute path, in a fixed order."""
    env = os.environ if environ is None else environ
    return {name: _absolute(env[name]) for name in PASSED_ENVIRONMENT if env.get(name)}


def unit_text(exec_start: str, environment: Mapping[str, str]) -> str:
    """Return the systemd user unit with `exec_start` as the command line (already in systemd syntax) and one
    Environment= line per variable. Raise ServiceError for a value systemd cannot hold."""
    lines = [f"Environment={_systemd_quote(f'{name}={value}', exec_line=False)}"
             for name, value in environment.items()]
    return _fill(_UNIT_TEMPLATE, EXEC_START=exec_start, ENVIRONMENT="".join(line + "\n" for line in lines))


def render_unit(arguments: Sequence[str], environment: Mapping[str, str]) -> str:
    """Given the daemon's argv and environment, return the systemd user unit that runs it. Raise ServiceError
    for a value systemd cannot hold."""
    return unit_text(" ".join(_systemd_quote(argument, exec_line=True) for argument in arguments), environment)


def render_plist(arguments: Sequence[str], log_dir: str, environment: Mapping[str, str]) -> str:
    """Given the daemon's argv, the log folder and the environment, return the launchd agent's plist (each key
    once). Raise ServiceError for a value a plist cannot hold."""
    program = "".join(f"\t\t<string>{_xml(argument)}</string>\n" for argument in arguments)
    if environment:
        pairs = "".join(f"\t\t<key>{_xml(name)}</key>\n\t\t<string>{_xml(value)}</string>\n"
                        for name, value in environment.items())
        environment_block = _fill(_PLIST_ENVIRONMENT, PAIRS=pairs)
    else:
        environment_block = ""
    return _fill(_PLIST_TEMPLATE, PROGRAM_ARGUMENTS=program, LOG_DIR=_xml(log_dir), ENVIRONMENT=environment_block)


def systemd_unit_path() -> Path:
    """Return where a user unit goes: $XDG_CONFIG_HOME/systemd/user/riffd.service (default ~/.config/...)."""
    return Path(platformdirs.user_config_dir()) / "systemd" / "user" / UNIT_NAME


def launchd_plist_path() -> Path:
    """Return where a user agent goes: ~/Library/LaunchAgents/<label>.plist."""
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


# --- what each service manager needs -------------------------------------------------------------


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
    platform: str, python: str, config: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> ServicePlan:
    """Given sys.platform, the interpreter, the --config value and the environment, return what installing
    the service means there. Raise ServiceError on a platform without systemd or launchd support, or for
    values the service file cannot hold."""
    arguments = daemon_arguments(python, config)
    environment = service_environment(environ)
    if platform.startswith("linux"):
        systemctl = ("systemctl", "--user")
        return ServicePlan(
            manager="systemd",
            path=systemd_unit_path(),
            content=render_unit(arguments, environment),
            install=(Command((*systemctl, "daemon-reload")), Command((*systemctl, "enable", "--now", UNIT_NAME))),
            # enable --now leaves a running daemon on the old file; try-restart starts the new one.
            reinstall=(Command((*systemctl, "daemon-reload")), Command((*systemctl, "enable", "--now", UNIT_NAME)),
                       Command((*systemctl, "try-restart", UNIT_NAME))),
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
    raise ServiceError(f"riffd service: no service manager support on {platform!r} (systemd user units on Linux, "
                       "launchd on macOS); run `riffd run` under your own supervisor")


# --- the commands --------------------------------------------------------------------------------


def run_install(args: argparse.Namespace) -> int:
    """`riffd service install`: write the service file, then enable and start the service."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else install(plan, dry_run=args.dry_run)


def run_uninstall(args: argparse.Namespace) -> int:
    """`riffd service uninstall`: stop and disable the service, then remove its file."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else uninstall(plan, dry_run=args.dry_run)


def run_status(args: argparse.Namespace) -> int:
    """`riffd service status`: whether the file is current, then the service manager's own status."""
    plan = _plan_or_none(args)
    return _exit_error() if plan is None else show_status(plan)


def install(plan: ServicePlan, *, dry_run: bool) -> int:
    """Write `plan`'s file and run its install commands (or, with dry_run, print both); return 0 when done,
    2 when the file cannot be written or a command fails (the file then stays in place, and riffd says so)."""
    from riffd.cli import EXIT_ERROR, EXIT_OK

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
    if not _run_all(commands, plan, f"{plan.path} is written and stays in place: run the commands again once "
                    "this is fixed, or delete the file"):
        return EXIT_ERROR
    print(f"riffd: the {plan.manager} service is installed and started; `riffd service status` shows it",
          file=sys.stderr)
    return EXIT_OK


def uninstall(plan: ServicePlan, *, dry_run: bool) -> int:
    """Run `plan`'s uninstall commands, remove its file, then run the commands that follow removal (or, with
    dry_run, print all that); return 0 when done or nothing was installed, 2 when a step fails."""
    from riffd.cli import EXIT_ERROR, EXIT_OK

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
    if not _run_all(plan.uninstall, plan, f"{plan.path} stays in place"):
        return EXIT_ERROR
    try:
        plan.path.unlink(missing_ok=True)
    except OSError as exc:
        print(f"riffd: error: could not remove {plan.path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"riffd: removed {plan.path}", file=sys.stderr)
    if not _run_all(plan.after_uninstall, plan, f"{plan.path} is removed already"):
        return EXIT_ERROR
    return EXIT_OK


def show_status(plan: ServicePlan) -> int:
    """Print whether `plan`'s file exists and matches its content, then pass the service manager's status
    through; return 0 when installed, current and running, 1 otherwise, 2 when the manager cannot be asked."""
    from riffd.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK

    current = False
    if not plan.path.exists():
        print(f"service file: {plan.path}: not installed (`riffd service install`)")
    else:
        try:
            current = plan.path.read_text(encoding="utf-8") == plan.content
        except (OSError, UnicodeDecodeError) as exc:
            print(f"service file: {plan.path}: unreadable: {exc}")
        else:
            print(f"service file: {plan.path}: "
                  + ("up to date" if current else "differs from what `riffd service install` would write now "
                     "(another interpreter, --config or environment); run it again to update"))
    sys.stdout.flush()
    try:
        # Passed through: the service manager's own words, on our stdout and stderr.
        result = subprocess.run(plan.status.argv, check=False, timeout=COMMAND_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"riffd: error: could not run `{plan.status}`: {exc}\nhint: {plan.hint}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if current and result.returncode == 0 else EXIT_FINDINGS


# --- helpers -------------------------------------------------------------------------------------


def _config(args: argparse.Namespace) -> str | None:
    # The global --config option (`riffd --config PATH ...`) when the parser has it and it was given.
    config = getattr(args, "config", None)
    return None if config is None else os.fspath(config)


def _exit_error() -> int:
    from riffd.cli import EXIT_ERROR

    return EXIT_ERROR


def _plan_or_none(args: argparse.Namespace) -> ServicePlan | None:
    try:
        return plan_service(sys.platform, sys.executable, _config(args))
    except ServiceError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return None


def _run_all(commands: Sequence[Command], plan: ServicePlan, left_behind: str) -> bool:
    """Run `commands` in order, echoing their output on stderr; on the first failure report it with the hint
    and what was left behind, and return False."""
    for command in commands:
        try:
            result = subprocess.run(command.argv, capture_output=True, text=True, check=False,
                                    timeout=COMMAND_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            output, returncode = str(exc), None
        else:
            output, returncode = (result.stdout + result.stderr).strip(), result.returncode
        if returncode == 0:
            if output:
                print(output, file=sys.stderr)
            continue
        if command.may_fail:
            print(f"riffd: note: `{command}` exited {returncode} (nothing to undo): {output}", file=sys.stderr)
            continue
        failed = "could not be run" if returncode is None else f"failed (exit {returncode})"
        print(f"riffd: error: `{command}` {failed}:\n{output}\nhint: {plan.hint}\n{left_behind}.", file=sys.stderr)
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


def _fill(template: str, **values: str) -> str:
    """Replace each @NAME@ in `template` with values[NAME] in one pass, so a value (a path holding "@LOG_DIR@",
    say) is never substituted again."""
    return _PLACEHOLDER.sub(lambda match: values[match.group("line") or match.group("inline")], template)


def _absolute(value: str) -> str:
    return os.path.abspath(os.path.expanduser(value))


def _check_printable(value: str) -> None:
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        raise ServiceError(f"riffd service: {value!r} contains a control character; a service file cannot hold it")


def _systemd_quote(value: str, *, exec_line: bool) -> str:
    """Return `value` as one systemd word: `%` doubled (specifiers), on Exec lines `$` doubled (variable
    expansion), and double-quoted with C escapes unless it is plain."""
    _check_printable(value)
    if _SYSTEMD_PLAIN.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if exec_line:
        escaped = escaped.replace("$", "$$")
    return f'"{escaped}"'


def _xml(value: str) -> str:
    _check_printable(value)
    return escape(value)


_UNIT_TEMPLATE = """\
# riffd: keeps Claude Code session transcripts healthy. A systemd *user* unit that runs `riffd run`.
#
# `riffd service install` writes this file to ~/.config/systemd/user/riffd.service (or under
# $XDG_CONFIG_HOME) with the real command, `<python> -m riffd run`, and with the RIFFD_STATE_DIR,
# CLAUDE_CONFIG_DIR and RIFFD_CONFIG you have set; then it enables and starts the unit. By hand: copy this
# file there, set ExecStart= to your riffd, then
#   systemctl --user daemon-reload && systemctl --user enable --now riffd.service
# A user unit runs while you are logged in; `loginctl enable-linger $USER` keeps it running when you are not.

# What the unit is, and how often it may be restarted.
[Unit]
# The name `systemctl --user status riffd` shows.
Description=riffd: keeps Claude Code session transcripts healthy
# Count starts over 5 minutes for the limit below.
StartLimitIntervalSec=300
# At most 5 starts in that time; then systemd stops trying until `systemctl --user reset-failed riffd`.
StartLimitBurst=5

# How the daemon runs.
[Service]
# riffd reports readiness (READY=1), reloads and shutdown over $NOTIFY_SOCKET, and pings the watchdog.
Type=notify
# Only riffd's main process may send those notifications.
NotifyAccess=main
# The daemon. `riffd service install` writes the interpreter that has riffd installed, and --config if given.
ExecStart=@EXEC_START@
# Written by `riffd service install` from your shell (a service does not see your login shell's environment).
@ENVIRONMENT@
# `systemctl --user reload riffd` re-reads the configuration; a bad one keeps the old one and says why.
ExecReload=/bin/kill -HUP $MAINPID
# Restart after a crash or a watchdog timeout, not after a clean stop (riffd exits 0 on SIGTERM).
Restart=on-failure
# Seconds between restarts, so a daemon that fails at startup does not spin.
RestartSec=10
# READY=1 must arrive within this time, or the start counts as failed.
TimeoutStartSec=60
# After SIGTERM riffd stops watching, finishes or abandons the repair in hand and flushes its state; SIGKILL after.
TimeoutStopSec=30
# riffd pings every 30 s (half of this); a daemon silent for 60 s is killed and, by Restart=, started again.
WatchdogSec=60
# Background work: yield the CPU to what you are doing.
Nice=10

# Hardening: only options that work in a *user* unit without privileges, i.e. process attributes and seccomp
# filters that a process may set on itself. Left out on purpose: ProtectSystem=, ProtectHome=, PrivateTmp=,
# PrivateDevices=, ProtectKernel*=, ReadWritePaths= and PrivateNetwork= need a mount or network namespace, which
# a user manager can only create inside an unprivileged user namespace (PrivateUsers=) that many systems
# disable, and ProtectHome= would hide ~/.claude, the folder riffd repairs; MemoryDenyWriteExecute= can break
# Python's ctypes callbacks (libffi closures); CapabilityBoundingSet= has nothing to drop in a user service.
# No privilege gain through setuid binaries or file capabilities.
NoNewPrivileges=yes
# No switching of the execution domain (personality(2)).
LockPersonality=yes
# No realtime scheduling: riffd must never starve the desktop.
RestrictRealtime=yes
# No creating setuid or setgid files.
RestrictSUIDSGID=yes
# No new namespaces: riffd creates none.
RestrictNamespaces=yes
# Native system calls only, so 32-bit compatibility calls cannot slip past the filter below.
SystemCallArchitectures=native
# The system calls an ordinary service uses; riffd needs no others.
SystemCallFilter=@system-service
# A call outside that set fails with EPERM (riffd logs it) instead of killing the daemon.
SystemCallErrorNumber=EPERM
# Files riffd creates (state, backups) are yours alone.
UMask=0077

# How `systemctl --user enable` hooks the unit in.
[Install]
# Start with your user session.
WantedBy=default.target
"""

_PLIST_TEMPLATE = """\
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!--
  riffd: keeps Claude Code session transcripts healthy. A launchd user agent that runs `riffd run`.

  `riffd service install` writes this file to ~/Library/LaunchAgents/io.github.riffd.riffd.plist with the
  interpreter that has riffd installed, your log folder (from platformdirs) and the RIFFD_STATE_DIR,
  CLAUDE_CONFIG_DIR and RIFFD_CONFIG you have set, then runs `launchctl bootstrap gui/$UID <that file>`.
  Every key appears once: a plist dict keeps only the last of a repeated key.
-->
<plist version="1.0">
<dict>
\t<!-- The job's unique name (reverse DNS). -->
\t<key>Label</key>
\t<string>io.github.riffd.riffd</string>
\t<!-- The daemon: the interpreter that has riffd installed, `-m riffd run`. -->
\t<key>ProgramArguments</key>
\t<array>
@PROGRAM_ARGUMENTS@
\t</array>
\t<!-- Start when you log in, and when bootstrapped. -->
\t<key>RunAtLoad</key>
\t<true/>
\t<!-- Restart after a crash, not after a clean stop (riffd exits 0 on SIGTERM). -->
\t<key>KeepAlive</key>
\t<dict>
\t\t<key>SuccessfulExit</key>
\t\t<false/>
\t</dict>
\t<!-- At least 10 seconds between starts, so a daemon that fails at startup does not spin. -->
\t<key>ThrottleInterval</key>
\t<integer>10</integer>
\t<!-- After SIGTERM riffd finishes or abandons the repair in hand and flushes its state; SIGKILL after 30 s. -->
\t<key>ExitTimeOut</key>
\t<integer>30</integer>
\t<!-- Background work: macOS may throttle its CPU and I/O. -->
\t<key>ProcessType</key>
\t<string>Background</string>
\t<!-- Files riffd creates are yours alone (umask 077, written in decimal). -->
\t<key>Umask</key>
\t<integer>63</integer>
\t<!-- stdout (the daemon prints little). launchd creates these files but never rotates them. -->
\t<key>StandardOutPath</key>
\t<string>@LOG_DIR@/riffd.out.log</string>
\t<!-- stderr: riffd's log lines. -->
\t<key>StandardErrorPath</key>
\t<string>@LOG_DIR@/riffd.log</string>
@ENVIRONMENT@
</dict>
</plist>
"""

_PLIST_ENVIRONMENT = """\
\t<!-- From your shell when the file was written: a launchd agent does not see your login shell's environment. -->
\t<key>EnvironmentVariables</key>
\t<dict>
@PAIRS@\t</dict>
"""
