"""State that heals: damaged databases are moved aside, never deleted, never a traceback; the
archive's readable lines come back with `riffd archive recover`."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.run import riffd_env, run_riffd
from riffd.archive.ingest import ingest_file
from riffd.archive.recover import recover
from riffd.archive.schema import ARCHIVE_NAME
from riffd.archive.store import Archive
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.database import DAMAGED, DatabaseDamaged, damaged_copies
from riffd.state.database import STATE_NAME
from riffd.state.records import Watermark
from riffd.state.store import StateStore


def truncate(path: Path, fraction: float) -> None:
    """Cut a file short, as a crash of the disk or a full disk during a copy would."""
    with open(path, "r+b") as handle:
        handle.truncate(int(path.stat().st_size * fraction))


def fill_with_garbage(path: Path) -> None:
    size = path.stat().st_size
    path.write_bytes(random.Random(7).randbytes(size))


def damage(path: Path, how: str) -> None:
    {
        "truncated": lambda: truncate(path, 0.5),
        "garbage": lambda: fill_with_garbage(path),
        "empty": lambda: truncate(path, 0),
    }[how]()


def a_watermark(path: str) -> Watermark:
    return Watermark(path, 1, 2, 3, 1, 3, "h", 3, "t", 3, 4)


def make_state(path: Path) -> None:
    store = StateStore(path)
    store.save_file(a_watermark("/p/s.jsonl"), "s", [], 0)
    store.close()


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_a_damaged_state_store_is_moved_aside_and_made_anew(tmp_path: Path, how: str) -> None:
    path = tmp_path / STATE_NAME
    make_state(path)
    damage(path, how)
    before = path.read_bytes()
    with pytest.raises(DatabaseDamaged) as refused:  # a command never moves the daemon's files
        StateStore(path)
    assert str(path) in str(refused.value) and "riffd run" in str(refused.value)
    assert path.read_bytes() == before
    store = StateStore(path, heal=True)
    try:
        # kept, byte for byte
        assert store.moved_aside is not None and store.moved_aside.read_bytes() == before
        assert store.moved_aside.name.startswith(f"{STATE_NAME}{DAMAGED}")
        assert damaged_copies(path) == [store.moved_aside]
        assert store.file("/p/s.jsonl") is None  # a new, empty store: a rescan fills it again
        store.save_file(a_watermark("/p/t.jsonl"), "t", [], 0)
        assert store.file("/p/t.jsonl") is not None
    finally:
        store.close()


def test_a_store_damaged_while_open_is_moved_aside_on_the_next_error(tmp_path: Path) -> None:
    path = tmp_path / STATE_NAME
    store = StateStore(path, heal=True)
    for number in range(300):
        store.save_file(a_watermark(f"/p/{number:04d}-{'x' * 200}.jsonl"), "s", [], 0)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as handle:  # another program scribbles over the middle of the file
        handle.seek(4096)
        handle.write(b"\xff" * 8192)
    # busy is not damage
    assert not store.reopen_if_damaged(sqlite3.OperationalError("database is locked"))
    # The error the worker's next query meets (its connection may still answer from pages it
    # cached).
    assert store.reopen_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))
    assert store.moved_aside is not None and store.moved_aside.exists()
    store.save_file(a_watermark("/p/new.jsonl"), "s", [], 0)
    assert store.file("/p/new.jsonl") is not None
    # healthy now
    assert not store.reopen_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))
    store.close()


def test_a_locked_database_is_never_called_damaged_nor_moved(tmp_path: Path) -> None:
    """Another process holding a database past the lock timeout (here: a real connection with an
    exclusive lock, which even readers wait for) is busy, not damaged: the daemon's healing opens
    raise the lock error and move nothing. An archive that a writer holds as usual opens at once:
    opening it to read takes no write lock."""
    archive_path, state_path = tmp_path / ARCHIVE_NAME, tmp_path / STATE_NAME
    Archive(archive_path).close()
    make_state(state_path)
    for path, reopen in (
        (archive_path, lambda: Archive(archive_path, heal=True, check=True, lock_timeout=0.2)),
        (state_path, lambda: StateStore(state_path, heal=True, lock_timeout=0.2)),
    ):
        holder = sqlite3.connect(path, isolation_level=None)
        holder.executescript(
            "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE held(x); "
        )
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            reopen()
        holder.close()
        assert not damaged_copies(path)
    writer = sqlite3.connect(archive_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # the daemon in the middle of a write
    archive = Archive(archive_path, heal=True, check=True, lock_timeout=0.2)
    assert archive.moved_aside is None and archive.search("anything") == []
    archive.close()
    writer.execute("ROLLBACK")
    writer.close()
    assert sorted(path.name for path in tmp_path.iterdir() if DAMAGED in path.name) == []


OPENER = """
import json, sys, time
from pathlib import Path
from riffd.archive.store import Archive
from riffd.state.store import StateStore
kind, folder = sys.argv[1], Path(sys.argv[2])
number, start, rounds = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
for round in range(rounds):
    while time.time() < start + round * 0.2:
        pass
    path = folder / str(round) / "x.db"
    try:
        if kind == "state":
            opened = StateStore(path, heal=True)
            opened.set_meta(f"opener {number}", number)  # written through this process's connection
        else:
            opened = Archive(path, heal=True, check=True)
            opened.add_lines(f"/p/{number}.jsonl", 0, [b'{"type":"user"}'])
        print(json.dumps([round, "ok", str(opened.moved_aside)]), flush=True)
        opened.close()
    except Exception as exc:
        print(json.dumps([round, "error", repr(exc)]), flush=True)
