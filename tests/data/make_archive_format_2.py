"""Make `archive-format-2/`: an archive as riffd wrote it before format 3 (up to a76630d), with the
transcripts it holds, for tests/unit/archive/test_format_upgrade.py. It must be run by that riffd:

    git worktree add /tmp/riffd-a76630d a76630d
    PYTHONPATH=/tmp/riffd-a76630d/src python3 tests/data/make_archive_format_2.py

The transcripts hold what the upgrade must carry over: texts indexed for search, a resumed copy
(pieces cut out of its lines and kept once), a text written twice with other whitespace (a variant:
one search entry for both), a piece without text (a structured tool result), an unfinished last
line and a line that is not JSON.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import orjson

from riffd.archive.ingest import ingest_file
from riffd.archive.schema import FORMAT
from riffd.archive.store import Archive

HERE = Path(__file__).parent / "archive-format-2"
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra") for b in ("ven", "dor", "lix")]


def session(seed: int, lines: int) -> list[bytes]:
    rng = random.Random(seed)
    sid = f"00000000-0000-4000-8000-{seed:012d}"
    out, parent = [], None
    for number in range(lines):
        uuid = f"{seed:08d}-0000-4000-8000-{number:012d}"
        role = "user" if number % 2 == 0 else "assistant"
        text = " ".join(rng.choices(WORDS, k=30)) + f" marker{seed}x{number}"
        record = {
            "type": role,
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": sid,
            "cwd": "/home/u/proj",
            "timestamp": f"2026-03-01T10:00:{number:02d}.000Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }
        out.append(orjson.dumps(record) + b"\n")
        parent = uuid
    return out


def main() -> None:
    assert FORMAT == "2", "run this with riffd at a76630d (archive format 2)"
    shutil.rmtree(HERE, ignore_errors=True)
    project = HERE / "projects" / "-home-u-proj"
    project.mkdir(parents=True)
    first = session(1, 12)
    # a text with its whitespace changed: the same search entry as the one it varies
    variant = orjson.loads(first[2])
    text = variant["message"]["content"][0]["text"]
    variant["message"]["content"][0]["text"] = text.replace(" ", "  ", 3) + "\n"
    variant["uuid"] = "00000001-0000-4000-8000-999999999999"
    structured = {
        "type": "user",
        "uuid": "00000001-0000-4000-8000-888888888888",
        "sessionId": "00000000-0000-4000-8000-000000000001",
        "timestamp": "2026-03-01T10:01:00.000Z",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}],
        },
        "toolUseResult": {"stdout": "x" * 200, "stderr": "", "interrupted": False},
    }
    lines = [
        *first,
        orjson.dumps(variant) + b"\n",
        orjson.dumps(structured) + b"\n",
        b"not json at all\n",
        first[3].rstrip(b"\n")[:-20],
    ]
    (project / "00000000-0000-4000-8000-000000000001.jsonl").write_bytes(b"".join(lines))
    # a resumed copy: the first session's lines again, then lines of its own
    resumed = [line.replace(b"000000000001", b"000000000002") for line in first[:8]]
    (project / "00000000-0000-4000-8000-000000000002.jsonl").write_bytes(
        b"".join(resumed + session(2, 6))
    )
    (project / "00000000-0000-4000-8000-000000000003.jsonl").write_bytes(b"".join(session(3, 10)))
    db_path = HERE / "archive.db"
    archive = Archive(db_path)
    try:
        for path in sorted(project.iterdir()):
            ingest_file(archive, path)
        archive.compact()
        archive.settle()
    finally:
        archive.close()
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    for leftover in HERE.glob("archive.db-*"):
        leftover.unlink()


if __name__ == "__main__":
    main()
