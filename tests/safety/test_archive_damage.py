"""One damaged pack in archive.db, made as a review made it: 16 bytes flipped inside a stored pack's
compressed blob with real SQLite, which SQLite's own integrity check does not see. Restore never
writes other bytes or a part of a file, verify names the pack with the sessions it holds and what
can be done, `--fix` never leaves a part of a generation, and archiving, detection and repairs go on
(the daemon's worker, `riffd fix`)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from conftest import (
    CORPUS_DIR,
    corpus_lines,
    requires_corpus,
    transcript_line,
    worker_home,
    write_config,
)
from helpers import damage
from helpers.run import run_riffd
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive
from riffd.archive.verify import archive_again
from riffd.daemon.worker import Worker
from riffd.state.store import StateStore
from riffd.transcript.scan import scan_file

pytestmark = requires_corpus

# 1,863 lines, 2.7 MB
REAL = CORPUS_DIR / "marot-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
SMALL = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"
SMALL_SESSION = "d6e0bada-1959-4eec-a9d2-0bfade768d8f"  # its sessionId


def _environment(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def _riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_riffd(*args, config=write_config(tmp_path), env=_environment(tmp_path), timeout=180)


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "claude" / "projects" / "-home-user-app"
    project.mkdir(parents=True, exist_ok=True)
    return project


def flip(db_path: Path, pack: int, at: float, count: int = 16) -> None:
    """Flip `count` bytes of pack `pack`'s stored blob from `at` (a fraction of its length), with
    real SQLite, and check that SQLite's own integrity check still passes."""
    with sqlite3.connect(db_path) as db:
        data = bytearray(db.execute("SELECT data FROM packs WHERE id = ?", (pack,)).fetchone()[0])
        assert data, "the pack is settled (one frame)"
        start = int(len(data) * at)
        for offset in range(start, start + count):
            data[offset] ^= 0xFF
        db.execute("UPDATE packs SET data = ? WHERE id = ?", (bytes(data), pack))
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.parametrize("at", [0.3, 0.5, 0.7])
def test_a_damaged_pack_is_never_restored_as_other_bytes_nor_in_part(
    tmp_path: Path, at: float
) -> None:
    """Before, a flip at 0.3 of the pack restored 16 changed lines and exited 0. Now `restore --to`
    exits 2 naming the pack and leaves nothing in the folder, and `restore --force` over the
    original leaves it as it was."""
    path = _project(tmp_path) / REAL.name
    shutil.copyfile(REAL, path)
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    flip(tmp_path / "state" / "archive.db", 1, at)
    out = tmp_path / "out"
    out.mkdir()
    result = _riffd(tmp_path, "archive", "restore", REAL.stem, "--to", str(out))
    assert result.returncode == 2, result.stderr
    assert "pack 1 of the archive cannot be read" in result.stderr
    assert f"nothing was written to {out / REAL.name}" in result.stderr
    assert "`riffd archive verify` names every damaged pack" in result.stderr
    assert _leftovers(out) == []

    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    over = _riffd(tmp_path, "archive", "restore", REAL.stem, "--force")
    assert over.returncode == 2, over.stderr
    assert path.read_bytes() == REAL.read_bytes()
    assert _leftovers(path.parent) == [REAL.name]


