"""Planning the repairs of the damage the field reports in lines and links (pure, like the planner).

- A torn record with a whole record glued after it (`glued_record`): the line becomes that record
  (the torn bytes before it are cut; the backup keeps them). If the record hung from the torn one,
  it is re-pointed by the guess of riffd.repair.repoint, which must agree with the parent the torn
  bytes name when they name one.
- A line whose parent is lost where the loaded conversation stops (`dangling_parent`): re-pointed by
  that guess (said to be a guess), never where it is unclear.
- Optional, what current clients do in memory, written to disk for older clients and other readers:
  characters that are not text to U+FFFD, a trailing thinking-only message dropped, a line that is
  not JSON and holds nothing a loaded line names dropped (NULs, a torn fragment), a line written
  again byte for byte dropped.
"""

from __future__ import annotations

import re

from riffd.repair.edits import Choices
from riffd.repair.plan import LineBytes, RepairOptions
from riffd.repair.repoint import Guess, Stamps, guess_parent, stamp_of
from riffd.transcript.characters import text_repaired
from riffd.transcript.findings import CUTS_HISTORY, Finding, FindingClass
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.reader import parse_line, split_glued
from riffd.transcript.scan import ScannedFile

CHARACTERS = frozenset(
    {FindingClass.LONE_SURROGATE, FindingClass.NUL_CHARACTER, FindingClass.INVALID_UTF8}
)
# The first key Claude Code writes (2.x): the parent a torn record's first bytes still name.
_TORN_PARENT = re.compile(rb'^[\x00\s]*\{\s*"parentUuid"\s*:\s*"([^"\\]+)"')


def plan_line_damage(
    scanned: ScannedFile, fetch: LineBytes, work: Choices, options: RepairOptions
) -> bool:
    """Add to `work` the repairs of glued records, lost parents and the optional classes; return
    whether the tree changed (a record split off, a parent re-pointed): the pairing of tool calls is
    then judged again only by the next scan."""
    index = scanned.index
    stamps = Stamps(index, fetch)
    enabled = options.classes
    by_class: dict[FindingClass, list[Finding]] = {}
    for finding in scanned.findings:
        by_class.setdefault(finding.cls, []).append(finding)
    # uuid of each record split off -> the line it hangs from once split (None: from no line)
    splits: dict[str, int | None] = {}
    held: set[str] = set()  # uuids of the records left glued: a line hanging from one waits too
    for finding in by_class.get(FindingClass.GLUED_RECORD, []):
        if FindingClass.GLUED_RECORD not in enabled:
            work.notes.append(f"glued record on line {finding.line} left alone: the class is off")
        elif _split(scanned, finding.line - 1, fetch, work, stamps, splits, held):
            work.fixes.append(finding)
    dangling = {
        finding.line - 1: finding for finding in by_class.get(FindingClass.DANGLING_PARENT, [])
    }
    for line, finding in dangling.items():
        if index.dangling.get(line) in splits:
            work.fixes.append(finding)  # the split brings its parent back
    cut = next((line for line, finding in dangling.items() if finding.detail == CUTS_HISTORY), None)
    repointed = False
    if cut is not None and FindingClass.DANGLING_PARENT not in enabled:
        work.notes.append(f"lost parent of line {cut + 1} left alone: the class is off")
    elif cut is not None:
        repointed = _repoint_chain(scanned, cut, dangling, (splits, held), stamps, fetch, work)
    _plan_optional(scanned, by_class, fetch, work, options)
    return bool(splits) or repointed


