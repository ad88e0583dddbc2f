"""`riffd archive restore`: over an existing file only as `riffd backups restore` goes (an idle
session, a verified backup, lines appended meanwhile kept), the owner and private modes kept, files
that share a name kept apart, and no temp file left for good by a killed run. Real `riffd`
subprocesses, real files, a real SQLite archive."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import transcript_line, write_config
from helpers.run import run_riffd, start_riffd

SESSION = "11111111-2222-3333-4444-555555555555"


def _environment(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}  # never the user's own folder


def _config(tmp_path: Path, quiet_period: float | None = None) -> Path:
    config = write_config(tmp_path)
    if quiet_period is not None:  # (the default of `restore --quiet-period`, as the daemon's)
        config.write_text(config.read_text() + f"[repair]\nquiet_period = {quiet_period}\n")
    return config


def _riffd(
    tmp_path: Path, *args: str, umask: int | None = None, quiet_period: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python3 -m riffd --config <tmp config> ARGS` as a real subprocess (under `umask` when
    given)."""
    return run_riffd(
        *args,
        config=_config(tmp_path, quiet_period),
        env=_environment(tmp_path),
        timeout=180,
        umask=umask,
    )


def _session(
    tmp_path: Path,
    lines: int = 40,
    project: str = "-home-user-app",
    name: str = SESSION,
    pad: int = 100,
) -> Path:
    path = tmp_path / "claude" / "projects" / project / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(transcript_line(number, pad=pad) for number in range(1, lines + 1)))
    return path


def _quiet(path: Path) -> None:
    """Make `path` look idle: last modified an hour ago."""
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))


def _backed_up(backup: dict[str, object]) -> bytes:
    """The bytes a backup holds (stored gzipped)."""
    return gzip.decompress(Path(str(backup["path"])).read_bytes())


