"""The daemon's jobs that need only the parts they are given: backup retention, catching the archive
up, the archive's figures for the report, and the summary after the start-up pass.
riffd.daemon.runner schedules them."""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.archive.ingest import ingest_file
from riffd.archive.store import Archive
from riffd.claude_code.session_files import config_folders
from riffd.claude_code.settings import CLEANUP_DEFAULT_DAYS, cleanup_period_days
from riffd.config import Config
from riffd.daemon.archive_batch import ARCHIVE_ERRORS, ArchiveBatches
from riffd.daemon.watcher import TranscriptFilter
from riffd.daemon.worker import Outcome, WorkerSettings
from riffd.fsio import REAL_FS, RetryingFS
from riffd.repair.backup import STALE_AFTER_SECONDS, BackupStore
from riffd.repair.recovery import recover_and_sweep
from riffd.state.store import StateStore
from riffd.transcript.findings import INFORMATIONAL, FindingClass

log = logging.getLogger(__name__)

INFORMATIONAL_NAMES = frozenset(map(str, INFORMATIONAL))


def worker_settings(config: Config) -> WorkerSettings:
    """Given the configuration, return what the worker needs."""
    return WorkerSettings(
        repair=config.repair.mode == "repair",
        quiet_period=config.repair.quiet_period,
        add_missing_results=config.repair.add_missing_results,
        classes=frozenset(FindingClass(name) for name in config.repair.classes),
        backup_dir=config.backups.dir,
        claude_dir=config.claude_dir,
        roots=config.roots,
        retry=config.retry.policy,
        archive_delay=config.archive.write_delay,
    )


@functools.lru_cache(maxsize=4)  # (asked for each file processed: a config is frozen)
def transcript_filter(config: Config) -> TranscriptFilter:
    """Given the configuration, return the filter of watched files."""
    return TranscriptFilter(
        config.roots,
        config.include,
        config.exclude,
        tuple(config_folders(config.roots, config.claude_dir)),
    )


def clean_leftovers(config: Config) -> None:
    """At the daemon's start: finish or undo the swaps killed riffd runs left under the roots, and
    remove the temp files of riffd processes that are gone (beside transcripts and in the backup
    folder)."""
    removed = recover_and_sweep(
        config.roots, STALE_AFTER_SECONDS, fs=RetryingFS(REAL_FS, config.retry.policy)
    ) + BackupStore(config.backups.dir).remove_leftovers(time.time())
    if removed:
        log.info("removed %d temp file(s) left by riffd processes that are gone", len(removed))


def backup_retention(config: Config) -> None:
    """Remove backups beyond the configured retention (the newest of each file is always kept)."""
    backups = config.backups
    if backups.dir.is_dir():
        removed = BackupStore(backups.dir).prune(
            keep_per_file=backups.keep_per_file,
            max_age_days=backups.max_age_days,
            max_total_bytes=int(backups.max_total_mb * 1e6) if backups.max_total_mb else None,
        )
        if removed:
            log.info("backup retention removed %d backup(s)", len(removed))


def catch_up_archive(
    archive: Archive,
    store: StateStore,
    failed: Callable[[BaseException], object] | None = None,
    batches: ArchiveBatches | None = None,
    quiet_period: float | None = None,
) -> None:
    """Archive what the worker read but could not archive (a full disk, a locked database), from the
    archive's own watermark, so every line is archived once; a file that fails now is tried again at
    the next rescan (and its error is told to `failed`: riffd.daemon.disk_full.DiskWatch.ran_out).
    A file that ends in an unfinished line, quiet for `quiet_period`, is archived to its end, that
    line included, as the worker archives it. The lines of a file waiting in the worker's `batches`
    are written before the file is read: one rewritten since the worker read them may no longer
    hold them."""
    now = time.time()
    for path, (offset, size, mtime_ns) in store.sizes().items():
        quiet = quiet_period is not None and mtime_ns / 1e9 + quiet_period < now
        end = size if quiet and size > offset else offset
        with batches.written_first(path) if batches is not None else nullcontext():
            try:
                # Behind, or ahead (a rewrite that shrank the file, which the archive did not
                # take); ingest_file reads the bytes archived again to check them
                if archive.cursor(path)[1] != end and Path(path).is_file():
                    added = ingest_file(archive, Path(path))
                    log.info("%s: archived %d line(s) the archive had missed", path, added)
            except ARCHIVE_ERRORS as exc:
                log.warning(
                    "%s: could not catch the archive up: %s; the next rescan tries again", path, exc
                )
                if failed is not None:
                    failed(exc)
                if isinstance(exc, sqlite3.Error):
                    archive.reopen_if_damaged(exc)


# warn this long before Claude Code's cleanup deletes a transcript not archived
CLEANUP_WARNING_DAYS = 7.0


def settle_archive(archive: Archive, keep_going: Callable[[], bool]) -> None:
    """The archive after lines stopped coming: the packs filled meanwhile, then the files kept whole
    meanwhile, compressed at the settled level (while `keep_going()`), then the open pack (the
    search index is left to FTS5's own merging: optimising it would rewrite it whole)."""
    done, left = archive.compact(keep_going)
    if done:
        log.info("archive: %d pack(s) compressed at the settled level, %d left", done, left)
    whole = archive.whole.compact(keep_going)
    if whole.blobs or whole.frames:
        log.info(
            "archive: the files kept whole compressed at the settled level: %d blob(s) settled "
            "(%d frame(s) %.1f kB smaller), %d left",
            whole.blobs,
            whole.frames,
            whole.saved / 1e3,
            whole.left,
        )
    if archive.settle(optimize=False):
        log.info("archive settled")


