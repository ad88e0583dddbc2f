"""What whole sessions cost the archive: the files Claude Code keeps beside the transcripts, stored
and measured.

Run by hand from the repository root (also part of bench/archive_bench.py, as its last section)::

    python3 bench/whole_bench.py            # about a minute
    python3 bench/whole_bench.py --json
    python3 bench/whole_bench.py --write docs/figures/whole.md  # the table the docs include

The corpus: every real session of `../shared/corpus/real` (with its subagents) and `--resumed` (3)
resumed copies of each, laid out as the client 2.1.332 lays out a session (transcript-format.md,
section 1), with the files beside them made as the client makes them:
- saved outputs, `<session>/tool-results/<short random id>.txt`: every tool result of 2,000
  characters or more in the session's lines (the client saves those over about 30,000; the real
  corpus has few), and two large outputs per session, as a `cat` of 3 to 8 source files of the
  interpreter's standard library and a `pytest -v` log of test names made from its functions (50
  to 300 kB); one of them read twice (the same bytes in a second file);
- checkpoints, `file-history/<session>/<hash>@v<N>`: 4 standard library source files per session,
  each in 2 or 3 versions a line apart (sessions pick from the same files, so some copies are in
  several sessions);
- a subagent's settings beside each subagent transcript, 3 task files, a plan.
The resumed copies get no files of their own (their history is a copy).

Measured: (1) the store rate: every file into a fresh archive, in this process, best of 3 (MB of
files per second, each file hashed once and, when new, read again while compressed at level 1), as
`riffd archive ingest` keeps them (its own loop: each file read and hashed outside any transaction,
then stored a hundred to a transaction) and, interleaved, one to a transaction (`WholeFiles.keep`,
as the daemon takes each once it settles), then, once, `WholeFiles.compact` as the daemon runs it
when quiet (level 17), of the corpus's files and of `--outputs-mb` (100) MB of distinct large saved outputs
(build and test logs, 2 MB each); (2) the storage: `riffd archive ingest` of the whole corpus (lines
and files, then compacted as the command does) against `gzip -6` of every file (the sum of `gzip -6
-c FILE` sizes; the real gzip binary), for the transcripts and the files apart too. MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import figures
import orjson

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000
SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _short_id(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(9))


def _tool_results(path: Path) -> list[str]:
    """The texts of a transcript's tool results of 2,000 characters or more."""
    found = []
    for raw in path.read_bytes().splitlines():
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        content = (line.get("message") or {}).get("content") if isinstance(line, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = block.get("content")
                text = text if isinstance(text, str) else orjson.dumps(text).decode()
                if len(text) >= 2000:
                    found.append(text)
    return found


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def stable_sources() -> tuple[list[Path], list[str]]:
    """The source files the corpus's saved outputs and checkpoints are cut from, and the test names
    its logs list: the interpreter's own standard library (its top-level modules of 2 to 16 kB, sized
    as riffd's own sources are: 8 kB on average; and a test name per function they define), the same
    from one riffd commit to the next (riffd's own sources made the corpus 209 to 217 files as the
    code changed, so figures compared across commits only roughly)."""
    sources = [
        path
        for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
        if 2_000 <= path.stat().st_size <= 16_000
    ]
    tests = [
        f"tests/test_{path.stem}.py::test_{name}"
        for path in sources
        for name in re.findall(r"^def (\w+)", path.read_text(errors="replace"), re.M)
    ]
    return sources, tests


def build(real: Path, claude: Path, resumed: int, seed: int) -> tuple[list[Path], list[Path]]:
    """Lay the corpus out under the config folder `claude`; return (the transcripts, the files kept
    whole)."""
    from archive_bench import resumed_copy

    rng = random.Random(seed)
    sources, tests = stable_sources()
    transcripts: list[Path] = []
    whole: list[Path] = []
    for source in sorted(real.rglob("*.jsonl")):
        if source.parent.name == "subagents":
            continue
        session = (
            source.stem
            if SESSION_ID.fullmatch(source.stem)
            else str(uuid.UUID(int=rng.getrandbits(128), version=4))
        )
        project = claude / "projects" / f"-real-{source.parent.name}"
        main = project / f"{session}.jsonl"
        _write(main, source.read_bytes())
        transcripts.append(main)
        folder = project / session
        agents = sorted((source.parent / source.stem / "subagents").glob("*.jsonl"))
        for agent in agents:
            copy = folder / "subagents" / agent.name
            _write(copy, agent.read_bytes())
            transcripts.append(copy)
            meta = copy.with_name(agent.stem + ".meta.json")
            _write(
                meta,
                orjson.dumps(
                    {"agentType": "general-purpose", "description": f"Agent {agent.stem}"}
                ),
            )
            whole.append(meta)
        outputs = [text.encode() for path in [source, *agents] for text in _tool_results(path)]
        cat = b"".join(path.read_bytes() for path in rng.sample(sources, rng.randint(3, 8)))[
            :300_000
        ]
        log = "".join(
            f"{rng.choice(tests)} PASSED [{rng.randrange(100):3d}%]\n"
            for _ in range(rng.randint(600, 3000))
        )
        outputs += [cat, log.encode(), cat]  # the `cat` read twice: the same bytes in a second file
        for data in outputs:
            path = folder / "tool-results" / f"{_short_id(rng)}.txt"
            _write(path, data)
            whole.append(path)
        for edited in rng.sample(sources, 4):
            text = edited.read_text().splitlines(keepends=True)
            name = hashlib.sha256(str(edited).encode()).hexdigest()[:16]
            for version in range(1, rng.randint(2, 3) + 1):
                if version > 1:
                    at = rng.randrange(len(text))
                    text[at] = f"# edited in version {version}\n"
                path = claude / "file-history" / session / f"{name}@v{version}"
                _write(path, "".join(text).encode())
                whole.append(path)
        for number in range(1, 4):
            path = claude / "tasks" / session / f"{number}.json"
            _write(
                path,
                orjson.dumps(
                    {
                        "id": str(number),
                        "subject": f"Task {number} of {session[:8]}",
                        "status": rng.choice(["pending", "completed"]),
                        "blocks": [],
                    }
                ),
            )
            whole.append(path)
        plan = claude / "plans" / f"plan-{session[:8]}.md"
        _write(
            plan,
            (
                "# Plan\n\n" + "".join(f"{step}. {rng.choice(tests)}\n" for step in range(1, 30))
            ).encode(),
        )
        whole.append(plan)
        for _ in range(resumed):
            copy, copy_id = resumed_copy(source.read_bytes(), rng)
            _write(project / f"{copy_id}.jsonl", copy)
            transcripts.append(project / f"{copy_id}.jsonl")
    return transcripts, whole


def gzip6(paths: list[Path]) -> int:
    """The sum of `gzip -6 -c FILE` sizes."""
    return sum(
        len(subprocess.run(["gzip", "-6", "-c", str(path)], capture_output=True, check=True).stdout)
        for path in paths
    )


def store_rate(claude: Path, whole: list[Path], work: Path, repeat: int = 3) -> dict[str, Any]:
    """Every file into a fresh archive, best of `repeat`: as `riffd archive ingest` keeps them (its
    `keep_whole_files`: a hundred to a transaction), and, interleaved with it, `WholeFiles.keep` of
    each, one to a transaction (as the daemon keeps each file once it settles)."""
    from riffd.archive.store import Archive
    from riffd.archive.wholefiles import TOGETHER_FILES
    from riffd.claude_code.session_files import classify
    from riffd.commands.archive_ingest import keep_whole_files

    found = [classify(path, [claude / "projects"], [claude]) for path in whole]
    assert all(found), "a file of the corpus is not one the archive keeps"
    size = sum(path.stat().st_size for path in whole)
    times: dict[str, list[float]] = {"together": [], "alone": []}
    stored = 0
    for attempt in range(repeat):
        for way, seconds in times.items():
            folder = work / f"store-{attempt}-{way}"
            folder.mkdir()
            archive = Archive(folder / "archive.db")
            started = time.perf_counter()
            if way == "together":  # the ingest's own loop
                errors: list[str] = []
                added = keep_whole_files(archive, [item for item in found if item], errors)
                assert not errors and added.added == len(found), (errors, added)
                stored = added.stored
            else:
                for item in found:
                    assert item is not None
                    archive.whole.keep(item)
            seconds.append(time.perf_counter() - started)
            if attempt == repeat - 1 and way == "together":
                # what the daemon does once quiet: the frames compressed again at the settled level
                started = time.perf_counter()
                archive.whole.compact()
                compact_seconds = time.perf_counter() - started
                compacted = archive.versions.stats()["stored_bytes"]
            archive.close()
            shutil.rmtree(folder)
    distinct = sum(len(data) for data in {path.read_bytes() for path in whole})
    return {
        "files": len(whole),
        "bytes": size,
        "distinct_bytes": distinct,
        "stored_bytes": stored,
        "seconds": round(min(times["together"]), 3),
        "mb_per_s": round(size / MB / min(times["together"]), 1),
        "alone_mb_per_s": round(size / MB / min(times["alone"]), 1),
        "together_files": TOGETHER_FILES,
        "compact_seconds": round(compact_seconds, 2),
        "compacted_bytes": compacted,
    }


def large_outputs(folder: Path, size_mb: float, seed: int) -> list[Path]:
    """Saved outputs of a heavy session: `size_mb` MB of distinct build and test logs, 2 MB each
    (lines of test names, durations and hex ids: text that compresses as real logs do, not
    repeats)."""
    rng = random.Random(seed)
    _sources, tests = stable_sources()
    paths = []
    for _output in range(max(1, int(size_mb / 2))):
        lines = [
            f"{rng.choice(tests)} {rng.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'])} "
            f"in {rng.random() * 3:.3f}s [{rng.getrandbits(40):010x}] worker gw{rng.randrange(8)}\n"
            for _ in range(2 * MB // 90)
        ]
        path = folder / f"{_short_id(rng)}.txt"
        _write(path, "".join(lines).encode()[: 2 * MB])
        paths.append(path)
        del lines
    return paths


def storage(claude: Path, transcripts: list[Path], whole: list[Path], work: Path) -> dict[str, Any]:
    """`riffd archive ingest` of the whole corpus; its size once closed against gzip -6 of every
    file."""
    state = work / "state"
    config = work / "riffd.toml"
    config.write_text(
        f'state_dir = "{state}"\nclaude_dir = "{claude}"\nroots = ["{claude / "projects"}"]\n'
    )
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RIFFD_CONFIG", "RIFFD_STATE_DIR", "CLAUDE_CONFIG_DIR")
    }
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "src"), environment.get("PYTHONPATH")])
    )
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "riffd", "--config", str(config), "archive", "ingest"],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(
            f"riffd archive ingest exited {result.returncode}: {result.stderr[-2000:]}"
        )
    from archive_bench import archive_size

    size = archive_size(state / "archive.db")
    lines_raw = sum(path.stat().st_size for path in transcripts)
    files_raw = sum(path.stat().st_size for path in whole)
    lines_gzip, files_gzip = gzip6(transcripts), gzip6(whole)
    blobs = sum(
        value
        for name, value in size["dbstat"].items()
        if name.startswith(("blob", "sqlite_autoindex_blob"))
    )
    return {
        "transcripts": len(transcripts),
        "files": len(whole),
        "raw_bytes": lines_raw + files_raw,
        "transcript_bytes": lines_raw,
        "file_bytes": files_raw,
        "gzip6_bytes": lines_gzip + files_gzip,
        "gzip6_transcript_bytes": lines_gzip,
        "gzip6_file_bytes": files_gzip,
        "archive_bytes": size["bytes"],
        "archive_blob_bytes": blobs,
        "ingest_seconds": round(seconds, 2),
        "ratio": round(size["bytes"] / (lines_gzip + files_gzip), 3),
        "dbstat": size["dbstat"],
    }


