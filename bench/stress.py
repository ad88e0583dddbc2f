"""Try to make riffd lose a line: races, kills and filesystem tricks, many rounds each; print rounds
and losses.

Run by hand from the repository root (each mode in a fresh temporary folder; nothing of the user's is read)::

    python3 bench/stress.py                        # every mode at its full round count: 40+ minutes
    python3 bench/stress.py --modes rename,delete  # some modes
    python3 bench/stress.py --rounds 0.1           # a tenth of each mode's rounds, for a quick look
    python3 bench/stress.py --json
    python3 bench/stress.py --write docs/figures/stress.md  # the table the docs include

Transcripts are generated 2.1.x-shaped sessions (tests/damage.py) with the real "resumed session"
duplicate of shared/transcript-format.md 4b, so every one has something to repair. Appended lines
are written as Claude Code writes them: open by path with O_APPEND, one write, close. Each appended
line has its own uuid, so a line that is lost, or kept twice, is found by uuid.

Modes, and what counts as a loss in each:

1. appender (1,000 rounds): `riffd run` (quiet period 0.3 s) on 4 files at once; each round writes a
   new damaged session and appends 1-8 lines at random moments around the end of the quiet period,
   while the daemon repairs. Lost: an original line (other than the synthetic result riffd removes)
   or an appended line not in the file exactly once. Torn: a file not ending in a newline or holding
   a line that does not parse.
2. kill-fix (500 rounds): `riffd fix` on a 1.2 MB damaged session, an appender writing meanwhile,
   SIGKILL at a random moment. Lost/torn as above, and: every backup with a manifest must decompress
   to its recorded sha256; the next `riffd fix` must leave no temp file and finish the repair.
3. kill-run (500 rounds): `riffd run` on two damaged sessions with an appender, SIGKILL at a random
   moment in its first 2 s. Lost/torn as above, and both databases must pass `PRAGMA
   integrity_check`; after the last round a daemon runs until its archive holds every file to its
   end, and every line the sessions ever held (the synthetic result repairs removed too) must be in
   some generation of the archive (unarchived).
4. rename (200 rounds): a repair (in-process, through riffd's I/O seam with the swap held back 0-20
   ms) while another thread renames a new version over the transcript at a random moment. Lost: the
   file is not the new version afterwards (riffd's swap threw it away).
5. delete (200 rounds): the same, deleting the transcript instead. Brought back: the file exists
   afterwards.
6. cloud (`--cloud-minutes`, 10): `riffd run` (polling) on a FUSE filesystem of our own
   (tests/fusefs.py) that fails 20% of every operation with EIO, for the whole time, while new
   damaged sessions arrive and an appender writes to them through the mount (retrying its failed
   writes and finishing short ones, as Node's appendFile does). Then the faults stop, the daemon is
   stopped and `riffd fix` runs once. Lost/torn as above; missing: a transcript not on the
   filesystem at the end; not identical: a file that is not byte for byte what a clean repair of the
   same lines gives. Rounds are sessions; "repairs" counts those the daemon repaired while the
   faults were on. Needs /dev/fuse, fusermount3 and mfusepy (the test extras).
7. resume (200 rounds, bench/stress_swap.py): `riffd fix` on a 100 MB session (`--resume-mb`) while,
   at a random moment, a client resumes it as Claude Code does: registers in sessions/<pid>.json,
   reads it, and appends a line hanging from the newest line it loaded (the synthetic result the
   repair removes, where still there). Dangling: a line whose parent is not in the file.
8. holder (200 rounds): a writer holds the transcript open across the swap and writes through that
   descriptor up to 2.5 s later, another appends by path; the next `riffd fix` finishes a hand-over
   the first had to leave.
9. kill-swap (200 rounds): riffd killed 0-5 ms after its exchange while a writer writes into the old
   file; the next `riffd fix` must finish the swap. Lost, dangling, brought back (the removed line
   again) and leftovers count.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import figures  # noqa: E402
import stress_swap  # noqa: E402
from tally import Tally  # noqa: E402

from helpers import damage  # noqa: E402
from helpers.run import riffd_env  # noqa: E402
from riffd.fsio import FileSystem  # noqa: E402
from riffd.repair.outcomes import ApplyOptions, Repaired, Skipped  # noqa: E402
from riffd.repair.plan import RepairOptions  # noqa: E402
from riffd.repair.planner import plan_file_repair  # noqa: E402
from riffd.repair.writer import apply_plan  # noqa: E402
from riffd.transcript.scan import index_file  # noqa: E402

ROUNDS = {
    "appender": 1000,
    "kill-fix": 500,
    "kill-run": 500,
    "rename": 200,
    "delete": 200,
    "resume": 200,
    "holder": 200,
    "kill-swap": 200,
    "cloud": 0,
}


# What each mode does, and the counters besides lost and torn that can fail in it (the docs' table).
SUMMARY = {
    "appender": ("a writer appends while the daemon repairs", ()),
    "kill-fix": ("`riffd fix` killed (-9) at a random moment", ("bad_backups", "leftovers")),
    "kill-run": ("the daemon killed (-9) mid-repair, restarted", ("bad_databases", "unarchived")),
    "rename": ("a new version renamed over the transcript during the repair", ()),
    "delete": ("the transcript deleted during the repair", ("brought_back",)),
    "resume": (
        "a client resumes the session during `riffd fix` and appends to what it loaded",
        ("dangling",),
    ),
    "holder": (
        "a writer holds the old file across the swap and writes up to 2.5 s later",
        ("dangling", "leftovers"),
    ),
    "kill-swap": (
        "riffd killed 0-5 ms after its exchange while a writer writes to the old file",
        ("dangling", "brought_back", "leftovers"),
    ),
    "cloud": (
        "a FUSE folder failing 20% of all calls with EIO, sessions arriving and appended to",
        ("missing", "not_identical"),
    ),
}


# --- sessions and the Claude-like appender
# ----------------------------------------------------------------


@dataclass
class Session:
    """A damaged session on disk and the uuids that must survive."""

    path: Path
    session_id: str
    kept: list[str]  # uuids of the original lines riffd must keep
    synthetic: str  # the uuid of the synthetic result riffd removes
    appended: list[str] = field(default_factory=list)
    last_uuid: str = ""
    lines: list[bytes] = field(default_factory=list)  # the appended lines, as written


def write_session(path: Path, rng: random.Random, segments: int = 4) -> Session:
    session_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    damaged = damage.inject_resumed_duplicate(
        damage.generated_session(segments=segments, session_id=session_id)
    )
    uuids = [json.loads(line).get("uuid") for line in damaged.lines]
    synthetic = uuids[damaged.marks["synthetic"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(damaged.lines))
    kept = [value for value in uuids if value and value != synthetic]
    return Session(path, session_id, kept, synthetic, last_uuid=str(uuids[-1]))


def appended_line(session: Session) -> tuple[str, bytes]:
    """A new user line hanging from the session's last one, as Claude Code writes it: its uuid and
    its bytes."""
    line_uuid = str(uuid.uuid4())
    record = {
        "parentUuid": session.last_uuid,
        "isSidechain": False,
        "type": "user",
        "uuid": line_uuid,
        "sessionId": session.session_id,
        "cwd": "/home/user/project",
        "version": "2.1.39",
        "timestamp": "2026-02-01T11:00:00.000Z",
        "message": {"role": "user", "content": f"stress append {line_uuid}"},
    }
    return line_uuid, json.dumps(record, separators=(",", ":")).encode() + b"\n"


def append_like_claude(
    session: Session, count: int, pause: Callable[[], float] | None = None
) -> None:
    """Append `count` user lines by path (O_APPEND, one write, close), each with its own uuid."""
    for _ in range(count):
        if pause is not None:
            time.sleep(pause())
        line_uuid, data = appended_line(session)
        fd = os.open(session.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        session.appended.append(line_uuid)
        session.last_uuid = line_uuid


def check_session(session: Session, tally: Tally) -> bool:
    """Count what of `session` is lost or torn; return True when it was repaired (the synthetic
    result gone)."""
    data = session.path.read_bytes()
    if data and not data.endswith(b"\n"):
        tally.torn += 1
        tally.note(f"{session.path}: torn last line")
    seen: dict[str, int] = {}
    for raw in data.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            tally.torn += 1
            tally.note(f"{session.path}: a line does not parse")
            continue
        if isinstance(record, dict) and isinstance(record.get("uuid"), str):
            seen[record["uuid"]] = seen.get(record["uuid"], 0) + 1
    for wanted in (*session.kept, *session.appended):
        if seen.get(wanted) != 1:
            tally.lost += 1
            tally.note(f"{session.path}: line {wanted} is there {seen.get(wanted, 0)} times")
    return session.synthetic not in seen


# --- a daemon
# --------------------------------------------------------------------------------------------


def write_config(folder: Path, quiet_period: float) -> Path:
    config = folder / "config.toml"
    config.write_text(
        f'roots = ["{folder / "claude" / "projects"}"]\nclaude_dir = "{folder / "claude"}"\n'
        f'state_dir = "{folder / "state"}"\n[watcher]\nobserver = "native"\ndebounce = 0.02\nrescan_interval = 2.0\n'
        f'[repair]\nquiet_period = {quiet_period}\n[reports]\ninterval = 30.0\n[log]\nlevel = "warning"\n'
    )
    (folder / "claude" / "sessions").mkdir(parents=True, exist_ok=True)
    return config


def start_daemon(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "riffd", "--config", str(config), "run"],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env=riffd_env(),
        )


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def synthetic_gone(session: Session) -> bool:
    return session.synthetic.encode() not in session.path.read_bytes()


# --- 1. appender against the daemon
# ------------------------------------------------------------------------


def mode_appender(folder: Path, rounds: int, rng: random.Random) -> Tally:
    tally = Tally("appender")
    config = write_config(folder, quiet_period=0.3)
    daemon = start_daemon(config, folder / "daemon.log")
    project = folder / "claude" / "projects" / "-home-user-project"
    lock = threading.Lock()
    counter = iter(range(rounds))

    def lane(seed: int) -> None:
        lane_rng = random.Random(seed)
        while True:
            with lock:
                number = next(counter, None)
            if number is None:
                return
            session = write_session(project / f"round-{number:05d}.jsonl", lane_rng, segments=2)
            append_like_claude(
                session, lane_rng.randint(1, 8), pause=lambda: lane_rng.uniform(0.0, 0.45)
            )
            repaired = wait_for(lambda session=session: synthetic_gone(session), 5.0)
            with lock:
                tally.rounds += 1
                tally.appended += len(session.appended)
                tally.repairs += check_session(session, tally) and repaired

    try:
        time.sleep(1.0)
        lanes = [threading.Thread(target=lane, args=(rng.random(),)) for _ in range(4)]
        for thread in lanes:
            thread.start()
        for thread in lanes:
            thread.join()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    return tally


# --- 2. kill -9 of riffd fix
# ---------------------------------------------------------------------------------


def verify_backups(backups: Path, tally: Tally) -> None:
    for manifest in backups.glob("*.json"):
        record = json.loads(manifest.read_text())
        data = gzip.decompress((backups / record["data_file"]).read_bytes())
        if hashlib.sha256(data).hexdigest() != record["sha256"] or len(data) != record["size"]:
            tally.bad_backups += 1
            tally.note(f"{manifest}: the backup does not match its manifest")


def riffd_command(folder: Path, *args: str) -> subprocess.Popen[bytes]:
    env = riffd_env() | {
        "CLAUDE_CONFIG_DIR": str(folder / "claude"),
        "RIFFD_STATE_DIR": str(folder / "state"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "riffd", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def temp_files(folder: Path) -> list[Path]:
    return [
        path for path in folder.rglob("*") if ".riffd-" in path.name or path.name.endswith(".tmp")
    ]


def mode_kill_fix(folder: Path, rounds: int, rng: random.Random) -> Tally:
    tally = Tally("kill-fix")
    for number in range(rounds):
        root = folder / f"round-{number:04d}"
        project = root / "claude" / "projects" / "-home-user-project"
        (root / "claude" / "sessions").mkdir(parents=True)
        session = write_session(project / "s.jsonl", rng, segments=120)
        past = time.time() - 3600
        os.utime(session.path, (past, past))
        backups = root / "state" / "backups"
        fix = riffd_command(
            root, "fix", "--quiet-period", "0", "--backup-dir", str(backups), str(project)
        )
        appender = threading.Thread(
            target=append_like_claude,
            args=(session, rng.randint(1, 5), lambda: rng.uniform(0.0, 0.12)),
        )
        appender.start()
        time.sleep(rng.uniform(0.0, 0.9))
        fix.send_signal(signal.SIGKILL)
        fix.wait()
        appender.join()
        tally.rounds += 1
        tally.appended += len(session.appended)
        check_session(session, tally)
        if backups.exists():
            verify_backups(backups, tally)
        # The next run cleans up what the killed one left, and completes the repair.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "riffd",
                "fix",
                "--quiet-period",
                "0",
                "--backup-dir",
                str(backups),
                str(project),
            ],
            env=riffd_env() | {"CLAUDE_CONFIG_DIR": str(root / "claude")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        left = temp_files(project) + [path for path in temp_files(backups) if path.is_file()]
        if left:
            tally.leftovers += len(left)
            tally.note(f"round {number}: left behind {left}")
        tally.repairs += check_session(session, tally)
        verify_backups(backups, tally)
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return tally


# --- 3. kill -9 of riffd run
# -------------------------------------------------------------------------------


def integrity(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def mode_kill_run(folder: Path, rounds: int, rng: random.Random) -> Tally:
    tally = Tally("kill-run")
    config = write_config(folder, quiet_period=0.2)
    project = folder / "claude" / "projects" / "-home-user-project"
    sessions: list[Session] = []
    for number in range(rounds):
        fresh = [
            write_session(project / f"r{number:04d}-{index}.jsonl", rng, segments=3)
            for index in range(2)
        ]
        sessions += fresh
        daemon = start_daemon(config, folder / "daemon.log")
        appender = threading.Thread(
            target=append_like_claude,
            args=(rng.choice(sessions), rng.randint(1, 4), lambda: rng.uniform(0.0, 0.3)),
        )
        appender.start()
        time.sleep(rng.uniform(0.3, 2.0))
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        appender.join()
        tally.rounds += 1
        for name in ("state.db", "archive.db"):
            database = folder / "state" / name
            if database.exists() and integrity(database) != "ok":
                tally.bad_databases += 1
                tally.note(f"round {number}: {name} fails its integrity check")
    for session in sessions:  # every line of every round's files, once all kills are done
        tally.appended += len(session.appended)
        tally.repairs += check_session(session, tally)
    verify_backups(folder / "state" / "backups", tally)
    check_archived(folder, config, sessions, tally)
    return tally


def check_archived(folder: Path, config: Path, sessions: list[Session], tally: Tally) -> None:
    """Once more a daemon, until its archive holds every file to its end (the catch-up at its
    start archives what the killed ones read but had not written yet), stopped; then every line the
    sessions ever held (their original lines, the synthetic result a repair removed, every append)
    must be in some generation of the archive."""
    from riffd.archive.store import Archive

    daemon = start_daemon(config, folder / "daemon.log")
    database = folder / "state" / "archive.db"

    def caught_up() -> bool:
        if not database.exists():
            return False
        archive = Archive(database, read_only=True)
        try:
            return all(
                archive.cursor(str(session.path))[1] == session.path.stat().st_size
                for session in sessions
            )
        finally:
            archive.close()

    if not wait_for(caught_up, 120.0):
        tally.note("the archive did not catch up within 120 s of the last start")
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    archive = Archive(database, read_only=True)
    try:
        for session in sessions:
            file_id = archive.file_id(str(session.path))
            held: set[str] = set()
            for generation in archive.generations(file_id) if file_id is not None else []:
                for raw in archive.iter_file(file_id, generation=generation):
                    uuid_of = json.loads(raw).get("uuid") if raw.strip() else None
                    if isinstance(uuid_of, str):
                        held.add(uuid_of)
            for wanted in (*session.kept, session.synthetic, *session.appended):
                if wanted not in held:
                    tally.unarchived += 1
                    tally.note(f"{session.path}: line {wanted} is in no generation of the archive")
    finally:
        archive.close()


# --- 4 and 5. another writer in the replace window
# ---------------------------------------------------------


class HeldSwap(FileSystem):
    """riffd's I/O seam with the swap (or the rename) held back a random 0-20 ms, widening the
    window."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        time.sleep(self.rng.uniform(0.0, 0.02))
        super().exchange(src, dst)


