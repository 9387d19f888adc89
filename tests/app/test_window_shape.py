"""The window's shape (issue 78), read from the source with ``ast``: one base for MainWindow and no
mixins; each slice of the window's model written by its one controller; the activity machine
moved by the gate alone; no part reaching into another's private members; and the controls'
refresh a subscription, never a call a job has to remember."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
WINDOW = APP / "window"
# slice of app/model/window_model.py -> the one module that writes it
WRITERS = {"models": "models.py", "chat": "chat.py", "run": "runs.py", "demo": "demo.py",
           "presentation": "presentation.py", "tuning": "tuning.py", "jobs": "jobs.py"}


def _trees(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _chain(node: ast.AST) -> list[str]:
    """``self.model.run.update`` -> ["self", "model", "run", "update"] ([] for anything else)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
        return names[::-1]
    return []


def slice_writes(trees) -> list[tuple[str, str, int]]:
    """(slice, module, line) of every ``….model.<slice>.update(…)`` and ``….model.<slice>.<f> = …``."""
    found = []
    for path, tree in trees:
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Call):
                targets = [node.func]
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                chain = _chain(target)
                for i in range(len(chain) - 2):
                    if chain[i] == "model" and chain[i + 1] in WRITERS and (
                            not isinstance(node, ast.Call) or chain[-1] == "update"):
                        found.append((chain[i + 1], path.name, node.lineno))
    return found


def test_main_window_has_one_base_and_there_are_no_mixins():
    for path, tree in _trees(APP):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert not node.name.endswith("Mixin"), f"{path.relative_to(ROOT)}: {node.name}"
                if node.name == "MainWindow":
                    assert [ast.unparse(b) for b in node.bases] == ["QtWidgets.QMainWindow"]


def test_each_slice_has_one_writer():
    writes = slice_writes(_trees(APP))
    assert {s for s, _, _ in writes} == set(WRITERS), writes  # every slice is written somewhere: the walk works
    strays = [w for w in writes if w[1] != WRITERS[w[0]] or not (WINDOW / w[1]).exists()]
    assert not strays, f"slices written outside their controller: {strays}"


def test_a_planted_stray_write_is_found(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("self.model.run.update(live=None)\nwindow.model.chat.editing_index = 3\n"
                       "self.model.run.live.runs.append(1)\n")
    writes = slice_writes([(planted, ast.parse(planted.read_text()))])
    assert sorted(writes) == [("chat", "planted.py", 2), ("run", "planted.py", 1)]


def test_only_the_gate_moves_the_activity_machine():
    moves = [(path.name, node.lineno) for path, tree in _trees(APP) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and _chain(node.func)[-2:] == ["machine", "apply"]]
    assert moves and {name for name, _ in moves} == {"gate.py"}, moves


def test_no_part_touches_another_parts_private_members():
    reached = []
    for path, tree in _trees(WINDOW):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                    reached.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert not reached, reached


def test_the_controls_refresh_is_a_subscription():
    """Nothing calls the controls' refresh by hand: it is connected to the model and two widgets."""
    calls = [f"{path.name}:{node.lineno}" for path, tree in _trees(APP) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and _chain(node.func)[-2:] == ["controls_state", "refresh"]]
    assert not calls, calls
    assert not any("_update_buttons" in path.read_text() for path in WINDOW.rglob("*.py"))