def measure(real: Path, resumed: int, seed: int, outputs_mb: float, work: Path) -> dict[str, Any]:
    """Build the corpus under `work`, measure, return the figures."""
    claude = work / "claude"
    transcripts, whole = build(real, claude, resumed, seed)
    result = {
        "store": store_rate(claude, whole, work),
        "storage": storage(claude, transcripts, whole, work),
    }
    heavy = claude / "projects" / "-heavy" / str(uuid.UUID(int=seed, version=4)) / "tool-results"
    outputs = large_outputs(heavy, outputs_mb, seed)
    result["store_large"] = store_rate(claude, outputs, work) | {"gzip6_bytes": gzip6(outputs)}
    return result


STORE_GOAL = 100.0  # MB/s (issue 31)


def _goal(rate: float) -> str:
    return f"goal >= {STORE_GOAL:.0f} MB/s: {'met' if rate >= STORE_GOAL else 'missed'}"


def render(result: dict[str, Any]) -> str:
    """The human lines."""
    store, row, large = result["store"], result["storage"], result["store_large"]
    return "\n".join(
        [
            f"whole files, store: {large['files']} distinct saved outputs of 2 MB, {large['bytes'] / MB:.0f} MB in "
            f"{large['seconds']:.2f} s: {large['mb_per_s']:.1f} MB/s ({_goal(large['mb_per_s'])}; "
            f"one to a transaction {large['alone_mb_per_s']:.1f}), "
            f"{large['stored_bytes'] / MB:.1f} MB stored "
            f"({large['stored_bytes'] / large['bytes']:.1%}; gzip -6 {large['gzip6_bytes'] / MB:.1f} MB, "
            f"{large['gzip6_bytes'] / large['bytes']:.1%}; best of 3, in this process); compacted once quiet "
            f"in {large['compact_seconds']:.1f} s to {large['compacted_bytes'] / MB:.1f} MB",
            f"whole sessions, store: {store['files']} files, {store['bytes'] / MB:.1f} MB "
            f"({store['distinct_bytes'] / MB:.1f} MB distinct) in {store['seconds']:.2f} s: {store['mb_per_s']:.1f} MB/s "
            f"({_goal(store['mb_per_s'])}; one to a transaction {store['alone_mb_per_s']:.1f} MB/s), "
            f"{store['stored_bytes'] / MB:.2f} MB stored (best of 3, in this process); compacted in "
            f"{store['compact_seconds']:.1f} s to {store['compacted_bytes'] / MB:.2f} MB",
            f"whole sessions, storage: {row['transcripts']} transcripts {row['transcript_bytes'] / MB:.1f} MB + "
            f"{row['files']} files {row['file_bytes'] / MB:.1f} MB = {row['raw_bytes'] / MB:.1f} MB; archive "
            f"{row['archive_bytes'] / MB:.2f} MB ({row['archive_bytes'] / row['raw_bytes']:.1%}; blobs "
            f"{row['archive_blob_bytes'] / MB:.2f} MB) against gzip -6 per file {row['gzip6_bytes'] / MB:.2f} MB "
            f"({row['gzip6_bytes'] / row['raw_bytes']:.1%}; transcripts {row['gzip6_transcript_bytes'] / MB:.2f}, files "
            f"{row['gzip6_file_bytes'] / MB:.2f}): ratio {row['ratio']:.2f} (goal < 1: "
            f"{'met' if row['ratio'] < 1 else 'missed'}); `riffd archive ingest` {row['ingest_seconds']:.1f} s",
        ]
    )