def test_verify_names_the_damaged_pack_with_its_sessions_and_fix_archives_what_still_exists(
    tmp_path: Path,
) -> None:
    """Two sessions whose lines are in one pack; one transcript deleted since. `riffd archive
    verify` names the pack, each session and what can be done (exit 1); search still answers;
    `--fix` archives the one that exists again, in one piece, which then restores byte for byte; the
    deleted one is refused, never written in part."""
    project = _project(tmp_path)
    kept, gone = project / REAL.name, project / SMALL.name
    shutil.copyfile(REAL, kept)
    shutil.copyfile(SMALL, gone)
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    gone.unlink()
    flip(tmp_path / "state" / "archive.db", 1, 0.5)

    found = _riffd(tmp_path, "archive", "verify")
    assert found.returncode == 1, found.stderr
    lines = found.stdout.splitlines()
    riffd = f"riffd --config {tmp_path / 'config.toml'}"  # (the configuration verify ran on)
    assert lines[0].startswith(
        "pack 1 of the archive is damaged: pack 1 of the archive cannot be read ("
    )
    assert lines[0].endswith("it holds lines of 2 archived file generation(s), or pieces of them:")
    assert lines[1:3] == [
        f"    {kept} (session {REAL.stem}), generation 0 (its latest): the transcript still exists: `{riffd} "
        f"archive verify --fix {kept}` archives it again as a new generation",
        f"    {gone} (session {SMALL_SESSION}), generation 0 (its latest): the transcript is gone, so "
        f"these lines are lost from the archive; `riffd archive restore` refuses it rather than write part of it; "
        f"`{riffd} backups list {SMALL_SESSION}` shows riffd's own backups of it",
    ]
    assert lines[3].startswith(
        f"{kept}: the archive differs from the file: the archive cannot give its lines as "
        "archived: pack 1 of the archive cannot be read"
    )
    assert "1 differs, 1 damaged pack" in found.stderr

    searched = _riffd(tmp_path, "archive", "search", "the", "--json")
    assert searched.returncode == 0, searched.stderr
    assert any(
        "the text cannot be shown: pack 1 of the archive cannot be read" in hit["snippet"]
        for hit in orjson.loads(searched.stdout)
    )

    fixed = _riffd(tmp_path, "archive", "verify", "--fix")
    # the pack is still damaged: the deleted session's lines are lost
    assert fixed.returncode == 1, fixed.stderr
    assert (
        f"{kept}: the archive differs from the file" in fixed.stdout
        and "archived again as a new generation" in fixed.stdout
    )
    out = tmp_path / "out"
    (out / "kept").mkdir(parents=True)
    (out / "gone").mkdir()
    restored = _riffd(tmp_path, "archive", "restore", REAL.stem, "--to", str(out / "kept"))
    assert restored.returncode == 0, restored.stderr
    assert (out / "kept" / REAL.name).read_bytes() == REAL.read_bytes()
    refused = _riffd(tmp_path, "archive", "restore", str(gone), "--to", str(out / "gone"))
    assert refused.returncode == 2 and "pack 1" in refused.stderr
    assert _leftovers(out / "gone") == []
    again = _riffd(tmp_path, "archive", "verify", "--json", str(kept))
    assert again.returncode == 0 and orjson.loads(again.stdout)["outcome"] == "whole"