def mode_window(folder: Path, rounds: int, rng: random.Random, deleting: bool) -> Tally:
    tally = Tally("delete" if deleting else "rename")
    project = folder / "claude" / "projects" / "-home-user-project"
    (folder / "claude" / "sessions").mkdir(parents=True)
    for number in range(rounds):
        session = write_session(project / f"s{number:04d}.jsonl", rng, segments=30)
        newer = (
            session.path.read_bytes() + b'{"type":"user","uuid":"published-by-another-program"}\n'
        )
        past = time.time() - 3600
        os.utime(session.path, (past, past))
        scanned = index_file(session.path, with_identity=True)
        plan = plan_file_repair(scanned, RepairOptions())
        options = ApplyOptions(
            backup_dir=folder / "state" / "backups",
            claude_dir=folder / "claude",
            quiet_period=0,
            fs=HeldSwap(rng),
        )
        delay = rng.uniform(0.0, 0.05)

        def other_program(
            path: Path = session.path, data: bytes = newer, delay: float = delay
        ) -> None:
            time.sleep(delay)
            if deleting:
                path.unlink()
            else:
                staging = path.parent / f".{path.name}.syncthing.tmp"
                staging.write_bytes(data)
                os.replace(staging, path)

        thread = threading.Thread(target=other_program)
        thread.start()
        outcome = apply_plan(plan, options)
        thread.join()
        tally.rounds += 1
        tally.repairs += isinstance(outcome, Repaired)
        if deleting and session.path.exists():
            tally.brought_back += 1
            tally.note(f"round {number}: the deleted transcript is back ({outcome})")
        if not deleting and session.path.read_bytes() != newer:
            tally.lost += 1
            tally.note(f"round {number}: the new version was thrown away ({outcome})")
        if not isinstance(outcome, Repaired | Skipped):
            tally.note(f"round {number}: {outcome}")
        if temp_files(project):
            tally.leftovers += 1
    return tally


