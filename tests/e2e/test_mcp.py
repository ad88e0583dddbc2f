"""`riffd mcp` as Claude Code runs it: a real subprocess spoken to over stdio by the official SDK's
client. Sessions laid out as the client writes them (helpers.sessiontree), archived by a real
`riffd archive ingest`, then deleted as Claude Code's cleanup deletes them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import riffd
from conftest import dead_pid, write_config
from helpers.run import riffd_command, riffd_env, run_riffd
from helpers.sessiontree import SessionTree, build_session, delete_like_cleanup, snapshot
from riffd.display import shell_command

mcp = pytest.importorskip("mcp", reason="the MCP SDK (riffd[mcp]) is not installed")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

TOOLS = {
    "search": {"query", "project", "session", "since", "limit"},
    "list_sessions": {"project", "deleted", "limit"},
    "read_session": {"session", "start", "max_chars"},
    "session_health": {"session"},
    "restore_session": {"session"},
}
DAMAGED = "11111111-2222-4333-8444-555555555555"


@dataclass
class Home:
    """A Claude folder with two archived sessions (the first then deleted), and riffd's config."""

    tmp: Path
    config: Path
    deleted: SessionTree
    kept: SessionTree

    @property
    def env(self) -> dict[str, str]:
        return riffd_env(CLAUDE_CONFIG_DIR=str(self.tmp / "claude"), HOME=str(self.tmp))


def _home(tmp_path: Path, *, delete: bool = True) -> Home:
    deleted = build_session(tmp_path / "claude")
    kept = build_session(tmp_path / "claude", seed=2)
    with open(deleted.main, "ab") as transcript:  # a word only the deleted session holds
        transcript.write(_user(deleted.session_id, 4, "the quokka migration plan"))
    home = Home(tmp_path, write_config(tmp_path), deleted, kept)
    result = run_riffd("archive", "ingest", config=home.config, env=home.env)
    assert result.returncode == 0, result.stderr
    if delete:
        delete_like_cleanup(deleted)
    return home


def _user(session: str, number: int, text: str) -> bytes:
    record = {
        "type": "user",
        "uuid": f"00000000-0000-4000-8000-{number:012d}",
        "parentUuid": f"00000000-0000-4000-8000-{number - 1:012d}" if number else None,
        "sessionId": session,
        "cwd": "/home/user/app",
        "timestamp": f"2026-10-01T11:00:{number % 60:02d}Z",
        "message": {"role": "user", "content": text},
    }
    return (json.dumps(record) + "\n").encode()


def _talk(
    home: Home,
    talk: Callable[[ClientSession], Awaitable[Any]],
    initialized: list[Any] | None = None,
    **server: Any,
) -> Any:
    """Start `riffd mcp` as Claude Code does and run `talk` against it (the answer to `initialize`
    appended to `initialized` when given)."""
    command = riffd_command("mcp", config=home.config)
    params = StdioServerParameters(
        command=server.get("command", command[0]),
        args=server.get("args", command[1:]),
        env=server.get("env", home.env),
        cwd=str(home.tmp),
    )

    async def run() -> Any:
        with open(home.tmp / "server.stderr", "w") as errors:
            async with (
                stdio_client(params, errlog=errors) as (read, write),
                ClientSession(read, write) as session,
            ):
                answer = await session.initialize()
                if initialized is not None:
                    initialized.append(answer)
                return await talk(session)

    return asyncio.run(run())


def _data(result: Any) -> Any:
    """A tool's structured answer (a list tool's under `result`)."""
    assert not result.isError, result.content[0].text
    data = result.structuredContent
    return data["result"] if set(data) == {"result"} else data


