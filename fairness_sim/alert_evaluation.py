"""Which alerts a simulated run would have fired, and when, decided by Prometheus's own engine.

Why not evaluate the rules in Python: an alert is an expression, a ``for:`` and Prometheus's
lookback and staleness semantics; a re-implementation would test itself. Instead the simulator's
snapshots go through the exporter's own collector (the series production would serve, with the
``job``/``instance`` labels and ``up`` a Prometheus scrape adds), are written as promtool
``input_series``, and ``promtool test rules`` evaluates the rules file over them.

How the firing times are read: the test group asks, for every alert of the rules file at every
evaluation step, that *no* alert fires (``exp_alerts`` empty). promtool then reports each step at
which an alert did fire as a failure listing the alerts it got, with their labels; those reports
are the timeline, at the evaluation interval's resolution. A rules file that does not load, or
any promtool output that is not such a report, is an error, never "no alerts".
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from alerts import promtool
from alerts.config import alert_settings
from exporter import metrics as m
from exporter.collector import FairnessCollector
from fairness_core import Config, Snapshot
from fairness_core.queue import group_configs

INSTANCE = "simulator:29100"  # the simulated exporter's scrape target
# Wall-clock figures of the simulating process, not of the simulated system.
_NOT_SIMULATED = {m.EXPORTER_SCRAPE_DURATION.family_name}

_GROUP = re.compile(r"^\s*name: (.*),\s*$")
_CHECK = re.compile(r"^\s*alertname: (\S+), time: (\S+),\s*$")
_LABELS = re.compile(r"^\s*Labels:\{(.*)\}\s*$")
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_UNNAMED = re.compile(r"(?:^|[^A-Za-z0-9_:\s])\s*\{")  # a "{" that follows no metric name
_GO_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_GO_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class AlertEvaluationError(RuntimeError):
    """promtool could not evaluate the rules (its own message says why)."""


@dataclass(frozen=True)
class FiredAlert:
    """One alert (name and label set) that fired: first firing and every firing period (s)."""

    alert: str
    labels: Mapping[str, str]
    first_firing_s: float
    periods: tuple[tuple[float, float], ...]


class _Replay:
    """Stands in for the queue group the collector reads: hands it the simulated snapshot."""

    def __init__(self) -> None:
        self.current: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        assert self.current is not None
        return self.current


class _Shard:
    """One shard's collector, labelled as the production exporter labels it, on its replay."""

    def __init__(self, config: Config, group: Config) -> None:
        self.replay = _Replay()
        self.collector = FairnessCollector(group, self.replay, group=config.redis.prefix)


def _series_key(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class SeriesRecorder:
    """Scrapes the exporter's collector at every simulated scrape and keeps the samples per
    series; a series missing from a scrape gets a staleness marker, as Prometheus writes."""

    def __init__(self, config: Config) -> None:
        self._shards = self._collectors(config)
        self._values: dict[str, list[float | None]] = {}
        self._keys: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}  # most series recur every scrape
        self._target = {"job": alert_settings(config).exporter_job, "instance": INSTANCE}  # what the rules select on
        self.scrapes = 0

    @staticmethod
    def _collectors(config: Config) -> list[_Shard]:
        """A collector per shard (one for an unsharded queue), as ``fairctl exporter`` serves them."""
        return [_Shard(config, group) for group in group_configs(config)]

    def reconfigure(self, now_ms: int, config: Config) -> None:
        """Serve ``config``'s classes and their weights, SLOs and budgets from the next scrape on,
        as an exporter on an applied config does."""
        self._shards = self._collectors(config)

    def observe(self, now_ms: int, snapshots: Sequence[Snapshot]) -> None:
        """One scrape of every shard's exporter: ``snapshots``, a snapshot per shard."""
        self._add("up", {}, 1.0)
        for shard, snapshot in zip(self._shards, snapshots, strict=True):
            shard.replay.current = snapshot
            for family in shard.collector.collect():
                if family.name in _NOT_SIMULATED:
                    continue
                for sample in family.samples:
                    self._add(sample.name, sample.labels, sample.value)
        self.scrapes += 1
        for values in self._values.values():
            if len(values) < self.scrapes:
                values.append(None)

    def _add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        """Record a sample under its series, with the labels the scrape target adds."""
        cache = (name, tuple(labels.items()))
        key = self._keys.get(cache)
        if key is None:
            key = self._keys[cache] = _series_key(name, {**labels, **self._target})
        values = self._values.setdefault(key, [None] * self.scrapes)
        values.append(float(value))

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": key, "values": encode_values(values)} for key, values in sorted(self._values.items())]


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def encode_values(values: Sequence[float | None]) -> str:
    """promtool's expanding notation: a run with a constant step becomes ``a+bxn`` (promtool adds
    the step cumulatively, so the run is checked the same way, bit for bit), a value that vanished
    ``stale`` (then ``_`` while it stays away), so a 2-hour counter is a few tokens."""
    out: list[str] = []
    i, n = 0, len(values)
    while i < n:
        first, j = values[i], i + 1
        if first is None:
            while j < n and values[j] is None:
                j += 1
            gone = j - i
            if i > 0:  # it was there at the scrape before
                out.append("stale")
                gone -= 1
            if gone:
                out.append("_" if gone == 1 else f"_x{gone}")
        else:
            following = values[j] if j < n else None
            step = following - first if following is not None else 0.0
            expected = first
            while j < n:
                expected += step
                if values[j] != expected:
                    break
                j += 1
            run = j - i - 1
            sign = "-" if step < 0 else "+"
            out.append(_number(first) if run == 0 else f"{_number(first)}{sign}{_number(abs(step))}x{run}")
        i = j
    return " ".join(out)


