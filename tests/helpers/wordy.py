"""Sessions of distinct texts for the archive's tests: every line a prompt or an answer of random
words, so packs fill with text that compresses as real text does and never repeats."""

from __future__ import annotations

import random
from pathlib import Path

import orjson

WORDS = [
    f"{a}{b}{c}"
    for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to")
    for b in ("ven", "dor", "lix", "mup")
    for c in ("a", "o", "ert", "ist", "umble")
]


def write_session(path: Path, lines: int, seed: int) -> bytes:
    """A session of `lines` prompts and answers with texts of random words (about 2 kB each, all
    distinct)."""
    rng = random.Random(seed)
    session = f"00000000-0000-4000-8000-{seed:012d}"
    parent = None
    out = bytearray()
    for number in range(lines):
        uuid = f"{seed:08d}-0000-4000-8000-{number:012d}"
        text = " ".join(rng.choices(WORDS, k=300))
        role = "user" if number % 2 == 0 else "assistant"
        record = {
            "type": role,
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": session,
            "cwd": "/home/u/proj",
            "timestamp": f"2026-03-01T10:{number // 60 % 60:02d}:{number % 60:02d}.000Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }
        out += orjson.dumps(record) + b"\n"
        parent = uuid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return bytes(out)
