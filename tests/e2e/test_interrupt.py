"""Ctrl-C in the commands the front door runs without the full command line (the two hooks Claude
Code runs, and `riffd mcp`): one line, exit 130, never a traceback (docs/exit-codes.md). Real
subprocesses, each waiting on a standard input that stays open, as they wait for Claude Code."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.run import SRC_DIR, killed_at_the_end, said_interrupted, start_riffd


def _idle(pid: int, settle: float = 0.3, timeout: float = 30) -> None:
    """Wait until process `pid` has used no CPU for `settle` seconds: started, and blocked reading
    its standard input."""

    def cpu() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    deadline = time.monotonic() + timeout
    last, since = cpu(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return
    raise AssertionError(f"process {pid} never went idle")


def _started(
    command: tuple[str, ...], environment: dict[str, str], cwd: Path
) -> subprocess.Popen[str]:
    """`riffd COMMAND` started with pipes on its three streams (its standard input left open)."""
    return start_riffd(
        *command,
        env=environment,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "command", [("hook", "pre-tool-use"), ("hook", "session-start"), ("mcp",)], ids=" ".join
)
def test_ctrl_c_while_waiting_for_claude_code_says_one_line_and_exits_130(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    if command == ("mcp",):
        pytest.importorskip("mcp", reason="the MCP SDK (riffd[mcp]) is not installed")
    environment = {
        "RIFFD_STATE_DIR": str(tmp_path / "state"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
    }
    process = _started(command, environment, tmp_path)
    with killed_at_the_end(process):
        _idle(process.pid)
        process.send_signal(signal.SIGINT)
        said_interrupted(process)


@pytest.mark.slow
def test_ctrl_c_during_an_ingest_says_how_far_it_got_and_no_error(tmp_path: Path) -> None:
    """`riffd archive ingest` stopped by Ctrl-C says how far it got before the interrupt line; it
    said the file it was on keeps what was stored "before the error"."""
    from conftest import transcript_bytes
    from helpers.fusefs import Mount

    with Mount(tmp_path / "backing", tmp_path / "mount", tmp_path / "faults.json") as mount:
        project = mount.mountpoint / "projects" / "-p"
        project.mkdir(parents=True)
        for name in ("a", "b"):
            (project / f"{name}.jsonl").write_bytes(transcript_bytes(20))
        # the second file's reads are slow, as a cloud folder's may be: the ingest waits there
        mount.faults({"ops": ["read"], "glob": "*/b.jsonl", "delay": 4})
        process = _started(
            ("archive", "ingest", str(mount.mountpoint / "projects")),
            {"RIFFD_STATE_DIR": str(tmp_path / "state"), "CLAUDE_CONFIG_DIR": str(tmp_path)},
            tmp_path,
        )
        with killed_at_the_end(process):
            _idle(process.pid, settle=1.0)
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
            _out, err = process.communicate()
            mount.faults()
    assert process.returncode == 130, err
    lines = err.splitlines()
    assert lines[-1].startswith("riffd: interrupted"), err
    assert "stopped after archiving 20 new line(s) from 1 of 2 file(s)" in lines[-2], err
    assert lines[-2].endswith("before Ctrl-C)") and "error" not in err, err


def test_a_ctrl_c_caught_inside_generated_code_still_exits_130(tmp_path: Path) -> None:
    """A Ctrl-C whose KeyboardInterrupt passes through code run by exec() (a dataclass's generated
    methods) and is caught by riffd: one line and exit 130 under `python -m riffd`, not a death by
    SIGINT (CPython takes such an interrupt as unhandled; 1 run in about 100 of the scan's Ctrl-C
    test ended so). The Ctrl-C is sent from inside an exec(), at riffd's first opening of its config
    file, by an audit hook the interpreter's `sitecustomize` adds."""
    config = tmp_path / "riffd.toml"
    config.write_text("")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "sent = []\n"
        "def _at(event, args):\n"
        f"    if event == 'open' and str(args[0]) == {str(config)!r} and not sent:\n"
        "        sent.append(1)\n"
        "        exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(9): pass')\n"
        "sys.addaudithook(_at)\n"
    )
    process = start_riffd(
        "--config",
        str(config),
        "config",
        "show",
        env={
            "PYTHONPATH": os.pathsep.join([str(site), str(SRC_DIR)]),
            "RIFFD_STATE_DIR": str(tmp_path / "state"),
        },
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said_interrupted(process)


def test_a_ctrl_c_with_output_buffered_for_a_reader_gone_exits_130(tmp_path: Path) -> None:
    """`riffd fix DIR | grep x` and Ctrl-C, which ends grep too: the lines `fix` had printed were
    still buffered, and writing them as Python exited failed (exit 120, "Exception ignored"). One
    line and exit 130. The Ctrl-C is sent at `fix`'s opening of its third file, by an audit hook in
    the interpreter's `sitecustomize`."""
    from conftest import transcript_bytes

    project = tmp_path / "claude" / "projects" / "-p"
    project.mkdir(parents=True)
    names = [f"{number}1111111-2222-3333-4444-555555555555.jsonl" for number in range(3)]
    for name in names:  # a torn last line each: each is named on standard output
        (project / name).write_bytes(transcript_bytes(5) + b'{"type": "user"')
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "sent = []\n"
        "def _at(event, args):\n"
        f"    if event == 'open' and str(args[0]).endswith({names[2]!r}) and not sent:\n"
        "        sent.append(1)\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.addaudithook(_at)\n"
    )
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    try:
        process = start_riffd(
            "fix",
            "--dry-run",
            *(str(project / name) for name in names),
            env={
                "PYTHONPATH": os.pathsep.join([str(site), str(SRC_DIR)]),
                "PYTHONUNBUFFERED": "",
                "RIFFD_STATE_DIR": str(tmp_path / "state"),
                "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
            },
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    said_interrupted(process)
