"""The bookkeeping the scheduler maintains, read back in one round trip (what the exporter serves).

The Lua ``snapshot`` operation and the reference model both produce the same *raw* reading
(:class:`RawClass` per class, plus the flat counters ``"<counter>" SEP "<class>" -> int``), and one
builder turns either into a :class:`Snapshot`, so derived figures (noisy tenants, quiet-tenant
age, windowed shares, the fairness index) are computed by one piece of code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .accounts import account_of
from .config import Config, TenantsConfig, TierLimits
from .jobs import SEP

# Upper bounds (seconds) of the enqueue->first-lease wait histogram; the documents' SLOs
# (60 s, 15 min, 1 h) are bucket edges so alerts can read them exactly. The last bucket is +Inf.
WAIT_BUCKETS_S: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400,
)

# Per-class lifecycle counters kept by the scripts (stats field "<name>" SEP "<class>"); "worktime"
# is the microseconds workers reported running the class's acked and nacked jobs; "unhandled" the
# leases given back by workers with no handler for the task (Queue.defer_unhandled);
# "deduplicated" the keyed submits answered with the job first submitted with their key.
COUNTERS = ("processed", "failed", "redelivered", "unhandled", "dead", "promoted", "demoted", "rejected", "refused",
            "deduplicated", "worktime")

# Why a member (a tenant, or an account) is held out of its class's fair order by a dispatch limit:
# at its cap (tenants.max_in_flight), out of its rate's tokens (tenants.dispatch_rate), or the same
# for its account (tenants.account_max_in_flight, account_dispatch_rate). The scripts count, per
# class and reason, the members held ("held" SEP class SEP reason) and their jobs queued now
# ("heldjobs" ...); a job whose tenant and account are both held counts under each reason.
HOLD_REASONS = ("cap", "rate", "account_cap", "account_rate")

# A tenant is noisy in a class when it holds more than this share of the class's in-flight jobs
# (the SQS fair-queue rule; and at least exporter.noisy_min_inflight of its own) or of its queued
# jobs (at least exporter.noisy_min_queued): a flood that fairness keeps to a few slots is still
# noisy by its backlog. At most 9 tenants can exceed 10%, so the 10 tenants with most jobs in
# flight, and the 10 with most queued, always include every noisy one; and at most 18 tenants are
# noisy at once (9 by in-flight jobs, 9 by queued ones).
NOISY_SHARE = 0.10
INFLIGHT_TOP = 10
MAX_NOISY = 2 * (INFLIGHT_TOP - 1)

Pairs = Sequence[tuple[str, float]]
# With accounts, each top account's busiest keys the exporter names (queue_account_tenant_share_ratio).
ACCOUNT_KEYS = 3


# With accounts, tenant heads a snapshot reads to find a quiet account's: a noisy account may own
# any number of the oldest keys, so more are read, at a bounded cost (about 0.1 ms of Redis a class).
ACCOUNT_HEADS = 1000


def heads_to_read(topk: int, accounts: bool = False) -> int:
    """Tenant heads a snapshot reads: the k oldest, and enough to skip every noisy tenant (however
    many of the oldest heads are noisy, one more than the most there can be is a quiet one's);
    with accounts, :data:`ACCOUNT_HEADS`."""
    return max(topk, MAX_NOISY + 1, ACCOUNT_HEADS if accounts else 0)


@dataclass(frozen=True)
class RawClass:
    """One class as read from Redis (or the model), before anything is derived."""

    heads: Pairs  # oldest tenant heads first: (tenant, enqueued ms)
    active_tenants: int
    top_backlog: Pairs  # (tenant, queued jobs), most first: max(k, INFLIGHT_TOP) of them
    top_inflight: Pairs  # (tenant, leased jobs), most first
    served_now: Pairs  # (tenant, processed in the current window bucket), most first
    served_before: Pairs  # the same for the previous bucket
    served_now_total: int
    served_before_total: int
    # The most backlogged parties (tenants; with accounts, accounts): (party, cost, served now, before).
    sample: Sequence[tuple[str, int, float, float]]
    # With accounts (tenants.account_separator), the same one level up (nothing read without):
    active_accounts: int = 0
    accounts_now: Pairs = ()  # (account, service in the current bucket), most first
    accounts_before: Pairs = ()
    accounts_backlog: Pairs = ()  # (account, queued jobs), most first
    accounts_keys: Sequence[int] = ()  # each of accounts_backlog's keys queued in its fair order
    # The busiest accounts' busiest queued keys: (account, key, served now, served before).
    account_keys: Sequence[tuple[str, str, float, float]] = ()
    # Of ``heads``, the tenants a dispatch limit holds (theirs or their account's): they wait on
    # their own limit, not on the others, so the quiet tenants' oldest age passes them by.
    held_heads: frozenset[str] = frozenset()

    @staticmethod
    def key_accounts(now: Pairs, before: Pairs, now_ms: float, window_ms: int, top: int) -> list[str]:
        """The accounts whose busiest keys a reading holds: the ``top`` with the most service over
        the sliding window at ``now_ms``, from the two buckets' top lists as their shares are (ties
        at the last place all in), so an account's key breakdown is served whenever its share is,
        also just after a bucket edge, when the current bucket is empty. The script's
        ``snapshot_class`` chooses alike."""
        served = _windowed(now, before, window_weight(now_ms, window_ms))
        least = sorted(served.values(), reverse=True)[min(len(served), top) - 1] if served else 0.0
        return [account for account, n in served.items() if n >= least]


@dataclass(frozen=True)
class ClassSnapshot:
    name: str
    depth: int
    inflight: int
    delayed: int
    paused: bool
    oldest_age: float
    active_tenants: int
    counters: Mapping[str, int]
    enqueued: Mapping[str, int]
    wait_buckets: tuple[int, ...]
    wait_sum: float
    wait_count: int
    top_backlog: tuple[tuple[str, int], ...]
    top_inflight: tuple[tuple[str, int], ...]
    noisy_tenants: tuple[str, ...]
    quiet_oldest_age: float
    oldest_tenants: tuple[tuple[str, float], ...]  # (tenant, age s), oldest first, k of them
    processed_window: float  # jobs processed in the sliding window
    top_processed: tuple[tuple[str, float], ...]  # (tenant, processed in the window), most first
    tenant_shares: tuple[tuple[str, float], ...]  # top_processed as shares of processed_window
    fairness_index: float  # Jain's index of weight-normalised service, sampled backlogged parties (tenants;
    # with accounts, accounts) (1 with none backlogged; 0 when they wait and none was served in the window)
    # With accounts (tenants.account_separator); empty or 0 without:
    active_accounts: int = 0
    account_shares: tuple[tuple[str, float], ...] = ()  # the top-k accounts' shares of processed_window
    account_tenants: tuple[tuple[str, str, float], ...] = ()  # (account, key, share of the account's service)
    # The most backlogged accounts, most first: (account, queued jobs, keys queued, share of processed_window).
    top_account_backlog: tuple[tuple[str, int, int, float], ...] = ()
    quiet_accounts_oldest_age: float = 0.0  # the oldest due job of a key whose account is not noisy
    # Held by a dispatch limit now, by reason (HOLD_REASONS; only those above 0): members (tenants,
    # or accounts for the account_ reasons), and the jobs they have queued in the class.
    held: Mapping[str, int] = field(default_factory=dict)
    held_jobs: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class UnconfiguredClass:
    """Jobs Redis holds under a class the applied config does not name (removed or renamed
    without a move, or left by an older deployment): nothing serves them until a config names
    the class again or ``fairctl config apply --move`` moves them, so they must be seen."""

    name: str
    depth: int  # queued
    inflight: int  # leased: their acks still count; a reaped one comes back here
    delayed: int  # retries waiting for their backoff
    oldest_age: float  # seconds since the oldest queued job's enqueue (0 with none queued)


@dataclass(frozen=True)
class Snapshot:
    time: float
    classes: Mapping[str, ClassSnapshot]
    dead_letters: int
    worker_slots: int
    tenant_shares: tuple[tuple[str, float], ...]  # top-k tenants' share of processed jobs, all classes
    unconfigured: Mapping[str, UnconfiguredClass] = field(default_factory=dict)  # by class name


def window_weight(now_ms: float, window_ms: int) -> float:
    """Weight of the previous bucket in the sliding window estimate (the part still inside it)."""
    return (window_ms - (now_ms % window_ms)) / window_ms


def _windowed(now: Pairs, before: Pairs, weight: float) -> dict[str, float]:
    """Sliding-window estimate per tenant from the current and previous buckets' top lists
    (a tenant missing from one list counts 0 there: an underestimate, never an overestimate)."""
    out: dict[str, float] = {}
    for tenant, count in before:
        out[tenant] = float(count) * weight
    for tenant, count in now:
        out[tenant] = out.get(tenant, 0.0) + float(count)
    return out


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything. With no value (no
    tenant waits) 1; with values but no service (tenants wait, none is served) 0: a starved class
    is not a fair one, and 0 is below any served class's 1/n."""
    if not values:
        return 1.0
    total = sum(values)
    if total <= 0:
        return 0.0
    return total * total / (len(values) * sum(v * v for v in values))


