"""What a generated promtool unit test is made of: series, the alerts expected at a minute, the
recordings' samples, cases and files. :mod:`alerts.unittests` builds them from the config,
:mod:`alerts.side_by_side` packs cases into fewer promtool groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .promql import quote


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    values: str

    def text(self) -> str:
        return self.name + "{" + ", ".join(f"{k}={quote(v)}" for k, v in sorted(self.labels.items())) + "}"


@dataclass(frozen=True)
class Firing:
    """One alert expected to fire: its labels (with severity), value and annotation query results."""

    labels: Mapping[str, str]
    value: float
    queried: Mapping[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    minute: int
    alert: str
    firing: tuple[Firing, ...] = ()


@dataclass(frozen=True)
class Sample:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class ExprCheck:
    minute: int
    record: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Case:
    name: str
    series: tuple[Series, ...]
    checks: tuple[Check, ...] = ()
    expr_checks: tuple[ExprCheck, ...] = ()


@dataclass(frozen=True)
class TestFile:
    name: str
    cases: tuple[Case, ...]
    interval_minutes: int = 1