"""


@pytest.mark.slow  # many rounds: 4 variants of 6 rounds of 3 processes, each started 1.5 s ahead
@pytest.mark.parametrize("kind", ["state", "archive"])
@pytest.mark.parametrize("start", ["missing", "empty"])
def test_riffd_processes_opening_a_database_together_never_move_each_others_aside(
    tmp_path: Path, kind: str, start: str
) -> None:
    """The daemon, `riffd status` and an archive command started at the same moment, on a state
    folder with no database yet (or an empty file, which counts as damaged): none may find another's
    database half made and call it damaged, nor move a healthy one aside, and every process's writes
    land in the one database at the path. Before, 3 processes opening together did so in 24 rounds
    of 30 (a database moved aside under the process writing to it, 'disk I/O error', a false
    'damaged')."""
    import subprocess
    import sys
    import time

    rounds, openers = 6, 3
    for round in range(rounds):
        (tmp_path / str(round)).mkdir()
        if start == "empty":
            (tmp_path / str(round) / "x.db").write_bytes(b"")
    # every process has imported riffd by then (on a slow machine, the rounds still meet)
    at = time.time() + 1.5
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, kind, str(tmp_path), str(number), str(at), str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
            env=riffd_env(),
        )
        for number in range(openers)
    ]
    results = [
        json.loads(line)
        for process in processes
        for line in process.communicate(timeout=120)[0].splitlines()
    ]
    assert [result for result in results if result[1] != "ok"] == []
    assert len(results) == rounds * openers
    for round in range(rounds):
        path = tmp_path / str(round) / "x.db"
        moved = sorted(
            result[2] for result in results if result[0] == round and result[2] != "None"
        )
        # moved aside once, by one of them; the others open the database it made
        if start == "empty":
            assert len(moved) == 1 and damaged_copies(path) == [Path(moved[0])]
            assert Path(moved[0]).stat().st_size == 0
        else:
            assert moved == [] and damaged_copies(path) == []
        db = sqlite3.connect(path)
        if kind == "state":
            written = {
                row[0] for row in db.execute("SELECT key FROM meta WHERE key LIKE 'opener %'")
            }
            assert written == {f"opener {number}" for number in range(openers)}
        else:
            written = {row[0] for row in db.execute("SELECT path FROM files")}
            assert written == {f"/p/{number}.jsonl" for number in range(openers)}
        db.close()
        assert sorted(name.name for name in path.parent.iterdir() if ".new-" in name.name) == []


MAKER = """
import sys
from pathlib import Path
from riffd.state.store import StateStore
folder = Path(sys.argv[1])
for number in range(100000):
    print(number, flush=True)
    StateStore(folder / str(number) / "x.db").close()
