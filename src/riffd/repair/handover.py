"""After the swap, what is on disk decides: the swap is finished (the old file's late lines carried
onto the transcript until no process writes the old file), undone (the name given back to the old
file, with what was written to the copy meanwhile), or left pending for a later look. One function,
`settle`, does it for the repair itself right after its exchange, for the daemon's pending job and
for the next run after riffd was killed.

Claude Code opens the transcript by path for each append. A writer that opened it just before the
swap writes into the old file just after; so does a process that holds it open for longer. So the
old file keeps riffd's name (the temp name the exchange gave it, or a hard link where the filesystem
only renames) while its lines are carried, until no other process holds it open for writing (Linux:
/proc, by device and inode; elsewhere: one quiet second).

Three findings undo a swap, each meaning the repair must not stand: the old file was truncated or
rewritten in place just before the swap (its writer's version wins), a Claude Code process
registered the session just as the names were swapped (it may have loaded the old file; after a
crash, a session live then is waited for instead), or a line written to either file since hangs from
a line the repair removed (a client loaded the old file: its lines would dangle in the repaired
one).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from riffd.claude_code.liveness import session_liveness
from riffd.fsio import NOFOLLOW, RetryingFS, fsync_file, fsync_folder
from riffd.repair.backup import backups_command
from riffd.repair.carry import carry_back, carry_forward, holders_of, verify_forward
from riffd.repair.journal import CHECKED, SWAP, UNDO, Journal, Pair, SwapRecord
from riffd.repair.lines import LineConflict, read_bytes
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

FINISHED, UNDONE, PENDING, ABANDONED, KEPT_OTHER, GONE = (
    "finished",
    "undone",
    "pending",
    "abandoned",
    "kept_other",
    "gone",
)
# Where no process table can be read (macOS): the file must stay unchanged this long before its name
# goes.
QUIET_WITHOUT_PROC = 1.0


@dataclass(frozen=True)
class SwapResult:
    """What `settle` made of a swap: `state` (FINISHED, UNDONE, PENDING, ABANDONED: it had not
    happened, KEPT_OTHER: another program's version took the name back, GONE: the transcript was
    deleted or replaced since), why in words, for an undo whether the file had changed (else: live),
    and the bytes carried onto the transcript."""

    state: str
    detail: str
    changed: bool = False
    carried: int = 0
    holders: tuple[int, ...] = ()


def identity_of(fs: RetryingFS, path: Path) -> Pair | None:
    """Return (device, inode) of what `path` names (not following a symlink), or None when nothing
    does."""
    try:
        status = fs.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def unlink_if(fs: RetryingFS, path: Path | None, identity: Pair) -> None:
    """Remove the name `path` when it names the file `identity` (never another's file)."""
    if path is not None and identity_of(fs, path) == identity:
        with contextlib.suppress(FileNotFoundError):
            fs.unlink(path)


def open_as(fs: RetryingFS, path: Path, flags: int, identity: Pair) -> int:
    """Open `path` and check it is the file `identity`; raise FileNotFoundError when it is not (any
    more)."""
    fd = fs.open(path, flags | NOFOLLOW)
    status = fs.fstat(fd)
    if (status.st_dev, status.st_ino) != identity:
        fs.close(fd)
        raise FileNotFoundError(errno.ENOENT, "not the file the journal names any more", str(path))
    return fd


def settle(fs: RetryingFS, journal: Journal) -> SwapResult:
    """Given a locked journal (the caller holds the transcript's lock too), finish, undo or leave
    its swap as what is on disk says, and return what it did. Raise OSError when the disk fails; the
    journal then stays for the next look."""
    record = journal.record
    transcript = journal.name(record.transcript)
    at_transcript = identity_of(fs, transcript)
    old_at = journal.name(record.old_name) if record.old_name else None
    at_old = identity_of(fs, old_at) if old_at else None
    if record.phase == SWAP:
        if at_transcript == record.old_id:
            # The swap never happened: the copy (and the original's extra link) go.
            unlink_if(fs, journal.name(record.copy_name), record.copy_id)
            if old_at is not None and old_at.name != record.copy_name:
                unlink_if(fs, old_at, record.old_id)
            journal.remove()
            return SwapResult(
                ABANDONED,
                f"{transcript}: the swap had not happened; the transcript was never changed",
            )
        if (
            at_transcript == record.copy_id
            and record.old_name == record.copy_name
            and at_old not in (record.old_id, None)
        ):
            # the exchange swapped out another program's new version
            return _keep_other(fs, journal)
        if at_transcript == record.copy_id:
            if at_old == record.old_id:
                verdict = _check_after_swap(fs, journal)
                if verdict is not None:
                    return verdict
            journal.update(phase=CHECKED)
            record = journal.record
    if record.phase == CHECKED and at_transcript == record.copy_id:
        if at_old != record.old_id:
            journal.remove()  # the old file has no name (an exchange taken for a rename): nothing left to carry
            return SwapResult(
                FINISHED,
                f"{transcript}: repaired; the old file had no name left to carry lines from",
            )
        return _finish(fs, journal)
    if record.phase == UNDO:
        if at_transcript == record.copy_id and at_old == record.old_id:
            _swap_back(fs, journal)  # the undo's own swap had not happened
            at_transcript = record.old_id
        if at_transcript == record.old_id:
            return _finish_undo(fs, journal)
    return _orphaned(fs, journal, at_transcript)


def _check_after_swap(fs: RetryingFS, journal: Journal) -> SwapResult | None:
    """The checks a swap must pass to stand, else it is undone: the old file as planned, no session
    live. Return None when it passes."""
    record = journal.record
    transcript = journal.name(record.transcript)
    assert record.old_name is not None
    old_fd = open_as(fs, journal.name(record.old_name), os.O_RDONLY, record.old_id)
    try:
        changed = _changed(fs, old_fd, record, str(transcript))
    finally:
        fs.close(old_fd)
    if changed is not None:
        return undo(
            fs,
            journal,
            f"{transcript}: {changed} just before riffd swapped in its repaired copy, so "
            "riffd gave the transcript back as its writer left it; scan it again",
            changed=True,
        )
    live, why = session_liveness(
        transcript,
        [Path(folder) for folder in record.claude_dirs],
        0,
        session_id=record.session_id,
        fs=fs,
    )
    if not live:
        return None
    # Live just after the swap (or, after a crash, before the swap was checked): it may have loaded
    # the old file. Giving that file its name back loses nothing: what was written to the copy is
    # carried onto it.
    return undo(
        fs,
        journal,
        f"{transcript}: the session may be in use: {why} (seen just after the swap), so "
        "riffd undid the repair; the transcript is as its writers left it",
    )


def _changed(fs: RetryingFS, fd: int, record: SwapRecord, what: str) -> str | None:
    """Return how the old file changed other than by appends since it was planned for, or None."""
    size = fs.fstat(fd).st_size
    if size < record.settled_end:
        return f"it was truncated to {size} bytes"
    planned, settled = hashlib.sha256(), hashlib.sha256()
    for chunk in iter_fd(fd, what=what, fs=fs, end=record.source_size):
        planned.update(chunk)
    settled.update(read_bytes(fs, fd, record.source_size, record.settled_end, what))
    if planned.hexdigest() != record.source_sha256 or settled.hexdigest() != record.settled_sha256:
        return "its bytes were rewritten in place"
    return None


def _finish(fs: RetryingFS, journal: Journal) -> SwapResult:
    """Carry the old file's late lines onto the transcript until no process writes the old file;
    then check them and remove its name. Undo on a line that hangs from a removed one."""
    record = journal.record
    transcript = journal.name(record.transcript)
    assert record.old_name is not None
    old_at = journal.name(record.old_name)
    old_fd = open_as(fs, old_at, os.O_RDONLY, record.old_id)
    try:
        new_fd = open_as(fs, transcript, os.O_RDWR | os.O_APPEND, record.copy_id)
        try:
            try:
                carry_forward(fs, journal, old_fd, new_fd)
            except LineConflict as exc:
                return undo(
                    fs,
                    journal,
                    f"{transcript}: the session is in use: {exc}; riffd undid the repair, "
                    "so the transcript is as its writers left it",
                )
            holders = holders_of(record.old_id, old_fd, fs)
            if holders:
                return SwapResult(
                    PENDING,
                    f"{transcript}: process(es) {', '.join(map(str, holders))} still hold the "
                    f"old file open for writing; riffd keeps it as {old_at} and carries what they write",
                    holders=tuple(holders),
                )
            carry_forward(fs, journal, old_fd, new_fd, final=True)
            fsync_file(fs, new_fd, transcript)
            verify_forward(fs, journal, old_fd, new_fd)
        finally:
            fs.close(new_fd)
    finally:
        fs.close(old_fd)
    unlink_if(fs, old_at, record.old_id)
    journal.remove()
    record = journal.record
    carried = sum(end - start for start, end in record.carried_at)
    return SwapResult(
        FINISHED,
        f"{transcript}: repaired"
        + (f"; {carried} byte(s) written to the old file were carried over" if carried else ""),
        carried=carried,
    )


def undo(fs: RetryingFS, journal: Journal, detail: str, *, changed: bool = False) -> SwapResult:
    """Give the transcript's name back to the old file (the journal says so first), then carry onto
    it what was written to the copy since the swap. Raise OSError when the names cannot be swapped
    back."""
    record = journal.record
    if record.old_name is None:
        return SwapResult(
            PENDING,
            f"{detail.split(';')[0]}; but this filesystem keeps no name for the old file, so "
            "the repair cannot be undone: the old file is in the backup "
            f"{record.backup_id} (`{backups_command(Path(record.backup_dir), 'list')}`)",
        )
    journal.update(phase=UNDO, notes=(*record.notes, detail))
    _swap_back(fs, journal)
    result = _finish_undo(fs, journal)
    return SwapResult(
        UNDONE if result.state == UNDONE else PENDING,
        detail if result.state == UNDONE else f"{detail} ({result.detail})",
        changed=changed,
        holders=result.holders,
    )


def _swap_back(fs: RetryingFS, journal: Journal) -> None:
    """The names of an undo: the old file takes the transcript's name; the copy keeps (or takes)
    riffd's copy name, so what writers still put into it can be carried."""
    record = journal.record
    assert record.old_name is not None
    transcript, old_at, copy_at = (
        journal.name(record.transcript),
        journal.name(record.old_name),
        journal.name(record.copy_name),
    )
    if record.old_name == record.copy_name:
        fs.exchange(old_at, transcript)
    else:
        if identity_of(fs, copy_at) != record.copy_id:
            # the copy keeps a name of riffd's before it gives up the transcript's
            fs.link(transcript, copy_at)
        fs.replace(old_at, transcript)
    fsync_folder(fs, transcript.parent)


def _finish_undo(fs: RetryingFS, journal: Journal) -> SwapResult:
    record = journal.record
    transcript, copy_at = journal.name(record.transcript), journal.name(record.copy_name)
    detail = record.notes[-1] if record.notes else f"{transcript}: the repair was undone"
    if identity_of(fs, copy_at) == record.copy_id:
        old_fd = open_as(fs, transcript, os.O_RDWR | os.O_APPEND, record.old_id)
        try:
            copy_fd = open_as(fs, copy_at, os.O_RDONLY, record.copy_id)
            try:
                carry_back(fs, journal, old_fd, copy_fd)
                holders = holders_of(record.copy_id, copy_fd, fs)
                if holders:
                    return SwapResult(
                        PENDING,
                        f"{transcript}: undone; process(es) {', '.join(map(str, holders))} "
                        f"still write riffd's copy {copy_at}: riffd carries what they write",
                        holders=tuple(holders),
                    )
                carry_back(fs, journal, old_fd, copy_fd, final=True)
                fsync_file(fs, old_fd, transcript)
            finally:
                fs.close(copy_fd)
        finally:
            fs.close(old_fd)
        unlink_if(fs, copy_at, record.copy_id)
    journal.remove()
    return SwapResult(UNDONE, detail)


def _keep_other(fs: RetryingFS, journal: Journal) -> SwapResult:
    """The name riffd swapped out held another program's new version (put there in the instant
    before the swap): it takes the transcript's name back, with anything written to riffd's copy
    meanwhile."""
    record = journal.record
    transcript, copy_at = journal.name(record.transcript), journal.name(record.copy_name)
    fs.exchange(copy_at, transcript)
    fsync_folder(fs, transcript.parent)
    copy_fd = open_as(fs, copy_at, os.O_RDONLY, record.copy_id)
    try:
        other_fd = fs.open(transcript, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
        try:
            size = fs.fstat(copy_fd).st_size
            appended = read_bytes(fs, copy_fd, record.copy_size, size, str(copy_at))
            if appended:
                from riffd.fsio import write_all

                write_all(fs, other_fd, appended)
                fsync_file(fs, other_fd, transcript)
        finally:
            fs.close(other_fd)
    finally:
        fs.close(copy_fd)
    unlink_if(fs, copy_at, record.copy_id)
    journal.remove()
    return SwapResult(
        KEPT_OTHER,
        f"{transcript}: another program put a new version of it in place while riffd was "
        "replacing it; that version is kept"
        + (f" (with {len(appended)} bytes written to riffd's copy meanwhile)" if appended else ""),
    )


def _orphaned(fs: RetryingFS, journal: Journal, at_transcript: Pair | None) -> SwapResult:
    """The transcript was deleted, or replaced by another file, since the swap: riffd's files of it
    (which may hold lines written to them) go into the backup store, never back under the
    transcript's name."""
    from riffd.repair.backup import BackupError, BackupStore

    record = journal.record
    transcript = journal.name(record.transcript)
    kept: list[str] = []
    for name, identity in ((record.old_name, record.old_id), (record.copy_name, record.copy_id)):
        if name is None or identity_of(fs, journal.name(name)) != identity:
            continue
        fd = open_as(fs, journal.name(name), os.O_RDONLY, identity)
        try:
            saved = BackupStore(Path(record.backup_dir), fs=fs).create(
                transcript,
                fd,
                fs.fstat(fd).st_size,
                None,
                (),
                reason="riffd's file of an interrupted repair",
            )
        except BackupError as exc:
            raise OSError(
                errno.EIO, f"could not back up {journal.name(name)} ({exc}); it is left there"
            ) from exc
        finally:
            fs.close(fd)
        kept.append(saved.backup_id)
        unlink_if(fs, journal.name(name), identity)
    journal.remove()
    what = "deleted" if at_transcript is None else "replaced by another file"
    return SwapResult(
        GONE,
        f"{transcript}: it was {what} after riffd swapped in its repaired copy"
        + (
            f"; riffd's files of that repair, with every line written to them, are in backup(s) {', '.join(kept)}"
            if kept
            else ""
        ),
        changed=at_transcript is not None,
    )