def markdown(result: dict[str, Any]) -> str:
    """The figures as the docs' table: the storage against gzip -6, then the store rates."""
    store, row, large = result["store"], result["storage"], result["store_large"]
    return figures.markdown_table(
        ("measure", "figure"),
        [
            (
                f"{row['transcripts']} transcripts ({row['transcript_bytes'] / MB:.1f} MB) and "
                f"{row['files']} files kept whole ({row['file_bytes'] / MB:.1f} MB): "
                "`riffd archive ingest`",
                f"**archive {row['archive_bytes'] / MB:.2f} MB** against gzip -6 per file "
                f"{row['gzip6_bytes'] / MB:.2f} MB ({row['gzip6_transcript_bytes'] / MB:.2f} of it the "
                f"transcripts, {row['gzip6_file_bytes'] / MB:.2f} the files): ratio {row['ratio']:.2f}",
            ),
            (
                "the files alone, in that archive",
                f"blobs {row['archive_blob_bytes'] / MB:.2f} MB against gzip -6 "
                f"{row['gzip6_file_bytes'] / MB:.2f} MB",
            ),
            (
                f"store rate, {large['bytes'] / MB:.0f} MB of distinct 2 MB saved outputs (build and "
                "test logs), as `riffd archive ingest` keeps them, in-process, best of 3",
                f"**{large['mb_per_s']:.1f} MB/s** ({_goal(large['mb_per_s'])}; one to a transaction "
                f"{large['alone_mb_per_s']:.1f} MB/s); {large['stored_bytes'] / MB:.1f} MB stored against "
                f"gzip -6 {large['gzip6_bytes'] / MB:.1f} MB; compacted once quiet (level 17) in "
                f"{large['compact_seconds']:.1f} s to {large['compacted_bytes'] / MB:.1f} MB",
            ),
            (
                f"store rate, the {store['files']} small files of the sessions",
                f"**{store['mb_per_s']:.1f} MB/s** ({_goal(store['mb_per_s'])}) as `riffd archive ingest` "
                f"stores them, {store['together_files']} to a transaction; one to a transaction, as the daemon takes "
                f"each once it settles: {store['alone_mb_per_s']:.1f} MB/s; "
                f"{store['stored_bytes'] / MB:.2f} MB stored, compacted in "
                f"{store['compact_seconds']:.1f} s to {store['compacted_bytes'] / MB:.2f} MB",
            ),
        ],
    )


