"""Liveness: Claude Code's session registry with real pids, and the mtime quiet period."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import identity_of, line_spans, transcript_bytes
from riffd.claude_code.liveness import (
    claude_dirs_for,
    pid_is_alive,
    running_entries,
    session_liveness,
)
from riffd.claude_code.projects import project_folder_name
from riffd.fsio import FileSystem
from riffd.repair.outcomes import ApplyOptions, Skipped, SkipReason
from riffd.repair.plan import RemoveLine, RepairPlan
from riffd.repair.writer import apply_plan

SESSION = "0f5b6c1e-1111-2222-3333-444444444444"


def register(claude_dir: Path, session_id: str, pid: int) -> Path:
    registry = claude_dir / "sessions"
    registry.mkdir(parents=True, exist_ok=True)
    entry = registry / f"{pid}.json"
    entry.write_text(json.dumps({"pid": pid, "sessionId": session_id, "cwd": "/w", "startedAt": 1}))
    return entry


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process any more
    return child.pid


def old_transcript(folder: Path, name: str = f"{SESSION}.jsonl") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"type":"user"}\n')
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    return path


def live_session_ids(claude_dir: Path) -> set[str]:
    """The sessions running processes have registered in `claude_dir` (entries read whole)."""
    return {
        entry.registration.session_id
        for entry in running_entries(claude_dir)
        if entry.registration is not None
    }


def test_running_pid_in_registry_is_live(tmp_path: Path) -> None:
    register(tmp_path, SESSION, os.getpid())
    assert live_session_ids(tmp_path) == {SESSION}
    live, why = session_liveness(
        old_transcript(tmp_path / "projects" / "p"), tmp_path, quiet_period=120
    )
    assert live
    assert str(os.getpid()) in why and SESSION in why


def test_dead_pid_in_registry_is_not_live(tmp_path: Path) -> None:
    pid = dead_pid()
    register(tmp_path, SESSION, pid)
    assert live_session_ids(tmp_path) == set()
    live, why = session_liveness(
        old_transcript(tmp_path / "projects" / "p"), tmp_path, quiet_period=120
    )
    assert not live, why


def test_subagent_transcript_belongs_to_its_session(tmp_path: Path) -> None:
    register(tmp_path, SESSION, os.getpid())
    agent = old_transcript(tmp_path / "projects" / "p" / SESSION / "subagents", "agent-abc.jsonl")
    assert session_liveness(agent, tmp_path, quiet_period=0)[0]


def test_session_id_given_by_caller_counts(tmp_path: Path) -> None:
    register(tmp_path, SESSION, os.getpid())
    other = old_transcript(tmp_path / "projects" / "p", "agent-xyz.jsonl")
    assert not session_liveness(other, tmp_path, quiet_period=0)[0]
    assert session_liveness(other, tmp_path, quiet_period=0, session_id=SESSION)[0]


def test_malformed_registry_entries_of_processes_that_are_gone_are_ignored(tmp_path: Path) -> None:
    registry = tmp_path / "sessions"
    registry.mkdir()
    gone = dead_pid()
    (registry / f"{gone}.json").write_text("{not json")
    (registry / "x.json").write_text(json.dumps({"pid": 0, "sessionId": "group-zero"}))
    (registry / "y.json").write_text(json.dumps({"pid": -1, "sessionId": "every-process"}))
    (registry / "z.json").write_text(json.dumps({"pid": True, "sessionId": "bool"}))
    (registry / "w.json").write_bytes(b"\xff\xfe\x00")
    (registry / "notes.txt").write_text(
        json.dumps({"pid": os.getpid(), "sessionId": "not-a-json-name"})
    )
    (registry / f".{os.getpid()}.json").write_text("{")  # a hidden name: not an entry
    (registry / "v.json").symlink_to(registry / "missing.json")
    register(tmp_path, SESSION, os.getpid())
    assert live_session_ids(tmp_path) == {SESSION}
    other = old_transcript(
        tmp_path / "projects" / "-elsewhere", "0f5b6c1e-9999-2222-3333-444444444444.jsonl"
    )
    # the live entry is of another project
    assert not session_liveness(other, tmp_path, quiet_period=0)[0]


def test_pid_taken_from_file_name_when_entry_lacks_it(tmp_path: Path) -> None:
    registry = tmp_path / "sessions"
    registry.mkdir()
    (registry / f"{os.getpid()}.json").write_text(json.dumps({"sessionId": SESSION}))
    assert live_session_ids(tmp_path) == {SESSION}


def test_missing_registry_means_no_live_sessions(tmp_path: Path) -> None:
    assert live_session_ids(tmp_path / "nowhere") == set()


def test_pid_probe() -> None:
    assert pid_is_alive(os.getpid())
    assert pid_is_alive(1)  # init exists; EPERM (when not root) must count as alive too
    assert not pid_is_alive(0)
    assert not pid_is_alive(-1)
    assert not pid_is_alive(dead_pid())


def test_recent_mtime_is_live_and_old_is_not(tmp_path: Path) -> None:
    path = old_transcript(tmp_path)
    now = time.time()
    live, why = session_liveness(path, tmp_path, quiet_period=120, now=now)
    assert not live, why
    os.utime(path, (now - 30, now - 30))
    live, why = session_liveness(path, tmp_path, quiet_period=120, now=now)
    assert live and "quiet period" in why
    assert not session_liveness(path, tmp_path, quiet_period=0, now=now)[0]


def test_mtime_in_the_future_is_live(tmp_path: Path) -> None:
    path = old_transcript(tmp_path)
    future = time.time() + 600
    os.utime(path, (future, future))
    assert session_liveness(path, tmp_path, quiet_period=120)[0]


def test_unreadable_mtime_counts_as_live(tmp_path: Path) -> None:
    live, why = session_liveness(tmp_path / "gone.jsonl", tmp_path, quiet_period=120)
    assert live and "modification time" in why


def test_every_claude_folder_riffd_knows_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured, from_env, beside_root, holding = (
        tmp_path / name for name in ("configured", "env", "root", "held")
    )
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(from_env))
    (beside_root / "sessions").mkdir(parents=True)
    # a root whose parent has no sessions/ folder is not a Claude folder
    no_registry = tmp_path / "plain"
    transcript = old_transcript(holding / "projects" / "p")
    assert claude_dirs_for(
        transcript, configured, (beside_root / "projects", no_registry / "projects")
    ) == (configured, from_env, beside_root, holding)


def test_a_session_registered_in_a_second_claude_folder_is_never_rewritten(tmp_path: Path) -> None:
    # The daemon is configured with one Claude folder; the transcript lives under another one, whose
    # running client registered the session in its own sessions/ (a second CLAUDE_CONFIG_DIR, or
    # ~/.config/claude).
    first, second = tmp_path / "claude-a", tmp_path / "claude-b"
    (first / "projects").mkdir(parents=True)
    data = transcript_bytes(10)
    path = old_transcript(second / "projects" / "-w", f"{SESSION}.jsonl")
    path.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    register(second, SESSION, os.getpid())
    spans = line_spans(data)
    plan = RepairPlan(identity_of(path), (RemoveLine(spans[1], "duplicate"),))
    options = ApplyOptions(
        backup_dir=tmp_path / "state" / "backups",
        claude_dir=first,
        roots=(first / "projects", second / "projects"),
        quiet_period=0,
    )
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert str(second / "sessions") in outcome.detail
    assert path.read_bytes() == data
    # And with no root naming it: the folder above the transcript's projects/ is asked all the same.
    outcome = apply_plan(
        plan,
        ApplyOptions(backup_dir=tmp_path / "state" / "backups", claude_dir=first, quiet_period=0),
    )
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome


def _apply_through(path: Path, data: bytes, tmp_path: Path, roots: tuple[Path, ...] = ()) -> object:
    """Plan the removal of line 2 of the transcript `path` (which holds `data`) and apply it, with
    riffd's own Claude folder elsewhere; return the outcome."""
    plan = RepairPlan(identity_of(path), (RemoveLine(line_spans(data)[1], "duplicate"),))
    options = ApplyOptions(
        backup_dir=tmp_path / "state" / "backups",
        claude_dir=tmp_path / "riffds-own",
        roots=roots,
        quiet_period=0,
    )
    return apply_plan(plan, options)


