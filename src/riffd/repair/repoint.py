"""Where a line whose parent is lost should hang: the guess Claude Code makes, without its 5 s limit.

When a line's parent is missing, Claude Code (2.1.332, measured) attaches it to the line with the
newest timestamp not later than its own that is not on the chain yet (user, assistant, system or
attachment lines; never a progress line), but only if that line is at most 5 s older: a typed
prompt or a model reply is usually further apart, so the history is cut. riffd makes the same guess
with no age limit, and only where it is clear:

- the newest such line by time must also be the nearest before the orphan in the file;
- two lines with that newest timestamp: only when exactly one of them is not an ancestor of
  another (a command, its output and a meta line share one timestamp, chained: the tip is right);
- never for a compact summary (its lost parent was the compact boundary: it starts its segment);
- never to a line that hangs below the orphan (a loop).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import msgspec

from riffd.repair.plan import LineBytes
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.reader import parse_line

BRIDGE_SECONDS = 5.0  # Claude Code bridges a missing parent only to a line at most this much older
BRIDGE_TYPES = frozenset({"user", "assistant", "system", "attachment"})


class _Stamp(msgspec.Struct, gc=False):
    type: str | None = None
    timestamp: str | None = None
    isSidechain: bool | None = None  # the transcript's own spelling
    isCompactSummary: bool | None = None
    uuid: str | None = None


_decode_stamp = msgspec.json.Decoder(_Stamp).decode


@dataclass(frozen=True)
class LineStamp:
    """What the guess reads of a line: its type, its time, and whether it can be a parent at all."""

    type: str | None
    seconds: float | None
    sidechain: bool
    compact_summary: bool


def stamp_of(raw: bytes) -> LineStamp | None:
    """The LineStamp of one line's bytes, None when it is not a JSON object."""
    try:
        stamp = _decode_stamp(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        obj = parse_line(raw.rstrip(b"\r\n"))
        if not isinstance(obj, dict):
            return None
        stamp = _Stamp(
            obj.get("type") if isinstance(obj.get("type"), str) else None,
            obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None,
            obj.get("isSidechain") is True,
            obj.get("isCompactSummary") is True,
        )
    return LineStamp(
        stamp.type,
        seconds_of(stamp.timestamp),
        stamp.isSidechain is True,
        stamp.isCompactSummary is True,
    )


def seconds_of(timestamp: str | None) -> float | None:
    """An ISO-8601 timestamp in seconds, None when absent or not one."""
    if timestamp is None:
        return None
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Guess:
    """Where an orphan should hang (`target`, a line index), or why riffd does not guess (`why`);
    `bridged`: Claude Code itself makes this guess (the target is at most 5 s older)."""

    target: int | None
    why: str
    bridged: bool = False


class Stamps:
    """The LineStamps of an indexed file's lines, read once, when first needed."""

    def __init__(self, index: TranscriptIndex, fetch: LineBytes) -> None:
        self.index = index
        self.fetch = fetch
        self._stamps: dict[int, LineStamp] | None = None

    def all(self) -> dict[int, LineStamp]:
        """Line -> its stamp, for every line that holds the copy of its uuid Claude Code loads."""
        if self._stamps is None:
            index = self.index
            self._stamps = {}
            for line, uuid in enumerate(index.uuids):
                if uuid is not None and index.line_of_uuid.get(uuid) == line:
                    stamp = stamp_of(self.fetch(line))
                    if stamp is not None:
                        self._stamps[line] = stamp
        return self._stamps


def guess_parent(
    index: TranscriptIndex,
    stamps: Stamps,
    orphan: int,
    orphan_stamp: LineStamp,
    above: set[int],
    orphan_uuid: str | None,
) -> Guess:
    """The line the orphan at line `orphan` (whose stamp is `orphan_stamp`, whose uuid is
    `orphan_uuid`) should hang from, by the rules of the module; `above` are the lines already on
    the chain above it (they cannot be its parent)."""
    if orphan_stamp.compact_summary:
        return Guess(None, "it is a compact summary: it starts its segment")
    when = orphan_stamp.seconds
    if when is None:
        return Guess(None, "it has no timestamp")
    candidates = [
        (stamp.seconds, line)
        for line, stamp in stamps.all().items()
        if line != orphan
        and line not in above
        and stamp.type in BRIDGE_TYPES
        and not stamp.sidechain
        and stamp.seconds is not None
        and stamp.seconds <= when
    ]
    candidates = [
        (seconds, line)
        for seconds, line in candidates
        if not _hangs_below(index, line, orphan, orphan_uuid)
    ]
    if not candidates:
        return Guess(None, "no earlier line to hang it from")
    newest = max(seconds for seconds, _line in candidates)
    tied = [line for seconds, line in candidates if seconds == newest]
    tips = [line for line in tied if not any(_is_ancestor(index, line, other) for other in tied)]
    if len(tips) != 1:
        return Guess(None, f"{len(tips)} lines are equally near in time")
    target = tips[0]
    before = [line for _seconds, line in candidates if line < orphan]
    if not before or max(before) != target:
        return Guess(
            None,
            "the newest earlier line by time "
            f"(line {target + 1}) is not the nearest before it in the file",
        )
    return Guess(target, "", bridged=when - newest <= BRIDGE_SECONDS)


def _is_ancestor(index: TranscriptIndex, line: int, other: int) -> bool:
    """Whether `line` is an ancestor of `other` (bounded walk: a loop stops it)."""
    parents = index.parents
    seen: set[int] = set()
    current = parents[other]
    while current >= 0 and current not in seen:
        if current == line:
            return True
        seen.add(current)
        current = parents[current]
    return False


def _hangs_below(index: TranscriptIndex, line: int, orphan: int, orphan_uuid: str | None) -> bool:
    """Whether `line` hangs (at any depth) from the orphan: hanging the orphan from it would make
    a loop."""
    parents = index.parents
    seen: set[int] = set()
    current = line
    while current >= 0 and current not in seen:
        if current == orphan:
            return True
        seen.add(current)
        if parents[current] < 0:
            return orphan_uuid is not None and index.dangling.get(current) == orphan_uuid
        current = parents[current]
    return False
