"""Load and validate ``fairness.yaml`` into frozen, typed objects.

Everything in fairctl is built from one ``Config``: the scheduler, the worker, the CLI (and later
the exporter, rules, dashboards and simulator). Every invalid value fails here, early, with an
error that names the field path and what was expected, so nothing downstream has to re-check it.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .redis_url import check_url
from .yaml_reader import (
    ConfigError,
    Reader,
    boolean,
    choice,
    int_between,
    kind_of,
    list_value,
    nonempty_str,
    read_yaml,
)

# The example config shipped inside the package (a checkout's top-level fairness.yaml links to it):
# the scenarios' fleet, and what fairctl reads when no fairness.yaml is at hand.
EXAMPLE_CONFIG = Path(str(resources.files(__package__) / "examples" / "fairness.yaml"))
POLICIES = ("fifo", "strict", "weighted", "weighted-fair")
BUDGET_ACTIONS = ("demote", "reject")
# What a job costs its tenant and class: one job, or the worker time it took (docs/scheduler.md).
CHARGES = ("jobs", "runtime")
# Class names, tier names and the key prefix end up in Redis keys and Prometheus labels.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_WEIGHT = 1_000_000
# A queued-jobs limit above this is no limit a Redis could hold (and stays exact in Lua's doubles).
MAX_QUEUED = 10**12
# The reason a job demoted by its class's arrival budget is queued with; reserved, because the
# alert rules tell demand from demotions by it.
OVER_BUDGET_REASON = "over priority budget"
_RATE_PART = re.compile(r"^(\d+(?:\.\d+)?)\s*/\s*(s|m|h|d)$")
# Grafana as compose/docker-compose.yml publishes it: the alerts' links are built on it until
# alerts.grafana_url says where the team's Grafana is.
DEFAULT_GRAFANA_URL = "http://127.0.0.1:3000"
# Placeholders a runbook or dashboard URL template may use.
URL_PLACEHOLDERS = ("alert", "group", "queue")
# ``for:`` of every generated alert; ``alerts.for`` overrides any of them. None (QueueStarving)
# means per class: its max_age / 4 in whole minutes, between 1m and 15m, so a 1h SLO waits the
# usual 15m and the interactive class pages a minute after its SLO is missed.
ALERT_FOR: Mapping[str, float | None] = MappingProxyType({
    "QueueStarving": None,
    "QueueShareBelowWeight": 900.0,
    "PriorityMixDrift": 900.0,
    "PriorityReasonShift": 1800.0,
    "TenantDominatingQueue": 900.0,
    "QuietTenantsStarving": 300.0,
    "QueueStalled": 300.0,
    "QueueShardStalled": 300.0,
    "PriorityInversion": 300.0,
    "JobsRedeliveredHigh": 900.0,
    "FairnessExporterDown": 300.0,
    "FairnessExporterRedisDown": 120.0,
    # Dead letters: a minute, so a job dead-lettered is seen within minutes; the alert then holds
    # for alerts.rate_window after the last one.
    "JobsDeadLettered": 60.0,
    # How long a class may stay paused before it is called forgotten: half an hour covers a
    # deploy or a dependency's maintenance, and is shorter than the bulk class's usual SLO (1h).
    "QueuePaused": 1800.0,
    # Jobs under a class the config does not name: long enough to ride out the moment between a
    # config apply and its --move, short enough that nobody's jobs wait unseen for long.
    "JobsUnderUnconfiguredClass": 300.0,
    # Memory over alerts.memory_warning: a minute, since a storm can fill the rest to the headroom
    # (where enqueues are refused) within minutes.
    "RedisMemoryHigh": 60.0,
    # An evicting policy loses jobs silently: a minute, to ride out a scrape or a CONFIG SET typo.
    "RedisMayEvictJobs": 60.0,
    # A queue group's state lost (reset): a minute; the loss is final, and the counter that tells it
    # stays raised for alerts.rate_window, so the page goes out once, however long it is held.
    "QueueStateLost": 60.0,
    # The shards of a sharded queue on different configs: two minutes. An apply reaches every shard
    # within a second and every exporter sees it within a scrape, so a split that lasts is one an
    # apply left half done.
    "QueueConfigSplit": 120.0,
    # Refusals at a tenant's admission limit: five minutes, so a producer that backs off after a
    # refusal or two is not called stuck, while one that keeps sending into the limit is.
    "TenantAtLimit": 300.0,
})


def parse_duration(value: object, path: str) -> float:
    """Seconds from ``"30s"``, ``"15m"``, ``"1h"``, ``"1h30m"``, ``"250ms"`` or ``"2d"``."""
    expected = "expected a duration such as 30s, 15m or 1h"
    if not isinstance(value, str):
        raise ConfigError(path, f"{expected}, got {value!r}")
    text = value.strip()
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(path, f"{expected}, got {value!r}")
    if total <= 0:
        raise ConfigError(path, f"must be longer than zero, got {value!r}")
    return total


def format_duration(seconds: float) -> str:
    """The inverse of :func:`parse_duration` for whole units (used in messages and rules)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds // size)}{unit}"
    return f"{int(round(seconds * 1000))}ms"