def _go_duration(text: str) -> float:
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise AlertEvaluationError(f"unexpected time {text!r} in promtool's report")
    return sum(int(n) * _GO_UNITS[u] for n, u in parts)


def _promtool_duration(seconds: float) -> str:
    return f"{int(round(seconds * 1000))}ms" if not float(seconds).is_integer() else f"{int(seconds)}s"


@dataclass(frozen=True)
class Rules:
    """What the evaluation needs of a rules file: its alerts, and the metric names its
    expressions may select (None: any, as an expression selects some series by label alone)."""

    alerts: list[str]
    reads: frozenset[str] | None

    def read(self, series: list[dict[str, str]]) -> list[dict[str, str]]:
        """The series the rules may select: promtool would load the others only to skip them at
        every evaluation step, a fifth of its time in a simulation's evaluation."""
        if self.reads is None:
            return series
        return [s for s in series if s["series"].partition("{")[0] in self.reads]


def load_rules(rules_file: Path) -> Rules:
    """A Prometheus rules file's alerts and the names its expressions read."""
    try:
        data = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AlertEvaluationError(f"cannot read rules file {rules_file}: {exc}") from None
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise AlertEvaluationError(f"{rules_file} is not a Prometheus rules file (no groups)")
    rules = [r for g in groups for r in (g.get("rules") or [])]
    exprs = [str(r.get("expr", "")) for r in rules]
    # Every word of an expression is a superset of the metric names it selects, unless a
    # selector has no name ("{job=...}", or one given as __name__).
    by_label = any(_UNNAMED.search(e) or "__name__" in e for e in exprs)
    reads = None if by_label else frozenset(w for e in exprs for w in _WORD.findall(e))
    return Rules(sorted({str(r["alert"]) for r in rules if "alert" in r}), reads)


def parse_report(output: str, group: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]:
    """(alert, labels) -> evaluation times (s) at which promtool reported it firing in ``group``."""
    fired: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
    current_group, check = None, None
    for line in output.splitlines():
        if (g := _GROUP.match(line)) is not None:
            current_group, check = g.group(1), None
        elif (c := _CHECK.match(line)) is not None:
            check = (c.group(1), _go_duration(c.group(2)))
        elif (lab := _LABELS.match(line)) is not None and check is not None and current_group == group:
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _PAIR.findall(lab.group(1))}
            name = labels.pop("alertname", check[0])
            fired.setdefault((name, tuple(sorted(labels.items()))), []).append(check[1])
    return fired


def _periods(times: Iterable[float], step: float) -> tuple[tuple[float, float], ...]:
    out: list[tuple[float, float]] = []
    for t in sorted(times):
        if out and math.isclose(t, out[-1][1]):
            out[-1] = (out[-1][0], t + step)
        else:
            out.append((t, t + step))
    return tuple(out)


def evaluate(rules_file: Path, group: str, series: list[dict[str, str]], *, scrape_interval: float,
             evaluation_interval: float, duration: float) -> list[FiredAlert]:
    """Run ``promtool test rules`` over ``series`` and return the alerts that fired, first first."""
    rules = load_rules(rules_file)
    steps = int(duration // evaluation_interval)
    checks = [{"alertname": name, "eval_time": _promtool_duration(k * evaluation_interval)}
              for k in range(1, steps + 1) for name in rules.alerts]
    test: dict[str, Any] = {
        "rule_files": [str(rules_file.resolve())],
        "evaluation_interval": _promtool_duration(evaluation_interval),
        "tests": [{"name": group, "interval": _promtool_duration(scrape_interval),
                   "input_series": rules.read(series), "alert_rule_test": checks}],
    }
    fired: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fairctl-simulate-") as tmp:
        test_file = Path(tmp) / "simulation_test.yml"
        # JSON is YAML to promtool, and written in milliseconds where PyYAML's emitter takes a second
        test_file.write_text(json.dumps(test), encoding="utf-8")
        try:
            promtool.test_rules(test_file)  # passing: no alert fired at any step
        except promtool.PromtoolFailed as exc:
            fired = parse_report(exc.report, group)
            if not fired:
                raise AlertEvaluationError(str(exc)[-2000:]) from None
        except promtool.PromtoolMissing as exc:
            raise AlertEvaluationError(str(exc)) from None
    alerts = [FiredAlert(name, dict(labels), min(times), _periods(times, evaluation_interval))
              for (name, labels), times in fired.items()]
    return sorted(alerts, key=lambda a: (a.first_firing_s, a.alert, sorted(a.labels.items())))
