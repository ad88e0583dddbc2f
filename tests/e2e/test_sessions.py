"""Finding sessions: an id prefix, `latest`, `riffd sessions` (and the deleted ones the archive
holds)."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import write_config
from helpers.fusefs import Mount, fuse_unavailable
from helpers.run import riffd_env, run_riffd
from riffd.claude_code.projects import project_folder_name

FIRST = "1af7fc5e-0b7d-4c2e-9aaa-123456789abc"
SECOND = "1af70000-1111-4222-8333-444455556666"
THIRD = "9c0ffee0-1111-4222-8333-444455556666"


def session_lines(session_id: str, cwd: str, prompt: str, hour: int = 9) -> bytes:
    records = [
        {
            "type": "user",
            "uuid": f"{session_id}-u1",
            "parentUuid": None,
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": f"2026-11-20T{hour:02d}:00:00.000Z",
            "isMeta": True,
            "message": {"role": "user", "content": "<command-name>/clear</command-name>"},
        },
        {
            "type": "user",
            "uuid": f"{session_id}-u2",
            "parentUuid": f"{session_id}-u1",
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": f"2026-11-20T{hour:02d}:00:01.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        },
        {
            "type": "assistant",
            "uuid": f"{session_id}-a1",
            "parentUuid": f"{session_id}-u2",
            "sessionId": session_id,
            "cwd": cwd,
            "timestamp": f"2026-11-20T{hour:02d}:00:05.000Z",
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
        path.write_bytes(session_lines(session, str(app), prompt, hour=12 - age))  # FIRST newest
        os.utime(path, (time.time() - 3600 * (age + 1),) * 2)
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
    # a project with no folder here: said, as scan and fix say it (it listed 0 sessions, exit 0)
    nowhere = riffd(tmp_path, "sessions", "--project", str(tmp_path / "nowhere"))
    assert nowhere.returncode == 2 and nowhere.stdout == "", nowhere
    assert f"{tmp_path / 'nowhere'}: no Claude Code project folder for it" in nowhere.stderr


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
    # the commands that look in the project folders say the archive holds it, and how to get it
    for command in ("show", "scan", "export"):
        extra = ["--to", str(tmp_path / "out")] if command == "export" else []
        missing = riffd(tmp_path, command, THIRD[:8], *extra)
        assert missing.returncode == 2, (command, missing.stderr)
        assert (
            f"the archive holds it (Claude Code deleted it?): `riffd archive restore {THIRD[:8]}` "
            "brings it back" in missing.stderr
        ), command
    restored = riffd(tmp_path, "archive", "restore", THIRD[:8])
    assert restored.returncode == 0, restored.stderr
    assert path.read_bytes() == original
    ambiguous = riffd(tmp_path, "archive", "restore", "1af7")
    assert ambiguous.returncode == 2 and "2 archived sessions start with it" in ambiguous.stderr


def test_a_session_whose_file_is_named_otherwise_is_not_called_deleted(tmp_path: Path) -> None:
    """A transcript renamed (its lines name a session its file name does not): `show ID` said the
    archive holds it, "Claude Code deleted it?", and named a restore that restores nothing; it
    names the file instead."""
    _app, folder = setup(tmp_path)
    renamed = folder / "kept-by-hand.jsonl"
    (folder / f"{THIRD}.jsonl").rename(renamed)
    assert riffd(tmp_path, "archive", "ingest").returncode == 0
    missing = riffd(tmp_path, "show", THIRD[:8])
    assert missing.returncode == 2, missing.stderr
    assert f"its lines name it, but its file is named otherwise: {renamed} (pass that path)" in (
        missing.stderr
    ), missing.stderr
    assert "deleted" not in missing.stderr
    assert riffd(tmp_path, "show", str(renamed)).returncode in (0, 1)


def test_the_restore_a_deleted_session_names_is_not_ambiguous(tmp_path: Path) -> None:
    """Two archived sessions share their first eight characters: the command `sessions --deleted`
    names for the deleted one takes as much of the id as tells them apart, and does restore it."""
    _app, folder = setup(tmp_path)
    twin = "9c0ffee0-2222-4222-8333-444455556666"  # THIRD's first 8 characters and more
    (folder / f"{twin}.jsonl").write_bytes(
        (folder / f"{THIRD}.jsonl").read_bytes().replace(THIRD.encode(), twin.encode())
    )
    path = folder / f"{THIRD}.jsonl"
    original = path.read_bytes()
    assert (
        riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects")).returncode == 0
    )
    path.unlink()
    listed = riffd(tmp_path, "sessions", "--deleted")
    (command,) = re.findall(r"`([^`]+)` brings it back", listed.stdout)
    assert command == "riffd archive restore 9c0ffee0-1"
    restored = riffd(tmp_path, *command.split()[1:])
    assert restored.returncode == 0, restored.stderr
    assert path.read_bytes() == original


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
    none = riffd(tmp_path, "archive", "search", "no such words", "--session", THIRD[:4].upper())
    assert none.returncode == 1 and none.stdout == ""
    assert (
        f"riffd: no matches for 'no such words' in the archive (--session {THIRD[:4].upper()})"
        in (none.stderr)
    )
    assert "not have yet" not in none.stderr  # every transcript is archived
    # a transcript written since (or never archived): "no matches" says the archive lacks it, and
    # the command it advises takes it in
    path = tmp_path / "claude" / "projects" / project_folder_name(str(app)) / f"{FIRST}.jsonl"
    with path.open("ab") as handle:
        handle.write(
            json.dumps(
                {
                    "type": "user",
                    "uuid": f"{FIRST}-u3",
                    "parentUuid": f"{FIRST}-a1",
                    "sessionId": FIRST,
                }
            ).encode()
            + b"\n"
        )
    behind = riffd(tmp_path, "archive", "search", "no such words")
    assert behind.returncode == 1
    (note,) = [line for line in behind.stderr.splitlines() if "note:" in line]
    assert note.startswith("riffd: note: 1 transcript(s) under the roots hold lines"), note
    command = note.split("`")[1]
    assert riffd(tmp_path, *command.split()[1:]).returncode == 0
    again = riffd(tmp_path, "archive", "search", "no such words")
    assert again.returncode == 1 and "note:" not in again.stderr, again.stderr
    # --session takes a prefix of one session's id, as every SESSION argument does
    by_prefix = riffd(tmp_path, "archive", "search", "release notes", "--session", THIRD[:6])
    assert by_prefix.returncode == 0 and THIRD in by_prefix.stdout, by_prefix.stderr
    shared = riffd(tmp_path, "archive", "search", "release notes", "--session", "1af7")
    assert shared.returncode == 2 and "2 archived sessions start with it" in shared.stderr
    # a query of punctuation only searches for nothing: said so, not "no matches"
    for query in ("", '"', "-- ?!"):
        wordless = riffd(tmp_path, "archive", "search", query)
        assert wordless.returncode == 2 and wordless.stdout == ""
        assert f"riffd: error: {query!r} holds no word to search for" in wordless.stderr


def test_backups_list_takes_a_session_prefix(tmp_path: Path) -> None:
    _app, folder = setup(tmp_path)
    for session in (FIRST, THIRD):  # a torn last line: repaired, after a backup
        path = folder / f"{session}.jsonl"
        path.write_bytes(path.read_bytes() + b'{"type":"assis')
        os.utime(path, (time.time() - 7200,) * 2)
        assert riffd(tmp_path, "fix", str(path)).returncode == 0
    listed = riffd(tmp_path, "backups", "list", THIRD[:8], "--json")
    assert [item["session"] for item in json.loads(listed.stdout)] == [THIRD]


def test_last_activity_is_the_last_record_not_a_repairs_mtime(tmp_path: Path) -> None:
    app, folder = setup(tmp_path)
    os.utime(folder / f"{THIRD}.jsonl")  # repaired or restored just now: its mtime is now
    rows = json.loads(riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    assert [row["session_id"] for row in rows] == [FIRST, SECOND, THIRD]
    last = datetime(2026, 11, 20, 12, 0, 5, tzinfo=UTC).timestamp()
    assert rows[0]["last_ts"] == last
    text = riffd(tmp_path, "sessions").stdout.splitlines()
    assert text[0].split()[1] == datetime.fromtimestamp(last).astimezone().isoformat(
        timespec="minutes"
    )  # the same moment in text and JSON
    latest = riffd(tmp_path, "show", "latest", "--format", "json", cwd=app)
    assert json.loads(latest.stdout)["sessions"][0]["path"] == str(folder / f"{FIRST}.jsonl")


def test_any_unique_prefix_in_either_case_names_a_session(tmp_path: Path) -> None:
    _app, folder = setup(tmp_path)
    for typed in ("9", "9C0FFEE0", THIRD.upper()):
        shown = riffd(tmp_path, "show", typed, "--format", "json")
        assert shown.returncode == 0, (typed, shown.stderr)
        assert json.loads(shown.stdout)["sessions"][0]["path"] == str(folder / f"{THIRD}.jsonl")
    assert "1: 2 sessions start with it" in riffd(tmp_path, "show", "1").stderr
    none = riffd(tmp_path, "show", "7")
    assert none.returncode == 2 and "no session starts with 7" in none.stderr


@pytest.mark.skipif(fuse_unavailable() is not None, reason=fuse_unavailable() or "")
def test_sessions_names_what_it_could_not_read_and_exits_2(tmp_path: Path) -> None:
    with Mount(tmp_path / "backing", tmp_path / "mount", tmp_path / "faults.json") as mount:
        _app, folder = setup(mount.mountpoint)
        hidden = folder / f"{SECOND}.jsonl"
        mount.faults({"ops": ["open"], "glob": f"*/{SECOND}.jsonl", "errno": errno.EIO})
        done = run_riffd(
            "sessions",
            "--json",
            env={
                "CLAUDE_CONFIG_DIR": str(mount.mountpoint / "claude"),
                "RIFFD_STATE_DIR": str(tmp_path / "state"),
            },
            cwd=tmp_path,
        )
        assert done.returncode == 2, done.stderr
        listed = [row["session_id"] for row in json.loads(done.stdout)["sessions"]]
        assert listed == [FIRST, THIRD]  # the rest is listed
        assert f"riffd: error: {hidden}: Input/output error" in done.stderr


def test_an_archive_that_cannot_be_read_is_said_not_taken_for_none(tmp_path: Path) -> None:
    """A damaged archive.db: `sessions` said "no archive yet" and listed every session as "not
    archived", exit 0."""
    _app, _folder = setup(tmp_path)
    assert (
        riffd(tmp_path, "archive", "ingest", str(tmp_path / "claude" / "projects")).returncode == 0
    )
    archive = tmp_path / "state" / "archive.db"
    archive.write_bytes(b"not a database, " * 4096)
    for words in (("sessions",), ("sessions", "--json")):
        result = riffd(tmp_path, *words)
        assert result.returncode == 2, result.stderr
        assert f"riffd: error: the archive {archive} cannot be read (" in result.stderr
        assert "no archive yet" not in result.stderr and "Traceback" not in result.stderr
    rows = json.loads(result.stdout)["sessions"]
    assert [row["session_id"] for row in rows] == [FIRST, SECOND, THIRD]  # still listed
    assert {row["archived"] for row in rows} == {None}
    listed = riffd(tmp_path, "sessions").stdout
    assert "archive unreadable" in listed and "not archived" not in listed