def test_a_transcript_reached_through_a_link_asks_the_claude_folder_it_lies_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path through a symlinked project folder, or a root that links to another Claude folder's
    projects/: the registry of the folder the transcript really lies in is asked (an attack found
    `fix link/S.jsonl` and a daemon watching `watched -> claudeB/projects` repairing a live
    session)."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "shells-own"))
    other = tmp_path / "claudeB"
    data = transcript_bytes(10)
    real = old_transcript(other / "projects" / "-work-proj")
    real.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(real, (long_ago, long_ago))
    register(other, SESSION, os.getpid())
    (tmp_path / "link").symlink_to(other / "projects" / "-work-proj")
    (tmp_path / "watched").symlink_to(other / "projects")
    for path, roots in (
        (tmp_path / "link" / real.name, ()),
        (tmp_path / "watched" / "-work-proj" / real.name, (tmp_path / "watched",)),
    ):
        assert other in claude_dirs_for(path, tmp_path / "riffds-own", roots)
        outcome = _apply_through(path, data, tmp_path, roots)
        assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
        assert real.read_bytes() == data


def _with_cwd(data: bytes, cwd: str) -> bytes:
    """The lines of `data`, each written in the working folder `cwd` (as Claude Code records it)."""
    return b"".join(
        line.replace(b'{"type"', b'{"cwd":' + json.dumps(cwd).encode() + b',"type"', 1)
        for line in data.splitlines(keepends=True)
    )


