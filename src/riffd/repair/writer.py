"""The one module that rewrites transcripts: apply a repair plan (riffd.repair.restore puts a backup
back through it).

The sequence, and why each step is there (shared/transcript-format.md, sections 4 and 4b):
Claude Code appends by path with O_APPEND and takes no lock, and its in-memory state assumes the
file is append-only, so riffd only rewrites idle sessions, refuses symlinks and hard links,
keeps the original open for the whole run, backs up exactly the scanned bytes (verified), writes
the new file beside the original under a name Claude Code ignores, re-checks inode, size and
sampled bytes just before the rename, carries complete lines appended meanwhile into the new
file, and after the rename copies whatever still landed in the old inode. Every failure before
the rename leaves the original untouched and removes the temp file.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from riffd.claude_code.liveness import session_liveness
from riffd.fsio import (
    NOFOLLOW,
    OffsetWriter,
    fsync_file,
    fsync_folder,
    remove_leftover,
)
from riffd.paths import default_backup_dir, is_inside
from riffd.repair.backup import BackupError, BackupRecord, BackupStore, SourceChanged
from riffd.repair.copy import (
    copy_mode_and_owner,
    create_temp,
    read_range,
    settle_appends,
    write_new_content,
)
from riffd.repair.failures import checked_failure, look_at
from riffd.repair.finish import hand_over
from riffd.repair.journal import Journal, SwapRecord, journal_path_for
from riffd.repair.lines import LineConflict
from riffd.repair.locks import TranscriptLock, remove_stale_temps, try_flock
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FailReason,
    FileChanged,
    FileGone,
    RepairOutcome,
    Skipped,
    SkipReason,
    failure,
    gone,
)
from riffd.repair.plan import Edit, RemoveLine, RepairPlan
from riffd.repair.recovery import recover_folder, unfinished_swap
from riffd.repair.swap import (
    COPY,
    SwapBackFailed,
    put_in_place,
)
from riffd.transcript.findings import Finding
from riffd.transcript.scan import FileIdentity

log = logging.getLogger(__name__)


def _project_folder(path: Path) -> Path:
    # <project>/<session>/subagents/agent-*.jsonl belongs to <project>.
    if path.parent.name == "subagents":
        return path.parent.parent.parent
    return path.parent


def _unsafe_backup_dir(path: Path, options: ApplyOptions) -> str | None:
    forbidden = [*options.roots, options.claude_dir / "projects", _project_folder(path)]
    for folder in forbidden:
        if is_inside(options.backup_dir, folder):
            return (
                f"{path}: not changed, because the backup folder {options.backup_dir} is inside {folder}, "
                "where Claude Code lists and deletes files; choose a backup folder outside Claude Code's "
                f"projects (the default is {default_backup_dir()})"
            )
    return None


def rewrite(
    path: Path,
    source: FileIdentity,
    segments: Iterable[tuple[int, int] | bytes],
    findings: Sequence[Finding],
    options: ApplyOptions,
    *,
    edits: tuple[Edit, ...],
    backup_reason: str,
) -> RepairOutcome:
    """Replace `path` (as scanned: `source`) with the bytes `segments` describe, after a verified
    backup, under the transcript's lock, only while its session is idle; return Repaired, Skipped or
    Failed (never raise OSError)."""
    fs = options.files
    unsafe = _unsafe_backup_dir(path, options)
    if unsafe is not None:
        return Failed(path, FailReason.UNSAFE_BACKUP_DIR, unsafe)
    try:
        status = fs.stat(path)
    except FileNotFoundError:
        return gone(path)
    except OSError as exc:
        return failure(path, exc, "reading its status")
    if stat.S_ISLNK(status.st_mode):
        return Skipped(
            path,
            SkipReason.SYMLINK,
            f"{path}: it is a symlink; repair the file it points to instead",
        )
    if not stat.S_ISREG(status.st_mode):
        return Skipped(path, SkipReason.CHANGED, f"{path}: it is not a regular file")
    if status.st_nlink > 1:
        return Skipped(
            path,
            SkipReason.HARD_LINKED,
            f"{path}: it has {status.st_nlink} hard links; replacing it would split them",
        )
    store = BackupStore(options.backup_dir, fs=fs)
    try:
        store.ensure_root()
    except OSError as exc:
        return failure(path, exc, f"preparing the backup folder {options.backup_dir}")
    try:
        original_fd = fs.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return gone(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Skipped(path, SkipReason.SYMLINK, f"{path}: it became a symlink")
        return failure(path, exc, "opening it")
    try:
        lock = TranscriptLock(fs, options.backup_dir, path, original_fd)
        try:
            acquired = lock.try_acquire()
        except OSError as exc:
            return failure(path, exc, "locking it against other riffd runs")
        if not acquired:
            return Skipped(path, SkipReason.BUSY, f"{path}: another riffd run is working on it")
        try:
            recover_folder(fs, path.parent, holding=path)  # swaps a killed run left here
            remove_stale_temps(path.parent, options.stale_temp_seconds, fs=fs)
            if unfinished_swap(fs, path):
                return Skipped(
                    path,
                    SkipReason.BUSY,
                    f"{path}: riffd is still carrying lines a writer put into the "
                    "old file of its last repair; it tries again once that writer lets go of it",
                )
            live, why = session_liveness(
                path,
                options.claude_dirs(path),
                options.quiet_period,
                session_id=options.session_id,
                fs=fs,
            )
            if live:
                return Skipped(path, SkipReason.LIVE, f"{path}: the session may be in use: {why}")
            return _rewrite_locked(
                path, original_fd, source, segments, findings, options, store, edits, backup_reason
            )
        finally:
            lock.release()
    finally:
        fs.close(original_fd)


def _rewrite_locked(
    path: Path,
    original_fd: int,
    source: FileIdentity,
    segments: Iterable[tuple[int, int] | bytes],
    findings: Sequence[Finding],
    options: ApplyOptions,
    store: BackupStore,
    edits: tuple[Edit, ...],
    backup_reason: str,
) -> RepairOutcome:
    fs = options.files
    stage = "reading its status"
    temp_fd: int | None = None
    temp_path: Path | None = None
    record: BackupRecord | None = None
    journal: Journal | None = None
    replaced = keep_temp = False
    try:
        held = fs.fstat(original_fd)
    except OSError as exc:
        return failure(path, exc, stage)
    try:
        if not stat.S_ISREG(held.st_mode) or (held.st_dev, held.st_ino) != (source.dev, source.ino):
            return Skipped(
                path,
                SkipReason.CHANGED,
                f"{path}: it was replaced by another file since the scan; scan it again",
            )
        if held.st_nlink > 1:
            return Skipped(
                path, SkipReason.HARD_LINKED, f"{path}: it has {held.st_nlink} hard links"
            )
        if held.st_size < source.size:
            return Skipped(
                path,
                SkipReason.CHANGED,
                f"{path}: it is shorter ({held.st_size} bytes) than when scanned ({source.size}); scan again",
            )

        stage = f"backing it up to {options.backup_dir}"
        try:
            record = store.create(
                path, original_fd, source.size, source.sha256, findings, reason=backup_reason
            )
        except SourceChanged as exc:
            return Skipped(path, SkipReason.CHANGED, str(exc))

        stage = "writing the repaired copy beside it"
        # Readable too, to carry back what writers added if the copy has to give the name back.
        temp_path, temp_fd = create_temp(fs, path)
        # a second riffd run that opens the transcript's name after the swap finds it busy
        try_flock(fs, temp_fd)
        appender = OffsetWriter(fs, temp_fd)
        copied = write_new_content(fs, path, original_fd, appender, segments, source.size)
        if copied.sha256 != source.sha256:
            raise FileChanged("its bytes changed between the backup and the rewrite")
        copy_mode_and_owner(fs, temp_fd, held)
        fsync_file(fs, temp_fd, temp_path)

        stage = "checking for changes just before replacing it"
        carried_end = settle_appends(fs, path, original_fd, appender, source.size, copied, options)
        fsync_file(fs, temp_fd, temp_path)

        stage = "checking once more that its session is idle"
        live, why = session_liveness(
            path,
            options.claude_dirs(path),
            options.quiet_period,
            session_id=options.session_id,
            fs=fs,
        )
        if live:
            return Skipped(
                path,
                SkipReason.LIVE,
                f"{path}: the session may be in use: {why} (seen just before the "
                "swap); nothing was changed",
            )

        stage = "recording the swap beside it"
        copy_status = fs.fstat(temp_fd)
        # An unfinished last line the plan cut off: a writer that continues it after all gets it
        # back whole.
        cut_at = (
            None
            if copied.ends_with_newline
            else next(
                (
                    edit.span.offset
                    for edit in edits
                    if isinstance(edit, RemoveLine) and edit.span.end == source.size
                ),
                None,
            )
        )
        settled = hashlib.sha256(
            b"".join(
                chunk
                for _, chunk in read_range(fs, original_fd, source.size, carried_end, path=path)
            )
        )
        journal = Journal.create(
            fs,
            journal_path_for(temp_path),
            SwapRecord(
                transcript=path.name,
                copy_name=temp_path.name,
                old_name=temp_path.name,
                old_id=(held.st_dev, held.st_ino),
                copy_id=(copy_status.st_dev, copy_status.st_ino),
                source_size=source.size,
                source_sha256=source.sha256,
                settled_end=carried_end,
                settled_sha256=settled.hexdigest(),
                copy_size=copy_status.st_size,
                cut_at=cut_at,
                removed=tuple(sorted(copied.removed)),
                inserted=tuple(sorted(copied.inserted)),
                session_id=options.session_id,
                claude_dirs=tuple(map(os.path.abspath, options.claude_dirs(path))),
                backup_dir=os.path.abspath(options.backup_dir),
                backup_id=record.backup_id,
                pid=os.getpid(),
            ),
        )

        stage = "replacing it with the repaired copy"
        failed_swap: OSError | None = None
        try:
            put_in_place(fs, path, temp_path, held, temp_fd, copy_status.st_size, journal)
        except SwapBackFailed as exc:
            keep_temp = True  # another program's version is at riffd's name: the journal keeps it from any sweep
            journal.close()
            journal = None
            return Failed(
                path, FailReason.SWAP_BACK_FAILED, f"{path}: not repaired: {exc.strerror}"
            )
        except (FileGone, FileChanged):
            raise
        except OSError as exc:
            try:
                where = look_at(fs, path, held, temp_fd)
            except OSError as look:  # what happened is unknown: the journal and riffd's names stay for the next run
                keep_temp = True
                journal.close()
                journal = None
                return Failed(
                    path,
                    FailReason.IO_ERROR,
                    f"{path}: I/O error while {stage}: {exc.strerror or exc}, "
                    f"and riffd could not look at what its name holds now ({look.strerror or look}); "
                    f"riffd's journal beside it lets the next run finish or undo the swap; the verified "
                    f"backup {record.backup_id} holds the transcript as it was",
                )
            if where != COPY:
                raise  # the swap did not happen (or the filesystem lost the original): judged below
            failed_swap = exc  # the copy holds the name: the hand-over takes it from here
        replaced = True  # from here on the journal, not this function, decides what becomes of riffd's files
        warnings: list[str] = []
        try:
            fsync_folder(fs, path.parent)
        # the new name stands; only how soon it reaches the disk is uncertain
        except OSError as exc:
            warnings.append(
                f"{path}: repaired, but flushing its folder failed ({exc}); the repair stands"
            )

        stage = "copying lines appended during the replace"
        settling, journal = journal, None
        return hand_over(
            fs,
            settling,
            original_fd,
            source.size,
            store,
            record,
            edits,
            warnings,
            options,
            failed_swap,
        )
    except FileGone:
        return gone(path)
    except FileChanged as exc:
        return Skipped(
            path, SkipReason.CHANGED, f"{path}: {exc}; nothing was changed, scan it again"
        )
    except BackupError as exc:
        return Failed(path, FailReason.BACKUP_FAILED, f"{exc}; {path} is untouched")
    except ValueError as exc:
        return Failed(
            path,
            FailReason.INVALID_PLAN,
            f"{path}: the repair plan is invalid ({exc}); it is untouched",
        )
    except OSError as exc:
        if record is None or replaced:
            return failure(path, exc, stage, replaced=replaced)
        return checked_failure(fs, path, held, original_fd, temp_fd, store, record, exc, stage)
    except LineConflict as exc:
        return Skipped(
            path, SkipReason.LIVE, f"{path}: the session is in use: {exc}; nothing was changed"
        )
    finally:
        if temp_fd is not None:
            fs.close(temp_fd)
        if temp_path is not None and not replaced and not keep_temp:
            remove_leftover(fs, temp_path)
        if journal is not None and not replaced:
            journal.remove()


def apply_plan(plan: RepairPlan, options: ApplyOptions) -> RepairOutcome:
    """Given a repair plan and options, rewrite the planned file safely and return Repaired, Skipped
    (live, changed, symlink, hard_linked, busy, nothing_to_do) or Failed with a message naming the
    file; expected failures (ENOSPC, EIO after retries, permissions) are returned, never raised."""
    path = Path(plan.source.path)
    if plan.is_empty:
        return Skipped(path, SkipReason.NOTHING_TO_DO, f"{path}: the plan changes nothing")
    try:
        segments = list(plan.segments())
    except ValueError as exc:
        return Failed(
            path,
            FailReason.INVALID_PLAN,
            f"{path}: the repair plan is invalid ({exc}); it is untouched",
        )
    return rewrite(
        path, plan.source, segments, plan.fixes, options, edits=plan.edits, backup_reason="repair"
    )