def test_show_says_a_redundant_call_in_words_in_every_format(tmp_path: Path) -> None:
    _app, folder = setup(tmp_path)
    path = folder / f"{THIRD}.jsonl"
    records = []
    for number, minute in ((1, 1), (2, 2)):
        use = f"toolu_{number}"
        stamp = f"2026-11-20T10:0{minute}:00.000Z"
        records += [
            {
                "type": "assistant",
                "uuid": f"read-{number}",
                "sessionId": THIRD,
                "timestamp": stamp,
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": use,
                            "name": "Read",
                            "input": {"file_path": "/a.py"},
                        }
                    ],
                },
            },
            {
                "type": "user",
                "uuid": f"result-{number}",
                "sessionId": THIRD,
                "timestamp": stamp,
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use, "content": "x = 1\n"}],
                },
            },
        ]
    with path.open("ab") as handle:
        handle.writelines(json.dumps(record).encode() + b"\n" for record in records)
    for form in ("text", "md"):
        shown = riffd(tmp_path, "show", THIRD, "--format", form)
        assert shown.returncode == 0, shown.stderr
        assert "redundant tool calls" in shown.stdout
        assert "line 6: Read toolu_2 repeats toolu_1 (line 4, 60 s earlier)" in shown.stdout
        assert "{'" not in shown.stdout and "RedundantCall(" not in shown.stdout
    document = json.loads(riffd(tmp_path, "show", THIRD, "--format", "json").stdout)
    assert document["sessions"][0]["redundant_calls"][0]["later_id"] == "toolu_2"