def _backups(tmp_path: Path) -> list[dict[str, object]]:
    listed = _riffd(tmp_path, "backups", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    found: list[dict[str, object]] = json.loads(listed.stdout)
    return found


# --- over an existing file: the rules of `riffd backups restore`
# ------------------------------------------------


def test_restore_force_over_a_live_session_is_skipped_and_an_idle_one_is_backed_up_first(
    tmp_path: Path,
) -> None:
    """The review's case: a session archived, then 5 lines appended, then `restore --force` over it.
    While the session is registered as running it is skipped (`skipped ...: live:`, exit 1) and
    every line stays; once idle the archived version goes in, after a verified backup that holds the
    5 lines (before, a plain rename lost them)."""
    path = _session(tmp_path)
    archived = path.read_bytes()
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    appended = b"".join(transcript_line(number) for number in range(41, 46))
    with open(path, "ab") as out:
        out.write(appended)
    now = path.read_bytes()
    registry = tmp_path / "claude" / "sessions" / f"{os.getpid()}.json"
    registry.parent.mkdir(parents=True)
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": SESSION}))
    _quiet(path)

    live = _riffd(tmp_path, "archive", "restore", SESSION, "--force")
    assert live.returncode == 1, live.stderr
    assert (
        f"skipped {path}: live: the session may be in use: session {SESSION} is registered"
        in live.stderr
    )
    assert path.read_bytes() == now
    # a copy under another name: still that session's file
    elsewhere = tmp_path / "copies" / "elsewhere.jsonl"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(now)
    _quiet(elsewhere)
    copy = _riffd(tmp_path, "archive", "restore", SESSION, "--to", str(elsewhere), "--force")
    assert copy.returncode == 1 and f"skipped {elsewhere}: live:" in copy.stderr
    assert elsewhere.read_bytes() == now
    assert _backups(tmp_path) == []

    registry.unlink()
    os.utime(path)  # no longer registered, but modified just now
    recent = _riffd(tmp_path, "archive", "restore", SESSION, "--force")
    assert (
        recent.returncode == 1
        and f"skipped {path}: live:" in recent.stderr
        and "quiet period" in recent.stderr
    )
    assert path.read_bytes() == now

    _quiet(path)
    done = _riffd(tmp_path, "archive", "restore", SESSION, "--force")
    assert done.returncode == 0, done.stderr
    (backup,) = _backups(tmp_path)
    assert done.stdout == f"restored {path} (what was there is backed up as {backup['id']})\n"
    assert path.read_bytes() == archived
    assert _backed_up(backup) == now  # the 5 appended lines, in the verified backup
    assert backup["reason"] == "before restoring it from riffd's archive"


@pytest.mark.slow
def test_restore_force_beside_a_writer_loses_no_line(tmp_path: Path) -> None:
    """A real process appends a line every few milliseconds while `restore --force` (a quiet period
    of 0 in the config) replaces the file: whatever the outcome (restored, or skipped because the
    writer never paused), every line the writer wrote is in the file or in the verified backup riffd
    took, and a restored file starts with the archived bytes."""
    path = _session(tmp_path, lines=20_000, pad=200)  # about 5 MB: the restore takes a while
    archived = path.read_bytes()
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import time, json
for number in range(1, 400):
    with open({str(path)!r}, "ab") as out:
        out.write(json.dumps({{"type": "user", "uuid": f"late-{{number}}", "message": {{"content": "late"}}}},
                             separators=(",", ":")).encode() + b"\\n")
    time.sleep(0.004)
""",
        ]
    )
    try:
        time.sleep(0.1)  # lines already appended when the restore starts, and more while it runs
        result = _riffd(tmp_path, "archive", "restore", SESSION, "--force", quiet_period=0)
    finally:
        writer.wait(timeout=60)
    assert result.returncode in (0, 1), result.stderr
    final = path.read_bytes()
    kept = final + b"".join(_backed_up(backup) for backup in _backups(tmp_path))
    assert {f"late-{number}" for number in range(1, 400)} == set(
        re.findall(r"late-\d+", kept.decode())
    )
    if result.returncode == 0:
        assert final.startswith(archived)
        assert b"late-" in _backed_up(_backups(tmp_path)[0])
    else:
        assert "skipped" in result.stderr and final.startswith(archived)


def test_a_file_riffd_replaces_keeps_its_owner_and_a_new_one_gets_its_folders(
    tmp_path: Path,
) -> None:
    """Run as root (as a system service may be), a restore leaves a user's transcript theirs: a file
    replaced keeps its owner and mode, a new file gets the owner of its folder, and folders made for
    it get the owner of the folder above them; made under umask 0, they are 0700, the file 0600."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    user = (4321, 4322)
    path = _session(tmp_path)
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    archived = path.read_bytes()
    with open(path, "ab") as out:
        out.write(transcript_line(41))
    os.chown(path, *user)
    os.chmod(path, 0o640)
    _quiet(path)
    replaced = _riffd(tmp_path, "archive", "restore", SESSION, "--force", umask=0)
    assert replaced.returncode == 0, replaced.stderr
    status = path.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (*user, 0o640)
    assert path.read_bytes() == archived

    home = tmp_path / "home-of-user"
    home.mkdir()
    os.chown(home, *user)
    restored = home / "restored" / "deeper" / path.name
    made = _riffd(tmp_path, "archive", "restore", SESSION, "--to", str(restored), umask=0)
    assert made.returncode == 0, made.stderr
    assert restored.read_bytes() == archived
    for item, mode in (
        (home / "restored", 0o700),
        (home / "restored" / "deeper", 0o700),
        (restored, 0o600),
    ):
        status = item.stat()
        assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (*user, mode), item


def test_folders_made_for_restore_to_are_private_under_umask_0(tmp_path: Path) -> None:
    path = _session(tmp_path)
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    target = tmp_path / "out" / "a" / "b" / "restored.jsonl"
    result = _riffd(tmp_path, "archive", "restore", SESSION, "--to", str(target), umask=0)
    assert result.returncode == 0, result.stderr
    assert [(tmp_path / "out" / part).stat().st_mode & 0o777 for part in ("", "a", "a/b")] == [
        0o700
    ] * 3
    assert (target.stat().st_mode & 0o777) == 0o600
    assert target.read_bytes() == path.read_bytes()


# --- files that share a name; temp files of a killed run
# ---------------------------------------------------------


def test_files_that_share_a_name_are_restored_apart_into_one_folder(tmp_path: Path) -> None:
    """One session id in two projects, each with a subagent file of one name: `restore --to DIR
    --force` writes all four (before, the second of each name silently replaced the first), each
    under its path below the folder they share, and says so."""
    written = {}
    for project in ("-home-user-alpha", "-home-user-beta"):
        main = _session(tmp_path, lines=5 + len(written), project=project)
        agent = main.parent / SESSION / "subagents" / "agent-x.jsonl"
        agent.parent.mkdir(parents=True)
        agent.write_bytes(transcript_line(7, pad=len(project)))
        written.update({main: main.read_bytes(), agent: agent.read_bytes()})
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    for path in written:
        path.unlink()
    out = tmp_path / "out"
    out.mkdir()
    result = _riffd(tmp_path, "archive", "restore", SESSION, "--to", str(out), "--force")
    assert result.returncode == 0, result.stderr
    projects = tmp_path / "claude" / "projects"
    assert f"4 archived files are restored under their paths below {projects}" in result.stderr
    restored = {path.relative_to(out): path.read_bytes() for path in out.rglob("*.jsonl")}
    assert restored == {path.relative_to(projects): data for path, data in written.items()}
    assert len(result.stdout.splitlines()) == 4


@pytest.mark.slow
def test_a_killed_restore_leaves_a_temp_that_the_next_restore_in_its_folder_removes(
    tmp_path: Path,
) -> None:
    """kill -9 while `riffd archive restore` writes its copy: the copy stays (nothing can remove it
    then), named as riffd's temps are, with the pid of the killed process; the next restore into
    that folder, of another session, removes it, and leaves alone a temp of a process that still
    runs."""
    # about 25 MB: its restore takes a while
    big = _session(tmp_path, lines=60_000, pad=300, name="big")
    small = _session(tmp_path, lines=3, name="small")
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    restore = start_riffd(
        "archive",
        "restore",
        "big",
        "--to",
        str(out),
        config=_config(tmp_path),
        env=_environment(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    temps: list[Path] = []
    while not temps and restore.poll() is None and time.monotonic() < deadline:
        temps = [
            path for path in out.iterdir() if path.name.endswith(".tmp") and path.stat().st_size > 0
        ]
        time.sleep(0.001)
    restore.send_signal(signal.SIGKILL)
    restore.wait()
    assert temps, "the restore ended before its copy was seen"
    (temp,) = temps
    assert temp.exists() and not (out / big.name).exists()
    assert re.fullmatch(
        rf"\.{re.escape(big.name)}\.riffd-{restore.pid}-[0-9a-f]{{12}}\.tmp", temp.name
    )

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = out / f".other.jsonl.riffd-{sleeper.pid}-0123456789ab.tmp"
        alive.write_bytes(b"being written")
        legacy_old, legacy_new = (
            out / ".old.jsonl.riffd-restore.tmp",
            out / ".new.jsonl.riffd-restore.tmp",
        )
        legacy_old.write_bytes(b"left by an earlier riffd")
        legacy_new.write_bytes(b"maybe being written by an earlier riffd")
        os.utime(legacy_old, (time.time() - 7200, time.time() - 7200))
        result = _riffd(tmp_path, "archive", "restore", "small", "--to", str(out))
        assert result.returncode == 0, result.stderr
        assert (out / small.name).read_bytes() == small.read_bytes()
        assert not temp.exists() and not legacy_old.exists()
        assert alive.exists() and legacy_new.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    again = _riffd(tmp_path, "archive", "restore", "big", "--to", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / big.name).read_bytes() == big.read_bytes()
