"""`riffd archive ingest` of sessions' files at its edges, and `riffd fix` beside them: a `.jsonl` saved
output is left alone. Real files laid out as the client writes them, real `riffd` subprocesses."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sessiontree import build_session
from test_archive_sessions import _riffd

SESSION = "aaaaaaaa-0000-4000-8000-000000000001"


def test_fix_never_rewrites_a_jsonl_saved_output(tmp_path: Path) -> None:
    """A `.jsonl` in a session's tool-results is a saved output even when its lines look like a
    damaged transcript: `riffd fix` named it leaves it byte for byte."""
    claude = tmp_path / "claude"
    tree = build_session(claude)
    copy = tree.folder / "tool-results" / "copy.jsonl"
    records = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"content": "hi"}},
        {
            "type": "assistant",
            "uuid": "u2",
            "parentUuid": "u1",
            "message": {
                "id": "m1",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}],
            },
        },
        {"type": "user", "uuid": "u3", "parentUuid": "u2", "message": {"content": "next"}},
    ]
    data = b"".join(
        json.dumps({**record, "sessionId": SESSION}).encode() + b"\n" for record in records
    )
    copy.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(copy, (long_ago, long_ago))
    result = _riffd(tmp_path, "fix", str(copy))
    assert "repaired" not in result.stdout, result.stdout
    assert copy.read_bytes() == data
    assert "saved tool outputs" in result.stdout + result.stderr
