"""The package's shape stays readable: formatted and linted, no import cycles, thin nodes.

Read from the source with ``ast``, so nothing is imported and every import
counts, wherever it hides: inside a function, under ``if TYPE_CHECKING:``,
in a ``try``. A function-level import is how a cycle gets past Python at
run time while the two modules still cannot be understood (or moved) apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "lerobot_ros"
MAX_NODE_METHOD_LINES = 40


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``name`` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name` only the module.
            candidates = [f"{target}.{alias.name}" for alias in node.names]
            candidates = [c for c in candidates if c in known] or [target]
        else:
            continue
        found.update(c for c in candidates if c in known and c != name)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = source_modules(root)
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a cycle
    path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [cycle_path(graph, set(component)) for component in components]


def cycle_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One concrete cycle through the component's first module, for a readable failure."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for successor in sorted(graph[node] & component):
            if successor == start:
                return paths[node] + [start]
            if successor not in paths:
                paths[successor] = paths[node] + [successor]
                frontier.append(successor)
    return sorted(component)


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, (
        "import cycles (function-level and TYPE_CHECKING imports count):\n"
        + "\n".join(" -> ".join(cycle) for cycle in found)
    )


def test_the_cycle_check_sees_imports_hidden_in_functions_and_type_checking(tmp_path):
    package = tmp_path / "lerobot_ros"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from lerobot_ros.inner import b\n")
    (package / "inner" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n"
    )
    (package / "c.py").write_text("import lerobot_ros.a\n")
    found = cycles(import_graph(package))
    assert found == [["lerobot_ros.a", "lerobot_ros.inner.b", "lerobot_ros.a"]]


def node_classes():
    """(module, class) for every ROS node class: a class whose bases name Node or LifecycleNode."""
    for name, path in source_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (getattr(base, "id", None) or getattr(base, "attr", None))
                in ("Node", "LifecycleNode")
                for base in node.bases
            ):
                yield name, node


def test_node_classes_are_found():
    found = {f"{module}.{cls.name}" for module, cls in node_classes()}
    assert {
        "lerobot_ros.server.node.PolicyServerNode",
        "lerobot_ros.sim.robot_node.SimRobotNode",
    } <= found


@pytest.mark.parametrize(
    "module, cls", list(node_classes()), ids=lambda value: getattr(value, "name", value)
)
def test_node_methods_are_at_most_40_lines(module, cls):
    long_methods = {
        method.name: method.end_lineno - method.lineno + 1
        for method in cls.body
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef))
        # The constructor is the node's table of contents: it declares every attribute
        # (test_every_attribute_of_a_node_is_declared_in_its_constructor), as long as that list.
        and method.name != "__init__"
        and method.end_lineno - method.lineno + 1 > MAX_NODE_METHOD_LINES
    }
    assert not long_methods, (
        f"{module}.{cls.name}: methods over {MAX_NODE_METHOD_LINES} lines: {long_methods}"
    )


def constructor_methods(cls: ast.ClassDef) -> set[str]:
    """``__init__`` and the methods it calls on ``self`` (the steps of one construction)."""
    init = next(
        (m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None
    )
    if init is None:
        return set()
    return {"__init__"} | {
        node.func.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and getattr(node.func.value, "id", None) == "self"
    }


def attributes_set_outside_init(cls: ast.ClassDef) -> dict[str, str]:
    """``self.<name> = ...`` in a method outside the construction (``constructor_methods``) for
    a name the construction never sets: {name: the method}. A lifecycle node declares what a
    transition makes as None in its constructor."""
    construction = constructor_methods(cls)
    in_init, elsewhere = set(), {}
    for method in cls.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            else:
                continue
            for target in targets:
                for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(element, ast.Attribute)
                        and isinstance(element.value, ast.Name)
                        and element.value.id == "self"
                    ):
                        if method.name in construction:
                            in_init.add(element.attr)
                        else:
                            elsewhere.setdefault(element.attr, method.name)
    return {name: method for name, method in elsewhere.items() if name not in in_init}


@pytest.mark.parametrize(
    "module, cls", list(node_classes()), ids=lambda value: getattr(value, "name", value)
)
def test_every_attribute_of_a_node_is_declared_in_its_constructor(module, cls):
    late = attributes_set_outside_init(cls)
    assert not late, f"{module}.{cls.name}: set outside __init__ (declare them there): {late}"
    optional_reads = [
        node.lineno
        for node in ast.walk(cls)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "getattr"
        and node.args
        and getattr(node.args[0], "id", None) == "self"
    ]
    assert not optional_reads, f"{module}.{cls.name}: getattr(self, ...) at lines {optional_reads}"


def test_the_attribute_check_sees_a_late_attribute():
    tree = ast.parse(
        "class N(Node):\n"
        "    def __init__(self):\n        self.a = None\n        self._build()\n"
        "    def _build(self):\n        self.d = 4\n"
        "    def configure(self):\n        self.a, self.b = 1, 2\n        self.c: int = 3\n"
    )
    assert attributes_set_outside_init(tree.body[0]) == {"b": "configure", "c": "configure"}