def test_archiving_a_file_again_is_all_or_nothing(tmp_path: Path) -> None:
    """`verify --fix` archives a file again in one transaction: a write that fails after its first
    chunk (1 MiB of lines) leaves no new generation behind. Before, the chunks before the failure
    stayed as the file's latest generation, which restore then wrote as if it were the file (585 of
    1,881 lines, exit 0)."""
    path = tmp_path / REAL.name
    shutil.copyfile(REAL, path)
    archive = Archive(tmp_path / "archive.db")
    ingest_file(archive, path)
    archive.connection.db.executescript(
        "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON main.files WHEN NEW.lines > 1000 "
        "BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        archive_again(archive, path)
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert archive.generations(file_id) == [0]
    assert archive.cursor(str(path)) == (0, len(REAL.read_bytes()))
    assert b"".join(archive.iter_file(file_id)) == REAL.read_bytes()
    archive.connection.db.executescript("DROP TRIGGER refuse")
    assert archive_again(archive, path) == 1863
    assert archive.generations(file_id) == [0, 1]
    assert b"".join(archive.iter_file(file_id)) == REAL.read_bytes()
    archive.close()


# (0.5: the pack did not decompress; 0.3: it did, to other bytes)
@pytest.mark.parametrize("at", [0.3, 0.5])
def test_the_worker_judges_repairs_and_archives_past_a_damaged_pack(
    tmp_path: Path, at: float
) -> None:
    """The daemon's worker, with the archive's only pack damaged: a session that shares pieces with
    it is judged, repaired and archived whole (before, looking a piece up in the pack raised and the
    file was skipped), and a file whose last archived line is in it is archived again from its start
    as a new generation when it grows."""
    project, settings = worker_home(tmp_path)
    store = StateStore(tmp_path / "state" / "state.db")
    first = project / "first.jsonl"
    shutil.copyfile(SMALL, first)
    archive = Archive(tmp_path / "archive.db")
    ingest_file(archive, first)
    archive.settle()
    archive.close()
    flip(tmp_path / "archive.db", 1, at)
    archive = Archive(tmp_path / "archive.db")

    damaged = damage.inject_resumed_duplicate(corpus_lines(SMALL))
    second = project / "second.jsonl"
    second.write_bytes(damaged.data)
    outcome = Worker(store, settings, archive=archive).process(second)
    assert outcome.findings >= 1 and outcome.repair == "repaired"
    assert scan_file(second).findings == []
    ((file_id, _path, _session),) = archive.files_of(str(second))
    assert b"".join(archive.iter_file(file_id, generation=0)) == damaged.data
    assert b"".join(archive.iter_file(file_id)) == second.read_bytes()

    with open(first, "ab") as out:
        out.write(transcript_line(1))
    Worker(store, settings, archive=archive).process(first)
    ((file_id, _path, _session),) = archive.files_of(str(first))
    assert archive.generations(file_id) == [0, 1]
    assert b"".join(archive.iter_file(file_id)) == first.read_bytes()
    archive.close()


def test_lines_go_on_into_a_new_pack_when_the_open_one_is_damaged(tmp_path: Path) -> None:
    """The pack lines are being added to, damaged in its stored segments: the next lines go to a new
    pack (before, every later write of the archive failed), and restore names the damaged one for
    the lines it held."""
    archive = Archive(tmp_path / "archive.db")
    archive.add_lines("/p/a.jsonl", 0, [line[:-1] for line in corpus_lines(SMALL)])
    archive.close()
    with sqlite3.connect(tmp_path / "archive.db") as db:
        (data,) = db.execute("SELECT data FROM segments WHERE pack = 1 AND number = 0").fetchone()
        data = bytes(
            byte ^ 0xFF if 100 <= offset < 116 else byte for offset, byte in enumerate(data)
        )
        db.execute("UPDATE segments SET data = ? WHERE pack = 1 AND number = 0", (data,))
    db.close()
    archive = Archive(tmp_path / "archive.db")
    later = [
        transcript_line(number, session_id="22222222-3333-4444-5555-666666666666")[:-1]
        for number in range(5)
    ]
    assert archive.add_lines("/p/b.jsonl", 0, later) == 5
    ((file_id, _path, _session),) = archive.files_of("/p/b.jsonl")
    assert b"".join(archive.iter_file(file_id)) == b"".join(line + b"\n" for line in later)
    with sqlite3.connect(tmp_path / "archive.db") as db:
        assert {row[0] for row in db.execute("SELECT pack FROM runs")} == {1, 2}
    db.close()
    ((file_id, _path, _session),) = archive.files_of("/p/a.jsonl")
    with pytest.raises(Exception, match="pack 1 of the archive cannot be read"):
        b"".join(archive.iter_file(file_id))
    archive.close()


@pytest.mark.parametrize("at", [0.3, 0.5])
def test_fix_cuts_a_torn_tail_past_a_damaged_pack_after_archiving_it(
    tmp_path: Path, at: float
) -> None:
    """`riffd fix` archives a torn last line before it cuts it off; with a damaged pack in the
    archive that shares pieces with the file it went down with a traceback. Now the fragment is
    archived, the repair done, and the repaired version archived after it."""
    project = _project(tmp_path)
    first = project / SMALL.name
    shutil.copyfile(SMALL, first)
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    flip(tmp_path / "state" / "archive.db", 1, at)
    torn = project / "torn.jsonl"
    torn.write_bytes(SMALL.read_bytes() + b'{"type":"user","message":{"content":"cut o')
    long_ago = time.time() - 3600
    os.utime(torn, (long_ago, long_ago))
    before = torn.read_bytes()
    result = _riffd(tmp_path, "fix", "--quiet-period", "0", str(torn))
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stderr + result.stdout
    assert torn.read_bytes() == SMALL.read_bytes()
    # the version with the fragment, then the one `fix` left (which a restore writes back)
    archive = Archive(tmp_path / "state" / "archive.db", read_only=True)
    try:
        ((file_id, _path, _session),) = archive.files_of(str(torn))
        assert [
            b"".join(archive.iter_file(file_id, generation))
            for generation in archive.generations(file_id)
        ] == [before, SMALL.read_bytes()]
    finally:
        archive.close()
    out = tmp_path / "out"
    restored = _riffd(tmp_path, "archive", "restore", str(torn), "--to", str(out / "torn.jsonl"))
    assert restored.returncode == 0, restored.stderr
    assert (out / "torn.jsonl").read_bytes() == SMALL.read_bytes()
