"""`riffd fix` killed with SIGKILL at random moments: the transcript is the original or the full
repair."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import damage
from helpers.run import start_riffd

SESSION = "5e55104e-0000-4000-8000-00000000c0de"


def damaged_session() -> bytes:
    """A generated session of a few MB with three resumed-session duplicates (transcript-format
    4b)."""
    lines = damage.generated_session(segments=6, turns=120, parallel=3, session_id=SESSION)
    pad = "x" * 2000
    lines = [line.replace(b'"text":"', b'"text":"' + pad.encode(), 1) for line in lines]
    for pick in (5, 60, 200):
        lines = damage.inject_resumed_duplicate(
            lines, lambda points, k=pick: points[k % len(points)]
        ).lines
    return b"".join(lines)


def run_fix(workdir: Path) -> subprocess.Popen[bytes]:
    environment = {
        "CLAUDE_CONFIG_DIR": str(workdir / "claude"),
        "RIFFD_STATE_DIR": str(workdir / "state"),
    }
    return start_riffd(
        "fix",
        "--quiet-period",
        "0",
        str(transcript(workdir)),
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def transcript(workdir: Path) -> Path:
    return workdir / "claude" / "projects" / "-home-user-project" / f"{SESSION}.jsonl"


def prepare(workdir: Path, data: bytes) -> Path:
    path = transcript(workdir)
    path.parent.mkdir(parents=True)
    (workdir / "claude" / "sessions").mkdir()
    path.write_bytes(data)
    return path


def verified_backups(workdir: Path, sha256: str) -> list[Path]:
    """Backups whose manifest names `sha256` and whose data really decompresses to it."""
    found = []
    for manifest in (workdir / "state" / "backups").glob("*.json"):
        record = json.loads(manifest.read_text())
        data = manifest.with_suffix(".gz")
        if (
            record["sha256"] == sha256
            and hashlib.sha256(gzip.decompress(data.read_bytes())).hexdigest() == sha256
        ):
            found.append(data)
    return found


@pytest.mark.slow
def test_sigkill_during_fix_leaves_original_or_complete_repair(tmp_path: Path) -> None:
    original = damaged_session()
    original_sha = hashlib.sha256(original).hexdigest()

    calibration = tmp_path / "calibration"
    path = prepare(calibration, original)
    began = time.monotonic()
    assert run_fix(calibration).wait(timeout=120) == 0
    duration = time.monotonic() - began
    repaired = path.read_bytes()
    assert repaired != original and len(repaired) < len(original)

    rng = random.Random(20261122)
    seen = {"original": 0, "repaired": 0}
    deadline = time.monotonic() + 45
    rounds = 0
    while rounds < 25 and time.monotonic() < deadline:
        rounds += 1
        workdir = tmp_path / f"round{rounds}"
        path = prepare(workdir, original)
        child = run_fix(workdir)
        time.sleep(rng.uniform(0.05, duration * 1.05))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        data = path.read_bytes()
        assert data in (original, repaired), (
            f"round {rounds}: the transcript is neither original nor repaired"
        )
        if data == repaired:
            seen["repaired"] += 1
            assert verified_backups(workdir, original_sha), (
                f"round {rounds}: changed without a verified backup"
            )
        else:
            seen["original"] += 1
        assert not [
            name
            for name in os.listdir(path.parent)
            if name != path.name and name.endswith(".jsonl")
        ]
        # The next run finishes the job from whatever the kill left.
        assert run_fix(workdir).wait(timeout=120) == 0
        assert path.read_bytes() == repaired
        assert os.listdir(path.parent) == [path.name]
    assert rounds >= 8
    assert seen["original"] > 0, seen
