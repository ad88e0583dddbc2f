"""The service files that run `riffd run`: a systemd user unit (Linux) and a launchd user agent
(macOS).

The service files are rendered here from one template each; `systemd/riffd.service` and
`launchd/io.github.riffd.riffd.plist.in` in the repository are those templates rendered with example
values, and a test keeps them identical. A service does not see the login shell's environment, so
the interpreter, the `--config` path and riffd's environment overrides are written into the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

import platformdirs

UNIT_NAME = "riffd.service"
LAUNCHD_LABEL = "io.github.riffd.riffd"
# The overrides a service must be told about: it does not see the login shell's environment.
PASSED_ENVIRONMENT = (
    "RIFFD_STATE_DIR",
    "CLAUDE_CONFIG_DIR",
    "RIFFD_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
)


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9/._+:=@,-]+")
# A placeholder alone on its line (replaced with the line included, so an empty value leaves no
# blank line), or inside a line.
_PLACEHOLDER = re.compile(r"^@(?P<line>[A-Z_]+)@\n|@(?P<inline>[A-Z_]+)@", re.MULTILINE)


class ServiceError(ValueError):
    """A service file cannot be written for these values; the message says why."""


def daemon_arguments(
    python: str,
    config: str | os.PathLike[str] | None = None,
    log_file: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Given an interpreter, an optional config file and log file, return the argv of the daemon:
    `python -P -m riffd [--config PATH] run [--log-file PATH]`, paths made absolute (a service starts
    in another folder)."""
    arguments = [python, "-P", "-m", "riffd"]  # (-P: no riffd.py of the folder it starts in runs)
    if config is not None:
        arguments += ["--config", _absolute(os.fspath(config))]
    arguments.append("run")
    if log_file is not None:
        arguments += ["--log-file", _absolute(os.fspath(log_file))]
    return arguments


