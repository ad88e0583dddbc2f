"""Building a transcript index: lines in, per-line columns and maps out (the hot path of every
scan).

`TranscriptIndex` (riffd.transcript.index) is built by the methods here. A batch of lines is decoded
in one go by the fast decoder (riffd.transcript.records) and, when nothing in it depends on the
order of its lines, added column by column with C-level passes (`_add_plain`); otherwise line by
line (`_add_each`, the reference, which `tests/test_records.py` holds the column path to).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import accumulate, chain, compress, repeat
from operator import add, attrgetter, ge, is_
from typing import Any

import msgspec
from msgspec import UNSET

from riffd.transcript.findings import Finding, FindingClass
from riffd.transcript.reader import Unparsed, parse_line
from riffd.transcript.records import Block, Message, Record, fast_records, read_record, record_of

# Line flags. A line with a uuid is a node of the parent tree; others (metadata, bookkeeping,
# unknown record types, summaries, malformed and blank lines) are kept and have no parent.
SIDECHAIN = 1
COMPACT_BOUNDARY = 2
MESSAGE = 4  # a user or assistant line: a candidate for the newest leaf
ASSISTANT = 8

BLOCK_BITS = 32  # results are stored packed: line << BLOCK_BITS | block

# parents[] sentinels (>= 0 is the parent's line index).
NO_PARENT = -1
DANGLING = -2
UNRESOLVED = -3

# Columns of a batch of records (TranscriptIndex._add_plain).
_UUID, _PARENT, _TYPE = attrgetter("uuid"), attrgetter("parentUuid"), attrgetter("type")
_MESSAGE_TYPES = frozenset({"assistant", "user"})
_SPECIAL_TYPES = frozenset(
    {"assistant", "user", "system"}
)  # the types whose lines need more than columns
_NO_GROUPS = array("i", [-1]) * 4096

# The tool maps (tool id -> its lines, or packed result blocks) hold one value as the int itself and
# several as a list: almost every tool id has one use and one result, and a list of one costs 88
# bytes (10 MB on a 1 GB file). `lines_in` reads a value either way; `add_value` is the only writer.
Lines = int | list[int]


def lines_in(value: Lines | tuple[()]) -> list[int] | tuple[int, ...]:
    """The values a tool map holds for one id, as a sequence (pass `()` for an id it does not
    hold)."""
    return (value,) if type(value) is int else value  # type: ignore[return-value]


def add_value(mapping: dict[str, Lines], key: str, value: int) -> None:
    """Add `value` to `key`'s values in a tool map (see `lines_in`)."""
    entry = mapping.get(key)
    if entry is None:
        mapping[key] = value
    elif type(entry) is int:
        mapping[key] = [entry, value]
    else:
        entry.append(value)  # type: ignore[union-attr]


class Columns(msgspec.Struct, array_like=True, gc=False):
    """A batch of fast-decoded records as the column path reads them (`batch_columns`): every line's
    uuid and parent; the whole records of the user, assistant and system lines; the summaries'
    leaves; the first session id. Plain data, so a decoder process can hand it over (msgpack)."""

    uuids: list[str | None]
    parents: list[str | None]
    special: list[int]  # positions of the lines whose type is in _SPECIAL_TYPES
    records: list[Record]  # their records
    leaves: list[
        tuple[int, str]
    ]  # (position, leafUuid) of the lines without a uuid whose leafUuid is a string
    session: (
        tuple[int, str] | None
    )  # the first line with a uuid whose sessionId is a string, when wanted