def test_a_client_whose_folder_name_does_not_follow_its_cwd_keeps_the_session_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry entry names another session (after /clear, or a --continue that registered a new
    id) and a `cwd` whose project folder is not the transcript's: a session resumed through a
    symlinked path (the folder follows the link, the registry the resolved path), or a folder named
    by CLAUDE_CODE_PROJECT_DIR_NAME. The transcript's own lines say where they were written, and
    that keeps it live (an attack found both repaired)."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    claude = tmp_path / "claude"
    (tmp_path / "real" / "proj").mkdir(parents=True)
    (tmp_path / "proj").symlink_to(tmp_path / "real" / "proj")
    logical, physical = str(tmp_path / "proj"), str(tmp_path / "real" / "proj")
    for folder, written, registered, pad in (
        (project_folder_name(logical), logical, physical, 0),  # resumed through the link
        ("chosen-name", "/work/proj", "/work/proj", 0),  # CLAUDE_CODE_PROJECT_DIR_NAME
        # lines longer than the tail it reads (a pasted image): each followed to its start
        ("chosen-long", "/work/proj", "/work/proj", 300_000),
    ):
        data = _with_cwd(transcript_bytes(10, pad=pad), written)
        path = old_transcript(claude / "projects" / folder)
        path.write_bytes(data)
        long_ago = time.time() - 3600
        os.utime(path, (long_ago, long_ago))
        entry = register(claude, "another-session-id", os.getpid())
        entry.write_text(
            json.dumps({"pid": os.getpid(), "sessionId": "another-session-id", "cwd": registered})
        )
        outcome = _apply_through(path, data, tmp_path)
        assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
        assert "may be writing it" in outcome.detail
        assert path.read_bytes() == data
        # the same entry in another project, proven so: the repair goes on
        entry.write_text(
            json.dumps({"pid": os.getpid(), "sessionId": "another-session-id", "cwd": "/elsewhere"})
        )
        assert not isinstance(_apply_through(path, data, tmp_path), Skipped)
        entry.unlink()


