"""The scheduler's settings: every value the policy derives from a Config, derived once.

The Lua script gets them compiled in as its ``cfg`` table (fairness_core.script) and the reference
model reads the same object, so a derived value (a timeout in ms, a tier's cost, a top-list size)
is computed in one place and the two implementations cannot disagree about it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from .config import OVER_BUDGET_REASON, Config
from .config_store import NO_MOVES, NO_NAMES, Moves, Names, fingerprint
from .jobs import code
from .snapshot import ACCOUNT_KEYS, INFLIGHT_TOP, WAIT_BUCKETS_S, heads_to_read


# Charging by runtime: a task's first job in a class is charged its class's service_time, or this
# (a typical background job) when none is configured; every job at least MIN_CHARGE_US; each
# measured runtime moves an estimate a quarter of the way (a 10x change is within 1% in 16 jobs).
DEFAULT_RUNTIME_S = 0.1
MIN_CHARGE_US = 1000
RUNTIME_SMOOTHING = 0.25

# Jobs one call of a sweep moves at most (expired leases, due retries, aging, moves; and the due
# retries a pop releases): at about 13 µs a job promoted, each call stays well under a millisecond
# of Redis time however large the sweep (calls of 50 took up to 0.93 ms). A sweep of more is
# several calls.
SWEEP_BATCH = 25

# Every worker reaps each second: a reap that finds none ran for this long follows a stall of Redis
# (or a time no worker reached it), and pushes the workers' registrations back by the gap, to no
# sooner than this long after it (time for a worker to renew on its own backoff).
REAP_GAP_MS = 5000
# How long a lease taken back from its worker (expired, or its worker gone) is remembered, so that
# the worker's late ack or heartbeat can tell "it may run again" from "it was settled already".
RETURNED_KEEP_MS = 3_600_000


@dataclass(frozen=True)
class Settings:
    """Field names are the Lua's ``cfg`` keys; lists are per class, in priority order."""

    classes: tuple[str, ...]
    weights: tuple[int, ...]
    reserved: tuple[int, ...]
    has_reserved: bool
    budgets: tuple[float, ...]  # arrival budget share, 0 for none
    has_budget: bool
    budget_window_ms: int
    budget_min: int
    budget_action: str
    over_budget_reason: str
    promote_ms: tuple[int, ...]  # 0: never promoted
    policy: str
    batch: int
    account_sep: str  # tenants.account_separator: "" when every tenant is a party of its own
    costs: Mapping[str, int]  # tier -> virtual-time cost of one job
    max_queued: Mapping[str, int]  # tier -> jobs a tenant enqueueing as it may have queued, 0 for no limit
    has_limit: bool  # some tier has one: only then does an enqueue count the tenant's queued jobs
    max_rate: Mapping[str, float]  # tier -> jobs per second a tenant enqueueing as it may have accepted, 0 for none
    rate_allowed: Mapping[str, float]  # tier -> max_rate as jobs per rate window, what the estimate is held to
    rate_window_ms: int  # the window of the rate estimate, and the length of each of its buckets
    has_rate: bool  # some tier has one: only then does an enqueue read and count the tenant's arrivals
    account_max_queued: int  # jobs one account may have queued, all its keys together; 0 for no limit
    account_max_rate: float  # jobs per second one account may have accepted; 0 for no limit
    account_rate_allowed: float  # account_max_rate as jobs per rate window
    # Dispatch limits, held at the pop (weighted-fair only): per tier, and per tenant where an
    # override sets one (0: none). A cap counts leased jobs; a rate is a GCRA pace in µs a job and
    # a burst in jobs. An account's are one value each.
    cap: Mapping[str, int]
    pace_us: Mapping[str, int]
    burst: Mapping[str, int]
    tenant_cap: Mapping[str, int]
    tenant_pace_us: Mapping[str, int]
    tenant_burst: Mapping[str, int]
    account_cap: int
    account_pace_us: int
    account_burst: int
    has_cap: bool  # some tenant has a cap: leases count in RUNNING by tenant
    least_cap: int  # the lowest tenant cap: a settle of a tenant that ran fewer looks for no cap hold
    has_pace: bool  # some tenant has a rate
    holds: bool  # any dispatch limit at all, a tenant's or an account's
    default_tier: str  # tenants.default_tier: a queued party with no cost entry is charged as it
    default_cost: int  # the charge for a tier no config names (a job queued before its tier went)
    runtime: bool  # scheduler.charge is runtime: tags and class shares count microseconds of work
    seed_us: tuple[int, ...]  # per class: the estimate of a task no job of has reported yet
    min_charge_us: int  # the least a job is charged under runtime: jobs that take no time still take turns
    smoothing: float  # weight of a new measurement in a runtime estimate (exponential moving average)
    fingerprint: str  # of the applied config and moves: every script checks it against Redis's
    moves: tuple[tuple[str, str], ...]  # (removed class, class its jobs go to), sorted
    moved: Mapping[str, str]  # the same as a map: leased and retried jobs of a removed class return there
    tier_moved: Mapping[str, str]  # removed tier -> the tier its tenants are charged as
    names: tuple[str, ...]  # the names jobs store as codes: code i is names[i - 1]
    codes: Mapping[str, str]  # name -> what a job stores for it (CODE_MARK and its place, fairness_core.jobs.code)
    visibility_ms: int
    max_attempts: int
    backoff_ms: int
    backoff_max_ms: int
    buckets_ms: tuple[int, ...]  # wait histogram upper bounds
    window_ms: int  # windowed-service bucket
    inflight_top: int
    backlog_top: int  # tenants a snapshot reads by backlog
    served_top: int  # tenants a snapshot reads per service bucket
    heads: int  # tenant heads a snapshot reads
    sample: int  # backlogged tenants in the fairness sample
    account_top: int  # with accounts: the accounts whose busiest keys a snapshot reads
    account_keys: int  # and how many of each one's keys
    dedup_window_ms: int  # how long a keyed job's key returns it (scheduler.dedup_window)

    def cost_of(self, tier: str) -> int:
        """As the Lua's ``cost_of``: a job's virtual-time cost from its tenant's tier."""
        return (self.costs.get(tier) or self.costs.get(self.tier_moved.get(tier, "")) or recorded_cost(tier)
                or self.default_cost)

    def outranks(self, tier: str, other: str) -> bool:
        """As the Lua's ``outranks``: ``tier`` weighs more than ``other`` (costs less), or as much
        and sorts after it, so an account's highest tier is one tier whatever order its keys came in."""
        return (self.cost_of(tier), other) < (self.cost_of(other), tier)

    def limit_of(self, override: Mapping[str, int], by_tier: Mapping[str, int], tenant: str, tier: str) -> int:
        """As the Lua's ``limit_of``: a dispatch limit of ``tenant`` charged as ``tier`` (``cap``,
        ``pace_us`` or ``burst``, with its per-tenant ``override``): its override's, else its
        tier's, else, for a tier the config no longer names, the default tier's (0: none)."""
        if tenant in override:
            return override[tenant]
        return by_tier[tier] if tier in by_tier else by_tier[self.default_tier]

    def tier_weight(self, tier: str) -> float:
        """A tenant's weight against its class's other tenants (``tenants.tiers``), from its cost:
        the costs are inversely proportional to the configured weights."""
        return max(self.costs.values(), default=self.default_cost) / self.cost_of(tier)


