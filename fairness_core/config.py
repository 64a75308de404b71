"""Load and validate ``fairness.yaml`` into frozen, typed objects.

Everything in fairctl is built from one ``Config``: the scheduler, the worker, the CLI, the
exporter, rules, dashboards and simulator. Every invalid value fails at load, early, with an error
that names the field path and what was expected, so nothing downstream has to re-check it.

This module parses the sections the scheduler needs; the sections other layers own (``alerts``,
the exporter process's keys, ``watch``) are parsed and checked by their owners, found through
:mod:`fairness_core.config_sections`, into ``Config.sections``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .config_sections import mark_seen, owned_sections, parse_sections
from .redis_url import check_url
from .yaml_reader import (  # ConfigError: re-exported, the error every layer's config check raises
    ConfigError as ConfigError,
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
# How the shards of a sharded group are named (fairness_core.sharding.shard_prefix): P.3, P.3-1.
SHARD_NAME = re.compile(r".+\.\d+(-\d+)?")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_WEIGHT = 1_000_000
# The most jobs a dispatch rate's bucket may start at once.
MAX_BURST = 100_000
# A queued-jobs limit above this is no limit a Redis could hold (and stays exact in Lua's doubles).
MAX_QUEUED = 10**12
# The reason a job demoted by its class's arrival budget is queued with; reserved, because the
# alert rules tell demand from demotions by it.
OVER_BUDGET_REASON = "over priority budget"
_RATE_PART = re.compile(r"^(\d+(?:\.\d+)?)\s*/\s*(s|m|h|d)$")


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
    # Cluster spreads them over its masters (fairness_core.queue). 1: not sharded.
    shards: int = 1
    # Shuffle sharding: the shards a tenant's jobs may go to (its hand), chosen per tenant by
    # rendezvous hashing; 1 is a plain stable hash of the tenant.
    shard_hand: int = 1


# The most shards a queue may have. Every worker reads each shard's backlog (two commands a shard,
# one pipeline per master) at every pop and ten times a second while idle, so that read grows with
# the shards; 32 shards on one Redis under 4 workers and an exporter ran with no failed call and
# one function library. Past 64 a second queue (another redis.prefix) costs less than more shards.
MAX_SHARDS = 64

# The longest scheduler.dedup_window: each keyed job's record (about 190 bytes) lives that long.
MAX_DEDUP_WINDOW = 30 * 86400


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "weighted-fair"
    max_payload_bytes: int = 1_048_576
    budget_window: float = 600.0
    budget_min_arrivals: int = 100
    budget_action: str = "demote"
    charge: str = "jobs"
    # How long a keyed submit's key names its job: a submit again with the key within it returns that job.
    dedup_window: float = 86400.0


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
    # What the tenant's downstream takes (enforced at the pop, not the enqueue): jobs running at
    # once, all classes together, and jobs started per second with the burst it may start at once.
    max_in_flight: int | None = None
    dispatch_rate: float | None = None
    dispatch_burst: int | None = None


# The limits a per-tenant override (``tenants.overrides``) may set: the pop-time ones, which a
# tenant's own downstream sets; the admission limits hold per tier.
OVERRIDE_LIMITS = ("max_in_flight", "dispatch_rate", "dispatch_burst")
# The limits a pop enforces, by tenant; ``account_`` + the first two hold per account.
DISPATCH_LIMITS = ("max_in_flight", "dispatch_rate")


# A tier's limit of 0: the tier has none, whatever the group's (``unlimited`` in the file).
UNLIMITED = 0
# The names of the limits that hold per account (``account_max_queued``, ``account_max_rate``).
ACCOUNT_LIMIT = "account_"


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
    # Two-level fairness: a tenant id names its account before this separator ("acme/ws-17" is
    # key ws-17 of account acme), and fair queuing runs across accounts, then across each account's
    # tenants (fairness_core.accounts). None: every tenant id is a party of its own.
    account_separator: str | None = None
    # Admission per account, all its keys and classes together (None: no limit); only with accounts.
    account_max_queued: int | None = None
    account_max_rate: float | None = None
    # Limits the pop holds a tenant to, for its downstream (None: none): jobs it runs at once, all
    # classes together, and jobs it starts per second, a token bucket of ``dispatch_burst`` tokens.
    # A tenant held by either is parked out of the fair order, not refused: its jobs stay queued.
    max_in_flight: int | None = None
    dispatch_rate: float | None = None
    dispatch_burst: int = 1
    account_max_in_flight: int | None = None
    account_dispatch_rate: float | None = None
    # Per-tenant limits (tenant id -> the pop-time limits it sets), over its tier's and the group's.
    overrides: Mapping[str, TierLimits] = field(default_factory=dict)

    def cost(self, tier: str) -> int:
        """Virtual-time cost of one job for a tenant of ``tier``: integer, so Lua and Python agree."""
        return math.lcm(*self.tiers.values()) // self.tiers[tier]

    def limit_field(self, tier: str, name: str) -> str:
        """The config field that sets the limit ``name`` for ``tier``: its tier's own when set (an
        account's limits, ``account_max_queued`` and ``account_max_rate``, have no tier's own)."""
        if name.startswith(ACCOUNT_LIMIT):
            return f"tenants.{name}"
        own = self.limits.get(tier)
        return f"tenants.limits.{tier}.{name}" if own is not None and getattr(own, name) is not None else f"tenants.{name}"

    def limit_for(self, tier: str, name: str, tenant: str | None = None) -> int | float | None:
        """The limit ``name`` (``max_queued``, ``max_rate``, ``max_in_flight``, ``dispatch_rate``,
        ``dispatch_burst``) of ``tenant`` as ``tier``: its override's, else its tier's own, else the
        group's (None: no limit)."""
        group = _limit(self, name)
        if name.startswith(ACCOUNT_LIMIT):
            return group
        for own in (self.overrides.get(tenant or ""), self.limits.get(tier)):
            mine = None if own is None else _limit(own, name)
            if mine is not None:
                return None if mine == UNLIMITED else mine
        return group

    @property
    def holds(self) -> bool:
        """Whether any tenant or account has a pop-time limit (a cap or a dispatch rate)."""
        levels: list[TenantsConfig | TierLimits] = [self, *self.limits.values(), *self.overrides.values()]
        return (any(bool(getattr(lim, name)) for lim in levels for name in DISPATCH_LIMITS)
                or bool(self.account_max_in_flight or self.account_dispatch_rate))