def batch_columns(records: list[Record], want_session: bool = True) -> Columns:
    """The Columns of a batch of fast-decoded records (`want_session` False: the index knows its
    session id)."""
    uuids = list(map(_UUID, records))
    special = list(
        compress(range(len(records)), map(_SPECIAL_TYPES.__contains__, map(_TYPE, records)))
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
    """A batch's records as `_add_each` reads them, made again from its Columns: the special lines'
    own records; for the others, their uuid, parent, leaf and the session id (all `_add_each` reads
    of a line that is not a user, assistant or system line: its type only tells it is none of
    those)."""
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


class IndexBuilding:
    """The building half of TranscriptIndex (its attributes are made by
    TranscriptIndex.__init__)."""

    path: str
    end: int
    offsets: array[int]
    flags: bytearray
    parents: array[int]
    groups: array[int]
    uuids: list[str | None]
    line_of_uuid: dict[str, int]
    duplicate_uuid_lines: list[tuple[int, int]]
    external_parent: dict[int, str]
    logical_parent: dict[int, str]
    summary_leaf: dict[int, str]
    source_tool_line: dict[int, str]
    group_of_message: dict[str, int]
    group_lines: list[list[int]]
    tool_uses: dict[str, Lines]
    packed_results: dict[str, Lines]
    result_lines: list[int]
    malformed: list[int]
    line_findings: list[Finding]
    metrics: Any
    session_id: str | None
    uses_source_tool_field: bool
    _pending: dict[str, list[int]]
    _previous: tuple[str | None, int]
    forward_parents: list[int]
    observe: Callable[[int, dict[str, Any]], None] | None
    tool_log: list[tuple[int, str]] | None
    reference_parse: bool

    def add_lines(self, offset: int, pieces: list[bytes], last_terminated: bool = True) -> int:
        """Record lines in file order: `pieces` are consecutive lines' bytes (no newline) starting
        at byte `offset`, each followed by a newline except, when `last_terminated` is False, the
        last. Return the offset after them.

        This is the hot path of every scan. A batch is decoded in one go by the fast decoder
        (riffd.transcript.records) and, when nothing in it depends on the order of its lines (no
        repeated uuid, no parent written after its child, no unusual line), added column by column
        (`_add_plain`); otherwise line by line (`_add_each`), which is the reference: both give the
        same index.
        """
        offsets = self.offsets
        first_index = len(offsets)
        # Every line's offset at once: lines are contiguous, each followed by its newline.
        lengths = list(map(len, pieces))
        offsets.extend(accumulate(chain((offset,), map(add, lengths[:-1], repeat(1)))))
        terminated_to = first_index + (len(pieces) if last_terminated else len(pieces) - 1)
        if self.reference_parse:  # every line parsed whole, added one by one: the reference
            objs = list(map(parse_line, pieces))
            self._add_each(
                [record_of(obj) if isinstance(obj, dict) else obj for obj in objs],
                first_index,
                terminated_to,
                objs,
            )
        elif (
            self.observe is not None
        ):  # the daemon's tracker wants each message line whole: parse those whole
            records: list[Any] = fast_records(pieces) or list(map(read_record, pieces))
            wholes = [
                parse_line(raw)
                if type(record) is Record and record.type in _MESSAGE_TYPES
                else None
                for raw, record in zip(pieces, records, strict=True)
            ]
            self._add_each(records, first_index, terminated_to, wholes)
        else:
            fast = fast_records(pieces)
            if fast is None:
                self._add_each(list(map(read_record, pieces)), first_index, terminated_to, None)
            elif not self._add_plain(fast, first_index):
                self._add_each(fast, first_index, terminated_to, None)
        offset += sum(lengths) + len(pieces)
        if pieces and not last_terminated:
            offset -= 1
            self.metrics.unterminated_last_line = True
        self.end = offset
        return offset

    def _add_plain(self, records: list[Record], first_index: int) -> bool:
        """Add a batch of fast-decoded records column by column, if the order of its lines cannot
        matter (see `add_columns`). Return False, having changed nothing, when it can."""
        return self._add_columns(batch_columns(records, self.session_id is None), first_index)

    def add_columns(self, offset: int, lengths: list[int], columns: Columns) -> int:
        """Record a batch of whole lines (each followed by a newline) starting at byte `offset`,
        given as their lengths and `batch_columns` of their fast-decoded records (how
        riffd.transcript.parallel_read's decoder process hands over what it read); return the offset after
        them. The same index as `add_lines` of those lines."""
        offsets = self.offsets
        first_index = len(offsets)
        offsets.extend(accumulate(chain((offset,), map(add, lengths[:-1], repeat(1)))))
        if not self._add_columns(columns, first_index):
            self._add_each(records_of(columns), first_index, first_index + len(lengths), None)
        self.end = offset + sum(lengths) + len(lengths)
        return self.end

    def _add_columns(self, columns: Columns, first_index: int) -> bool:
        """Add a batch column by column, if the order of its lines cannot matter: every uuid new and
        distinct, and every parent either absent, or a line before its child, or missing altogether.
        Return False, having changed nothing, when that does not hold."""
        uuids: list[Any] = (
            columns.uuids
        )  # str or None: the fast decoder's types (Any: compress drops the Nones)
        parent_uuids: list[Any] = columns.parents
        count = len(uuids)
        lines = range(first_index, first_index + count)
        if "" in uuids:
            return False
        line_of_uuid, pending = self.line_of_uuid, self._pending
        node_uuids = list(compress(uuids, uuids))
        if pending and not pending.keys().isdisjoint(node_uuids):
            return False
        # This batch's lines in (setdefault: a uuid already there keeps its line, and says so), then
        # every parent looked up at once. A uuid not new, or written twice in the batch, or a parent
        # found at or after its child (a parent written later: its child waits, then links up, the
        # line-by-line order) and the batch is taken back out, for _add_each.
        node_lines = list(compress(lines, uuids))
        claimed = list(map(line_of_uuid.setdefault, node_uuids, node_lines))
        if claimed != node_lines:
            for uuid, first, line in zip(node_uuids, claimed, node_lines, strict=True):
                if first == line:  # put in by this batch
                    del line_of_uuid[uuid]
            return False
        parents = array("i", map(line_of_uuid.get, parent_uuids, repeat(UNRESOLVED)))
        for position in chain(
            compress(range(count), map(is_, uuids, repeat(None))),
            compress(range(count), map(is_, parent_uuids, repeat(None))),
        ):
            parents[position] = (
                NO_PARENT  # no parentUuid, or not in the tree whatever its parentUuid says
            )
        if any(map(ge, parents, lines)):
            for uuid in node_uuids:
                line_of_uuid.pop(uuid, None)
            return False
        if UNRESOLVED in parents:
            for position in [
                position for position, parent in enumerate(parents) if parent == UNRESOLVED
            ]:
                pending.setdefault(parent_uuids[position], []).append(first_index + position)
        self.uuids.extend(uuids)  # before the message lines: their findings name their uuid
        self.parents.extend(parents)
        for position, leaf in columns.leaves:
            self.summary_leaf[first_index + position] = leaf
        flags = bytearray(count)
        groups = (
            array("i", _NO_GROUPS[:count]) if count <= len(_NO_GROUPS) else array("i", [-1]) * count
        )
        for position, record in zip(columns.special, columns.records, strict=True):
            if record.uuid is None:
                continue
            if record.type == "system":
                if record.subtype == "compact_boundary":
                    flags[position] = COMPACT_BOUNDARY
                    if type(record.logicalParentUuid) is str:
                        self.logical_parent[first_index + position] = record.logicalParentUuid
            elif type(record.message) is Message:
                # the int the uuid map holds for this line, not a new one: the lists of tool ids and
                # groups share it
                flags[position], groups[position] = self._message_line(
                    line_of_uuid[record.uuid], record
                )
        if self.session_id is None and columns.session is not None:
            self.session_id = columns.session[1]
        self.flags.extend(flags)
        self.groups.extend(groups)
        if node_uuids:
            self._previous = (node_uuids[-1], line_of_uuid[node_uuids[-1]])
        return True

    def _add_each(
        self, records: list[Any], first_index: int, terminated_to: int, wholes: list[Any] | None
    ) -> None:
        """Add decoded lines one by one, in file order (the reference `_add_plain` must agree with).
        `records` hold a Record, None (blank) or Unparsed per line; `wholes` the parsed lines for
        the observer."""
        flags_append, parents_append = self.flags.append, self.parents.append
        groups_append, uuids_append = self.groups.append, self.uuids.append
        line_of_uuid, pending, parents = self.line_of_uuid, self._pending, self.parents
        claim = line_of_uuid.setdefault
        find = line_of_uuid.get
        need_session = self.session_id is None
        observe = self.observe
        previous_uuid, previous_index = self._previous
        offsets = self.offsets
        index = first_index
        for record in records:
            if type(record) is not Record:
                self._add_unusual(index, offsets[index], record, index < terminated_to)
                index += 1
                continue
            uuid = record.uuid
            if type(uuid) is not str:
                flags_append(0)
                parents_append(NO_PARENT)
                groups_append(-1)
                uuids_append(None)
                leaf = record.leafUuid
                if type(leaf) is str:
                    self.summary_leaf[index] = leaf
                index += 1
                continue
            uuids_append(uuid)
            first = claim(uuid, index)
            if first != index:
                self.duplicate_uuid_lines.append((first, index))
            elif pending and uuid in pending:
                for child in pending.pop(uuid):
                    parents[child] = index
                    self.forward_parents.append(child)
                    self.external_parent.pop(child, None)
            parent = record.parentUuid
            if parent is None:
                parents_append(NO_PARENT)
            elif parent == previous_uuid:  # the usual case: the line just before; no lookup needed
                parents_append(previous_index)
            elif type(parent) is str:
                parent_line = find(parent)
                if parent_line is None:
                    parents_append(UNRESOLVED)
                    pending.setdefault(parent, []).append(index)
                else:
                    parents_append(parent_line)
                    if parent_line == index:
                        self.forward_parents.append(index)
            else:
                parents_append(NO_PARENT)
            previous_uuid, previous_index = uuid, first
            flags = 0
            group = -1
            line_type = record.type
            if line_type == "assistant" or line_type == "user":
                if type(record.message) is Message:
                    whole = wholes[index - first_index] if wholes is not None else None
                    if observe is not None and isinstance(whole, dict):
                        observe(index, whole)
                    flags, group = self._message_line(index, record)
            elif line_type == "system" and record.subtype == "compact_boundary":
                flags = COMPACT_BOUNDARY
                logical = record.logicalParentUuid
                if type(logical) is str:
                    self.logical_parent[index] = logical
            if need_session and type(record.sessionId) is str:
                self.session_id = record.sessionId
                need_session = False
            flags_append(flags)
            groups_append(group)
            index += 1
        self._previous = (previous_uuid, previous_index)

    def _message_line(self, index: int, record: Record) -> tuple[int, int]:
        """Index a user or assistant line whose message is an object (its group, tool uses,
        results); return its (flags, group). Only messages can be the newest leaf, the one thing the
        sidechain flag decides."""
        message = record.message
        assert message is not None
        flags = (MESSAGE | SIDECHAIN) if record.isSidechain is True else MESSAGE
        group = -1
        content = message.content
        if record.type == "assistant":
            flags |= ASSISTANT
            message_id = message.id
            if type(message_id) is str:
                group_lines = self.group_lines
                group = self.group_of_message.setdefault(message_id, len(group_lines))
                if group == len(group_lines):
                    group_lines.append([index])
                else:
                    group_lines[group].append(index)
            if type(content) is list:
                tool_uses, tool_log = self.tool_uses, self.tool_log
                for block in content:
                    if type(block) is Block and block.type == "tool_use":
                        tool_id = block.id
                        if type(tool_id) is str and tool_id and not tool_id.isspace():
                            add_value(tool_uses, tool_id, index)
                            if tool_log is not None:
                                tool_log.append((index, tool_id))
        elif type(content) is list and self._index_results(index, content):
            source = record.sourceToolAssistantUUID
            if type(source) is str:
                self.uses_source_tool_field = True
                if source != record.parentUuid:
                    self.source_tool_line[index] = source
        return flags, group

    def add(self, offset: int, raw: bytes, terminated: bool) -> None:
        """Record one line (its bytes without the newline) at `offset`; see add_lines."""
        self.add_lines(offset, [raw], terminated)

    def _add_unusual(self, index: int, offset: int, obj: object, terminated: bool) -> None:
        """A blank line, a line that does not parse, or JSON that is not an object: kept, and
        reported."""
        self.parents.append(NO_PARENT)
        self.groups.append(-1)
        self.uuids.append(None)
        self.flags.append(0)
        if obj is None:
            self.metrics.blank_lines += 1
            return
        self.malformed.append(index)
        reason = (
            obj.reason if isinstance(obj, Unparsed) else f"JSON {type(obj).__name__}, not an object"
        )
        self._malformed(index, offset, reason, terminated)

    def _index_results(self, index: int, content: list[Any]) -> bool:
        found = False
        results = self.packed_results
        packed_line = index << BLOCK_BITS
        for position, block in enumerate(content):
            if type(block) is not Block:
                self._invalid_block(
                    index,
                    position,
                    "invalid_type",
                    f"content block is a JSON {type(block).__name__}, not an object",
                )
                continue
            if block.type != "tool_result":
                continue
            tool_id = block.tool_use_id
            if type(tool_id) is str and tool_id and not tool_id.isspace():
                add_value(results, tool_id, packed_line | position)
                self.metrics.blocks_valid += 1
                if self.tool_log is not None:
                    self.tool_log.append((index, tool_id))
                found = True
            elif tool_id is UNSET:
                self._invalid_block(index, position, "missing_field", "has no tool_use_id")
            elif type(tool_id) is not str:
                self._invalid_block(
                    index,
                    position,
                    "invalid_type",
                    f"tool_use_id is {type(tool_id).__name__}, not a string",
                )
            else:
                self._invalid_block(index, position, "missing_field", "tool_use_id is empty")
        if found:
            self.result_lines.append(index)
        return found

    def _invalid_block(self, index: int, position: int, kind: str, why: str) -> None:
        self.metrics.blocks_invalid += 1
        failures = self.metrics.failures_by_type
        failures[kind] = failures.get(kind, 0) + 1
        self.line_findings.append(
            Finding(
                FindingClass.INVALID_TOOL_RESULT,
                self.path,
                (index + 1,),
                f"tool_result block {position} {why}; it is kept as it is",
                uuids=(self.uuids[index] or "",),
                offset=self.offsets[index],
                detail=kind,
            )
        )

    def _malformed(self, index: int, offset: int, reason: str, terminated: bool) -> None:
        self.metrics.malformed_lines += 1
        # Whether an unterminated malformed line is the torn tail is known only at `finish`.
        self.line_findings.append(
            Finding(
                FindingClass.MALFORMED_LINE,
                self.path,
                (index + 1,),
                f"line is {reason}; it is kept as it is",
                offset=offset,
                detail=None if terminated else "unterminated",
            )
        )