def _quiet_head(raw: RawClass, noisy: Callable[[str], bool], read: int) -> float | None:
    """The enqueue time of the oldest head that is neither noisy nor held by a dispatch limit. Past
    every head read (``read`` of them, none quiet), the last one's: no head unread is older."""
    skipped = False
    for tenant, ms in raw.heads:
        if not noisy(tenant) and tenant not in raw.held_heads:
            return ms
        skipped = True
    return raw.heads[-1][1] if skipped and len(raw.heads) >= read else None


def _derive_class(config: Config, name: str, stats: Mapping[str, int], paused: bool, raw: RawClass,
                  now_ms: float, weight: float) -> ClassSnapshot:
    exp = config.exporter

    def get(counter: str) -> int:
        return int(stats.get(f"{counter}{SEP}{name}", 0))

    inflight, depth = get("inflight"), get("depth")
    by_inflight = [t for t, n in raw.top_inflight if n > NOISY_SHARE * inflight and n >= exp.noisy_min_inflight]
    by_backlog = [t for t, n in raw.top_backlog if n > NOISY_SHARE * depth and n >= exp.noisy_min_queued]
    noisy = tuple(dict.fromkeys(by_inflight + by_backlog))
    quiet = _quiet_head(raw, lambda t: t in noisy, heads_to_read(exp.topk_tenants, config.tenants.account_separator is not None))
    window = _windowed(raw.served_now, raw.served_before, weight)
    top = sorted(window.items(), key=lambda kv: (-kv[1], kv[0]))[: exp.topk_tenants]
    processed_window = raw.served_now_total + raw.served_before_total * weight
    service = [(float(now) + float(before) * weight) * cost for _, cost, now, before in raw.sample]

    def age(ms: float | None) -> float:
        return max(0.0, (now_ms - ms) / 1000.0) if ms is not None else 0.0

    accounts = _accounts(config, raw, processed_window, weight, depth, inflight, age)
    wait_buckets = tuple(int(stats.get(f"wb{SEP}{name}{SEP}{i + 1}", 0)) for i in range(len(WAIT_BUCKETS_S) + 1))
    return ClassSnapshot(
        **accounts,
        name=name,
        depth=get("depth"),
        inflight=inflight,
        delayed=get("delayed"),
        paused=paused,
        oldest_age=age(raw.heads[0][1] if raw.heads else None),
        active_tenants=raw.active_tenants,
        counters={c: get(c) for c in COUNTERS},
        enqueued={f.split(SEP)[2]: int(v) for f, v in stats.items() if f.startswith(f"enq{SEP}{name}{SEP}")},
        wait_buckets=wait_buckets,
        wait_sum=get("ws") / 1000.0,
        wait_count=sum(wait_buckets),
        top_backlog=tuple((t, int(n)) for t, n in raw.top_backlog[: exp.topk_tenants]),
        top_inflight=tuple((t, int(n)) for t, n in raw.top_inflight),
        noisy_tenants=noisy,
        quiet_oldest_age=age(quiet),
        oldest_tenants=tuple((t, age(ms)) for t, ms in raw.heads[: exp.topk_tenants]),
        processed_window=processed_window,
        top_processed=tuple(top),
        tenant_shares=tuple((t, min(1.0, n / processed_window)) for t, n in top) if processed_window > 0 else (),
        fairness_index=jain_index(service),
        held=_held(stats, "held", name),
        held_jobs=_held(stats, "heldjobs", name),
    )