def test_a_file_named_otherwise_is_live_while_the_session_its_lines_name_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2.0 subagent's `agent-*.jsonl` sits beside the sessions in the project folder, named by the
    agent, its lines carrying the session's id: every writer (`backups restore` too, which passed no
    id) asks the registry for the id its lines name (an attack restored a backup over one)."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    data = transcript_bytes(10).replace(b"11111111-2222-3333-4444-555555555555", SESSION.encode())
    path = old_transcript(tmp_path / "claude" / "projects" / "chosen", "agent-b123456.jsonl")
    path.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    register(tmp_path / "claude", SESSION, os.getpid())
    live, why = session_liveness(path, claude_dirs_for(path), quiet_period=0)
    assert live and f"session {SESSION} is registered" in why
    outcome = _apply_through(path, data, tmp_path)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert path.read_bytes() == data


class UnreadableRegistryFS(FileSystem):
    def listdir(self, path: str | os.PathLike[str]) -> list[str]:
        if Path(path).name == "sessions":
            raise OSError(errno.EIO, os.strerror(errno.EIO), os.fspath(path))
        return super().listdir(path)


def test_a_registry_that_cannot_be_read_means_the_session_may_be_live(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    fs = UnreadableRegistryFS()
    live, why = session_liveness(
        old_transcript(tmp_path / "projects" / "p"), tmp_path, quiet_period=0, fs=fs
    )
    assert live and "cannot be read" in why


class EntryFailsOnceFS(FileSystem):
    """The first read of a registry entry fails with EIO, as a sync client's placeholder does."""

    def __init__(self) -> None:
        self.failed = False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if not self.failed:
            self.failed = True
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().pread(fd, size, offset)


def test_a_registry_entry_that_fails_to_read_once_is_read_again(tmp_path: Path) -> None:
    """The registry is read through the seam with its retry policy: an entry that failed once with
    EIO is read again whole, not taken for one that may be this session's."""
    register(tmp_path, "0f5b6c1e-9999-2222-3333-444444444444", os.getpid())  # another session
    fs = EntryFailsOnceFS()
    live, why = session_liveness(
        old_transcript(tmp_path / "projects" / "p"), tmp_path, quiet_period=0, fs=fs
    )
    assert fs.failed
    assert not live, why


# --- failing closed: an entry of a running process counts unless it is proven another session's
# ---------------

PROJECT = "/work/demo"  # Claude Code's folder for it: -work-demo
OTHER_SESSION = "0f5b6c1e-aaaa-bbbb-cccc-444444444444"


def entry_of_running_process(registry: Path, kind: str, pid: int, elsewhere: Path) -> None:
    """Write `<pid>.json` as the review found it: imperfect, or naming another session of the same
    project."""
    registry.mkdir(parents=True, exist_ok=True)
    whole = json.dumps({"pid": pid, "sessionId": SESSION, "cwd": PROJECT, "startedAt": 1})
    entry = registry / f"{pid}.json"
    if kind == "empty":
        entry.write_bytes(b"")
    elif kind == "half_written":
        entry.write_text(whole[: len(whole) // 2])
    elif kind == "symlink":
        elsewhere.write_text(whole)
        entry.symlink_to(elsewhere)
    elif kind == "over_1_mib":
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": SESSION, "cwd": PROJECT, "pad": "x" * (1 << 20)})
        )
    elif kind == "pid_as_string":
        entry.write_text(json.dumps({"pid": str(pid), "sessionId": SESSION, "cwd": PROJECT}))
    elif kind == "new_session_id_same_project":  # after /clear or a fork the entry names another id
        entry.write_text(json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": PROJECT}))
    elif kind == "no_cwd_other_session":
        entry.write_text(json.dumps({"pid": pid, "sessionId": OTHER_SESSION}))
    # written unlike Claude Code's, of a client in another project: only the id protects (an attack)
    elif kind == "id_in_upper_case":
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": SESSION.upper(), "cwd": "/elsewhere"})
        )
    elif kind == "id_with_blanks":
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": f" {SESSION}\n", "cwd": "/elsewhere"})
        )
    elif kind == "pid_as_float_in_a_file_named_otherwise":
        (registry / "client.json").write_text(
            json.dumps({"pid": float(pid), "sessionId": SESSION, "cwd": "/elsewhere"})
        )
    # a folder written otherwise: blank, with blanks around it, relative; an id of blanks
    elif kind == "cwd_empty":
        entry.write_text(json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": ""}))
    elif kind == "cwd_with_blanks":
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": f"{PROJECT}\n"})
        )
    elif kind == "cwd_relative":
        entry.write_text(json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": "demo"}))
    elif kind == "id_of_blanks":
        entry.write_text(json.dumps({"pid": pid, "sessionId": "   ", "cwd": "/elsewhere"}))
    elif kind == "being_written_beside_its_name":
        (registry / f"{pid}.json.tmp").write_text(
            json.dumps({"pid": pid, "sessionId": SESSION, "cwd": "/elsewhere"})
        )
    # the same session id spelt otherwise (a UUID's other spellings, a byte-order mark before it)
    elif kind in SPELT_OTHERWISE:
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": SPELT_OTHERWISE[kind], "cwd": "/elsewhere"})
        )
    elif kind == "pid_as_float_string_in_a_file_named_otherwise":
        (registry / "client.json").write_text(
            json.dumps({"pid": f"{pid}.0", "sessionId": SESSION, "cwd": "/elsewhere"})
        )
    elif kind == "name_in_upper_case":
        (registry / f"{pid}.JSON").write_text(
            json.dumps({"pid": pid, "sessionId": SESSION, "cwd": "/elsewhere"})
        )
    elif kind == "nul_bytes_after_it_in_a_file_named_otherwise":  # a crash's zeroed end
        (registry / "client.json").write_bytes(
            json.dumps({"pid": pid, "sessionId": SESSION, "cwd": "/elsewhere"}).encode()
            + b"\0" * 512
        )
    elif kind == "id_given_twice":  # the last one, another project's session, is what a parse keeps
        entry.write_text(
            f'{{"pid": {pid}, "sessionId": "{SESSION}", "cwd": "/elsewhere", '
            f'"sessionId": "{OTHER_SESSION}"}}'
        )
    elif kind == "cwd_with_a_nul":  # (no folder can be looked up by it: it made `fix` crash)
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": "/work/other\0"})
        )
    elif kind == "cwd_with_a_lone_surrogate":  # (the same: realpath raised UnicodeEncodeError)
        entry.write_text(
            json.dumps({"pid": pid, "sessionId": OTHER_SESSION, "cwd": "/work/other\ud800"})
        )
    elif kind == "cwd_given_twice":
        entry.write_text(
            f'{{"pid": {pid}, "sessionId": "{OTHER_SESSION}", "cwd": "{PROJECT}", '
            '"cwd": "/elsewhere"}'
        )
    else:
        raise AssertionError(kind)


