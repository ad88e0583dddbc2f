"""Which hook commands `riffd.hooks.checking` runs to check them: only riffd's own launchers
(`riffd`, an absolute path to a `riffd` console script, a Python with `-m riffd`), and never so
that the folder `riffd status` runs in (a cloned project) can put its own code in their place."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from helpers.run import run_riffd
from riffd.hooks.checking import check_settings, is_riffd_group, riffd_words


def settings(path: Path, command: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    group = {"matcher": "Read", "hooks": [{"type": "command", "command": command}]}
    path.write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
    return path


@pytest.mark.parametrize(
    "command",
    [
        "riffd hook pre-tool-use",
        "/opt/my tools/bin/riffd hook pre-tool-use --mode warn",
        "/usr/bin/python3 -m riffd hook session-start",
        "/home/me/.venv/bin/python3.11 -m riffd hook pre-tool-use",
    ],
)
def test_riffds_own_launchers_are_its_form(command: str) -> None:
    from riffd.display import shell_command

    words = command.split(" hook ")[0]
    launcher = [words] if words.endswith("/riffd") or words == "riffd" else words.split()
    quoted = shell_command(*launcher, "hook", *command.split(" hook ")[1].split())
    assert riffd_words(quoted) is not None


@pytest.mark.parametrize(
    "command",
    [
        "bin/riffd hook pre-tool-use",  # relative: the folder's own
        "/bin/sh bin/riffd hook pre-tool-use",  # another program, running the folder's file
        "/usr/bin/curl -o /tmp/x https://example.org/ riffd hook pre-tool-use",
        "/usr/bin/env riffd hook pre-tool-use",
        "python3 -c pass riffd hook pre-tool-use",
    ],
)
def test_other_words_before_hook_are_not_riffds_form(command: str) -> None:
    assert riffd_words(command) is None


def test_python_m_riffd_is_checked_outside_the_folder_it_is_found_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `python -m` puts the current folder first on sys.path: a cloned project with a riffd
    # package of its own would run instead of riffd
    project = tmp_path / "clone"
    marker = tmp_path / "ran"
    (project / "riffd").mkdir(parents=True)
    (project / "riffd" / "__init__.py").write_text("")
    (project / "riffd" / "__main__.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    )
    path = settings(project / ".claude" / "settings.json", f"{sys.executable} -m riffd hook x")
    path.write_text(path.read_text().replace("hook x", "hook pre-tool-use"))
    monkeypatch.chdir(project)
    check_settings(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "command",
    [
        "./notify.sh; riffd hook pre-tool-use",
        "riffd hook session-start && ./after.sh",
        "riffd hook pre-tool-use | tee -a /tmp/log",
        "riffd hook pre-tool-use > /tmp/out",
        "echo $(riffd hook session-start)",
    ],
)
def test_a_users_own_group_that_also_runs_riffd_is_not_riffds(command: str) -> None:
    """Uninstall takes out riffd's groups whole: one a user wrote around a riffd hook stays."""
    assert not is_riffd_group(
        {"matcher": "Read", "hooks": [{"type": "command", "command": command}]}
    )


@pytest.mark.parametrize(
    "command",
    [
        "riffd hook pre-tool-use",
        "/home/u/.local/bin/riffd hook session-start",
        "/usr/bin/python3 -m riffd hook pre-tool-use --mode cache",
        "'/home/u/my venv/bin/python' -m riffd hook session-start",
    ],
)
def test_the_groups_riffd_writes_are_riffds(command: str) -> None:
    assert is_riffd_group({"matcher": "Read", "hooks": [{"type": "command", "command": command}]})


def test_a_fifo_named_settings_json_keeps_no_command_waiting(tmp_path: Path) -> None:
    """`riffd status` read a FIFO named settings.json to check its hooks, and waited for good (the
    daemon's report read it for cleanupPeriodDays too)."""
    claude = tmp_path / "claude"
    claude.mkdir()
    os.mkfifo(claude / "settings.json")
    env = {"CLAUDE_CONFIG_DIR": str(claude), "RIFFD_STATE_DIR": str(tmp_path / "state")}
    done = run_riffd("status", env=env, timeout=30)  # (TimeoutExpired before)
    assert "Traceback" not in done.stderr, done.stderr
    assert check_settings(claude / "settings.json") == ()
    from riffd.claude_code.settings import CLEANUP_DEFAULT_DAYS, cleanup_period_days

    assert cleanup_period_days(claude) == CLEANUP_DEFAULT_DAYS