def test_the_tools_and_their_schemas(tmp_path: Path) -> None:
    home = _home(tmp_path)
    initialized: list[Any] = []
    listed = _talk(home, lambda session: session.list_tools(), initialized)
    # the server names itself and its own version, not the SDK's
    assert (initialized[0].serverInfo.name, initialized[0].serverInfo.version) == (
        "riffd",
        riffd.__version__,
    )
    tools = {tool.name: tool for tool in listed.tools}
    assert {name: set(tool.inputSchema["properties"]) for name, tool in tools.items()} == TOOLS
    assert tools["search"].inputSchema["required"] == ["query"]
    assert tools["search"].inputSchema["properties"]["limit"]["default"] == 10
    assert tools["read_session"].inputSchema["properties"]["max_chars"]["default"] == 20000
    assert tools["list_sessions"].inputSchema["properties"]["deleted"]["default"] is False
    restore = tools["restore_session"].annotations
    assert (restore.readOnlyHint, restore.destructiveHint, restore.idempotentHint) == (
        False,
        False,
        True,
    )
    assert all(tools[name].annotations.readOnlyHint for name in TOOLS if name != "restore_session")
    assert all(len(tool.description or "") > 200 for tool in tools.values())


def test_search_and_list_find_a_deleted_session(tmp_path: Path) -> None:
    home = _home(tmp_path)

    async def talk(session: ClientSession) -> tuple[Any, Any, Any]:
        hits = await session.call_tool("search", {"query": "quokka"})
        deleted = await session.call_tool("list_sessions", {"deleted": True})
        on_disk = await session.call_tool("list_sessions", {})
        return _data(hits), _data(deleted), _data(on_disk)

    hits, deleted, on_disk = _talk(home, talk)
    assert [hit["session_id"] for hit in hits] == [home.deleted.session_id]
    assert hits[0]["transcript_exists"] is False
    assert "quokka" in hits[0]["snippet"]
    # riffd as Claude Code runs the server: the user's shell may not have it on its PATH
    server = shell_command(*riffd_command(config=home.config))
    assert hits[0]["go_back"].startswith(
        f"{server} archive restore {home.deleted.session_id}; test -e {home.deleted.main} && "
    )
    assert [row["session_id"] for row in deleted] == [home.deleted.session_id]
    assert deleted[0]["deleted"] is True and deleted[0]["archived"] is True
    assert [row["session_id"] for row in on_disk] == [home.kept.session_id]


