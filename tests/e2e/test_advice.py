"""Commands riffd advises are quoted word by word: what a user copies runs as meant, whatever a
session id or a path holds (spaces, quotes, `$(...)`, a newline, bytes that are not UTF-8)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import transcript_bytes, write_config
from helpers import damage
from helpers.daemon import Sandbox
from helpers.run import riffd_env, run_riffd
from riffd.display import shell_command, shell_word

TRICKY = [
    "plain",
    "with space",
    "it's",
    'say "hi"',
    "$(touch pwned)",
    "`id`",
    "a;b&c|d",
    "new\nline",
    "back\\slash",
    "tab\there",
    "-dash",
    "",
    "*?[x]",
    "~user",
    os.fsdecode(b"caf\xe9-\xff\\'x"),
]


@pytest.mark.parametrize("word", TRICKY, ids=repr)
def test_bash_reads_each_word_back_byte_for_byte(tmp_path: Path, word: str) -> None:
    done = subprocess.run(
        ["bash", "-c", f"printf '%s' {shell_word(word)}"],
        capture_output=True,
        cwd=tmp_path,
        timeout=10,
        check=True,
    )
    assert done.stdout == os.fsencode(word)
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_a_command_is_its_words() -> None:
    assert shlex.split(shell_command("claude", "--resume", "x; rm -rf ~")) == [
        "claude",
        "--resume",
        "x; rm -rf ~",
    ]


def riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }
    return run_riffd(*args, env=env, cwd=tmp_path)


def test_sessions_and_scan_advise_quoted_commands(tmp_path: Path) -> None:
    session = "x$(touch pwned); echo"
    project = tmp_path / "claude" / "projects" / "-home-me-my project"
    project.mkdir(parents=True)
    path = project / "it's here.jsonl"
    data = transcript_bytes(4).replace(
        b"11111111-2222-3333-4444-555555555555", json.dumps(session)[1:-1].encode()
    )
    path.write_bytes(data + b'{"type":"user","uu')  # and a torn last line, for scan's advice

    listed = riffd(tmp_path, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["sessions"]
    assert row["session_id"] == session
    assert row["resume"] is None  # a file name that is not a UUID: no id the client takes
    uuid_named = project / "0bad1dea-0000-4000-8000-000000000001.jsonl"
    path.rename(uuid_named)
    listed = riffd(tmp_path, "sessions", "--json")
    (row,) = json.loads(listed.stdout)["sessions"]
    assert shlex.split(row["resume"]) == ["claude", "--resume", uuid_named.stem]
    uuid_named.rename(path)

    scanned = riffd(tmp_path, "scan", "--json", str(path))
    (advice,) = json.loads(scanned.stdout)["files"][0]["suggestions"]
    command = advice.split("`")[1]
    assert shlex.split(command) == ["riffd", "fix", str(path)]


def _advised(stderr: str) -> list[str]:
    """The commands between backquotes in what riffd printed."""
    return stderr.split("`")[1::2]


def test_a_restore_the_quiet_period_holds_back_names_the_command_that_restores_it_now(
    tmp_path: Path,
) -> None:
    """`riffd backups restore ID` over a session modified a moment ago (by the repair itself) is
    skipped: it says to run it again once the session is idle, and, since no Claude Code process
    has the session open, the command that restores it now, which does. While a Claude Code process
    has the session open, that second command is not offered."""
    session = "dddddddd-0000-4000-8000-000000000001"
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    path = project / f"{session}.jsonl"
    damaged = b"".join(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines)
    path.write_bytes(damaged)
    os.utime(path, (1e9, 1e9))
    assert riffd(tmp_path, "fix", str(path)).returncode == 0
    (backup,) = json.loads(riffd(tmp_path, "backups", "list", "--json").stdout)
    repaired = path.read_bytes()

    registry = tmp_path / "claude" / "sessions" / f"{os.getpid()}.json"  # this process: alive
    registry.parent.mkdir()
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session}))
    held = riffd(tmp_path, "backups", "restore", backup["id"])
    assert held.returncode == 1 and "skipped" in held.stderr, held.stderr
    assert [shlex.split(command) for command in _advised(held.stderr)] == [
        ["riffd", "backups", "restore", backup["id"]]
    ]
    registry.unlink()

    skipped = riffd(tmp_path, "backups", "restore", backup["id"])
    assert skipped.returncode == 1 and "within the quiet period" in skipped.stderr
    again, now = (shlex.split(command) for command in _advised(skipped.stderr))
    assert again == ["riffd", "backups", "restore", backup["id"]]
    assert now == ["riffd", "backups", "restore", "--quiet-period", "0", backup["id"]]
    assert path.read_bytes() == repaired
    done = riffd(tmp_path, *now[1:])
    assert done.returncode == 0, done.stderr
    assert path.read_bytes() == damaged


def test_a_held_back_restore_with_its_own_options_advises_them_all(tmp_path: Path) -> None:
    """`riffd backups --backup-dir D restore --to T --force ID`, held back because T was written a
    moment ago: both advised commands keep the backup folder, the target and --force (the one that
    restores now once dropped them and wrote over the original transcript); the second, run as
    printed, writes the target and leaves the original as it was."""
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    path = project / "eeeeeeee-0000-4000-8000-000000000001.jsonl"
    damaged = b"".join(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines)
    path.write_bytes(damaged)
    os.utime(path, (1e9, 1e9))
    backups = tmp_path / "my backups"
    assert riffd(tmp_path, "fix", "--backup-dir", str(backups), str(path)).returncode == 0
    repaired = path.read_bytes()
    listed = riffd(tmp_path, "backups", "--backup-dir", str(backups), "list", "--json")
    (backup,) = json.loads(listed.stdout)
    target = tmp_path / "out dir" / "restored.jsonl"
    target.parent.mkdir()
    target.write_bytes(b"an older copy\n")  # written just now: within the quiet period
    restore = ["backups", "--backup-dir", str(backups), "restore", "--to", str(target), "--force"]
    held = riffd(tmp_path, *restore, backup["id"])
    assert held.returncode == 1, held.stderr
    again, now = (shlex.split(command) for command in _advised(held.stderr))
    assert again == ["riffd", *restore, backup["id"]]
    assert now == ["riffd", *restore, "--quiet-period", "0", backup["id"]]
    done = riffd(tmp_path, *now[1:])
    assert done.returncode == 0, done.stderr
    assert (target.read_bytes(), path.read_bytes()) == (damaged, repaired)


@pytest.mark.slow  # a real daemon
def test_fix_advises_its_own_options_and_a_daemon_only_where_one_repairs(sandbox: Sandbox) -> None:
    """A file modified a moment ago: `fix --dry-run --no-synthesize --backup-dir D` advises the
    repair with those options (its backup goes where asked, it adds no placeholder results), and
    says the daemon repairs it by itself only while a daemon runs in repair mode over its folder."""
    sandbox.write_config(repair__quiet_period=600)  # the daemon leaves the file alone meanwhile
    inside = sandbox.project / "ffffffff-0000-4000-8000-000000000001.jsonl"
    outside = sandbox.root / "elsewhere" / "ffffffff-0000-4000-8000-000000000002.jsonl"
    outside.parent.mkdir()
    lines = damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines
    for path in (inside, outside):
        path.write_bytes(b"".join(lines))
    backups = sandbox.root / "my backups"
    by_itself = "the riffd daemon, running in repair mode, repairs it by itself"

    def advice(path: Path) -> tuple[list[str], bool]:
        run = sandbox.riffd(
            "fix", "--dry-run", "--no-synthesize", "--backup-dir", str(backups), str(path)
        )
        assert run.returncode == 1, run.stderr
        (command,) = _advised(run.stdout)
        return shlex.split(command), by_itself in run.stdout

    words, said = advice(inside)
    assert words == [
        "riffd",
        "--config",
        str(sandbox.config),
        "fix",
        "--quiet-period",
        "0",
        "--no-synthesize",
        "--backup-dir",
        str(backups),
        str(inside),
    ]
    assert not said  # no daemon runs
    daemon = sandbox.start()
    assert advice(inside)[1] and not advice(outside)[1]  # the daemon watches only its folders
    daemon.stop()
    sandbox.write_config(repair__mode="report-only")
    sandbox.start()
    assert not advice(inside)[1]


@pytest.mark.slow  # a real daemon
def test_a_restored_backup_says_when_the_daemon_will_repair_it_again(sandbox: Sandbox) -> None:
    """Putting back a backup taken before a repair restores its damage: while a daemon in repair
    mode watches the folder, `backups restore` says that it will repair it again and how to keep the
    file as restored; with no daemon it says nothing of the kind."""
    sandbox.write_config(repair__quiet_period=600)  # the daemon waits: the test looks meanwhile
    path = sandbox.project / "abababab-0000-4000-8000-000000000001.jsonl"
    damaged = b"".join(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines)
    path.write_bytes(damaged)
    assert sandbox.riffd("fix", "--quiet-period", "0", str(path)).returncode == 0
    (backup_id,) = sandbox.backup_ids()
    note = "note: the riffd daemon runs in repair mode over this folder"
    daemon = sandbox.start()
    restored = sandbox.riffd("backups", "restore", "--quiet-period", "0", backup_id)
    assert restored.returncode == 0, restored.stderr
    assert path.read_bytes() == damaged
    assert note in restored.stdout, restored.stdout
    # the advised command changes the configuration this riffd runs on (not the default file)
    (report_only,) = _advised(restored.stdout.split(note)[1])
    assert shlex.split(report_only)[:3] == ["riffd", "--config", str(sandbox.config)]
    changed = subprocess.run(
        ["sh", "-c", report_only], env=_riffd_on_path(sandbox.root), capture_output=True, text=True
    )
    assert changed.returncode == 0, changed.stderr
    assert 'mode = "report-only"' in sandbox.config.read_text()
    daemon.stop()
    again = sandbox.riffd("backups", "restore", "--quiet-period", "0", backup_id)
    assert again.returncode == 0 and note not in again.stdout


def test_an_archive_restore_the_quiet_period_holds_back_says_how_to_restore_now(
    tmp_path: Path,
) -> None:
    """`riffd archive restore SESSION --force` over a transcript written a moment ago is held back:
    it says to run it again once the session is idle and names the command with `--quiet-period 0`,
    which, run as printed, puts the archived bytes back."""
    session = "cdcdcdcd-0000-4000-8000-000000000001"
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    path = project / f"{session}.jsonl"
    archived = transcript_bytes(6).replace(
        b"11111111-2222-3333-4444-555555555555", session.encode()
    )
    path.write_bytes(archived)
    assert riffd(tmp_path, "archive", "ingest").returncode == 0
    path.write_bytes(archived[: len(archived) // 2])  # changed just now: within the quiet period
    held = riffd(tmp_path, "archive", "restore", "--force", session[:8])
    assert held.returncode == 1, held.stderr
    again, now = (shlex.split(command) for command in _advised(held.stderr.split("held back")[1]))
    assert again == ["riffd", "archive", "restore", "--force", session[:8]]
    assert now == ["riffd", "archive", "restore", "--force", "--quiet-period", "0", session[:8]]
    done = riffd(tmp_path, *now[1:])
    assert done.returncode == 0, done.stderr
    assert path.read_bytes() == archived


def _riffd_on_path(root: Path) -> dict[str, str]:
    """An environment whose `riffd` on PATH runs this checkout, as a user's shell has it."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "riffd").write_text(f'#!/bin/sh\nexec {sys.executable} -m riffd "$@"\n')
    (bin_dir / "riffd").chmod(0o755)
    return riffd_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.slow  # a real daemon
