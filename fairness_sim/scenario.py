"""Simulation scenarios: YAML files describing a fleet, its traffic and the alerts to expect.

A scenario is validated as strictly as ``fairness.yaml`` (and with the same reader), so a typo in
a 2.3-million-job storm fails in milliseconds with the field's path, not after minutes of
simulation: ``storm.yaml: streams[1].arrivals.poisson.rate_per_s: must be > 0, got 0``.

The scheduler configuration is not repeated here: a scenario names a ``fairness.yaml`` (relative to
the scenario file; the example config shipped with fairctl by default) and may patch individual values of it
(``config_patch``) to ask "what if" without copying the file.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fairness_core.ages import human
from fairness_core.classification import classify
from fairness_core.config import (
    CHARGES,
    EXAMPLE_CONFIG,
    POLICIES,
    ClassConfig,
    Config,
    parse_config,
    parse_duration,
)
from fairness_core.config_store import Moves
from fairness_core.yaml_reader import (
    ConfigError,
    Reader,
    boolean,
    choice,
    int_between,
    nonempty_str,
    read_yaml,
)

# The scenarios shipped inside the package; ``fairctl simulate priority-creep`` names one of them.
SCENARIOS = Path(str(resources.files(__package__) / "scenarios"))
DEFAULT_SCENARIO = SCENARIOS / "marketing-storm.yaml"
MAX_STREAMS = 65_535  # the simulator keeps each job's stream in a 16-bit array
MAX_BACKLOG = 100_000_000  # jobs a backlog stream keeps waiting over all its tenants, as the largest burst
_LABEL = r'[A-Za-z_][A-Za-z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"'
_SELECTOR = re.compile(rf'^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\{{\s*((?:{_LABEL}\s*,\s*)*(?:{_LABEL})?)\s*\}})?$')
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_PATCH_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


@dataclass(frozen=True)
class Poisson:
    rate_per_s: float


@dataclass(frozen=True)
class Constant:
    rate_per_s: float


@dataclass(frozen=True)
class Burst:
    at: float
    count: int


@dataclass(frozen=True)
class Backlog:
    """Each tenant of the stream keeps ``queued`` jobs waiting from the stream's start: a new one
    arrives whenever one of them starts (a producer that is always behind, so its tenant is
    backlogged the whole time whatever the scheduler gives it)."""

    queued: int


Arrivals = Poisson | Constant | Burst | Backlog


@dataclass(frozen=True)
class Service:
    """Service time in seconds: ``kind`` is ``constant`` (``a`` = S), ``exponential`` (``a`` =
    mean) or ``lognormal`` (``a`` = median, ``b`` = sigma of the underlying normal)."""

    kind: str
    a: float
    b: float = 0.0


@dataclass(frozen=True)
class TenantPool:
    """Tenants ``prefix0`` .. ``prefix{size-1}``, one picked uniformly for each job."""

    size: int
    prefix: str


@dataclass(frozen=True)
class Stream:
    name: str
    task: str
    tier: str
    user_waiting: bool
    tenant: str | TenantPool
    arrivals: Arrivals
    service: Service
    start: float
    stop: float | None


@dataclass(frozen=True)
class Crash:
    """``count`` slots of a pool die at ``at`` (their running jobs are abandoned: the leases expire
    and the reaper hands the jobs back) and come back ``restart_after`` later (None: never)."""

    at: float
    count: int
    restart_after: float | None


@dataclass(frozen=True)
class Pool:
    name: str
    count: int
    classes: tuple[str, ...] | None  # None: every class
    crashes: tuple[Crash, ...] = ()


def alert_text(alert: str, labels: Iterable[tuple[str, str]]) -> str:
    """``QueueStarving{queue="jobs:high"}``: an alert and label values as PromQL would select them."""
    inner = ", ".join(f'{k}="{v}"' for k, v in labels)
    return alert + (f"{{{inner}}}" if inner else "")


@dataclass(frozen=True)
class AlertMatch:
    """An alert by name, with label values it must carry (``QueueStarving{queue="jobs:high"}``);
    for alerts that must fire, ``before``: the latest acceptable first firing (s), and
    ``resolved_by``: the time (s) from which it must no longer fire (a fix that must take effect)."""

    alert: str
    labels: Mapping[str, str]
    before: float | None = None
    resolved_by: float | None = None

    def matches(self, alert: str, labels: Mapping[str, str]) -> bool:
        return alert == self.alert and all(labels.get(k) == v for k, v in self.labels.items())

    def __str__(self) -> str:
        return alert_text(self.alert, self.labels.items())


@dataclass(frozen=True)
class Fired:
    """An alert that fired in a run, as expectations judge it: first and last firing (s)."""

    alert: str
    labels: Mapping[str, str]
    first_s: float
    last_s: float


@dataclass(frozen=True)
class TenantWorkerTime:
    """A tenant's share of its class's worker time must be ``at_least`` and/or ``at_most`` this
    fraction."""

    tenant: str
    queue: str
    at_least: float | None = None
    at_most: float | None = None


@dataclass(frozen=True)
class FairWorkerTime:
    """Every tenant of ``queue`` backlogged throughout the run holds its tier-weighted fair share of
    the class's worker time, give or take ``within`` (0.05: 5 points)."""

    queue: str
    within: float