# --- 6. a cloud-synced folder failing all the time
# --------------------------------------------------------


def append_retrying(session: Session, count: int, rng: random.Random) -> None:
    """Append like Claude Code: retry a write the filesystem failed (the test filesystem fails
    before writing), and finish a short one."""
    for _ in range(count):
        time.sleep(rng.uniform(0.0, 0.5))
        line_uuid, data = appended_line(session)
        rest = memoryview(data)
        for _attempt in range(200):
            try:
                fd = os.open(session.path, os.O_WRONLY | os.O_APPEND)
            except OSError:
                time.sleep(0.05)
                continue
            try:
                # A FUSE kernel splits an append at a page boundary, and when the second request
                # fails the write is short: finish it, as Node's appendFile (Claude Code) does.
                rest = rest[os.write(fd, rest) :]
            except OSError:
                time.sleep(0.05)
            finally:
                os.close(fd)
            if not rest:
                break
        else:
            raise RuntimeError(f"{session.path}: could not append after 200 tries")
        session.lines.append(data)
        session.appended.append(line_uuid)
        session.last_uuid = line_uuid


def clean_repair(data: bytes, scratch: Path) -> bytes:
    """What `riffd fix` makes of these bytes on a plain local folder."""
    scratch.write_bytes(data)
    scanned = index_file(scratch, with_identity=True)
    from riffd.repair.plan import render

    return render(data, plan_file_repair(scanned, RepairOptions()).edits)