@dataclass(frozen=True)
class RedisConfig:
    url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "fq"
    # Fraction of maxmemory at which fairctl refuses new enqueues: the rest is left for the drain
    # scripts (pops, acks, retries) and Redis's own buffers (see docs/configuration.md).
    memory_headroom: float = 0.9
    # One logical queue over this many queue groups (shards), each its own hash tag, so a Redis
    # Cluster spreads them over its masters (fairness_core.sharded). 1: not sharded.
    shards: int = 1
    # Shuffle sharding: the shards a tenant's jobs may go to (its hand), chosen per tenant by
    # rendezvous hashing; 1 is a plain stable hash of the tenant.
    shard_hand: int = 1


# The most shards a queue may have. Every worker reads each shard's backlog (two commands a shard,
# one pipeline per master) at every pop and ten times a second while idle, so that read grows with
# the shards; 32 shards on one Redis under 4 workers and an exporter ran with no failed call and
# one function library. Past 64 a second queue (another redis.prefix) costs less than more shards.
MAX_SHARDS = 64


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "weighted-fair"
    max_payload_bytes: int = 1_048_576
    budget_window: float = 600.0
    budget_min_arrivals: int = 100
    budget_action: str = "demote"
    charge: str = "jobs"


@dataclass(frozen=True)
class ClassConfig:
    name: str
    weight: int
    max_age: float
    arrival_budget: float | None = None
    reserved_slots: int = 0
    promote_after: float | None = None
    # QueueStarving's for: for this class (None: alerts.for, else derived from max_age).
    starving_for: float | None = None
    # Expected load, for the weights lint only: jobs per second and seconds per job.
    arrival_rate: float | None = None
    service_time: float | None = None


@dataclass(frozen=True)
class TierLimits:
    """One tier's admission limits, overriding the ``tenants`` section's: None leaves the group's
    limit in force, :data:`UNLIMITED` (written ``unlimited``) lifts it for the tier."""

    max_queued: int | None = None
    max_rate: float | None = None


# A tier's limit of 0: the tier has none, whatever the group's (``unlimited`` in the file).
UNLIMITED = 0


@dataclass(frozen=True)
class TenantsConfig:
    tiers: Mapping[str, int] = field(default_factory=lambda: {"default": 1})
    default_tier: str = "default"
    batch: int = 10
    max_id_bytes: int = 256
    # Admission: the jobs one tenant may have queued in the group, all classes together (None: no
    # limit), and per-tier overrides of it.
    max_queued: int | None = None
    # The jobs per second one tenant may have accepted, estimated over ``rate_window`` (None: no limit).
    max_rate: float | None = None
    rate_window: float = 60.0
    limits: Mapping[str, TierLimits] = field(default_factory=dict)

    def cost(self, tier: str) -> int:
        """Virtual-time cost of one job for a tenant of ``tier``: integer, so Lua and Python agree."""
        return math.lcm(*self.tiers.values()) // self.tiers[tier]

    def limit_field(self, tier: str, name: str) -> str:
        """The config field that sets the limit ``name`` for ``tier``: its tier's own when set."""
        own = self.limits.get(tier)
        return f"tenants.limits.{tier}.{name}" if own is not None and getattr(own, name) is not None else f"tenants.{name}"

    def limit_for(self, tier: str, name: str) -> int | float | None:
        """The limit ``name`` (``max_queued``, ``max_rate``) of a tenant enqueueing as ``tier``:
        its tier's own, else the group's (None: no limit)."""
        own = self.limits.get(tier)
        if own is None or getattr(own, name) is None:
            return getattr(self, name)
        return None if getattr(own, name) == UNLIMITED else getattr(own, name)