SPELT_OTHERWISE = {
    "id_after_a_byte_order_mark": "\ufeff" + SESSION,
    "id_in_braces": "{" + SESSION.upper() + "}",
    "id_as_a_urn": "urn:uuid:" + SESSION,
    "id_without_dashes": SESSION.replace("-", ""),
    # spellings no rule foresees: the session's 32 hex digits among other characters
    "id_as_a_urn_in_braces": "{urn:uuid:" + SESSION + "}",
    "id_before_a_nul": SESSION + "\0",
    "id_before_a_zero_width_space": SESSION + "\u200b",
    "id_with_other_dashes": SESSION.replace("-", "\u2010"),
}

IMPERFECT = [
    "empty",
    "half_written",
    "symlink",
    "over_1_mib",
    "pid_as_string",
    "new_session_id_same_project",
    "no_cwd_other_session",
    "id_in_upper_case",
    "id_with_blanks",
    "pid_as_float_in_a_file_named_otherwise",
    "being_written_beside_its_name",
    "cwd_empty",
    "cwd_with_blanks",
    "cwd_relative",
    "id_of_blanks",
    *SPELT_OTHERWISE,
    "pid_as_float_string_in_a_file_named_otherwise",
    "name_in_upper_case",
    "nul_bytes_after_it_in_a_file_named_otherwise",
    "id_given_twice",
    "cwd_given_twice",
    "cwd_with_a_nul",
    "cwd_with_a_lone_surrogate",
]


