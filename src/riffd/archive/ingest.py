"""Back-filling the archive from transcript files: what `riffd archive ingest`, `fix` and the
daemon's catch-up use.

`riffd archive ingest` of many files (`ingest_files`) reads them in a reader process: the reader
reads each file from where the archive stopped and takes from every line what the archive needs
before it looks in the database (riffd.archive.contents.parse: parsing, pieces, their keys and texts,
about two fifths of an ingest), while this process stores the lines it sends, as `ingest_file`
would. The reader only ever saves time: when it fails to read a file, that file is archived here
(from the archive's own watermark, so every line once); when it dies or cannot start, so are the
rest. It is forked, so only where forking is safe (riffd.forking.can_fork).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from riffd.archive.connection import WriteGroup
from riffd.archive.contents import Parsed, parse
from riffd.archive.generation import where_to_start
from riffd.archive.search import bulk_begin, bulk_end
from riffd.archive.store import Archive, ArchiveGap
from riffd.forking import as_child, big_pipe, can_fork, fork_context, reap
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.transcript.reader import close_read, iter_chunks, retrying

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

log = logging.getLogger(__name__)

READER_MIN_BYTES = 1_000_000  # a smaller ingest is done in one process: forking a reader would cost more than it saves
READ_AHEAD = 8_000_000  # bytes of files the reader is given ahead of the one being stored
JOBS_AHEAD = 64  # and files at most (their jobs then fit the jobs pipe, which no one else drains)
# Lines of one file stored per transaction (riffd.archive.connection.grouped), committed sooner when
# the reader is behind: 1 GB of distinct texts in 24 s a transaction per 1 MiB batch, 21.5 s per
# 4 MiB, 19.3 s per 8 MiB with the search index's bulk settings; later, runs interleaved, 19.0 s on
# average per 8 MiB, 17.9 per 16 and 17.2 per 64 (whose transactions outgrow the 32 MiB page
# cache and hold the write lock about a second)
GROUP_BYTES = 16 << 20


def ingest_file(archive: Archive, path: Path, *, fs: FileSystem = REAL_FILES) -> int:
    """Back-fill one transcript from where the archive stopped (from the start, as a new generation,
    when the file was rewritten since); return the lines added. An unfinished last line is archived
    too (a line completed later takes its place). The archive keeps it under its absolute path (`archive_key`), whatever folder the command ran
    in.

    The file is opened once for each try, and where to start is judged on the bytes the lines are
    then read from: a file replaced meanwhile (a repair's swap, Claude Code's own rewrite) is read
    as it was or as it is, never judged on the one and read from the other, which put the new
    file's bytes after the old one's (from the middle of a line) into the archive."""
    path = archive_key(path)
    fs = retrying(fs)
    added = 0
    for attempt in range(3):
        fd = fs.open_file(path)
        try:
            start, rewritten = where_to_start(archive, path, fs=fs, fd=fd)
            for offset, lines, terminated in iter_chunks(path, fs=fs, start=start, fd=fd):
                # An unterminated last line is kept too (lossless); restore writes it back without a
                # newline.
                added += archive.add_lines(
                    str(path),
                    offset,
                    lines,
                    rewritten=rewritten and offset == 0,
                    last_terminated=terminated,
                )
            note_time(archive, path, fs=fs, fd=fd)
            return added
        # another process started a new generation meanwhile: read from where it is now
        except ArchiveGap:
            if attempt == 2:
                raise
        finally:
            close_read(fs, fd)
    return added


def note_time(
    archive: Archive,
    path: Path,
    *,
    fs: FileSystem = REAL_FILES,
    fd: int | None = None,
    seen: tuple[int, int] | None = None,
) -> None:
    """Record the file's modification time in the archive when the archive holds it whole (what
    `riffd archive restore` gives the file back); a file that grew since it was read is noted when
    it is archived next. The file is the one `fd` is open on when given, else the one at `path`;
    `seen`: its (size, mtime_ns) as a reader process saw them at the end of its read."""
    if seen is None:
        try:
            status = retrying(fs).fstat(fd) if fd is not None else path.stat()
        except OSError:
            return
        seen = status.st_size, status.st_mtime_ns
    if archive.cursor(str(path))[1] == seen[0]:
        archive.note_mtime(str(path), *seen)


def archive_key(path: Path) -> Path:
    """Return the path the archive keeps a transcript under: absolute, `..` and `.` resolved,
    symlinks kept (the daemon's own paths, under its configured roots, are already so); `riffd
    archive ingest .` and the daemon then archive a file once, not under two names."""
    return Path(os.path.abspath(path))


def ingest_files(
    archive: Archive,
    paths: list[Path],
    *,
    min_bytes: int = READER_MIN_BYTES,
    read_ahead: int = READ_AHEAD,
    fs: FileSystem = REAL_FILES,
) -> Iterator[tuple[Path, int | OSError]]:
    """Back-fill each transcript of `paths` as `ingest_file` does, with a reader process when they
    hold `min_bytes` or more and forking is safe (see the module), given files up to `read_ahead`
    bytes ahead of the one stored; yield, in order, each path with the lines added or the error met.
    The archive is the same, row for row, as `ingest_file` on each path makes. Files are read
    through `fs` (the reader's copy of it: forked) and judged through it."""
    fs = retrying(fs)
    paths = [archive_key(path) for path in paths]
    sizes = [_size(path) for path in paths]
    if sum(sizes) < min_bytes or not can_fork():
        for path in paths:
            yield path, _ingest_here(archive, path, fs)
        return
    yield from _ingest_with_reader(archive, paths, sizes, read_ahead, fs)


def _where_now(archive: Archive, path: Path) -> tuple[int, bool] | None:
    """`where_to_start` again, when the reader's first batch of a file judged before comes: the
    archive's cursor and the last line only (the bytes before it were checked when it was judged,
    on the same file)."""
    try:
        return where_to_start(archive, path, whole=False)
    except OSError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _ingest_here(archive: Archive, path: Path, fs: RetryingFS) -> int | OSError:
    try:
        return ingest_file(archive, path, fs=fs)
    except OSError as exc:
        return exc
    # changed by another process at every try: this file is for the next run
    except ArchiveGap as exc:
        return OSError(
            f"the archive of it changed while it was read three times ({exc}); run the ingest again"
        )


class Batch(msgspec.Struct, array_like=True, gc=False):
    """One message of the reader: a batch of lines of job `job` from byte `offset`, with what
    `parse` gave for each; or, `lines` empty, the end of the job (`failed`: reading failed there,
    the file is archived here). Each names the file it was read from."""

    job: int
    offset: int = 0
    lines: list[bytes] = []
    parsed: list[Parsed] = []
    terminated: bool = True
    end: bool = False
    failed: bool = False
    # (st_dev, st_ino) of the file the reader read (None: it could not open it)
    file: tuple[int, int] | None = None
    # with the end: the file's (size, mtime_ns) when the reader had read it
    seen: tuple[int, int] | None = None


class Job(msgspec.Struct, array_like=True):
    """A file for the reader: its number, path and the byte to read it from."""

    number: int
    path: str
    start: int


_decode_batch = msgspec.msgpack.Decoder(Batch).decode
_decode_job = msgspec.msgpack.Decoder(Job | None).decode


def _ingest_with_reader(
    archive: Archive, paths: list[Path], sizes: list[int], read_ahead: int, fs: RetryingFS
) -> Iterator[tuple[Path, int | OSError]]:
    context = fork_context()
    receiver, sender = big_pipe(context)
    jobs_in, jobs_out = context.Pipe(duplex=False)
    reader = context.Process(
        target=_read,
        args=(sender, jobs_in, (receiver, jobs_out), fs),
        daemon=True,
        name="riffd-ingest-reader",
    )
    encode = msgspec.msgpack.Encoder().encode
    # per file handed to the reader: `where_to_start` then, and the file it was judged on
    starts: dict[int, tuple[tuple[int, bool], tuple[int, int]]] = {}
    try:
        gc.freeze()  # the reader's collections then never touch (and copy) the pages it shares with this process
        try:
            reader.start()
            alive = True
        except OSError:
            alive = False
        finally:
            gc.unfreeze()
        sender.close()  # only the reader writes: its exit ends the stream
        jobs_in.close()
        # The lines stored a few batches to a transaction, the search index merged only at the
        # ingest's end (`settle`)
        with archive.connection.grouped(GROUP_BYTES, begin=bulk_begin, end=bulk_end) as group:
            # files looked at for the reader so far; the bytes of those from the one being stored on
            sent = ahead = 0
            handed: set[str] = set()
            for number, path in enumerate(paths):
                # The reader reads ahead, up to `read_ahead` bytes and JOBS_AHEAD files, while this
                # process stores. A file that cannot be looked at, or is named again, is left to be
                # archived here when its turn comes (which meets the error itself, or finds nothing
                # new), as one process would.
                while (
                    alive
                    and sent < len(paths)
                    and (sent <= number or (ahead < read_ahead and sent - number < JOBS_AHEAD))
                ):
                    ahead += sizes[sent]
                    sent += 1
                    if str(paths[sent - 1]) in handed:
                        continue
                    try:
                        start = _judged(archive, paths[sent - 1], fs)
                    except OSError:
                        continue
                    try:
                        jobs_out.send_bytes(
                            encode(Job(sent - 1, str(paths[sent - 1]), start[0][0]))
                        )
                    except OSError:
                        alive = False
                    handed.add(str(paths[sent - 1]))
                    starts[sent - 1] = start
                ahead -= sizes[number]
                added, done_here, seen = 0, True, None
                if alive and number in starts:
                    added, done_here, alive, seen = _store_batches(
                        archive, receiver, number, path, starts[number], group
                    )
                # from the archive's watermark: what the reader's batches stored stays, once
                if done_here:
                    with group.apart():  # a transaction a batch, as `ingest_file` does alone
                        done = _ingest_here(archive, path, fs)
                else:
                    note_time(archive, path, seen=seen)
                    done = 0
                group.commit()  # what is said to be archived is
                yield path, done if isinstance(done, OSError) else added + done
    finally:
        receiver.close()  # a reader still sending meets a broken pipe and exits
        with contextlib.suppress(OSError):
            jobs_out.send_bytes(encode(None))  # no more files: the reader exits
        jobs_out.close()
        sender.close()
        jobs_in.close()
        reap(reader, 1.0)


def _judged(
    archive: Archive, path: Path, fs: RetryingFS
) -> tuple[tuple[int, bool], tuple[int, int]]:
    """`where_to_start` of the file at `path`, judged through one open of it, and that file's
    (st_dev, st_ino): the file the reader's lines must come from."""
    fd = fs.open_file(path)
    try:
        status = fs.fstat(fd)
        return where_to_start(archive, path, fs=fs, fd=fd), (status.st_dev, status.st_ino)
    finally:
        close_read(fs, fd)


def _store_batches(
    archive: Archive,
    receiver: Connection,
    number: int,
    path: Path,
    judged: tuple[tuple[int, bool], tuple[int, int]],
    group: WriteGroup,
) -> tuple[int, bool, bool, tuple[int, int] | None]:
    """Store the reader's batches of file `number`, handed to it when `where_to_start` gave
    `judged` (with the file it judged); return (the lines added, whether the file is to be archived
    here after all, whether the reader is still there, the file's (size, mtime_ns) when the reader
    had read it). Here after all: the reader could not read it, or read another file than the one
    judged (replaced in between), or it was rewritten or archived by another process since it was
    handed over (its first message shows), or the reader died or fell out of step (then so are the
    rest)."""
    start, file = judged
    # lines stored and committed, and stored since the group's last commit
    added = pending = 0
    stale = None
    try:
        while True:
            if not receiver.poll(0):
                # The reader is behind (a slow or stalled file system): the lock is not held while
                # this process waits for it
                group.commit()
                added, pending = added + pending, 0
            batch = _decode_batch(receiver.recv_bytes())
            if batch.job != number:
                raise msgspec.DecodeError(
                    f"a batch of file {batch.job} while storing file {number}"
                )
            if stale is None:
                stale = batch.file != file or _where_now(archive, path) != start
            if batch.end:
                return added + pending, bool(stale or batch.failed), True, batch.seen
            if not stale:
                try:
                    pending += archive.add_lines(
                        str(path),
                        batch.offset,
                        batch.lines,
                        rewritten=start[1] and batch.offset == 0,
                        last_terminated=batch.terminated,
                        prepared=batch.parsed if len(batch.parsed) == len(batch.lines) else None,
                    )
                # another process changed the archive of this file meanwhile: archived here (the
                # group's steps since its last commit went with the failed one)
                except ArchiveGap:
                    stale, pending = True, 0
                else:
                    if group.wrote(sum(map(len, batch.lines)) + len(batch.lines)):
                        added, pending = added + pending, 0
    except (EOFError, OSError, msgspec.DecodeError):
        return added + pending, True, False, None


def _read(
    sender: Connection,
    jobs: Connection,
    parents: tuple[Connection, Connection],
    fs: RetryingFS,
) -> None:
    """The reader: for each job, send the file's batches with what `parse` takes from each line,
    then its end (failed, when reading it failed); exit when the jobs end. Any other error: exit 1
    (the parent goes on alone). Its copies of the parent's ends of the pipes (`parents`) are closed
    first: when the parent dies, even by SIGKILL, the next send or wait for a job fails and the
    reader exits (riffd.forking.as_child)."""
    as_child(*parents)
    encode = msgspec.msgpack.Encoder().encode
    try:
        while (job := _decode_job(jobs.recv_bytes())) is not None:
            try:
                end = _send_file(sender, encode, job, fs)
            except OSError:
                end = Batch(job.number, end=True, failed=True)
            sender.send_bytes(encode(end))
    except BaseException:
        os._exit(1)
    os._exit(0)


def _send_file(
    sender: Connection, encode: Callable[[Any], bytes], job: Job, fs: RetryingFS
) -> Batch:
    """Send the batches of the job's file, each naming the file read (one open of it: a file
    renamed over the name meanwhile is read whole or not at all); return the job's end, with the
    file's size and time once read. Raise OSError when reading fails."""
    fd = fs.open_file(job.path)
    try:
        opened = fs.fstat(fd)
        file = (opened.st_dev, opened.st_ino)
        for offset, lines, terminated in iter_chunks(job.path, fs=fs, start=job.start, fd=fd):
            # every user prompt: `add_lines` takes the first of the lines it stores
            parsed = [parse(raw, True) for raw in lines]
            try:
                message = encode(Batch(job.number, offset, lines, parsed, terminated, file=file))
            # a text with a lone surrogate (an escape JSON allows): parsed there
            except UnicodeEncodeError:
                message = encode(Batch(job.number, offset, lines, [], terminated, file=file))
            sender.send_bytes(message)
        read = fs.fstat(fd)
        return Batch(job.number, end=True, file=file, seen=(read.st_size, read.st_mtime_ns))
    finally:
        close_read(fs, fd)
