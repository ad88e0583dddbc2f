"""Verified, compressed copies of transcripts taken before riffd changes them.

A backup is `<root>/<backup_id>.gz` (gzip of the exact bytes) and `<root>/<backup_id>.json` (its
manifest). Nothing here is ever named `*.jsonl`: Claude Code lists such files as sessions and
deletes old ones, and the store must live outside `projects/` for the same reason. A backup only
counts once its manifest exists, and the manifest is only written after the compressed file was
read back, decompressed and found to have the same sha256 as the source bytes.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.claude_code.folders import session_id_for
from riffd.claude_code.liveness import pid_is_alive
from riffd.fsio import (
    NOFOLLOW,
    REAL_FS,
    FileSystem,
    ensure_private_folder,
    fsync_folder,
    remove_leftover,
    write_all,
)
from riffd.transcript.findings import Finding
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
DATA_SUFFIX = ".gz"
MANIFEST_SUFFIX = ".json"
CHUNK_SIZE = 1 << 20


FILE_MODE = 0o600
# Leftovers of a killed process (temp files, data without a manifest) are removed after this long.
STALE_AFTER_SECONDS = 3600.0

_BACKUP_ID = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-[A-Za-z0-9-]{1,8}-[0-9a-f]{6}$")
# `.<backup id>.gz.<pid>.tmp`: the pid of the writing process (names without one come from earlier
# versions).
_STORE_TEMP = re.compile(
    r"^\.\d{8}T\d{6}\.\d{6}Z-[A-Za-z0-9-]{1,8}-[0-9a-f]{6}\.(gz|json)(?:\.(?P<pid>[0-9]+))?\.tmp$"
)


class BackupError(Exception):
    """A backup could not be made, found or read; the message names the file and what to do."""


class SourceChanged(BackupError):
    """The source bytes are not the ones the caller expected (the file changed since it was
    scanned)."""


class BackupCorrupt(BackupError):
    """A stored or freshly written backup does not decompress to the bytes its manifest names."""


def backups_command(root: Path, *words: str) -> str:
    """`riffd backups WORDS` as riffd advises it for the backups in `root`: naming the folder
    (`--backup-dir`) unless it is the default one, so that the command finds them from any shell,
    whatever configuration put them there."""
    from riffd.display import shell_command
    from riffd.paths import default_backup_dir

    named = () if root.absolute() == default_backup_dir().absolute() else ("--backup-dir", root)
    return shell_command("riffd", "backups", *named, *words)


class UnknownBackup(BackupError):
    """No backup with the given id exists in the store."""


@dataclass(frozen=True)
class BackupRecord:
    """One stored backup: where its files are and what its manifest says."""

    backup_id: str
    source_path: str
    session_id: str
    sha256: str
    size: int
    created_at: datetime
    riffd_version: str
    reason: str
    findings: tuple[dict[str, Any], ...]
    data_path: Path
    manifest_path: Path

    @property
    def stored_bytes(self) -> int:
        """Bytes the backup takes on disk (compressed data plus manifest), 0 for files already
        gone."""
        total = 0
        for stored in (self.data_path, self.manifest_path):
            try:
                total += stored.stat().st_size
            except FileNotFoundError:
                continue
        return total


def new_backup_id(source_path: Path, when: datetime | None = None) -> str:
    """Given a source path, return a fresh backup id that sorts by creation time (microseconds,
    UTC)."""
    moment = (when or datetime.now(UTC)).astimezone(UTC)
    session_part = re.sub(r"[^A-Za-z0-9-]", "-", session_id_for(source_path))[:8] or "file"
    return f"{moment.strftime('%Y%m%dT%H%M%S.%f')}Z-{session_part}-{secrets.token_hex(3)}"


def is_backup_id(text: str) -> bool:
    """Return True when `text` has the shape of a backup id (so it can name a file in the store)."""
    return bool(_BACKUP_ID.match(text))


class BackupStore:
    """The folder of verified backups: create, list, read, verify, prune (riffd.repair.restore puts
    one back)."""

    def __init__(self, root: Path, fs: FileSystem = REAL_FS) -> None:
        self.root = Path(root)
        # a RetryingFS retries EIO per its policy; a seam alone is retried only where the store
        # reads bytes (riffd.transcript.reader.iter_fd gives it the default policy)
        self.fs = fs

    # -- paths -------------------------------------------------------------------------------------

    def data_path(self, backup_id: str) -> Path:
        """Given a backup id, return where its compressed bytes are stored."""
        return self.root / f"{backup_id}{DATA_SUFFIX}"

    def manifest_path(self, backup_id: str) -> Path:
        """Given a backup id, return where its manifest is stored."""
        return self.root / f"{backup_id}{MANIFEST_SUFFIX}"

    def ensure_root(self) -> None:
        """Create the store's folder (0700) when it does not exist yet."""
        ensure_private_folder(self.fs, self.root)

    # -- create ------------------------------------------------------------------------------------

    def create(
        self,
        source_path: Path,
        fd: int,
        size: int,
        expected_sha256: str | None = None,
        findings: Iterable[Finding] = (),
        *,
        reason: str = "repair",
    ) -> BackupRecord:
        """Given an open source file, store a verified backup of its bytes [0, size) and return its
        record; raise SourceChanged when those bytes are not `expected_sha256` (or the file is
        shorter), BackupCorrupt when the written backup does not read back identical, OSError
        (ReadFailed after EIO retries, ENOSPC, ...) when the disk refuses; nothing partial is left
        behind."""
        source_path = Path(os.path.abspath(source_path))
        self.ensure_root()
        backup_id = new_backup_id(source_path)
        created_at = datetime.now(UTC)
        data_path = self.data_path(backup_id)
        manifest_path = self.manifest_path(backup_id)
        data_temp = self.root / f".{backup_id}{DATA_SUFFIX}.{os.getpid()}.tmp"
        manifest_temp = self.root / f".{backup_id}{MANIFEST_SUFFIX}.{os.getpid()}.tmp"
        placed: list[Path] = []
        try:
            source_sha256 = self._write_compressed(source_path, fd, size, data_temp)
            if expected_sha256 is not None and source_sha256 != expected_sha256:
                raise SourceChanged(
                    f"{source_path}: its first {size} bytes changed since it was scanned "
                    f"(sha256 {source_sha256[:12]}…, expected {expected_sha256[:12]}…); scan it again"
                )
            self._verify_data(data_temp, source_sha256, size)
            for existing in (data_path, manifest_path):
                if os.path.lexists(existing):
                    raise BackupError(
                        f"{existing}: a backup with this id already exists; run again"
                    )
            self.fs.replace(data_temp, data_path)
            placed.append(data_path)
            fsync_folder(self.fs, self.root)
            manifest = {
                "format": MANIFEST_FORMAT,
                "backup_id": backup_id,
                "source_path": os.fsdecode(source_path),
                "session_id": session_id_for(source_path),
                "sha256": source_sha256,
                "size": size,
                "compression": "gzip",
                "data_file": data_path.name,
                "created_at": created_at.isoformat(),
                "riffd_version": __version__,
                "reason": reason,
                "findings": [finding.to_json() for finding in findings],
            }
            self._write_manifest(manifest_temp, manifest_path, manifest)
            placed.append(manifest_path)
            fsync_folder(self.fs, self.root)
        except BaseException:
            # Whatever went wrong (ENOSPC, EIO, a mismatch, even KeyboardInterrupt): leave no
            # partial backup.
            for leftover in (data_temp, manifest_temp, *reversed(placed)):
                remove_leftover(self.fs, leftover)
            raise
        return self._record_from_manifest(manifest, data_path, manifest_path)

    def _write_compressed(self, source_path: Path, fd: int, size: int, data_temp: Path) -> str:
        source_hash = hashlib.sha256()
        # wbits=31: gzip framing, so `gunzip` can read a backup without riffd.
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        out_fd = self.fs.open(data_temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, FILE_MODE)
        try:
            copied = 0
            for chunk in iter_fd(fd, what=str(source_path), fs=self.fs, end=size):
                source_hash.update(chunk)
                write_all(self.fs, out_fd, compressor.compress(chunk))
                copied += len(chunk)
            if copied < size:
                raise SourceChanged(
                    f"{source_path}: it is now shorter ({copied} bytes) than when it was scanned "
                    f"({size} bytes); scan it again"
                )
            write_all(self.fs, out_fd, compressor.flush())
            self.fs.fsync(out_fd)
        finally:
            self.fs.close(out_fd)
        return source_hash.hexdigest()

    def _iter_decompressed(self, data_path: Path) -> Iterator[bytes]:
        decompressor = zlib.decompressobj(31)
        in_fd = self.fs.open(data_path, os.O_RDONLY | NOFOLLOW)
        try:
            for chunk in iter_fd(in_fd, what=f"backup {data_path}", fs=self.fs):
                try:
                    plain = decompressor.decompress(chunk)
                except zlib.error as exc:
                    raise BackupCorrupt(f"{data_path}: not a valid gzip stream ({exc})") from exc
                if plain:
                    yield plain
            if not decompressor.eof or decompressor.unused_data:
                raise BackupCorrupt(
                    f"{data_path}: the gzip stream is truncated or has trailing bytes"
                )
            rest = decompressor.flush()
            if rest:
                yield rest
        finally:
            self.fs.close(in_fd)

    def _verify_data(self, data_path: Path, sha256: str, size: int) -> None:
        check = hashlib.sha256()
        length = 0
        for plain in self._iter_decompressed(data_path):
            check.update(plain)
            length += len(plain)
        if check.hexdigest() != sha256 or length != size:
            raise BackupCorrupt(
                f"{data_path}: the backup just written reads back as {length} bytes with sha256 "
                f"{check.hexdigest()[:12]}…, not the {size} source bytes ({sha256[:12]}…); "
                "the disk holding the backups may be failing"
            )

    def _write_manifest(
        self, manifest_temp: Path, manifest_path: Path, manifest: dict[str, Any]
    ) -> None:
        # stdlib json (ensure_ascii) keeps undecodable path bytes as \udcxx escapes that load back
        # the same.
        payload = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("ascii")
        out_fd = self.fs.open(
            manifest_temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, FILE_MODE
        )
        try:
            write_all(self.fs, out_fd, payload)
            self.fs.fsync(out_fd)
        finally:
            self.fs.close(out_fd)
        self.fs.replace(manifest_temp, manifest_path)

    # -- read --------------------------------------------------------------------------------------

    def _record_from_manifest(
        self, manifest: dict[str, Any], data_path: Path, manifest_path: Path
    ) -> BackupRecord:
        try:
            return BackupRecord(
                backup_id=str(manifest["backup_id"]),
                source_path=str(manifest["source_path"]),
                session_id=str(manifest.get("session_id", "")),
                sha256=str(manifest["sha256"]),
                size=int(manifest["size"]),
                created_at=datetime.fromisoformat(str(manifest["created_at"])),
                riffd_version=str(manifest.get("riffd_version", "")),
                reason=str(manifest.get("reason", "")),
                findings=tuple(manifest.get("findings", ())),
                data_path=data_path,
                manifest_path=manifest_path,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BackupCorrupt(
                f"{manifest_path}: the manifest is missing or has a bad field ({exc})"
            ) from exc

    def _load(self, backup_id: str) -> BackupRecord:
        manifest_path = self.manifest_path(backup_id)
        try:
            fd = self.fs.open(manifest_path, os.O_RDONLY | NOFOLLOW)
        except FileNotFoundError as exc:
            raise UnknownBackup(f"no backup {backup_id} in {self.root}") from exc
        try:
            parts = list(iter_fd(fd, what=f"manifest {manifest_path}", fs=self.fs))
        finally:
            self.fs.close(fd)
        try:
            manifest = json.loads(b"".join(parts))
        except (ValueError, UnicodeDecodeError) as exc:
            raise BackupCorrupt(f"{manifest_path}: the manifest is not valid JSON ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("backup_id") != backup_id:
            raise BackupCorrupt(
                f"{manifest_path}: the manifest does not describe backup {backup_id}"
            )
        return self._record_from_manifest(manifest, self.data_path(backup_id), manifest_path)

    def list(self) -> list[BackupRecord]:
        """Return every backup with a readable manifest, oldest first; broken ones are logged and
        left out."""
        try:
            names = self.fs.listdir(self.root)
        except FileNotFoundError:
            return []
        records: builtins.list[BackupRecord] = []
        for name in sorted(names):
            if not name.endswith(MANIFEST_SUFFIX):
                continue
            backup_id = name[: -len(MANIFEST_SUFFIX)]
            if not is_backup_id(backup_id):
                continue
            try:
                records.append(self._load(backup_id))
            except (BackupError, OSError) as exc:
                log.warning("skipping backup %s: %s", backup_id, exc)
        return records

    def get(self, backup_id: str) -> BackupRecord:
        """Given a backup id, return its record; raise UnknownBackup when there is none,
        BackupCorrupt when its manifest cannot be read."""
        if not is_backup_id(backup_id):
            raise UnknownBackup(
                f"{backup_id!r} is not a backup id (they look like 20261122T101500.123456Z-…; "
                f"`{backups_command(self.root, 'list')}` lists them)"
            )
        return self._load(backup_id)

    def iter_bytes(self, backup_id: str) -> Iterator[bytes]:
        """Given a backup id, yield its original bytes in chunks; raise BackupCorrupt after the last
        chunk when they do not match the manifest's sha256 and size (consume it all before trusting
        it)."""
        record = self.get(backup_id)
        check = hashlib.sha256()
        length = 0
        for plain in self._iter_decompressed(record.data_path):
            check.update(plain)
            length += len(plain)
            yield plain
        if check.hexdigest() != record.sha256 or length != record.size:
            raise BackupCorrupt(
                f"{record.data_path}: decompresses to {length} bytes with sha256 {check.hexdigest()[:12]}…, "
                f"but the manifest says {record.size} bytes with {record.sha256[:12]}…"
            )

    def open_bytes(self, backup_id: str) -> bytes:
        """Given a backup id, return its original bytes, verified; raise BackupCorrupt when they
        differ."""
        return b"".join(self.iter_bytes(backup_id))

    def verify(self, backup_id: str) -> BackupRecord:
        """Given a backup id, decompress it fully and return its record; raise BackupCorrupt if
        damaged."""
        record = self.get(backup_id)
        self._verify_data(record.data_path, record.sha256, record.size)
        return record

    # -- prune -------------------------------------------------------------------------------------

    def prune(
        self,
        keep_per_file: int = 10,
        max_age_days: float = 90,
        max_total_bytes: int | None = None,
        *,
        now: datetime | None = None,
    ) -> builtins.list[BackupRecord]:
        """Remove backups beyond `keep_per_file` per source file, older than `max_age_days`, then
        the oldest until the store is under `max_total_bytes`, and return what was removed; the
        newest backup of every file is always kept. Raise ValueError when keep_per_file < 1."""
        if keep_per_file < 1:
            raise ValueError(
                "keep_per_file must be at least 1: the newest backup of a file is never removed"
            )
        moment = now or datetime.now(UTC)
        records = self.list()
        by_source: dict[str, list[BackupRecord]] = {}
        for record in records:
            by_source.setdefault(record.source_path, []).append(record)
        newest_ids = {
            max(group, key=lambda r: r.backup_id).backup_id for group in by_source.values()
        }
        doomed: dict[str, BackupRecord] = {}
        for group in by_source.values():
            for position, record in enumerate(
                sorted(group, key=lambda r: r.backup_id, reverse=True)
            ):
                if record.backup_id in newest_ids:
                    continue
                age_days = (moment - record.created_at).total_seconds() / 86400
                if position >= keep_per_file or age_days > max_age_days:
                    doomed[record.backup_id] = record
        if max_total_bytes is not None:
            survivors = [r for r in records if r.backup_id not in doomed]
            total = sum(r.stored_bytes for r in survivors)
            for record in sorted(survivors, key=lambda r: r.backup_id):
                if total <= max_total_bytes:
                    break
                if record.backup_id in newest_ids:
                    continue
                doomed[record.backup_id] = record
                total -= record.stored_bytes
        removed: builtins.list[BackupRecord] = []
        for record in sorted(doomed.values(), key=lambda r: r.backup_id):
            # Manifest first: a crash in between leaves data without a manifest, which is never
            # listed.
            self.fs.unlink(record.manifest_path)
            remove_leftover(self.fs, record.data_path)
            removed.append(record)
        self.remove_leftovers(time.time())
        return removed

    def remove_leftovers(
        self, now: float, older_than_seconds: float = STALE_AFTER_SECONDS
    ) -> builtins.list[Path]:
        """Remove what a killed riffd left in the store and return the paths removed: temp files
        whose process is gone (at any age; a running process's are never touched), and temp files
        without a pid and data files without a manifest once older than `older_than_seconds`."""
        try:
            names = self.fs.listdir(self.root)
        except FileNotFoundError:
            return []
        name_set = set(names)
        removed: builtins.list[Path] = []
        for name in names:
            temp = _STORE_TEMP.match(name)
            is_orphan = (
                name.endswith(DATA_SUFFIX)
                and is_backup_id(name[: -len(DATA_SUFFIX)])
                and f"{name[: -len(DATA_SUFFIX)]}{MANIFEST_SUFFIX}" not in name_set
            )
            if not (temp or is_orphan):
                continue
            leftover = self.root / name
            try:
                status = self.fs.stat(leftover)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(status.st_mode):
                continue
            pid = temp.group("pid") if temp else None
            if pid is not None:
                if int(pid) == os.getpid() or pid_is_alive(int(pid)):
                    continue
            elif now - status.st_mtime < older_than_seconds:
                continue
            remove_leftover(self.fs, leftover)
            removed.append(leftover)
        return removed