def test_reading_commands_never_make_an_empty_archive(tmp_path: Path) -> None:
    """Before the daemon or an ingest made the archive, `archive search`, `stats`, `export`,
    `restore`, `verify` and `compact` say there is none yet and exit 2; none of them makes an empty
    one (after which `sessions` no longer said 'no archive yet')."""
    setup(tmp_path)
    archive = tmp_path / "state" / "archive.db"
    for args in (
        ("search", "login"),
        ("stats",),
        ("export", FIRST),
        ("restore", FIRST),
        ("verify",),
        ("compact",),
    ):
        result = riffd(tmp_path, "archive", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert f"riffd: error: no archive at {archive} yet" in result.stderr, args
        assert not archive.exists(), args
    assert "no archive yet (the daemon makes it)" in riffd(tmp_path, "sessions").stderr


def test_an_acknowledged_finding_does_not_count_in_a_sessions_health(tmp_path: Path) -> None:
    """The health `sessions` shows counts what the report counts: an acknowledged finding is
    not one (it showed '1 finding(s)' while the report said 'open findings: none')."""
    from riffd.commands.sessions import health_counts
    from riffd.state.records import Watermark
    from riffd.state.store import StateStore
    from riffd.transcript.acks import Ack, save_acks

    state = tmp_path / "state"
    store = StateStore(state / "state.db")
    for name in ("a", "b"):
        mark = Watermark(f"/p/{name}.jsonl", 1, 1, 0, 0, 0, "", 0, "", 0, 0)
        finding = {"class": "duplicate_uuid", "lines": [4], "message": "twice", "uuids": ["u4"]}
        store.save_file(mark, name, [finding], 0)
    store.close()
    save_acks(state, [Ack("/p/a.jsonl", "duplicate_uuid", 4, "duplicate_uuid||u4", "2026-11-26")])
    counts = health_counts(state / "state.db")
    assert {path: health.findings for path, health in counts.items()} == {
        "/p/a.jsonl": 0,
        "/p/b.jsonl": 1,
    }


def test_the_resume_command_names_the_file_as_claude_code_finds_it(tmp_path: Path) -> None:
    """A transcript renamed (file X.jsonl, lines saying sessionId Y): Claude Code 2.1.332 resumes
    it by X and says "No conversation found" for Y (checked with the real client), so every
    `claude --resume` riffd prints names X: `sessions`, and `archive search` for a word in it."""
    _app, folder = setup(tmp_path)
    renamed = "7e7e7e7e-1111-4222-8333-444455556666"
    (folder / f"{SECOND}.jsonl").rename(folder / f"{renamed}.jsonl")
    rows = json.loads(riffd(tmp_path, "sessions", "--json").stdout)["sessions"]
    row = next(row for row in rows if row["path"].endswith(f"{renamed}.jsonl"))
    assert row["resume"] == f"claude --resume {renamed}"
    assert riffd(tmp_path, "archive", "ingest").returncode == 0
    found = riffd(tmp_path, "archive", "search", "dark mode", "--json")
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)
    assert hit["resume"] == f"claude --resume {renamed}"
    text = riffd(tmp_path, "archive", "search", "dark mode").stdout
    assert text.rstrip().endswith(f"claude --resume {renamed}"), text


