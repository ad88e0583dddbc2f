"""The stress modes of the swap's edges (bench/stress.py runs them): a client resuming during a
repair, a writer holding the old file across the swap, and riffd killed right after the exchange.

Counted in each: lost (a line not in the transcript exactly once: an original line riffd was not
asked to remove, or an appended one), dangling (a line whose parentUuid names no line of the file: a
client's line carried onto a repair that removed its parent), leftovers (riffd's names beside the
transcript once the next run is done), and brought back (the synthetic line riffd removes appears
again after a repair).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tally import Tally

from helpers import damage
from helpers.run import riffd_env
from riffd.repair.plan import RepairOptions, render
from riffd.repair.planner import plan_file_repair
from riffd.transcript.scan import index_file

PROJECT = "-home-user-project"


@dataclass
class Template:
    """A damaged session written once and copied into each round: its bytes, what a clean repair
    makes of them, and the uuid of the line the repair removes."""

    original: bytes
    repaired: bytes
    removed: str
    session_id: str


def make_template(folder: Path, megabytes: float) -> Template:
    """A generated 2.1.x session of about `megabytes` MB with the resumed duplicate of
    transcript-format 4b at its last tool call (the repair removes the synthetic result there)."""
    session_id = str(uuid.uuid4())
    segments = max(3, round(megabytes * 1e6 / 10_000))
    lines = damage.generated_session(segments=segments, session_id=session_id)
    damaged = damage.inject_resumed_duplicate(lines, choose=lambda points: points[-1])
    original = b"".join(damaged.lines)
    scratch = folder / "template.jsonl"
    scratch.write_bytes(original)
    plan = plan_file_repair(index_file(scratch, with_identity=True), RepairOptions())
    removed = json.loads(damaged.lines[damaged.marks["synthetic"]])["uuid"]
    scratch.unlink()
    return Template(original, render(original, plan.edits), removed, session_id)


def client_line(session_id: str, parent: str) -> bytes:
    line_uuid = str(uuid.uuid4())
    record = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "user",
        "uuid": line_uuid,
        "sessionId": session_id,
        "cwd": "/home/user/project",
        "version": "2.1.332",
        "timestamp": "2026-11-26T11:00:00.000Z",
        "message": {"role": "user", "content": f"stress {line_uuid}"},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def last_uuid(data: bytes) -> str:
    return str(json.loads(data[data.rstrip(b"\n").rfind(b"\n") + 1 :])["uuid"])


def check(
    tally: Tally, round_name: str, path: Path, template: Template, written: list[bytes]
) -> None:
    """Count what the round lost, left dangling or brought back: the transcript must be the original
    or its repair, followed by every line written during the round, each once."""
    data = path.read_bytes()
    if data.startswith(template.repaired):
        head = template.repaired
        tally.repairs += 1
    elif data.startswith(template.original):
        head = template.original
    else:
        tally.lost += 1
        tally.note(
            f"{round_name}: the transcript is neither the original nor its repair, plus lines"
        )
        return
    tail = data[len(head) :].splitlines(keepends=True)
    if sorted(tail) != sorted(written):
        tally.lost += 1
        tally.note(f"{round_name}: {len(written)} line(s) written, {len(tail)} after the head")
    if head == template.repaired and template.removed.encode() in data:
        tally.brought_back += 1
        tally.note(f"{round_name}: the line the repair removed is back")
    present = set()
    for line in tail:
        present.add(json.loads(line)["uuid"])
    for line in tail:
        parent = json.loads(line)["parentUuid"]
        if parent not in present and f'"uuid":"{parent}"'.encode() not in head:
            tally.dangling += 1
            tally.note(f"{round_name}: a line hangs from {parent}, which is not in the file")


def leftovers(tally: Tally, round_name: str, project: Path) -> None:
    left = [name for name in os.listdir(project) if ".riffd-" in name]
    if left:
        tally.leftovers += len(left)
        tally.note(f"{round_name}: left {left}")


def riffd_fix(root: Path, path: Path, *, wait: bool = True) -> subprocess.Popen[bytes]:
    env = riffd_env() | {"CLAUDE_CONFIG_DIR": str(root / "claude")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riffd",
            "fix",
            "--quiet-period",
            "0",
            "--backup-dir",
            str(root / "backups"),
            str(path),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if wait:
        process.wait()
    return process


def new_round(folder: Path, number: int, template: Template) -> tuple[Path, Path]:
    root = folder / f"round-{number:04d}"
    project = root / "claude" / "projects" / PROJECT
    project.mkdir(parents=True)
    (root / "claude" / "sessions").mkdir()
    path = project / f"{template.session_id}.jsonl"
    path.write_bytes(template.original)
    past = time.time() - 3600
    os.utime(path, (past, past))
    return root, path


def calibrate(folder: Path, template: Template) -> float:
    """How long `riffd fix` takes on the template, from start to exit."""
    root, path = new_round(folder, 9999, template)
    started = time.monotonic()
    riffd_fix(root, path)
    duration = time.monotonic() - started
    shutil.rmtree(root)
    return duration


# --- a client resuming during a repair
# -----------------------------------------------------------------------


def mode_resume(folder: Path, rounds: int, rng: random.Random, megabytes: float) -> Tally:
    """`riffd fix` (quiet period 0) on a ~`megabytes` MB session; at a random moment of it a client
    resumes the session as Claude Code does: it registers in sessions/<pid>.json, reads the file,
    and appends a prompt line hanging from the newest line it loaded; where the synthetic result the
    repair removes was still there, from that line (the removed leaf)."""
    tally = Tally("resume")
    template = make_template(folder, megabytes)
    duration = calibrate(folder, template)
    tally.note(
        f"{len(template.original) / 1e6:.0f} MB session; riffd fix takes {duration:.1f} s alone"
    )
    for number in range(rounds):
        root, path = new_round(folder, number, template)
        fix = riffd_fix(root, path, wait=False)
        time.sleep(rng.uniform(0.0, duration))
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        registry = root / "claude" / "sessions" / f"{sleeper.pid}.json"
        registry.write_text(
            json.dumps(
                {
                    "pid": sleeper.pid,
                    "sessionId": template.session_id,
                    "cwd": "/home/user/project",
                    "startedAt": int(time.time() * 1000),
                }
            )
        )
        loaded = path.read_bytes()
        parent = template.removed if template.removed.encode() in loaded else last_uuid(loaded)
        line = client_line(template.session_id, parent)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        fix.wait()
        registry.unlink()
        sleeper.kill()
        sleeper.wait()
        tally.rounds += 1
        tally.appended += 1
        check(tally, f"round {number}", path, template, [line])
        leftovers(tally, f"round {number}", path.parent)
        shutil.rmtree(root)
    return tally


# --- a writer holding the old file across the swap
# ------------------------------------------------------------


def mode_holder(folder: Path, rounds: int, rng: random.Random) -> Tally:
    """A writer opens the transcript before `riffd fix` starts and writes one line through that
    descriptor at a random moment up to 2.5 s later (past the swap, and past riffd's 2 s wait in
    some rounds), while another appends by path; then the next `riffd fix` finishes what the first
    had to leave."""
    tally = Tally("holder")
    template = make_template(folder, 1.2)
    for number in range(rounds):
        root, path = new_round(folder, number, template)
        held = os.open(path, os.O_WRONLY | os.O_APPEND)
        written: list[bytes] = []
        fix = riffd_fix(root, path, wait=False)
        delay, by_path = rng.uniform(0.0, 2.5), rng.uniform(0.0, 1.0)

        def by_name(
            pause: float = by_path, path: Path = path, written: list[bytes] = written
        ) -> None:
            time.sleep(pause)
            line = client_line(template.session_id, last_uuid(path.read_bytes()))
            written.append(line)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

        appender = threading.Thread(target=by_name)
        appender.start()
        time.sleep(delay)
        line = client_line(template.session_id, last_uuid(template.original))
        os.write(held, line)
        written.append(line)
        os.close(held)
        appender.join()
        fix.wait()
        riffd_fix(root, path)  # finishes a hand-over the first run had to leave
        tally.rounds += 1
        tally.appended += len(written)
        check(tally, f"round {number}", path, template, written)
        leftovers(tally, f"round {number}", path.parent)
        shutil.rmtree(root)
    return tally


# --- riffd killed right after the exchange
# -------------------------------------------------------------------

KILLED = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from riffd.fsio import FileSystem
    from riffd.repair.outcomes import ApplyOptions
    from riffd.repair.planner import RepairOptions, plan_file_repair
    from riffd.repair.writer import apply_plan
    from riffd.transcript.scan import index_file

    path, backups, claude, delay = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])

    class KilledAfterTheSwap(FileSystem):
        def exchange(self, src, dst):
            super().exchange(src, dst)
            if str(dst).endswith(".jsonl"):
                time.sleep(delay)
                os.kill(os.getpid(), signal.SIGKILL)

    plan = plan_file_repair(index_file(path, with_identity=True), RepairOptions())
    print("ready", flush=True)
    apply_plan(plan, ApplyOptions(backup_dir=backups, claude_dir=claude, quiet_period=0, fs=KilledAfterTheSwap()))
    """
)