@dataclass(frozen=True)
class WaitFalls:
    """The p99 wait of the streams named ``stream`` is at least ``by`` times shorter than in the
    run ``baseline`` (another run of the same scenario)."""

    stream: str
    baseline: str
    by: float


@dataclass(frozen=True)
class PeakStarts:
    """The most jobs ``tenant`` started in one second of the run must be ``at_least`` and/or
    ``at_most`` this (what its downstream receives at the worst second)."""

    tenant: str
    at_least: int | None = None
    at_most: int | None = None


FigureCheck = TenantWorkerTime | FairWorkerTime | WaitFalls | PeakStarts
FIGURE_KINDS = ("worker_time", "fair_worker_time", "p99_wait_falls", "starts_per_second")


@dataclass(frozen=True)
class Expectation:
    fire: tuple[AlertMatch, ...]
    silent: tuple[AlertMatch, ...]
    figures: tuple[FigureCheck, ...] = ()

    @property
    def has_alerts(self) -> bool:
        """Whether it names alerts (else only figures, which need no rule evaluation)."""
        return bool(self.fire or self.silent)

    def violations(self, fired: Sequence[Fired]) -> list[str]:
        """What contradicts this expectation, given every alert that fired; empty when the run
        behaved as the scenario says it must."""
        out: list[str] = []
        for want in self.fire:
            seen = [f for f in fired if want.matches(f.alert, f.labels)]
            if not seen:
                out.append(f"{want} should fire but stayed silent")
                continue
            first, last = min(f.first_s for f in seen), max(f.last_s for f in seen)
            if want.before is not None and first > want.before:
                out.append(f"{want} should fire within {want.before:g}s but first fired at {first:g}s")
            if want.resolved_by is not None and last >= want.resolved_by:
                out.append(f"{want} should stop firing by {want.resolved_by:g}s but still fired at {last:g}s")
        for quiet in self.silent:
            times = [f.first_s for f in fired if quiet.matches(f.alert, f.labels)]
            if times:
                out.append(f"{quiet} should stay silent but fired at {min(times):g}s")
        return out


