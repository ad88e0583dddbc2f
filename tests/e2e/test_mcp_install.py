"""`riffd mcp install` / `uninstall` on Claude Code's user configuration (`$CLAUDE_CONFIG_DIR/.claude.json`),
as real subprocesses: only riffd's entry changes, a copy is kept before every write, install twice and
uninstall give the file back byte for byte, and the entry starts a working server the way Claude Code
runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write_config
from helpers.run import riffd_env, run_riffd

# A user configuration as Claude Code writes it (JSON.stringify(config, null, 2)), with much more
# than MCP servers: none of it may change.
CLAUDE_JSON = """{
  "numStartups": 42,
  "installMethod": "native",
  "tipsHistory": {
    "new-user-warmup": 1,
    "ide-hotkey": 7
  },
  "projects": {
    "/home/user/app": {
      "allowedTools": [],
      "mcpServers": {
        "local-one": {
          "type": "stdio",
          "command": "node",
          "args": ["local.js"],
          "env": {}
        }
      },
      "lastCost": 0.1234,
      "exampleFiles": ["caf\\u00e9.py", "na\u00efve \\"quoted\\".md"]
    }
  },
  "userID": "0123456789abcdef"
}
"""
WITH_SERVERS = CLAUDE_JSON.replace(
    '  "userID"',
    '  "mcpServers": {\n    "github": {\n      "type": "stdio",\n      "command": "npx",\n'
    '      "args": [\n        "-y",\n        "gh-mcp"\n      ],\n      "env": {\n'
    '        "TOKEN": "x"\n      }\n    }\n  },\n  "userID"',
)


def _riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_riffd(
        *args,
        config=write_config(tmp_path),
        env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "HOME": str(tmp_path / "home")},
    )


def _user_config(tmp_path: Path) -> Path:
    (tmp_path / "claude").mkdir(exist_ok=True)
    return tmp_path / "claude" / ".claude.json"


@pytest.mark.parametrize(
    "original", [CLAUDE_JSON, WITH_SERVERS, None], ids=["plain", "servers", "absent"]
)
def test_install_twice_then_uninstall_gives_the_file_back_byte_for_byte(
    tmp_path: Path, original: str | None
) -> None:
    path = _user_config(tmp_path)
    if original is not None:
        path.write_bytes(original.encode())
    first = _riffd(tmp_path, "mcp", "install")
    assert first.returncode == 0, first.stderr
    installed = path.read_bytes()
    document = json.loads(installed)
    entry = document["mcpServers"]["riffd"]
    assert entry["type"] == "stdio" and entry["args"][-1] == "mcp" and entry["env"] == {}
    assert Path(entry["command"]).is_absolute()
    if original is not None:
        before = json.loads(original)
        del document["mcpServers"]["riffd"]
        if "mcpServers" not in before:
            assert document.pop("mcpServers") == {}
        assert document == before  # nothing else changed
        saved = sorted((tmp_path / "state" / "settings-backups").rglob("install-*.json"))
        assert [copy.read_bytes() for copy in saved] == [original.encode()]  # a copy first
    second = _riffd(tmp_path, "mcp", "install")
    assert second.returncode == 0 and "there already" in second.stdout
    assert path.read_bytes() == installed
    removed = _riffd(tmp_path, "mcp", "uninstall")
    assert removed.returncode == 0, removed.stderr
    if original is None:
        assert not path.exists()
    else:
        assert path.read_bytes() == original.encode()


def test_uninstall_takes_out_only_riffd_after_claude_code_changed_the_file(tmp_path: Path) -> None:
    path = _user_config(tmp_path)
    path.write_bytes(WITH_SERVERS.encode())
    assert _riffd(tmp_path, "mcp", "install").returncode == 0
    changed = path.read_text().replace('"numStartups": 42', '"numStartups": 43')
    changed = changed.replace('  "userID"', '  "lastOnboardingVersion": "2.1.332",\n  "userID"')
    path.write_text(changed)
    assert _riffd(tmp_path, "mcp", "uninstall").returncode == 0
    expected = WITH_SERVERS.replace('"numStartups": 42', '"numStartups": 43')
    expected = expected.replace('  "userID"', '  "lastOnboardingVersion": "2.1.332",\n  "userID"')
    assert path.read_text() == expected


# Claude Code changes ~/.claude.json holding `~/.claude.json.lock` (proper-lockfile: a folder made
# by mkdir, stale after 10 s): it reads the file, changes it, writes it, takes the lock away.
CLAUDE_CODE_SAVE = """
import json, os, sys, time
path = sys.argv[1]
os.mkdir(path + ".lock")
document = json.loads(open(path).read())
print("locked", flush=True)
time.sleep(1.0)
document["numStartups"] += 1
open(path + ".tmp", "w").write(json.dumps(document, indent=2))
os.replace(path + ".tmp", path)
os.rmdir(path + ".lock")
"""


def test_install_waits_for_claude_codes_lock_and_loses_neither_change(tmp_path: Path) -> None:
    path = _user_config(tmp_path)
    path.write_bytes(CLAUDE_JSON.encode())
    with subprocess.Popen(
        [sys.executable, "-c", CLAUDE_CODE_SAVE, str(path)], stdout=subprocess.PIPE, text=True
    ) as claude_code:
        assert claude_code.stdout is not None and claude_code.stdout.readline() == "locked\n"
        result = _riffd(tmp_path, "mcp", "install")
        assert claude_code.wait(timeout=30) == 0
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_bytes())
    assert document["numStartups"] == 43 and "riffd" in document["mcpServers"]
    assert not Path(f"{path}.lock").exists()


@pytest.mark.slow  # waits out the 5 s riffd gives a held lock
def test_a_stale_lock_is_taken_over_and_a_held_one_refused(tmp_path: Path) -> None:
    path = _user_config(tmp_path)
    path.write_bytes(CLAUDE_JSON.encode())
    lock = Path(f"{path}.lock")
    lock.mkdir()
    old = time.time() - 60  # a Claude Code that died holding it: stale, as proper-lockfile says
    os.utime(lock, (old, old))
    assert _riffd(tmp_path, "mcp", "install").returncode == 0
    assert "riffd" in json.loads(path.read_bytes())["mcpServers"] and not lock.exists()
    lock.mkdir()  # held now: uninstall waits, then changes nothing and says why
    result = _riffd(tmp_path, "mcp", "uninstall")
    assert result.returncode == 2 and f"{lock}" in result.stderr, result.stderr
    assert "riffd changed nothing" in result.stderr
    assert "riffd" in json.loads(path.read_bytes())["mcpServers"] and lock.is_dir()


def test_a_riffd_entry_of_the_users_own_is_never_replaced(tmp_path: Path) -> None:
    # e.g. added by hand with `claude mcp add -e RIFFD_STATE_DIR=... riffd -- riffd mcp`: install
    # replaced it (its env gone) without a word, and uninstall then took it out altogether
    path = _user_config(tmp_path)
    own = WITH_SERVERS.replace(
        '  "mcpServers": {\n    "github": {',
        '  "mcpServers": {\n    "riffd": {\n      "type": "stdio",\n'
        '      "command": "/opt/riffd/bin/riffd",\n      "args": [\n        "mcp"\n      ],\n'
        '      "env": {\n        "RIFFD_STATE_DIR": "/data/riffd"\n      }\n    },\n    "github": {',
    )
    assert json.loads(own)["mcpServers"]["riffd"]["env"]
    path.write_bytes(own.encode())
    result = _riffd(tmp_path, "mcp", "install")
    assert result.returncode == 2 and "riffd changed nothing" in result.stderr, result.stderr
    assert "RIFFD_STATE_DIR" in result.stderr and path.read_bytes() == own.encode()
    # one riffd wrote (its form: no env), naming a riffd that moved: replaced, and said so
    moved = json.loads(own)
    moved["mcpServers"]["riffd"] = {
        "type": "stdio",
        "command": "/gone/bin/riffd",
        "args": ["mcp"],
        "env": {},
    }
    path.write_text(json.dumps(moved, indent=2))
    result = _riffd(tmp_path, "mcp", "install")
    assert result.returncode == 0 and "/gone/bin/riffd" in result.stdout, result.stdout
    assert json.loads(path.read_bytes())["mcpServers"]["riffd"]["command"] != "/gone/bin/riffd"


def test_a_file_that_is_not_json_is_refused_and_left(tmp_path: Path) -> None:
    path = _user_config(tmp_path)
    path.write_bytes(b'{"numStartups": 4,,}\n')
    result = _riffd(tmp_path, "mcp", "install")
    assert result.returncode == 2
    assert "not valid JSON" in result.stderr and "riffd changed nothing" in result.stderr
    assert path.read_bytes() == b'{"numStartups": 4,,}\n'


@pytest.mark.parametrize("how", ["module", "console script"])
def test_the_entry_starts_a_working_server_as_claude_code_runs_it(tmp_path: Path, how: str) -> None:
    mcp = pytest.importorskip("mcp", reason="the MCP SDK (riffd[mcp]) is not installed")
    from mcp.client.stdio import StdioServerParameters, stdio_client

    path = _user_config(tmp_path)
    path.write_bytes(CLAUDE_JSON.encode())
    if how == "module":
        assert _riffd(tmp_path, "mcp", "install").returncode == 0
    else:  # a console script named riffd, as pip installs one
        script = tmp_path / "bin" / "riffd"
        script.parent.mkdir()
        script.write_text(
            f"#!{sys.executable}\nimport sys\nfrom riffd.entry import main\nsys.exit(main())\n"
        )
        script.chmod(0o755)
        installed = subprocess.run(
            [str(script), "--config", str(write_config(tmp_path)), "mcp", "install"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), HOME=str(tmp_path)),
        )
        assert installed.returncode == 0, installed.stderr
    entry = json.loads(path.read_bytes())["mcpServers"]["riffd"]
    if how == "console script":
        assert entry["command"] == str(tmp_path / "bin" / "riffd")
        assert entry["args"] == ["--config", str(tmp_path / "config.toml"), "mcp"]
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env=riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude")) | entry["env"],
        cwd=str(tmp_path),
    )

    async def talk() -> list[str]:
        async with stdio_client(params) as (read, write), mcp.ClientSession(read, write) as session:
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]

    assert asyncio.run(talk()) == [
        "search",
        "list_sessions",
        "read_session",
        "session_health",
        "restore_session",
    ]


def test_the_entry_carries_the_state_folder_riffd_runs_with(tmp_path: Path) -> None:
    """Claude Code starts the server with its own environment: the entry names the state folder
    (and config) of the riffd that installed it, so the server reads that archive; installing again
    changes nothing and uninstalling gives the file back."""
    path = _user_config(tmp_path)
    path.write_bytes(CLAUDE_JSON.encode())
    state = tmp_path / "elsewhere" / "state"
    folders = {
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "HOME": str(tmp_path / "home"),
        "RIFFD_STATE_DIR": str(state),
    }
    first = run_riffd("mcp", "install", env=folders)
    assert first.returncode == 0, first.stderr
    entry = json.loads(path.read_bytes())["mcpServers"]["riffd"]
    assert entry["env"] == {"RIFFD_STATE_DIR": str(state)}
    assert f"with RIFFD_STATE_DIR={state}" in first.stdout
    again = run_riffd("mcp", "install", env=folders)
    assert again.returncode == 0 and "there already" in again.stdout, again.stdout
    assert run_riffd("mcp", "uninstall", env=folders).returncode == 0
    assert path.read_bytes() == CLAUDE_JSON.encode()


def test_install_without_the_sdk_writes_nothing_and_says_how_to_get_it(tmp_path: Path) -> None:
    """A server that cannot start would fail in every Claude Code session: install refuses."""
    path = _user_config(tmp_path)
    path.write_bytes(CLAUDE_JSON.encode())
    code = (
        "import sys; sys.modules['mcp'] = None; from riffd.entry import main; "
        "raise SystemExit(main(['mcp', 'install']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=riffd_env(CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), HOME=str(tmp_path / "home")),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'riffd[mcp]'" in result.stderr and "not written" in result.stderr
    assert path.read_bytes() == CLAUDE_JSON.encode()