def main(argv: list[str] | None = None) -> int:
    """Measure and print; return 0, or 1 when a measurement fails."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--real", type=Path, default=REPO.parent / "shared" / "corpus" / "real")
    parser.add_argument(
        "--resumed", type=int, default=3, help="resumed copies per real session; default 3"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--outputs-mb",
        type=float,
        default=100.0,
        help="MB of large saved outputs to store; default 100",
    )
    parser.add_argument("--tmp", type=Path, default=None, help="where the temporary folder is made")
    parser.add_argument(
        "--json", action="store_true", help="print the results as one JSON object on stdout"
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="FILE",
        help="also write the table the docs include (docs/figures/whole.md)",
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="riffd-whole-bench-", dir=args.tmp))
    try:
        result = measure(args.real.resolve(), args.resumed, args.seed, args.outputs_mb, work)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["command"] = " ".join(
        ["python3", "bench/whole_bench.py", *(argv if argv is not None else sys.argv[1:])]
    )
    print(render(result), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result, indent=2))
    if args.write:
        write(args.write, "whole_bench.py", argv, result)
    return 0


def write(path: Path, script: str, argv: list[str] | None, result: dict[str, Any]) -> None:
    """Write the docs' table of `result` to `path`, naming the command that measured it."""
    figures.write(
        path,
        figures.shown_command(script, argv if argv is not None else sys.argv[1:]),
        markdown(result),
        ["MB is 10^6 bytes; gzip -6 is the sum of `gzip -6 -c FILE` over every file."],
    )


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    sys.exit(main())
