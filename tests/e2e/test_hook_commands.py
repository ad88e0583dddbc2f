"""The hook commands `riffd hook install` writes run as Claude Code runs them (`sh -c COMMAND`, in
Claude Code's environment, not the installer's), wherever riffd is installed: a console script on
PATH, a console script in a folder with a space in its name, and `python -m riffd` from a venv that
is not on PATH. A hook that does not run is named by `riffd status` with the command that mends it,
and `hook install` mends it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.daemon import Sandbox
from helpers.run import SRC_DIR, riffd_env, run_riffd
from riffd.display import shell_command

SESSION = "7f3c2a10-5b7e-4c1d-9e2f-0a1b2c3d4e5f"
BARE_PATH = "/usr/bin:/bin"  # Claude Code's PATH need not hold the folder riffd was installed to


def console_script(folder: Path) -> Path:
    """A `riffd` console script as pip writes one (a shebang to this Python, then riffd's entry
    point), running the riffd of this working tree."""
    folder.mkdir(parents=True)
    script = folder / "riffd"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(SRC_DIR)!r})\n"
        "from riffd.entry import main\n"
        "sys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def venv_python(folder: Path) -> Path:
    """A venv (without pip) whose Python imports this working tree's riffd through a .pth file."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder)],
        check=True,
        timeout=120,
    )
    python = folder / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "riffd-src.pth").write_text(str(SRC_DIR) + "\n")
    return python