def _held(stats: Mapping[str, int], counter: str, name: str) -> dict[str, int]:
    """A class's hold counter by reason, the reasons above 0 only."""
    counts = {reason: int(stats.get(f"{counter}{SEP}{name}{SEP}{reason}", 0)) for reason in HOLD_REASONS}
    return {reason: n for reason, n in counts.items() if n > 0}


def hold_reasons(config: Config) -> tuple[str, ...]:
    """The reasons ``config``'s dispatch limits can hold a member for (:data:`HOLD_REASONS`; none
    without a cap or a dispatch rate), whichever level (group, tier, tenant override) sets one."""
    tenants = config.tenants
    levels: list[TenantsConfig | TierLimits] = [tenants, *tenants.limits.values(), *tenants.overrides.values()]
    has = {"cap": any(lim.max_in_flight for lim in levels), "rate": any(lim.dispatch_rate for lim in levels),
           "account_cap": bool(tenants.account_max_in_flight), "account_rate": bool(tenants.account_dispatch_rate)}
    return tuple(reason for reason in HOLD_REASONS if has[reason])


def _accounts(config: Config, raw: RawClass, processed_window: float, weight: float, depth: int, inflight: int,
              age: Callable[[float | None], float]) -> dict[str, Any]:
    """The account views of a class (none without tenants.account_separator): the top-k accounts'
    shares; each one's busiest queued keys as shares of its service; the most backlogged accounts
    with their queued jobs and keys; and the oldest due job of a
    key whose account is not noisy by the tenants' rule, its keys' in-flight jobs (of those read)
    or its queued jobs counted together."""
    separator, exp = config.tenants.account_separator, config.exporter
    if separator is None:
        return {}
    served = _windowed(raw.accounts_now, raw.accounts_before, weight)
    top = sorted(served.items(), key=lambda kv: (-kv[1], kv[0]))[: exp.topk_tenants]
    keys: dict[str, list[tuple[str, float]]] = {}
    for account, key, now, before in raw.account_keys:
        keys.setdefault(account, []).append((key, float(now) + float(before) * weight))
    in_flight: dict[str, float] = {}
    for tenant, n in raw.top_inflight:
        account = account_of(tenant, separator)
        in_flight[account] = in_flight.get(account, 0) + n
    noisy = {a for a, n in in_flight.items() if n > NOISY_SHARE * inflight and n >= exp.noisy_min_inflight}
    noisy |= {a for a, n in raw.accounts_backlog if n > NOISY_SHARE * depth and n >= exp.noisy_min_queued}
    quiet = _quiet_head(raw, lambda t: account_of(t, separator) in noisy, ACCOUNT_HEADS)
    return {
        "active_accounts": raw.active_accounts,
        "account_shares": tuple((a, min(1.0, n / processed_window)) for a, n in top) if processed_window > 0 else (),
        "account_tenants": tuple((a, t, min(1.0, n / total)) for a, total in top if total > 0
                                 for t, n in sorted(keys.get(a, []), key=lambda kv: (-kv[1], kv[0]))),
        "top_account_backlog": tuple(
            (a, int(n), int(k), min(1.0, served.get(a, 0.0) / processed_window) if processed_window > 0 else 0.0)
            for (a, n), k in zip(raw.accounts_backlog[: exp.topk_tenants], raw.accounts_keys)),
        "quiet_accounts_oldest_age": age(quiet),
    }


