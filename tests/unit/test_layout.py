"""The package layout stays true: no import cycle, imports only downwards, small modules, a
documented map.

The imports are read with `ast` (every `import` and `from ... import` anywhere in a module, inside
functions and `if TYPE_CHECKING:` blocks too), so a late import cannot hide a cycle.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from conftest import KINDS, REPO_DIR

REPO = REPO_DIR
PACKAGE = REPO / "src" / "riffd"
MAX_LINES = 500

# Lower layers never import higher ones; modules of one subpackage may import each other (without a
# cycle).
LAYERS = {
    "riffd": 0,
    "riffd.fsio": 0,
    "riffd.logs": 0,
    "riffd.forking": 0,
    "riffd.display": 0,
    "riffd.quickjson": 0,
    "riffd.paths": 1,
    "riffd.database": 1,
    "riffd.claude_code": 1,
    "riffd.transcript": 2,
    "riffd.config": 3,
    "riffd.repair": 3,
    "riffd.archive": 3,
    "riffd.tracker": 3,
    "riffd.state": 3,
    "riffd.hooks": 4,
    "riffd.reports": 4,
    "riffd.daemon": 5,
    "riffd.commands": 6,
    "riffd.mcp_server": 7,
    "riffd.entry": 8,
    "riffd.__main__": 9,
}


def module_names(package: Path) -> dict[str, Path]:
    """Return every module of the package under `package` by dotted name (a subpackage by its own
    name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Return the package's own modules that module `name` (at `path`) imports, wherever in it the
    import is."""
    root = name.split(".")[0]
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [base, node.module or ""]))
            # `from pkg import module` imports that module; `from module import name` imports the
            # module.
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                for alias in node.names
            ]
        else:
            continue
        found.update(
            target for target in targets if target.split(".")[0] == root and target in modules
        )
    found.discard(name)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Return module -> the package's modules it imports."""
    modules = module_names(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the import cycles of `graph` (strongly connected components of more than one module),
    each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str) -> tuple[str, int]:
    """Return (the LAYERS entry that holds `module`, its rank)."""
    parts = module.split(".")
    # the package itself ("riffd") holds only what LAYERS names exactly
    for size in range(len(parts), 1, -1):
        key = ".".join(parts[:size])
        if key in LAYERS:
            return key, LAYERS[key]
    if module in LAYERS:
        return module, LAYERS[module]
    raise AssertionError(
        f"{module} is in no layer: add it to LAYERS in tests/test_layout.py and docs/architecture.md's Layout"
    )


def upward_imports(graph: dict[str, set[str]]) -> Iterator[str]:
    """Yield each import from a module to another subpackage that is not in a lower layer."""
    for module, targets in sorted(graph.items()):
        home, rank = layer_of(module)
        for target in sorted(targets):
            target_home, target_rank = layer_of(target)
            if target_home != home and target_rank >= rank:
                yield f"{module} (layer {rank}) imports {target} (layer {target_rank})"


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_imports_point_down_the_layers() -> None:
    assert list(upward_imports(import_graph(PACKAGE))) == []


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "riffd"
    (package / "commands").mkdir(parents=True)
    (package / "repair").mkdir()
    for init in (package, package / "commands", package / "repair"):
        (init / "__init__.py").write_text('"""A package."""\n')
    (package / "fsio.py").write_text("def helper():\n    from riffd.repair import writer\n")
    (package / "repair" / "writer.py").write_text(
        "from riffd.fsio import helper\nfrom . import backup\n"
    )
    (package / "repair" / "backup.py").write_text(
        "def restore():\n    from riffd.repair.writer import helper\n"
    )
    (package / "commands" / "cli.py").write_text("import riffd.repair.writer\n")
    graph = import_graph(package)
    assert graph["riffd.commands.cli"] == {"riffd.repair.writer"}
    assert cycles(graph) == [["riffd.fsio", "riffd.repair.backup", "riffd.repair.writer"]]
    assert list(upward_imports(graph)) == [
        "riffd.fsio (layer 0) imports riffd.repair.writer (layer 3)"
    ]


def test_no_module_is_over_500_lines() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in module_names(PACKAGE).items()
    }
    over = {name: size for name, size in sizes.items() if size > MAX_LINES}
    assert over == {}, "split it by responsibility (not by squeezing lines)"


def test_every_subpackage_says_what_it_is_for() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and len(docstring) > 80, (
            f"{init}: say what the subpackage is for and what it may import"
        )


def test_the_docs_layout_names_every_subpackage_and_top_level_module() -> None:
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(\w+)/`", section)) | set(re.findall(r"`(\w+)\.py`", section))
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    top_level = {path.stem for path in PACKAGE.glob("*.py") if not path.stem.startswith("__")}
    assert named == subpackages | top_level


def test_every_package_map_names_each_of_its_modules() -> None:
    """A package's `__init__` docstring is its map: it names every module in it (as `name`)."""
    missing = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        named = set(re.findall(r"`(\w+)`", docstring))
        modules = {path.stem for path in init.parent.glob("*.py") if path.stem != "__init__"}
        if modules - named:
            missing[init.parent.name] = sorted(modules - named)
    assert missing == {}


def test_every_test_module_lives_in_the_folder_of_its_kind() -> None:
    """tests/<kind>/... (KINDS in tests/conftest.py, which marks each test with its folder's kind);
    module names stay unique across folders (pytest imports each by its name alone)."""
    tests = REPO / "tests"
    modules = sorted(tests.rglob("test_*.py"))
    misplaced = [
        str(path.relative_to(tests))
        for path in modules
        if len(path.relative_to(tests).parts) < 2 or path.relative_to(tests).parts[0] not in KINDS
    ]
    assert misplaced == [], f"move them under tests/{{{','.join(KINDS)}}}/"
    names = [path.name for path in modules]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_test_module_has_a_name_of_its_own() -> None:
    """pytest imports a test module by its base name (the folders have no __init__), so two of one
    name in different folders stop the whole run at collection."""
    tests = Path(__file__).resolve().parents[1]
    names = Counter(path.name for path in tests.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
