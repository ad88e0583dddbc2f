"""The backup store: verified gzip copies with manifests, nothing partial left behind, restore and
prune."""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import dead_pid, transcript_bytes
from riffd import __version__
from riffd.commands.cli import main
from riffd.commands.output import EXIT_OK
from riffd.fsio import FileSystem
from riffd.repair.backup import (
    BackupCorrupt,
    BackupStore,
    SourceChanged,
    UnknownBackup,
    is_backup_id,
)
from riffd.repair.outcomes import ApplyOptions, Failed, Restored, Skipped, SkipReason
from riffd.repair.restore import restore_backup
from riffd.transcript.findings import Finding, FindingClass

SESSION = "6a1f0c2e-aaaa-bbbb-cccc-000000000001"


def finding_for(path: Path) -> Finding:
    return Finding(
        FindingClass.DUPLICATE_TOOL_RESULT, str(path), (3, 7), "two results", tool_id="toolu_1"
    )


def make_source(tmp_path: Path, data: bytes, name: str = f"{SESSION}.jsonl") -> Path:
    project = tmp_path / "claude" / "projects" / "-w"
    project.mkdir(parents=True, exist_ok=True)
    path = project / name
    path.write_bytes(data)
    long_ago = time.time() - 3600
    os.utime(path, (long_ago, long_ago))
    return path


def backup_of(store: BackupStore, path: Path, **kwargs: object) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        record = store.create(path, fd, size, **kwargs)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return record.backup_id


def store_files(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if name != ".locks") if root.exists() else []


class FailingWritesFS(FileSystem):
    """Raises `error` on the `fail_on`-th write to a file under `folder` (1-based; 0 = every
    write)."""

    def __init__(self, folder: Path, error: int, fail_on: int = 0, suffix: str = "") -> None:
        self.folder = str(folder)
        self.error = error
        self.fail_on = fail_on
        self.suffix = suffix
        self.paths: dict[int, str] = {}
        self.count = 0

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = os.fspath(path)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        target = self.paths.get(fd, "")
        if target.startswith(self.folder) and self.suffix in target:
            self.count += 1
            if self.fail_on in (0, self.count):
                raise OSError(self.error, os.strerror(self.error), target)
        return super().write(fd, data)