def mode_cloud(folder: Path, minutes: float, rng: random.Random) -> Tally:
    from helpers.fusefs import Mount, fuse_unavailable

    why_not = fuse_unavailable()
    if why_not:
        raise SystemExit(f"stress: cloud mode: {why_not}")
    tally = Tally("cloud")
    every = [
        "getattr",
        "readdir",
        "open",
        "create",
        "read",
        "write",
        "fsync",
        "rename",
        "unlink",
        "truncate",
        "chmod",
        "utimens",
        "link",
        "mkdir",
    ]
    projects = folder / "claude" / "projects"
    config = write_config(folder, quiet_period=0.5)
    config.write_text(
        config.read_text().replace(
            'observer = "native"', 'observer = "polling"\npolling_interval = 0.5'
        )
    )
    sessions: list[Session] = []
    originals: dict[str, bytes] = {}
    with Mount(folder / "backing", projects, folder / "faults.json") as mount:
        (projects / "-home-user-project").mkdir()
        mount.faults({"ops": every, "errno": 5, "chance": 0.2}, seed=rng.randrange(1 << 30))
        daemon = start_daemon(config, folder / "daemon.log")
        deadline = time.monotonic() + minutes * 60
        writers: list[threading.Thread] = []
        try:
            while time.monotonic() < deadline:
                number = len(sessions)
                backing = folder / "backing" / "-home-user-project" / f"c{number:04d}.jsonl"
                # arrives whole, as a sync client publishes it
                written = write_session(backing, rng, segments=3)
                originals[backing.name] = backing.read_bytes()
                session = Session(
                    projects / "-home-user-project" / backing.name,
                    written.session_id,
                    written.kept,
                    written.synthetic,
                    last_uuid=written.last_uuid,
                )
                sessions.append(session)
                writer = threading.Thread(
                    target=append_retrying,
                    args=(session, rng.randint(1, 6), random.Random(rng.random())),
                )
                writer.start()
                writers.append(writer)
                time.sleep(rng.uniform(5.0, 20.0))
            for writer in writers:
                writer.join()
            time.sleep(5.0)
            tally.repairs = sum(
                1
                for session in sessions
                if session.synthetic.encode()
                not in (folder / "backing" / "-home-user-project" / session.path.name).read_bytes()
            )
        finally:
            mount.faults()  # the faults stop
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "riffd",
                "fix",
                "--quiet-period",
                "0",
                "--backup-dir",
                str(folder / "state" / "backups"),
                str(projects),
            ],
            env=riffd_env() | {"CLAUDE_CONFIG_DIR": str(folder / "claude")},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        scratch = folder / "scratch.jsonl"
        for session in sessions:
            tally.rounds += 1
            tally.appended += len(session.appended)
            on_disk = folder / "backing" / "-home-user-project" / session.path.name
            if not on_disk.exists():
                tally.missing += 1
                tally.note(f"{session.path.name}: missing")
                continue
            check_session(
                Session(
                    on_disk, session.session_id, session.kept, session.synthetic, session.appended
                ),
                tally,
            )
            expected = clean_repair(originals[session.path.name] + b"".join(session.lines), scratch)
            if on_disk.read_bytes() != expected:
                tally.not_identical += 1
                tally.note(f"{session.path.name}: not what a clean repair of the same lines gives")
    return tally