def _repoint_chain(
    scanned: ScannedFile,
    cut: int,
    dangling: dict[int, Finding],
    glued: tuple[dict[str, int | None], set[str]],
    stamps: Stamps,
    fetch: LineBytes,
    work: Choices,
) -> bool:
    """Follow the loaded conversation up from where it stops (`cut`), as it will be once the plan
    is made: past each record split off, re-pointing each line whose parent is lost while the
    guess is clear; return whether one was re-pointed. A line whose lost parent is a record left
    glued keeps it: that parent is in the file."""
    index = scanned.index
    splits, held = glued
    above = set(scanned.loaded.on_chain)
    line: int | None = cut
    changed = False
    while line is not None and line in dangling:
        missing = index.dangling[line]
        if missing in splits:  # the record split off is its parent: go on from where it hangs
            line = _next_cut(index, splits[missing], above)
            continue
        if missing in held:
            work.notes.append(
                f"lost parent of line {line + 1} left alone: it is the record glued in a line "
                "riffd leaves alone"
            )
            break
        stamp = stamp_of(fetch(line))
        if stamp is None:
            break
        guess = guess_parent(index, stamps, line, stamp, above, index.uuids[line])
        guess = _agrees_with_lost_record(scanned, missing, guess, fetch)
        if not _repoint(scanned, line, guess, work, "its parent is lost"):
            break
        changed = True
        work.fixes.append(dangling[line])
        line = _next_cut(index, guess.target, above)
    return changed


def _next_cut(index: TranscriptIndex, start: int | None, above: set[int]) -> int | None:
    """Walk up from `start` (adding the lines to `above`) to the next line whose parent is lost;
    None when the walk ends at a root or a line already seen."""
    line = -1 if start is None else start
    while line >= 0 and line not in above:
        above.add(line)
        if line in index.dangling:
            return line
        parent = index.parents[line]
        if parent < 0 and index.logical_line(line) is not None:
            parent = index.logical_line(line) or -1
        line = parent
    return None


def _split(
    scanned: ScannedFile,
    line: int,
    fetch: LineBytes,
    work: Choices,
    stamps: Stamps,
    splits: dict[str, int | None],
    held: set[str],
) -> bool:
    """Plan the split of the glued line `line` (noting in `splits` the record's uuid and the line it
    will hang from, in `held` the uuid of a record left glued); return whether it is split."""
    index = scanned.index
    raw = fetch(line)
    at = split_glued(raw.rstrip(b"\r\n"))
    record = parse_line(raw[at:].rstrip(b"\r\n")) if at else None
    if at is None or not isinstance(record, dict):
        work.notes.append(f"glued record on line {line + 1} left alone: it no longer splits")
        return False
    uuid = record.get("uuid")
    uuid = uuid if isinstance(uuid, str) else ""
    parent = record.get("parentUuid")
    hangs_from = index.line_of_uuid.get(parent) if isinstance(parent, str) else None
    guess = None
    if isinstance(parent, str) and hangs_from is None:
        stamp = stamp_of(raw[at:])
        if stamp is not None:
            guess = guess_parent(index, stamps, line, stamp, scanned.loaded.on_chain, uuid or None)
            guess = _agrees_with(scanned, raw[:at], guess)
    above = hangs_from if guess is None else guess.target
    looped = _loops_back(index, uuid, above, splits)
    if looped is not None:  # the glue hides a loop: riffd never edits one, so it stays hidden
        work.notes.append(
            f"glued record on line {line + 1} left alone: split off, it would close a parent loop "
            f"through line {looped + 1}, which riffd does not edit"
        )
        held.add(uuid)
        return False
    work.rewrite[line] = raw[at:]
    work.reasons[line] = (
        f"split off the torn record glued before it: the first {at} bytes cut (kept in the backup)"
    )
    if guess is not None and _repoint(scanned, line, guess, work, "it hung from the torn record"):
        hangs_from = guess.target
    splits[uuid] = hangs_from
    return True


def _loops_back(
    index: TranscriptIndex, uuid: str, start: int | None, splits: dict[str, int | None]
) -> int | None:
    """Walk up from `start`, the line a record split off would hang from, as the plan leaves the
    parents (records split before it hang from their lines): return the line whose lost parent is
    that record (the walk comes back to it: a loop), None when the walk ends elsewhere."""
    line = -1 if start is None else start
    seen: set[int] = set()
    while line >= 0 and line not in seen:
        seen.add(line)
        missing = index.dangling.get(line)
        if missing is None:
            line = index.parents[line]
        elif uuid and missing == uuid:
            return line
        else:
            found = splits.get(missing)
            line = -1 if found is None else found
    return None