@pytest.fixture
def running_client() -> Iterator[int]:
    """A real running process standing in for a `claude` process (only its pid matters to the
    registry)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("kind", IMPERFECT)
def test_an_imperfect_entry_of_a_running_process_keeps_the_session_live(
    tmp_path: Path, kind: str, running_client: int
) -> None:
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    entry_of_running_process(claude / "sessions", kind, running_client, tmp_path / "entry.json")
    live, why = session_liveness(path, claude, quiet_period=0)
    assert live, why
    assert str(running_client) in why


@pytest.mark.parametrize("kind", IMPERFECT)
def test_an_imperfect_entry_of_a_process_that_is_gone_counts_for_nothing(
    tmp_path: Path, kind: str
) -> None:
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    entry_of_running_process(claude / "sessions", kind, dead_pid(), tmp_path / "entry.json")
    live, why = session_liveness(path, claude, quiet_period=0)
    assert not live, why


@pytest.mark.parametrize("kind", IMPERFECT)
def test_a_repair_waits_for_an_imperfect_entry_of_a_running_client(
    tmp_path: Path, kind: str, running_client: int
) -> None:
    claude = tmp_path / "claude"
    data = transcript_bytes(10)
    path = old_transcript(claude / "projects" / "-work-demo")
    path.write_bytes(data)
    os.utime(path, (time.time() - 3600,) * 2)
    entry_of_running_process(claude / "sessions", kind, running_client, tmp_path / "entry.json")
    plan = RepairPlan(identity_of(path), (RemoveLine(line_spans(data)[1], "duplicate"),))
    outcome = apply_plan(
        plan,
        ApplyOptions(
            backup_dir=tmp_path / "state" / "backups",
            claude_dir=claude,
            roots=(claude / "projects",),
            quiet_period=0,
        ),
    )
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert path.read_bytes() == data


def test_another_session_of_another_project_is_proven_not_this_one(
    tmp_path: Path, running_client: int
) -> None:
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    (claude / "sessions").mkdir(parents=True)
    (claude / "sessions" / f"{running_client}.json").write_text(
        json.dumps({"pid": running_client, "sessionId": OTHER_SESSION, "cwd": "/work/other"})
    )
    live, why = session_liveness(path, claude, quiet_period=0)
    assert not live, why
    # Its subagent files too, and the project matched whichever way its path is spelled (here
    # through a symlink).
    agent = old_transcript(
        claude / "projects" / "-work-demo" / SESSION / "subagents", "agent-a1.jsonl"
    )
    assert not session_liveness(agent, claude, quiet_period=0)[0]
    (claude / "sessions" / f"{running_client}.json").write_text(
        json.dumps({"pid": running_client, "sessionId": OTHER_SESSION, "cwd": PROJECT})
    )
    assert session_liveness(agent, claude, quiet_period=0)[0]


def test_a_project_folder_reached_through_a_symlinked_projects_is_the_same_project(
    tmp_path: Path, running_client: int
) -> None:
    # ~/.claude/projects is a link to another disk; the transcript is named by its real path, the
    # running client works in its project under a new session id: it may be writing it.
    claude, disk = tmp_path / "claude", tmp_path / "disk"
    (disk / "projects" / "-work-demo").mkdir(parents=True)
    claude.mkdir()
    (claude / "projects").symlink_to(disk / "projects")
    path = old_transcript(disk / "projects" / "-work-demo")
    entry_of_running_process(
        claude / "sessions", "new_session_id_same_project", running_client, tmp_path / "e"
    )
    live, why = session_liveness(path, claude_dirs_for(path, claude), quiet_period=0)
    assert live, why
    # A project folder that is itself a link to a folder of another name: compared by device and
    # inode.
    (disk / "projects" / "-work-demo").rename(disk / "demo-on-disk")
    (claude / "projects" / "-work-demo").symlink_to(disk / "demo-on-disk")
    moved = disk / "demo-on-disk" / path.name
    live, why = session_liveness(moved, claude_dirs_for(moved, claude), quiet_period=0)
    assert live, why


class TailFailsFS(FileSystem):
    """Every read of a transcript's bytes fails with EIO (a cloud folder serving a file that is not
    on this device); the registry reads fine."""

    def __init__(self) -> None:
        self.transcripts: set[int] = set()

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        if os.fspath(path).endswith(".jsonl"):
            self.transcripts.add(fd)
        return fd

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if fd in self.transcripts:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().pread(fd, size, offset)

    def close(self, fd: int) -> None:
        self.transcripts.discard(fd)
        super().close(fd)


def test_a_transcript_whose_end_cannot_be_read_stays_live_while_a_client_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a transcript says its project and session; when EIO keeps it from being read, a
    client registered in another folder's name is not taken as proven elsewhere."""
    from riffd.fsio import RetryingFS, RetryPolicy

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "chosen-name")
    path.write_bytes(_with_cwd(transcript_bytes(5), "/work/proj"))
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    entry = register(claude, "another-session-id", os.getpid())
    entry.write_text(json.dumps({"pid": os.getpid(), "sessionId": "x", "cwd": "/elsewhere"}))
    failing = RetryingFS(TailFailsFS(), RetryPolicy(attempts=2, first_wait=0.001, max_wait=0.002))
    live, why = session_liveness(path, claude_dirs_for(path), 0, fs=failing)
    assert live and "the end of this transcript, which says its project, cannot be read" in why
    # read as it is, the same entry is proven another project's
    assert not session_liveness(path, claude_dirs_for(path), 0)[0]