def recorded_cost(tier: str) -> int | None:
    """As the Lua's ``recorded_cost``: a cost an older release stored in place of the tier."""
    return int(tier) if re.fullmatch(r"[0-9]+", tier) else None


def derive(config: Config, moves: Moves = NO_MOVES, names: Names | None = None, stored: str | None = None) -> Settings:
    """The settings of ``config`` applied with ``moves`` and ``names`` (None: those a new group
    applying ``config`` gets); the one place a policy value is derived from the config.
    ``stored``: the fingerprint its group stored with it, which the script must match (one an
    earlier release computed may differ from this release's for the same config)."""
    names = NO_NAMES.covering(config) if names is None else names
    classes, exp = config.classes, config.exporter
    tenants = config.tenants
    limits = {tier: int(tenants.limit_for(tier, "max_queued") or 0) for tier in tenants.tiers}
    rates = {tier: float(tenants.limit_for(tier, "max_rate") or 0) for tier in tenants.tiers}
    account_rate = float(tenants.account_max_rate or 0)
    wfq = config.scheduler.policy == "weighted-fair"  # the other policies pick by age, never hold
    caps = {tier: int(tenants.limit_for(tier, "max_in_flight") or 0) if wfq else 0 for tier in tenants.tiers}
    paces = {tier: _pace_us(tenants.limit_for(tier, "dispatch_rate")) if wfq else 0 for tier in tenants.tiers}
    overrides = tenants.overrides.items() if wfq else ()
    tenant_caps = {t: int(o.max_in_flight) for t, o in overrides if o.max_in_flight is not None}
    tenant_paces = {t: _pace_us(o.dispatch_rate) for t, o in overrides if o.dispatch_rate is not None}
    account_cap = int(tenants.account_max_in_flight or 0) if wfq else 0
    account_pace = _pace_us(tenants.account_dispatch_rate) if wfq else 0
    has_cap = any(caps.values()) or any(tenant_caps.values())
    has_pace = any(paces.values()) or any(tenant_paces.values())
    return Settings(
        classes=tuple(c.name for c in classes),
        weights=tuple(c.weight for c in classes),
        reserved=tuple(c.reserved_slots for c in classes),
        has_reserved=any(c.reserved_slots for c in classes),
        budgets=tuple(c.arrival_budget or 0 for c in classes),
        has_budget=any(c.arrival_budget for c in classes),
        budget_window_ms=int(config.scheduler.budget_window * 1000),
        budget_min=config.scheduler.budget_min_arrivals,
        budget_action=config.scheduler.budget_action,
        over_budget_reason=OVER_BUDGET_REASON,
        promote_ms=tuple(int((c.promote_after or 0) * 1000) for c in classes),
        policy=config.scheduler.policy,
        batch=config.tenants.batch,
        account_sep=config.tenants.account_separator or "",
        costs={tier: config.tenants.cost(tier) for tier in config.tenants.tiers},
        cap=caps,
        pace_us=paces,
        burst={tier: int(tenants.limit_for(tier, "dispatch_burst") or 1) for tier in tenants.tiers},
        tenant_cap=tenant_caps,
        tenant_pace_us=tenant_paces,
        tenant_burst={t: o.dispatch_burst for t, o in overrides if o.dispatch_burst is not None},
        account_cap=account_cap,
        account_pace_us=account_pace,
        account_burst=tenants.dispatch_burst,
        has_cap=has_cap,
        least_cap=min((c for c in (*caps.values(), *tenant_caps.values()) if c > 0), default=0),
        has_pace=has_pace,
        holds=has_cap or has_pace or bool(account_cap) or bool(account_pace),
        default_tier=config.tenants.default_tier,
        default_cost=config.tenants.cost(config.tenants.default_tier),
        runtime=config.scheduler.charge == "runtime",
        seed_us=tuple(round((c.service_time or DEFAULT_RUNTIME_S) * 1_000_000) for c in classes),
        min_charge_us=MIN_CHARGE_US,
        smoothing=RUNTIME_SMOOTHING,
        max_queued=limits,
        has_limit=any(limits.values()) or bool(tenants.account_max_queued),
        max_rate=rates,
        # Rounded: 0.3/s over 10s is 3 jobs, not 3.0000000000000004 (a fourth let in).
        rate_allowed={tier: round(rate * tenants.rate_window, 9) for tier, rate in rates.items()},
        rate_window_ms=int(tenants.rate_window * 1000),
        has_rate=any(rates.values()) or bool(account_rate),
        account_max_queued=tenants.account_max_queued or 0,
        account_max_rate=account_rate,
        account_rate_allowed=round(account_rate * tenants.rate_window, 9),
        fingerprint=stored or fingerprint(config, moves, names),
        moves=tuple(sorted(moves.classes.items())),
        moved=dict(moves.classes),
        tier_moved=dict(moves.tiers),
        names=names.names,
        codes={name: code(i) for i, name in enumerate(names.names, start=1)},
        visibility_ms=int(config.leases.visibility_timeout * 1000),
        max_attempts=config.leases.max_attempts,
        backoff_ms=int(config.leases.retry_backoff * 1000),
        backoff_max_ms=int(config.leases.retry_backoff_max * 1000),
        buckets_ms=tuple(int(b * 1000) for b in WAIT_BUCKETS_S),
        window_ms=int(exp.window * 1000),
        inflight_top=INFLIGHT_TOP,
        backlog_top=max(exp.topk_tenants, INFLIGHT_TOP),
        served_top=2 * exp.topk_tenants,
        heads=heads_to_read(exp.topk_tenants, config.tenants.account_separator is not None),
        sample=exp.fairness_sample,
        account_top=exp.topk_tenants,
        account_keys=ACCOUNT_KEYS,
        dedup_window_ms=int(config.scheduler.dedup_window * 1000),
    )


