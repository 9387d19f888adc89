"""The source tree's shape: engine/ grouped by job, no import circle in app/ or engine/, short
functions, and modes read from their table (issue 78).

The import graph is read from the source with ``ast`` (every import statement, at module level or
inside a function), so an import that only a function runs still counts: hiding a circle in a
function body does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"app": "specdec_studio.app", "engine": "specdec_studio.engine"}
MAX_TOP_LEVEL_ENGINE_MODULES = 15


def module_files() -> dict[str, Path]:
    """Every module of app/ and engine/ by its import name (a package by its ``__init__``)."""
    found = {}
    for folder, prefix in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports anywhere in its body. ``from P import x`` counts as an
    import of ``P.x`` where that is a module, else of ``P``. An ``if TYPE_CHECKING:`` block is
    not an import at run time (the window's parts name the window that holds them only there)."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            node.body = []  # cleared before the walk below collects the imports
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    return {t for t in targets if t in known and t != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(path, name, known) for name, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is small, but recursion depth is not ours to spend)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def test_no_import_circle_in_app_or_engine():
    graph = import_graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 200  # the walk found the real tree
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_a_planted_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    components = {tuple(c) for c in strongly_connected(graph)}
    assert ("a", "b", "c") in components and ("d",) in components and ("e",) in components


def test_function_level_imports_count(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def later():\n    from pkg import b\n    import pkg.c\n")
    found = imports_of(source, "pkg.a", {"pkg", "pkg.a", "pkg.b", "pkg.c"})
    assert found == {"pkg.b", "pkg.c"}


def test_engine_top_level_is_small():
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_ENGINE_MODULES, top


@pytest.mark.parametrize("package", sorted(
    str(p.parent.relative_to(ROOT)) for folder in PACKAGES for p in (ROOT / folder).rglob("__init__.py")))
def test_every_subpackage_says_its_job(package):
    docstring = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
    assert docstring and len(docstring.split()) >= 5, f"{package}/__init__.py needs a docstring saying its job"


# ------------------------------------------------------------------ the redesign's bounds (issue 78)
MAX_FUNCTION_LINES = 150  # any function of app/ or engine/
MAX_MODULE_LINES = 450  # any module of app/ or engine/
MAX_AUTO_FUNCTION_LINES = 120  # Auto's loop and planner read like llama.cpp's examples
MAX_MODE_NAME_COMPARISONS = 15  # outside the mode table and the CLI's parser
MODE_NAMES = {"plain", "lookahead", "speculative", "lookup", "mtp", "auto"}
TABLE_FIELDS = {"settings", "needs", "batch_slot"}  # a Mode's own fields: comparing them reads the table


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_the_bound():
    too_long = []
    for path in module_files().values():
        bound = MAX_AUTO_FUNCTION_LINES if "strategies/auto" in path.as_posix() else MAX_FUNCTION_LINES
        too_long += [f"{path.relative_to(ROOT)}:{name} ({n} lines)" for name, n in _functions(path) if n > bound]
    assert not too_long, too_long


def test_no_module_is_longer_than_the_bound():
    too_long = {str(path.relative_to(ROOT)): n for path in module_files().values()
                if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_long, too_long


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e) for e in node.elts))
    return set()


def mode_name_comparisons(paths) -> list[str]:
    """Comparisons with a mode's name (``mode == "lookup"``, ``x in ("plain", "auto")``) that do
    not read a field of the mode table."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if any(_strings(o) & MODE_NAMES for o in operands) and not any(
                    isinstance(o, ast.Attribute) and o.attr in TABLE_FIELDS for o in operands):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_a_mode_is_read_from_its_table_not_compared_by_name():
    paths = [p for p in module_files().values()
             if "engine/cli/" not in p.as_posix() and not p.as_posix().endswith("strategies/registry.py")]
    found = mode_name_comparisons(paths)
    assert len(found) <= MAX_MODE_NAME_COMPARISONS, found


def test_a_planted_mode_comparison_is_counted(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if config.mode == "lookup" or mode in ("plain", "x"):\n    pass\n'
                       'if m.needs == "draft":\n    pass\n')
    assert len(mode_name_comparisons([planted])) == 2


def test_batch_decoding_never_asks_which_drafter_it_drives():
    tree = ast.parse((ROOT / "engine" / "parallel.py").read_text())
    asked = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", "") == "isinstance" and "Planner" in ast.unparse(node.args[1])]
    assert not asked, asked