def test_entries_naming_pids_no_process_can_have_count_for_nothing_and_break_nothing(
    tmp_path: Path,
) -> None:
    """A pid over what the system can give (a timestamp-named copy of an entry, `1e300`) made
    `os.kill` raise OverflowError: `fix` and the daemon stopped at it with a traceback."""
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    registry = claude / "sessions"
    registry.mkdir(parents=True)
    (registry / "20261127225304.json.bak").write_text("{}")
    (registry / "99999999999999999999.json").write_text(json.dumps({"sessionId": SESSION}))
    (registry / "client.json").write_text(json.dumps({"pid": 1e300, "sessionId": SESSION}))
    (registry / "other.json").write_text(json.dumps({"pid": 2**63, "sessionId": SESSION}))
    live, why = session_liveness(path, claude, quiet_period=0)
    assert not live, why
    assert live_session_ids(claude) == set()
    assert not pid_is_alive(2**70)


def test_values_no_clock_or_pid_can_hold_break_nothing(tmp_path: Path, running_client: int) -> None:
    """A `startedAt` of 400 digits made the division raise OverflowError, a `pid` string of 4,400
    digits made int() raise ValueError, a last line's `cwd` with a NUL byte made the folder lookup
    raise: `fix` stopped with a traceback at each."""
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    path.write_bytes(_with_cwd(transcript_bytes(5), "/work/demo\0"))
    registry = claude / "sessions"
    registry.mkdir(parents=True)
    (registry / "client.json").write_text(
        json.dumps({"pid": "9" * 4400 + ".0", "sessionId": SESSION, "cwd": "/elsewhere"})
    )
    (registry / f"{running_client}.json").write_text(
        f'{{"pid": {running_client}, "sessionId": "{OTHER_SESSION}", "cwd": "/work/other", '
        f'"startedAt": 1{"0" * 400}}}'
    )
    live, why = session_liveness(path, claude, quiet_period=0)
    assert not live, why  # another project's client, read whole; the long pid is no pid


def test_an_entry_nested_too_deep_to_parse_breaks_nothing(
    tmp_path: Path, running_client: int
) -> None:
    """Arrays nested 100,000 deep made the parse raise RecursionError: `fix` stopped at it (exit 1,
    a traceback) and the hook gave up on every entry after it."""
    claude = tmp_path / "claude"
    path = old_transcript(claude / "projects" / "-work-demo")
    registry = claude / "sessions"
    registry.mkdir(parents=True)
    (registry / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert not session_liveness(path, claude, quiet_period=0)[0]
    (registry / f"{running_client}.json").write_text("[" * 100_000 + "]" * 100_000)
    live, why = session_liveness(path, claude, quiet_period=0)
    assert live and f"names the running pid {running_client} but is not a whole entry" in why
