"""A session's files laid out as the real client (2.1.332) writes them, and deleted as its cleanup
deletes them.

Measured (shared/transcript-format.md, section 1): `<project>/<session>.jsonl`;
`<session>/subagents/agent-<id>.jsonl` and `agent-<id>.meta.json`; `<session>/tool-results/<short
random id>.txt` for every tool output over about 30,000 characters (the name is not the tool_use id;
a subagent's outputs go to the parent session's folder too), the transcript keeping a preview and
the file's absolute path; `file-history/<session>/<hash>@v<N>` beside `projects/`;
`tasks/<session>/<n>.json` with a `.lock`; `plans/<slug>.md`, named by the `slug` the session's
lines carry.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import string
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = "-home-user-app"
SLUG = "vast-sparking-goblet"
# 144,000 characters, as `seq` gives
BIG_OUTPUT = "".join(f"line-{number:06d}\n" for number in range(1, 12001))


def short_id(rng: random.Random) -> str:
    """A name like the client's for a saved output: 9 characters of [a-z0-9]."""
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(9))


def line(session_id: str, number: int, text: str, **fields: object) -> bytes:
    """One transcript line of `session_id` (a user message), with extra fields."""
    record: dict[str, object] = {
        "type": "user",
        "uuid": str(uuid.UUID(int=number + 1)),
        "parentUuid": str(uuid.UUID(int=number)) if number else None,
        "sessionId": session_id,
        "cwd": "/home/user/app",
        "timestamp": f"2026-10-01T10:{number // 60 % 60:02d}:{number % 60:02d}Z",
        "message": {"role": "user", "content": text},
    }
    record.update(fields)
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def persisted(path: Path) -> str:
    """The text a transcript keeps of a saved output: a preview and the file's absolute path."""
    return (
        f"<persisted-output>\nOutput too large (140.6KB). Full output saved to: {path}\n\nPreview (first 2KB):\n"
        f"{BIG_OUTPUT[:2000]}\n</persisted-output>"
    )


@dataclass
class SessionTree:
    """The files of one session: the transcripts (archived by lines) and the files kept whole."""

    claude: Path
    session_id: str
    project: Path
    transcripts: list[Path] = field(default_factory=list)
    whole: list[Path] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)  # the client's own locks: not the session's

    @property
    def main(self) -> Path:
        return self.project / f"{self.session_id}.jsonl"

    @property
    def folder(self) -> Path:
        return self.project / self.session_id

    def tool_results(self) -> list[Path]:
        return [path for path in self.whole if path.parent.name == "tool-results"]

    def files(self) -> list[Path]:
        return self.whole + self.transcripts


def build_session(
    claude: Path,
    session_id: str | None = None,
    *,
    seed: int = 1,
    project: str = PROJECT,
    age_days: float = 3.0,
) -> SessionTree:
    """Write a session as the client does: a main transcript naming its saved outputs and plan, one
    subagent with its settings, two saved outputs (one the subagent's, with the same bytes as the
    first), checkpoints, a task list and a plan; every file modified `age_days` ago, each at its own
    nanosecond."""
    rng = random.Random(seed)
    session_id = session_id or str(uuid.UUID(int=rng.getrandbits(128), version=4))
    tree = SessionTree(claude, session_id, claude / "projects" / project)
    results = tree.folder / "tool-results"
    agent = f"a{rng.getrandbits(64):016x}"[:17]
    outputs = [results / f"{short_id(rng)}.txt", results / f"{short_id(rng)}.txt"]
    main = [
        line(session_id, 0, "Print many lines"),
        line(session_id, 1, persisted(outputs[0])),
        line(session_id, 2, f"agentId: {agent}", slug=SLUG),
        line(session_id, 3, "done", slug=SLUG),
    ]
    subagent = [
        line(session_id, 10, "Print many lines [plan:big]", isSidechain=True, agentId=agent),
        line(session_id, 11, persisted(outputs[1]), isSidechain=True, agentId=agent),
    ]
    hashes = [
        hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:16]
        for name in ("hello.txt", "app.py")
    ]
    history = claude / "file-history" / session_id
    files: dict[Path, bytes] = {
        tree.main: b"".join(main),
        tree.folder / "subagents" / f"agent-{agent}.jsonl": b"".join(subagent),
        tree.folder / "subagents" / f"agent-{agent}.meta.json": json.dumps(
            {"agentType": "general-purpose", "description": "Print many lines"}
        ).encode(),
        outputs[0]: BIG_OUTPUT.encode(),
        outputs[1]: BIG_OUTPUT.encode(),
        history / f"{hashes[0]}@v1": b"hello from the sample project\nsecond line\n",
        history / f"{hashes[0]}@v2": b"hello from the sample project\nsecond line, edited\n",
        history / f"{hashes[1]}@v1": f"print('app {seed}')\n".encode(),
        claude / "tasks" / session_id / "1.json": json.dumps(
            {"id": "1", "subject": "First task"}
        ).encode(),
        claude / "plans" / f"{SLUG}.md": b"# Plan\n\n1. Edit hello.txt\n",
    }
    when = time.time_ns() - int(age_days * 86400e9)
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(when, when + rng.randrange(10**9)))
        (tree.transcripts if path.suffix == ".jsonl" else tree.whole).append(path)
    lock = claude / "tasks" / session_id / ".lock"
    lock.write_bytes(b"")
    tree.ignored.append(lock)
    (tree.project / "memory").mkdir(exist_ok=True)  # the project's, not a session's
    return tree


def delete_like_cleanup(tree: SessionTree) -> None:
    """Delete the session as Claude Code's cleanup does: the transcript, the session's folder and
    its checkpoints."""
    tree.main.unlink()
    shutil.rmtree(tree.folder)
    shutil.rmtree(tree.claude / "file-history" / tree.session_id)


def snapshot(paths: list[Path]) -> dict[Path, tuple[str, int]]:
    """Each file's SHA-256 and modification time (ns)."""
    return {
        path: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in paths
    }
