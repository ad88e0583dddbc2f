"""Every kind of damage the field reports (issue 28), made from a real transcript, found and fixed.

Per kind: scan (its class, its lines, which clients it breaks), `riffd fix` (a real repair: the
verified backup, the swap), then compare with what the client needs: every line that is not damage
byte for byte and in order (helpers.field_damage.kept_in_order), the repaired file equal to the
kind's ideal repair, and the bytes the repair cut in the backup.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import (
    CORPUS_DIR,
    corpus_lines,
    plan_transcript_repair,
    requires_corpus,
    scan_transcript_bytes,
)
from helpers import field_damage
from riffd.commands.cli import main
from riffd.commands.output import EXIT_OK
from riffd.repair.backup import BackupStore
from riffd.repair.plan import RepairOptions
from riffd.repair.planner import plan_repair
from riffd.transcript.findings import (
    BREAKS_CURRENT,
    BREAKS_OLDER,
    CUTS_HISTORY,
    DEFAULT_REPAIRS,
    OPT_IN_REPAIRS,
    REPAIRABLE,
    FindingClass,
)
from riffd.transcript.reader import read_span
from riffd.transcript.scan import scan_file

pytestmark = requires_corpus

SUBAGENT = "marot-spotter/subagent.jsonl"
BIG = "marot-spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
OLD = "d-kimuson-claude-code-viewer/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"

# kind -> (injector options, the finding on the damage line, which clients it breaks)
KINDS: dict[str, tuple[dict[str, object], FindingClass, str]] = {
    "1a": ({}, FindingClass.ORPHAN_SERVER_TOOL_USE, BREAKS_OLDER),
    "1b": ({}, FindingClass.ORPHAN_SERVER_TOOL_RESULT, BREAKS_CURRENT),
    "1b_web_search": (
        {"name": "web_search"},
        FindingClass.ORPHAN_SERVER_TOOL_RESULT,
        BREAKS_CURRENT,
    ),
    "1b_split": ({"split": True}, FindingClass.ORPHAN_SERVER_TOOL_RESULT, BREAKS_CURRENT),
    "1b_split_system": (
        {"split": True, "between": "system"},
        FindingClass.ORPHAN_SERVER_TOOL_RESULT,
        BREAKS_CURRENT,
    ),
    "2": ({}, FindingClass.GLUED_RECORD, BREAKS_CURRENT),
    "2_live": ({"live": True}, FindingClass.GLUED_RECORD, BREAKS_CURRENT),
    "3a": ({}, FindingClass.MALFORMED_LINE, BREAKS_OLDER),
    "3b": ({}, FindingClass.GLUED_RECORD, BREAKS_CURRENT),
    "4": ({}, FindingClass.LONE_SURROGATE, BREAKS_OLDER),
    "5a": ({}, FindingClass.NUL_CHARACTER, BREAKS_OLDER),
    "5b": ({}, FindingClass.INVALID_UTF8, BREAKS_OLDER),
    "6": ({}, FindingClass.THINKING_ONLY_TAIL, BREAKS_OLDER),
    "7": ({}, FindingClass.DANGLING_PARENT, BREAKS_CURRENT),
    "8": ({}, FindingClass.DUPLICATE_TOOL_USE, BREAKS_OLDER),
    "9": ({}, FindingClass.MALFORMED_LINE, BREAKS_OLDER),
    "10": ({}, FindingClass.REPEATED_LINE, BREAKS_OLDER),
}


def inject(kind: str, base: str) -> field_damage.Damaged28:
    options = KINDS[kind][0]
    return field_damage.INJECTORS[kind.split("_")[0]](corpus_lines(CORPUS_DIR / base), **options)


def idle(path: Path, data: bytes) -> Path:
    """`data` as an idle session file (quiet for two hours)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    return path


def ideal_of(damaged: field_damage.Damaged28) -> bytes:
    """The ideal repair riffd makes: the research's, but that the torn bytes before a glued record
    are cut (kept in the backup) rather than left as a line of their own."""
    if "glued" not in damaged.marks:
        return damaged.ideal_data
    glued = damaged.marks["glued"]
    return b"".join(line for number, line in enumerate(damaged.ideal) if number != glued)


def damage_lines(damaged: field_damage.Damaged28) -> tuple[int, ...]:
    """The 1-based lines the finding of the kind names first: the damage line, or for a lost line
    (7) the orphan that hung from it."""
    if damaged.kind == "7":
        return (damaged.marks["orphan"] + 1,)
    if damaged.kind == "10":
        return (damaged.marks["repeat"] + 1, damaged.marks["first"] + 1)
    if damaged.kind == "8":
        return (damaged.marks["tool_use"] + 1, damaged.marks["copy"] + 1)
    return (damaged.damage[-1] + 1,)


