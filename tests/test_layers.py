"""The packages form layers, each importing only the ones below it, with no circle anywhere.

    fairness_core  <-  exporter  <-  alerts  <-  dashboards  <-  fairness_stack  <-  fairness_sim
                   <-  fairctl  <-  benchmarks (imported by nothing)

The check reads every import statement of the tree (deferred ones inside functions included), so
an upward import or a circle between modules fails here with the files that make it, before
it reaches a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import ROOT

LAYERS = ("fairness_core", "exporter", "alerts", "dashboards", "fairness_stack", "fairness_sim", "fairctl", "benchmarks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    # Hidden directories are not the tree's: benchmarks/.peers holds the peers' virtualenv once
    # `python -m benchmarks` has run (git-ignored), and its packages import each other in loops.
    return {module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))
            if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of the tree that ``name`` imports (``from x import y`` counts ``x.y`` when
    that is a module of the tree, else ``x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.update(f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names)
    return {m for m in out if m in known or m.split(".")[0] in LAYERS}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {m for m in imported(name, path, known) if m in known} for name, path in found.items()}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return [f"{name} imports {target}" for name, targets in sorted(edges.items()) for target in sorted(targets)
            if LAYERS.index(target.split(".")[0]) > LAYERS.index(name.split(".")[0])]


def circles(edges: dict[str, set[str]]) -> list[str]:
    """Every loop a depth-first walk meets. A package's ``__init__`` importing its own modules is
    no loop back from them (it runs first), so those edges are left out."""
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                found.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_every_package_imports_only_the_layers_below_it() -> None:
    upward = upward_imports(graph())
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_no_circle_between_modules() -> None:
    loops = circles(graph())
    assert not loops, "modules that import each other in a loop:\n" + "\n".join(loops)


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    """The checker itself, on a module that imports upward (deferred, inside a function) and on
    a loop of two modules."""
    probe = tmp_path / "probe.py"
    probe.write_text("def later() -> None:\n    from fairctl.cli import app\n", encoding="utf-8")
    edges = {"fairness_stack.probe": imported("fairness_stack.probe", probe, set(modules()))}
    assert upward_imports(edges) == ["fairness_stack.probe imports fairctl.cli"]
    assert circles({"fairctl.a": {"fairctl.b"}, "fairctl.b": {"fairctl.a"}}) == ["fairctl.a -> fairctl.b -> fairctl.a"]
