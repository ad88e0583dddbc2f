"""Wiring riffd into Claude Code: `riffd hook install|uninstall` edit a settings.json as Claude Code
writes it, and the SessionStart hook warns when the session being resumed is registered to another
live process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.run import riffd_env, run_riffd

SESSION = "7f3c2a10-5b7e-4c1d-9e2f-0a1b2c3d4e5f"
OTHER = "0f5b6c1e-aaaa-bbbb-cccc-444444444444"  # another session

# What Claude Code writes: JSON.stringify(settings, null, 2), no newline at the end; here with
# another tool's hook.
CLAUDE_SETTINGS = json.dumps(
    {
        "$schema": "https://json.schemastore.org/claude-code-settings.json",
        "permissions": {
            "allow": ["Bash(npm run test:*)", "Read(~/.zshrc)"],
            "deny": ["Read(./.env)"],
        },
        "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "0"},
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "command", "command": "~/bin/check-bash.sh"}],
                }
            ],
            "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        },
        "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
        "model": "opus",
        "feedbackSurveyState": {"lastShownTime": 1754089764089},
    },
    indent=2,
    ensure_ascii=False,
).encode()


def riffd(
    tmp_path: Path,
    *args: str,
    stdin: bytes = b"",
    umask: int | None = None,
    timeout: float = 60,
    **env: str,
) -> subprocess.CompletedProcess[bytes]:
    folders = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }
    return run_riffd(
        *args,
        env=folders | env,
        cwd=tmp_path,
        input=stdin,
        text=False,
        timeout=timeout,
        umask=umask,
    )


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    path = tmp_path / "claude" / "settings.json"
    path.parent.mkdir()
    path.write_bytes(CLAUDE_SETTINGS)
    path.chmod(0o644)
    return path


def test_install_twice_then_uninstall_gives_back_the_same_bytes(
    tmp_path: Path, settings: Path
) -> None:
    first = riffd(tmp_path, "hook", "install")
    assert first.returncode == 0, first.stderr
    installed = json.loads(settings.read_bytes())
    before = json.loads(CLAUDE_SETTINGS)
    # every other key as it was
    assert {key: value for key, value in installed.items() if key != "hooks"} == {
        key: value for key, value in before.items() if key != "hooks"
    }
    # the other tool's hook first
    assert installed["hooks"]["PreToolUse"][0] == before["hooks"]["PreToolUse"][0]
    assert installed["hooks"]["Stop"] == before["hooks"]["Stop"]
    commands = [
        hook["command"]
        for event in ("PreToolUse", "SessionStart")
        for group in installed["hooks"][event]
        for hook in group["hooks"]
    ]
    assert any(command.endswith(" hook pre-tool-use --mode warn") for command in commands)
    assert any(command.endswith(" hook session-start") for command in commands)
    assert (settings.stat().st_mode & 0o777) == 0o644  # its mode kept
    assert not settings.read_bytes().endswith(b"\n")  # its style kept
    once = settings.read_bytes()
    second = riffd(tmp_path, "hook", "install")
    assert second.returncode == 0 and b"nothing to change" in second.stdout
    assert settings.read_bytes() == once
    removed = riffd(tmp_path, "hook", "uninstall")
    assert removed.returncode == 0, removed.stderr
    assert settings.read_bytes() == CLAUDE_SETTINGS
    kept = list((tmp_path / "state" / "settings-backups").rglob("install-*.json"))
    # the previous file, kept privately
    assert [path.read_bytes() for path in kept] == [CLAUDE_SETTINGS]
    assert all((path.stat().st_mode & 0o777) == 0o600 for path in kept)


def test_uninstall_after_the_user_changed_something_keeps_the_change(
    tmp_path: Path, settings: Path
) -> None:
    assert riffd(tmp_path, "hook", "install").returncode == 0
    document = json.loads(settings.read_bytes())
    document["model"] = "sonnet"  # the user (or Claude Code) changed a setting since
    settings.write_text(json.dumps(document, indent=2))
    assert riffd(tmp_path, "hook", "uninstall").returncode == 0
    after = json.loads(settings.read_bytes())
    assert after == {**json.loads(CLAUDE_SETTINGS), "model": "sonnet"}


def test_install_without_a_settings_file_creates_it_and_uninstall_removes_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "claude").mkdir()
    assert riffd(tmp_path, "hook", "install").returncode == 0
    settings = tmp_path / "claude" / "settings.json"
    assert set(json.loads(settings.read_bytes())["hooks"]) == {"PreToolUse", "SessionStart"}
    assert riffd(tmp_path, "hook", "uninstall").returncode == 0
    assert not settings.exists()


def test_a_settings_file_that_does_not_parse_is_refused_untouched(
    tmp_path: Path, settings: Path
) -> None:
    broken = CLAUDE_SETTINGS.replace(b'"model": "opus",', b'"model": "opus",,')
    settings.write_bytes(broken)
    line = broken[: broken.index(b",,")].count(b"\n") + 1  # the line of the stray comma
    for command in ("install", "uninstall"):
        result = riffd(tmp_path, "hook", command)
        assert result.returncode == 2, result.stderr
        assert (
            f"{settings}: line {line} column".encode() in result.stderr
            and b"Traceback" not in result.stderr
        )
        assert settings.read_bytes() == broken
    settings.write_text('{"hooks": {"PreToolUse": {"matcher": "x"}}}')
    result = riffd(tmp_path, "hook", "install")
    assert result.returncode == 2 and b'"hooks" is not an object of lists' in result.stderr


def test_dry_run_shows_the_change_and_writes_nothing(tmp_path: Path, settings: Path) -> None:
    result = riffd(tmp_path, "hook", "install", "--dry-run")
    assert result.returncode == 0
    assert b'+    "SessionStart": [' in result.stdout and b"not written" in result.stderr
    assert settings.read_bytes() == CLAUDE_SETTINGS
    assert not (tmp_path / "state").exists()


def test_project_hooks_go_to_the_local_settings_not_the_shared_file(tmp_path: Path) -> None:
    project = tmp_path / "app"
    (project / ".claude").mkdir(parents=True)
    shared = project / ".claude" / "settings.json"
    shared.write_bytes(CLAUDE_SETTINGS)  # the team's file, committed
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    installed = riffd(tmp_path, "hook", "install", "--project", str(project))
    assert installed.returncode == 0, installed.stderr
    assert b"git does not ignore" in installed.stderr  # it names a path on this machine
    written = json.loads((project / ".claude" / "settings.local.json").read_bytes())
    assert set(written["hooks"]) == {"PreToolUse", "SessionStart"}
    assert shared.read_bytes() == CLAUDE_SETTINGS  # a path of this machine stays out of it
    assert not (tmp_path / "claude" / "settings.json").exists()
    # an older riffd's hooks in the shared file: install says so, uninstall takes out both
    local = (project / ".claude" / "settings.local.json").read_bytes()
    shared.write_bytes(local)
    again = riffd(tmp_path, "hook", "install", "--project", str(project))
    assert again.returncode == 0 and b"shared: teams commit it" in again.stderr
    assert riffd(tmp_path, "hook", "uninstall", "--project", str(project)).returncode == 0
    assert not (project / ".claude" / "settings.local.json").exists()
    assert "hooks" not in json.loads(shared.read_bytes())


# --- the SessionStart hook
# -------------------------------------------------------------------------------------


def register(claude: Path, pid: int, session_id: str = SESSION) -> Path:
    """Write the registry entry the way Claude Code does: <config dir>/sessions/<pid>.json."""
    (claude / "sessions").mkdir(parents=True, exist_ok=True)
    entry = claude / "sessions" / f"{pid}.json"
    entry.write_text(
        json.dumps(
            {
                "pid": pid,
                "sessionId": session_id,
                "cwd": "/home/me/app",
                "startedAt": int(time.time() * 1000) - 60_000,
            }
        )
    )
    return entry


def event(tmp_path: Path, session_id: str = SESSION) -> bytes:
    transcript = tmp_path / "claude" / "projects" / "-home-me-app" / f"{session_id}.jsonl"
    return json.dumps(
        {
            "session_id": session_id,
            "transcript_path": str(transcript),
            "cwd": "/home/me/app",
            "hook_event_name": "SessionStart",
            "source": "resume",
        }
    ).encode()


@pytest.fixture
def other_claude() -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_resuming_a_session_open_in_another_process_is_warned_about(
    tmp_path: Path, other_claude: subprocess.Popen[bytes]
) -> None:
    register(tmp_path / "claude", other_claude.pid)
    result = riffd(tmp_path, "hook", "session-start", stdin=event(tmp_path))
    assert result.returncode == 0 and result.stderr == b""
    answer = json.loads(result.stdout)
    assert (
        f"session {SESSION} is still open in another Claude Code process (pid {other_claude.pid}"
        in answer["systemMessage"]
    )
    assert "in /home/me/app" in answer["systemMessage"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert f"pid {other_claude.pid}" in answer["hookSpecificOutput"]["additionalContext"]


def test_no_warning_for_a_dead_process_another_session_or_the_resuming_process_itself(
    tmp_path: Path, other_claude: subprocess.Popen[bytes]
) -> None:
    claude = tmp_path / "claude"
    register(claude, 999_999_999)  # crashed long ago: its entry stayed
    register(claude, other_claude.pid, session_id="00000000-0000-4000-8000-000000000000")
    assert riffd(tmp_path, "hook", "session-start", stdin=event(tmp_path)).stdout == b""
    # The Claude Code that resumes registers itself too: the hook runs under it, and says nothing.
    wrapper = (
        "import os, subprocess, sys, json, pathlib\n"
        f"entry = pathlib.Path({str(claude)!r}) / 'sessions' / f'{{os.getpid()}}.json'\n"
        f"entry.write_text(json.dumps({{'pid': os.getpid(), 'sessionId': {SESSION!r}}}))\n"
        "done = subprocess.run([sys.executable, '-m', 'riffd', 'hook', 'session-start'], input=sys.stdin.buffer"
        ".read(), capture_output=True)\n"
        "sys.stdout.buffer.write(done.stdout)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", wrapper],
        input=event(tmp_path),
        capture_output=True,
        env=riffd_env(CLAUDE_CONFIG_DIR=str(claude)),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stdout == b"", result.stdout + result.stderr


@pytest.mark.parametrize(
    "written",
    [
        "upper_case_id",
        "being_written",
        "pid_as_float_in_a_file_named_otherwise",
        "id_in_braces",
        "name_in_upper_case",
        "id_as_a_urn_in_braces",
        "dead_pid_in_a_file_named_after_a_running_one",
        "id_given_twice_other_first",
        "id_given_twice_other_last",
        "after_an_entry_nested_too_deep",
        "started_at_no_clock_can_show",
    ],
)
def test_an_entry_written_unlike_claude_codes_is_warned_about_too(
    tmp_path: Path, other_claude: subprocess.Popen[bytes], written: str
) -> None:
    """The registry entries riffd's repairs count as a session's (riffd.claude_code.registry), the
    hook counts too: an id in upper case, in braces or holding the session's digits among others,
    `<pid>.json.tmp`, `<pid>.JSON`, `"pid": 1234.0` in `client.json`, the file name's pid when the
    entry's has exited; and an entry the repairs count as unreadable (an id given twice), or one
    before it that cannot be parsed, does not silence it."""
    entry = register(tmp_path / "claude", other_claude.pid)
    fields = json.loads(entry.read_text())
    if written == "upper_case_id":
        entry.write_text(json.dumps(fields | {"sessionId": SESSION.upper()}))
    elif written == "being_written":
        entry.rename(entry.with_name(f"{entry.name}.tmp"))
    elif written == "id_in_braces":
        entry.write_text(json.dumps(fields | {"sessionId": "{" + SESSION + "}"}))
    elif written == "name_in_upper_case":
        entry.rename(entry.with_name(f"{entry.stem}.JSON"))
    elif written == "id_as_a_urn_in_braces":
        entry.write_text(json.dumps(fields | {"sessionId": "{urn:uuid:" + SESSION + "}"}))
    elif written == "dead_pid_in_a_file_named_after_a_running_one":
        entry.write_text(json.dumps(fields | {"pid": 4_000_000}))
    elif written.startswith("id_given_twice"):  # (no whole entry: the hook reads both ids)
        ids = [OTHER, SESSION] if written.endswith("other_first") else [SESSION, OTHER]
        text = json.dumps(fields | {"sessionId": ids[1]})
        entry.write_text(text.replace('"sessionId"', f'"sessionId": "{ids[0]}", "sessionId"'))
    elif written == "after_an_entry_nested_too_deep":  # (read first: "0" sorts before digits)
        entry.with_name("0deep.json").write_text("[" * 100_000 + "]" * 100_000)
    elif written == "started_at_no_clock_can_show":
        entry.write_text(json.dumps(fields | {"startedAt": 1e300}))
    else:
        entry.unlink()
        entry.with_name("client.json").write_text(
            json.dumps(fields | {"pid": float(fields["pid"])})
        )
    result = riffd(tmp_path, "hook", "session-start", stdin=event(tmp_path))
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    assert f"(pid {other_claude.pid}" in json.loads(result.stdout)["systemMessage"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_an_answer_standard_output_cannot_take_is_one_line_and_exit_0(
    tmp_path: Path, other_claude: subprocess.Popen[bytes]
) -> None:
    """The warning written where it cannot go (a full disk; Claude Code's pipe gone): a traceback
    and exit 1, or 120 as Python exited. The hooks exit 0 whatever fails (docs/hooks.md)."""
    register(tmp_path / "claude", other_claude.pid)
    for unbuffered in ("", "1"):
        with open("/dev/full", "wb") as full:
            result = subprocess.run(
                [sys.executable, "-m", "riffd", "hook", "session-start"],
                input=event(tmp_path),
                stdout=full,
                stderr=subprocess.PIPE,
                env=riffd_env(
                    CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), PYTHONUNBUFFERED=unbuffered
                ),
                timeout=60,
                check=False,
            )
        assert result.returncode == 0, result.stderr
        assert result.stderr == (
            b"riffd hook: standard output: No space left on device; the session starts as usual\n"
        )


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"session_id": 7}',
        b'{"hook_event_name": "PreToolUse", "session_id": "x"}',
    ],
)
def test_bad_input_lets_the_session_start(tmp_path: Path, stdin: bytes) -> None:
    result = riffd(tmp_path, "hook", "session-start", stdin=stdin)
    assert result.returncode == 0 and result.stdout == b""
    assert result.stderr.count(b"\n") <= 1 and b"Traceback" not in result.stderr


def test_an_unreadable_registry_lets_the_session_start(tmp_path: Path) -> None:
    (tmp_path / "claude" / "sessions").mkdir(parents=True)
    (tmp_path / "claude" / "sessions" / "123.json").write_bytes(b"\x00garbage")
    (tmp_path / "claude" / "sessions" / "124.json").mkdir()
    result = riffd(tmp_path, "hook", "session-start", stdin=event(tmp_path))
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""


def test_a_symlinked_settings_file_keeps_its_link_and_a_read_only_one_is_refused(
    tmp_path: Path,
) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_bytes(CLAUDE_SETTINGS)
    (tmp_path / "claude").mkdir()
    link = tmp_path / "claude" / "settings.json"
    link.symlink_to(dotfiles)
    assert riffd(tmp_path, "hook", "install").returncode == 0
    assert link.is_symlink() and "SessionStart" in json.loads(dotfiles.read_bytes())["hooks"]
    assert riffd(tmp_path, "hook", "uninstall").returncode == 0
    assert link.is_symlink() and dotfiles.read_bytes() == CLAUDE_SETTINGS
    dotfiles.chmod(0o444)  # marked read-only: refused, even for root
    result = riffd(tmp_path, "hook", "install")
    assert result.returncode == 2 and b"is read-only: riffd changes nothing" in result.stderr
    assert dotfiles.read_bytes() == CLAUDE_SETTINGS


def test_uninstall_keeps_a_link_whose_target_the_install_made(tmp_path: Path) -> None:
    # a dotfile manager's link to a file that is not there yet: the install makes the target, and
    # uninstall takes the target away again, not the link (which would leave the hooks behind)
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    (tmp_path / "claude").mkdir()
    link = tmp_path / "claude" / "settings.json"
    link.symlink_to(dotfiles)
    assert riffd(tmp_path, "hook", "install").returncode == 0
    assert link.is_symlink() and "SessionStart" in json.loads(dotfiles.read_bytes())["hooks"]
    assert riffd(tmp_path, "hook", "uninstall").returncode == 0
    assert link.is_symlink() and not dotfiles.exists()


def test_a_key_written_twice_is_refused_rather_than_dropped(tmp_path: Path, settings: Path) -> None:
    twice = CLAUDE_SETTINGS.replace(b'"model": "opus",', b'"model": "opus",\n  "model": "sonnet",')
    settings.write_bytes(twice)
    result = riffd(tmp_path, "hook", "install")
    assert result.returncode == 2 and b'the key "model" appears twice' in result.stderr
    assert settings.read_bytes() == twice


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_install_run_as_root_keeps_the_owner_and_mode_of_the_users_file(
    tmp_path: Path, settings: Path
) -> None:
    os.chown(settings, 1234, 5678)  # the user's file, as `sudo riffd hook install` finds it
    settings.chmod(0o640)
    for command in ("install", "uninstall"):
        result = riffd(tmp_path, "hook", command)
        assert result.returncode == 0, result.stderr
        status = settings.stat()
        assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (
            1234,
            5678,
            0o640,
        ), command
    assert settings.read_bytes() == CLAUDE_SETTINGS


def test_the_copies_of_settings_are_private_whatever_the_umask(
    tmp_path: Path, settings: Path
) -> None:
    result = riffd(tmp_path, "hook", "install", umask=0)
    assert result.returncode == 0, result.stderr
    backups = tmp_path / "state" / "settings-backups"
    made = [tmp_path / "state", backups, *backups.rglob("*")]
    assert {
        path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in made if path.is_dir()
    } == {path.name: "0o700" for path in made if path.is_dir()}
    assert {
        path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in made if path.is_file()
    } == {path.name: "0o600" for path in made if path.is_file()}
    assert any(path.name == "path.txt" for path in made)


def test_a_registry_entry_that_is_a_fifo_never_holds_the_session_start(
    tmp_path: Path, other_claude: subprocess.Popen[bytes]
) -> None:
    (tmp_path / "claude" / "sessions").mkdir(parents=True)
    # read, it would wait for a writer that never comes
    os.mkfifo(tmp_path / "claude" / "sessions" / "1.json")
    register(tmp_path / "claude", other_claude.pid)
    started = time.monotonic()
    result = riffd(tmp_path, "hook", "session-start", stdin=event(tmp_path), timeout=10)
    assert time.monotonic() - started < 5
    assert result.returncode == 0 and f"pid {other_claude.pid}".encode() in result.stdout
