"""`riffd service` and the systemd notify client: the service files name the real command, pass
`systemd-analyze verify` and parse as plists; install --dry-run changes nothing; notify sends exact
datagrams."""

from __future__ import annotations

import dataclasses
import os
import plistlib
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO_DIR
from riffd import paths
from riffd.commands import service
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.daemon import service_files as units
from riffd.daemon.notify import Notifier

REPO = REPO_DIR
REPO_UNIT = REPO / "systemd" / "riffd.service"
REPO_PLIST = REPO / "launchd" / f"{units.LAUNCHD_LABEL}.plist.in"
ENVIRONMENT_NAMES = (
    "RIFFD_STATE_DIR",
    "CLAUDE_CONFIG_DIR",
    "RIFFD_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home folder with none of riffd's or XDG's overrides set."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    for name in ENVIRONMENT_NAMES:
        monkeypatch.delenv(name, raising=False)
    return folder


def directive(unit: str, key: str) -> list[str]:
    """Return the values of `key=` lines in a unit file."""
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


# --- the files in the repository -----------------------------------------------------------------


def test_repo_unit_is_the_template_that_install_renders() -> None:
    """The repository's unit cannot drift from what `riffd service install` writes."""
    unit = REPO_UNIT.read_text()
    assert unit == units.unit_text("%h/.local/bin/riffd run", {})
    assert directive(unit, "ExecStart") == ["%h/.local/bin/riffd run"]
    assert directive(unit, "Type") == ["notify"]
    assert directive(unit, "ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert directive(unit, "WantedBy") == ["default.target"]


def test_every_line_of_the_unit_is_commented() -> None:
    lines = REPO_UNIT.read_text().splitlines()
    for number, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[number - 1].startswith("#"), (
                f"line {number + 1} has no comment above it: {line}"
            )


def test_repo_plist_is_the_template_that_install_renders() -> None:
    text = REPO_PLIST.read_text()
    assert text == units.render_plist(["@PYTHON@", "-m", "riffd", "run"], "@LOG_DIR@", {})
    assert "/Users/" not in text
    assert plistlib.loads(text.encode())["ProgramArguments"] == ["@PYTHON@", "-m", "riffd", "run"]


# --- systemd -------------------------------------------------------------------------------------


def verify_problems(unit_text: str, folder: Path, home_folder: Path) -> list[str]:
    """Run `systemd-analyze verify --user` on `unit_text` as riffd.service; return the problems it
    reports about that file (exit status and every line naming it: unknown keys are only warnings
    there)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    folder.mkdir(parents=True, exist_ok=True)
    unit = folder / units.UNIT_NAME
    unit.write_text(unit_text)
    # --user needs $XDG_RUNTIME_DIR, which a CI job or container may lack
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    environment = dict(os.environ, HOME=str(home_folder), XDG_RUNTIME_DIR=str(runtime))
    result = subprocess.run(
        [analyze, "verify", "--user", "--man=no", str(unit)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    problems = [line for line in output.splitlines() if units.UNIT_NAME in line]
    if result.returncode != 0:
        problems.append(f"exit {result.returncode}: {output.strip()}")
    return problems


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_units_pass_systemd_analyze_verify(home: Path, tmp_path: Path) -> None:
    # The repository's example runs %h/.local/bin/riffd; verify checks that it is executable.
    example = home / ".local" / "bin" / "riffd"
    example.parent.mkdir(parents=True)
    example.write_text("#!/bin/sh\n")
    example.chmod(0o755)
    assert verify_problems(REPO_UNIT.read_text(), tmp_path / "repo", home) == []

    odd = str(tmp_path / 'odd 100% "$HOME" \\ state')
    rendered = units.render_unit(
        units.daemon_arguments(sys.executable, tmp_path / "my config.toml"),
        units.service_environment({"RIFFD_STATE_DIR": odd}),
    )
    assert verify_problems(rendered, tmp_path / "rendered", home) == []

    # The check fails on real mistakes: a misspelled directive, and a command that does not exist.
    misspelled = rendered.replace("NoNewPrivileges=", "NoNewPrivilegez=")
    assert any(
        "NoNewPrivilegez" in problem
        for problem in verify_problems(misspelled, tmp_path / "bad1", home)
    )
    missing = rendered.replace(f"ExecStart={sys.executable}", f"ExecStart={tmp_path}/no/python")
    assert verify_problems(missing, tmp_path / "bad2", home) != []


def test_rendered_unit_runs_this_interpreter(home: Path) -> None:
    plan = service.plan_service("linux", sys.executable, None)
    assert plan.path == home / ".config" / "systemd" / "user" / "riffd.service"
    (exec_start,) = directive(plan.content, "ExecStart")
    assert exec_start == " ".join(
        units._systemd_quote(word, exec_line=True)
        for word in (sys.executable, "-P", "-m", "riffd", "run")
    )
    assert exec_start.endswith(" -P -m riffd run")
    # The state folder the CLI uses here is pinned: a service does not see the shell's environment.
    assert directive(plan.content, "Environment") == [f"RIFFD_STATE_DIR={paths.state_dir()}"]


def test_rendered_unit_passes_overrides_and_config_as_absolute_paths(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": "~/claude",
        "RIFFD_CONFIG": "relative.toml",
        "PATH": "/usr/bin",
    }
    plan = service.plan_service("linux", "/opt/py/bin/python3", "riffd.toml", environ)
    assert directive(plan.content, "ExecStart") == [
        f"/opt/py/bin/python3 -P -m riffd --config {tmp_path}/riffd.toml run"
    ]
    assert directive(plan.content, "Environment") == [
        f"RIFFD_STATE_DIR={tmp_path}/state",
        f"CLAUDE_CONFIG_DIR={home}/claude",
        f"RIFFD_CONFIG={tmp_path}/relative.toml",
    ]


def test_unit_quotes_what_systemd_would_expand() -> None:
    unit = units.render_unit(
        ["/opt/my python/bin/python3", "-m", "riffd", "--config", '/c/50% "$x"', "run"],
        {"RIFFD_STATE_DIR": '/s/50% "$x"'},
    )
    assert directive(unit, "ExecStart") == [
        '"/opt/my python/bin/python3" -m riffd --config "/c/50%% \\"$$x\\"" run'
    ]
    assert directive(unit, "Environment") == ['"RIFFD_STATE_DIR=/s/50%% \\"$x\\""']
    with pytest.raises(units.ServiceError, match="control character"):
        units.render_unit(
            ["/usr/bin/python3", "-m", "riffd", "--config", "a\nExecStartPre=/bin/rm", "run"], {}
        )


def test_unit_honours_xdg_config_home(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert units.systemd_unit_path() == tmp_path / "xdg" / "systemd" / "user" / "riffd.service"


# --- launchd -------------------------------------------------------------------------------------


def repeated_keys(plist_xml: str) -> list[str]:
    """Return the keys that appear more than once in one <dict> of a plist's raw XML (plistlib would
    keep only the last, silently)."""
    repeated: list[str] = []
    for element in ElementTree.fromstring(plist_xml).iter("dict"):
        counts = Counter(child.text for child in element if child.tag == "key")
        repeated += [str(key) for key, count in counts.items() if count > 1]
    return repeated


def test_rendered_plist_parses_and_runs_the_interpreter(home: Path, tmp_path: Path) -> None:
    python = str(tmp_path / "py" / "bin" / "python3")
    environ = {
        "RIFFD_STATE_DIR": str(tmp_path / "state & more"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
    }
    plan = service.plan_service("darwin", python, tmp_path / "riffd.toml", environ)
    assert plan.path == home / "Library" / "LaunchAgents" / "io.github.riffd.riffd.plist"
    assert "/Users/" not in plan.content
    assert repeated_keys(plan.content) == []
    document = plistlib.loads(plan.content.encode())
    assert document["Label"] == "io.github.riffd.riffd"
    assert plan.log_dir is not None
    # riffd rotates it
    assert document["ProgramArguments"] == [
        python,
        "-P",
        "-m",
        "riffd",
        "--config",
        str(tmp_path / "riffd.toml"),
        "run",
        "--log-file",
        str(plan.log_dir / "riffd.log"),
    ]
    assert document["RunAtLoad"] is True
    # not after exit 2 (bad config, lock held): no spinning
    assert document["KeepAlive"] == {"Crashed": True}
    assert document["Nice"] == 10
    assert document["ThrottleInterval"] == 10
    assert document["ProcessType"] == "Background"
    assert document["StandardOutPath"] == str(plan.log_dir / "riffd.out.log")
    assert document["StandardErrorPath"] == str(plan.log_dir / "riffd.err.log")
    assert document["EnvironmentVariables"] == environ
    assert plan.install == (
        service.Command(("launchctl", "bootstrap", f"gui/{os.getuid()}", str(plan.path))),
    )
    assert plan.status.argv == ("launchctl", "print", f"gui/{os.getuid()}/io.github.riffd.riffd")


def test_plist_with_this_interpreter_and_no_environment(home: Path) -> None:
    plan = service.plan_service("darwin", sys.executable, None, {})
    document = plistlib.loads(plan.content.encode())
    assert plan.log_dir is not None
    log_file = str(plan.log_dir / "riffd.log")
    assert document["ProgramArguments"] == [
        sys.executable,
        "-P",
        "-m",
        "riffd",
        "run",
        "--log-file",
        log_file,
    ]
    assert document["EnvironmentVariables"] == {"RIFFD_STATE_DIR": str(paths.state_dir({}))}
    assert repeated_keys(plan.content) == []


def test_a_value_that_looks_like_a_placeholder_stays_as_is() -> None:
    plist = units.render_plist(
        ["/opt/@LOG_DIR@/python3", "-m", "riffd", "run"], "/logs", {"X": "@ENVIRONMENT@"}
    )
    document = plistlib.loads(plist.encode())
    assert document["ProgramArguments"][0] == "/opt/@LOG_DIR@/python3"
    assert document["EnvironmentVariables"] == {"X": "@ENVIRONMENT@"}
    unit = units.render_unit(["/opt/@ENVIRONMENT@/python3", "run"], {})
    assert directive(unit, "ExecStart") == ["/opt/@ENVIRONMENT@/python3 run"]


def test_repeated_key_check_catches_a_repeat() -> None:
    text = REPO_PLIST.read_text().replace("<key>RunAtLoad</key>", "<key>ProcessType</key>")
    assert repeated_keys(text) == ["ProcessType"]


def test_unsupported_platform_is_a_clear_error() -> None:
    with pytest.raises(units.ServiceError, match="no service manager support on 'win32'"):
        service.plan_service("win32", sys.executable, None)


# --- the commands --------------------------------------------------------------------------------


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


def test_install_dry_run_prints_the_file_and_commands_and_writes_nothing(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    before = files_under(tmp_path)
    assert main(["service", "install", "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    plan = service.plan_service(sys.platform, sys.executable, None)
    assert f"would write {plan.path}:\n{plan.content}" in out
    for command in plan.install:
        assert f"would run: {command}\n" in out
    if sys.platform.startswith("linux"):
        assert plan.path == tmp_path / "xdg" / "systemd" / "user" / "riffd.service"
        assert f"\nEnvironment=RIFFD_STATE_DIR={tmp_path}/state\n" in out
        assert (
            "would run: systemctl --user daemon-reload\n"
            "would run: systemctl --user enable --now riffd.service\n"
        ) in out
    assert files_under(tmp_path) == before


def test_install_dry_run_writes_the_global_config_option_as_an_absolute_path(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "riffd.toml", "service", "install", "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert (
        service.plan_service(sys.platform, sys.executable, tmp_path / "riffd.toml").content in out
    )
    if sys.platform.startswith("linux"):
        assert f" -P -m riffd --config {tmp_path}/riffd.toml run\n" in out


def test_uninstall_dry_run_leaves_the_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = service.plan_service(sys.platform, sys.executable, None)
    plan.path.parent.mkdir(parents=True)
    plan.path.write_text(plan.content)
    assert main(["service", "uninstall", "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"would remove {plan.path}\n" in out
    assert plan.path.read_text() == plan.content


def plan_with_commands(tmp_path: Path, *scripts: str) -> service.ServicePlan:
    """A systemd plan writing into tmp_path whose commands are real processes running `scripts`."""
    commands = tuple(service.Command((sys.executable, "-c", script)) for script in scripts)
    return service.ServicePlan(
        manager="systemd",
        path=tmp_path / "units" / "riffd.service",
        content="[Service]\nExecStart=/bin/true\n",
        install=commands,
        reinstall=commands,
        uninstall=commands,
        after_uninstall=(),
        status=service.Command((sys.executable, "-c", "print('active')")),
        hint="start a user manager",
    )


def test_a_failing_command_is_reported_and_uninstall_still_removes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_with_commands(
        tmp_path,
        "print('reloaded')",
        "import sys; print('Failed to connect to bus: No medium found', file=sys.stderr); "
        "sys.exit(1)",
    )
    assert service.install(plan, dry_run=False) == EXIT_ERROR
    err = capsys.readouterr().err
    assert (
        "failed (exit 1):\nFailed to connect to bus: No medium found\nhint: start a user manager"
        in err
    )
    assert f"{plan.path} is written and stays in place" in err
    assert plan.path.read_text() == plan.content
    # Without a reachable service manager, uninstall still removes what riffd wrote, and says what
    # it could not do.
    assert service.uninstall(plan, dry_run=False) == EXIT_ERROR
    err = capsys.readouterr().err
    assert (
        f"removed {plan.path}" in err
        and "could not be asked to stop and disable the service" in err
    )
    assert not plan.path.exists()


def test_install_status_uninstall_with_working_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_with_commands(tmp_path, "pass")
    assert service.install(plan, dry_run=False) == EXIT_OK
    assert plan.path.read_text() == plan.content
    assert service.show_status(plan) == EXIT_OK
    assert "up to date" in capsys.readouterr().out
    plan.path.write_text("[Service]\nExecStart=/usr/bin/old\n")
    assert service.show_status(plan) == 1
    assert "differs from what `riffd service install` would write" in capsys.readouterr().out
    assert service.uninstall(plan, dry_run=False) == EXIT_OK
    assert not plan.path.exists()
    assert service.uninstall(plan, dry_run=False) == EXIT_OK  # nothing installed: nothing to do
    assert "not installed" in capsys.readouterr().err


def test_status_says_when_the_service_manager_cannot_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """systemctl without a user bus exits 1, as for a dead service: `service status` passed that
    through as "not running" (exit 1); it is "cannot be asked" (exit 2), with the hint."""
    for said in (
        "Failed to connect to bus: No medium found",  # systemd before 257
        "Failed to connect to user scope bus via local transport: No such file or directory",
    ):
        plan = dataclasses.replace(
            plan_with_commands(tmp_path, "pass"),
            status=service.Command(
                (sys.executable, "-c", f"import sys; print({said!r}, file=sys.stderr); sys.exit(1)")
            ),
        )
        assert service.show_status(plan) == EXIT_ERROR
        err = capsys.readouterr().err
        assert err.startswith(said + "\n")  # its own words first
        assert "could not reach the service manager\nhint: start a user manager" in err
    # a service that is not running is still exit 1
    stopped = dataclasses.replace(
        plan, status=service.Command((sys.executable, "-c", "import sys; sys.exit(3)"))
    )
    assert service.show_status(stopped) == 1


# --- notify --------------------------------------------------------------------------------------


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket bound in tmp_path, as systemd's notify socket; yield it and its
    NOTIFY_SOCKET."""
    path = tmp_path / "n.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        yield sock, str(path)


def test_notify_sends_exact_datagrams(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    assert notifier.ready("watching 2 roots")
    assert sock.recv(4096) == b"READY=1\nSTATUS=watching 2 roots"
    assert notifier.ready()
    assert sock.recv(4096) == b"READY=1"
    assert notifier.status("scan\nREADY=1")  # a newline must not smuggle in a field
    assert sock.recv(4096) == b"STATUS=scan READY=1"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    before = time.monotonic_ns() // 1000
    assert notifier.reloading()
    after = time.monotonic_ns() // 1000
    match = re.fullmatch(rb"RELOADING=1\nMONOTONIC_USEC=(\d+)", sock.recv(4096))
    assert match is not None
    assert before <= int(match.group(1)) <= after


def test_notify_to_an_abstract_socket() -> None:
    name = f"riffd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready("up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_notify_without_socket_does_nothing() -> None:
    for environ in ({}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}):
        notifier = Notifier(environ | {"WATCHDOG_USEC": "60000000"})
        assert not notifier.enabled
        assert [
            notifier.ready("x"),
            notifier.status("x"),
            notifier.watchdog(),
            notifier.stopping(),
            notifier.reloading(),
        ] == [False] * 5
        assert notifier.watchdog_interval() is None


def test_notify_send_failure_returns_false_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with caplog.at_level("DEBUG", logger="riffd.daemon.notify"):
        assert notifier.watchdog() is False
    assert "could not notify systemd" in caplog.text


def test_notifier_reads_os_environ(
    listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, address = listener
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    assert Notifier().stopping()
    assert sock.recv(4096) == b"STOPPING=1"


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("60000000", None, 30.0),
        ("60000000", "self", 30.0),
        ("60000000", "other", None),
        ("0", None, None),
        ("soon", None, None),
        (None, None, None),
        ("60000000", "x", None),
    ],
)
def test_watchdog_interval(
    listener: tuple[socket.socket, str], usec: str | None, pid: str | None, expected: float | None
) -> None:
    environ = {"NOTIFY_SOCKET": listener[1]}
    if usec is not None:
        environ["WATCHDOG_USEC"] = usec
    if pid is not None:
        environ["WATCHDOG_PID"] = {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(
            pid, pid
        )
    assert Notifier(environ).watchdog_interval() == expected


def test_with_xdg_folders_set_the_unit_pins_the_config_file_and_the_state_folder(
    home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "xdg-config" / "riffd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("")
    environ = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
    }
    plan = service.plan_service("linux", "/opt/py/bin/python3", None, environ)
    assert directive(plan.content, "ExecStart") == [
        f"/opt/py/bin/python3 -P -m riffd --config {config} run"
    ]
    assert f"RIFFD_STATE_DIR={tmp_path}/xdg-state/riffd" in directive(plan.content, "Environment")
    assert f"XDG_STATE_HOME={tmp_path}/xdg-state" in directive(plan.content, "Environment")


def test_a_config_with_errors_is_not_installed_with_a_default_state_folder(
    home: Path, tmp_path: Path
) -> None:
    """A config with any error had the unit pin the default state folder in RIFFD_STATE_DIR, which
    outlived the mending of the file (the environment wins): the daemon then kept its state apart
    from the configured folder. The install refuses now, naming the errors."""
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "svc"}"\n[watcher]\ndebounse = 1\n')
    with pytest.raises(service.ServiceError, match=r"watcher\.debounse: unknown key"):
        service.plan_service("linux", sys.executable, config, {"PATH": "/usr/bin"})
    config.write_text(f'state_dir = "{tmp_path / "svc"}"\n')
    plan = service.plan_service("linux", sys.executable, config, {"PATH": "/usr/bin"})
    assert f"RIFFD_STATE_DIR={tmp_path / 'svc'}" in directive(plan.content, "Environment")
