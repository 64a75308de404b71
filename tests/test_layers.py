"""The packages form layers, each importing only the ones below it, with no circle anywhere.

    fairness_core  <-  exporter  <-  alerts  <-  dashboards  <-  fairness_stack  <-  fairness_sim
                   <-  fairctl  <-  benchmarks (imported by nothing)

The check reads every import statement of the tree (deferred ones inside functions included), so
an upward import or a circle between modules fails here with the files that make it, before
it reaches a review.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import setuptools

from .conftest import ROOT

STDLIB = frozenset(sys.stdlib_module_names)
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


# What the worker and the exporter sidecar run: their commands, and the library classes an app
# embeds instead. The base install has none of the operator's drawing and rendering stack.
LEAN_ROLES = ("fairctl.__main__", "fairctl.cli", "fairctl.worker_command", "fairctl.exporter_command",
              "fairness_core.worker", "exporter.server")
OPERATOR_ONLY = ("matplotlib", "grafanalib", "jinja2")
# `import fairness_core` loads at most this many modules beyond what its own dependencies load
# (27 when set: 23 of its own and 4 of the standard library; 33 once the sharded queue became one
# queue of routing, layout and admission modules, each of one responsibility; 34 with the
# Sentinel client, which the scheduler's own connections consult).
CORE_IMPORT_BUDGET = 34
CORE_DEPENDENCIES = ("redis", "hiredis", "yaml", "sortedcontainers")


def third_party(path: Path) -> set[str]:
    """The top-level names of everything ``path`` imports that is neither the tree's nor relative."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - set(LAYERS)


def reached(roots: tuple[str, ...], edges: dict[str, set[str]]) -> set[str]:
    """Every module of the tree that importing ``roots`` may import, deferred imports included."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            todo.extend([*edges.get(name, ()), *(p for p in parents if p in edges)])
    return seen


def test_the_worker_and_the_exporter_never_import_the_operators_stack() -> None:
    """Read from the source, deferred imports included: not even a rare path of the worker or the
    exporter reaches matplotlib, grafanalib or jinja2, which only the operator's extras install."""
    found = modules()
    heavy = sorted(f"{name} imports {lib}" for name in reached(LEAN_ROLES, graph())
                   for lib in third_party(found[name]) & set(OPERATOR_ONLY))
    assert not heavy, "the worker or the exporter would need an operator's extra:\n" + "\n".join(heavy)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    listing = subprocess.run([sys.executable, "-c", f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"],
                             capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return set(json.loads(listing))


def test_import_fairness_core_stays_within_its_budget() -> None:
    """A producer that imports the core pays for the core and its four dependencies, nothing else:
    no other layer, no operator's library, and few modules of its own."""
    beyond = loaded_after("import fairness_core") - loaded_after(f"import {', '.join(CORE_DEPENDENCIES)}")
    foreign = sorted(m for m in beyond if m.split(".")[0] != "fairness_core" and m.split(".")[0] not in STDLIB)
    assert not foreign, f"import fairness_core loads modules of other packages: {foreign}"
    assert len(beyond) <= CORE_IMPORT_BUDGET, (
        f"import fairness_core loads {len(beyond)} modules beyond its dependencies' (budget {CORE_IMPORT_BUDGET}): "
        f"{sorted(beyond)}")


def test_the_lean_check_follows_deferred_imports_to_a_library(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def chart() -> None:\n    import matplotlib.pyplot\n    from jinja2 import Template\n",
                     encoding="utf-8")
    assert third_party(probe) == {"matplotlib", "jinja2"}
    edges = {"fairctl.a": {"exporter.b"}, "exporter.b": {"alerts.c"}, "alerts.c": set(), "alerts": set()}
    assert reached(("fairctl.a",), edges) == {"fairctl.a", "exporter.b", "alerts.c", "alerts"}


# The config's sections other layers own (fairness_core.config_sections), declared as entry points:
# the core parses a whole config without importing those layers, so their modules stay light.
SECTIONS_GROUP = "fairctl.config_sections"
SECTION_MODULES = ("alerts.config", "exporter.config", "exporter.sources.watching", "fairness_stack.kubernetes_config")


def test_the_core_finds_the_sections_it_does_not_own_by_entry_point_only() -> None:
    """pyproject.toml declares every owned section, the installed metadata has them (else the core
    would refuse their keys as unknown: reinstall with pip install -e .), and no core module
    imports a module that declares one (test_every_package_imports_only_the_layers_below_it checks
    any upward import)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    sections = declared[SECTIONS_GROUP]
    assert {p.name: p.value for p in entry_points(group=SECTIONS_GROUP)} == sections, "pip install -e ."
    assert {value.split(":")[0] for value in sections.values()} == set(SECTION_MODULES)
    core = {target for name, targets in graph().items() if name.startswith("fairness_core") for target in targets}
    assert not core & set(SECTION_MODULES)


def test_a_producer_loading_a_whole_config_loads_no_exporter_or_operator_library() -> None:
    """Loading a config with exporter and alerts sections through the core alone loads the modules
    owning every section (all of them, at the first config), and neither prometheus_client nor an
    operator's library: the sections' modules import nothing heavier than the core."""
    loaded = loaded_after("from fairness_core import load_config\nfrom fairness_core.config import EXAMPLE_CONFIG\n"
                          "load_config(EXAMPLE_CONFIG)")
    assert set(SECTION_MODULES) <= loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("prometheus_client", *OPERATOR_ONLY))
    assert not heavy, f"loading a config loads {heavy}"


def test_every_runtime_module_is_named_in_the_architecture_doc() -> None:
    """docs/architecture.md has a line per module: one added without it (or a directory of them
    without the directory) fails here, naming the module."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for package in (layer for layer in LAYERS if layer != "benchmarks"):  # the runtime packages
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT / package).as_posix()
            if path.name == "__init__.py" and name != "__init__.py":
                continue
            if name == "__init__.py" or f"`{name}`" in text or f"`{name.rsplit('/', 1)[0]}/`" in text:
                continue
            missing.append(f"{package}/{name}")
    assert not missing, f"docs/architecture.md names no line for: {', '.join(missing)}"


# What the wheel installs at the top of site-packages (docs/architecture.md, "Design decisions",
# says why alerts, exporter and dashboards keep their generic names): a new one is a decision.
INSTALLED_TOP_LEVEL = ["alerts", "dashboards", "exporter", "fairctl", "fairness_core", "fairness_sim", "fairness_stack"]


def installed_top_level(root: Path) -> list[str]:
    """The top-level names the wheel built from ``root`` installs, as setuptools finds them by
    pyproject.toml's ``packages.find`` (namespace packages included, as its default is)."""
    find = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]
    return sorted({name.split(".")[0] for name in setuptools.find_namespace_packages(where=root, include=find["include"])})


def test_the_wheel_installs_only_the_pinned_top_level_names(tmp_path: Path) -> None:
    assert installed_top_level(ROOT) == INSTALLED_TOP_LEVEL
    # ... and the check sees one more: a package matching an include pattern, such as alerts*
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    for name in [*INSTALLED_TOP_LEVEL, "alerts_extra"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").touch()
    assert installed_top_level(tmp_path) == sorted([*INSTALLED_TOP_LEVEL, "alerts_extra"])
