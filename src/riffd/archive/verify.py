"""Checking the archive against the transcripts that still exist: `riffd archive verify`.

The archive's latest generation of a file must be, byte for byte, the file's first `archived_bytes`.
A file is:
- `whole`: it is, and everything in the file is archived;
- `behind`: it is, and the file has lines the archive has not taken yet (the daemon or an ingest
  will);
- `rewritten`: the file no longer holds, just before the archive's watermark, the last line the
  archive has of it (Claude Code or a repair rewrote it): the next pass archives it as a new
  generation, the old one stays;
- `differs`: the file still ends, at the watermark, with the archive's last line, but an earlier
  line differs, or the archive holds more or fewer bytes than it claims. That is the archive's fault
  (a hole left by an archive write that failed while the daemon's state moved on, before riffd
  refused such holes; a damaged pack), and `archive_again` mends it: the file is archived whole as a
  new generation, and the old one is kept. A file never archived, or gone (the archive is then all
  there is of it), is named as that.

A file kept whole (riffd.archive.wholefiles) is compared, byte for byte, with its newest version:
`whole`; `behind` when the file has changed since (another size or time: the daemon takes it as a
new version); `differs` when it has the size and time of the version but other bytes, or the version
cannot be read back, which `--fix` mends by archiving it again (a blob that cannot be read gets its
frames afresh from the file's bytes).

`damaged_packs` decompresses every pack (zstd checks each frame's checksum) and names each that
cannot be read with the archived files whose lines it holds or needs, and what can be done for each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from riffd.archive.generation import ends_as_archived
from riffd.archive.ingest import archive_key, ingest_file
from riffd.archive.packs import PackDamaged
from riffd.archive.store import Archive, ArchiveGap
from riffd.claude_code.session_files import SessionFile
from riffd.display import path_key
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.transcript.reader import close_read, iter_chunks, read_at, retrying

FAULTS = ("differs",)  # the outcomes that are the archive's fault (exit 1; `--fix` mends them)


@dataclass(frozen=True)
class Verdict:
    """What `verify_file` found: the outcome (see the module), and for `differs` where and how."""

    path: Path
    outcome: str  # whole, behind, rewritten, differs, not archived, gone
    detail: str = ""
    archived_again: int | None = None  # the lines archived again by `check_file` with `fix`
    # why it could not be verified or archived again (then `outcome` is empty)
    error: str | None = None


def check_whole(archive: Archive, found: SessionFile, *, fix: bool) -> Verdict:
    """`verify_whole`, and with `fix` a file that differs archived again; what stopped either is the
    error."""
    try:
        verdict = verify_whole(archive, found)
        if verdict.outcome in FAULTS and fix:
            kept = archive.whole.keep(found, again=True)
            return (
                replace(verdict, archived_again=kept.version)
                if kept.version
                else replace(
                    verdict,
                    outcome="",
                    error=f"{found.path}: {kept.outcome} while it was archived again; run the "
                    "command again",
                )
            )
        return verdict
    except OSError as exc:
        return Verdict(found.path, "", error=f"{found.path}: {exc.strerror or exc}")


def verify_whole(archive: Archive, found: SessionFile) -> Verdict:
    """Compare the newest version the archive holds of a file kept whole with the file, byte for
    byte."""
    latest = archive.versions.latest(path_key(found.base), path_key(found.relative))
    try:
        status = os.lstat(found.path)
    except FileNotFoundError:
        return Verdict(found.path, "gone" if latest else "not archived")
    if latest is None:
        return Verdict(found.path, "not archived")
    same_time = (status.st_size, status.st_mtime_ns) == (latest.size, latest.mtime_ns)
    try:
        with open(found.path, "rb") as handle:
            position = 0
            for chunk in archive.versions.content(latest):
                read = handle.read(len(chunk))
                if read != chunk:
                    position += next(
                        (
                            at
                            for at, (one, other) in enumerate(zip(read, chunk, strict=False))
                            if one != other
                        ),
                        min(len(read), len(chunk)),
                    )
                    break
                position += len(chunk)
            else:
                if not handle.read(1):
                    return Verdict(found.path, "whole")
    except PackDamaged as exc:
        return Verdict(
            found.path, "differs", f"the archive cannot give its version {latest.version}: {exc}"
        )
    if not same_time:
        return Verdict(
            found.path,
            "behind",
            f"changed since version {latest.version} was archived (the daemon "
            "takes it as a new version)",
        )
    return Verdict(
        found.path,
        "differs",
        f"byte {position} on is not version {latest.version} as archived, "
        "though its size and time are",
    )


@dataclass(frozen=True)
class PackUser:
    """An archived generation of a file that has lines in a damaged pack, or pieces of lines cut out
    of it."""

    path: str
    session_id: str | None
    generation: int
    latest: bool  # the file's latest generation (what `riffd archive restore` writes)
    exists: bool  # the transcript is still there

    def advice(self, fixing: bool = False, riffd: str = "riffd") -> str:
        """What the user can do about it (`fixing`: `riffd archive verify --fix` is at it), in
        words, the commands it names starting with `riffd` (riffd.display.riffd_invocation)."""
        from riffd.display import shell_command

        which = f"generation {self.generation}" + (
            " (its latest)" if self.latest else " (an earlier one)"
        )
        if not self.latest:
            return f"{which}: the latest generation does not need this pack; the earlier one cannot be restored whole"
        if self.exists:
            return f"{which}: the transcript still exists: " + (
                "it is archived again as a new generation below"
                if fixing
                else f"`{riffd} {shell_command('archive', 'verify', '--fix', self.path)}` archives "
                "it again as a new generation"
            )
        return (
            f"{which}: the transcript is gone, so these lines are lost from the archive; `riffd archive "
            "restore` refuses it rather than write part of it; "
            f"`{riffd} {shell_command('backups', 'list', self.session_id or self.path)}` shows riffd's "
            "own backups of it"
        )


def damaged_packs(archive: Archive) -> list[tuple[PackDamaged, list[PackUser]]]:
    """Return each pack of the archive that cannot be read, with the file generations that need
    it."""
    found: list[tuple[PackDamaged, list[PackUser]]] = []
    damaged = archive.damaged_packs()
    latest = (
        {path: archive.cursor(path)[0] for _file_id, path in archive.files()} if damaged else {}
    )
    for damage in damaged:
        users = [
            PackUser(
                path, session, generation, latest.get(path) == generation, os.path.exists(path)
            )
            for path, session, generation in archive.pack_users(damage.packs)
        ]
        found.append((damage, users))
    return found


def check_file(archive: Archive, path: Path, *, fix: bool) -> Verdict:
    """`verify_file`, and with `fix` a file that differs archived again (`archive_again`); what
    stopped either is the verdict's `error`, one line."""
    try:
        verdict = verify_file(archive, path)
        if verdict.outcome in FAULTS and fix:
            return replace(verdict, archived_again=archive_again(archive, path))
        return verdict
    except OSError as exc:
        return Verdict(path, "", error=f"{path}: {exc.strerror or exc}")
    except ArchiveGap as exc:  # (the daemon archived the same file meanwhile, at every try)
        return Verdict(
            path,
            "",
            error=f"{path}: changed while it was archived again ({exc}); run the command again",
        )


