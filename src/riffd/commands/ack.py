"""`riffd ack`: acknowledge findings riffd will not (or may not) repair, so they stop counting
against health."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from riffd.commands.arguments import Parser, UsageError
from riffd.commands.config_loading import load_despite_errors
from riffd.commands.output import EXIT_ERROR, EXIT_OK, print_json, riffd_advice
from riffd.display import shell_command
from riffd.transcript.acks import Ack, AckFileError, finding_key, load_acks, save_acks
from riffd.transcript.findings import INFORMATIONAL
from riffd.transcript.scan import scan_file


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd ack` to the riffd subcommands."""
    ack = commands.add_parser(
        "ack",
        help="acknowledge a finding (e.g. a malformed line riffd never edits) so it stops making riffd unhealthy",
        description="Acknowledge the findings at FILE:LINE (as `riffd scan` and the report name them). An "
        "acknowledged finding stays listed, marked acknowledged, but no longer makes the report unhealthy, "
        "`riffd status` or `riffd scan` exit 1, or `riffd fix` count it as remaining. It is recognised by its "
        "line's uuid, or by the line's bytes, so appends and repairs that move it keep it acknowledged; a line "
        "that changes is a new finding. Kept in <state dir>/acknowledged.json.",
    )
    ack.add_argument(
        "targets",
        nargs="*",
        metavar="FILE:LINE",
        help="a transcript and a line number a finding names",
    )
    ack.add_argument(
        "--note", default="", help="why (kept with the acknowledgement, shown by --list)"
    )
    ack.add_argument(
        "--undo", action="store_true", help="take the acknowledgements of FILE:LINE back"
    )
    ack.add_argument("--list", action="store_true", help="list every acknowledgement")
    ack.add_argument("--json", action="store_true", help="with --list: one JSON document")
    ack.set_defaults(run=run_ack)


def parse_target(text: str) -> tuple[Path, int]:
    """Given FILE:LINE, return the file (absolute) and the line number; raise UsageError for
    anything else."""
    name, _, number = text.rpartition(":")
    if not name or not number.isdigit() or int(number) < 1:
        raise UsageError(
            f"riffd ack: {text!r} is not FILE:LINE (e.g. ~/.claude/projects/-app/<id>.jsonl:42, as "
            "`riffd scan` names a finding)"
        )
    return Path(os.path.abspath(Path(name).expanduser())), int(number)


def run_ack(args: argparse.Namespace) -> int:
    """`riffd ack`: exit 0 when every target was acknowledged (or taken back), 2 on errors."""
    if args.list == bool(args.targets):
        raise UsageError("riffd ack: name FILE:LINE (one or more), or use --list")
    config = load_despite_errors(args)
    if config is None:
        return EXIT_ERROR
    try:
        acks = load_acks(config.state_dir)
    except AckFileError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.list:
        return _list(acks, args.json)
    targets = [parse_target(text) for text in args.targets]
    status = EXIT_OK
    done: list[str] = []  # said once the file is saved: a save that fails leaves no claim behind
    for path, line in targets:
        looked = _findings_at(path, line)
        if isinstance(looked, str):
            print(f"riffd: error: {looked}", file=sys.stderr)
            status = EXIT_ERROR
            continue
        found, not_a_transcript = looked
        if args.undo:
            keys = {key for _, key in found}
            kept = [
                ack
                for ack in acks
                if not (ack.path == str(path) and (ack.key in keys or ack.line == line))
            ]
            if len(kept) == len(acks):
                print(
                    f"riffd: error: {path}:{line}: nothing acknowledged there "
                    f"(`{riffd_advice(args)} ack --list`)",
                    file=sys.stderr,
                )
                status = EXIT_ERROR
            else:
                done.append(
                    f"{path}:{line}: {len(acks) - len(kept)} acknowledgement(s) taken back; the finding counts again"
                )
            acks = kept
            continue
        if not found:
            print(
                f"riffd: error: {path}:{line}: no finding names this line; "
                f"`{riffd_advice(args)} {shell_command('scan', path)}` lists its findings",
                file=sys.stderr,
            )
            status = EXIT_ERROR
            continue
        known = {(ack.path, ack.key) for ack in acks}
        for finding, key in found:
            cls = str(finding["class"])
            if (str(path), key) not in known:
                acks.append(
                    Ack(str(path), cls, line, key, time.strftime("%Y-%m-%dT%H:%M:%S%z"), args.note)
                )
            done.append(f"acknowledged {path}:{line}: {cls}: {finding.get('message', '')}")
            if cls in map(str, config.repair.classes) and not not_a_transcript:
                done.append(
                    f"  note: riffd still repairs {cls} once the session is idle; the acknowledgement only stops "
                    "it counting against health until then"
                )
    saved = save_acks(config.state_dir, acks)
    for said in done:
        print(said)
    if status == EXIT_OK and not args.undo:
        print(
            f"riffd: kept in {saved}; it stays listed as acknowledged; `{riffd_advice(args)} ack --undo "
            "FILE:LINE` takes it back",
            file=sys.stderr,
        )
    return status


def _findings_at(path: Path, line: int) -> tuple[list[tuple[dict[str, object], str]], str] | str:
    """Return (finding as JSON, key) for each finding naming `line` of `path`, with why the file is
    not taken for a transcript ('' when it is: riffd repairs only those), or an error message."""
    if not path.is_file():
        return f"{path}: no such transcript"
    report = scan_file(path)
    if report.error:
        return report.error
    found: list[tuple[dict[str, object], str]] = []
    for finding in report.findings:
        if line not in finding.lines or finding.cls in INFORMATIONAL:
            continue
        item = finding.to_json()
        key = finding_key({**item, "path": str(path)})
        if key is None:
            return f"{path}:{line}: the line cannot be read to acknowledge it"
        found.append((item, key))
    return found, report.not_a_transcript


def _list(acks: list[Ack], as_json: bool) -> int:
    if as_json:
        print_json({"acknowledged": [ack.to_json() for ack in acks]})
        return EXIT_OK
    if not acks:
        print("nothing acknowledged")
    for ack in acks:
        note = f" ({ack.note})" if ack.note else ""
        print(f"{ack.path}:{ack.line}: {ack.cls}, acknowledged {ack.at}{note}")
    return EXIT_OK
