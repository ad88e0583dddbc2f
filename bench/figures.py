"""Write a bench's result as a Markdown file the docs include (`--write docs/figures/<name>.md`).

The file holds one line saying which run produced it (command, date, commit, machine), the table,
and notes; the docs pages include it whole (pymdownx.snippets), so no figure is copied by hand.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cell(text: object) -> str:
    """Return `text` fit for one cell of a Markdown table (a `|` escaped, no line break)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Return a Markdown table of `header` and `rows`."""
    lines = [
        "| " + " | ".join(cell(name) for name in header) + " |",
        "|" + "---|" * len(header),
    ]
    lines.extend("| " + " | ".join(cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines)


def shown_command(script: str, argv: Sequence[str]) -> str:
    """Return the command line of the run, without its own `--write PATH`."""
    kept: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--write":
            skip = True
        elif not word.startswith("--write="):
            kept.append(word)
    return " ".join(["python3", f"bench/{script}", *kept])


def where() -> str:
    """Describe the run: the date, riffd's commit, the cores and the Python."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    today = datetime.datetime.now().astimezone().date().isoformat()
    return (
        f"{today}, riffd at {commit or 'an unknown commit'}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def write(path: Path, command: str, table: str, notes: Sequence[str] = ()) -> None:
    """Write `table` and `notes` to `path`, headed by the line that says which run produced them."""
    parts = [
        f"<!-- Written by `{command} --write {path}`; run it again to replace this file. -->",
        "",
        f"Run: `{command}` ({where()}).",
        "",
        table,
    ]
    if notes:
        parts += ["", *notes]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
