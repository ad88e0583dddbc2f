"""Naming sessions: an ambiguous prefix lists each match with the time of its last record (what
`riffd sessions` shows), not the file's modification time a repair or a restore changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from riffd.transcript.sessions import AmbiguousSession, by_prefix, last_activity, local_time


def _session(folder: Path, session_id: str, stamp: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    record = {"type": "user", "uuid": "u1", "sessionId": session_id, "timestamp": stamp}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def test_an_ambiguous_prefix_names_each_session_by_its_last_record(tmp_path: Path) -> None:
    first = _session(tmp_path / "p", "abcd0000-0000-4000-8000-000000000001", "2026-10-01T11:00:00Z")
    second = _session(
        tmp_path / "p", "abcd0000-0000-4000-8000-000000000002", "2026-10-02T11:00:00Z"
    )
    os.utime(first, (2_000_000_000, 2_000_000_000))  # as a repair leaves it: far from its record
    with pytest.raises(AmbiguousSession) as raised:
        by_prefix("abcd", [first, second])
    said = str(raised.value)
    assert local_time(last_activity(first)) in said and local_time(last_activity(second)) in said
    assert local_time(2_000_000_000) not in said


def test_the_last_activity_of_a_file_gone_meanwhile_is_no_error(tmp_path: Path) -> None:
    assert last_activity(tmp_path / "gone.jsonl") == 0.0
