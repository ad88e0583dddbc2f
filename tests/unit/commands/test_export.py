"""`riffd export`: the active conversation, streamed, robust to bad lines, resumable."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, requires_corpus, transcript_bytes
from helpers.run import run_riffd
from riffd.commands.cli import main
from riffd.commands.export import MANIFEST, Exporter, sidechains_of

DAG = CORPUS_DIR / "daaain-claude-code-log" / "dag_compact_after_rewind.jsonl"
REAL = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"


@requires_corpus
def test_markdown_has_the_active_branch_only(tmp_path: Path) -> None:
    result = Exporter(tmp_path / "out").export(DAG)
    assert result.status == "exported"
    text = Path(result.target or "").read_text()
    assert "Second attempt" in text and "After compaction" in text and "Final answer" in text
    assert "First attempt" not in text  # the rewound branch is history, not the conversation
    assert "compacted here" in text
    assert text.index("Start") < text.index("Second attempt") < text.index("After compaction")


@requires_corpus
def test_markdown_shows_tool_calls_and_results(tmp_path: Path) -> None:
    text = Path(Exporter(tmp_path / "out").export(REAL).target or "").read_text()
    assert "**Tool call:" in text and "**Tool result" in text and "```json" in text


@requires_corpus
def test_jsonl_lines_are_the_source_lines_byte_for_byte(tmp_path: Path) -> None:
    result = Exporter(tmp_path / "out", "jsonl").export(DAG)
    exported = Path(result.target or "").read_bytes().splitlines(keepends=True)
    source = DAG.read_bytes().splitlines(keepends=True)
    assert set(exported) <= set(source) and len(exported) == 10
    assert [source.index(line) for line in exported] == sorted(
        source.index(line) for line in exported
    )


@requires_corpus
def test_a_malformed_line_is_reported_and_the_export_goes_on(tmp_path: Path) -> None:
    lines = REAL.read_bytes().splitlines(keepends=True)
    damaged = tmp_path / "s.jsonl"
    damaged.write_bytes(b"".join([*lines[:-3], b"{not json\n", *lines[-3:]]))
    result = Exporter(tmp_path / "out", "jsonl").export(damaged)
    assert result.status == "exported" and result.bad_lines == [len(lines) - 2]
    exported = Path(result.target or "").read_bytes().splitlines(keepends=True)
    assert b"{not json\n" not in exported and set(exported) <= set(lines)
    markdown = Exporter(tmp_path / "md").export(damaged)
    assert (
        f"Line(s) {len(lines) - 2} of the source do not parse"
        in Path(markdown.target or "").read_text()
    )


@requires_corpus
def test_a_rerun_resumes_and_skips_what_is_done(tmp_path: Path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    for path in (DAG, REAL, CORPUS_DIR / "marot-spotter" / "short.jsonl"):
        shutil.copy(path, sources / path.name)
    out = tmp_path / "out"
    first = [Exporter(out).export(path) for path in sorted(sources.iterdir())]
    assert [result.status for result in first] == ["exported"] * 3
    manifest = json.loads((out / MANIFEST).read_text())
    # As if the last run stopped before the third session: its entry and file are not there.
    third = sorted(sources.iterdir())[2]
    (out / manifest.pop(str(third.resolve()))["file"]).unlink()
    (out / MANIFEST).write_text(json.dumps(manifest))
    again = [Exporter(out).export(path) for path in sorted(sources.iterdir())]
    assert [result.status for result in again] == ["skipped", "skipped", "exported"]
    # a session that grew is exported again
    with open(sorted(sources.iterdir())[0], "ab") as handle:
        handle.write(DAG.read_bytes().splitlines(keepends=True)[-1])
    assert Exporter(out).export(sorted(sources.iterdir())[0]).status == "exported"


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="md, jsonl"):
        Exporter(tmp_path, "html")


@requires_corpus
def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(DAG), "--to", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / f"{DAG.stem}.md").exists()
    assert "1 exported" in capsys.readouterr().err
    # An export holds a whole conversation: private whatever the umask (here 022, as on most
    # systems).
    assert {
        path.name: oct(path.stat().st_mode & 0o777) for path in (tmp_path / "out").iterdir()
    } == {f"{DAG.stem}.md": "0o600", MANIFEST: "0o600"}
    assert main(["export", str(DAG), "--to", str(tmp_path / "out")]) == 0
    assert "1 unchanged" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing"), "--to", str(tmp_path / "out")]) == 2


def test_an_export_of_nothing_makes_no_folder_and_no_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`riffd export latest --to notes/` outside a project: the error alone, exit 2 (it went on to
    say "0 exported, ..." and made an empty notes/)."""
    assert main(["export", str(tmp_path / "missing"), "--to", str(tmp_path / "notes")]) == 2
    err = capsys.readouterr().err
    assert "riffd: error:" in err and "exported" not in err
    (tmp_path / "empty").mkdir()
    assert main(["export", str(tmp_path / "empty"), "--to", str(tmp_path / "notes")]) == 0
    assert "no transcripts to export; nothing written" in capsys.readouterr().err
    assert not (tmp_path / "notes").exists()