def build_snapshot(config: Config, now_ms: float, stats: Mapping[str, int], paused: Sequence[str],
                   raw: Mapping[str, RawClass], dead_letters: int,
                   unconfigured_heads: Mapping[str, float | None]) -> Snapshot:
    """``unconfigured_heads``: each class the config does not name that still holds jobs, with
    its oldest queued job's enqueue time (ms; None with none queued)."""
    weight = window_weight(now_ms, int(config.exporter.window * 1000))
    paused_set = set(paused)
    classes = {name: _derive_class(config, name, stats, name in paused_set, raw[name], now_ms, weight)
               for name in config.class_names}
    served: dict[str, float] = {}
    for c in classes.values():
        for tenant, n in c.top_processed:
            served[tenant] = served.get(tenant, 0.0) + n
    total = sum(c.processed_window for c in classes.values())
    shares = sorted(((t, n / total) for t, n in served.items()), key=lambda kv: (-kv[1], kv[0])) if total else []
    return Snapshot(time=now_ms / 1000.0, classes=classes, dead_letters=dead_letters,
                    worker_slots=int(stats.get("slots", 0)),
                    tenant_shares=tuple(shares[: config.exporter.topk_tenants]),
                    unconfigured={name: _unconfigured(name, stats, head, now_ms)
                                  for name, head in unconfigured_heads.items()})


def _unconfigured(name: str, stats: Mapping[str, int], head_ms: float | None, now_ms: float) -> UnconfiguredClass:
    def count(counter: str) -> int:
        return int(stats.get(f"{counter}{SEP}{name}", 0))

    return UnconfiguredClass(name=name, depth=count("depth"), inflight=count("inflight"), delayed=count("delayed"),
                             oldest_age=max(0.0, (now_ms - head_ms) / 1000.0) if head_ms is not None else 0.0)