@pytest.mark.parametrize("base", [SUBAGENT, BIG, OLD], ids=["subagent", "big", "old"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_is_found_and_fixed_as_the_client_needs(
    kind: str, base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        damaged = inject(kind, base)
    except field_damage.NoPoint:
        pytest.skip(f"{base} has no place for kind {kind}")  # the research found points in 2 of 3
    _options, cls, breaks = KINDS[kind]
    path = idle(tmp_path / "projects" / "p" / "session.jsonl", damaged.data)

    findings = scan_file(path).findings
    ours = [finding for finding in findings if finding.cls is cls]
    assert ours, [(str(f.cls), f.lines) for f in findings]
    assert ours[-1 if kind.startswith("1b_split") else 0].lines == damage_lines(damaged)
    assert {finding.breaks for finding in ours} == {breaks}
    if kind in ("2", "2_live", "3b", "7"):  # the loaded conversation is cut there
        cut = [f for f in findings if f.cls is FindingClass.DANGLING_PARENT]
        assert any(f.detail == CUTS_HISTORY and f.breaks == BREAKS_CURRENT for f in cut)

    backups = tmp_path / "backups"
    config = _config_naming(tmp_path, REPAIRABLE if cls in OPT_IN_REPAIRS else DEFAULT_REPAIRS)
    fix = ["--config", str(config), "fix", "--backup-dir", str(backups), "--json", str(path)]
    assert main(fix) == EXIT_OK, capsys.readouterr()
    report = json.loads(capsys.readouterr().out)["files"][0]
    repaired = path.read_bytes()
    assert field_damage.kept_in_order(damaged, repaired.splitlines(keepends=True)) == []
    assert repaired == ideal_of(damaged)
    assert scan_file(path).findings == []
    assert report["remaining"] == []
    store = BackupStore(backups)
    # the cut bytes, with the rest, in the verified backup
    assert [store.open_bytes(record.backup_id) for record in store.list()] == [damaged.data]


def _config_naming(tmp_path: Path, classes: frozenset[FindingClass]) -> Path:
    """A config file whose `repair.classes` names `classes`."""
    config = tmp_path / "riffd.toml"
    names = ", ".join(f'"{name}"' for name in sorted(classes))
    config.write_text(f"[repair]\nclasses = [{names}]\n", encoding="utf-8")
    return config


@pytest.mark.parametrize("kind", sorted(kind for kind in KINDS if KINDS[kind][1] in OPT_IN_REPAIRS))
def test_with_no_configuration_a_kind_the_client_copes_with_is_reported_not_edited(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The classes that change or drop bytes of a line the client skips or reads leniently are
    repaired only when the configuration names them: by default the file stays byte for byte and
    `fix` says what remains."""
    damaged = inject(kind, SUBAGENT)
    path = idle(tmp_path / "projects" / "p" / "session.jsonl", damaged.data)
    code = main(["fix", "--backup-dir", str(tmp_path / "backups"), str(path)])
    said = capsys.readouterr().out
    assert code == 1 and path.read_bytes() == damaged.data, said
    assert KINDS[kind][1] in {finding.cls for finding in scan_file(path).findings}
    assert not (tmp_path / "backups").exists()  # nothing was even backed up


@pytest.mark.parametrize("kind", ["7", "2_live", "3b"])
def test_a_re_pointed_parent_is_called_a_guess(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = inject(kind, SUBAGENT)
    path = idle(tmp_path / "projects" / "p" / "session.jsonl", damaged.data)
    assert main(["fix", "--dry-run", "--json", str(path)]) != 2
    out = capsys.readouterr().out
    assert "a guess" in out and "re-pointed parentUuid" in out


def test_an_orphan_is_not_re_pointed_where_two_lines_are_equally_near(tmp_path: Path) -> None:
    """Two earlier lines with the newest timestamp, neither an ancestor of the other: riffd does
    not guess, and says why."""
    damaged = inject("7", SUBAGENT)
    lines = list(damaged.lines)
    orphan = damaged.marks["orphan"]
    parent = next(
        number
        for number in range(orphan - 1, -1, -1)
        if json.loads(lines[number]).get("type") in ("user", "assistant")
    )
    twin = json.loads(lines[parent])
    twin["uuid"] = "00000000-0000-4000-8000-0000000000aa"
    twin["parentUuid"] = json.loads(lines[parent])["parentUuid"]
    lines.insert(parent + 1, field_damage.dumps(twin))
    path, scanned = scan_transcript_bytes(tmp_path, b"".join(lines))
    plan = plan_transcript_repair(path, scanned)
    assert plan.is_empty
    assert any("equally near in time" in note for note in plan.notes), plan.notes


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("4", FindingClass.LONE_SURROGATE), ("9", FindingClass.MALFORMED_LINE)],
)
def test_an_optional_class_turned_off_is_left_as_it_is(
    kind: str, cls: FindingClass, tmp_path: Path
) -> None:
    damaged = inject(kind, SUBAGENT)
    path, scanned = scan_transcript_bytes(tmp_path, damaged.data)
    options = RepairOptions(classes=REPAIRABLE - {cls})
    plan = plan_repair(scanned, lambda line: read_span(path, *scanned.index.span(line)), options)
    assert plan.is_empty and plan.fixes == ()


def test_a_line_that_does_not_parse_but_holds_a_record_is_kept(tmp_path: Path) -> None:
    """A whole record with NULs after it (the newest answer, no child names it) does not parse, and
    is no stray fragment: the optional repair that drops stray lines leaves it, and says why."""
    lines = corpus_lines(CORPUS_DIR / SUBAGENT)
    last = lines[-1].rstrip(b"\n") + b"\x00" * 16 + b"\n"
    path, scanned = scan_transcript_bytes(tmp_path, b"".join([*lines[:-1], last]))
    assert FindingClass.MALFORMED_LINE in {finding.cls for finding in scanned.findings}
    options = RepairOptions(classes=REPAIRABLE)  # the stray-line repair named in the config
    plan = plan_repair(scanned, lambda line: read_span(path, *scanned.index.span(line)), options)
    assert all(edit.span.number != len(lines) for edit in plan.edits if hasattr(edit, "span"))
    assert any("holds a record's uuid" in note for note in plan.notes), plan.notes