@dataclass(frozen=True)
class Rule:
    """One classification rule; ``None`` conditions match anything. First match wins."""

    queue: str
    reason: str
    tasks: frozenset[str] | None = None
    user_waiting: bool | None = None
    tenant_tier: str | None = None

    def matches(self, task: str, tier: str, user_waiting: bool) -> bool:
        return (
            (self.tasks is None or task in self.tasks)
            and (self.user_waiting is None or self.user_waiting == user_waiting)
            and (self.tenant_tier is None or self.tenant_tier == tier)
        )


@dataclass(frozen=True)
class LeasesConfig:
    visibility_timeout: float = 300.0
    max_attempts: int = 5
    retry_backoff: float = 1.0
    retry_backoff_max: float = 300.0


@dataclass(frozen=True)
class ExporterConfig:
    """What the exporter serves and how the scheduler keeps the windowed bookkeeping it reads.

    ``listen`` None means the exporter's documented default port on all interfaces.
    """

    listen: str | None = None
    topk_tenants: int = 10
    window: float = 600.0
    scrape_timeout: float = 2.0
    noisy_min_inflight: int = 5
    noisy_min_queued: int = 100
    fairness_sample: int = 50


@dataclass(frozen=True)
class AlertsConfig:
    """Thresholds and links of the generated alert rules (see alerts/ and docs/alerts.md).

    Per-class thresholds (max_age, weights, arrival budgets) are not here: the rules read them from
    the exporter's config gauges, so one rules file serves every deployment of the same classes.
    Links: ``grafana_url`` is the one base both default links are built from (the runbooks are a
    generated Grafana dashboard too); ``runbook_url``/``dashboard_url`` templates override them.
    """

    rate_window: float = 600.0
    share_tolerance: float = 0.5
    tenant_dominance: float = 0.5
    reason_shift: float = 0.3
    reason_baseline: float = 86400.0
    stall_after: float = 600.0
    inversion_max_depth: int = 5
    redelivery_ratio: float = 0.05
    # RedisMemoryHigh fires at this fraction of maxmemory: below redis.memory_headroom, so people
    # hear of it before enqueues are refused.
    memory_warning: float = 0.8
    exporter_job: str = "fairctl-exporter"
    runbook_url: str | None = None
    dashboard_url: str | None = None
    # Where people open Grafana, without a trailing slash; None: not configured, links are built
    # on DEFAULT_GRAFANA_URL (the compose stack's) and `fairctl check` warns.
    grafana_url: str | None = None
    worker_slots: int | None = None
    for_durations: Mapping[str, float | None] = field(default_factory=lambda: ALERT_FOR)


# The job systems the exporter can watch instead of fairctl's own queues (``watch.system``).
WATCHED_SYSTEMS = ("bullmq", "celery", "rq", "sidekiq")
# Those whose queues hold priorities a class may take some of (Celery's message priorities, BullMQ's
# job priorities); RQ's and Sidekiq's queues are taken whole.
WITH_PRIORITIES = ("bullmq", "celery")
# Where each system's jobs keep their arguments: the first step of a ``watch.tenant`` path.
TENANT_ROOTS = {"bullmq": ("data",), "celery": ("args", "kwargs"), "rq": ("args", "kwargs"), "sidekiq": ("args",)}
# Where a job carries its tenant: a path into its arguments, e.g. kwargs.tenant_id, args.0, data.tenant.
_TENANT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)+$")


@dataclass(frozen=True)
class QueueRef:
    """One of a watched system's queues as a class takes it: all of it, or only some of its
    priorities (Celery's priority steps, BullMQ's priority levels)."""

    queue: str
    priorities: tuple[int, ...] = ()  # empty: every priority


@dataclass(frozen=True)
class WatchConfig:
    """A job system the exporter reads instead of fairctl's own queues: which of its queues make
    up each class of ``classes``, and where its jobs carry their tenant."""

    system: str  # one of WATCHED_SYSTEMS
    classes: Mapping[str, tuple[QueueRef, ...]]  # every configured class, in config order
    url: str | None = None  # the system's Redis; None: redis.url
    tenant: tuple[str, ...] | None = None  # path into a job's arguments, split at the dots
    sample: int = 100  # waiting jobs read per class for the tenant shares
    prefix: str | None = None  # the system's key prefix where it has one (BullMQ's "bull"); None: its default