def verify_file(archive: Archive, path: Path, *, fs: FileSystem = REAL_FILES) -> Verdict:
    """Compare the archive's latest generation of `path` with the file, reading the archive as of
    one moment (lines a running daemon archives meanwhile are not seen) and the file from its start,
    line by line (the archive's line records of the file are held: a few hundred bytes a line). A
    pack that cannot be read is a fault of the file whose lines are in it (or needed by them), and
    so is one whose lines read back other than they were archived."""
    path = archive_key(path)
    try:
        with archive.snapshot():
            return _compare(archive, path, retrying(fs), *archive.cursor(str(path)))
    except PackDamaged as exc:
        return Verdict(path, "differs", f"the archive cannot give its lines as archived: {exc}")


def _compare(
    archive: Archive, path: Path, fs: RetryingFS, generation: int, archived: int
) -> Verdict:
    """The verdict on the file at `path`, judged and compared through one open of it (a file
    replaced meanwhile is one file or the other, never a false "differs")."""
    try:
        fd = fs.open_file(path)
    except FileNotFoundError:
        return Verdict(path, "gone" if archived else "not archived")
    try:
        size = fs.fstat(fd).st_size
        if archived == 0:
            return Verdict(
                path,
                "not archived" if size else "whole",
                "not under this name (a link to an archived file "
                "is archived under the name the daemon watches)"
                if size
                else "an empty file",
            )
        if not ends_as_archived(archive, path, archived, fs=fs, fd=fd):
            return Verdict(
                path, "rewritten", "the file no longer holds the archive's last line where it ended"
            )
        file_id = archive.file_id(str(path))
        assert file_id is not None  # (archived bytes were recorded for it)
        position = 0
        for number, line in enumerate(archive.iter_file(file_id, generation), 1):
            if read_at(fs, fd, len(line), position) != line:
                return Verdict(
                    path,
                    "differs",
                    f"line {number} (from byte {position}) is not the line archived",
                )
            position += len(line)
    finally:
        close_read(fs, fd)
    if position != archived:
        return Verdict(
            path,
            "differs",
            f"the archive holds {position} bytes of it, not the {archived} it records",
        )
    return (
        Verdict(path, "whole")
        if archived == size
        else Verdict(path, "behind", f"{size - archived} bytes not archived yet")
    )


def archive_again(archive: Archive, path: Path) -> int:
    """Archive all of `path` as a new generation (the archive's older ones stay); return the lines
    added. The file as read now is archived in one transaction (never a part of it: an error leaves
    the archive as it was); what was appended since is then taken from the archive's watermark as
    any ingest does, so a daemon archiving the same file meanwhile adds every line once (ArchiveGap
    when the file keeps changing under it)."""
    path = archive_key(path)
    added = archive.add_generation(str(path), iter_chunks(path, start=0))
    return added + ingest_file(archive, path)