def test_a_hit_whose_lines_name_no_session_has_a_way_back_by_its_file(tmp_path: Path) -> None:
    """A deleted transcript whose lines carry no `sessionId`: the hit's `go_back` restores it by
    the session its file name gives, and resumes it so, as `riffd archive search` prints (it was
    None)."""
    home = _home(tmp_path, delete=False)
    name = "5e5e5e5e-1111-4222-8333-444455556666"
    path = home.deleted.main.parent / f"{name}.jsonl"
    record = json.loads(_user(name, 1, "the wombat release checklist"))
    del record["sessionId"]
    line = (json.dumps(record) + "\n").encode()
    path.write_bytes(line)
    result = run_riffd("archive", "ingest", config=home.config, env=home.env)
    assert result.returncode == 0, result.stderr
    path.unlink()

    async def talk(session: ClientSession) -> Any:
        return _data(await session.call_tool("search", {"query": "wombat"}))

    (hit,) = _talk(home, talk)
    assert hit["transcript_exists"] is False
    server = shell_command(*riffd_command(config=home.config))
    resume = f"test -e {path} && cd /home/user/app && claude --resume {name}"
    assert hit["go_back"] == f"{server} archive restore {name}; {resume}"
    cli = run_riffd("archive", "search", "wombat", "--json", config=home.config, env=home.env)
    assert json.loads(cli.stdout)[0]["go_back"] == (
        f"riffd --config {home.config} archive restore {name}; {resume}"
    )
    # The restore as advised, run by a shell with none of riffd's variables nor riffd on its PATH
    shell = {name: value for name, value in home.env.items() if not name.startswith("RIFFD_")}
    restore = hit["go_back"].removesuffix(f"; {resume}")
    ran = subprocess.run(["sh", "-c", restore], env=shell, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert path.read_bytes() == line


def test_the_commands_the_server_advises_keep_the_state_folder_it_was_given(
    tmp_path: Path,
) -> None:
    """`riffd mcp install` registers the server with riffd's variables (RIFFD_STATE_DIR here): a
    user's shell may not have them, so the restore the server advises sets them."""
    home = _home(tmp_path, delete=False)
    state = tmp_path / "elsewhere"
    result = run_riffd(
        "archive", "ingest", env={**home.env, "RIFFD_STATE_DIR": str(state)}, config=None
    )
    assert result.returncode == 0, result.stderr
    delete_like_cleanup(home.deleted)
    command = riffd_command("mcp")
    env = {**home.env, "RIFFD_STATE_DIR": str(state)}

    async def talk(session: ClientSession) -> Any:
        return _data(await session.call_tool("search", {"query": "quokka"}))

    (hit,) = _talk(home, talk, command=command[0], args=command[1:], env=env)
    assert hit["go_back"].startswith(
        f"RIFFD_STATE_DIR={state} {shell_command(*riffd_command())} archive restore "
    ), hit["go_back"]


def test_read_session_pages_join_to_the_whole_text(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with open(home.kept.main, "ab") as transcript:
        for number in range(4, 300):
            transcript.write(_user(home.kept.session_id, number, f"message {number} " * 20))

    async def talk(session: ClientSession) -> tuple[Any, list[Any], Any, Any]:
        whole = _data(
            await session.call_tool(
                "read_session", {"session": home.kept.session_id, "max_chars": 200000}
            )
        )
        pages, start = [], 0
        while start is not None:
            page = _data(
                await session.call_tool(
                    "read_session",
                    {"session": home.kept.session_id[:8], "start": start, "max_chars": 5000},
                )
            )
            pages.append(page)
            start = page["next_start"]
        deleted = _data(
            await session.call_tool("read_session", {"session": home.deleted.session_id})
        )
        latest = _data(await session.call_tool("read_session", {"session": "latest"}))
        return whole, pages, deleted, latest

    whole, pages, deleted, latest = _talk(home, talk)
    assert latest["session_id"] == home.kept.session_id  # the newest session on disk
    assert whole["next_start"] is None and whole["total_chars"] > 50000
    assert len(pages) > 10 and all(len(page["text"]) <= 5000 for page in pages)
    assert "".join(page["text"] for page in pages) == whole["text"]
    assert "[line 299] ### User" in whole["text"] and "message 298" in whole["text"]
    assert deleted["from_archive"] is True and "quokka migration plan" in deleted["text"]
    assert "agent-" in deleted["text"]  # the subagent, named


def test_list_sessions_says_when_a_file_changed_since_the_daemon_read_it(tmp_path: Path) -> None:
    """The health list_sessions gives is the daemon's, of the file as it read it: a file changed
    since (repaired with the daemon stopped, written before it looked) says so."""
    from riffd.state.records import Watermark
    from riffd.state.store import StateStore

    home = _home(tmp_path, delete=False)
    store = StateStore(tmp_path / "state" / "state.db")
    finding = {"class": "duplicate_uuid", "lines": [4], "message": "twice", "uuids": ["u4"]}
    for tree, findings in ((home.kept, []), (home.deleted, [finding])):
        now = tree.main.stat()
        mark = Watermark(
            str(tree.main),
            now.st_dev,
            now.st_ino,
            now.st_size,
            1,
            0,
            "",
            0,
            "",
            now.st_size,
            now.st_mtime_ns,
        )
        store.save_file(mark, tree.session_id, findings, 0)
    store.close()
    with open(home.deleted.main, "ab") as transcript:
        transcript.write(_user(home.deleted.session_id, 5, "written after the daemon looked"))
    rows = _data(_talk(home, lambda session: session.call_tool("list_sessions", {})))
    health = {row["session_id"]: row["health"] for row in rows}
    assert health[home.kept.session_id] == "ok", health
    assert health[home.deleted.session_id] == (
        "1 finding(s): session_health names them; the file changed after the daemon read it "
        "(session_health checks it as it is now)"
    ), health


def test_session_health_names_the_finding_and_the_api_error(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home.kept.project / f"{DAMAGED}.jsonl").write_bytes(_duplicate_result())

    health = _talk(
        home,
        lambda session: session.call_tool("session_health", {"session": DAMAGED[:8]}),
    )
    report = _data(health)
    assert report["ok"] is False
    assert [finding["finding"] for finding in report["findings"]] == ["duplicate_tool_result"]
    assert "each tool_use must have a single result" in report["findings"][0]["api_error"]
    assert report["findings"][0]["riffd_repairs"] is True
    server = shell_command(*riffd_command(config=home.config))  # (as Claude Code runs it)
    assert report["repair_now"].startswith(f"{server} fix ")


@pytest.mark.slow
def test_the_repair_now_command_repairs_it_now(tmp_path: Path) -> None:
    # written a moment ago: within the quiet period, `riffd fix PATH` skips it as live; the command
    # session_health gives must repair it when run now (the model sees the note on when to)
    home = _home(tmp_path)
    path = home.kept.project / f"{DAMAGED}.jsonl"
    path.write_bytes(_duplicate_result())
    report = _data(
        _talk(home, lambda session: session.call_tool("session_health", {"session": DAMAGED}))
    )
    words = shlex.split(report["repair_now"])
    assert words[: len(words) - 4] == riffd_command(config=home.config), report
    assert words[-4:] == ["fix", "--quiet-period", "0", str(path)], report
    # run as printed, by a shell with none of riffd's variables nor riffd on its PATH
    shell = {name: value for name, value in home.env.items() if not name.startswith("RIFFD_")}
    done = subprocess.run(
        ["sh", "-c", report["repair_now"]], env=shell, capture_output=True, text=True
    )
    assert done.returncode == 0 and path.read_bytes() != _duplicate_result(), done.stderr
    assert any("sure the session is closed" in note for note in report["notes"]), report
    # a Claude Code process has it open: nothing repairs it now
    path.write_bytes(_duplicate_result())
    registry = tmp_path / "claude" / "sessions"
    registry.mkdir()
    (registry / f"{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "sessionId": DAMAGED, "cwd": "/home/user/app"})
    )
    report = _data(
        _talk(home, lambda session: session.call_tool("session_health", {"session": DAMAGED}))
    )
    assert report["repair_now"] is None and "live" in report["notes"][0], report


def _duplicate_result() -> bytes:
    """A session whose one tool call is answered twice on the loaded chain."""

    def line(number: int, kind: str, content: Any, **fields: Any) -> str:
        record = {
            "type": kind,
            "uuid": f"00000000-0000-4000-8000-{number:012d}",
            "parentUuid": f"00000000-0000-4000-8000-{number - 1:012d}" if number > 1 else None,
            "sessionId": DAMAGED,
            "cwd": "/home/user/app",
            "timestamp": f"2026-10-01T10:00:{number:02d}Z",
            "message": {"role": kind, "content": content},
        } | fields
        return json.dumps(record) + "\n"

    result = [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "a b"}]
    use = [{"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}}]
    lines = [
        line(1, "user", "list files"),
        line(2, "assistant", use, requestId="r1"),
        line(3, "user", result),
        line(4, "user", result),
        line(5, "assistant", [{"type": "text", "text": "done"}], requestId="r2"),
    ]
    return "".join(lines).encode()


def test_restore_session_brings_it_back_byte_for_byte_and_never_overwrites(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path, delete=False)
    before = snapshot(home.deleted.files())
    delete_like_cleanup(home.deleted)

    async def talk(session: ClientSession) -> tuple[Any, Any]:
        first = _data(
            await session.call_tool("restore_session", {"session": home.deleted.session_id[:8]})
        )
        with open(home.deleted.main, "ab") as transcript:  # resumed since: it has grown
            transcript.write(_user(home.deleted.session_id, 5, "resumed"))
        return first, _data(
            await session.call_tool("restore_session", {"session": home.deleted.session_id})
        )

    grown = home.deleted.main
    first, second = _talk(home, talk)
    assert first["complete"] is True and str(grown) == first["written"][-1]
    assert first["resume"].endswith(f"claude --resume {home.deleted.session_id}")
    after = snapshot(home.deleted.files())
    assert {path: after[path] for path in before if path != grown} == {
        path: value for path, value in before.items() if path != grown
    }
    assert grown.read_bytes().endswith(_user(home.deleted.session_id, 5, "resumed"))
    assert second["written"] == []  # the grown transcript is left as it is


@pytest.mark.parametrize("written", ["as_claude_code_writes_it", "giving_its_id_twice"])
def test_a_live_session_is_not_restored(tmp_path: Path, written: str) -> None:
    """Also when the entry gives another session's id before this one's: the repairs count it
    unreadable (it may be any session's), and the restore once read it as naming none."""
    home = _home(tmp_path)
    registry = tmp_path / "claude" / "sessions"
    registry.mkdir()
    entry = {"pid": os.getpid(), "sessionId": home.deleted.session_id, "cwd": "/home/user/app"}
    text = json.dumps(entry)
    if written == "giving_its_id_twice":
        other = "0f5b6c1e-aaaa-bbbb-cccc-444444444444"
        text = text.replace('"sessionId"', f'"sessionId": "{other}", "sessionId"')
    (registry / f"{os.getpid()}.json").write_text(text)
    result = _talk(
        home,
        lambda session: session.call_tool("restore_session", {"session": home.deleted.session_id}),
    )
    want = "is live" if written == "as_claude_code_writes_it" else "may be live"
    assert result.isError and want in result.content[0].text, result.content[0].text
    assert not home.deleted.main.exists()


def test_errors_are_tool_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    home = _home(tmp_path)
    twin = home.kept.project / f"{home.kept.session_id[:8]}-0000-4000-8000-000000000000.jsonl"
    twin.write_bytes(_user(twin.stem, 0, "a twin prefix"))

    async def talk(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("read_session", {"session": "not-an-id!"}),
            await session.call_tool("session_health", {"session": "deadbeef"}),
            await session.call_tool("read_session", {"session": home.kept.session_id[:8]}),
            await session.call_tool("search", {"query": "plan", "limit": 0}),
            await session.call_tool("search", {"query": "plan", "since": "yesterday"}),
            await session.call_tool("list_sessions", {"limit": "many"}),
            await session.call_tool("search", {"query": "?! --"}),
            await session.call_tool("search", {"query": "quokka"}),
        ]

    *errors, last = _talk(home, talk)
    assert all(error.isError for error in errors)
    texts = [error.content[0].text for error in errors]
    assert "is not a session id" in texts[0]
    assert "No session starts with 'deadbeef'" in texts[1]
    assert "2 sessions start with" in texts[2]
    assert "limit must be between 1 and" in texts[3]
    assert "is not a date" in texts[4]
    assert "query '?! --' holds no word" in texts[6]
    assert [hit["session_id"] for hit in _data(last)] == [home.deleted.session_id]


def test_without_an_archive_search_says_how_to_make_one(tmp_path: Path) -> None:
    build_session(tmp_path / "claude")
    home = Home(tmp_path, write_config(tmp_path), None, None)  # type: ignore[arg-type]
    result = _talk(home, lambda session: session.call_tool("search", {"query": "plan"}))
    assert result.isError and "There is no archive at" in result.content[0].text


def test_without_the_sdk_it_says_in_one_line_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; from riffd.entry import main; "
        "raise SystemExit(main(['mcp']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=riffd_env(),
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "pip install 'riffd[mcp]'" in result.stderr


def test_an_unreadable_archive_is_a_tool_error_and_the_sessions_on_disk_still_answer(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    archive = tmp_path / "state" / "archive.db"
    for leftover in archive.parent.glob("archive.db-*"):
        leftover.unlink()
    archive.write_bytes(b"not a database at all\n" * 512)

    async def talk(session: ClientSession) -> list[Any]:
        return [
            await session.call_tool("search", {"query": "quokka"}),
            await session.call_tool("list_sessions", {}),
            await session.call_tool("read_session", {"session": home.kept.session_id[:8]}),
        ]

    search, listed, read = _talk(home, talk)
    assert search.isError and f"The archive at {archive} cannot be read" in search.content[0].text
    assert [row["session_id"] for row in _data(listed)] == [home.kept.session_id]
    assert _data(read)["from_archive"] is False
    assert archive.read_bytes() == b"not a database at all\n" * 512  # read-only: left as it is


def test_latest_and_the_listing_go_by_the_last_record_not_the_file_time(tmp_path: Path) -> None:
    home = _home(tmp_path, delete=False)
    record = json.loads(_user(home.kept.session_id, 9, "the newest words"))
    record["timestamp"] = "2030-01-01T00:00:00Z"
    with open(home.kept.main, "ab") as transcript:
        transcript.write((json.dumps(record) + "\n").encode())
    later = home.kept.main.stat().st_mtime + 3600
    os.utime(home.deleted.main, (later, later))  # as a repair or a restore leaves the other one
    ids = (home.kept.session_id, home.deleted.session_id)
    length = next(n for n in range(1, 37) if ids[0][:n] != ids[1][:n])
    prefix = home.kept.session_id[:length].upper()  # the shortest unique prefix, upper case

    async def talk(session: ClientSession) -> tuple[Any, Any, Any]:
        latest = await session.call_tool("read_session", {"session": "latest"})
        named = await session.call_tool("session_health", {"session": prefix})
        listed = await session.call_tool("list_sessions", {})
        return _data(latest), _data(named), _data(listed)

    latest, named, listed = _talk(home, talk)
    assert latest["session_id"] == home.kept.session_id
    assert named["session_id"] == home.kept.session_id
    assert [row["session_id"] for row in listed][:2] == [
        home.kept.session_id,
        home.deleted.session_id,
    ]


def test_a_killed_servers_conversations_are_removed_by_the_next(tmp_path: Path) -> None:
    home = _home(tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    left = temp / f"riffd-mcp-{dead_pid()}-abc123"  # a server killed with -9 left it
    (left / "session").mkdir(parents=True)
    (left / "session" / "words.jsonl").write_text("what a deleted session said\n")
    alive = temp / f"riffd-mcp-{os.getpid()}-def456"  # a running server's
    alive.mkdir()
    env = {**home.env, "TMPDIR": str(temp)}

    async def talk(session: ClientSession) -> Any:
        read = _data(await session.call_tool("read_session", {"session": home.deleted.session_id}))
        return read, sorted(path.name for path in temp.iterdir())

    read, during = _talk(home, talk, env=env)
    assert read["session_id"] == home.deleted.session_id
    assert not left.exists() and alive.is_dir()
    assert len(during) == 2 and alive.name in during  # its own folder and the live one
    assert sorted(path.name for path in temp.iterdir()) == [alive.name]  # its own, gone on exit


@pytest.mark.slow
def test_a_server_killed_mid_restore_leaves_every_file_whole_or_absent(tmp_path: Path) -> None:
    """kill -9 `riffd mcp` while restore_session writes a big transcript back: no file of the
    session is left part-written where Claude Code reads it (each is absent, or its archived bytes),
    and a new server's restore_session puts the whole session back, byte for byte, and removes the
    killed server's temp file."""
    home = _home(tmp_path, delete=False)
    session = home.deleted.session_id
    with open(home.deleted.main, "ab") as transcript:  # about 25 MB: its restore takes a while
        for number in range(5, 60_005):
            transcript.write(_user(session, number, f"line {number} " + "x" * 300))
    assert run_riffd("archive", "ingest", config=home.config, env=home.env).returncode == 0
    before = {path: path.read_bytes() for path in home.deleted.files()}
    delete_like_cleanup(home.deleted)
    project = home.deleted.main.parent
    killed: list[int] = []

    def kill_once_the_transcript_is_being_written() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for temp in project.glob(f".{session}.jsonl.riffd-*.tmp"):
                if temp.stat().st_size > 0:
                    pid = int(temp.name.split(".riffd-")[1].split("-")[0])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.001)

    async def talk(client: ClientSession) -> Any:
        watcher = threading.Thread(target=kill_once_the_transcript_is_being_written)
        watcher.start()
        try:
            return await asyncio.wait_for(
                client.call_tool("restore_session", {"session": session}), 60
            )
        except Exception as exc:  # the server is gone: the SDK says so as it will
            return exc
        finally:
            watcher.join()

    with contextlib.suppress(Exception):  # (leaving the client after its server died)
        _talk(home, talk)
    assert killed, "the restore ended before its transcript was seen being written"
    temps = list(project.glob(f".{session}.jsonl.riffd-{killed[0]}-*.tmp"))
    assert len(temps) == 1 and not home.deleted.main.exists()
    for path, data in before.items():  # what is there is whole
        assert not path.exists() or path.read_bytes() == data, path

    async def again(client: ClientSession) -> Any:
        return _data(await client.call_tool("restore_session", {"session": session}))

    result = _talk(home, again)
    assert result["complete"] is True
    assert {path: path.read_bytes() for path in before} == before
    assert not temps[0].exists()
