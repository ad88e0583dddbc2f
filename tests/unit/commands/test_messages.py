"""Errors that say what happened: a folder that cannot be listed, a file deleted or changed while
riffd worked."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, corpus_lines, requires_corpus
from helpers import damage
from riffd.claude_code.walk import iter_transcripts
from riffd.commands.fix import TailKeeper, _fix_one
from riffd.fsio import FileSystem
from riffd.repair.outcomes import ApplyOptions, FileChanged
from riffd.repair.plan import RepairOptions
from riffd.repair.planner import plan_file_repair
from riffd.transcript.scan import index_file


class UnlistableFS(FileSystem):
    """A folder that cannot be listed (permissions, or a sync client's I/O error), and one deleted
    meanwhile."""

    def __init__(self, refused: Path, gone: Path) -> None:
        self.refused, self.gone = refused, gone

    def entries(self, path: str | os.PathLike[str]) -> list[tuple[str, bool]]:
        if Path(path) == self.refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        if Path(path) == self.gone:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        return super().entries(path)


def test_a_folder_that_cannot_be_listed_is_named_never_taken_for_empty(tmp_path: Path) -> None:
    for folder in ("a", "locked", "vanished", "z"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "s.jsonl").write_bytes(b"{}\n")
    fs = UnlistableFS(tmp_path / "locked", tmp_path / "vanished")
    failures: list[OSError] = []
    found = list(iter_transcripts([tmp_path], failures.append, fs=fs))
    assert found == [tmp_path / "a" / "s.jsonl", tmp_path / "z" / "s.jsonl"]
    assert [(failure.filename, failure.errno) for failure in failures] == [
        (str(tmp_path / "locked"), errno.EACCES)
    ]
    with pytest.raises(PermissionError) as raised:  # without a handler: an error, never "0 files"
        list(iter_transcripts([tmp_path], fs=fs))
    assert raised.value.filename == str(tmp_path / "locked")


def damaged_copy(tmp_path: Path) -> Path:
    lines = damage.inject_resumed_duplicate(
        corpus_lines(CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl")
    ).lines
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(lines))
    return path


@requires_corpus
def test_a_file_deleted_before_fix_reads_it_is_nothing_to_do(tmp_path: Path) -> None:
    path = damaged_copy(tmp_path)
    path.unlink()
    outcome = _fix_one(
        path,
        ApplyOptions(backup_dir=tmp_path / "backups"),
        RepairOptions(),
        dry_run=False,
        keeper=TailKeeper(tmp_path / "archive.db"),
    )
    assert outcome.outcome == "skipped" and outcome.reason == "gone"
    assert outcome.detail == f"{path}: deleted while riffd worked; nothing to do"


@requires_corpus
def test_a_file_replaced_between_the_scan_and_the_plan_is_changed_not_an_internal_error(
    tmp_path: Path,
) -> None:
    path = damaged_copy(tmp_path)
    scanned = index_file(path, with_identity=True)
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b"not json at all\n" * 4000)  # the lines the plan names no longer parse
    os.replace(replacement, path)
    with pytest.raises(FileChanged, match=r"changed during the run.*scan it again"):
        plan_file_repair(scanned)