# --- main
# -----------------------------------------------------------------------------------------------


def run_mode(
    mode: str,
    rounds: int,
    seed: int,
    keep: bool,
    cloud_minutes: float = 10.0,
    resume_mb: float = 100.0,
) -> Tally:
    folder = Path(tempfile.mkdtemp(prefix=f"riffd-stress-{mode}-"))
    rng = random.Random(seed)
    started = time.monotonic()
    if mode == "appender":
        tally = mode_appender(folder, rounds, rng)
    elif mode == "cloud":
        tally = mode_cloud(folder, cloud_minutes, rng)
    elif mode == "kill-fix":
        tally = mode_kill_fix(folder, rounds, rng)
    elif mode == "kill-run":
        tally = mode_kill_run(folder, rounds, rng)
    elif mode in ("resume", "holder", "kill-swap"):
        if mode == "resume":
            tally = stress_swap.mode_resume(folder, rounds, rng, resume_mb)
        elif mode == "holder":
            tally = stress_swap.mode_holder(folder, rounds, rng)
        else:
            tally = stress_swap.mode_kill_swap(folder, rounds, rng)
    else:
        tally = mode_window(folder, rounds, rng, deleting=mode == "delete")
    tally.seconds = time.monotonic() - started
    if not keep:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modes", default=",".join(ROUNDS), help=f"comma-separated, of: {', '.join(ROUNDS)}"
    )
    parser.add_argument(
        "--rounds", type=float, default=1.0, help="a factor on each mode's round count (default 1)"
    )
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--keep", action="store_true", help="keep each mode's temporary folder")
    parser.add_argument(
        "--cloud-minutes",
        type=float,
        default=10.0,
        help="how long the cloud mode runs (default 10)",
    )
    parser.add_argument(
        "--resume-mb",
        type=float,
        default=100.0,
        help="the size of the session the resume mode repairs, in MB (default 100)",
    )
    parser.add_argument("--json", action="store_true", help="print the tallies as JSON")
    parser.add_argument(
        "--write",
        type=Path,
        metavar="FILE",
        help="also write the tallies as the Markdown table the docs include "
        "(docs/figures/stress.md)",
    )
    args = parser.parse_args()
    tallies = []
    for mode in args.modes.split(","):
        if mode not in ROUNDS:
            parser.error(f"unknown mode {mode!r}; expected one of {', '.join(ROUNDS)}")
        rounds = max(1, round(ROUNDS[mode] * args.rounds))
        if mode == "cloud":
            print(f"stress: cloud, {args.cloud_minutes:g} minutes ...", file=sys.stderr, flush=True)
        if mode != "cloud":
            print(f"stress: {mode}, {rounds} rounds ...", file=sys.stderr, flush=True)
        tally = run_mode(mode, rounds, args.seed, args.keep, args.cloud_minutes, args.resume_mb)
        tallies.append(tally)
        print(
            f"  {mode:9} rounds {tally.rounds:5}  lost {tally.lost}  dangling {tally.dangling}  torn {tally.torn}  "
            f"brought back "
            f"{tally.brought_back}  bad backups {tally.bad_backups}  bad databases {tally.bad_databases}  "
            f"leftovers {tally.leftovers}  missing {tally.missing}  not identical {tally.not_identical}  "
            f"unarchived {tally.unarchived}  "
            f"(repairs {tally.repairs}, appended lines {tally.appended}, {tally.seconds:.0f} s)",
            flush=True,
        )
        for note in tally.notes:
            print(f"    {note}", flush=True)
    if args.json:
        print(
            json.dumps(
                [{key: value for key, value in vars(tally).items()} for tally in tallies], indent=2
            )
        )
    if args.write:
        figures.write(
            args.write,
            figures.shown_command("stress.py", sys.argv[1:]),
            markdown(tallies, args.cloud_minutes),
        )
    return 1 if any(tally.losses for tally in tallies) else 0


def markdown(tallies: list[Tally], cloud_minutes: float) -> str:
    """The tallies as the docs' table: a row per mode, with what it does and what it found."""
    rows = []
    for tally in tallies:
        what, others = SUMMARY[tally.mode]
        if tally.mode == "cloud":
            what = f"{cloud_minutes:g} minutes on {what}"
            rounds = f"{tally.rounds} sessions ({tally.repairs} repaired under faults, {tally.appended} lines)"
        else:
            appended = f", {tally.appended} appended lines" if tally.appended else ""
            rounds = f"{tally.rounds} ({tally.repairs} repairs{appended})"
        failures = ", ".join(f"{getattr(tally, name)} {name.replace('_', ' ')}" for name in others)
        rows.append((tally.mode, what, rounds, tally.lost, tally.torn, failures or "0"))
    return figures.markdown_table(
        ("mode", "what it does", "rounds", "lost", "torn", "other failures"), rows
    )


if __name__ == "__main__":
    sys.exit(main())