def claude_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment a hook runs in: no PYTHONPATH, no riffd on PATH."""
    environ = riffd_env(
        CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
        RIFFD_STATE_DIR=str(tmp_path / "state"),
        HOME=str(tmp_path),
        PATH=BARE_PATH,
        **extra,
    )
    del environ["PYTHONPATH"]
    return environ


def installed_commands(settings: Path) -> dict[str, str]:
    document = json.loads(settings.read_bytes())
    return {
        event: group["hooks"][0]["command"]
        for event, groups in document["hooks"].items()
        for group in groups
    }


def transcript_with_a_read(tmp_path: Path) -> tuple[Path, Path]:
    """A transcript whose session read a file 30 s ago, and that file."""
    source = tmp_path / "work" / "a.py"
    source.parent.mkdir()
    source.write_text("print('hello')\n")
    moment = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() - 30))
    lines = [
        {
            "type": "assistant",
            "uuid": "u1",
            "sessionId": SESSION,
            "timestamp": moment,
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": str(source)},
                    }
                ],
            },
        },
        {
            "type": "user",
            "uuid": "r1",
            "sessionId": SESSION,
            "timestamp": moment,
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1\tprint"}],
            },
        },
    ]
    transcript = tmp_path / "claude" / "projects" / "-work" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    return transcript, source


def run_as_claude_code(
    command: str, event: dict[str, object], env: dict[str, str], cwd: Path = Path("/")
) -> str:
    """Run a hook command as Claude Code does (`sh -c` in the project's folder, the event on
    stdin); return its stdout."""
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(event).encode(),
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (command, done.returncode, done.stderr)
    return done.stdout.decode()


def assert_hooks_run(tmp_path: Path, env: dict[str, str], cwd: Path = Path("/")) -> None:
    commands = installed_commands(tmp_path / "claude" / "settings.json")
    assert set(commands) == {"PreToolUse", "SessionStart"}
    transcript, source = transcript_with_a_read(tmp_path)
    event = {
        "session_id": SESSION,
        "transcript_path": str(transcript),
        "cwd": "/work",
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(source)},
        "tool_use_id": "t2",
    }
    answer = json.loads(run_as_claude_code(commands["PreToolUse"], event, env, cwd))
    assert "repeats the identical call" in answer["hookSpecificOutput"]["additionalContext"]
    start = {"session_id": SESSION, "hook_event_name": "SessionStart", "source": "resume"}
    assert run_as_claude_code(commands["SessionStart"], start, env, cwd) == ""  # nothing to warn


@pytest.mark.parametrize("folder", ["bin", "my tools/bin"])
def test_a_console_script_writes_hooks_that_run(tmp_path: Path, folder: str) -> None:
    script = console_script(tmp_path / folder)
    env = claude_env(tmp_path)
    # installed from a shell that has the script's folder on PATH
    installer = env | {"PATH": f"{script.parent}{os.pathsep}{BARE_PATH}"}
    done = subprocess.run(
        ["/bin/sh", "-c", "riffd hook install"], env=installer, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert_hooks_run(tmp_path, env)


def test_python_m_riffd_from_a_venv_not_on_path_writes_hooks_that_run(tmp_path: Path) -> None:
    python = venv_python(tmp_path / "my venv")
    env = claude_env(tmp_path)
    done = subprocess.run(
        [str(python), "-m", "riffd", "hook", "install"], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    settings = tmp_path / "claude" / "settings.json"
    commands = installed_commands(settings)
    assert commands["SessionStart"].startswith(f"'{python}' -P -m riffd hook")
    # Claude Code runs hooks in the project's folder, which `-m` alone puts first on the path: a
    # cloned project's riffd.py (or json.py) ran in riffd's place, and its exit 2 blocked the tool
    project = tmp_path / "project"
    project.mkdir()
    for name in ("riffd.py", "json.py"):
        (project / name).write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\nraise SystemExit(2)\n")
    assert_hooks_run(tmp_path, env, project)
    assert not (tmp_path / "ran").exists()
    # a hook an earlier riffd wrote without -P is mended by the next install
    settings.write_text(settings.read_text().replace(" -P -m riffd", " -m riffd"))
    again = subprocess.run(
        [str(python), "-m", "riffd", "hook", "install"], env=env, capture_output=True, timeout=60
    )
    assert again.returncode == 0 and b"a project's riffd.py would run in its place" in again.stdout
    assert all(" -P -m riffd hook" in command for command in installed_commands(settings).values())


def test_a_hook_that_does_not_run_is_a_problem_and_install_mends_it(tmp_path: Path) -> None:
    settings = tmp_path / "claude" / "settings.json"
    settings.parent.mkdir()
    broken = f"'{sys.executable} -m riffd'"  # what riffd 0.2.0 wrote: the launcher quoted whole
    settings.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Read",
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f"{broken} hook pre-tool-use --mode cache",
                                }
                            ],
                        }
                    ]
                }
            },
            indent=2,
        )
    )
    folders = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }
    status = run_riffd("status", env=folders)
    assert "the PreToolUse hook in" in status.stdout and "does not run" in status.stdout
    # the advice names this riffd by its path (`riffd` is not on PATH here) and works as it stands
    advised = shell_command(os.path.abspath(sys.executable), "-m", "riffd", "hook", "install")
    assert "exit 127 (not found)" in status.stdout and f"`{advised}`" in status.stdout
    installed = subprocess.run(
        ["/bin/sh", "-c", advised],
        env=riffd_env(**folders, PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert "did not run (exit 127 (not found)" in installed.stdout
    commands = installed_commands(settings)
    assert commands["PreToolUse"].endswith(" hook pre-tool-use --mode cache")  # its option kept
    env = claude_env(tmp_path)
    for command in commands.values():
        run_as_claude_code(command, {"hook_event_name": "riffd-check"}, env)
    status = run_riffd("status", env=folders)
    assert "does not run" not in status.stdout


def settings_with(path: Path, command: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "Read", "hooks": [{"type": "command", "command": command}]}
                    ]
                }
            }
        )
    )


def test_riffd_never_runs_a_hook_command_it_did_not_write_or_from_another_users_file(
    tmp_path: Path,
) -> None:
    folders = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }
    settings = tmp_path / "claude" / "settings.json"
    marker = tmp_path / "ran"
    # shell syntax around a riffd hook: not riffd's form, so never run
    settings_with(settings, f"touch {marker}; riffd hook pre-tool-use")
    for args in (("status",), ("hook", "install")):
        run_riffd(*args, env=folders)
        assert not marker.exists(), args
    # riffd's form, but in a file another user owns (root reads a user's settings): never run
    script = tmp_path / "bin" / "riffd"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    settings_with(settings, f"{script} hook pre-tool-use")
    if os.geteuid() == 0:
        os.chown(settings, 1234, 1234)
        assert "does not run" not in run_riffd("status", env=folders).stdout
        assert not marker.exists()
        os.chown(settings, 0, 0)
    run_riffd("status", env=folders)  # the runner's own file: checked, so run
    assert marker.exists()


def test_status_in_a_cloned_project_never_runs_the_projects_own_code(tmp_path: Path) -> None:
    # A project's .claude/settings.json comes with the clone (teams commit it), as does any file
    # beside it: Claude Code runs its hooks only once the user trusts the folder, and `riffd
    # status` run there must never run code the project brought, whatever riffd-like words name it
    project = tmp_path / "clone"
    marker = tmp_path / "ran"
    script = project / "bin" / "riffd"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    commands = [
        "bin/riffd hook pre-tool-use",
        "/bin/sh bin/riffd hook session-start",
        "/proc/self/cwd/bin/riffd hook pre-tool-use",
    ]
    settings = project / ".claude" / "settings.json"
    for command in commands:
        settings_with(settings, command)
        result = run_riffd(
            "status",
            env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "RIFFD_STATE_DIR": str(tmp_path)},
            cwd=project,
        )
        assert not marker.exists(), (command, result.stdout)


def mend_as_advised(status: str, env: dict[str, str], cwd: Path) -> None:
    """Run the one command `status` advises for a broken hook as it stands, by `sh -c`: this riffd
    by its path (`riffd` is not on PATH), with the variables `env` only."""
    advised = re.findall(r"; `([^`]*)` writes a command that runs", status)
    assert len(advised) == 1, status
    done = subprocess.run(
        ["/bin/sh", "-c", advised[0]],
        env=riffd_env(**env, PATH="/usr/bin:/bin"),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_command_status_advises_for_a_projects_broken_hook_mends_it(tmp_path: Path) -> None:
    # an older riffd wrote the hooks into the project's shared settings.json; riffd moved since
    project = tmp_path / "app"
    settings_with(project / ".claude" / "settings.json", "/gone/bin/riffd hook pre-tool-use")
    folders = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "RIFFD_STATE_DIR": str(tmp_path)}
    status = run_riffd("status", env=folders, cwd=project)
    mend_as_advised(status.stdout, folders, project)
    status = run_riffd("status", env=folders, cwd=project)
    assert "does not run" not in status.stdout, status.stdout


def test_status_in_the_home_folder_names_a_broken_user_hook_once(tmp_path: Path) -> None:
    # run in ~, the project's .claude/settings.json is the user's own settings file
    settings_with(tmp_path / ".claude" / "settings.json", "/gone/bin/riffd hook pre-tool-use")
    folders = {"CLAUDE_CONFIG_DIR": str(tmp_path / ".claude"), "RIFFD_STATE_DIR": str(tmp_path)}
    status = run_riffd("status", env=folders, cwd=tmp_path)
    assert status.stdout.count("does not run") == 1, status.stdout


@pytest.mark.slow
def test_the_daemons_report_names_a_broken_hook_and_leaves_a_path_lookup_alone(
    sandbox: Sandbox,
) -> None:
    missing = sandbox.root / "gone" / "riffd"  # riffd was removed from where the hook names it
    settings = sandbox.claude / "settings.json"
    settings.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Read",
                            "hooks": [
                                {"type": "command", "command": f"{missing} hook pre-tool-use"}
                            ],
                        }
                    ],
                    "SessionStart": [
                        {
                            "matcher": "resume",
                            "hooks": [
                                {"type": "command", "command": "no-such-riffd hook session-start"}
                            ],
                        }
                    ],
                }
            }
        )
    )
    daemon = sandbox.start()
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid), "a report"
    )
    problems = [problem for problem in report["problems"] if "hook in" in problem]
    assert len(problems) == 1, report["problems"]  # the PATH lookup is not the service's to judge
    assert f"the PreToolUse hook in {settings} does not run" in problems[0]
    advised = shell_command(
        os.path.abspath(sys.executable),
        "-m",
        "riffd",
        "--config",
        str(sandbox.config),
        "hook",
        "install",
    )  # (the daemon's configuration)
    assert "exit 127 (not found)" in problems[0] and f"{advised}`" in problems[0], problems[0]
    assert report["healthy"] is False
    daemon.stop()


@pytest.mark.slow
def test_a_hook_that_hangs_does_not_hold_up_the_daemons_shutdown(sandbox: Sandbox) -> None:
    """The report at shutdown uses the last check of the hooks: a hook that never answers costs
    its timeout at a scheduled report, not again when the daemon is told to stop."""
    hanging = sandbox.root / "bin" / "riffd"
    hanging.parent.mkdir()
    hanging.write_text("#!/bin/sh\nsleep 60\n")
    hanging.chmod(0o755)
    hook = {"type": "command", "command": f"{hanging} hook pre-tool-use"}
    settings = {"hooks": {"PreToolUse": [{"matcher": "Read", "hooks": [hook]}]}}
    (sandbox.claude / "settings.json").write_text(json.dumps(settings))
    daemon = sandbox.start()
    report = daemon.wait_until(
        lambda: sandbox.report_where(lambda r: r["daemon"]["pid"] == daemon.pid), "a report"
    )
    assert any("hook in" in problem for problem in report["problems"]), report["problems"]
    assert daemon.stop(timeout=30) < 5.0  # not the hook check's 10 s again


def test_install_into_a_project_folder_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    """A mistyped `--project`: said, exit 2, and no folder made (it made the folder and its
    settings file, and said it had installed the hooks)."""
    missing = tmp_path / "my proj"
    result = run_riffd("hook", "install", "--project", str(missing), env=claude_env(tmp_path))
    assert result.returncode == 2
    assert f"--project {missing}: no such folder" in result.stderr
    assert not missing.exists()


def test_a_broken_user_hook_in_the_configurations_claude_folder_is_mended_there(
    tmp_path: Path,
) -> None:
    """The configuration names a Claude Code folder that is not the shell's (claude_dir): a broken
    hook in its user settings.json is that folder's user hook, not a project's. The command status
    advises, run as printed in a shell without CLAUDE_CONFIG_DIR, writes a command that runs into
    that same file, and leaves no project settings behind. Before, it advised `hook uninstall
    --project FOLDER && hook install --project FOLDER`, which moved the hooks into a
    settings.local.json no session reads."""
    claude = tmp_path / "alt" / ".claude"
    settings = claude / "settings.json"
    settings_with(settings, "/gone/bin/riffd hook pre-tool-use")
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{claude}"\n')
    home = {"HOME": str(tmp_path / "home")}
    status = run_riffd("status", config=config, env=home, cwd=tmp_path)
    mend_as_advised(status.stdout, home, tmp_path)
    assert not (claude / "settings.local.json").exists()
    status = run_riffd("status", config=config, env=home, cwd=tmp_path)
    assert "does not run" not in status.stdout, status.stdout
    assert "hook pre-tool-use" in settings.read_text()


def test_a_broken_hook_in_the_shells_own_user_settings_is_mended_there(tmp_path: Path) -> None:
    """Run in the home folder with a configuration naming another Claude Code folder: the shell's
    own ~/.claude/settings.json is the user's settings, not a project's (a regression a review
    found: the advice moved its hooks into ~/.claude/settings.local.json)."""
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings_with(settings, "/gone/bin/riffd hook pre-tool-use")
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{tmp_path / "alt"}"\n')
    env = {"HOME": str(home)}
    status = run_riffd("status", config=config, env=env, cwd=home)
    mend_as_advised(status.stdout, env, home)
    assert not (home / ".claude" / "settings.local.json").exists()
    assert "hook pre-tool-use" in settings.read_text()
    status = run_riffd("status", config=config, env=env, cwd=home)
    assert "does not run" not in status.stdout, status.stdout


def test_install_into_a_read_only_settings_file_says_only_that(tmp_path: Path) -> None:
    """A settings file marked read-only: `hook install` said "PreToolUse: added ..." and then that it
    changes nothing (exit 2); what it would add is said only once written."""
    env = claude_env(tmp_path)
    settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text('{"theme": "dark"}\n')
    settings.chmod(0o444)
    refused = run_riffd("hook", "install", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "added" not in refused.stdout + refused.stderr
    assert f"{settings} is read-only: riffd changes nothing" in refused.stderr
    assert settings.read_text() == '{"theme": "dark"}\n'
    settings.chmod(0o644)
    done = run_riffd("hook", "install", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{settings}: PreToolUse: added" in done.stdout