def _limit(limits: TenantsConfig | TierLimits, name: str) -> int | float | None:
    """The limit field ``name`` of ``limits``, looked up by name because callers name the limit
    they enforce; refusing a field that is no limit, so a wrong name cannot pass as one."""
    value = getattr(limits, name)
    if value is None or isinstance(value, (int, float)):
        return value
    raise AttributeError(f"{name!r} is not a limit of {type(limits).__name__}")


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
    """The keys of the ``exporter`` section the core owns: what the scheduler's script keeps and
    computes for the exporter to read, whichever role runs it. ``window``, ``topk_tenants`` and
    ``fairness_sample`` are compiled into the script (fairness_core.settings): a worker's ack
    counts its tenant in a ``window``-long bucket, and the snapshot call reads the tops, heads and
    fairness sample they size. ``noisy_min_*`` are the snapshot's (fairness_core.snapshot), which
    the exporter and ``fairctl status`` read. The exporter process's own keys (``listen``,
    ``scrape_timeout``) are ``exporter.config``'s."""

    topk_tenants: int = 10
    window: float = 600.0
    noisy_min_inflight: int = 5
    noisy_min_queued: int = 100
    fairness_sample: int = 50


@dataclass(frozen=True)
class Config:
    classes: tuple[ClassConfig, ...]
    classification: tuple[Rule, ...]
    redis: RedisConfig = RedisConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    tenants: TenantsConfig = TenantsConfig()
    leases: LeasesConfig = LeasesConfig()
    exporter: ExporterConfig = ExporterConfig()
    source: str | None = None
    # The sections other layers own (alerts, the exporter process's keys, watch), by section name:
    # read them with the owner's accessor (alerts.config.alert_settings, exporter.config.serving,
    # exporter.sources.watched); see fairness_core.config_sections.
    sections: Mapping[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> Any:
        """The owned section ``name`` as parsed; its default in a config built without it."""
        return self.sections[name] if name in self.sections else owned_sections()[name].default

    def with_section(self, name: str, value: Any) -> Config:
        """This config with the owned section ``name`` replaced by ``value``."""
        if name not in owned_sections():
            raise KeyError(f"no package declares a config section {name!r}; declared: {', '.join(owned_sections())}")
        return replace(self, sections={**self.sections, name: value})

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


def config_name(value: object, path: str) -> str:
    """A name that ends up in Redis keys and Prometheus labels (a class, a tier, a key prefix)."""
    text = nonempty_str(value, path)
    if not NAME_PATTERN.match(text):
        raise ConfigError(path, f"expected 1-64 characters of A-Z a-z 0-9 _ . : -, got {text!r}")
    return text


def group_name(value: object, path: str) -> str:
    """A queue group's name (``redis.prefix``): a name, but not one of the form ``P.3`` or
    ``P.3-1`` (:func:`fairness_core.sharding.shard_prefix`), which names a shard of the sharded
    group ``P``: that group's shard would share this one's keys and its applied config."""
    text = config_name(value, path)
    if SHARD_NAME.fullmatch(text):
        group, shard = text.rsplit(".", 1)
        raise ConfigError(path, f"{text!r} is the name of shard {shard.partition('-')[0]} of a sharded queue "
                                f"{group!r}: a group's name must not end in .N or .N-M")
    return text


def one_line(value: object, path: str) -> str:
    """One line of text of at most 200 characters (a reason, a Prometheus job name)."""
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


def fraction(value: object, path: str) -> float:
    """A number strictly between 0 and 1."""
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


def _dedup_window(value: object, path: str) -> float:
    """1s to 30d, in whole milliseconds: each keyed job's record lives that long in Redis."""
    seconds = parse_duration(value, path)
    if not float(seconds * 1000).is_integer() or not 1 <= seconds <= MAX_DEDUP_WINDOW:
        raise ConfigError(path, f"expected whole milliseconds from 1s to 30d, got {value!r}")
    return seconds


def _redis(value: object, path: str, source: str | None) -> RedisConfig:
    r = Reader(value, path, source)
    url = r.get("url", RedisConfig.url, nonempty_str)
    try:
        check_url(url)
    except ValueError as exc:  # never quote the URL: it may hold a password
        raise r.error("url", str(exc)) from None
    prefix = r.get("prefix", RedisConfig.prefix, group_name)
    headroom = r.get("memory_headroom", RedisConfig.memory_headroom, fraction)
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
        dedup_window=r.get("dedup_window", SchedulerConfig.dedup_window, _dedup_window),
    )
    r.done()
    return out


