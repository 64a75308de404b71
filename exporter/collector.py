"""The prometheus-client collector: one queue group's ``snapshot()`` per scrape, under a hard deadline.

Families are built fresh at every scrape from the snapshot and Redis's INFO memory and stats
(nothing is registered at import time and no state is kept between scrapes except the exporter's
own error counter), so two exporters watching the same Redis serve the same values. The config is
the scheduler's at each scrape (it follows the config applied in Redis), so a class added or
removed shows up without a restart; what is derived from it is recomputed only when it changes.
The exporter never refuses an evicting ``maxmemory-policy`` (workers and producers do): it serves
the policy, so the alert on it can fire. The snapshot is one scripted round trip; it runs in
a daemon thread so a stalled Redis (``CLIENT PAUSE``, ``DEBUG SLEEP``, a dead peer) costs a scrape
its Redis series, never its answer: past ``exporter.scrape_timeout`` the scrape answers with the
config gauges, ``fairness_exporter_redis_up 0`` and the error counted, and the next scrape tries
again, so the exporter recovers by itself when Redis does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from fairness_core import (
    AppliedConfigUnreadable, Config, MemoryInfo, QueueGroup, RedisUnavailable, Snapshot, open_queue, redis_client,
)
from fairness_core.config_store import Applied
from fairness_core.connection import ClusterClient, redis_errors, server_of
from fairness_core.layout import group_fingerprint
from fairness_core.memory import memory_from_info as memory_of
from fairness_core.snapshot import hold_reasons
from fairness_core.version import fairctl_version

from . import metrics as m
from .config import serving

log = logging.getLogger(__name__)

T = TypeVar("T")

# Part of the budget kept for building and writing the response after the snapshot's deadline.
RENDER_SHARE = 0.2
RENDER_MAX_S = 0.25

# Worker time is stored in integer microseconds; Prometheus's base unit is the second.
MICROSECONDS_PER_SECOND = 1_000_000

# Lifecycle counters of the contract and the snapshot counter each one reads.
LIFECYCLE: tuple[tuple[m.MetricSpec, str], ...] = (
    (m.JOBS_FAILED, "failed"), (m.JOBS_REDELIVERED, "redelivered"), (m.JOBS_UNHANDLED, "unhandled"),
    (m.JOBS_DEAD_LETTERED, "dead"),
    (m.JOBS_PROMOTED, "promoted"), (m.JOBS_DEMOTED, "demoted"), (m.JOBS_REJECTED, "rejected"),
    (m.JOBS_REFUSED, "refused"), (m.JOBS_DEDUPLICATED, "deduplicated"),
)


def snapshot_deadline(budget: float) -> float:
    """Seconds the snapshot may take so the whole scrape still answers within ``budget``."""
    return budget - min(budget * RENDER_SHARE, RENDER_MAX_S)


def scrape_client(config: Config, url: str | None = None) -> redis.Redis | ClusterClient:
    """A client of ``url`` (default ``redis.url``) whose connect and reply timeouts are the scrape
    budget, so a read left behind by a timed-out scrape ends by itself instead of holding a
    connection to a stalled Redis. ValueError for an unusable URL (the message does not repeat it)."""
    budget = serving(config).scrape_timeout
    return redis_client(url or config.redis.url, connect_timeout=budget, timeout=budget)


@dataclass(frozen=True)
class Reading:
    """What one scrape reads from Redis: the scheduler's bookkeeping, and INFO memory and stats
    (None for a stand-in scheduler with no Redis, the simulator's replay)."""

    snapshot: Snapshot
    memory: MemoryInfo | None = None
    resets: int | None = None  # times the group's state was found reset under this exporter


@dataclass(frozen=True)
class Master:
    """The Redis master a shard's series were read from: where it is, and the run_id of the server
    last read there ("" until one is read), so a master restarted at the same address is another."""

    address: str
    run_id: str = ""

    def at(self, address: str) -> Master:
        """This master, or a new one not yet read when ``address`` is elsewhere."""
        return self if address == self.address else Master(address)


def read_master(client: Any, key: str) -> tuple[MemoryInfo, str]:
    """INFO memory and stats of the master holding ``key`` (as fairness_core.memory.read_memory
    reads them) and its run_id from INFO server, in the same one command: the master's identity
    costs a scrape no round trip."""
    with redis_errors(client):
        if isinstance(client, ClusterClient):
            reply = client.info("server", "memory", "stats", target_nodes=client.get_node_from_key(key))
        else:
            reply = client.info("server", "memory", "stats")
    return memory_of(reply), str(reply["run_id"])


class SnapshotTimeout(Exception):
    """The snapshot did not come back within the scrape budget."""


class SnapshotReader(Generic[T]):
    """Runs ``read`` in a daemon thread and waits for it at most a deadline.

    Scrapes that arrive while a read is still running (a second Prometheus, a stalled Redis) wait
    for that same read instead of starting another, so a stalled Redis never piles up threads or
    connections: there is at most one read in flight, and the client's socket timeout ends it.
    """

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._inflight: Future[T] | None = None

    def read(self, timeout: float) -> T:
        with self._lock:
            if self._inflight is None or self._inflight.done():
                self._inflight = self._start()
            future = self._inflight
        try:
            return future.result(timeout=max(0.0, timeout))
        except FutureTimeout:
            raise SnapshotTimeout(f"no snapshot within {timeout:.2f}s") from None

    def _start(self) -> Future[T]:
        future: Future[T] = Future()
        future.set_running_or_notify_cancel()

        def run() -> None:
            try:
                future.set_result(self._read())
            except BaseException as exc:  # handed to whichever scrape waits for it
                future.set_exception(exc)

        threading.Thread(target=run, name="fairness-snapshot", daemon=True).start()
        return future


class ScrapeHealth:
    """The exporter's own health across scrapes: its errors counted by reason, and whether the
    last scrape read Redis (a change is logged once, not at every scrape)."""

    def __init__(self, what: str) -> None:
        self.what = what  # what a scrape reads, for the log lines
        self._errors = {reason: 0 for reason in m.SCRAPE_ERROR_REASONS}
        self._lock = threading.Lock()
        self._redis_up: bool | None = None

    def read(self, reader: SnapshotReader[T], budget: float) -> T | None:
        """What ``reader`` reads within the scrape ``budget``, or None with the failure counted."""
        try:
            reading = reader.read(snapshot_deadline(budget))
        except SnapshotTimeout as exc:
            self._failed("timeout", f"{exc} (exporter.scrape_timeout {budget:g}s)")
        except (RedisUnavailable, redis.ConnectionError, redis.TimeoutError) as exc:  # host:port, never a password
            self._failed("unavailable", str(exc))
        except AppliedConfigUnreadable as exc:  # serve no figures of a policy it cannot read
            self._failed("error", str(exc))
        except redis.RedisError as exc:
            self._failed("error", f"{type(exc).__name__}: {exc}")
        except Exception:  # a bug must not take the exporter's own health series down with it
            log.exception("reading %s failed", self.what)
            self._failed("error", None)
        else:
            if self._redis_up is False:
                log.warning("Redis readable again; serving queue metrics")
            self._redis_up = True
            return reading
        return None

    def _failed(self, reason: str, message: str | None) -> None:
        with self._lock:
            self._errors[reason] += 1
        if self._redis_up is not False and message is not None:
            log.warning("cannot read %s: %s; serving fairness_exporter_redis_up 0", self.what, message)
        self._redis_up = False

    def add(self, families: Families, up: bool) -> None:
        """The health families: Redis read in time or not, and the errors so far."""
        families.add(m.EXPORTER_REDIS_UP, 1 if up else 0)
        with self._lock:
            errors = dict(self._errors)
        for reason, count in errors.items():
            families.add(m.EXPORTER_SCRAPE_ERRORS, count, reason=reason)


class Families:
    """The families of one scrape of a shard's series (every one labelled with its logical queue,
    ``group``, and its ``shard``), created on first use, in contract order on output."""

    def __init__(self, group: str, shard: str) -> None:
        self.group, self.shard = group, shard
        self._families: dict[m.MetricSpec, Metric] = {}

    def _family(self, spec: m.MetricSpec, labels: Mapping[str, str]) -> tuple[Metric, list[str]]:
        if set(labels) != set(spec.labels):
            raise ValueError(f"{spec.name}: labels {sorted(labels)}, contract says {list(spec.labels)}")
        family = self._families.get(spec)
        if family is None:
            family = self._families[spec] = spec.family()
        return family, [self.group, self.shard, *(labels[name] for name in spec.labels)]

    def add(self, spec: m.MetricSpec, value: float, **labels: str) -> None:
        family, values = self._family(spec, labels)
        if not isinstance(family, (GaugeMetricFamily, CounterMetricFamily)):
            raise TypeError(f"{spec.name} is a {spec.kind.value}, not a gauge or counter")
        family.add_metric(values, float(value))

    def add_histogram(self, spec: m.MetricSpec, counts: Sequence[int], total: float, **labels: str) -> None:
        """``counts``: one non-cumulative count per bucket of ``m.WAIT_BUCKETS`` plus +Inf."""
        family, values = self._family(spec, labels)
        if not isinstance(family, HistogramMetricFamily):
            raise TypeError(f"{spec.name} is a {spec.kind.value}, not a histogram")
        bounds = [*(floatToGoString(b) for b in m.WAIT_BUCKETS), "+Inf"]
        cumulative, buckets = 0, []
        for bound, count in zip(bounds, counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        family.add_metric(values, buckets, float(total))

    def __iter__(self) -> Iterator[Metric]:
        order = {spec: i for i, spec in enumerate(m.ALL)}
        return iter(family for _, family in sorted(self._families.items(), key=lambda kv: order[kv[0]]))


def weight_ratios(config: Config) -> dict[str, float]:
    """Each class's weight as a share of all weights: the share it is entitled to."""
    weights = sum(c.weight for c in config.classes)
    return {c.name: c.weight / weights for c in config.classes}


def add_config(families: Families, config: Config, ratios: Mapping[str, float]) -> None:
    """The per-class gauges the config gives: entitled share, SLO, arrival budget."""
    for c in config.classes:
        families.add(m.QUEUE_WEIGHT_RATIO, ratios[c.name], queue=c.name)
        families.add(m.QUEUE_MAX_AGE, c.max_age, queue=c.name)
        families.add(m.QUEUE_ARRIVAL_BUDGET, c.arrival_budget if c.arrival_budget is not None else 1.0, queue=c.name)


class SnapshotSource(Protocol):
    """A stand-in for a queue group that only gives snapshots (the simulator replays its own)."""

    def snapshot(self) -> Snapshot: ...


class FairnessCollector(Collector):
    """Serves the metric contract for one queue group: a shard of the logical queue ``group``,
    labelled ``shard`` with the group's own name, or (no ``group``) an unsharded queue, its own
    logical queue.

    A live group's (:class:`fairness_core.QueueGroup`) config is read at every scrape; a stand-in
    (the simulator replays snapshots through one) serves ``config`` and no Redis memory or master
    series."""

    def __init__(self, config: Config, scheduler: QueueGroup | SnapshotSource, *, version: str | None = None,
                 group: str | None = None) -> None:
        self.scheduler = scheduler
        self.shard = config.redis.prefix
        self.group = group or self.shard
        self._group = scheduler if isinstance(scheduler, QueueGroup) else None
        self._given = config
        self.version = version or fairctl_version()
        self._reader = SnapshotReader(self._read)
        named = f" of shard {self.shard}" if self.group != self.shard else ""
        self._health = ScrapeHealth(f"the scheduler's bookkeeping{named}")
        self._derived_from: Config | None = None
        self._weight_ratio: dict[str, float] = {}
        self._known_reasons: dict[str, list[str]] = {}
        self._hold_reasons: tuple[str, ...] = ()
        self._master: Master | None = None  # the Redis holding the group's keys, as last found
        self._grouped: tuple[Applied, str] | None = None  # the applied config, and its fingerprint as the group's

    def _read(self) -> Reading:
        group = self._group
        if group is None:
            return Reading(self.scheduler.snapshot())
        client, key = group.client, group.keys.config
        with redis_errors(client):  # by the slot map, before reading: a shard that never answers is named too
            where = server_of(client, key)
        self._master = self._master.at(where) if self._master is not None else Master(where)
        snapshot = group.snapshot()
        group.check_state()
        memory, run_id = read_master(client, key)
        # After reading: under Sentinel, the master the client found when it connected.
        self._master = Master(server_of(client, key), run_id)
        return Reading(snapshot, memory, group.resets)

    @property
    def config(self) -> Config:
        """The scheduler's config now, with the maps derived from it brought up to date."""
        config = self._given if self._group is None else self._group.config
        if config is not self._derived_from:
            self._weight_ratio = weight_ratios(config)
            # Reasons the classification rules can give each class: their counters exist from the start.
            self._known_reasons = {name: sorted({r.reason for r in config.classification if r.queue == name})
                                   for name in config.class_names}
            # Reasons the dispatch limits can hold a tenant or account for: served from the start.
            self._hold_reasons = hold_reasons(config)
            self._derived_from = config
        return config

    def _group_fingerprint(self, applied: Applied) -> str:
        """``applied``'s fingerprint as the logical queue's, worked out once per applied config."""
        if self._grouped is None or self._grouped[0] is not applied:
            self._grouped = (applied, group_fingerprint(applied, self.group))
        return self._grouped[1]

    def describe(self) -> Iterator[Metric]:
        """The contract's families, without reading Redis (the registry calls this on register)."""
        return (spec.family() for spec in m.ALL)

    def collect(self, spent: float = 0.0) -> Iterator[Metric]:
        """The scrape's families; ``spent``: seconds of its budget (exporter.scrape_timeout) gone
        before this shard's turn (a sharded queue's collector reads the layout first)."""
        started = time.monotonic()
        config = self.config
        families = Families(self.group, self.shard)
        reading = self._health.read(self._reader, serving(config).scrape_timeout - spent)
        if reading is not None:
            self._add_snapshot(families, reading.snapshot, config)
            if self._group is not None:  # the simulator's stand-in has no applied config
                applied = self._group.applied or self._group.sync()  # read once; a change syncs again
                families.add(m.CONFIG_VERSION, applied.version, fingerprint=applied.fingerprint)
                families.add(m.GROUP_CONFIG, 1, fingerprint=self._group_fingerprint(applied))
            if reading.memory is not None:
                self._add_memory(families, reading.memory)
            if reading.resets is not None:
                families.add(m.STATE_RESETS, reading.resets)
        if self._master is not None:  # the last one read, also while it cannot be read: the alerts name it
            families.add(m.REDIS_MASTER, 1, master=self._master.address, run_id=self._master.run_id)
        add_config(families, config, self._weight_ratio)
        self._health.add(families, reading is not None)
        families.add(m.EXPORTER_BUILD_INFO, 1, version=self.version, charge=config.scheduler.charge)
        families.add(m.EXPORTER_SCRAPE_DURATION, time.monotonic() - started)
        return iter(families)

    # ------------------------------------------------------------------ families

    def _add_snapshot(self, families: Families, snapshot: Snapshot, config: Config) -> None:
        """``config``: the one this scrape serves (read once per scrape: reading it again could
        follow a config applied meanwhile, with other classes than the rest of the scrape's)."""
        # The snapshot's classes, not the config's: the config may have changed since it was read.
        accounts = config.tenants.account_separator is not None  # the account views, only with accounts
        for name, view in snapshot.classes.items():
            for spec, value in (
                (m.QUEUE_OLDEST_AGE, view.oldest_age), (m.QUEUE_DEPTH, view.depth),
                (m.QUEUE_INFLIGHT, view.inflight), (m.QUEUE_DELAYED, view.delayed),
                (m.QUEUE_PAUSED, 1 if view.paused else 0), (m.QUEUE_ACTIVE_TENANTS, view.active_tenants),
                (m.QUEUE_NOISY_TENANTS, len(view.noisy_tenants)), (m.QUEUE_QUIET_OLDEST_AGE, view.quiet_oldest_age),
                (m.QUEUE_FAIRNESS_INDEX, view.fairness_index),
            ):
                families.add(spec, value, queue=name)
            enqueued = {reason: 0 for reason in self._known_reasons.get(name, ())} | dict(view.enqueued)
            for reason, count in sorted(enqueued.items()):
                families.add(m.JOBS_ENQUEUED, count, queue=name, reason=reason)
            families.add(m.JOBS_PROCESSED, view.counters.get("processed", 0), queue=name)
            families.add(m.QUEUE_WORKER_SECONDS, view.counters.get("worktime", 0) / MICROSECONDS_PER_SECOND, queue=name)
            for spec, counter in LIFECYCLE:
                families.add(spec, view.counters.get(counter, 0), queue=name)
            families.add_histogram(m.JOBS_WAIT, view.wait_buckets, view.wait_sum, queue=name)
            for tenant, age in view.oldest_tenants:
                families.add(m.TENANT_OLDEST_AGE, age, queue=name, tenant=tenant)
            for tenant, share in view.tenant_shares:
                families.add(m.QUEUE_TENANT_SHARE, share, queue=name, tenant=tenant)
            if accounts:
                families.add(m.QUEUE_ACTIVE_ACCOUNTS, view.active_accounts, queue=name)
                families.add(m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE, view.quiet_accounts_oldest_age, queue=name)
                for account, share in view.account_shares:
                    families.add(m.QUEUE_ACCOUNT_SHARE, share, queue=name, account=account)
                for account, tenant, share in view.account_tenants:
                    families.add(m.QUEUE_ACCOUNT_TENANT_SHARE, share, queue=name, account=account, tenant=tenant)
            for reason in dict.fromkeys((*self._hold_reasons, *view.held, *view.held_jobs)):
                families.add(m.QUEUE_HELD_TENANTS, view.held.get(reason, 0), queue=name, reason=reason)
                families.add(m.QUEUE_HELD_JOBS, view.held_jobs.get(reason, 0), queue=name, reason=reason)
        for tenant, share in snapshot.tenant_shares:
            families.add(m.TENANT_SHARE, share, tenant=tenant)
        families.add(m.WORKER_SLOTS, snapshot.worker_slots)
        families.add(m.DEAD_LETTERS, snapshot.dead_letters)
        self._add_unconfigured(families, snapshot)

    @staticmethod
    def _add_unconfigured(families: Families, snapshot: Snapshot) -> None:
        """Classes holding jobs that the config does not name: the m.MAX_UNCONFIGURED fullest."""
        fullest = sorted(snapshot.unconfigured.values(),
                         key=lambda u: (-(u.depth + u.inflight + u.delayed), u.name))[: m.MAX_UNCONFIGURED]
        for u in fullest:
            for state, count in zip(m.UNCONFIGURED_STATES, (u.depth, u.inflight, u.delayed), strict=True):
                families.add(m.UNCONFIGURED_JOBS, count, queue=u.name, state=state)
            families.add(m.UNCONFIGURED_OLDEST_AGE, u.oldest_age, queue=u.name)

    @staticmethod
    def _add_memory(families: Families, memory: MemoryInfo) -> None:
        families.add(m.REDIS_MEMORY_USED, memory.used)
        families.add(m.REDIS_MEMORY_MAX, memory.maxmemory)
        families.add(m.REDIS_MEMORY_POLICY, 1, policy=memory.policy)
        families.add(m.REDIS_EVICTED_KEYS, memory.evicted_keys)


def group_collector(config: Config, group: str) -> FairnessCollector:
    """A queue group's collector, on a client of its own fitted to the scrape budget, its series
    labelled as a shard of the logical queue ``group``."""
    return FairnessCollector(config, open_queue(config, scrape_client(config)).groups()[0], group=group)


def own_registry(collector: Collector) -> CollectorRegistry:
    """A registry of its own holding only ``collector`` (no process or GC metrics of the default
    registry, so every exporter of a queue group serves exactly the same series)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def make_registry(config: Config, scheduler: QueueGroup | SnapshotSource) -> CollectorRegistry:
    return own_registry(FairnessCollector(config, scheduler))