class CorruptingFS(FileSystem):
    """Flips one bit in the first write to the backup folder: a disk that silently returns bad
    data."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)
        self.paths: dict[int, str] = {}
        self.corrupted = False

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = os.fspath(path)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if not self.corrupted and self.paths.get(fd, "").startswith(self.folder) and len(data) > 20:
            damaged = bytearray(data)
            damaged[len(damaged) // 2] ^= 0x01
            self.corrupted = True
            return super().write(fd, bytes(damaged))
        return super().write(fd, data)


def test_backup_is_verified_private_gzip_with_manifest(tmp_path: Path) -> None:
    data = transcript_bytes(50)
    source = make_source(tmp_path, data)
    root = tmp_path / "state" / "backups"
    store = BackupStore(root)
    fd = os.open(source, os.O_RDONLY)
    try:
        record = store.create(
            source,
            fd,
            len(data),
            hashlib.sha256(data).hexdigest(),
            [finding_for(source)],
            reason="repair",
        )
    finally:
        os.close(fd)

    assert is_backup_id(record.backup_id) and SESSION[:8] in record.backup_id
    assert record.data_path == root / f"{record.backup_id}.gz"
    assert gzip.decompress(record.data_path.read_bytes()) == data  # readable without riffd
    assert store.open_bytes(record.backup_id) == data
    manifest = json.loads(record.manifest_path.read_text())
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["size"] == len(data)
    assert manifest["source_path"] == str(source)
    assert manifest["riffd_version"] == __version__
    assert manifest["findings"] == [finding_for(source).to_json()]
    assert datetime.fromisoformat(manifest["created_at"]).tzinfo is not None
    for folder in (root, root.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in store_files(root):
        assert not name.endswith(".jsonl")
        assert not name.startswith(".")  # no temp file left
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600
    assert store_files(root) == sorted([record.data_path.name, record.manifest_path.name])


def test_multi_chunk_file_round_trips(tmp_path: Path) -> None:
    data = transcript_bytes(9000, pad=300)  # a few MiB: several read and compress chunks
    source = make_source(tmp_path, data)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, source, expected_sha256=hashlib.sha256(data).hexdigest())
    assert len(data) > 2 * (1 << 20)
    assert store.open_bytes(backup_id) == data
    assert store.verify(backup_id).size == len(data)


def test_only_the_requested_prefix_is_backed_up(tmp_path: Path) -> None:
    data = transcript_bytes(10)
    source = make_source(tmp_path, data + transcript_bytes(3))
    store = BackupStore(tmp_path / "backups")
    fd = os.open(source, os.O_RDONLY)
    try:
        record = store.create(source, fd, len(data), hashlib.sha256(data).hexdigest())
    finally:
        os.close(fd)
    assert store.open_bytes(record.backup_id) == data


def test_changed_source_raises_and_leaves_nothing(tmp_path: Path) -> None:
    data = transcript_bytes(10)
    source = make_source(tmp_path, data)
    root = tmp_path / "backups"
    store = BackupStore(root)
    with pytest.raises(SourceChanged, match=str(source)):
        backup_of(store, source, expected_sha256=hashlib.sha256(b"something else").hexdigest())
    fd = os.open(source, os.O_RDONLY)
    try:
        with pytest.raises(SourceChanged, match="shorter"):
            store.create(source, fd, len(data) + 100)
    finally:
        os.close(fd)
    assert store_files(root) == []
    assert store.list() == []


@pytest.mark.parametrize(("fail_on", "suffix"), [(1, ".gz."), (0, ".json.")])
def test_no_space_leaves_no_partial_backup(tmp_path: Path, fail_on: int, suffix: str) -> None:
    data = transcript_bytes(200)
    source = make_source(tmp_path, data)
    root = tmp_path / "backups"
    store = BackupStore(root, fs=FailingWritesFS(root, errno.ENOSPC, fail_on, suffix))
    with pytest.raises(OSError) as caught:
        backup_of(store, source)
    assert caught.value.errno == errno.ENOSPC
    assert store_files(root) == []
    assert source.read_bytes() == data


def test_verification_catches_a_bad_write(tmp_path: Path) -> None:
    data = transcript_bytes(200)
    source = make_source(tmp_path, data)
    root = tmp_path / "backups"
    fs = CorruptingFS(root)
    with pytest.raises(BackupCorrupt):
        backup_of(BackupStore(root, fs=fs), source)
    assert fs.corrupted
    assert store_files(root) == []


def test_damaged_stored_backup_is_detected(tmp_path: Path) -> None:
    data = transcript_bytes(200)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, make_source(tmp_path, data))
    data_path = store.data_path(backup_id)
    damaged = bytearray(data_path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    data_path.write_bytes(bytes(damaged))
    with pytest.raises(BackupCorrupt):
        store.open_bytes(backup_id)
    with pytest.raises(BackupCorrupt):
        store.verify(backup_id)


def test_list_and_get(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    first = make_source(tmp_path, transcript_bytes(3), "a.jsonl")
    second = make_source(tmp_path, transcript_bytes(4), "b.jsonl")
    ids = [backup_of(store, first), backup_of(store, second), backup_of(store, first)]
    assert ids == sorted(ids)  # ids sort by creation time
    assert [record.backup_id for record in store.list()] == ids
    assert store.get(ids[1]).source_path == str(second)
    (store.root / "20990101T000000.000000Z-zz-000000.json").write_text("{broken")
    assert [record.backup_id for record in store.list()] == ids
    with pytest.raises(UnknownBackup):
        store.get("20200101T000000.000000Z-nope-abcdef")
    with pytest.raises(UnknownBackup):
        store.get("../../etc/passwd")


def test_restore_to_new_path_is_byte_identical(tmp_path: Path) -> None:
    data = transcript_bytes(30)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, make_source(tmp_path, data))
    target = tmp_path / "restored.jsonl"
    outcome = restore_backup(store, backup_id, target)
    assert isinstance(outcome, Restored) and outcome.safety_backup_id is None
    assert target.read_bytes() == data
    assert [name for name in os.listdir(tmp_path) if ".riffd-" in name] == []


def test_restore_refuses_to_overwrite_unless_told(tmp_path: Path) -> None:
    data = transcript_bytes(30)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, make_source(tmp_path, data))
    target = tmp_path / "other" / "elsewhere.jsonl"
    target.parent.mkdir()
    target.write_bytes(b"precious\n")
    long_ago = time.time() - 3600
    os.utime(target, (long_ago, long_ago))
    refused = restore_backup(store, backup_id, target)
    assert isinstance(refused, Failed) and refused.reason == "destination_exists"
    assert target.read_bytes() == b"precious\n"

    options = ApplyOptions(backup_dir=store.root, claude_dir=tmp_path / "claude", quiet_period=0)
    outcome = restore_backup(store, backup_id, target, overwrite=True, options=options)
    assert isinstance(outcome, Restored), outcome
    assert target.read_bytes() == data
    assert outcome.safety_backup_id is not None
    assert store.open_bytes(outcome.safety_backup_id) == b"precious\n"


def test_restore_over_original_backs_up_current_first(tmp_path: Path) -> None:
    data = transcript_bytes(30)
    source = make_source(tmp_path, data)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, source)
    changed = transcript_bytes(12)
    source.write_bytes(changed)
    claude_dir = tmp_path / "claude"
    options = ApplyOptions(backup_dir=store.root, claude_dir=claude_dir, quiet_period=120)

    # Just written, so inside the quiet period: a restore is a rewrite and waits for an idle
    # session.
    busy = restore_backup(store, backup_id, options=options)
    assert isinstance(busy, Skipped) and busy.reason == SkipReason.LIVE
    assert source.read_bytes() == changed

    long_ago = time.time() - 3600
    os.utime(source, (long_ago, long_ago))
    outcome = restore_backup(store, backup_id, options=options)
    assert isinstance(outcome, Restored), outcome
    assert source.read_bytes() == data
    assert outcome.safety_backup_id is not None
    assert store.open_bytes(outcome.safety_backup_id) == changed
    assert store.get(outcome.safety_backup_id).reason == f"before restoring {backup_id}"


def test_restore_of_deleted_original_recreates_it(tmp_path: Path) -> None:
    data = transcript_bytes(8)
    source = make_source(tmp_path, data)
    store = BackupStore(tmp_path / "backups")
    backup_id = backup_of(store, source)
    source.unlink()  # Claude Code's cleanupPeriodDays removed it
    outcome = restore_backup(store, backup_id)
    assert isinstance(outcome, Restored)
    assert source.read_bytes() == data


def test_restore_unknown_id_fails_cleanly(tmp_path: Path) -> None:
    outcome = restore_backup(
        BackupStore(tmp_path / "backups"), "20200101T000000.000000Z-nope-abcdef"
    )
    assert isinstance(outcome, Failed) and outcome.reason == "not_found"


def test_prune_keeps_newest_per_file_and_removes_by_count_and_age(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    first = make_source(tmp_path, transcript_bytes(3), "a.jsonl")
    second = make_source(tmp_path, transcript_bytes(4), "b.jsonl")
    first_ids = [backup_of(store, first) for _ in range(5)]
    second_ids = [backup_of(store, second)]

    removed = store.prune(keep_per_file=2, max_age_days=90)
    assert sorted(record.backup_id for record in removed) == first_ids[:3]
    assert [record.backup_id for record in store.list()] == sorted(first_ids[3:] + second_ids)
    for backup_id in first_ids[:3]:
        assert (
            not store.data_path(backup_id).exists() and not store.manifest_path(backup_id).exists()
        )

    # A year later everything is past max age, yet the newest backup of each file stays.
    removed = store.prune(
        keep_per_file=10, max_age_days=90, now=datetime.now(UTC) + timedelta(days=365)
    )
    assert [record.backup_id for record in removed] == [first_ids[3]]
    assert {record.backup_id for record in store.list()} == {first_ids[4], second_ids[0]}

    removed = store.prune(keep_per_file=1, max_age_days=0, max_total_bytes=0)
    assert removed == []
    assert {record.backup_id for record in store.list()} == {first_ids[4], second_ids[0]}
    with pytest.raises(ValueError):
        store.prune(keep_per_file=0)


def test_prune_by_total_size_removes_oldest_first(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    source = make_source(tmp_path, transcript_bytes(100), "a.jsonl")
    ids = [backup_of(store, source) for _ in range(4)]
    one = store.get(ids[0]).stored_bytes
    removed = store.prune(keep_per_file=10, max_age_days=90, max_total_bytes=2 * one)
    assert [record.backup_id for record in removed] == ids[:2]
    assert [record.backup_id for record in store.list()] == ids[2:]


def test_leftovers_of_a_killed_run_are_removed_only_when_old(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    kept_id = backup_of(store, make_source(tmp_path, transcript_bytes(3)))
    old_temp = store.root / ".20200101T000000.000000Z-abc-000001.gz.tmp"
    fresh_temp = store.root / ".20200101T000000.000000Z-abc-000002.gz.tmp"
    orphan = store.root / "20200101T000000.000000Z-abc-000003.gz"
    for leftover in (old_temp, fresh_temp, orphan):
        leftover.write_bytes(b"partial")
    long_ago = time.time() - 7200
    for leftover in (old_temp, orphan):
        os.utime(leftover, (long_ago, long_ago))
    removed = store.remove_leftovers(time.time())
    assert sorted(removed) == sorted([old_temp, orphan])
    assert fresh_temp.exists()
    assert store.open_bytes(kept_id) == transcript_bytes(3)


def test_temps_of_a_dead_process_go_at_once_and_a_running_ones_never(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    kept_id = backup_of(store, make_source(tmp_path, transcript_bytes(3)))
    # fresh: a kill -9 just now
    of_dead = store.root / f".20200101T000000.000000Z-abc-000001.gz.{dead_pid()}.tmp"
    of_dead_manifest = store.root / f".20200101T000000.000000Z-abc-000001.json.{dead_pid()}.tmp"
    # old: still being written
    of_running = store.root / f".20200101T000000.000000Z-abc-000002.gz.{os.getpid()}.tmp"
    for leftover in (of_dead, of_dead_manifest, of_running):
        leftover.write_bytes(b"partial")
    long_ago = time.time() - 7200
    os.utime(of_running, (long_ago, long_ago))
    assert sorted(store.remove_leftovers(time.time())) == sorted([of_dead, of_dead_manifest])
    assert of_running.exists()
    assert store.open_bytes(kept_id) == transcript_bytes(3)


def test_backups_prune_removes_a_killed_runs_temps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = BackupStore(tmp_path / "backups")
    backup_of(store, make_source(tmp_path, transcript_bytes(3)))
    of_dead = store.root / f".20200101T000000.000000Z-abc-000001.gz.{dead_pid()}.tmp"
    of_dead.write_bytes(b"8 MB of a killed backup")
    assert main(["backups", "--backup-dir", str(store.root), "prune"]) == EXIT_OK
    assert not of_dead.exists()
    assert len(store.list()) == 1


def test_riffd_fix_removes_a_killed_runs_backup_temps_first(tmp_path: Path) -> None:
    store = BackupStore(tmp_path / "backups")
    store.ensure_root()
    of_dead = store.root / f".20200101T000000.000000Z-abc-000001.gz.{dead_pid()}.tmp"
    of_dead.write_bytes(b"half a backup")
    clean = tmp_path / "s.jsonl"
    clean.write_bytes(transcript_bytes(3))
    assert main(["fix", "--backup-dir", str(store.root), str(clean)]) == EXIT_OK
    assert not of_dead.exists()