"""


def test_a_process_killed_while_it_makes_a_database_leaves_none_half_made(tmp_path: Path) -> None:
    """kill -9 of a process making state databases one after another: each database there is whole
    (opens with no damage found, nothing moved aside). What a killed maker left under its own name
    stays while it could be a live maker's (in another PID namespace, say) and is removed once it is
    older than any making takes."""
    import subprocess
    import sys
    import time

    from riffd.database import STALE_AFTER_SECONDS

    for attempt in range(3):
        folder = tmp_path / str(attempt)
        maker = subprocess.Popen(
            [sys.executable, "-c", MAKER, str(folder)],
            stdout=subprocess.PIPE,
            text=True,
            env=riffd_env(),
        )
        assert maker.stdout is not None
        for _ in range(20 + 17 * attempt):  # killed at a different point of a creation each time
            maker.stdout.readline()
        time.sleep(0.001 * attempt)
        maker.kill()
        maker.wait()
        maker.stdout.close()
        for made in sorted(folder.iterdir()):
            path = made / "x.db"
            store = StateStore(path)  # no heal: a half-made database would raise DatabaseDamaged
            store.set_meta("checked", 1)
            store.close()
            assert damaged_copies(path) == []
    # What a maker left: fresh, it stays; old, it goes (with its sidecars), and the database beside
    # it stays whole
    (tmp_path / "left").mkdir()
    names = ["x.db.new-77-ab12", "x.db.new-77-ab12-wal", "x.db.new-78-cd34"]
    for name in names:
        (tmp_path / "left" / name).write_bytes(b"")
    long_ago = time.time() - STALE_AFTER_SECONDS - 60
    for name in names[:2]:
        os.utime(tmp_path / "left" / name, (long_ago, long_ago))
    StateStore(tmp_path / "left" / "x.db").close()
    assert sorted(name.name for name in (tmp_path / "left").iterdir()) == [
        "x.db",
        "x.db.new-78-cd34",
    ]


def test_a_read_only_open_of_a_missing_store_makes_nothing(tmp_path: Path) -> None:
    """`riffd status` reading the state while the daemon moves a damaged store aside must not put a
    file in its place (an empty one, which the daemon would then call damaged): a missing store is
    an error, and nothing is made."""
    with pytest.raises(sqlite3.OperationalError, match="does not exist"):
        StateStore(tmp_path / "state.db", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_riffd_run_on_a_state_database_it_cannot_open_says_so_in_one_line(tmp_path: Path) -> None:
    """Not damage (here the path is a folder): `riffd run` moves nothing aside and ends with one
    line, exit 2."""
    (tmp_path / "state" / STATE_NAME).mkdir(parents=True)
    config = tmp_path / "riffd.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    result = run_riffd(
        "run", config=config, env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}, timeout=60
    )
    assert result.returncode == EXIT_ERROR
    assert "Traceback" not in result.stderr
    assert (
        f"riffd: error: {tmp_path / 'state' / STATE_NAME}: unable to open database file"
        in result.stderr
    )
    assert (tmp_path / "state" / STATE_NAME).is_dir() and not damaged_copies(
        tmp_path / "state" / STATE_NAME
    )


def make_transcripts(folder: Path, count: int, lines: int) -> list[Path]:
    """Transcripts of random bytes (little to deduplicate), so an archive of them spans several
    packs. They are in a field of their own, not in the message: as a text, each would be one
    1,800-character word of the search index, which would then fill most of the file and leave the
    packs away from its end."""
    rng = random.Random(3)
    paths = []
    for number in range(count):
        session = f"00000000-0000-0000-0000-{number:012d}"
        path = folder / "projects" / "-p" / f"{session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            b"".join(
                json.dumps(
                    {
                        "type": "user",
                        "uuid": f"u{number}-{line}",
                        "sessionId": session,
                        "data": rng.randbytes(900).hex(),
                        "message": {"role": "user", "content": "random data"},
                    }
                ).encode()
                + b"\n"
                for line in range(lines)
            )
        )
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def archived_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """An archive of 5 transcripts of about 1.8 MB each (three packs), built once for this
    module."""
    root = tmp_path_factory.mktemp("archived")
    transcripts = make_transcripts(root / "claude", 5, 1000)
    archive = Archive(root / "state" / ARCHIVE_NAME)
    for path in transcripts:
        ingest_file(archive, path)
    archive.settle()
    archive.close()
    return root, transcripts


@pytest.fixture
def archived(archived_once: tuple[Path, list[Path]], tmp_path: Path) -> tuple[Path, list[Path]]:
    """A copy of that archive in a state folder of this test's own, and the transcripts it names
    (read only)."""
    root, transcripts = archived_once
    state = tmp_path / "state"
    state.mkdir()
    shutil.copyfile(root / "state" / ARCHIVE_NAME, state / ARCHIVE_NAME)
    return state / ARCHIVE_NAME, transcripts


def test_recover_copies_every_readable_file_and_names_the_rest(
    archived: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    path, transcripts = archived
    # the last tenth of the pages lost: some packs go with it, others stay whole
    truncate(path, 0.9)
    before = path.read_bytes()
    into = Archive(tmp_path / "new.db")
    try:
        result = recover(path, into)
        recovered = {
            archived_path: b"".join(into.iter_file(file_id))
            for file_id, archived_path in into.files()
        }
    finally:
        into.close()
    assert path.read_bytes() == before  # the damaged file is only read
    assert 0 < result.files < len(transcripts)
    assert len(result.unreadable) == len(transcripts) - result.files
    for transcript in transcripts:  # what comes back is exact; what does not is named
        if str(transcript) in recovered:
            assert recovered[str(transcript)] == transcript.read_bytes()
        else:
            assert any(str(transcript) in part for part in result.unreadable)


def test_recover_puts_older_history_before_what_the_new_archive_holds(
    archived: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    path, transcripts = archived
    first = transcripts[0]
    old = first.read_bytes()
    shorter = old.splitlines(keepends=True)[:500]
    into = Archive(tmp_path / "new.db")
    try:
        # The new archive took the file as it is now: rewritten shorter since the old archive read
        # it.
        into.add_lines(str(first), 0, [line.rstrip(b"\n") for line in shorter])
        ingest_file(into, transcripts[1])  # and this one whole, as the old archive has it
        result = recover(path, into)
        [(file_id, _path, _session)] = into.files_of(str(first))
        generations = into.generations(file_id)
        assert [b"".join(into.iter_file(file_id, generation)) for generation in generations] == [
            old,
            b"".join(shorter),
        ]
        # the latest generation is still the latest
        assert b"".join(into.iter_file(file_id)) == b"".join(shorter)
        assert result.already_there == 1
    finally:
        into.close()


def test_archive_commands_say_a_damaged_archive_in_one_line_and_recover_brings_it_back(
    archived: tuple[Path, list[Path]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, transcripts = archived
    monkeypatch.setenv("RIFFD_STATE_DIR", str(path.parent))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(transcripts[0].parents[2]))
    monkeypatch.delenv("RIFFD_CONFIG", raising=False)
    fill_with_garbage(path)
    for command in (
        ["archive", "stats"],
        ["archive", "search", "anything"],
        ["archive", "restore", "x"],
    ):
        assert main(command) == EXIT_ERROR
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err
        assert "riffd archive recover" in err
    # With no daemon running, recover moves the damaged file aside itself and names what it could
    # not read.
    assert main(["archive", "recover"]) == EXIT_FINDINGS
    captured = capsys.readouterr()
    assert "unreadable" in captured.err and "recovered 0 line(s)" in captured.out
    assert [
        copy.name.split(".recovered-")[0]
        for copy in path.parent.glob(f"{ARCHIVE_NAME}.recovered-*")
    ] == [ARCHIVE_NAME]
    assert main(["archive", "stats"]) == EXIT_OK  # a new, working archive
    capsys.readouterr()
    assert main(["archive", "recover"]) == EXIT_OK  # nothing left to recover
    assert "nothing to recover" in capsys.readouterr().err
    # a folder named in place of the archive file: said so (it said "no such file")
    assert main(["archive", "recover", str(path.parent)]) == EXIT_ERROR
    assert f"{path.parent}: a folder; name the archive file in it" in capsys.readouterr().err


def test_riffd_report_on_a_damaged_state_store_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    make_state(state / STATE_NAME)
    fill_with_garbage(state / STATE_NAME)
    monkeypatch.setenv("RIFFD_STATE_DIR", str(state))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    assert main(["report"]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(state / STATE_NAME) in err and "riffd run" in err, err
    assert os.path.exists(state / STATE_NAME)  # a command leaves the daemon's files where they are


def test_on_a_filesystem_without_hard_links_a_new_database_never_replaces_another(
    tmp_path: Path,
) -> None:
    """Where `link` fails (EPERM, as on vfat; here riffd's own FUSE filesystem refusing it), a made
    database is put in place by a rename that never replaces a file: renamed there when nothing is,
    and when another process's database got there first, that one stays, byte for byte (a plain
    rename had replaced it). (SQLite's shared memory cannot live on this test filesystem, so the
    files are plain ones given to the step that names the made database.)"""
    import errno

    from helpers.fusefs import Mount, fuse_unavailable
    from riffd.database import _put_in_place
    from riffd.fsio import rename_noreplace

    why_not = fuse_unavailable()
    if why_not is not None:
        pytest.skip(why_not)
    with Mount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "faults.json") as mounted:
        mounted.faults({"ops": ["link"], "errno": errno.EPERM})
        path, made = tmp_path / "mnt" / "state.db", tmp_path / "mnt" / "state.db.new-1-ab"
        made.write_bytes(b"mine")
        with pytest.raises(PermissionError):
            os.link(made, tmp_path / "mnt" / "probe")  # (the filesystem has no hard links)
        _put_in_place(made, path)
        assert path.read_bytes() == b"mine" and not made.exists()
        path.write_bytes(b"theirs")
        made.write_bytes(b"mine")
        _put_in_place(made, path)  # another process, a moment too late
        assert path.read_bytes() == b"theirs"
        # The rename itself refuses to replace (the link's own refusal of an existing name comes
        # first above, so a database made between the failed link and the rename is tried here, on
        # the rename alone)
        with pytest.raises(FileExistsError):
            rename_noreplace(made, path)
        assert path.read_bytes() == b"theirs" and made.read_bytes() == b"mine"


@pytest.mark.slow  # (a daemon's start and stop: 3.4 s)
def test_the_advice_for_a_damaged_database_names_the_config_and_works(tmp_path: Path) -> None:
    """With the state folder set by a config file, the advice said `riffd run` and `riffd archive
    recover`: run as printed, they acted on the default state folder. Followed as printed now, they
    move the damaged archive aside and recover it."""
    state = tmp_path / "state"
    config = tmp_path / "riffd.toml"
    claude = tmp_path / "claude"
    (claude / "projects").mkdir(parents=True)
    config.write_text(f'state_dir = "{state}"\nroots = ["{claude / "projects"}"]\n')
    env = {"CLAUDE_CONFIG_DIR": str(claude), "XDG_STATE_HOME": str(tmp_path / "elsewhere")}
    archive = Archive(state / ARCHIVE_NAME)
    archive.close()
    make_state(state / STATE_NAME)
    damage(state / ARCHIVE_NAME, "garbage")
    damage(state / STATE_NAME, "garbage")
    said = run_riffd("--config", str(config), "archive", "stats", env=env)
    assert said.returncode == EXIT_ERROR
    assert f"`riffd --config {config} run`" in said.stderr, said.stderr
    assert f"`riffd --config {config} archive recover`" in said.stderr, said.stderr
    status = run_riffd("--config", str(config), "status", env=env)
    assert f"`riffd --config {config} run`" in status.stderr + status.stdout, status
    # as printed: the daemon (stopped at once) moves both aside, then the recovery
    daemon = subprocess.Popen(
        [sys.executable, "-m", "riffd", "--config", str(config), "run"],
        env=riffd_env(**env),
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not damaged_copies(state / ARCHIVE_NAME) and time.monotonic() < deadline:
        time.sleep(0.1)
    daemon.send_signal(signal.SIGINT)
    daemon.communicate(timeout=60)
    assert damaged_copies(state / ARCHIVE_NAME) and damaged_copies(state / STATE_NAME)
    recovered = run_riffd("--config", str(config), "archive", "recover", env=env)
    assert recovered.returncode in (EXIT_OK, EXIT_FINDINGS), recovered.stderr


def test_recover_with_no_archive_makes_none_and_says_so(tmp_path: Path) -> None:
    """On a state folder with no archive, `archive recover` made an empty one and said it "passes
    SQLite's check"; a search then said "no matches" where it should say there is no archive."""
    env = {"RIFFD_STATE_DIR": str(tmp_path / "state"), "CLAUDE_CONFIG_DIR": str(tmp_path / "c")}
    result = run_riffd("archive", "recover", env=env)
    assert result.returncode == EXIT_OK, result.stderr
    assert f"nothing to recover: no archive at {tmp_path / 'state' / ARCHIVE_NAME}" in result.stderr
    assert not (tmp_path / "state" / ARCHIVE_NAME).exists()
    search = run_riffd("archive", "search", "kalix", env=env)
    assert search.returncode == EXIT_ERROR and "no archive at" in search.stderr, search.stderr
