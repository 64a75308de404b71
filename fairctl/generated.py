"""Generated files: what ``fairctl generate`` writes and what ``--check`` compares.

An output set (the alerts, the dashboards) renders the config into ``{relative path:
text}`` under a directory it owns (``alerts/generated``). Registering another set is adding it to
``OUTPUT_SETS`` in fairctl/generate_command.py; nothing else changes. A set owns its directory:
files in it that the set no longer generates are reported by ``--check`` and deleted on write,
so a renamed alert does not leave a stale runbook behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from fairness_core import Config


class OutputSet(Protocol):
    """A family of generated files: a name, the directory it owns, and a pure render."""

    @property
    def name(self) -> str: ...

    @property
    def directory(self) -> PurePosixPath: ...

    def render(self, config: Config) -> Mapping[PurePosixPath, str]: ...


@dataclass(frozen=True)
class RenderedSet:
    """An output set whose render is a plain function (no state beyond its name and directory)."""

    name: str
    directory: PurePosixPath
    render: Callable[[Config], Mapping[PurePosixPath, str]]


@dataclass(frozen=True)
class Difference:
    path: Path
    what: str  # "changed", "missing" or "not generated any more"


def plan(config: Config, root: Path, sets: Iterable[OutputSet]) -> dict[Path, str]:
    """Every file the sets generate, by path under ``root``."""
    return {root / s.directory / rel: text for s in sets for rel, text in s.render(config).items()}


def _owned(root: Path, sets: Iterable[OutputSet]) -> set[Path]:
    """The files now in the sets' directories (hidden files and caches are nobody's output)."""
    out = set()
    for s in sets:
        base = root / s.directory
        for path in base.rglob("*") if base.is_dir() else ():
            parts = path.relative_to(base).parts
            if path.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in parts):
                out.add(path)
    return out


def differences(planned: Mapping[Path, str], root: Path, sets: Iterable[OutputSet]) -> list[Difference]:
    """What writing ``planned`` would change on disk, sorted by path."""
    out = [Difference(path, "missing" if not path.is_file() else "changed")
           for path, text in planned.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    out += [Difference(path, "not generated any more") for path in _owned(root, sets) - planned.keys()]
    return sorted(out, key=lambda d: d.path)


def write(planned: Mapping[Path, str], root: Path, sets: Iterable[OutputSet]) -> list[Difference]:
    """Bring the disk in line with ``planned``; returns what changed."""
    changes = differences(planned, root, sets)
    for change in changes:
        if change.path in planned:
            change.path.parent.mkdir(parents=True, exist_ok=True)
            change.path.write_text(planned[change.path], encoding="utf-8")
        else:
            change.path.unlink()
    return changes