def service_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return riffd's environment overrides that are set (and not empty) in `environ` (default:
    os.environ), each made an absolute path, in a fixed order."""
    env = os.environ if environ is None else environ
    return {name: _absolute(env[name]) for name in PASSED_ENVIRONMENT if env.get(name)}


def unit_text(exec_start: str, environment: Mapping[str, str]) -> str:
    """Return the systemd user unit with `exec_start` as the command line (already in systemd
    syntax) and one Environment= line per variable. Raise ServiceError for a value systemd cannot
    hold."""
    lines = [
        f"Environment={_systemd_quote(f'{name}={value}', exec_line=False)}"
        for name, value in environment.items()
    ]
    return _fill(
        _UNIT_TEMPLATE, EXEC_START=exec_start, ENVIRONMENT="".join(line + "\n" for line in lines)
    )


def render_unit(arguments: Sequence[str], environment: Mapping[str, str]) -> str:
    """Given the daemon's argv and environment, return the systemd user unit that runs it. Raise
    ServiceError for a value systemd cannot hold."""
    return unit_text(
        " ".join(_systemd_quote(argument, exec_line=True) for argument in arguments), environment
    )


def render_plist(arguments: Sequence[str], log_dir: str, environment: Mapping[str, str]) -> str:
    """Given the daemon's argv, the log folder and the environment, return the launchd agent's plist
    (each key once). Raise ServiceError for a value a plist cannot hold."""
    program = "".join(f"\t\t<string>{_xml(argument)}</string>\n" for argument in arguments)
    if environment:
        pairs = "".join(
            f"\t\t<key>{_xml(name)}</key>\n\t\t<string>{_xml(value)}</string>\n"
            for name, value in environment.items()
        )
        environment_block = _fill(_PLIST_ENVIRONMENT, PAIRS=pairs)
    else:
        environment_block = ""
    return _fill(
        _PLIST_TEMPLATE,
        PROGRAM_ARGUMENTS=program,
        LOG_DIR=_xml(log_dir),
        ENVIRONMENT=environment_block,
    )


def systemd_unit_path() -> Path:
    """Return where a user unit goes: $XDG_CONFIG_HOME/systemd/user/riffd.service (default
    ~/.config/...)."""
    return Path(platformdirs.user_config_dir()) / "systemd" / "user" / UNIT_NAME


def launchd_plist_path() -> Path:
    """Return where a user agent goes: ~/Library/LaunchAgents/<label>.plist."""
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def _fill(template: str, **values: str) -> str:
    """Replace each @NAME@ in `template` with values[NAME] in one pass, so a value (a path holding
    "@LOG_DIR@", say) is never substituted again."""
    return _PLACEHOLDER.sub(
        lambda match: values[match.group("line") or match.group("inline")], template
    )


def _absolute(value: str) -> str:
    return os.path.abspath(os.path.expanduser(value))


def _check_printable(value: str) -> None:
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        raise ServiceError(
            f"riffd service: {value!r} contains a control character; a service file cannot hold it"
        )


def _systemd_quote(value: str, *, exec_line: bool) -> str:
    """Return `value` as one systemd word: `%` doubled (specifiers), on Exec lines `$` doubled
    (variable expansion), and double-quoted with C escapes unless it is plain."""
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
# $XDG_CONFIG_HOME) with the real command, `<python> -m riffd run`, the config file and state folder the CLI
# uses, and the CLAUDE_CONFIG_DIR, RIFFD_CONFIG and XDG folders you have set; then it enables and starts the
# unit. By hand: copy this file there, set ExecStart= to your riffd, then
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
# The daemon. `riffd service install` writes the interpreter that has riffd installed, and the config file.
ExecStart=@EXEC_START@
# Written by `riffd service install` from your shell (a service does not see your login shell's environment).
@ENVIRONMENT@
# `systemctl --user reload riffd` re-reads the configuration; a bad one keeps the old one and says why.
ExecReload=/bin/kill -HUP $MAINPID
# Restart after a crash or a watchdog timeout, not after a clean stop (riffd exits 0 on SIGTERM).
Restart=on-failure
# Nor after exit 2 (a bad configuration, or another daemon holding the state folder): a restart cannot mend it.
RestartPreventExitStatus=2
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
  interpreter that has riffd installed, your log folder (from platformdirs), the config file and state
  folder the CLI uses, and the CLAUDE_CONFIG_DIR, RIFFD_CONFIG and XDG folders you have set, then runs
  `launchctl bootstrap gui/$UID <that file>`.
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
\t<!-- Restart after a crash only: not after a clean stop (exit 0 on SIGTERM), nor after exit 2 (a bad
\t     configuration, or another daemon holding the state folder), which a restart cannot mend. -->
\t<key>KeepAlive</key>
\t<dict>
\t\t<key>Crashed</key>
\t\t<true/>
\t</dict>
\t<!-- At least 10 seconds between starts, so a daemon that fails at startup does not spin. -->
\t<key>ThrottleInterval</key>
\t<integer>10</integer>
\t<!-- After SIGTERM riffd finishes or abandons the repair in hand and flushes its state; SIGKILL after 30 s. -->
\t<key>ExitTimeOut</key>
\t<integer>30</integer>
\t<!-- Background work: macOS may throttle its CPU and I/O; and the lowest share of the CPU beside you. -->
\t<key>ProcessType</key>
\t<string>Background</string>
\t<key>Nice</key>
\t<integer>10</integer>
\t<!-- Files riffd creates are yours alone (umask 077, written in decimal). -->
\t<key>Umask</key>
\t<integer>63</integer>
\t<!-- riffd logs to @LOG_DIR@/riffd.log itself (its log-file option), rotated at 10 MB. launchd never rotates
\t     these two: they hold only what is printed before logging starts (a bad configuration, say). -->
\t<key>StandardOutPath</key>
\t<string>@LOG_DIR@/riffd.out.log</string>
\t<key>StandardErrorPath</key>
\t<string>@LOG_DIR@/riffd.err.log</string>
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
