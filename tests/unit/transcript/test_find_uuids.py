"""`find_uuids`: which wanted uuids are a line's own `uuid` in a subagent's session file, whichever
of its two searches (each uuid on its own, or one regular expression for many) it takes."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from riffd.transcript.external import FIND_EACH, find_uuids
from riffd.transcript.reader import CHUNK_SIZE


def _lines(rng: random.Random, count: int) -> list[dict[str, object]]:
    """Lines whose uuids appear in the lines before theirs too (as `next`) and after (as
    `parentUuid`); the m- ones only in text and a nested object's `uuid`."""
    lines: list[dict[str, object]] = []
    for number in range(count):
        uuid = f"u-{number:05d}"
        lines.append(
            {
                "type": rng.choice(["user", "assistant", "progress"]),
                "uuid": uuid,
                "parentUuid": lines[-1]["uuid"] if lines else None,
                "message": {"content": f"m-{number:05d} " + "x" * rng.randrange(3000)},
                "next": f"u-{number + 5:05d}",  # the uuid of a line further on
                "data": {"uuid": f"m-{number:05d}"},  # a mention that is not the line's uuid
            }
        )
    return lines


@pytest.mark.parametrize("wanted_count", sorted({3, FIND_EACH, FIND_EACH + 1, 12}))
def test_finds_exactly_the_uuids_of_lines_whichever_search_it_takes(
    tmp_path: Path, wanted_count: int
) -> None:
    rng = random.Random(wanted_count)
    lines = _lines(rng, 1500)  # past one read chunk, so lines straddle reads
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    assert path.stat().st_size > 2 * CHUNK_SIZE
    own = [f"u-{number:05d}" for number in rng.sample(range(1500), wanted_count - 2)]
    # with a uuid mentioned only in text and in a nested object, and one not in the file at all
    wanted = {*own, "m-00007", "nowhere"}
    assert len(wanted) == wanted_count
    found, end = find_uuids(path, wanted)
    assert found == set(own)
    assert end == path.stat().st_size
    # from a later line's start, only what lies after it
    start = sum(len(orjson.dumps(line)) + 1 for line in lines[:750])
    later, _ = find_uuids(path, wanted, start=start)
    assert later == {uuid for uuid in own if int(uuid[2:]) >= 750}