def mode_kill_swap(folder: Path, rounds: int, rng: random.Random) -> Tally:
    """riffd repairs a session and is killed 0-5 ms after its exchange, while a writer that opened
    the transcript before writes into the old file and another appends by path; the next `riffd fix`
    finishes the swap."""
    tally = Tally("kill-swap")
    template = make_template(folder, 1.2)
    env = riffd_env()
    for number in range(rounds):
        root, path = new_round(folder, number, template)
        held = os.open(path, os.O_WRONLY | os.O_APPEND)
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                KILLED,
                str(path),
                str(root / "backups"),
                str(root / "claude"),
                str(rng.uniform(0.0, 0.005)),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None
        child.stdout.readline()
        written: list[bytes] = []
        time.sleep(rng.uniform(0.0, 0.3))
        line = client_line(template.session_id, last_uuid(template.original))
        os.write(held, line)
        written.append(line)
        child.wait()
        child.stdout.close()
        line = client_line(template.session_id, last_uuid(template.original))
        os.write(held, line)  # after riffd died: only in the old file now
        written.append(line)
        os.close(held)
        if child.returncode != -signal.SIGKILL:
            tally.note(f"round {number}: the repair ended before the swap ({child.returncode})")
        riffd_fix(root, path)
        tally.rounds += 1
        tally.appended += len(written)
        check(tally, f"round {number}", path, template, written)
        leftovers(tally, f"round {number}", path.parent)
        shutil.rmtree(root)
    return tally