@dataclass(frozen=True)
class Config:
    classes: tuple[ClassConfig, ...]
    classification: tuple[Rule, ...]
    redis: RedisConfig = RedisConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    tenants: TenantsConfig = TenantsConfig()
    leases: LeasesConfig = LeasesConfig()
    exporter: ExporterConfig = ExporterConfig()
    alerts: AlertsConfig = AlertsConfig()
    source: str | None = None
    watch: WatchConfig | None = None  # a job system the exporter watches instead of fairctl's queues

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def class_index(self, name: str) -> int:
        try:
            return self.class_names.index(name)
        except ValueError:
            raise KeyError(f"unknown class {name!r}; configured: {', '.join(self.class_names)}") from None

    @property
    def total_weight(self) -> int:
        return sum(c.weight for c in self.classes)


def _name(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    if not NAME_PATTERN.match(text):
        raise ConfigError(path, f"expected 1-64 characters of A-Z a-z 0-9 _ . : -, got {text!r}")
    return text


def _reason(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    if any(ch in text for ch in "\t\n\r") or len(text) > 200:
        raise ConfigError(path, "expected one line of at most 200 characters without tabs")
    return text


def _positive_int(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"expected a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(path, f"must be > 0, got {value}")
    if value > MAX_WEIGHT:
        raise ConfigError(path, f"must be at most {MAX_WEIGHT}, got {value}")
    return value


def _ratio(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(path, f"expected a ratio in (0, 1], got {value!r}")
    return float(value)


def _fraction(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ConfigError(path, f"expected a fraction in (0, 1), got {value!r}")
    return float(value)


def _arrival_rate(value: object, path: str) -> float:
    """Jobs per second, from a number (per second) or ``"500/m"``, ``"8/s"``, ``"1000/h"``, ``"2/d"``."""
    expected = "expected jobs per second or a rate such as 500/m, 8/s or 1000/h"
    if isinstance(value, bool):
        raise ConfigError(path, f"{expected}, got {value!r}")
    if isinstance(value, (int, float)):
        per_second = float(value)
    elif isinstance(value, str) and (match := _RATE_PART.match(value.strip())):
        per_second = float(match.group(1)) / _UNIT_SECONDS[match.group(2)]
    else:
        raise ConfigError(path, f"{expected}, got {value!r}")
    if not 0 < per_second < math.inf:
        raise ConfigError(path, f"must be more than zero, got {value!r}")
    return per_second


def _rate_window(value: object, path: str) -> float:
    """A whole number of seconds, 1s to 1d: the script's buckets are that many milliseconds."""
    seconds = parse_duration(value, path)
    if not float(seconds).is_integer() or not 1 <= seconds <= 86400:
        raise ConfigError(path, f"expected whole seconds from 1s to 1d, got {value!r}")
    return seconds


def _url_template(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    if any(ch.isspace() or ch == "$" for ch in text):
        raise ConfigError(path, f"expected a URL without spaces or $, got {text!r}")
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise ConfigError(path, f"not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    for name, spec, conv in fields:
        if name not in URL_PLACEHOLDERS or spec or conv:
            raise ConfigError(path, f"unknown placeholder {{{name}}}; use {{alert}}, {{group}} and {{queue}}")
    return text


def _base_url(value: object, path: str) -> str:
    """An absolute http(s) URL a link is built on: a browser, an Alertmanager receiver and a Grafana
    panel must all open it, so a relative path is refused."""
    text = nonempty_str(value, path).rstrip("/")
    scheme, sep, rest = text.partition("://")
    if scheme not in ("http", "https") or not sep or not rest or rest.startswith("/"):
        raise ConfigError(path, f"expected an absolute http:// or https:// URL such as https://grafana.example.com, "
                                f"got {value!r}")
    if any(ch.isspace() or ch in "${}?#" for ch in text):
        raise ConfigError(path, f"expected a base URL without spaces, $, braces, ? or #, got {value!r}")
    return text


def _for_durations(value: object, path: str) -> Mapping[str, float | None]:
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping of alert name to duration, got {kind_of(value)}")
    for name in value:
        if name not in ALERT_FOR:
            raise ConfigError(f"{path}.{name}", f"unknown alert; expected one of: {', '.join(ALERT_FOR)}")
    return MappingProxyType({**ALERT_FOR, **{k: parse_duration(v, f"{path}.{k}") for k, v in value.items()}})


def _redis(value: object, path: str, source: str | None) -> RedisConfig:
    r = Reader(value, path, source)
    url = r.get("url", RedisConfig.url, nonempty_str)
    try:
        check_url(url)
    except ValueError as exc:  # never quote the URL: it may hold a password
        raise r.error("url", str(exc)) from None
    prefix = r.get("prefix", RedisConfig.prefix, _name)
    headroom = r.get("memory_headroom", RedisConfig.memory_headroom, _fraction)
    shards = r.get("shards", RedisConfig.shards, int_between(1, MAX_SHARDS))
    hand = r.get("shard_hand", min(2, shards), int_between(1, MAX_SHARDS))
    if hand > shards:
        raise r.error("shard_hand", f"a tenant's hand of {hand} shards is more than redis.shards ({shards})")
    r.done()
    return RedisConfig(url=url, prefix=prefix, memory_headroom=headroom, shards=shards, shard_hand=hand)


def _scheduler(value: object, path: str, source: str | None) -> SchedulerConfig:
    r = Reader(value, path, source)
    out = SchedulerConfig(
        policy=r.get("policy", SchedulerConfig.policy, choice(POLICIES)),
        max_payload_bytes=r.get("max_payload_bytes", SchedulerConfig.max_payload_bytes, int_between(1, 512 * 1024 * 1024)),
        budget_window=r.get("budget_window", SchedulerConfig.budget_window, parse_duration),
        budget_min_arrivals=r.get("budget_min_arrivals", SchedulerConfig.budget_min_arrivals, int_between(1, 10**9)),
        budget_action=r.get("budget_action", SchedulerConfig.budget_action, choice(BUDGET_ACTIONS)),
        charge=r.get("charge", SchedulerConfig.charge, choice(CHARGES)),
    )
    r.done()
    return out


def _class(value: object, path: str, source: str | None) -> ClassConfig:
    r = Reader(value, path, source)
    out = ClassConfig(
        name=r.require("name", _name),
        weight=r.require("weight", _positive_int),
        max_age=r.require("max_age", parse_duration),
        arrival_budget=r.get("arrival_budget", None, _ratio),
        reserved_slots=r.get("reserved_slots", 0, int_between(0, 100_000)),
        promote_after=r.get("promote_after", None, parse_duration),
        starving_for=r.get("starving_for", None, parse_duration),
        arrival_rate=r.get("arrival_rate", None, _arrival_rate),
        service_time=r.get("service_time", None, parse_duration),
    )
    r.done()
    if (out.arrival_rate is None) != (out.service_time is None):
        missing = "service_time" if out.service_time is None else "arrival_rate"
        raise r.error(missing, "arrival_rate and service_time go together (the weights lint needs both)")
    return out


def _tenants(value: object, path: str, source: str | None) -> TenantsConfig:
    r = Reader(value, path, source)

    def tiers(raw: object, tpath: str) -> dict[str, int]:
        if not isinstance(raw, dict) or not raw:
            raise ConfigError(tpath, f"expected a non-empty mapping of tier name to weight, got {kind_of(raw)}")
        return {_name(k, f"{tpath}.{k}"): int_between(1, 1000)(v, f"{tpath}.{k}") for k, v in raw.items()}

    tier_map = r.get("tiers", {"default": 1}, tiers)
    default_tier = r.get("default_tier", next(iter(tier_map)) if "default" not in tier_map else "default", _name)
    if default_tier not in tier_map:
        raise r.error("default_tier", f"must be one of the tiers ({', '.join(tier_map)}), got {default_tier!r}")
    def limits(raw: object, lpath: str) -> dict[str, TierLimits]:
        if not isinstance(raw, dict):
            raise ConfigError(lpath, f"expected a mapping of tier name to limits, got {kind_of(raw)}")
        out: dict[str, TierLimits] = {}
        for tier, item in raw.items():
            if tier not in tier_map:
                raise ConfigError(f"{lpath}.{tier}", f"unknown tier {tier!r}; tenants.tiers has: {', '.join(tier_map)}")
            lr = Reader(item, f"{lpath}.{tier}", source)
            out[tier] = TierLimits(max_queued=lr.get("max_queued", None, _or_unlimited(int_between(1, MAX_QUEUED))),
                                   max_rate=lr.get("max_rate", None, _or_unlimited(_arrival_rate)))
            lr.done()
        return out

    out = TenantsConfig(
        tiers=tier_map,
        default_tier=default_tier,
        batch=r.get("batch", TenantsConfig.batch, int_between(1, 1000)),
        max_id_bytes=r.get("max_id_bytes", TenantsConfig.max_id_bytes, int_between(1, 4096)),
        max_queued=r.get("max_queued", None, int_between(1, MAX_QUEUED)),
        max_rate=r.get("max_rate", None, _arrival_rate),
        rate_window=r.get("rate_window", TenantsConfig.rate_window, _rate_window),
        limits=r.get("limits", {}, limits),
    )
    r.done()
    return out


def _or_unlimited(convert: Callable[[object, str], Any]) -> Callable[[object, str], Any]:
    """A tier limit: ``unlimited`` (no limit for the tier, whatever the group's), or a limit."""
    def read(value: object, path: str) -> Any:
        if value == "unlimited":
            return UNLIMITED
        try:
            return convert(value, path)
        except ConfigError as exc:
            raise ConfigError(path, f"{exc.message}; or unlimited, for no limit on this tier") from None
    return read


def _leases(value: object, path: str, source: str | None) -> LeasesConfig:
    r = Reader(value, path, source)
    out = LeasesConfig(
        visibility_timeout=r.get("visibility_timeout", LeasesConfig.visibility_timeout, parse_duration),
        max_attempts=r.get("max_attempts", LeasesConfig.max_attempts, int_between(1, 1000)),
        retry_backoff=r.get("retry_backoff", LeasesConfig.retry_backoff, parse_duration),
        retry_backoff_max=r.get("retry_backoff_max", LeasesConfig.retry_backoff_max, parse_duration),
    )
    r.done()
    return out


def _listen(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(path, f"expected HOST:PORT such as 0.0.0.0:9000 or [::1]:9000, got {text!r}")
    return text


# Keys a config may still set from an earlier version, and what to write instead.
REMOVED_EXPORTER_KEYS = {
    "tenant_label_limit": (
        "no longer exists: jobs_processed_total is counted per class only, and each class's busiest "
        "tenants over exporter.window are served as queue_tenant_share_ratio (exporter.topk_tenants of "
        "them), whenever they first sent a job; delete this key"),
}


def _exporter(value: object, path: str, source: str | None) -> ExporterConfig:
    r = Reader(value, path, source)
    for key, why in REMOVED_EXPORTER_KEYS.items():
        if key in r.data:
            raise r.error(key, why)
    out = ExporterConfig(
        listen=r.get("listen", None, _listen),
        topk_tenants=r.get("topk_tenants", ExporterConfig.topk_tenants, int_between(1, 100)),
        window=r.get("window", ExporterConfig.window, parse_duration),
        scrape_timeout=r.get("scrape_timeout", ExporterConfig.scrape_timeout, parse_duration),
        noisy_min_inflight=r.get("noisy_min_inflight", ExporterConfig.noisy_min_inflight, int_between(1, 10**6)),
        noisy_min_queued=r.get("noisy_min_queued", ExporterConfig.noisy_min_queued, int_between(1, 10**9)),
        fairness_sample=r.get("fairness_sample", ExporterConfig.fairness_sample, int_between(2, 10_000)),
    )
    r.done()
    return out


def _alerts(value: object, path: str, source: str | None) -> AlertsConfig:
    r = Reader(value, path, source)
    d = AlertsConfig
    out = AlertsConfig(
        rate_window=r.get("rate_window", d.rate_window, parse_duration),
        share_tolerance=r.get("share_tolerance", d.share_tolerance, _fraction),
        tenant_dominance=r.get("tenant_dominance", d.tenant_dominance, _fraction),
        reason_shift=r.get("reason_shift", d.reason_shift, _fraction),
        reason_baseline=r.get("reason_baseline", d.reason_baseline, parse_duration),
        stall_after=r.get("stall_after", d.stall_after, parse_duration),
        inversion_max_depth=r.get("inversion_max_depth", d.inversion_max_depth, int_between(0, 10**6)),
        redelivery_ratio=r.get("redelivery_ratio", d.redelivery_ratio, _fraction),
        memory_warning=r.get("memory_warning", d.memory_warning, _fraction),
        exporter_job=r.get("exporter_job", d.exporter_job, _reason),
        runbook_url=r.get("runbook_url", None, _url_template),
        dashboard_url=r.get("dashboard_url", None, _url_template),
        grafana_url=r.get("grafana_url", None, _base_url),
        worker_slots=r.get("worker_slots", None, int_between(1, 10**6)),
        for_durations=r.get("for", ALERT_FOR, _for_durations),
    )
    r.done()
    if out.reason_baseline <= out.rate_window:
        raise r.error("reason_baseline", "must be longer than alerts.rate_window (it compares against that long ago)")
    return out


def _queue_ref(value: object, path: str) -> QueueRef:
    """A queue name, or ``{queue: NAME, priorities: [..]}``."""
    if isinstance(value, str):
        return QueueRef(nonempty_str(value, path))
    r = Reader(value, path, None)

    def priorities(raw: object, ppath: str) -> tuple[int, ...]:
        items = list_value(raw, ppath)
        if not items:
            raise ConfigError(ppath, "expected at least one priority (leave it out for all of them)")
        return tuple(int_between(0, 2**21)(p, f"{ppath}[{i}]") for i, p in enumerate(items))

    out = QueueRef(r.require("queue", nonempty_str), r.get("priorities", (), priorities))
    r.done()
    return out


def _watch(value: object, path: str, source: str | None, class_names: tuple[str, ...]) -> WatchConfig:
    r = Reader(value, path, source)
    system = r.require("system", choice(WATCHED_SYSTEMS))
    url = r.get("url", None, nonempty_str)
    if url is not None:
        try:
            check_url(url)
        except ValueError as exc:  # never quote the URL: it may hold a password
            raise r.error("url", str(exc)) from None

    def classes(raw: object, cpath: str) -> dict[str, tuple[QueueRef, ...]]:
        if not isinstance(raw, dict):
            raise ConfigError(cpath, f"expected a mapping of class name to its queues, got {kind_of(raw)}")
        for name in raw:
            if name not in class_names:
                raise ConfigError(f"{cpath}.{name}", f"unknown class {name!r}; classes are: {', '.join(class_names)}")
        missing = [name for name in class_names if name not in raw]
        if missing:
            raise ConfigError(cpath, f"every class needs its queues; missing: {', '.join(missing)}")
        out = {}
        for name in class_names:
            items = list_value(raw[name], f"{cpath}.{name}")
            if not items:
                raise ConfigError(f"{cpath}.{name}", "expected at least one queue")
            out[name] = tuple(_queue_ref(item, f"{cpath}.{name}[{i}]") for i, item in enumerate(items))
            for i, ref in enumerate(out[name]):
                if ref.priorities and system not in WITH_PRIORITIES:
                    raise ConfigError(f"{cpath}.{name}[{i}].priorities", f"{system}'s queues have no priorities to "
                                      f"select: a class takes whole queues (priorities are for "
                                      f"{' and '.join(WITH_PRIORITIES)})")
        return out

    def tenant(raw: object, tpath: str) -> tuple[str, ...]:
        text = nonempty_str(raw, tpath)
        if not _TENANT_PATH.match(text):
            raise ConfigError(tpath, f"expected a path into a job's arguments such as kwargs.tenant_id, args.0 or "
                                     f"data.tenant, got {text!r}")
        path = tuple(text.split("."))
        if path[0] not in TENANT_ROOTS[system]:
            raise ConfigError(tpath, f"a {system} job keeps its arguments under {' or '.join(TENANT_ROOTS[system])}: "
                                     f"start the path there, got {text!r}")
        return path

    out = WatchConfig(
        system=system, classes=r.require("classes", classes), url=url, tenant=r.get("tenant", None, tenant),
        sample=r.get("sample", WatchConfig.sample, int_between(1, 10_000)), prefix=r.get("prefix", None, _name))
    r.done()
    return out


def _rule(value: object, path: str, source: str | None, tiers: Mapping[str, int]) -> Rule:
    r = Reader(value, path, source)

    def tasks(raw: object, tpath: str) -> frozenset[str]:
        items = list_value(raw, tpath)
        if not items:
            raise ConfigError(tpath, "expected at least one task name")
        return frozenset(_name(t, f"{tpath}[{i}]") for i, t in enumerate(items))

    tier = r.get("tenant_tier", None, _name)
    if tier is not None and tier not in tiers:
        raise r.error("tenant_tier", f"unknown tier {tier!r}; tenants.tiers has: {', '.join(tiers)}")
    out = Rule(
        queue=r.require("class", _name),
        reason=r.require("reason", _reason),
        tasks=r.get("tasks", None, tasks),
        user_waiting=r.get("user_waiting", None, boolean),
        tenant_tier=tier,
    )
    r.done()
    return out


def parse_config(data: object, source: str | None = None) -> Config:
    """Validate an already-parsed YAML document (a dict) into a :class:`Config`."""
    r = Reader(data, "", source)
    redis_cfg = r.get("redis", RedisConfig(), lambda v, p: _redis(v, p, source))
    scheduler = r.get("scheduler", SchedulerConfig(), lambda v, p: _scheduler(v, p, source))
    tenants = r.get("tenants", TenantsConfig(), lambda v, p: _tenants(v, p, source))
    leases = r.get("leases", LeasesConfig(), lambda v, p: _leases(v, p, source))
    exporter = r.get("exporter", ExporterConfig(), lambda v, p: _exporter(v, p, source))
    alerts = r.get("alerts", AlertsConfig(), lambda v, p: _alerts(v, p, source))
    classes = tuple(
        _class(item, f"classes[{i}]", source) for i, item in enumerate(r.require("classes", list_value))
    )
    class_names = tuple(c.name for c in classes)
    watch = r.get("watch", None, lambda v, p: _watch(v, p, source, class_names))
    # A watched system classifies its own jobs: its config may leave the rules out.
    rules = tuple(
        _rule(item, f"classification[{i}]", source, tenants.tiers)
        for i, item in enumerate(r.require("classification", list_value) if watch is None or "classification" in r.data
                                 else [{"class": class_names[0], "reason": "default"}])
    )
    r.done()
    _check_classes(classes, scheduler, source)
    _check_rules(rules, tuple(c.name for c in classes), source)
    if alerts.memory_warning >= redis_cfg.memory_headroom:
        raise ConfigError("alerts.memory_warning", f"must be below redis.memory_headroom ({redis_cfg.memory_headroom:g}), "
                          f"got {alerts.memory_warning:g}: the alert must fire before enqueues are refused", source)
    return Config(
        classes=classes, classification=rules, redis=redis_cfg, scheduler=scheduler,
        tenants=tenants, leases=leases, exporter=exporter, alerts=alerts, source=source, watch=watch,
    )


def _check_classes(classes: tuple[ClassConfig, ...], scheduler: SchedulerConfig, source: str | None) -> None:
    if not 1 <= len(classes) <= 8:
        raise ConfigError("classes", f"expected 1 to 8 classes (3-4 is usual), got {len(classes)}", source)
    seen: set[str] = set()
    for i, c in enumerate(classes):
        if c.name in seen:
            raise ConfigError(f"classes[{i}].name", f"duplicate class name {c.name!r}", source)
        seen.add(c.name)
        if c.promote_after is not None and i == 0:
            raise ConfigError(f"classes[{i}].promote_after", "the most urgent class has no class above it to promote to", source)
        last = i == len(classes) - 1
        if c.arrival_budget is not None and last and scheduler.budget_action == "demote":
            raise ConfigError(f"classes[{i}].arrival_budget", "the least urgent class has no class below it to demote to (use scheduler.budget_action: reject)", source)


def _check_rules(rules: tuple[Rule, ...], class_names: tuple[str, ...], source: str | None) -> None:
    """Every rule names a configured class (listed in config order when one does not)."""
    if not rules:
        raise ConfigError("classification", "expected at least one rule", source)
    for i, rule in enumerate(rules):
        if rule.queue not in class_names:
            raise ConfigError(f"classification[{i}].class", f"unknown class {rule.queue!r}; classes are: {', '.join(class_names)}", source)
        if rule.reason == OVER_BUDGET_REASON:
            raise ConfigError(f"classification[{i}].reason", f"{OVER_BUDGET_REASON!r} is reserved for jobs demoted by an arrival budget", source)
    last = rules[-1]
    if (last.tasks, last.user_waiting, last.tenant_tier) != (None, None, None):
        raise ConfigError(f"classification[{len(rules) - 1}]", "the last rule must have no conditions (a catch-all), so every job gets a class", source)


def load_config(path: str | Path) -> Config:
    """Read and validate a fairness.yaml; raises :class:`ConfigError` naming the bad field."""
    return parse_config(read_yaml(Path(path), "config file"), str(path))
