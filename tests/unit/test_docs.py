"""The docs cannot drift: the README stays short, gives the two set-up commands and links pages that
exist; the docs site's nav names every page; every file a page includes exists, and each figure file
says which bench run wrote it; CI gates the checks, then runs the README's test command verbatim.

(`riffd --help` against docs/usage.md is in test_cli, the layout against docs/architecture.md in
test_layout, the example config in test_config.)
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = next(
    path for path in Path(__file__).resolve().parents if (path / "pyproject.toml").is_file()
)
README = REPO / "README.md"
DOCS = REPO / "docs"
INSTALL_AND_RUN = "python3 -m pip install . && riffd run"
TEST_COMMAND = "python3 -m pip install -e '.[test]' && python3 -m pytest"
README_MAX_LINES = 250
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def nav_pages() -> list[str]:
    """Return the pages mkdocs.yml's nav names, in order (`- Title: page.md` or `- page.md`)."""
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)$", nav, re.MULTILINE)


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move reference material into docs/ "
        f"(at most {README_MAX_LINES})"
    )


def test_the_readme_gives_the_two_set_up_commands() -> None:
    commands = [
        line.split("#", 1)[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
        for line in block.splitlines()
    ]
    assert INSTALL_AND_RUN in commands
    assert TEST_COMMAND in commands


def test_every_link_of_the_readme_into_the_repository_exists() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    assert [link for link in local if not (REPO / link).exists()] == []


def test_the_nav_names_every_page_once() -> None:
    pages = nav_pages()
    assert len(pages) == len(set(pages)), "a page is in the nav twice"
    assert sorted(pages) == sorted(path.name for path in DOCS.glob("*.md"))


def test_every_included_file_exists() -> None:
    missing = {
        page.name: included
        for page in DOCS.glob("*.md")
        for included in SNIPPET.findall(page.read_text(encoding="utf-8"))
        if not (REPO / included).is_file()
    }
    assert missing == {}


def test_every_figure_file_is_written_by_a_bench_and_included() -> None:
    included = {
        included
        for page in DOCS.glob("*.md")
        for included in SNIPPET.findall(page.read_text(encoding="utf-8"))
    }
    figures = sorted((DOCS / "figures").glob("*.md"))
    assert figures
    for figure in figures:
        relative = figure.relative_to(REPO).as_posix()
        first = figure.read_text(encoding="utf-8").splitlines()[0]
        written = re.fullmatch(
            r"<!-- Written by `python3 (bench/\w+\.py)[^`]* --write (\S+)`; .* -->", first
        )
        assert written, f"{relative}: the first line must name the bench run that writes it"
        bench, target = written.groups()
        assert target == relative, f"{relative}: its first line says the bench writes {target}"
        assert '"--write"' in (REPO / bench).read_text(encoding="utf-8"), f"{bench} has no --write"
        assert relative in included, f"{relative}: no page includes it"


def test_ci_gates_the_checks_then_runs_the_readmes_test_command() -> None:
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    steps = [line.strip() for line in script if not line.lstrip().startswith("#")]

    def first(command: str) -> int:
        return next(
            number
            for number, line in enumerate(steps)
            if line.removeprefix("python3 -m ").startswith(command)
        )

    gates = [
        first("ruff format --check"),
        first("ruff check"),
        first("mypy"),
        first("mkdocs build --strict"),
    ]
    assert gates == sorted(gates)
    assert TEST_COMMAND in steps, ".ci/run must run the README's test command verbatim"
    assert steps.index(TEST_COMMAND) > gates[-1]
    assert first("pytest -m slow") > steps.index(TEST_COMMAND), "CI runs the slow ones after"


def test_pre_commit_runs_the_formatter_the_linter_and_mypy() -> None:
    config = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    entries = re.findall(r"^\s*entry: (.+)$", config, re.MULTILINE)
    assert any(entry.startswith("ruff format") for entry in entries)
    assert any(entry.startswith("ruff check") for entry in entries)
    assert any(entry.startswith("mypy") for entry in entries)
