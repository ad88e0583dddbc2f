"""Checking the archive against the transcripts that still exist: `riffd archive verify`.

The archive's latest generation of a file must be, byte for byte, the file's first `archived_bytes`. A file is:
- `whole`: it is, and everything in the file is archived;
- `behind`: it is, and the file has lines the archive has not taken yet (the daemon or an ingest will);
- `rewritten`: the file no longer holds, just before the archive's watermark, the last line the archive has of it
  (Claude Code or a repair rewrote it): the next pass archives it as a new generation, the old one stays;
- `differs`: the file still ends, at the watermark, with the archive's last line, but an earlier line differs, or
  the archive holds more or fewer bytes than it claims. That is the archive's fault (a hole left by an archive
  write that failed while the daemon's state moved on, before riffd refused such holes; a damaged pack), and
  `archive_again` mends it: the file is archived whole as a new generation, and the old one is kept.
A file never archived, or gone (the archive is then all there is of it), is named as that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from riffd.archive.ingest import archive_key, ingest_file, still_appended
from riffd.archive.store import Archive, ArchiveGap
from riffd.transcript.reader import iter_chunks

FAULTS = ("differs",)  # the outcomes that are the archive's fault (exit 1; `--fix` mends them)


@dataclass(frozen=True)
class Verdict:
    """What `verify_file` found: the outcome (see the module), and for `differs` where and how."""

    path: Path
    outcome: str  # whole, behind, rewritten, differs, not archived, gone
    detail: str = ""
    archived_again: int | None = None  # the lines archived again by `check_file` with `fix`
    error: str | None = None  # why it could not be verified or archived again (then `outcome` is empty)


def check_file(archive: Archive, path: Path, *, fix: bool) -> Verdict:
    """`verify_file`, and with `fix` a file that differs archived again (`archive_again`); what stopped either is
    the verdict's `error`, one line."""
    import zstandard

    try:
        verdict = verify_file(archive, path)
        if verdict.outcome in FAULTS and fix:
            return replace(verdict, archived_again=archive_again(archive, path))
        return verdict
    except OSError as exc:
        return Verdict(path, "", error=f"{path}: {exc.strerror or exc}")
    except ArchiveGap as exc:  # (the daemon archived the same file meanwhile, at every try)
        return Verdict(path, "", error=f"{path}: changed while it was archived again ({exc}); run the command again")
    except zstandard.ZstdError as exc:  # the open pack itself cannot be read: nothing can be added to it
        return Verdict(path, "", error=f"{path}: could not be archived again: the archive's last pack cannot be read "
                       f"({exc}); riffd has no repair for a pack that SQLite's own check passes; keep the transcript")


def verify_file(archive: Archive, path: Path) -> Verdict:
    """Compare the archive's latest generation of `path` with the file, reading the archive as of one moment (lines
    a running daemon archives meanwhile are not seen) and the file from its start, line by line (the archive's line
    records of the file are held: a few hundred bytes a line). A pack that cannot be read is a fault of the file
    whose lines are in it."""
    import zstandard  # (riffd's start-up imports no compression library)

    path = archive_key(path)
    try:
        with archive.snapshot():
            return _compare(archive, path, *archive.cursor(str(path)))
    except zstandard.ZstdError as exc:
        return Verdict(path, "differs", f"a pack holding its lines cannot be read ({exc})")


def _compare(archive: Archive, path: Path, generation: int, archived: int) -> Verdict:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Verdict(path, "gone" if archived else "not archived")
    if archived == 0:
        return Verdict(path, "not archived" if size else "whole", "not under this name (a link to an archived file "
                       "is archived under the name the daemon watches)" if size else "an empty file")
    if not still_appended(archive, path, archived):
        return Verdict(path, "rewritten", "the file no longer holds the archive's last line where it ended")
    file_id = archive.file_id(str(path))
    assert file_id is not None  # (archived bytes were recorded for it)
    position = 0
    with open(path, "rb") as handle:
        for number, line in enumerate(archive.iter_file(file_id, generation), 1):
            if handle.read(len(line)) != line:
                return Verdict(path, "differs", f"line {number} (from byte {position}) is not the line archived")
            position += len(line)
    if position != archived:
        return Verdict(path, "differs", f"the archive holds {position} bytes of it, not the {archived} it records")
    return Verdict(path, "whole") if archived == size else Verdict(path, "behind", f"{size - archived} bytes not "
                                                                                      "archived yet")


def archive_again(archive: Archive, path: Path) -> int:
    """Archive all of `path` as a new generation (the archive's older ones stay); return the lines added. Its first
    chunk starts the generation; the rest is taken from the archive's watermark as any ingest does, so a daemon
    archiving the same file meanwhile adds every line once (ArchiveGap when the file keeps changing under it)."""
    path = archive_key(path)
    first = next(iter_chunks(path, start=0), None)
    if first is None:
        return 0
    _offset, lines, terminated = first
    added = archive.add_lines(str(path), 0, lines, rewritten=True, last_terminated=terminated)
    return added + ingest_file(archive, path)
