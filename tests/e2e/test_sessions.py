"""Finding sessions: an id prefix, `latest`, `riffd sessions` (and the deleted ones the archive
holds)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from helpers.run import run_riffd
from riffd.claude_code.projects import project_folder_name

FIRST = "1af7fc5e-0b7d-4c2e-9aaa-123456789abc"
SECOND = "1af70000-1111-4222-8333-444455556666"
THIRD = "9c0ffee0-1111-4222-8333-444455556666"


def session_lines(session_id: str, cwd: str, prompt: str) -> bytes:
    records = [
        {
            "type": "user",
            "uuid": f"{session_id}-u1",
            "parentUuid": None,
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": "2026-11-20T09:00:00.000Z",
            "isMeta": True,
            "message": {"role": "user", "content": "<command-name>/clear</command-name>"},
        },
        {
            "type": "user",
            "uuid": f"{session_id}-u2",
            "parentUuid": f"{session_id}-u1",
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": "2026-11-20T09:00:01.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        },
        {
            "type": "assistant",
            "uuid": f"{session_id}-a1",
            "parentUuid": f"{session_id}-u2",
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": "2026-11-20T09:00:05.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]},
        },
    ]
    # as Claude Code
    return b"".join(
        json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in records
    )


def setup(tmp_path: Path) -> tuple[Path, Path]:
    app = tmp_path / "app"
    app.mkdir()
    folder = tmp_path / "claude" / "projects" / project_folder_name(str(app))
    folder.mkdir(parents=True)
    for age, (session, prompt) in enumerate(
        [
            (FIRST, "Fix the flaky login test"),
            (SECOND, "Add dark mode"),
            (THIRD, "Write the release notes for 2.0"),
        ]
    ):
        path = folder / f"{session}.jsonl"
        path.write_bytes(session_lines(session, str(app), prompt))
        os.utime(path, (time.time() - 3600 * (age + 1),) * 2)  # FIRST is the newest
    return app, folder


def riffd(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
    }
    return run_riffd(*args, env=env, cwd=cwd or tmp_path)


def test_a_unique_prefix_and_latest_name_a_session_and_an_ambiguous_one_lists_them(
    tmp_path: Path,
) -> None:
    app, folder = setup(tmp_path)
    shown = riffd(tmp_path, "show", "9c0ffee0", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    (session,) = json.loads(shown.stdout)["sessions"]
    assert session["path"] == str(folder / f"{THIRD}.jsonl")
    ambiguous = riffd(tmp_path, "show", "1af7")
    assert ambiguous.returncode == 2
    assert "1af7: 2 sessions start with it" in ambiguous.stderr and FIRST in ambiguous.stderr
    assert SECOND in ambiguous.stderr and "type more of the id" in ambiguous.stderr
    latest = riffd(tmp_path, "show", "latest", "--format", "json", cwd=app)
    assert json.loads(latest.stdout)["sessions"][0]["path"] == str(folder / f"{FIRST}.jsonl")
    assert riffd(tmp_path, "scan", "1af7fc5e").returncode == 0  # every SESSION argument takes them


def test_sessions_lists_id_project_title_dates_size_and_archived(tmp_path: Path) -> None:
    app, _folder = setup(tmp_path)
    result = riffd(tmp_path, "sessions", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["sessions"]
    assert [row["session_id"] for row in rows] == [FIRST, SECOND, THIRD]  # newest first
    # the first real prompt, not the /clear wrapper
    assert rows[0]["title"] == "Fix the flaky login test"
    assert rows[0]["project"] == str(app) and rows[0]["bytes"] > 0 and rows[0]["archived"] is False
    assert rows[0]["resume"] == f"claude --resume {FIRST}"
    text = riffd(tmp_path, "sessions", "--project", str(app))
    first_line = text.stdout.splitlines()[0]
    assert (
        first_line.startswith(FIRST)
        and "Fix the flaky login test" in first_line
        and str(app) in first_line
    )
    # local, with offset
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d[+-]\d\d:\d\d", first_line.split()[1])


def test_a_deleted_session_is_listed_and_restored_by_prefix_byte_for_byte(tmp_path: Path) -> None:
    _app, folder = setup(tmp_path)
    path = folder / f"{THIRD}.jsonl"
    original = path.read_bytes()
    assert (
        riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects")).returncode == 0
    )
    path.unlink()  # Claude Code's 30-day cleanup
    listed = riffd(tmp_path, "sessions", "--deleted")
    assert listed.returncode == 0, listed.stderr
    assert THIRD in listed.stdout and "Write the release notes for 2.0" in listed.stdout
    assert f"`riffd archive restore {THIRD[:8]}` brings it back to {path}" in listed.stdout
    assert FIRST not in listed.stdout  # still on disk
    restored = riffd(tmp_path, "archive", "restore", THIRD[:8])
    assert restored.returncode == 0, restored.stderr
    assert path.read_bytes() == original
    ambiguous = riffd(tmp_path, "archive", "restore", "1af7")
    assert ambiguous.returncode == 2 and "2 archived sessions start with it" in ambiguous.stderr


def test_search_hits_name_the_session_its_project_and_how_to_go_back(tmp_path: Path) -> None:
    app, _folder = setup(tmp_path)
    assert (
        riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects")).returncode == 0
    )
    found = riffd(tmp_path, "archive", "search", "release notes")
    assert found.returncode == 0, found.stderr
    head, text, where = found.stdout.splitlines()[:3]
    assert (
        head.startswith(THIRD) and str(app) in head and '"Write the release notes for 2.0"' in head
    )
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d[+-]\d\d:\d\d", head)  # local time with its offset
    assert "release notes" in text
    assert where.endswith(f"claude --resume {THIRD}") and f"cd {app}" in where
    (hit,) = json.loads(riffd(tmp_path, "archive", "search", "release notes", "--json").stdout)
    assert (
        hit["title"] == "Write the release notes for 2.0"
        and hit["resume"] == f"claude --resume {THIRD}"
    )


def test_backups_list_takes_a_session_prefix(tmp_path: Path) -> None:
    _app, folder = setup(tmp_path)
    for session in (FIRST, THIRD):  # a torn last line: repaired, after a backup
        path = folder / f"{session}.jsonl"
        path.write_bytes(path.read_bytes() + b'{"type":"assis')
        os.utime(path, (time.time() - 7200,) * 2)
        assert riffd(tmp_path, "fix", str(path)).returncode == 0
    listed = riffd(tmp_path, "backups", "list", THIRD[:8], "--json")
    assert [item["session"] for item in json.loads(listed.stdout)] == [THIRD]
