"""The archive finds every piece of content of a line, however the JSON is written: with spaces
after colons (JSON other tools write, or an edited file), with other escapes, or with a value whose
bytes occur twice in the line (a tool result also in its `toolUseResult`). Each is searchable with
the real `riffd archive search`, cut out of a later copy, and restored byte for byte."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest

from conftest import CORPUS_DIR, corpus_transcripts, requires_corpus, write_config
from helpers.run import run_riffd
from riffd.archive.contents import parse, pieces_of
from riffd.transcript.reader import parse_line

SESSION = "33333333-4444-5555-6666-777777777777"


def _environment(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def _riffd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_riffd(*args, config=write_config(tmp_path), env=_environment(tmp_path), timeout=180)


def _search(tmp_path: Path, word: str) -> list[dict[str, object]]:
    result = _riffd(tmp_path, "archive", "search", word, "--json")
    assert result.returncode in (0, 1), result.stderr
    hits: list[dict[str, object]] = orjson.loads(result.stdout)
    return hits


def _contents(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "state" / "archive.db") as db:
        count = int(db.execute("SELECT COUNT(*) FROM contents").fetchone()[0])
    db.close()
    return count


def _lines(session: str) -> list[bytes]:
    """A user prompt written with spaces (Python's json.dumps), a tool call, its result held twice
    (in the block and in `toolUseResult`, the same bytes), two identical text blocks in one message,
    and a text with \\u escapes."""
    base = {"sessionId": session, "cwd": "/home/user/app", "timestamp": "2025-04-01T10:00:00Z"}
    result = [{"type": "text", "text": "the okapi report: " + "long output " * 20}]
    return [
        json.dumps(
            {
                **base,
                "type": "user",
                "uuid": f"{session}-1",
                "message": {"role": "user", "content": "please count the zebrafinch nests"},
            }
        ).encode(),
        orjson.dumps(
            {
                **base,
                "type": "assistant",
                "uuid": f"{session}-2",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "Bash",
                            "input": {"command": "count nests", "description": "for the pangolin"},
                        }
                    ],
                },
            }
        ),
        orjson.dumps(
            {
                **base,
                "type": "user",
                "uuid": f"{session}-3",
                "toolUseResult": {"content": result},
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": result}
                    ],
                },
            }
        ),
        orjson.dumps(
            {
                **base,
                "type": "assistant",
                "uuid": f"{session}-4",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "narwhal"},
                        {"type": "text", "text": "narwhal"},
                    ],
                },
            }
        ),
        json.dumps(
            {
                **base,
                "type": "assistant",
                "uuid": f"{session}-5",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "caf\u00e9 au lait for the quetzal"}],
                },
            },
            indent=1,
        )
        .replace("\n", "")
        .encode(),
    ]


def test_search_finds_json_with_spaces_and_pieces_whose_bytes_occur_twice(tmp_path: Path) -> None:
    """Before, none of these words was found: the prompt written with spaces, the tool result held
    twice in its line, the escaped text; and a second session holding the same pieces restores byte
    for byte with them cut out."""
    project = tmp_path / "claude" / "projects" / "-home-user-app"
    project.mkdir(parents=True)
    first = project / f"{SESSION}.jsonl"
    first.write_bytes(b"\n".join(_lines(SESSION)) + b"\n")
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    for word, line in (
        ("zebrafinch", 1),
        ("pangolin", 2),
        ("okapi", 3),
        ("narwhal", 4),
        ("quetzal", 5),
        ("café", 5),
    ):
        hits = _search(tmp_path, word)
        assert [(hit["session_id"], hit["line"]) for hit in hits] == [(SESSION, line)], word
    assert "the okapi report" in str(_search(tmp_path, "okapi")[0]["snippet"])
    # a tool call's input: its JSON, as it was indexed (it showed an empty snippet)
    ((line, shown),) = [(hit["line"], hit["snippet"]) for hit in _search(tmp_path, "pangolin")]
    assert line == 2 and str(shown).endswith('nests","description":"for the pangolin"}')
    contents = _contents(tmp_path)
    # the prompt, the tool input, the result, its toolUseResult, narwhal (once), the escaped text
    assert contents == 6

    other = "44444444-5555-6666-7777-888888888888"
    second = project / f"{other}.jsonl"  # a resumed copy: the same contents, another session
    second.write_bytes(first.read_bytes().replace(SESSION.encode(), other.encode()))
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    # every piece of the copy was found, and cut out of its line
    assert _contents(tmp_path) == contents
    originals = {path: path.read_bytes() for path in (first, second)}
    for path in originals:
        path.unlink()
    for session in (SESSION, other):
        assert _riffd(tmp_path, "archive", "restore", session).returncode == 0
    assert {path: path.read_bytes() for path in originals} == originals


@requires_corpus
@pytest.mark.parametrize("indent", [None, 1], ids=["spaces", "indented"])
@pytest.mark.slow
def test_real_lines_written_by_another_json_writer_keep_their_pieces_and_restore(
    tmp_path: Path, indent: int | None
) -> None:
    """Every real line written again by Python's json (spaces after `:` and `,`, non-ASCII as \\u
    escapes; indented then joined into one line) gives a piece wherever the line as Claude Code
    wrote it does, with the same text; and the archive of those lines restores byte for byte."""
    rewritten = tmp_path / "projects" / "-home-user-other"
    rewritten.mkdir(parents=True)
    for source in corpus_transcripts():
        lines = []
        for raw in source.read_bytes().splitlines():
            obj = parse_line(raw)
            if not isinstance(obj, dict):
                continue
            again = json.dumps(obj, indent=indent).replace("\n", "").encode()
            found = [piece.text for piece in pieces_of(again, obj, 1)]
            assert found == [piece.text for piece in pieces_of(raw, obj, 1)], raw[:200]
            assert len(parse(again, False).pieces or ()) == len(found)
            lines.append(again)
        name = "_".join(source.relative_to(CORPUS_DIR).parts)
        (rewritten / name).write_bytes(b"\n".join(lines) + b"\n")
    shutil.copytree(rewritten, tmp_path / "claude" / "projects" / "-home-user-other")
    written = {path.name: path.read_bytes() for path in rewritten.iterdir()}
    assert _riffd(tmp_path, "archive", "ingest").returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    for name in written:
        result = _riffd(
            tmp_path,
            "archive",
            "restore",
            str(tmp_path / "claude" / "projects" / "-home-user-other" / name),
            "--to",
            str(out),
        )
        assert result.returncode == 0, result.stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == written
