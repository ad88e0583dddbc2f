"""riffd's state store (SQLite under the state dir): watermarks, current findings, repairs,
counters.

Paths are stored as `riffd.display.path_key` writes them (a file name that is not UTF-8 included), and
read back as the paths they are; so is a repair's detail, which names its file.

A watermark says how far riffd has read a transcript and how to recognise that file again: its
device and inode, the offset just after the last complete line, the line count, sha256 of the head
(the first line, up to 4 KiB) and of the 4 KiB just before the offset, size and mtime. The worker
writes a file's watermark and its findings in one transaction, after the work they record is done,
so a crash at any point leaves either the old pair or the new pair, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from riffd.database import open_checked, reopen_if_damaged
from riffd.display import key_path, path_key
from riffd.state.database import HEAL_ADVICE, LOCK_TIMEOUT, connect, connect_read_only, dumps, loads
from riffd.state.records import HISTORY_DAYS, FileState, Watermark

log = logging.getLogger(__name__)


class StateStore:
    """The SQLite store; one connection shared by riffd's threads behind a lock (SQLite in WAL
    mode)."""

    def __init__(
        self,
        path: Path,
        *,
        heal: bool = False,
        read_only: bool = False,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        """Open (or create) the store at `path`. A damaged file is moved aside and a new store made
        when `heal` (the daemon: everything in it is derived again by a rescan); otherwise it raises
        DatabaseDamaged. `read_only` opens an existing store without changing it (`riffd
        status`)."""
        self.path = path
        self._lock = threading.RLock()
        opener = connect_read_only if read_only else connect
        self._db, self.moved_aside, self.damage = open_checked(
            path,
            lambda target, create: opener(target, create, lock_timeout),
            heal=heal and not read_only,
            advice=HEAL_ADVICE,
            create=not read_only,
        )

    def reopen_if_damaged(self, error: BaseException) -> bool:
        """After a database error, check the file; when it is damaged, move it aside and continue
        with a new, empty store (the caller rescans, which fills it again). Return True when that
        happened."""
        with self._lock:
            reopened = reopen_if_damaged(self.path, self._db, error, connect)
            if reopened is None:
                return False
            self._db, self.moved_aside, self.damage = reopened
        return True

    def close(self) -> None:
        """Close the connection (after a checkpoint, so the WAL does not linger)."""
        with self._lock:
            # read-only, or the daemon holds it: its business
            with contextlib.suppress(sqlite3.OperationalError):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run a block in one IMMEDIATE transaction: all of it is stored, or none of it."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Run a block of reads in one read transaction: each sees the store as it was at one
        moment, whatever riffd's other threads or processes commit meanwhile (a report never counts
        a repair beside the findings it removed)."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield
            finally:
                self._db.execute("COMMIT")

    # --- files ------------------------------------------------------------------------------------

    def file(self, path: str) -> FileState | None:
        """Return the stored state of `path`, or None when riffd has not processed it."""
        with self._lock:
            row = self._db.execute(
                "SELECT path, dev, ino, offset, lines, head_len, head_sha, tail_len, tail_sha, size, mtime_ns, "
                "session_id, findings, repairable, processed_at FROM files WHERE path = ?",
                (path_key(path),),
            ).fetchone()
        if row is None:
            return None
        return FileState(
            Watermark(key_path(row[0]), *row[1:11]), row[11], row[12], row[13], row[14]
        )

    def save_file(
        self,
        watermark: Watermark,
        session_id: str | None,
        findings: list[dict[str, Any]] | None,
        repairable: int,
        counters: dict[str, int] | None = None,
        judged_at: float | None = None,
    ) -> bool:
        """Store a file's watermark and findings (and bump counters) in one transaction. Findings
        None: they are the ones stored, so only the rest is written; False (nothing written) when
        the file has no row. `processed_at` is `judged_at`, the time the findings were judged at
        (now when not given): what `unsettled_tails` compares with the quiet period."""
        processed_at = time.time() if judged_at is None else judged_at
        with self.transaction() as db:
            if findings is None:
                updated = db.execute(
                    "UPDATE files SET dev = ?, ino = ?, offset = ?, lines = ?, head_len = ?, head_sha = ?, "
                    "tail_len = ?, tail_sha = ?, size = ?, mtime_ns = ?, session_id = ?, repairable = ?, "
                    "processed_at = ? WHERE path = ?",
                    (
                        *_watermark_columns(watermark),
                        session_id,
                        repairable,
                        processed_at,
                        path_key(watermark.path),
                    ),
                )
                if updated.rowcount != 1:
                    return False
                self._bump(db, counters or {})
                return True
            db.execute(
                "INSERT OR REPLACE INTO files(path, dev, ino, offset, lines, head_len, head_sha, tail_len, tail_sha, "
                "size, mtime_ns, session_id, findings, repairable, processed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    path_key(watermark.path),
                    *_watermark_columns(watermark),
                    session_id,
                    dumps(findings),
                    repairable,
                    processed_at,
                ),
            )
            self._bump(db, counters or {})
        return True

    def forget_file(self, path: str) -> None:
        """Drop a file riffd no longer sees (deleted, or no longer under a root)."""
        with self.transaction() as db:
            db.execute("DELETE FROM files WHERE path = ?", (path_key(path),))

    def known_files(self) -> dict[str, tuple[int, int, int, int]]:
        """Return path -> (dev, ino, size, mtime_ns) for every file with a watermark."""
        with self._lock:
            rows = self._db.execute("SELECT path, dev, ino, size, mtime_ns FROM files").fetchall()
        return {key_path(row[0]): (row[1], row[2], row[3], row[4]) for row in rows}

    def offsets(self) -> dict[str, int]:
        """Return path -> bytes read so far (the watermark's offset) for every file with a
        watermark."""
        with self._lock:
            rows = self._db.execute("SELECT path, offset FROM files").fetchall()
        return {key_path(path): offset for path, offset in rows}

    def count_files(self) -> int:
        """Return how many files have a watermark."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0])

    def files_needing_repair(self) -> list[str]:
        """Return the files whose last processing found something riffd repairs."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path FROM files WHERE repairable > 0 ORDER BY path"
            ).fetchall()
        return [key_path(row[0]) for row in rows]

    def unsettled_tails(self, quiet_period: float, now: float) -> list[str]:
        """Return the files that end in an unfinished line (the watermark stops before the file's
        end), quiet for `quiet_period` at `now`, and last looked at before they were: that line is
        still to be judged and archived (riffd.daemon.worker). The worker's look again at the end of
        the quiet period lives in memory only: a restart, an event that came first or an archive
        error loses it, and no event or changed size brings such a file back."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path FROM files WHERE size > offset AND mtime_ns / 1e9 + ? < ? "
                "AND processed_at <= mtime_ns / 1e9 + ? ORDER BY path",
                (quiet_period, now, quiet_period),
            ).fetchall()
        return [key_path(row[0]) for row in rows]

    def sizes(self) -> dict[str, tuple[int, int, int]]:
        """Return path -> (bytes read, the file's size, its mtime in ns) when last looked at."""
        with self._lock:
            rows = self._db.execute("SELECT path, offset, size, mtime_ns FROM files").fetchall()
        return {key_path(path): (offset, size, mtime_ns) for path, offset, size, mtime_ns in rows}

    def all_findings(self) -> list[tuple[str, dict[str, Any], bool]]:
        """Return (path, finding, whether the file waits for a repair) for every stored finding, by
        path."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, findings, repairable FROM files WHERE findings != '[]' ORDER BY path"
            ).fetchall()
        return [
            (key_path(path), item, bool(repairable))
            for path, blob, repairable in rows
            for item in json.loads(blob)
        ]

    def repaired_since_read(self) -> set[str]:
        """Return the files repaired since riffd last read them: their stored findings are those of
        before the repair, until the file is read again (moments later)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT files.path FROM files JOIN (SELECT path, MAX(time) AS repaired FROM repairs "
                "WHERE outcome = 'repaired' GROUP BY path) AS last ON last.path = files.path "
                "WHERE last.repaired > files.processed_at"
            ).fetchall()
        return {key_path(row[0]) for row in rows}

    def finding_summary(
        self, informational: frozenset[str] = frozenset()
    ) -> tuple[int, int, Counter[str]]:
        """Return (files watched, files with findings other than `informational` classes, findings
        by class)."""
        by_class: Counter[str] = Counter()
        with_findings = 0
        with self._lock:
            watched = self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            rows = self._db.execute("SELECT findings FROM files WHERE findings != '[]'").fetchall()
        for (blob,) in rows:
            classes = [finding["class"] for finding in json.loads(blob)]
            by_class.update(classes)
            with_findings += any(name not in informational for name in classes)
        return watched, with_findings, by_class

    def findings_of_class(self, name: str, limit: int = 50) -> list[tuple[str, dict[str, Any]]]:
        """Return up to `limit` (path, finding) pairs of the open findings of class `name`, by
        path."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, findings FROM files WHERE findings LIKE ? ORDER BY path",
                (f'%"{name}"%',),
            ).fetchall()
        found = [
            (key_path(path), item)
            for path, blob in rows
            for item in json.loads(blob)
            if item.get("class") == name
        ]
        return found[:limit]

    # --- repairs and counters ---------------------------------------------------------------------

    def record_repair(
        self,
        path: str,
        outcome: str,
        reason: str | None,
        backup_id: str | None,
        fixes: Counter[str],
        detail: str,
    ) -> None:
        """Log one repair attempt (repaired / skipped / failed) and count it."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO repairs(time, path, outcome, reason, backup_id, fixes, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    time.time(),
                    path_key(path),
                    outcome,
                    reason,
                    backup_id,
                    json.dumps(dict(fixes)),
                    path_key(detail),
                ),
            )
            self._bump(db, {f"repairs.{outcome}": 1})

    def failed_repairs(self, path: str, limit: int = 16) -> tuple[int, float | None]:
        """Return how many of the last repair attempts of `path` failed in a row, and when the last
        one did."""
        with self._lock:
            rows = self._db.execute(
                "SELECT time, outcome FROM repairs WHERE path = ? ORDER BY id DESC LIMIT ?",
                (path_key(path), limit),
            ).fetchall()
        failed = 0
        for _time, outcome in rows:
            if outcome != "failed":
                break
            failed += 1
        return failed, float(rows[0][0]) if failed else None

    def repair_summary(self) -> dict[str, Any]:
        """Return repairs done and skipped by reason, and findings repaired by class, since the
        store began (records pruned by `prune_repairs` included); `files_repaired` counts the files
        of the records still kept."""
        done = 0
        skipped: Counter[str] = Counter()
        failed: Counter[str] = Counter()
        repaired_by_class: Counter[str] = Counter()
        repaired_files: set[str] = set()
        with self._lock:
            rows = self._db.execute("SELECT path, outcome, reason, fixes FROM repairs").fetchall()
            pruned = self._db.execute(
                "SELECT name, value FROM counters WHERE name LIKE 'repairs.pruned.%'"
            ).fetchall()
        for name, value in pruned:  # what records pruned long ago counted
            kind, _, rest = name.removeprefix("repairs.pruned.").partition(".")
            if kind == "done":
                done += value
            elif kind == "class":
                repaired_by_class[rest] += value
            elif kind == "skipped":
                skipped[rest] += value
            elif kind == "failed":
                failed[rest] += value
        for path, outcome, reason, fixes in rows:
            if outcome == "repaired":
                done += 1
                repaired_files.add(path)
                repaired_by_class.update(loads(fixes))
            elif outcome == "skipped":
                skipped[reason or "unknown"] += 1
            else:
                failed[reason or "unknown"] += 1
        return {
            "done": done,
            "files_repaired": len(repaired_files),
            "skipped_by_reason": dict(sorted(skipped.items())),
            "failed_by_reason": dict(sorted(failed.items())),
            "findings_repaired_by_class": dict(sorted(repaired_by_class.items())),
        }

    def bump(self, counters: dict[str, int]) -> None:
        """Add to named counters."""
        with self.transaction() as db:
            self._bump(db, counters)

    @staticmethod
    def _bump(db: sqlite3.Connection, counters: dict[str, int]) -> None:
        for name, amount in counters.items():
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (name, amount),
            )

    def counters(self) -> dict[str, int]:
        """Return every counter."""
        with self._lock:
            return dict(self._db.execute("SELECT name, value FROM counters").fetchall())

    def set_meta(self, key: str, value: Any) -> None:
        """Store a small JSON value under `key` (the daemon's status snapshot, for `riffd
        report`)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def meta(self, key: str) -> Any:
        """Return the JSON value stored under `key`, or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def record_history(self, point: dict[str, Any], now: float) -> None:
        """Keep `point` as this hour's, merged into an earlier one of the same hour: its figures
        win, but one it lacks (None: a new daemon that has no latency yet) keeps the earlier value;
        forget hours over HISTORY_DAYS."""
        hour = int(now // 3600)
        with self.transaction() as db:
            row = db.execute("SELECT point FROM history WHERE hour = ?", (hour,)).fetchone()
            earlier = json.loads(row[0]) if row else {}
            merged = (earlier if isinstance(earlier, dict) else {}) | {
                key: value for key, value in point.items() if value is not None
            }
            db.execute(
                "INSERT OR REPLACE INTO history(hour, point) VALUES (?, ?)",
                (hour, json.dumps(merged)),
            )
            db.execute("DELETE FROM history WHERE hour < ?", (hour - HISTORY_DAYS * 24,))

    def history(self) -> list[tuple[int, dict[str, Any]]]:
        """Return (hour since the epoch, point) for every hour kept, oldest first."""
        with self._lock:
            try:
                rows = self._db.execute("SELECT hour, point FROM history ORDER BY hour").fetchall()
            # a store made before the history, opened read-only: none yet
            except sqlite3.OperationalError:
                return []
        return [(int(hour), json.loads(point)) for hour, point in rows]

    def recent_repairs(self, limit: int = 20) -> list[dict[str, Any]]:
        """Return the newest `limit` repair attempts, newest first: time, path, outcome, reason,
        backup, fixes."""
        with self._lock:
            rows = self._db.execute(
                "SELECT time, path, outcome, reason, backup_id, fixes, detail FROM repairs "
                "ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            {
                "time": row[0],
                "path": key_path(row[1]),
                "outcome": row[2],
                "reason": row[3],
                "backup_id": row[4],
                "fixes": json.loads(row[5]),
                "detail": None if row[6] is None else key_path(row[6]),
            }
            for row in rows
        ]

    def maintain(self) -> None:
        """Routine upkeep: let SQLite refresh its statistics and fold the WAL back into the
        database."""
        with self._lock:
            self._db.execute("PRAGMA optimize")
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def prune_repairs(self, keep: int = 10_000) -> None:
        """Keep only the newest `keep` repair records; what the older ones counted is folded into
        counters (`repairs.pruned.*`), so the totals of `repair_summary` (Prometheus counters) never
        go down."""
        with self.transaction() as db:
            cut = db.execute("SELECT MAX(id) - ? FROM repairs", (keep,)).fetchone()[0]
            if cut is None or cut <= 0:
                return
            folded: Counter[str] = Counter()
            for outcome, reason, fixes in db.execute(
                "SELECT outcome, reason, fixes FROM repairs WHERE id <= ?", (cut,)
            ).fetchall():
                if outcome == "repaired":
                    folded["repairs.pruned.done"] += 1
                    for name, count in json.loads(fixes).items():
                        folded[f"repairs.pruned.class.{name}"] += count
                else:
                    kind = "skipped" if outcome == "skipped" else "failed"
                    folded[f"repairs.pruned.{kind}.{reason or 'unknown'}"] += 1
            self._bump(db, dict(folded))
            db.execute("DELETE FROM repairs WHERE id <= ?", (cut,))


def _watermark_columns(watermark: Watermark) -> tuple[object, ...]:
    """The columns of `files` a watermark fills, in the order of the table: dev, ino, offset, lines,
    head_len, head_sha, tail_len, tail_sha, size, mtime_ns."""
    return (
        watermark.dev,
        watermark.ino,
        watermark.offset,
        watermark.lines,
        watermark.head_len,
        watermark.head_sha,
        watermark.tail_len,
        watermark.tail_sha,
        watermark.size,
        watermark.mtime_ns,
    )
