"""File names that are not UTF-8 (the byte 0xff in a project folder and in a transcript's name).

riffd reads, repairs, archives and restores such a file under its real name; it shows the name with
`\\xff` escapes (text and JSON), advises commands that name the real file, and keys it in SQLite and
its JSON files by a reversible text form. Every command a user meets it with runs as a real
subprocess here, and a real daemon keeps running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import transcript_bytes, write_config
from helpers.daemon import Sandbox
from helpers.run import riffd_env, run_riffd
from riffd.display import KEY_MARK, display_path, key_path, path_key, shell_command

FOLDER = os.fsdecode(b"-home-u-\xffproj")
NAME = os.fsdecode(b"s\xfe\xff.jsonl")
SHOWN = "-home-u-\\xffproj"  # how riffd shows FOLDER
MALFORMED_MID_FILE = b"not json\n"


PIECES = [
    "a",
    "/",
    "\\",
    "x",
    "f",
    "0",
    "é",
    "\\x",
    "\\xff",
    KEY_MARK,
    *map(chr, range(0xDC80, 0xDD00)),
]


@given(st.lists(st.sampled_from(PIECES)).map("".join))
def test_a_key_gives_back_exactly_the_text_it_was_made_from(text: str) -> None:
    key = path_key(text)
    assert key_path(key) == text
    key.encode("utf-8")  # SQLite and JSON take it
    if not any("\udc80" <= char <= "\udcff" for char in text) and not text.startswith(KEY_MARK):
        # every name that is text is its own key: archives made before stay as they are
        assert key == text


def test_a_name_is_shown_with_its_bytes_escaped() -> None:
    name = os.fsdecode(b"/p/-home-u-\xffproj/caf\xc3\xa9\xfe.jsonl")
    assert display_path(name) == "/p/-home-u-\\xffproj/café\\xfe.jsonl"


def riffd(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run_riffd(*args, config=config, cwd=tmp_path, text=False)


def undecodable_transcript(projects: Path) -> Path:
    """A transcript named with bytes that are not UTF-8, in a project folder so named, with a
    malformed line."""
    path = projects / FOLDER / NAME
    path.parent.mkdir(parents=True)
    data = transcript_bytes(4)
    path.write_bytes(
        data[: data.index(b"\n") + 1] + MALFORMED_MID_FILE + data[data.index(b"\n") + 1 :]
    )
    return path


def ok(result: subprocess.CompletedProcess[bytes], *codes: int) -> str:
    """The command's stdout, once it exited with one of `codes` (0 when none are given) and printed
    no traceback."""
    assert result.returncode in (codes or (0,)), (result.returncode, result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    return result.stdout.decode("utf-8")  # strict: what riffd prints is UTF-8


def test_every_command_takes_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    projects = tmp_path / "claude" / "projects"
    path = undecodable_transcript(projects)
    original = path.read_bytes()

    scanned = json.loads(ok(riffd(tmp_path, config, "scan", "--json", str(projects)), 1))
    (report,) = scanned["files"]
    assert SHOWN in report["path"] and report["findings"][0]["class"] == "malformed_line"
    assert SHOWN in ok(riffd(tmp_path, config, "scan", str(projects)), 1)

    (session,) = json.loads(ok(riffd(tmp_path, config, "sessions", "--json")))["sessions"]
    assert SHOWN in session["path"]

    ok(riffd(tmp_path, config, "archive", "ingest"))
    verified = ok(riffd(tmp_path, config, "archive", "verify", "--json"))
    assert [json.loads(line)["outcome"] for line in verified.splitlines()] == ["whole"]
    assert SHOWN in json.loads(verified)["path"]

    shown = json.loads(ok(riffd(tmp_path, config, "show", "--format", "json", str(path))))
    assert SHOWN in shown["sessions"][0]["path"]

    ok(riffd(tmp_path, config, "export", "--to", str(tmp_path / "out"), str(projects)))
    (exported,) = (tmp_path / "out").glob("*.md")
    assert os.fsencode(exported.name) == b"s\xfe\xff.md"  # named after its source, bytes and all
    assert f"Source: `{display_path(path)}`" in exported.read_text(encoding="utf-8")
    # its manifest read back
    ok(riffd(tmp_path, config, "export", "--to", str(tmp_path / "out"), str(projects)))

    # The archive keeps the name without loss: deleted, the file comes back under its exact bytes.
    path.unlink()
    ok(riffd(tmp_path, config, "archive", "restore", str(path)))
    assert os.listdir(os.fsencode(path.parent)) == [b"s\xfe\xff.jsonl"]
    assert path.read_bytes() == original


@pytest.mark.slow
def test_the_daemon_keeps_running_repairs_and_reports_such_a_file(sandbox: Sandbox) -> None:
    # a malformed line riffd never edits: listed in the report
    reported = undecodable_transcript(sandbox.projects)
    torn = sandbox.projects / FOLDER / os.fsdecode(b"agent-\xff.jsonl")
    whole = transcript_bytes(3)
    torn.write_bytes(whole + b'{"type":"user","uu')
    # long idle: its torn last line is cut, after a backup
    os.utime(torn, (1_000_000_000, 1_000_000_000))
    daemon = sandbox.start()

    report = daemon.wait_until(
        lambda: sandbox.report_where(
            lambda r: (
                r["repairs"]["done"] >= 1
                and any(SHOWN in item["path"] for item in r.get("attention", []))
            )
        ),
        "a report of the repair and the open finding",
    )
    assert torn.read_bytes() == whole
    (item,) = [item for item in report["attention"] if SHOWN in item["path"]]
    assert item["path"] == display_path(reported) and "$'" in item["action"]
    status = sandbox.riffd("status", "--json")  # the daemon's own state, paths and all
    assert status.returncode == 1 and json.loads(status.stdout)["pid"] == daemon.pid, status.stderr
    printed = sandbox.riffd("report")
    assert printed.returncode == 1 and display_path(reported) in printed.stdout, printed.stderr
    # it names the files a user opens, not only the timestamped one
    assert f"written to {sandbox.state / 'reports'}: latest.json, latest.md" in printed.stderr
    # The command the report advises names the real file: acknowledged through a real shell, it
    # counts no more.
    riffd = shell_command("riffd", "--config", str(sandbox.config))  # (the daemon's configuration)
    advised = next(word for word in item["action"].split("`") if word.startswith(f"{riffd} ack "))
    assert advised.startswith(f"{riffd} ack $'")
    shell = subprocess.run(
        [
            "bash",
            "-c",
            advised.replace("riffd", f"{sys.executable} -m riffd", 1),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=riffd_env(),
    )
    assert shell.returncode == 0 and "acknowledged" in shell.stdout, shell.stderr

    acknowledged_at = time.time()
    daemon.wait_until(
        lambda: sandbox.report_after(acknowledged_at + 2), "reports from two seconds later"
    )
    assert daemon.process.poll() is None and "Traceback" not in daemon.stderr()
    daemon.stop()
