"""Repair plans: which lines of a transcript change, and how the new file is assembled.

A plan names lines by their place in the original file (number, byte offset, length) and says
what happens to each named line; every other byte of the file is copied as it is. Plans are
plain values: `planner` makes them from a scan, `writer` is the one module that writes them.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from riffd.transcript.findings import DEFAULT_REPAIRS, Finding, FindingClass
from riffd.transcript.scan import FileIdentity


@dataclass(frozen=True)
class LineSpan:
    """Where one line sits in the original file: 1-based number, byte offset, length with its
    newline."""

    number: int
    offset: int
    length: int

    @property
    def end(self) -> int:
        """Byte offset just after the line (its newline included, when it has one)."""
        return self.offset + self.length


@dataclass(frozen=True)
class RemoveLine:
    """Drop the line at `span`."""

    span: LineSpan
    reason: str


@dataclass(frozen=True)
class ReplaceLine:
    """Put `new_line` (which ends with a newline exactly when the original did) where `span` was."""

    span: LineSpan
    new_line: bytes
    reason: str


@dataclass(frozen=True)
class InsertLine:
    """Add `new_line` (newline-terminated) right after the line at `after`."""

    after: LineSpan
    new_line: bytes
    reason: str


Edit = RemoveLine | ReplaceLine | InsertLine


@dataclass(frozen=True)
class RepairPlan:
    """The edits that repair one file, the findings they address, and the file they were made
    for."""

    source: FileIdentity
    edits: tuple[Edit, ...]
    fixes: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what was left alone and why

    @property
    def is_empty(self) -> bool:
        """True when the plan changes nothing."""
        return not self.edits

    def segments(self) -> Iterator[tuple[int, int] | bytes]:
        """Yield the new file in order: (start, end) ranges to copy from the original, or new bytes.

        Ranges cover the original up to `source.size`; bytes appended after that are the writer's
        business (it carries them over unchanged).
        """
        yield from assemble(self.edits, self.source.size)


def _edit_key(edit: Edit) -> tuple[int, int]:
    # An insert sits right after the line it follows, so before any edit of the next line, which
    # starts at the same offset. A line is removed or replaced at most once.
    if isinstance(edit, InsertLine):
        return (edit.after.end, 0)
    return (edit.span.offset, 1)


def assemble(edits: tuple[Edit, ...] | list[Edit], size: int) -> Iterator[tuple[int, int] | bytes]:
    """Given edits and the original size, yield copy ranges and new bytes that make the new file.

    Raise ValueError when two edits touch the same line or an edit lies outside [0, size).
    """
    position = 0
    touched: set[int] = set()
    for edit in sorted(edits, key=_edit_key):
        if isinstance(edit, InsertLine):
            if edit.after.end > size or edit.after.end < position:
                raise ValueError(
                    f"insert after line {edit.after.number} is out of order or out of range"
                )
            if edit.after.end > position:
                yield (position, edit.after.end)
                position = edit.after.end
            yield edit.new_line
            continue
        span = edit.span
        if span.number in touched or span.offset < position or span.end > size:
            raise ValueError(
                f"edit of line {span.number} overlaps another edit or lies outside the file"
            )
        touched.add(span.number)
        if span.offset > position:
            yield (position, span.offset)
        if isinstance(edit, ReplaceLine):
            yield edit.new_line
        position = span.end
    if position < size:
        yield (position, size)


def render(original: bytes, plan_edits: tuple[Edit, ...] | list[Edit]) -> bytes:
    """Given the original bytes and edits, return the repaired bytes (for tests and small files)."""
    parts: list[bytes] = []
    for segment in assemble(plan_edits, len(original)):
        if isinstance(segment, bytes):
            parts.append(segment)
        else:
            parts.append(original[segment[0] : segment[1]])
    return b"".join(parts)


LineBytes = Callable[[int], bytes]


@dataclass(frozen=True)
class RepairOptions:
    """Which repairs run. `new_uuid` makes uuids for synthetic lines (tests pass a fixed one).

    `classes`: the finding classes to repair (the others are left alone, with a note).
    `answer_newest_message`: whether a tool_use of the latest turn (the last assistant message on
    the chain) may get a placeholder. Its tool may still be running under a Claude Code that does
    not register its sessions; a placeholder then becomes a duplicate when the real result arrives,
    so callers set this only for long-quiet files.
    """

    add_missing_results: bool = True
    answer_newest_message: bool = True
    classes: frozenset[FindingClass] = DEFAULT_REPAIRS
    new_uuid: Callable[[], str] = field(default=lambda: str(uuid_module.uuid4()))