@dataclass(frozen=True)
class ConfigChange:
    """A config applied mid-run, as ``fairctl config apply`` does: ``config`` is the scenario's
    config with every patch up to this one; ``policy`` the scheduling policy those patches set
    (None: each run keeps the policy it runs under), ``charge`` likewise for ``scheduler.charge``;
    ``moves``: removed class -> the class its queued jobs move to."""

    at: float
    config: Config
    policy: str | None
    moves: Mapping[str, str]
    charge: str | None = None  # the charge basis these patches set (None: each run keeps its own)

    def pool_classes(self, classes: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """A reserved pool's classes once this change is applied: a moved class's slots serve the
        class its jobs move to, a removed class's serve nothing more (None: every class)."""
        if classes is None:
            return None
        kept = (self.moves.get(c, c) for c in classes)
        return tuple(dict.fromkeys(c for c in kept if c in self.config.class_names))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration: float
    seed: int
    config: Config
    workers: tuple[Pool, ...]
    streams: tuple[Stream, ...]
    policies: tuple[str, ...]
    expect: Mapping[str, Expectation]
    scrape_interval: float
    evaluation_interval: float
    source: str | None = None
    config_changes: tuple[ConfigChange, ...] = ()
    charges: tuple[str, ...] | None = None  # charge bases each policy runs under (None: the config's)
    variants: Mapping[str, Config] | None = None  # name -> the config each policy also runs under (None: none)
    # Why the scenario's ``expect`` was dropped (a shortened run, another shard layout); None: it was not
    unchecked_because: str | None = None

    def run_names(self, policies: Sequence[str] | None = None) -> tuple[str, ...]:
        """The runs of ``policies`` (default: the scenario's): one per policy, or one per policy
        and charge basis (or variant) when the scenario lists ``charges`` (or ``variants``)."""
        seconds = self.charges or tuple(self.variants or ()) or (None,)
        return tuple(run_name(p, c) for p in (policies or self.policies) for c in seconds)

    @property
    def account_separator(self) -> str | None:
        """The separator that splits tenant ids into accounts in some config of the scenario (its
        own or a variant's): every run's figures are then also told per account, so a run without
        accounts compares with one with them (None: no config has accounts)."""
        configs = (self.config, *(self.variants or {}).values())
        return next((c.tenants.account_separator for c in configs if c.tenants.account_separator), None)

    @property
    def reports_worker_time(self) -> bool:
        """Whether the output shows worker time: the scenario compares charge bases or variants,
        or charges by runtime (the other scenarios' output stays as it was)."""
        return self.charges is not None or self.variants is not None or any(
            c.scheduler.charge == "runtime" for c in (self.config, *(ch.config for ch in self.config_changes)))

    @property
    def watched_tenants(self) -> tuple[str, ...]:
        """The tenants whose starts every run tells second by second: those a ``tenants.overrides``
        entry gives a dispatch rate or an in-flight cap in some config of the scenario (its own, a
        variant's or a change's), and those a ``starts_per_second`` check names."""
        configs = (self.config, *(self.variants or {}).values(), *(c.config for c in self.config_changes))
        limited = (t for c in configs for t, o in c.tenants.overrides.items() if o.dispatch_rate or o.max_in_flight)
        named = (check.tenant for e in self.expect.values() for check in e.figures if isinstance(check, PeakStarts))
        return tuple(dict.fromkeys((*limited, *named)))

    def downstream_rate(self, tenant: str) -> float | None:
        """The lowest dispatch rate a ``tenants.overrides`` entry sets for ``tenant`` in some config
        of the scenario: what its downstream takes, which a run without the limit is measured
        against (None: no config sets one)."""
        configs = (self.config, *(self.variants or {}).values(), *(c.config for c in self.config_changes))
        overrides = (c.tenants.overrides.get(tenant) for c in configs)
        rates = [o.dispatch_rate for o in overrides if o is not None and o.dispatch_rate]
        return min(rates, default=None)

    @property
    def final_config(self) -> Config:
        """The config in force at the end: the last change's, else the scenario's."""
        return self.config_changes[-1].config if self.config_changes else self.config

    def class_settings(self) -> dict[str, tuple[ClassConfig, float]]:
        """Every class a config of the run names, with its settings and weight share in the last
        config naming it: what a class is judged by (the config in force at the end, or when the
        class was removed), in the order the classes first appear."""
        out: dict[str, tuple[ClassConfig, float]] = {}
        for config in (self.config, *(c.config for c in self.config_changes)):
            out.update((c.name, (c, c.weight / config.total_weight)) for c in config.classes)
        return out

    def with_shards(self, shards: int, hand: int) -> Scenario:
        """The scenario on ``shards`` shards with hands of ``hand``: ``redis.shards`` and
        ``redis.shard_hand`` set in its config and in every config change's (so no change reads as
        re-sharding), and no ``expect`` (which is about the scenario's own layout) unless the
        layout is the scenario's."""
        if (shards, hand) == (self.config.redis.shards, self.config.redis.shard_hand):
            return self
        changes = tuple(dataclasses.replace(c, config=sharded_config(c.config, shards, hand)) for c in self.config_changes)
        why = self.unchecked_because or (
            f"the scenario's expectations are about its own layout ({self.config.redis.shards} shard"
            f"{'s' if self.config.redis.shards != 1 else ''}), not {shards} shard{'s' if shards != 1 else ''} "
            f"with hands of {hand}" if self.expect else None)
        return dataclasses.replace(self, config=sharded_config(self.config, shards, hand), expect={},
                                   config_changes=changes, unchecked_because=why)

    def shortened(self, duration: float) -> Scenario:
        """The first ``duration`` seconds only: the changes after it dropped, and no ``expect``
        (which is about the whole scenario; ``unchecked_because`` says so)."""
        why = self.unchecked_because or (
            f"the scenario's expectations are about its whole {human(self.duration)} run, "
            f"not this {human(duration)} {'window' if duration < self.duration else 'run'}" if self.expect else None)
        return dataclasses.replace(self, duration=duration, expect={},
                                   config_changes=tuple(c for c in self.config_changes if c.at < duration),
                                   unchecked_because=why)


def sharded_config(config: Config, shards: int, hand: int) -> Config:
    """``config`` with ``redis.shards`` and ``redis.shard_hand`` set."""
    return dataclasses.replace(config, redis=dataclasses.replace(config.redis, shards=shards, shard_hand=hand))


def run_name(policy: str, charge: str | None) -> str:
    """A run's name: its policy, with the charge basis (or variant) when the scenario compares
    them (``weighted-fair/runtime``, ``weighted-fair/two-level``)."""
    return policy if charge is None else f"{policy}/{charge}"


def run_parts(name: str) -> tuple[str, str | None]:
    """``weighted-fair/runtime`` -> (``weighted-fair``, ``runtime``); a policy alone -> (it, None);
    a variant's name comes second as a charge basis does."""
    policy, _, charge = name.partition("/")
    return policy, charge or None


# ------------------------------------------------------------------ small converters


def _number(positive: bool) -> Callable[[object, str], float]:
    def convert(value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"expected a number, got {value!r}")
        if positive and value <= 0:
            raise ConfigError(path, f"must be > 0, got {value}")
        if not positive and value < 0:
            raise ConfigError(path, f"must be >= 0, got {value}")
        return float(value)
    return convert


def _offset(value: object, path: str) -> float:
    """A point in simulated time: a duration, or 0 for the start."""
    if value == 0 or value in ("0", "0s"):
        return 0.0
    return parse_duration(value, path)


def _one_of(value: object, path: str, options: tuple[str, ...]) -> tuple[str, object]:
    """A mapping with exactly one of ``options`` as its key (``{poisson: {...}}``)."""
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in options:
        raise ConfigError(path, f"expected a mapping with exactly one of: {', '.join(options)}; got {value!r}")
    key, inner = next(iter(value.items()))
    return str(key), inner


# ------------------------------------------------------------------ sections


def _arrivals(value: object, path: str, source: str | None) -> Arrivals:
    kind, inner = _one_of(value, path, ("poisson", "constant", "burst", "backlog"))
    r = Reader(inner, f"{path}.{kind}", source)
    out: Arrivals
    if kind == "burst":
        out = Burst(at=r.get("at", 0.0, _offset), count=r.require("count", int_between(1, 100_000_000)))
    elif kind == "backlog":
        out = Backlog(queued=r.require("queued", int_between(1, 100_000)))
    else:
        rate = r.require("rate_per_s", _number(positive=True))
        out = Poisson(rate) if kind == "poisson" else Constant(rate)
    r.done()
    return out


def _service(value: object, path: str, source: str | None) -> Service:
    kind, inner = _one_of(value, path, ("constant", "exponential", "lognormal"))
    if kind == "constant":
        return Service("constant", _number(positive=True)(inner, f"{path}.constant"))
    r = Reader(inner, f"{path}.{kind}", source)
    if kind == "exponential":
        out = Service("exponential", r.require("mean", _number(positive=True)))
    else:
        out = Service("lognormal", r.require("median", _number(positive=True)), r.require("sigma", _number(positive=False)))
    r.done()
    return out


def _tenant(value: object, path: str, source: str | None) -> str | TenantPool:
    if isinstance(value, str):
        return nonempty_str(value, path)
    r = Reader(value, path, source)
    out = TenantPool(size=r.require("pool", int_between(1, 10_000_000)), prefix=r.get("prefix", "tenant-", nonempty_str))
    r.done()
    return out


def _stream_job(r: Reader, config: Config) -> tuple[str, str, bool]:
    """(task, tier, user_waiting) of a stream. An explicit ``class`` becomes the task, tier and
    user_waiting of the first classification rule that sends jobs there, so even these jobs go
    through the production classification (and carry that rule's reason)."""
    tier = r.get("tier", config.tenants.default_tier, choice(tuple(config.tenants.tiers)))
    user_waiting = r.get("user_waiting", False, boolean)
    task = r.get("task", None, nonempty_str)
    queue = r.get("class", None, choice(config.class_names))
    if task is not None and queue is None:
        return task, tier, user_waiting
    if task is not None or queue is None:  # both, or neither
        raise r.error("task", "give exactly one of task (classified by the config's rules) or class")
    job = class_job(config, queue, tier, user_waiting)
    if job is None:
        raise r.error("class", f"no classification rule of the config sends jobs to {queue!r}")
    return job


def class_job(config: Config, queue: str, tier: str | None = None,
              user_waiting: bool = False) -> tuple[str, str, bool] | None:
    """The (task, tier, user_waiting) of a job of class ``queue``: the first classification rule's
    that sends jobs there, so such jobs go through the production classification (and carry that
    rule's reason); ``tier`` and ``user_waiting`` where the rule names none (None: none sends there)."""
    tier = tier or config.tenants.default_tier
    for rule in config.classification:
        if rule.queue != queue:
            continue
        job = (min(rule.tasks) if rule.tasks else "job", rule.tenant_tier or tier,
               user_waiting if rule.user_waiting is None else rule.user_waiting)
        if classify(config, job[0], tier=job[1], user_waiting=job[2]).queue == queue:
            return job
    return None


def _stream(value: object, path: str, source: str | None, config: Config, duration: float) -> Stream:
    r = Reader(value, path, source)
    task, tier, user_waiting = _stream_job(r, config)
    stream = Stream(
        name=r.get("name", task, nonempty_str), task=task, tier=tier, user_waiting=user_waiting,
        tenant=r.require("tenant", lambda v, p: _tenant(v, p, source)),
        arrivals=r.require("arrivals", lambda v, p: _arrivals(v, p, source)),
        service=r.require("service_s", lambda v, p: _service(v, p, source)),
        start=r.get("start", 0.0, _offset), stop=r.get("stop", None, _offset),
    )
    if stream.stop is not None and stream.stop <= stream.start:
        raise r.error("stop", "must be later than start")
    if isinstance(stream.arrivals, Burst) and stream.arrivals.at >= duration:
        raise ConfigError(f"{path}.arrivals.burst.at", "must be inside the scenario's duration", source)
    if isinstance(stream.arrivals, Backlog) and isinstance(stream.tenant, TenantPool) and \
            stream.arrivals.queued * stream.tenant.size > MAX_BACKLOG:
        raise ConfigError(f"{path}.arrivals.backlog.queued", f"{stream.arrivals.queued:,} jobs for each of "
                          f"{stream.tenant.size:,} tenants is more than {MAX_BACKLOG:,} jobs waiting", source)
    r.done()
    return stream


def _pool(value: object, path: str, source: str | None, config: Config, index: int) -> Pool:
    r = Reader(value, path, source)

    def classes(raw: object, cpath: str) -> tuple[str, ...] | None:
        if raw == "all":
            return None
        if not isinstance(raw, list) or not raw:
            raise ConfigError(cpath, f"expected all or a non-empty list of class names, got {raw!r}")
        return tuple(choice(config.class_names)(c, f"{cpath}[{i}]") for i, c in enumerate(raw))

    def crashes(raw: object, cpath: str) -> tuple[Crash, ...]:
        if not isinstance(raw, list):
            raise ConfigError(cpath, f"expected a list of {{at, count, restart_after}}, got {raw!r}")
        out = []
        for i, item in enumerate(raw):
            c = Reader(item, f"{cpath}[{i}]", source)
            out.append(Crash(at=c.require("at", _offset), count=c.require("count", int_between(1, 100_000)),
                             restart_after=c.get("restart_after", None, parse_duration)))
            c.done()
        return tuple(out)

    out = Pool(name=r.get("name", f"pool-{index}", nonempty_str), count=r.require("count", int_between(1, 100_000)),
               classes=r.get("classes", None, classes), crashes=r.get("crashes", (), crashes))
    r.done()
    return out


def _alert_match(value: object, path: str, source: str | None, fire: bool) -> AlertMatch:
    if isinstance(value, str):
        match = _SELECTOR.match(value.strip())
        if match is None:
            raise ConfigError(path, f'expected an alert name, optionally with labels: QueueStarving{{queue="jobs:high"}}; got {value!r}', source)
        pairs = _MATCHER.findall(match.group(2) or "")
        return AlertMatch(match.group(1), {k: v.replace('\\"', '"') for k, v in pairs})
    r = Reader(value, path, source)

    def labels(raw: object, lpath: str) -> dict[str, str]:
        if not isinstance(raw, dict):
            raise ConfigError(lpath, f"expected a mapping of label name to value, got {raw!r}")
        return {str(k): nonempty_str(v, f"{lpath}.{k}") for k, v in raw.items()}

    out = AlertMatch(alert=r.require("alert", nonempty_str), labels=r.get("labels", {}, labels),
                     before=r.get("before", None, parse_duration) if fire else None,
                     resolved_by=r.get("resolved_by", None, parse_duration) if fire else None)
    r.done()
    return out


@dataclass(frozen=True)
class _Names:
    """What an expectation may name: the classes, the streams and the other runs."""

    classes: tuple[str, ...]
    streams: tuple[str, ...]
    runs: tuple[str, ...]


def _fraction(value: object, path: str) -> float:
    number = _number(positive=False)(value, path)
    if number > 1:
        raise ConfigError(path, f"expected a fraction between 0 and 1 (0.05 for 5 points), got {value!r}")
    return number


def _jobs(value: object, path: str) -> int:
    return int_between(0, 10**9)(value, path)


def _figures(raw: object, path: str, source: str | None, kind: str, names: _Names) -> tuple[FigureCheck, ...]:
    """``worker_time``, ``fair_worker_time``, ``p99_wait_falls`` or ``starts_per_second``: a list of
    checks on the run's figures."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, f"expected a non-empty list of {kind} checks, got {raw!r}")
    out: list[FigureCheck] = []
    for i, item in enumerate(raw):
        r = Reader(item, f"{path}[{i}]", source)
        check: FigureCheck
        if kind == "worker_time":
            check = TenantWorkerTime(tenant=r.require("tenant", nonempty_str), queue=r.require("class", choice(names.classes)),
                                     at_least=r.get("at_least", None, _fraction), at_most=r.get("at_most", None, _fraction))
            if check.at_least is None and check.at_most is None:
                raise r.error("at_least", "give at_least, at_most or both")
        elif kind == "fair_worker_time":
            check = FairWorkerTime(queue=r.require("class", choice(names.classes)), within=r.require("within", _fraction))
        elif kind == "starts_per_second":
            check = PeakStarts(tenant=r.require("tenant", nonempty_str), at_least=r.get("at_least", None, _jobs),
                               at_most=r.get("at_most", None, _jobs))
            if check.at_least is None and check.at_most is None:
                raise r.error("at_least", "give at_least, at_most or both")
        else:
            check = WaitFalls(stream=r.require("stream", choice(names.streams)), baseline=r.require("from", choice(names.runs)),
                              by=r.require("by", _number(positive=True)))
        r.done()
        out.append(check)
    return tuple(out)


def _expectation(value: object, path: str, source: str | None, names: _Names) -> Expectation:
    r = Reader(value, path, source)

    def matches(fire: bool) -> Callable[[object, str], tuple[AlertMatch, ...]]:
        def convert(raw: object, lpath: str) -> tuple[AlertMatch, ...]:
            if not isinstance(raw, list):
                raise ConfigError(lpath, f"expected a list of alerts, got {raw!r}")
            return tuple(_alert_match(item, f"{lpath}[{i}]", source, fire) for i, item in enumerate(raw))
        return convert

    def figures(kind: str) -> Callable[[object, str], tuple[FigureCheck, ...]]:
        return lambda raw, fpath: _figures(raw, fpath, source, kind, names)

    out = Expectation(fire=r.get("fire", (), matches(True)), silent=r.get("silent", (), matches(False)),
                      figures=tuple(check for kind in FIGURE_KINDS for check in r.get(kind, (), figures(kind))))
    r.done()
    return out


def _choices(options: tuple[str, ...], plural: str, singular: str) -> Callable[[object, str], tuple[str, ...]]:
    """A non-empty list of distinct ``options`` (the ``policies`` or ``charges`` list)."""
    def convert(value: object, path: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise ConfigError(path, f"expected a non-empty list of {plural} ({', '.join(options)}), got {value!r}")
        out = tuple(choice(options)(p, f"{path}[{i}]") for i, p in enumerate(value))
        if len(set(out)) != len(out):
            raise ConfigError(path, f"lists a {singular} twice")
        return out
    return convert


# ------------------------------------------------------------------ the scheduler config


def _patch_items(patch: object, path: str) -> dict[Any, object]:
    """A patch, checked to be the mapping of config path to value it must be."""
    if not isinstance(patch, dict):
        raise ConfigError(path, f"expected a mapping of config path to value, got {patch!r}")
    return patch


def _patch(data: Any, patch: object, path: str) -> None:
    """Apply ``{"classes[0].reserved_slots": 0, ...}`` to the raw YAML of a fairness.yaml: each key
    is a path to a value that exists in the file (or a new key of an existing mapping)."""
    for key, value in _patch_items(patch, path).items():
        where = f'{path}."{key}"'
        steps = _PATCH_STEP.findall(str(key))
        if not steps or "".join(f"[{i}]" if i else f".{n}" for n, i in steps).lstrip(".") != key:
            raise ConfigError(where, "expected a path such as classes[0].reserved_slots or scheduler.batch")
        node = data
        for n, (name, idx) in enumerate(steps):
            last = n == len(steps) - 1
            if idx:
                if not isinstance(node, list) or int(idx) >= len(node):
                    raise ConfigError(where, f"the config has no list item [{idx}] there")
                if last:
                    node[int(idx)] = value
                node = node[int(idx)]
            else:
                if not isinstance(node, dict) or (name not in node and not last):
                    raise ConfigError(where, f"the config has no section {name!r} there")
                if last:
                    node[name] = value
                node = node[name]


def _config(r: Reader, base: Path, instead: Path | None) -> tuple[Any, Config]:
    """The scheduler config as raw YAML (for later patches) and validated."""
    raw_path = r.get("config", None, nonempty_str)
    path = instead or ((base / raw_path).resolve() if raw_path is not None else EXAMPLE_CONFIG)
    try:
        data = read_yaml(path, "config file")
    except ConfigError as exc:
        raise r.error("config", exc.message) from None
    patch = r.get("config_patch", None, lambda v, p: v)
    if patch is not None:
        try:
            _patch(data, patch, r.sub("config_patch"))
        except ConfigError as exc:
            raise ConfigError(exc.path, exc.message, r.source) from None
    label = str(path) + (" (with the scenario's config_patch)" if patch is not None else "")
    return data, parse_config(data, label)


def _variants(r: Reader, data: Any, config: Config) -> dict[str, Config] | None:
    """``variants``: name -> a patch on the scenario's config (config_patch included); each policy
    runs once under each, so one scenario compares a config with and without a setting. Validated
    now, so a bad variant fails at load."""
    raw = r.get("variants", None, lambda v, p: v)
    if raw is None:
        return None
    if not isinstance(raw, dict) or len(raw) < 2:
        raise r.error("variants", f"expected a mapping of two or more names to config patches ({{}}: the config as "
                      f"it is), got {raw!r}")
    out: dict[str, Config] = {}
    for name, patch in raw.items():
        where = f"{r.sub('variants')}.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(where, "expected a name of letters, digits, '.', '_' or '-' (it names the run: "
                              "weighted-fair/<name>)", r.source)
        variant = copy.deepcopy(data)
        try:
            _patch(variant, patch, where)
            out[name] = parse_config(variant)
        except ConfigError as exc:
            raise ConfigError(where, f"the patched config is invalid: {exc}", r.source) from None
        if out[name].class_names != config.class_names:
            raise ConfigError(where, "a variant keeps the scenario's classes (the runs compare class by class)",
                              r.source)
    return out


def _moves(value: object, path: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping of removed class to the class its jobs move to, got {value!r}")
    return {nonempty_str(old, path): nonempty_str(new, f"{path}.{old}") for old, new in value.items()}


def _sets(patch: Mapping[Any, object], field: str) -> bool:
    """Whether a patch sets ``field`` (``scheduler.policy``) or a section holding it."""
    return any(field == str(key) or field.startswith(f"{key}.") for key in patch)


def _config_changes(r: Reader, data: Any, duration: float) -> tuple[ConfigChange, ...]:
    """``config_changes``: each patch applies on top of the config in force before it and is
    validated now, so a bad change fails at load, not minutes into the run."""
    changes: list[ConfigChange] = []
    for i, item in enumerate(r.get("config_changes", [], _list_of("config changes", r.source, 1, 1000))):
        c = Reader(item, f"config_changes[{i}]", r.source)
        at = c.require("at", _offset)
        if not 0 < at < duration:
            raise c.error("at", f"must be inside the scenario's duration (0 to {duration:g}s, exclusive), got {at:g}s")
        if changes and at <= changes[-1].at:
            raise c.error("at", f"must be later than config_changes[{i - 1}].at: list the changes in time order")
        patch = c.require("patch", _patch_items)
        data = copy.deepcopy(data)
        try:
            _patch(data, patch, c.sub("patch"))
        except ConfigError as exc:
            raise ConfigError(exc.path, exc.message, r.source) from None
        try:
            config = parse_config(data)
        except ConfigError as exc:
            raise c.error("patch", f"the patched config is invalid: {exc}") from None
        moves: dict[str, str] = c.get("moves", {}, _moves)
        try:
            Moves(classes=moves).check(config)
        except ValueError as exc:
            raise c.error("moves", str(exc)) from None
        c.done()
        fixed = _sets(patch, "scheduler.policy") or bool(changes and changes[-1].policy)
        charged = _sets(patch, "scheduler.charge") or bool(changes and changes[-1].charge)
        changes.append(ConfigChange(at, config, config.scheduler.policy if fixed else None, moves,
                                    config.scheduler.charge if charged else None))
    return tuple(changes)


# ------------------------------------------------------------------ the scenario


def parse_scenario(data: object, source: str | None = None, base: Path | None = None,
                   config_file: Path | None = None) -> Scenario:
    """Validate an already-parsed scenario document; ``base`` resolves its ``config`` path, and
    ``config_file`` replaces that file (its ``config_patch`` still applies)."""
    r = Reader(data, "", source)
    data, config = _config(r, base or Path.cwd(), config_file)
    duration = r.require("duration", parse_duration)
    streams_raw = r.require("streams", _list_of("streams", source, 1, MAX_STREAMS))
    workers_raw = r.require("workers", _list_of("workers", source, 1, 1000))
    all_policies: tuple[str, ...] = POLICIES
    policies = r.get("policies", all_policies, _choices(POLICIES, "policies", "policy"))
    charges = r.get("charges", None, _choices(CHARGES, "charge bases", "charge basis"))
    variants = _variants(r, data, config)
    if variants is not None and charges is not None:
        raise r.error("variants", "give charges or variants, not both (a variant may set scheduler.charge)")
    workers = tuple(_pool(w, f"workers[{i}]", source, config, i) for i, w in enumerate(workers_raw))
    streams = tuple(_stream(s, f"streams[{i}]", source, config, duration) for i, s in enumerate(streams_raw))
    changes = _config_changes(r, data, duration)
    if variants is not None and changes:
        raise r.error("variants", "give config_changes or variants, not both: a change patches one config")
    runs = tuple(run_name(p, c) for p in POLICIES for c in (charges or tuple(variants or ()) or (None,)))
    classes = tuple(dict.fromkeys(c for cfg in (config, *(ch.config for ch in changes)) for c in cfg.class_names))
    names = _Names(classes, tuple(dict.fromkeys(s.name for s in streams)), runs)

    def expect(raw: object, path: str) -> dict[str, Expectation]:
        if not isinstance(raw, dict):
            raise ConfigError(path, f"expected a mapping of {'policy/charge' if charges else 'policy/variant' if variants else 'policy'} to "
                              f"fire/silent lists, got {raw!r}")
        return {choice(runs)(p, f"{path}.{p}"): _expectation(v, f"{path}.{p}", source, names) for p, v in raw.items()}

    scenario = Scenario(
        name=r.require("name", nonempty_str),
        description=r.get("description", "", nonempty_str),
        duration=duration,
        seed=r.get("seed", 0, int_between(0, 2**63 - 1)),
        config=config,
        workers=workers,
        streams=streams,
        policies=policies,
        expect=r.get("expect", {}, expect),
        scrape_interval=r.get("scrape_interval", 15.0, parse_duration),
        evaluation_interval=r.get("evaluation_interval", 15.0, parse_duration),
        source=source,
        config_changes=changes,
        charges=charges,
        variants=variants,
    )
    r.done()
    for i, pool in enumerate(scenario.workers):
        serves = pool.classes
        for k, change in enumerate(scenario.config_changes):
            serves = change.pool_classes(serves)
            if serves == ():
                raise ConfigError(f"workers[{i}].classes", f"config_changes[{k}] removes every class this pool "
                                  "serves: move one of them to a configured class", source)
    if scenario.scrape_interval > duration:
        raise ConfigError("scrape_interval", "must not be longer than the duration", source)
    return scenario


def _list_of(key: str, source: str | None, low: int, high: int) -> Callable[[object, str], list[Any]]:
    def convert(value: object, path: str) -> list[Any]:
        if not isinstance(value, list) or not low <= len(value) <= high:
            raise ConfigError(path, f"expected a list of {low} to {high} {key}, got {value!r}")
        return value
    return convert


def shipped_scenarios() -> list[str]:
    """The names of the scenarios shipped with fairctl, sorted."""
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def scenario_file(name_or_path: str | Path) -> Path:
    """A scenario file as given, or a shipped scenario by name (``marketing-storm``) when no such
    file exists and the name has no directory or suffix."""
    path = Path(name_or_path)
    shipped = SCENARIOS / f"{path.name}.yaml"
    if not path.exists() and path.parent == Path(".") and not path.suffix and shipped.is_file():
        return shipped
    return path


def load_scenario(path: str | Path, config_file: Path | None = None) -> Scenario:
    """Read and validate a scenario file (or a shipped scenario by name), on ``config_file`` instead of
    the config file it names when given; raises :class:`ConfigError` naming the bad field."""
    found = scenario_file(path)
    return parse_scenario(read_yaml(found, "scenario file"), str(found), found.resolve().parent, config_file)
