"""Building a transcript index: lines in, per-line columns and maps out (the hot path of every
scan).

An `IndexBuilder` fills one `TranscriptIndex` (riffd.transcript.index) from the lines in file order
and keeps what only building needs: the children waiting for a parent not read yet, the last node
line, the tool ids each batch named (for incremental detection), the observer of message lines.
`finish` resolves what needs the whole file and returns the index; lines may be added after it
(the daemon feeds appends so). A batch of lines is decoded in one go by the fast decoder
(riffd.transcript.records) and, when nothing in it depends on the order of its lines, added column
by column with C-level passes (`_add_columns`, riffd.transcript.columns); otherwise line by line
(`_add_each`, the reference, which `tests/test_records.py` holds the column path to).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import accumulate, chain, compress, repeat
from operator import add, ge, is_
from typing import Any

from riffd.transcript.blocks import MessageLines
from riffd.transcript.characters import character_damage, has_nul_escape
from riffd.transcript.columns import Columns, batch_columns, records_of
from riffd.transcript.findings import Finding, FindingClass, api_error_for, torn_tail
from riffd.transcript.index import (
    ASSISTANT,
    COMPACT_BOUNDARY,
    DANGLING,
    LOCAL_COMMAND,
    MESSAGE,
    NO_PARENT,
    UNRESOLVED,
    TranscriptIndex,
)
from riffd.transcript.reader import Unparsed, parse_line
from riffd.transcript.records import Message, Record, fast_records, read_record, record_of

_MESSAGE_TYPES = frozenset({"assistant", "user"})
_NO_GROUPS = array("i", [-1]) * 4096

# (line index, parsed record) of a user or assistant message line, as it is added.
Observer = Callable[[int, dict[str, Any]], None]


class IndexBuilder:
    """Fills the index of one transcript from its lines, in file order; `finish` returns it."""

    def __init__(
        self,
        path: str,
        start: int = 0,
        *,
        observe: Observer | None = None,
        reference_parse: bool = False,
    ) -> None:
        self.index = TranscriptIndex(path, start)
        # Called with (line index, parsed record) for every user and assistant message line as it is
        # added: how the daemon feeds the tool-call tracker without parsing lines twice. None in
        # plain scans.
        self.observe = observe
        # True: parse every line whole and add lines one by one: the slow reference the tests hold
        # the fast decoder and the column path to.
        self.reference_parse = reference_parse
        # (line index, tool id) of every tool_use and tool_result block added while this is a list:
        # how incremental detection (riffd.transcript.incremental) learns which ids an append names.
        # None in scans.
        self.blocks = MessageLines(self.index)
        self._pending: dict[str, list[int]] = {}  # a parent uuid not read yet -> its children
        # the last node line's uuid and line
        self._previous: tuple[str | None, int] = (None, NO_PARENT)
        # Parents found in the parent session's file (their children stay pending: see
        # resolve_external).
        self._external: set[str] = set()

    @property
    def tool_log(self) -> list[tuple[int, str]] | None:
        """(line index, tool id) of every tool_use and tool_result block added while this is a
        list: how incremental detection (riffd.transcript.incremental) learns which ids an append
        names. None in scans."""
        return self.blocks.tool_log

    @tool_log.setter
    def tool_log(self, log: list[tuple[int, str]] | None) -> None:
        self.blocks.tool_log = log

    def add(self, offset: int, raw: bytes, terminated: bool) -> None:
        """Record one line (its bytes without the newline) at `offset`; see add_lines."""
        self.add_lines(offset, [raw], terminated)

    def add_lines(self, offset: int, pieces: list[bytes], last_terminated: bool = True) -> int:
        """Record lines in file order: `pieces` are consecutive lines' bytes (no newline) starting
        at byte `offset`, each followed by a newline except, when `last_terminated` is False, the
        last. Return the offset after them.

        This is the hot path of every scan. A batch is decoded in one go by the fast decoder
        (riffd.transcript.records) and, when nothing in it depends on the order of its lines (no
        repeated uuid, no parent written after its child, no unusual line), added column by column
        (`_add_columns`); otherwise line by line (`_add_each`), which is the reference: both give
        the same index.
        """
        index = self.index
        offsets = index.offsets
        first_index = len(offsets)
        # Every line's offset at once: lines are contiguous, each followed by its newline.
        lengths = list(map(len, pieces))
        offsets.extend(accumulate(chain((offset,), map(add, lengths[:-1], repeat(1)))))
        terminated_to = first_index + (len(pieces) if last_terminated else len(pieces) - 1)
        suspects: Any = range(len(pieces))  # lines that may hold characters that are not text
        if self.reference_parse:  # every line parsed whole, added one by one: the reference
            objs = list(map(parse_line, pieces))
            self._add_each(
                [record_of(obj) if isinstance(obj, dict) else obj for obj in objs],
                first_index,
                terminated_to,
                objs,
            )
        elif self.observe is not None:
            # the daemon's tracker wants each message line whole: parse those whole
            fast = fast_records(pieces)
            if fast is not None:
                suspects = () if not has_nul_escape(pieces, fast) else suspects
            records: list[Any] = fast or list(map(read_record, pieces))
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
            else:
                suspects = () if not has_nul_escape(pieces, fast) else suspects
                if not self._add_columns(
                    batch_columns(fast, index.session_id is None), first_index
                ):
                    self._add_each(fast, first_index, terminated_to, None)
        if suspects:
            self._check_characters(first_index, pieces, suspects)
        offset += sum(lengths) + len(pieces)
        if pieces and not last_terminated:
            offset -= 1
            index.metrics.unterminated_last_line = True
        index.end = offset
        return offset

    def _check_characters(self, first_index: int, pieces: list[bytes], suspects: Any) -> None:
        """Report the characters that are not text in the lines of a batch just added (those
        `suspects` names: positions in `pieces`), lines that parsed as records only."""
        index = self.index
        uuids, flags = index.uuids, index.flags
        malformed = set(index.malformed[-len(pieces) :])
        for position in suspects:
            raw = pieces[position]
            line = first_index + position
            if line in malformed or not raw.strip():
                continue
            user = flags[line] & (MESSAGE | ASSISTANT) == MESSAGE
            for cls, what in character_damage(raw, user):
                index.line_findings.append(
                    Finding(
                        cls,
                        index.path,
                        (line + 1,),
                        f"line {line + 1} holds {what}: Claude Code sends U+FFFD in its place "
                        "(older clients were refused by the API); it is kept as it is until repaired",
                        uuids=(uuids[line] or "",) if uuids[line] else (),
                        offset=index.offsets[line],
                        api_error=api_error_for(cls, None),
                    )
                )

    def add_columns(self, offset: int, lengths: list[int], columns: Columns) -> int:
        """Record a batch of whole lines (each followed by a newline) starting at byte `offset`,
        given as their lengths and `batch_columns` of their fast-decoded records (how
        riffd.transcript.parallel_read's decoder process hands over what it read); return the
        offset after them. The same index as `add_lines` of those lines."""
        index = self.index
        offsets = index.offsets
        first_index = len(offsets)
        offsets.extend(accumulate(chain((offset,), map(add, lengths[:-1], repeat(1)))))
        if not self._add_columns(columns, first_index):
            self._add_each(records_of(columns), first_index, first_index + len(lengths), None)
        index.end = offset + sum(lengths) + len(lengths)
        return index.end

    def finish(self) -> TranscriptIndex:
        """Resolve what needs all lines read so far (dangling parents, counts, the torn tail) and
        return the index.

        Lines may be added after `finish`, which may then be called again: parents still missing
        stay pending, so a parent that arrives later links up (the daemon feeds appends this way).
        """
        index = self.index
        for child in index.dangling:
            if index.parents[child] == DANGLING:
                index.parents[child] = UNRESOLVED
        index.dangling = {}
        for missing_parent, children in self._pending.items():
            if missing_parent in self._external:
                continue
            for child in children:
                index.parents[child] = DANGLING
                index.dangling[child] = missing_parent
        metrics = index.metrics
        metrics.lines = len(index.offsets)
        metrics.bytes = index.end - index.start
        metrics.blocks_processed = metrics.blocks_valid + metrics.blocks_invalid
        metrics.unique_tool_use_ids = len(index.tool_uses)
        findings = index.line_findings
        if findings and index.offsets and metrics.unterminated_last_line:
            for at in range(len(findings) - 1, -1, -1):  # the last line's finding is near the end
                tail = findings[at]
                if (
                    tail.line == len(index.offsets)
                    and tail.cls is FindingClass.MALFORMED_LINE
                    and tail.detail == "unterminated"
                ):
                    metrics.malformed_lines -= 1
                    findings[at] = torn_tail(index.path, tail.line, tail.offset)
                    break
        return index

    def resolve_external(self, known_uuids: set[str]) -> None:
        """Mark dangling parents found in `known_uuids` (the parent session's lines) as cross-file
        links.

        Subagent transcripts, compaction agents above all, start from lines of their parent session:
        such a parent is not missing, it lives in the session file.
        """
        index = self.index
        for parent in [
            parent
            for parent in self._pending
            if parent in known_uuids and parent not in self._external
        ]:
            # still pending: a line of this file with that uuid would be the parent
            self._external.add(parent)
            for child in self._pending[parent]:
                index.dangling.pop(child, None)
                index.parents[child] = NO_PARENT
                index.external_parent[child] = parent

    def _add_columns(self, columns: Columns, first_index: int) -> bool:
        """Add a batch column by column, if the order of its lines cannot matter: every uuid new and
        distinct, and every parent either absent, or a line before its child, or missing altogether.
        Return False, having changed nothing, when that does not hold."""
        index = self.index
        # str or None: the fast decoder's types (Any: compress drops the Nones)
        uuids: list[Any] = columns.uuids
        parent_uuids: list[Any] = columns.parents
        count = len(uuids)
        lines = range(first_index, first_index + count)
        if "" in uuids:
            return False
        line_of_uuid, pending = index.line_of_uuid, self._pending
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
            # no parentUuid, or not in the tree whatever its parentUuid says
            parents[position] = NO_PARENT
        if any(map(ge, parents, lines)):
            for uuid in node_uuids:
                line_of_uuid.pop(uuid, None)
            return False
        if UNRESOLVED in parents:
            for position in [
                position for position, parent in enumerate(parents) if parent == UNRESOLVED
            ]:
                pending.setdefault(parent_uuids[position], []).append(first_index + position)
        index.uuids.extend(uuids)  # before the message lines: their findings name their uuid
        index.parents.extend(parents)
        for position, leaf in columns.leaves:
            index.summary_leaf[first_index + position] = leaf
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
                        index.logical_parent[first_index + position] = record.logicalParentUuid
                elif record.subtype == "local_command":
                    flags[position] = LOCAL_COMMAND
            elif type(record.message) is Message:
                # the int the uuid map holds for this line, not a new one: the lists of tool ids and
                # groups share it
                flags[position], groups[position] = self.blocks.message_line(
                    line_of_uuid[record.uuid], record
                )
        if index.session_id is None and columns.session is not None:
            index.session_id = columns.session[1]
        index.flags.extend(flags)
        index.groups.extend(groups)
        if node_uuids:
            self._previous = (node_uuids[-1], line_of_uuid[node_uuids[-1]])
        return True

    def _add_each(
        self, records: list[Any], first_index: int, terminated_to: int, wholes: list[Any] | None
    ) -> None:
        """Add decoded lines one by one, in file order (the reference `_add_columns` must agree
        with). `records` hold a Record, None (blank) or Unparsed per line; `wholes` the parsed lines
        for the observer."""
        index = self.index
        flags_append, parents_append = index.flags.append, index.parents.append
        groups_append, uuids_append = index.groups.append, index.uuids.append
        line_of_uuid, pending, parents = index.line_of_uuid, self._pending, index.parents
        summary_leaf, logical_parent = index.summary_leaf, index.logical_parent
        forward_parents = index.forward_parents
        claim = line_of_uuid.setdefault
        find = line_of_uuid.get
        need_session = index.session_id is None
        observe = self.observe
        previous_uuid, previous_index = self._previous
        offsets = index.offsets
        line = first_index
        for record in records:
            if type(record) is not Record:
                self._add_unusual(line, offsets[line], record, line < terminated_to)
                line += 1
                continue
            uuid = record.uuid
            if type(uuid) is not str:
                flags_append(0)
                parents_append(NO_PARENT)
                groups_append(-1)
                uuids_append(None)
                leaf = record.leafUuid
                if type(leaf) is str:
                    summary_leaf[line] = leaf
                line += 1
                continue
            uuids_append(uuid)
            first = claim(uuid, line)
            if first != line:
                index.duplicate_uuid_lines.append((first, line))
            elif pending and uuid in pending:
                for child in pending.pop(uuid):
                    parents[child] = line
                    forward_parents.append(child)
                    index.external_parent.pop(child, None)
            parent = record.parentUuid
            if parent is None:
                parents_append(NO_PARENT)
            elif parent == previous_uuid:  # the usual case: the line just before; no lookup needed
                parents_append(previous_index)
            elif type(parent) is str:
                parent_line = find(parent)
                if parent_line is None:
                    parents_append(UNRESOLVED)
                    pending.setdefault(parent, []).append(line)
                else:
                    parents_append(parent_line)
                    if parent_line == line:
                        forward_parents.append(line)
            else:
                parents_append(NO_PARENT)
            previous_uuid, previous_index = uuid, first
            flags = 0
            group = -1
            line_type = record.type
            if line_type == "assistant" or line_type == "user":
                if type(record.message) is Message:
                    whole = wholes[line - first_index] if wholes is not None else None
                    if observe is not None and isinstance(whole, dict):
                        observe(line, whole)
                    flags, group = self.blocks.message_line(line, record)
            elif line_type == "system" and record.subtype == "compact_boundary":
                flags = COMPACT_BOUNDARY
                logical = record.logicalParentUuid
                if type(logical) is str:
                    logical_parent[line] = logical
            elif line_type == "system" and record.subtype == "local_command":
                flags = LOCAL_COMMAND
            if need_session and type(record.sessionId) is str:
                index.session_id = record.sessionId
                need_session = False
            flags_append(flags)
            groups_append(group)
            line += 1
        self._previous = (previous_uuid, previous_index)

    def _add_unusual(self, line: int, offset: int, obj: object, terminated: bool) -> None:
        """A blank line, a line that does not parse, or JSON that is not an object: kept, and
        reported."""
        index = self.index
        index.parents.append(NO_PARENT)
        index.groups.append(-1)
        index.uuids.append(None)
        index.flags.append(0)
        if obj is None:
            index.metrics.blank_lines += 1
            return
        index.malformed.append(line)
        reason = (
            obj.reason if isinstance(obj, Unparsed) else f"JSON {type(obj).__name__}, not an object"
        )
        index.metrics.malformed_lines += 1
        glued_at = obj.glued_at if isinstance(obj, Unparsed) else None
        if glued_at is not None and terminated:
            index.line_findings.append(
                Finding(
                    FindingClass.GLUED_RECORD,
                    index.path,
                    (line + 1,),
                    f"line {line + 1} is a torn record (or NULs) with a whole record glued after it "
                    f"at byte {glued_at} of the line: Claude Code skips the whole line, so that "
                    "record is lost to it and the history is cut there; `riffd fix` splits it off "
                    "(the torn part is kept in the backup)",
                    offset=offset,
                    detail=str(glued_at),
                )
            )
            return
        # Whether an unterminated malformed line is the torn tail is known only at `finish`.
        index.line_findings.append(
            Finding(
                FindingClass.MALFORMED_LINE,
                index.path,
                (line + 1,),
                f"line is {reason}; it is kept as it is",
                offset=offset,
                detail=None if terminated else "unterminated",
            )
        )
