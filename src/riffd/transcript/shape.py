"""Whether a file is a Claude Code transcript: riffd edits only the files it recognises as one.

A file under the roots named `*.jsonl` may be anything: another tool's JSON Lines, a binary file, a
transcript of something else. Repairing such a file by Claude Code's rules would cut its last line
as "torn" or drop lines as duplicates. The rule, cheap because the scan has read the file already
(shared/transcript-format.md, section 2):

- some line is a Claude Code record: a JSON object whose `type` is a conversation type (user,
  assistant, system, attachment, progress) with a string `uuid`, a string `sessionId` and a
  `parentUuid` (a string or null);
- and the file is mostly such text: lines that are not JSON are fewer than the lines with a uuid.

The first test reads a few lines by offset (the index knows which lines are user or assistant
messages, and which have a uuid); a file with no line that has both a uuid and a sessionId fails it
without any read.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from pathlib import Path

from riffd.claude_code.session_files import saved_output_folder
from riffd.transcript.index import MESSAGE, TranscriptIndex
from riffd.transcript.reader import parse_line

NOT_A_TRANSCRIPT = "not a Claude Code transcript"
CONVERSATION_TYPES = frozenset({"user", "assistant", "system", "attachment", "progress"})
SAMPLED_LINES = 8  # lines read to find one of Claude Code's shape
RECORD_SHAPE = (
    "a user, assistant, system, attachment or progress record with uuid, parentUuid and sessionId"
)


def transcript_doubt(
    index: TranscriptIndex, line_bytes: Callable[[int], bytes], path: str | Path | None = None
) -> str:
    """Given a finished index and a reader of its lines by index (and the file's `path`), return why
    the file is not recognised as a Claude Code transcript, or '' when it is. A file in a session's
    `tool-results/` is not, whatever its name: it is a saved tool output. Raise OSError when a line
    cannot be read."""
    if path is not None and saved_output_folder(Path(path)) is not None:
        return "it is in a session's `tool-results/` folder, which holds its saved tool outputs"
    lines = len(index)
    malformed = len(index.malformed)
    with_uuid = lines - index.uuids.count(None)
    if lines and malformed + index.metrics.blank_lines == lines:
        return f"none of its {lines} line(s) is JSON (a binary file, or text of another kind)"
    if index.session_id is None or not any(
        is_claude_record(line_bytes(line)) for line in _candidates(index, SAMPLED_LINES)
    ):
        return f"no line is a Claude Code record ({RECORD_SHAPE})"
    if malformed > with_uuid:
        return (
            f"{malformed} of its {lines} lines are not JSON, more than the {with_uuid} with a uuid"
        )
    return ""


def is_claude_record(raw: bytes) -> bool:
    """Whether one line (its bytes, a newline allowed) has the shape of a Claude Code conversation
    record."""
    record = parse_line(raw.rstrip(b"\r\n"))
    return (
        isinstance(record, dict)
        and isinstance(record.get("type"), str)
        and record["type"] in CONVERSATION_TYPES
        and isinstance(record.get("uuid"), str)
        and isinstance(record.get("sessionId"), str)
        and "parentUuid" in record
        and (record["parentUuid"] is None or isinstance(record["parentUuid"], str))
    )


def _candidates(index: TranscriptIndex, most: int) -> list[int]:
    """The first `most` lines (0-based) most likely to be Claude Code records: user and assistant
    messages (a line of a record type riffd does not know may have a uuid too), else lines with a
    uuid."""
    for wanted in (
        lambda line: index.flags[line] & MESSAGE,
        lambda line: index.uuids[line] is not None,
    ):
        found = list(islice(filter(wanted, range(len(index))), most))
        if found:
            return found
    return []