def archive_summary(
    archive: Archive, store: StateStore, claude_dir: Path | None = None
) -> dict[str, Any]:
    """The archive's figures for the health report (an error, never an exception: a report is
    written whatever the archive does), with the transcripts not (fully) archived that Claude Code's
    cleanup deletes within CLEANUP_WARNING_DAYS (`cleanup_at_risk`, `cleanup_days`)."""
    try:
        figures = archive.stats()
        # every version of the files kept whole (saved outputs, checkpoints): their bytes are in
        # stored_bytes too, so the ratio counts them on both sides
        whole = sum(kind["bytes"] for kind in archive.versions.stats()["kinds"].values())
        seen = figures["raw_bytes"] + whole
        offsets = store.offsets()
        files, lag = archive.behind(offsets)
        days = cleanup_period_days(claude_dir) if claude_dir is not None else CLEANUP_DEFAULT_DAYS
        horizon = time.time() - (days - CLEANUP_WARNING_DAYS) * 86400
        at_risk = sorted(
            path
            for path, (_dev, _ino, _size, mtime_ns) in store.known_files().items()
            if mtime_ns / 1e9 < horizon and archive.cursor(path)[1] < offsets.get(path, 0)
        )
    except (sqlite3.Error, OSError) as exc:
        archive.reopen_if_damaged(exc)
        return {"error": str(exc)}
    return {
        "stored_bytes": figures["stored_bytes"],
        "raw_bytes": figures["raw_bytes"],
        "whole_bytes": whole,
        "ratio": round(figures["stored_bytes"] / seen, 4) if seen else None,
        "sessions": figures["sessions"],
        "files_behind": files,
        "bytes_behind": lag,
        "cleanup_days": days,
        "cleanup_at_risk": at_risk[:50],
        "cleanup_at_risk_count": len(at_risk),
    }


def new_or_changed(transcripts: int, others: int) -> str:
    """'N transcript(s) and M other session file(s)': what a pass over the roots queued."""
    return f"{transcripts} transcript(s) and {others} other session file(s)"


def started_line(config: Config, transcripts: int, others: int) -> str:
    """The daemon's first line: its version, pid and mode, what it has to read, its config."""
    mode = (
        f"repair mode: idle sessions are repaired after a verified backup (quiet period "
        f"{config.repair.quiet_period:g} s)"
        if config.repair.mode == "repair"
        else "report-only mode: nothing is rewritten"
    )
    return (
        f"riffd {__version__} started (pid {os.getpid()}) in {mode}; "
        f"{new_or_changed(transcripts, others)} to look at (new, changed or gone since riffd last "
        "read them); "
        f"config {config.source or 'defaults (no file)'}"
    )


def log_startup_summary(store: StateStore, config: Config, errors: int = 0) -> None:
    """One line once the files found at start are looked at: files, damage by class, repairs waiting
    and why, and how many errors the pass met (`riffd status` lists them)."""
    watched, with_findings, by_class = store.finding_summary(INFORMATIONAL_NAMES)
    damage = {name: count for name, count in by_class.items() if name not in INFORMATIONAL_NAMES}
    waiting = store.files_needing_repair()
    why = (
        ""
        if not waiting
        else " (sessions still live or within the quiet period; repaired once idle)"
        if config.repair.mode == "repair"
        else " (report-only mode: nothing is repaired)"
    )
    failed = (
        f"; {errors} error(s) on the way (`riffd status` lists them; a file that failed is looked at again at "
        "its next change or rescan)"
        if errors
        else ""
    )
    (log.warning if errors else log.info)(
        "start-up pass done: %d transcript(s) watched, %d with findings (%s); %d repair(s) waiting%s%s",
        watched,
        with_findings,
        ", ".join(f"{name} {count}" for name, count in sorted(damage.items()))
        or ("no damage" if not errors else "no damage in the files looked at"),
        len(waiting),
        why,
        failed,
        extra={
            "watched": watched,
            "with_findings": with_findings,
            "findings_by_class": damage,
            "repairs_waiting": len(waiting),
            "errors": errors,
        },
    )


def log_outcome(outcome: Outcome) -> None:
    """Log what processing one file did: damage and repairs at INFO, an append with nothing wrong at
    DEBUG."""
    damage = {
        name: count for name, count in outcome.classes.items() if name not in INFORMATIONAL_NAMES
    }
    # An append with nothing wrong is what Claude Code does all day: DEBUG. Damage and repairs:
    # INFO.
    quiet = outcome.kind == "appended" and not damage and not outcome.repair
    found = ", ".join(f"{name} {count}" for name, count in sorted(outcome.classes.items()))
    log.log(
        logging.DEBUG if quiet else logging.INFO,
        "%s: %s, %d line(s), %d byte(s), %d finding(s)%s%s in %.1f ms",
        outcome.path,
        outcome.kind,
        outcome.lines,
        outcome.bytes,
        outcome.findings,
        f" ({found})" if found else "",
        (f", repair {outcome.repair}" + (f": {outcome.why}" if outcome.why else ""))
        if outcome.repair
        else "",
        outcome.seconds * 1000,
        extra={
            "path": outcome.path,
            "outcome": outcome.kind,
            "lines": outcome.lines,
            "bytes": outcome.bytes,
            "findings": outcome.findings,
            "classes": outcome.classes,
            "repair": outcome.repair,
            "why": outcome.why or None,
            "ms": round(outcome.seconds * 1000, 2),
        },
    )


def store_snapshot(store: StateStore, snapshot: dict[str, Any]) -> None:
    """Store the daemon's live figures where `status` and `report` read them (the newest 200
    latencies)."""
    store.set_meta(
        "daemon",
        {key: value for key, value in snapshot.items() if key != "latencies"}
        | {"latencies": snapshot["latencies"][-200:]},
    )