def _agrees_with(scanned: ScannedFile, torn: bytes, guess: Guess) -> Guess:
    """`guess`, unless the torn record's first bytes name another parent that is a line here."""
    named = _TORN_PARENT.match(torn)
    if guess.target is None or named is None:
        return guess
    line = scanned.index.line_of_uuid.get(named.group(1).decode("utf-8", "replace"))
    if line == guess.target:
        return guess
    if line is None:
        return Guess(None, "the torn record names a parent that is no line of the file either")
    return Guess(None, f"the guess (line {guess.target + 1}) is not the line the torn record names")


def _agrees_with_lost_record(
    scanned: ScannedFile, missing: str, guess: Guess, fetch: LineBytes
) -> Guess:
    """`guess`, checked against a line that does not parse and holds the lost parent (a torn
    fragment of it), whose first bytes may name its own parent."""
    needle = b'"uuid":"' + missing.encode() + b'"'
    for line in scanned.index.malformed:
        raw = fetch(line)
        if needle in raw:
            return _agrees_with(scanned, raw, guess)
    return guess


def _repoint(scanned: ScannedFile, line: int, guess: Guess, work: Choices, why: str) -> bool:
    """Plan re-pointing `line` to the guessed parent; note why not when there is no guess."""
    if guess.target is None:
        work.notes.append(f"line {line + 1}: {why}, and riffd does not guess here: {guess.why}")
        return False
    target_uuid = scanned.index.uuids[guess.target] or ""
    how = (
        "Claude Code makes the same guess (within 5 s)"
        if guess.bridged
        else "Claude Code guesses only within 5 s and cut the history here"
    )
    reason = (
        f"{why}: re-pointed parentUuid to line {guess.target + 1} ({target_uuid}), the nearest "
        f"earlier line: a guess ({how})"
    )
    work.repoint[line] = target_uuid
    work.reasons[line] = "; ".join(filter(None, (work.reasons.get(line), reason)))
    return True


def _plan_optional(
    scanned: ScannedFile,
    by_class: dict[FindingClass, list[Finding]],
    fetch: LineBytes,
    work: Choices,
    options: RepairOptions,
) -> None:
    enabled = options.classes
    characters: dict[int, set[FindingClass]] = {}
    for cls in CHARACTERS & enabled:
        for finding in by_class.get(cls, []):
            characters.setdefault(finding.line - 1, set()).add(cls)
            work.fixes.append(finding)
    for line, classes in sorted(characters.items()):
        raw = work.rewrite.get(line) or fetch(line)
        work.rewrite[line] = text_repaired(raw, frozenset(classes))
        work.reasons[line] = "; ".join(
            filter(
                None,
                (
                    work.reasons.get(line),
                    "characters that are not text replaced by U+FFFD (as Claude Code sends them)",
                ),
            )
        )
    if FindingClass.THINKING_ONLY_TAIL in enabled:
        for finding in by_class.get(FindingClass.THINKING_ONLY_TAIL, []):
            for number in finding.lines:
                _drop(work, number - 1, "the answer after this thinking was never written")
            work.fixes.append(finding)
    if FindingClass.REPEATED_LINE in enabled:
        for finding in by_class.get(FindingClass.REPEATED_LINE, []):
            _drop(work, finding.line - 1, "a line written again byte for byte")
            work.fixes.append(finding)
    if FindingClass.MALFORMED_LINE in enabled:
        for finding in by_class.get(FindingClass.MALFORMED_LINE, []):
            raw = fetch(finding.line - 1)
            if re.search(rb'"uuid"\s*:\s*"', raw):  # a record's own id: more than a stray fragment
                work.notes.append(
                    f"line {finding.line} left alone: it does not parse but holds a record's uuid"
                )
                continue
            _drop(
                work, finding.line - 1, "a line that is not a JSON object, which Claude Code skips"
            )
            work.fixes.append(finding)


def _drop(work: Choices, line: int, why: str) -> None:
    work.remove_lines.add(line)
    work.reasons[line] = f"{why}: cut (kept in the backup)"