def _class(value: object, path: str, source: str | None) -> ClassConfig:
    r = Reader(value, path, source)
    out = ClassConfig(
        name=r.require("name", config_name),
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
        return {config_name(k, f"{tpath}.{k}"): int_between(1, 1000)(v, f"{tpath}.{k}") for k, v in raw.items()}

    tier_map = r.get("tiers", {"default": 1}, tiers)
    default_tier = r.get("default_tier", next(iter(tier_map)) if "default" not in tier_map else "default", config_name)
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
                                   max_rate=lr.get("max_rate", None, _or_unlimited(_arrival_rate)),
                                   **_dispatch_limits(lr))
            lr.done()
        return out

    def overrides(raw: object, opath: str) -> dict[str, TierLimits]:
        if not isinstance(raw, dict):
            raise ConfigError(opath, f"expected a mapping of tenant id to limits, got {kind_of(raw)}")
        out: dict[str, TierLimits] = {}
        for tenant, item in raw.items():
            tpath = f"{opath}.{tenant}"
            if not isinstance(tenant, str) or not tenant or any(not c.isprintable() for c in tenant):
                raise ConfigError(tpath, f"expected a tenant id (text without control characters), got {tenant!r}")
            lr = Reader(item, tpath, source)
            for name in lr.data:
                if name not in OVERRIDE_LIMITS:
                    raise lr.error(name, f"a tenant's override sets {', '.join(OVERRIDE_LIMITS)} (the limits "
                                         "its downstream sets); admission limits hold per tier, in tenants.limits")
            out[tenant] = TierLimits(**_dispatch_limits(lr))
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
        account_separator=r.get("account_separator", None, _account_separator),
        account_max_queued=r.get("account_max_queued", None, int_between(1, MAX_QUEUED)),
        account_max_rate=r.get("account_max_rate", None, _arrival_rate),
        max_in_flight=r.get("max_in_flight", None, int_between(1, MAX_QUEUED)),
        dispatch_rate=r.get("dispatch_rate", None, _arrival_rate),
        dispatch_burst=r.get("dispatch_burst", TenantsConfig.dispatch_burst, int_between(1, MAX_BURST)),
        account_max_in_flight=r.get("account_max_in_flight", None, int_between(1, MAX_QUEUED)),
        account_dispatch_rate=r.get("account_dispatch_rate", None, _arrival_rate),
        overrides=r.get("overrides", {}, overrides),
    )
    for name in ("account_max_queued", "account_max_rate", "account_max_in_flight", "account_dispatch_rate"):
        if getattr(out, name) is not None and out.account_separator is None:
            raise r.error(name, "limits accounts, and needs tenants.account_separator to tell a tenant's account")
    r.done()
    return out


def _dispatch_limits(r: Reader) -> dict[str, Any]:
    """A tier's or a tenant's pop-time limits (``unlimited`` lifts the group's cap or rate)."""
    return {"max_in_flight": r.get("max_in_flight", None, _or_unlimited(int_between(1, MAX_QUEUED))),
            "dispatch_rate": r.get("dispatch_rate", None, _or_unlimited(_arrival_rate)),
            "dispatch_burst": r.get("dispatch_burst", None, int_between(1, MAX_BURST))}