def paced(now_ms: float, tat_us: float | None, pace_us: int, burst: int) -> tuple[int, float, int]:
    """As the Lua's ``headroom`` for a dispatch rate (GCRA): the starts a bucket of ``burst`` at
    ``pace_us`` a start allows at ``now_ms`` (below 1: none), the arrival time (µs) it counts from,
    and when (ms) its next start is due."""
    now_us, slack = now_ms * 1000, (burst - 1) * pace_us
    tat = max(tat_us or 0, now_us)
    return math.floor((now_us + slack - tat) / pace_us) + 1, tat, math.ceil((tat - slack) / 1000)


def _pace_us(rate: float | None) -> int:
    """A dispatch rate (jobs per second; None or 0: none) as the µs between two starts, whole, so
    that the script's and the model's arithmetic is exact (0: no rate)."""
    return max(1, round(1_000_000 / rate)) if rate else 0


def rebases_tags(before: Settings, after: Settings) -> bool:
    """Whether tags change unit from ``before`` to ``after``: the charge basis (jobs or microseconds
    of work) changed. Then every tag and virtual time restarts from zero. New tier costs do not
    rebase: a queued party's tag is at most one visit ahead of the virtual time, so keeping the tags
    moves nobody by more than that visit, and saves a pass over every queued tenant."""
    return before.runtime != after.runtime


def default_tier_left(before: Settings, after: Settings) -> str:
    """The default tier of ``before`` when ``after`` names another, else '': the queued parties of
    it have no cost entry (they are of the default tier) and must keep it, so the apply writes it in."""
    return before.default_tier if before.default_tier != after.default_tier else ""


def recharges(before: Settings, after: Settings) -> bool:
    """Whether tier costs change from ``before`` to ``after``, so the order of tiers may: then each
    queued account is charged again at the highest tier of its queued keys (with accounts)."""
    return (before.costs, before.tier_moved, before.default_cost) != (after.costs, after.tier_moved, after.default_cost)


def regroups(before: Settings, after: Settings) -> bool:
    """Whether the parties of fair queuing change from ``before`` to ``after`` (accounts turned on
    or off, or split another way): then every class's tags are rebuilt from its queued tenants."""
    return before.account_sep != after.account_sep