@requires_corpus
def test_sidechains_are_exported_under_their_agent_names(tmp_path: Path) -> None:
    inline = (
        CORPUS_DIR / "d-kimuson-claude-code-viewer" / "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    )
    text = Path(
        Exporter(tmp_path / "a", sidechains=sidechains_of).export(inline).target or ""
    ).read_text()
    assert text.count("## Subagent: general-purpose") == 5
    session = CORPUS_DIR / "marot-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    text = Path(
        Exporter(tmp_path / "b", sidechains=sidechains_of).export(session).target or ""
    ).read_text()
    assert "## Subagent: claude-code-guide" in text and "## Subagent: compaction" in text


@requires_corpus
def test_cli_exports_agent_files_inside_their_session_only(tmp_path: Path) -> None:
    project = tmp_path / "p"
    shutil.copytree(CORPUS_DIR / "marot-spotter", project)
    assert main(["export", str(project), "--to", str(tmp_path / "out")]) == 0
    names = sorted(path.name for path in (tmp_path / "out").glob("*.md"))
    assert not [name for name in names if name.startswith("agent-")]
    assert "258c7280-ae70-4798-800f-63464d01a85d.md" in names


def test_a_manifest_entry_that_leads_out_of_the_folder_is_ignored(tmp_path: Path) -> None:
    source = tmp_path / "projects" / "session.jsonl"
    source.parent.mkdir()
    source.write_bytes(transcript_bytes(4))
    out = tmp_path / "out"
    assert run_riffd("export", "--to", str(out), str(source)).returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    manifest = json.loads((out / MANIFEST).read_text())
    for entry in manifest.values():
        entry["file"] = "../victim.txt"  # tampered with (or written by a careless script)
    (out / MANIFEST).write_text(json.dumps(manifest))
    source.write_bytes(transcript_bytes(6))  # changed since: exported again

    done = run_riffd("export", "--to", str(out), str(source))

    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "the user's own file\n"
    assert "not a file of this folder; ignored" in done.stderr
    # exported, into the folder
    assert any("line 6" in path.read_text() for path in out.glob("*.md"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out", "projects", "victim.txt"]


def test_the_folders_made_for_an_export_are_private_whatever_the_umask(tmp_path: Path) -> None:
    source = tmp_path / "session.jsonl"
    source.write_bytes(transcript_bytes(2))
    done = run_riffd("export", "--to", str(tmp_path / "a" / "b"), str(source), umask=0)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b" / "session.md").stat().st_mode) == 0o600


def test_a_file_given_as_the_folder_to_export_into_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--to` naming a file: the error names `--to` and that file (it named the transcript, with
    'Not a directory'), and nothing is written."""
    source = tmp_path / "s.jsonl"
    source.write_bytes(transcript_bytes(3))
    target = tmp_path / "report.out"
    target.write_text("mine\n")
    assert main(["export", "--to", str(target), str(source)]) == 2
    err = capsys.readouterr().err
    assert f"riffd: error: --to {target}: a file is there" in err and str(source) not in err
    assert target.read_text() == "mine\n"