@pytest.mark.slow
def test_search_advises_a_command_that_brings_a_deleted_session_back(tmp_path: Path) -> None:
    """A hit whose transcript Claude Code deleted: `claude --resume` alone would find no
    conversation, so the command `archive search` prints restores it first, with the `--config` the
    search was given (its state folder is not the default one). Run by `sh -c` as a user pastes it
    (riffd on PATH, a stand-in `claude` that records where it ran and whether the transcript it is
    to resume is there), it brings the file back byte for byte and resumes it in its project; the
    JSON's `go_back` is the same command. It resumes once the transcript is back, also when the
    restore exits 1 because a subagent's transcript on disk differs from the archive's."""
    app, folder = setup(tmp_path)
    config = write_config(tmp_path)
    env = {"HOME": str(tmp_path / "home")}  # (the default state folder is another, empty one)
    path = folder / f"{SECOND}.jsonl"
    original = path.read_bytes()
    agent = folder / SECOND / "subagents" / "agent-a1.jsonl"
    agent.parent.mkdir(parents=True)
    agent_line = {"type": "user", "uuid": "a-1", "parentUuid": None, "sessionId": SECOND}
    agent.write_text(json.dumps({**agent_line, "isSidechain": True}) + "\n")
    assert run_riffd("archive", "ingest", config=config, env=env).returncode == 0
    path.unlink()
    agent.write_text(json.dumps({**agent_line, "isSidechain": False}) + "\n")  # (its length kept)
    os.utime(agent, (time.time() - 7200,) * 2)
    found = run_riffd("archive", "search", "dark mode", "--json", config=config, env=env)
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)
    text = run_riffd("archive", "search", "dark mode", config=config, env=env).stdout
    advised = text.rstrip().rsplit("; back to it: ", 1)[1]
    assert advised == hit["go_back"]
    assert advised.startswith(
        f"riffd --config {config} archive restore {SECOND}; test -e {path} && cd "
    )
    # `sessions --deleted` advises the same restore, --config kept
    listed = run_riffd("sessions", "--deleted", "--json", config=config, env=env)
    (row,) = json.loads(listed.stdout)["sessions"]
    assert advised.startswith(row["restore"] + "; ")
    text = run_riffd("sessions", "--deleted", config=config, env=env).stdout
    assert f"`riffd --config {config} archive restore " in text, text
    # and so do the commands that look for it in the project folders
    for command in ("show", "scan", "fix", "export"):
        extra = ["--to", str(tmp_path / "out")] if command == "export" else []
        missing = run_riffd(command, SECOND, *extra, config=config, env=env)
        assert missing.returncode == 2, (command, missing.stderr)
        assert (
            f"`riffd --config {config} archive restore {SECOND}` brings it back" in missing.stderr
        ), (command, missing.stderr)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "claude-ran"
    for name, body in (
        ("riffd", f'exec {sys.executable} -m riffd "$@"'),
        (
            "claude",
            f'{{ pwd; echo "$@"; echo "$CLAUDE_CONFIG_DIR"; test -f "{folder}/$2.jsonl" && echo there; }}'
            f' > "{seen}"',
        ),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    shell = riffd_env(**env, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ran = subprocess.run(
        ["sh", "-c", advised], env=shell, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert path.read_bytes() == original
    assert f"{agent} exists and differs from the archive's copy" in ran.stderr  # (exit 1)
    # (the configuration's Claude folder is not the shell's ~/.claude: the client is told it)
    claude = tmp_path / "claude"
    assert seen.read_text().splitlines() == [str(app), f"--resume {SECOND}", str(claude), "there"]
    # With the transcript back, the command is the resume alone
    again = run_riffd("archive", "search", "dark mode", "--json", config=config, env=env)
    assert json.loads(again.stdout)[0]["go_back"] == (
        f"cd {app} && CLAUDE_CONFIG_DIR={claude} claude --resume {SECOND}"
    )


def test_session_ids_are_looked_up_under_the_configurations_roots(tmp_path: Path) -> None:
    """A configuration whose roots are not Claude Code's own folder (here the shell has no
    CLAUDE_CONFIG_DIR, and ~/.claude is empty): `show`, `scan`, `fix` and `export` find a session by
    its id prefix there, and `scan` alone scans those roots, as `sessions` and the daemon do."""
    _app, folder = setup(tmp_path)
    config = write_config(tmp_path)
    env = {"HOME": str(tmp_path / "home")}
    shown = run_riffd("show", FIRST[:8], "--format", "json", config=config, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["sessions"][0]["path"] == str(folder / f"{FIRST}.jsonl")
    for command in ("scan", "fix"):
        found = run_riffd(command, SECOND[:8], config=config, env=env)
        assert found.returncode == 0, (command, found.stderr)
    exported = run_riffd("export", THIRD[:8], "--to", str(tmp_path / "out"), config=config, env=env)
    assert exported.returncode == 0, exported.stderr
    everything = run_riffd("scan", config=config, env=env)
    assert everything.returncode == 0 and "scanned 3 file(s)" in everything.stderr, everything