def test_status_advises_commands_on_the_configuration_it_was_given(sandbox: Sandbox) -> None:
    """`riffd --config C status` over a finding a report-only daemon left: the repair it advises
    names `--config C`, and run by `sh -c` as printed it repairs the file, its backup in C's
    backup folder (`riffd fix` alone would read the default configuration)."""
    sandbox.write_config(repair__mode="report-only")
    path = sandbox.project / "acacacac-0000-4000-8000-000000000001.jsonl"
    path.write_bytes(
        b"".join(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines)
    )
    old = time.time() - 7200
    os.utime(path, (old, old))

    def repairable() -> list[dict[str, Any]] | None:
        status = json.loads(sandbox.riffd("status", "--json").stdout)
        return [item for item in status["report"]["attention"] if item["repairable"]] or None

    daemon = sandbox.start()
    daemon.wait_until(repairable, "the finding, stored")
    daemon.stop()
    (item,) = repairable() or []
    (command,) = _advised(item["action"])
    assert shlex.split(command) == ["riffd", "--config", str(sandbox.config), "fix", str(path)]
    ran = subprocess.run(
        ["sh", "-c", command], env=_riffd_on_path(sandbox.root), capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert len(sandbox.backup_ids()) == 1
    assert sandbox.riffd("scan", str(path)).returncode == 0


def test_a_config_file_named_and_missing_advises_the_init_that_writes_it(tmp_path: Path) -> None:
    named = tmp_path / "my riffd.toml"
    missing = run_riffd("--config", str(named), "config", "validate", config=None)
    assert missing.returncode == 2
    (command,) = _advised(missing.stderr)
    assert shlex.split(command) == ["riffd", "--config", str(named), "config", "init"]
    done = subprocess.run(
        ["sh", "-c", command], env=_riffd_on_path(tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert named.exists()


def test_commands_advised_without_a_daemon_keep_the_configuration_given(tmp_path: Path) -> None:
    """A configuration that is not the default file, given by --config or by $RIFFD_CONFIG: what
    `scan`, `ack`, `status` and the archive commands advise names it, and a config file with
    errors is checked by the `config validate` that names it. Run as printed (riffd on PATH, no
    --config, no RIFFD_* variables), the scan's fix puts its backup in that configuration's backup
    folder."""
    config = write_config(tmp_path)
    project = tmp_path / "claude" / "projects" / "-home-me-app"
    project.mkdir(parents=True)
    path = project / "abab0000-0000-4000-8000-000000000001.jsonl"
    path.write_bytes(
        b"".join(damage.inject_resumed_duplicate(damage.generated_session(segments=2)).lines)
    )
    old = time.time() - 7200
    os.utime(path, (old, old))
    riffd = shell_command("riffd", "--config", str(config))
    home = {"HOME": str(tmp_path / "home")}  # (the default configuration and state: others)
    by_flag = run_riffd("scan", "--json", str(path), config=config, env=home)
    by_variable = run_riffd("scan", "--json", str(path), env={**home, "RIFFD_CONFIG": str(config)})
    for scanned in (by_flag, by_variable):
        suggestions = json.loads(scanned.stdout)["files"][0]["suggestions"]
        assert any(f"`{riffd} fix {path}`" in advice for advice in suggestions), suggestions
    (fix,) = {word for advice in suggestions for word in _advised(advice) if " fix " in word}
    # ack: how to take it back
    line = json.loads(by_flag.stdout)["files"][0]["findings"][0]["lines"][0]
    acked = run_riffd("ack", f"{path}:{line}", config=config, env=home)
    assert f"`{riffd} ack --undo FILE:LINE` takes it back" in acked.stderr, acked.stderr
    ran = subprocess.run(
        ["sh", "-c", fix], env=_riffd_on_path(tmp_path), capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert list((tmp_path / "state" / "backups").glob("*.gz"))
    unfound = run_riffd("ack", f"{path}:1", config=config, env=home)  # (repaired: none left)
    assert f"`{riffd} scan {path}` lists its findings" in unfound.stderr, unfound.stderr
    # no state yet (another state folder), no archive yet
    fresh = tmp_path / "fresh.toml"
    fresh.write_text(f'state_dir = "{tmp_path / "fresh"}"\n')
    status = run_riffd("status", config=fresh, env=home)
    assert f"(`{shell_command('riffd', '--config', str(fresh))} run`" in status.stdout
    searched = run_riffd("archive", "search", "x", config=fresh, env=home)
    assert f"`{shell_command('riffd', '--config', str(fresh))} archive ingest`" in searched.stderr
    # a config file with errors: the check named is of that file
    bad = tmp_path / "bad.toml"
    bad.write_text('[repair]\nquiet_period = "x"\nmode = 3\n')
    noted = run_riffd("scan", str(path), config=bad, env=home)
    (validate,) = [word for word in _advised(noted.stderr) if word.endswith("config validate")]
    assert shlex.split(validate) == ["riffd", "--config", str(bad), "config", "validate"]
    checked = subprocess.run(
        ["sh", "-c", validate], env=_riffd_on_path(tmp_path), capture_output=True, text=True
    )
    assert checked.returncode == 2 and "quiet_period" in checked.stdout + checked.stderr


def test_the_backups_a_wrong_id_points_to_are_those_of_the_configuration(tmp_path: Path) -> None:
    """`riffd --config C backups restore nope`: the listing it advises, run as printed in a shell
    without --config, lists the backup folder of C (the repairs' failure notes name backups so)."""
    config = write_config(tmp_path)
    wrong = run_riffd("backups", "restore", "nope", config=config, env={"HOME": str(tmp_path)})
    assert wrong.returncode == 2, wrong.stderr
    (listing,) = [word for word in _advised(wrong.stderr) if " list" in word]
    listed = subprocess.run(
        ["sh", "-c", listing], env=_riffd_on_path(tmp_path), capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert f"in {tmp_path / 'state' / 'backups'}" in listed.stderr