def _account_separator(value: object, path: str) -> str:
    """1 to 4 visible characters: what splits an account from its key in a tenant id."""
    text = nonempty_str(value, path)
    if len(text) > 4 or any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(path, f"expected 1 to 4 visible characters without spaces, such as \"/\", got {text!r}")
    return text


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


# Keys a config may still set from an earlier version, and what to write instead.
REMOVED_EXPORTER_KEYS = {
    "tenant_label_limit": (
        "no longer exists: jobs_processed_total is counted per class only, and each class's busiest "
        "tenants over exporter.window are served as queue_tenant_share_ratio (exporter.topk_tenants of "
        "them), whenever they first sent a job; delete this key"),
}


def _exporter(r: Reader) -> ExporterConfig:
    """The core's keys of the ``exporter`` mapping (the exporter process reads its own from ``r``
    too, before the core refuses any key neither part read)."""
    for key, why in REMOVED_EXPORTER_KEYS.items():
        if key in r.data:
            raise r.error(key, why)
    return ExporterConfig(
        topk_tenants=r.get("topk_tenants", ExporterConfig.topk_tenants, int_between(1, 100)),
        window=r.get("window", ExporterConfig.window, parse_duration),
        noisy_min_inflight=r.get("noisy_min_inflight", ExporterConfig.noisy_min_inflight, int_between(1, 10**6)),
        noisy_min_queued=r.get("noisy_min_queued", ExporterConfig.noisy_min_queued, int_between(1, 10**9)),
        fairness_sample=r.get("fairness_sample", ExporterConfig.fairness_sample, int_between(2, 10_000)),
    )


def _rule(value: object, path: str, source: str | None, tiers: Mapping[str, int]) -> Rule:
    r = Reader(value, path, source)

    def tasks(raw: object, tpath: str) -> frozenset[str]:
        items = list_value(raw, tpath)
        if not items:
            raise ConfigError(tpath, "expected at least one task name")
        return frozenset(config_name(t, f"{tpath}[{i}]") for i, t in enumerate(items))

    tier = r.get("tenant_tier", None, config_name)
    if tier is not None and tier not in tiers:
        raise r.error("tenant_tier", f"unknown tier {tier!r}; tenants.tiers has: {', '.join(tiers)}")
    out = Rule(
        queue=r.require("class", config_name),
        reason=r.require("reason", one_line),
        tasks=r.get("tasks", None, tasks),
        user_waiting=r.get("user_waiting", None, boolean),
        tenant_tier=tier,
    )
    r.done()
    return out


def parse_config(data: object, source: str | None = None) -> Config:
    """Validate an already-parsed YAML document (a dict) into a :class:`Config`: the core's
    sections here, then each section another layer owns (fairness_core.config_sections)."""
    r = Reader(data, "", source)
    redis_cfg = r.get("redis", RedisConfig(), lambda v, p: _redis(v, p, source))
    scheduler = r.get("scheduler", SchedulerConfig(), lambda v, p: _scheduler(v, p, source))
    tenants = r.get("tenants", TenantsConfig(), lambda v, p: _tenants(v, p, source))
    leases = r.get("leases", LeasesConfig(), lambda v, p: _leases(v, p, source))
    exporter_keys = r.get("exporter", None, lambda v, p: Reader(v, p, source))
    exporter = _exporter(exporter_keys) if exporter_keys is not None else ExporterConfig()
    classes = tuple(
        _class(item, f"classes[{i}]", source) for i, item in enumerate(r.require("classes", list_value))
    )
    class_names = tuple(c.name for c in classes)
    # A watched system classifies its own jobs: its config may leave the rules out.
    rules_optional = any(s.classification_optional and r.data.get(s.mapping) is not None
                         for s in owned_sections().values())
    raw_rules = (r.require("classification", list_value) if not rules_optional or "classification" in r.data
                 else [{"class": class_names[0], "reason": "default"}])
    rules = tuple(_rule(item, f"classification[{i}]", source, tenants.tiers) for i, item in enumerate(raw_rules))
    mark_seen(r)
    r.done()
    _check_classes(classes, scheduler, source)
    _check_rules(rules, tuple(c.name for c in classes), source)
    if tenants.holds and scheduler.policy != "weighted-fair":
        raise ConfigError("scheduler.policy", "tenants' max_in_flight and dispatch_rate hold tenants out of weighted "
                          f"fair queuing's order, and need policy weighted-fair, got {scheduler.policy!r}", source)
    core = Config(
        classes=classes, classification=rules, redis=redis_cfg, scheduler=scheduler,
        tenants=tenants, leases=leases, exporter=exporter, source=source,
    )
    return replace(core, sections=parse_sections(r, core, {"exporter": exporter_keys}))


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
