"""Symlinks under the roots: a linked project folder is followed (once, without loops) by every
command and the daemon, and a transcript that is itself a link is named as one, never rewritten."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, corpus_lines, dead_pid, requires_corpus
from helpers import damage
from riffd.archive.store import Archive
from riffd.claude_code.walk import iter_transcripts
from riffd.commands.cli import main
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.daemon.watcher import TranscriptFilter, Watcher, reconcile
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.repair.recovery import recover_and_sweep
from riffd.reports.build import build_report
from riffd.reports.json import report_document
from riffd.state.store import StateStore
from riffd.transcript.scan import scan_file

BASE = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code config folder (CLAUDE_CONFIG_DIR) with an empty registry and a `projects/`
    root."""
    folder = tmp_path / "claude"
    (folder / "projects").mkdir(parents=True)
    (folder / "sessions").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(folder))
    monkeypatch.setenv("RIFFD_STATE_DIR", str(tmp_path / "state"))
    return folder


def damaged_session(folder: Path, generated: bool = False) -> tuple[Path, bytes]:
    """Write a transcript with a resumed duplicate into `folder`, named after its session; return it
    and its bytes. It is made from a real transcript, or, `generated`, from a generated session (for
    the tests that need any damaged transcript, so they run without the sample transcripts too)."""
    lines = damage.generated_session() if generated else corpus_lines(BASE)
    damaged = damage.inject_resumed_duplicate(lines)
    session_id = json.loads(damaged.lines[-1])["sessionId"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_bytes(damaged.data)
    return path, damaged.data


# --- a transcript that is itself a symlink
# -------------------------------------------------------------------


@requires_corpus
def test_fix_names_a_symlinked_transcript_and_what_to_repair_instead(
    claude: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real, data = damaged_session(tmp_path / "elsewhere")
    link = claude / "projects" / "-p" / real.name
    link.parent.mkdir()
    link.symlink_to(real)
    assert main(["fix", "--quiet-period", "0", str(link)]) == EXIT_FINDINGS
    out = capsys.readouterr().out
    assert f"skipped {link}: symlink: " in out and "changed" not in out
    assert f"repair the file it points to instead (`riffd fix {real}`)" in out
    assert link.is_symlink() and real.read_bytes() == data


@requires_corpus
def test_the_daemon_reports_a_symlinked_transcript_as_a_symlink(
    claude: Path, tmp_path: Path
) -> None:
    real, data = damaged_session(tmp_path / "elsewhere")
    link = claude / "projects" / "-p" / real.name
    link.parent.mkdir()
    link.symlink_to(real)
    settings = WorkerSettings(
        repair=True,
        quiet_period=0,
        backup_dir=tmp_path / "state" / "backups",
        claude_dir=claude,
        roots=(claude / "projects",),
    )
    store = StateStore(tmp_path / "state" / "state.db")
    worker = Worker(store, settings)
    outcome = worker.process(link)
    assert outcome.repair == "skipped:symlink" and outcome.retry_after is None
    report = report_document(build_report(store, settings.backup_dir, {"running": True}))
    assert report["repairs"]["skipped"] == {"symlink": 1}
    assert link.is_symlink() and real.read_bytes() == data
    assert worker.process(link).repair is None  # not tried again until the file changes


# --- symlinked project folders
# ---------------------------------------------------------------------------------


@dataclass
class LinkedTree:
    """A `projects/` root with a real project, a project that is a symlink to another disk, a second
    link to that same folder, a link back up the tree inside it, and a link to a folder that is gone
    (a disk not mounted)."""

    root: Path
    real: Path  # a damaged session in a real project folder
    linked_real: (
        Path  # the damaged session of the linked project, by its real path on the other disk
    )
    linked: Path  # the same session through the link, as riffd names it
    dangling: Path

    @property
    def damaged(self) -> list[Path]:
        return [self.real, self.linked]


@pytest.fixture
def tree(claude: Path, tmp_path: Path) -> LinkedTree:
    root = claude / "projects"
    real, _ = damaged_session(root / "-work-real", generated=True)
    disk = tmp_path / "disk" / "work-linked"
    linked_real, _ = damaged_session(disk, generated=True)
    (root / "-work-linked").symlink_to(disk)
    (root / "-work-twice").symlink_to(disk)  # a second link to the same folder
    (disk / "up").symlink_to(root)  # a link back up the tree
    (root / "-work-real" / "loop").symlink_to(root / "-work-real")  # a link to the folder it is in
    (root / "-work-gone").symlink_to(tmp_path / "unmounted")
    long_ago = time.time() - 3600
    for path in (real, linked_real):
        os.utime(path, (long_ago, long_ago))
    return LinkedTree(
        root, real, linked_real, root / "-work-linked" / linked_real.name, root / "-work-gone"
    )


def test_the_walk_follows_linked_folders_once_and_names_a_link_to_nothing(tree: LinkedTree) -> None:
    failures: list[OSError] = []
    links: list[tuple[Path, Path]] = []
    found = list(
        iter_transcripts([tree.root], failures.append, on_link=lambda *pair: links.append(pair))
    )
    assert found == [tree.real, tree.linked]  # each real file once; no loop
    assert links == [(tree.root / "-work-linked", tree.linked_real.parent.resolve())]
    assert [failure.filename for failure in failures] == [str(tree.dangling)]
    assert "does not exist" in str(failures[0])


def test_a_linked_transcript_is_named_by_its_real_path_when_the_walk_reaches_it(
    tree: LinkedTree,
) -> None:
    (tree.root / "-work-real" / "alias.jsonl").symlink_to(tree.real)  # the same file twice
    elsewhere = tree.root.parent / "elsewhere.jsonl"
    elsewhere.write_bytes(tree.real.read_bytes())
    # reached through this link only
    (tree.root / "-work-real" / "outside.jsonl").symlink_to(elsewhere)
    found = list(iter_transcripts([tree.root], lambda _exc: None))
    assert found == [tree.real, tree.linked, tree.root / "-work-real" / "outside.jsonl"]


@requires_corpus
def test_scan_and_fix_follow_a_linked_project_and_repair_in_its_real_folder(
    tree: LinkedTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan"]) == EXIT_ERROR  # findings, and a link to nothing: named, never silent
    captured = capsys.readouterr()
    assert (
        f"{tree.real}: 1 finding(s)" in captured.out
        and f"{tree.linked}: 1 finding(s)" in captured.out
    )
    assert f"{tree.dangling}: cannot be listed (a symlink to" in captured.err
    assert "scanned 2 file(s)" in captured.err
    tree.dangling.unlink()
    assert main(["fix", "--quiet-period", "0"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"repaired {tree.linked}" in out and f"repaired {tree.real}" in out
    assert scan_file(tree.linked_real).findings == []
    assert (tree.root / "-work-linked").is_symlink() and tree.linked_real.is_file()
    # no temp left
    assert not [name for name in os.listdir(tree.linked_real.parent) if name.startswith(".")]


@requires_corpus
def test_sessions_lists_a_linked_project_once_and_names_a_link_to_nothing(
    tree: LinkedTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "--json"]) == EXIT_ERROR  # a folder it could not read: named, exit 2
    captured = capsys.readouterr()
    listed = [row["path"] for row in json.loads(captured.out)["sessions"]]
    assert sorted(listed) == sorted(map(str, tree.damaged))
    assert f"riffd: error: {tree.dangling}: a symlink to" in captured.err


@requires_corpus
def test_archive_ingest_and_export_take_a_linked_project_once(
    tree: LinkedTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree.dangling.unlink()
    assert main(["archive", "ingest"]) == EXIT_OK
    archive = Archive(tmp_path / "state" / "archive.db", read_only=True)
    try:
        assert sorted(name for _file_id, name in archive.files()) == sorted(map(str, tree.damaged))
    finally:
        archive.close()
    assert main(["export", "--to", str(tmp_path / "out")]) == EXIT_OK
    assert "2 exported" in capsys.readouterr().err


def test_stale_temps_are_swept_in_linked_folders_too(tree: LinkedTree) -> None:
    stale = (
        tree.linked_real.parent / f".{tree.linked_real.name}.riffd-{dead_pid()}-0123456789ab.tmp"
    )
    stale.write_bytes(b"a copy")
    long_ago = time.time() - 7 * 86400
    os.utime(stale, (long_ago, long_ago))
    assert recover_and_sweep([tree.root], 60) == [tree.root / "-work-linked" / stale.name]
    assert not stale.exists()


def test_a_real_observer_sees_appends_in_a_linked_folder(tree: LinkedTree, tmp_path: Path) -> None:
    heard: list[str] = []
    arrived = threading.Event()

    def on_change(name: str) -> None:
        heard.append(name)
        if name == str(tree.linked):
            arrived.set()

    transcript_filter = TranscriptFilter((tree.root,))
    watcher = Watcher(transcript_filter, on_change, kind="native")
    watcher.start()
    store = StateStore(tmp_path / "state.db")
    try:
        reconcile(transcript_filter, store, lambda _name: None, lambda _exc: None, watcher)
        assert set(watcher.linked) == {tree.root / "-work-linked"}
        # Claude Code appends by the real path (its own cwd)
        with open(tree.linked_real, "ab") as handle:
            handle.write(b'{"type":"user"}\n')
        assert arrived.wait(10), heard
        (tree.root / "-work-linked").unlink()
        (tree.root / "-work-twice").unlink()
        reconcile(transcript_filter, store, lambda _name: None, lambda _exc: None, watcher)
        assert watcher.linked == {}  # a link that is gone is no longer watched
    finally:
        watcher.stop()
        store.close()


@requires_corpus
@pytest.mark.slow
def test_a_real_daemon_repairs_sessions_written_into_linked_folders(tmp_path: Path) -> None:
    from helpers.daemon import Sandbox, append_like_claude, resumed_duplicate, session_id_of

    box = Sandbox(tmp_path)
    box.projects.mkdir(parents=True)
    (box.claude / "sessions").mkdir()
    box.write_config(watcher__rescan_interval=3600.0)  # only events can bring the appends in time
    disk = tmp_path / "disk"
    (disk / "early").mkdir(parents=True)
    (box.projects / "-work-early").symlink_to(disk / "early")  # there at start
    gone = box.projects / "-work-gone"
    # a link it cannot follow: named in the report, never silent
    gone.symlink_to(tmp_path / "unmounted")
    try:
        daemon = box.start()
        (disk / "late").mkdir()
        (box.projects / "-work-late").symlink_to(disk / "late")  # made while the daemon runs
        for folder in ("early", "late"):
            damaged = resumed_duplicate()
            real = disk / folder / f"{session_id_of(damaged.lines)}.jsonl"
            # by the real path, as a client working there writes
            append_like_claude(real, damaged.lines, pause=0)
            daemon.wait_until(
                lambda real=real: scan_file(real).findings == [] and real,  # type: ignore[misc]
                f"the session in the linked folder {folder} repaired",
            )
        assert len(box.backup_ids()) == 2
        report = daemon.wait_until(
            lambda: box.report_where(
                lambda r: any(str(gone) in error["message"] for error in r["errors"])
            ),
            "the report naming the link to nothing",
        )
        assert not report["healthy"]
        daemon.stop()
    finally:
        box.close()


def test_a_real_observer_sees_a_new_project_under_a_symlinked_root(tmp_path: Path) -> None:
    (tmp_path / "disk" / "projects").mkdir(parents=True)
    (tmp_path / "claude").mkdir()
    root = tmp_path / "claude" / "projects"
    root.symlink_to(tmp_path / "disk" / "projects")  # ~/.claude/projects on another disk
    arrived = threading.Event()
    path = root / "-work-new" / "s.jsonl"
    watcher = Watcher(
        TranscriptFilter((root,)),
        lambda name: arrived.set() if name == str(path) else None,
        kind="native",
    )
    watcher.start()
    try:
        path.parent.mkdir()
        path.write_bytes(b'{"type":"user"}\n')
        assert arrived.wait(10)
    finally:
        watcher.stop()


@requires_corpus
def test_a_root_and_a_link_to_it_are_scanned_once(
    tree: LinkedTree, capsys: pytest.CaptureFixture[str]
) -> None:
    tree.dangling.unlink()
    alias = tree.root.parent / "projects-alias"
    alias.symlink_to(tree.root)  # ~/.config/claude/projects as a link to ~/.claude/projects, say
    assert main(["scan", str(tree.root), str(alias)]) == EXIT_FINDINGS
    assert "scanned 2 file(s)" in capsys.readouterr().err
