"""A batch of fast-decoded records as columns: what the column path of the index builder reads,
and what a decoder process hands over (riffd.transcript.parallel_read) as msgpack.

`batch_columns` makes them from a batch's records; `records_of` makes the records again for the
line-by-line path when a batch cannot be added by columns (riffd.transcript.index_builder).
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, is_

import msgspec

from riffd.transcript.records import Record

_UUID, _PARENT, _TYPE = attrgetter("uuid"), attrgetter("parentUuid"), attrgetter("type")
# the types whose lines need more than columns
SPECIAL_TYPES = frozenset({"assistant", "user", "system"})


class Columns(msgspec.Struct, array_like=True, gc=False):
    """A batch of fast-decoded records as the column path reads them (`batch_columns`): every line's
    uuid and parent; the whole records of the user, assistant and system lines; the summaries'
    leaves; the first session id. Plain data, so a decoder process can hand it over (msgpack)."""

    uuids: list[str | None]
    parents: list[str | None]
    special: list[int]  # positions of the lines whose type is in SPECIAL_TYPES
    records: list[Record]  # their records
    # (position, leafUuid) of the lines without a uuid whose leafUuid is a string
    leaves: list[tuple[int, str]]
    # the first line with a uuid whose sessionId is a string, when wanted
    session: tuple[int, str] | None


def batch_columns(records: list[Record], want_session: bool = True) -> Columns:
    """The Columns of a batch of fast-decoded records (`want_session` False: the index knows its
    session id)."""
    uuids = list(map(_UUID, records))
    special = list(
        compress(range(len(records)), map(SPECIAL_TYPES.__contains__, map(_TYPE, records)))
    )
    leaves = [
        (position, leaf)
        for position in compress(range(len(records)), map(is_, uuids, repeat(None)))
        if type(leaf := records[position].leafUuid) is str
    ]
    session = (
        next(
            (
                (position, record.sessionId)
                for position, record in enumerate(records)
                if record.uuid and type(record.sessionId) is str
            ),
            None,
        )
        if want_session
        else None
    )
    return Columns(
        uuids,
        list(map(_PARENT, records)),
        special,
        [records[position] for position in special],
        leaves,
        session,
    )


def records_of(columns: Columns) -> list[Record]:
    """A batch's records as the index builder's line-by-line path reads them, made again from its
    Columns: the special lines' own records; for the others, their uuid, parent, leaf and the
    session id (all that path reads of a line that is not a user, assistant or system line: its
    type only tells it is none of those)."""
    records = [
        Record(uuid, parent) for uuid, parent in zip(columns.uuids, columns.parents, strict=True)
    ]
    for position, record in zip(columns.special, columns.records, strict=True):
        records[position] = record
    for position, leaf in columns.leaves:
        records[position].leafUuid = leaf
    if columns.session is not None:
        records[columns.session[0]].sessionId = columns.session[1]
    return records
