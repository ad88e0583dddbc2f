"""Indexing one big transcript on two cores: a decoder process reads and decodes its lines while
this one indexes.

In one process a scan spends about two thirds of its time reading, splitting and decoding lines and
one third adding them to the index, so a second process shares the work: the child reads the file
(riffd.transcript.reader.iter_chunks, with the same retries), decodes two batches in three with the
fast decoder and sends their Columns (riffd.transcript.columns) as msgpack; the third batch, a
batch the fast decoder declines and an unfinished last line it sends as the lines themselves, which
this process decodes. This process adds them all to the index in file order (`add_columns`,
`add_lines`): the same index as `index_file` builds alone, which tests/test_piped.py and
tests/test_records.py hold it to.

The child is forked, so it starts at once and shares what is loaded; it is used only where forking
is safe (riffd.forking.can_fork). Anything wrong with the child (it cannot start, it dies, a read
fails in it) and the file is indexed again here, which then meets the same error itself: the child
only ever saves time.
"""

from __future__ import annotations

import os
from array import array
from typing import TYPE_CHECKING

import msgspec

from riffd.forking import as_child, big_pipe, fork_context, reap
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.transcript.characters import has_nul_escape
from riffd.transcript.columns import Columns, batch_columns
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.reader import iter_chunks, retrying
from riffd.transcript.records import fast_records

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

PIPED_MIN_BYTES = 32_000_000  # smaller files are indexed in one process: a child would save little
# Every third batch the child sends as lines, for this process to decode: indexing a line costs
# about half what reading and decoding it does, so this balances the two cores. On the 1 GB session
# of bench/scan_bench.py, indexing took 1.18 s so, 1.45 s with the child decoding every batch, 1.28
# s with every second batch here.
PARENT_SHARE = 3


class Batch(msgspec.Struct, array_like=True, gc=False):
    """One batch of lines from the child: its first byte, then either its line lengths (array 'Q'
    bytes) and Columns, or the lines themselves (a batch the fast decoder declined, or an unfinished
    last line)."""

    offset: int
    lengths: bytes = b""
    columns: Columns | None = None
    lines: list[bytes] | None = None
    terminated: bool = True


class BatchEncoder:
    """The child's half: a batch of lines (as iter_chunks gives them, in file order) -> one message:
    its Columns, or its lines (every PARENT_SHARE-th batch, one the fast decoder declines, an
    unfinished last line)."""

    def __init__(self) -> None:
        self._encode = msgspec.msgpack.Encoder().encode
        self._want_session = True  # until a batch has given the first session id
        self._count = 0

    def encode(self, offset: int, lines: list[bytes], terminated: bool) -> bytes:
        self._count += 1
        records = fast_records(lines) if terminated and self._count % PARENT_SHARE else None
        if records is None or has_nul_escape(lines, records):  # this process reports the NULs
            return self._encode(Batch(offset, lines=lines, terminated=terminated))
        columns = batch_columns(records, self._want_session)
        self._want_session = self._want_session and columns.session is None
        return self._encode(Batch(offset, array("Q", map(len, lines)).tobytes(), columns))


_decode_batch = msgspec.msgpack.Decoder(Batch).decode


def add_batch(builder: IndexBuilder, message: bytes) -> None:
    """The parent's half: add one message of the child to the index."""
    batch = _decode_batch(message)
    if batch.columns is None:
        builder.add_lines(batch.offset, batch.lines or [], batch.terminated)
    else:
        builder.add_columns(batch.offset, array("Q", batch.lengths).tolist(), batch.columns)


def index_piped(
    path: str,
    *,
    fs: FileSystem = REAL_FILES,
    chunk_size: int,
) -> IndexBuilder | None:
    """Index `path` with a decoder process (see the module): return the builder fed with every
    line; None when that failed, for any reason (the caller then indexes it alone)."""
    context = fork_context()
    receiver, sender = big_pipe(context)
    child = context.Process(
        target=_decode,
        args=(sender, receiver, path, retrying(fs), chunk_size),
        daemon=True,
        name="riffd-decoder",
    )
    builder = IndexBuilder(path)
    complete = False  # the child's last message (empty) came: every batch is in
    try:
        child.start()
        sender.close()  # only the child writes: its exit ends the stream
        while data := receiver.recv_bytes():
            add_batch(builder, data)
        complete = True
    except (EOFError, OSError, msgspec.DecodeError):
        pass  # the child died, failed or could not start
    finally:
        receiver.close()
        sender.close()
        reap(child, None if complete else 0)
    return builder if complete else None


def _decode(
    sender: Connection,
    receiver: Connection,
    path: str,
    fs: RetryingFS,
    chunk_size: int,
) -> None:
    """The child: read `path`, send each batch, then an empty message; on any error exit 1 without
    it."""
    as_child(receiver)
    encoder = BatchEncoder()
    try:
        for offset, lines, terminated in iter_chunks(path, fs=fs, chunk_size=chunk_size):
            sender.send_bytes(encoder.encode(offset, lines, terminated))
        sender.send_bytes(b"")
    except BaseException:  # the parent reads the file again, and reports what goes wrong
        os._exit(1)
