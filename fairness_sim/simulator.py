"""A discrete-event simulation of a worker fleet on the reference model, in virtual time.

Why the model and not a queueing formula: the policy that decides who waits (weighted classes,
fair queuing across tenants, reservations, aging, budgets) is exactly what is being compared, and
:class:`~fairness_core.model.Model` is checked step for step against the Lua scheduler, so what the
simulation shows is what production would do with the same config. Nothing here talks to Redis
or a clock: hours of traffic run in seconds, and the same seed gives the same run.

How the fleet is modelled: every slot of a worker pool is one ``fairctl worker`` slot (pop one
job, work it for its service time, ack, pop again); pools register their slots like workers do,
so ``reserved_slots`` applies; the periodic sweeps run at the worker's own intervals (reap every
second, aging every ten); jobs longer than a third of the visibility timeout are heartbeated, as
the worker does. A pool's ``crashes`` kill slots mid-job: nobody acks their jobs, the leases
expire and the reaper redelivers them, as after a ``kill -9`` (the registration is kept). An idle
slot pops again whenever anything changes (an arrival, a completion, a sweep) and when a tenant's
dispatch rate lets it start again (as the script wakes an idle worker for that moment). Every
``scrape_interval`` the model's snapshot is taken, as the exporter would, and handed to an
optional observer (the alert evaluation turns those into Prometheus series).
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import itertools
import math
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairness_core.accounts import account_of
from fairness_core.ages import human
from fairness_core.config import Config
from fairness_core.config_store import ConfigRefused, differences
from fairness_core.jobs import BudgetRejected, Lease, TenantLimitReached
from fairness_core.merged_snapshot import merged_snapshot
from fairness_core.snapshot import Snapshot
from fairness_core.worker import PROMOTE_EVERY_S, REAP_EVERY_S

from .arrivals import Arrival, service_samplers, stream_arrivals
from .scenario import Backlog, ConfigChange, Scenario, Stream, run_name, run_parts
from .shards import QueueModel, ShardFigures, shard_figures
from .starts import StartCounter, StartFigures, dispatch_limits
from .worktime import WorkerTime, WorkerTimeResult

# Called at every scrape with each shard's snapshot (one for an unsharded queue).
Observer = Callable[[int, Sequence[Snapshot]], None]
Reconfigure = Callable[[int, Config], None]
Progress = Callable[[float], None]

SWEEP_LIMIT = 1000  # jobs per reap/aging sweep, as the worker passes them
HEARTBEAT_SHARE = 3  # the worker extends leases every visibility_timeout / 3

# Event kinds, in the order they are processed when they fall on the same millisecond.
# A config change comes before the arrivals and the scrape of its millisecond: they see the new config.
# A wake-up (a tenant's rate hold coming due) changes nothing but that idle slots pop again.
_COMPLETE, _HEARTBEAT, _CRASH, _RESTART, _APPLY, _ARRIVE, _REAP, _PROMOTE, _SCRAPE, _WAKE = range(10)


@dataclass(frozen=True)
class ClassResult:
    """One class under one policy: the JSON report's per-class figures."""

    jobs: int  # jobs that started (first lease) in the class
    # Enqueue-to-start waits of the jobs that started; None when none started (no wait to report:
    # what the class's jobs went through is then in max_oldest_age_s).
    wait_mean_s: float | None
    wait_p50_s: float | None
    wait_p99_s: float | None
    wait_max_s: float | None
    max_oldest_age_s: float  # the oldest-age gauge's maximum over the scrapes
    realised_share: float  # the class's share of all completions


@dataclass
class Timeline:
    """What each scrape saw, per class in config order, for the HTML report's plots."""

    times_s: list[float] = field(default_factory=list)
    oldest_age: dict[str, list[float]] = field(default_factory=dict)
    # The quiet parties' oldest age: tenants', or with accounts (the unit of fairness) accounts'.
    quiet_age: dict[str, list[float]] = field(default_factory=dict)
    noisy_age: dict[str, list[float]] = field(default_factory=dict)  # NaN: no noisy tenant among the oldest
    share: dict[str, list[float]] = field(default_factory=dict)  # NaN: nothing completed since the last scrape
    fairness: dict[str, list[float]] = field(default_factory=dict)  # NaN: the class served nothing in the window
    active_tenants: dict[str, list[int]] = field(default_factory=dict)  # parties: accounts, with accounts


@dataclass(frozen=True)
class AppliedChange:
    """A config change as the run took it: when, what changed (``path: old -> new`` lines, as
    ``fairctl config apply`` prints them), and why it was refused (None: applied)."""

    at_s: float
    changes: tuple[str, ...]
    refused: str | None = None

    def __str__(self) -> str:
        if self.refused is not None:
            return f"{human(self.at_s)}: {self.refused}"
        return f"{human(self.at_s)}: config applied: {'; '.join(self.changes) or 'no change'}"


@dataclass(frozen=True)
class PolicyRun:
    policy: str
    classes: dict[str, ClassResult]
    # Non-noisy parties' oldest age (tenants; with accounts in the run's config, accounts), maximum
    # over the scrapes
    quiet_max_age_s: dict[str, float]
    quiet_p95_age_s: dict[str, float]  # ... and its 95th percentile (a scrape that catches the noisy
    # tenant with fewer than exporter.noisy_min_inflight jobs in flight counts it as quiet)
    # Jain's index of the backlogged parties' (tenants', or accounts') weight-normalised service, mean over the scrapes where
    # 2+ tenants were backlogged AND the class served something in the exporter's window (None: no
    # such scrape). A scrape where tenants waited and nobody was served is starvation, not fairness
    # (the gauge reads 0 there): those are counted in fairness_unserved instead.
    fairness_index: dict[str, float | None]
    # Share of the scrapes with 2+ backlogged tenants in which the class served nothing (None: never
    # 2+ backlogged tenants).
    fairness_unserved: dict[str, float | None]
    timeline: Timeline
    jobs_started: int
    jobs_enqueued: int
    wall_s: float
    config_changes: tuple[AppliedChange, ...] = ()
    charge: str | None = None  # the charge basis the scenario ran this policy under (None: the config's)
    variant: str | None = None  # the scenario's variant this run's config is (None: it has none)
    worker_time: WorkerTimeResult | None = None  # per account when the scenario has accounts
    stream_wait_p99_s: dict[str, float | None] = field(default_factory=dict)  # per stream name, first leases
    shards: ShardFigures | None = None  # a sharded queue's figures (None: one queue group)
    accounts: AccountFigures | None = None  # per account, when the scenario has accounts
    starts: StartFigures | None = None  # starts per second of the tenants the scenario watches (None: none)
    party: str = "tenant"  # whom the quiet and fairness figures judge: "account" when the run's config has accounts

    @property
    def name(self) -> str:
        """The run's name, as ``expect`` keys it: the policy, or ``policy/charge`` (``policy/variant``)."""
        return run_name(self.policy, self.charge or self.variant)

    @property
    def title(self) -> str:
        """The run as the output heads it: ``weighted-fair``, ``weighted-fair, charge runtime`` or
        ``weighted-fair, two-level``."""
        return self.policy + (f", charge {self.charge}" if self.charge else f", {self.variant}" if self.variant else "")


@dataclass(frozen=True)
class AccountFigures:
    """Waits per account (tenant ids split by the scenario's separator, whether or not this run's
    config has accounts, so a flat run compares with a two-level one): what two-level fairness
    promises is that an account's keys do not multiply its share, so its neighbours' waits."""

    keys: dict[str, int]  # account -> tenant keys that sent it jobs
    wait_p99_s: dict[str, float | None]  # account -> p99 wait of its jobs' first leases (None: none started)
    single_key_p99_s: float | None  # the p99 wait of every one-key account's jobs together (None: none started)


def with_policy(config: Config, policy: str, charge: str | None = None) -> Config:
    """``config`` under ``policy`` (and the ``charge`` basis, when given)."""
    scheduler = dataclasses.replace(config.scheduler, policy=policy)
    if charge is not None:
        scheduler = dataclasses.replace(scheduler, charge=charge)
    return dataclasses.replace(config, scheduler=scheduler)


def scenario_config(scenario: Scenario, run: str) -> Config:
    """The scenario's scheduler config for ``run``: a policy, or ``policy/charge`` (``policy/variant``)."""
    policy, second = run_parts(run)
    if scenario.variants is not None and second is not None:
        return with_policy(scenario.variants[second], policy)
    return with_policy(scenario.config, policy, second)


def change_config(change: ConfigChange, run: str) -> Config:
    """A change's config in ``run`` (a policy, or ``policy/charge``): the policy and charge basis
    the changes set, else the run's."""
    policy, charge = run_parts(run)
    return with_policy(change.config, change.policy or policy, change.charge or charge)


def _configured(ages: Sequence[float]) -> list[float]:
    """The scrapes' ages while the class was configured (NaN: it was not)."""
    return [age for age in ages if not math.isnan(age)]


def _percentile(ordered: Sequence[Any], q: float) -> Any:
    """Nearest-rank percentile of an already sorted sequence."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class Simulation:
    """One scenario under one policy (``policy/charge`` for a charge basis of ``charges``).
    ``observe(now_ms, snapshots)`` is called at every scrape, with each shard's snapshot (one for an
    unsharded queue, as its exporters would read them); ``progress(fraction)`` as virtual time
    advances; ``reconfigure(now_ms, config)`` when a config change is applied."""

    def __init__(self, scenario: Scenario, policy: str, *, observe: Observer | None = None,
                 progress: Progress | None = None, reconfigure: Reconfigure | None = None) -> None:
        self.scenario = scenario
        self.run_name = policy
        self.policy, second = run_parts(policy)
        self.charge: str | None
        self.variant: str | None
        self.charge, self.variant = (None, second) if scenario.variants is not None else (second, None)
        self.config = scenario_config(scenario, policy)
        # The queue: one model, or with redis.shards N > 1 a model per shard (fairness_sim.shards)
        self.model = QueueModel(self.config, seed=scenario.seed)
        self.observe = observe
        self.progress = progress
        self.reconfigure = reconfigure
        self.names = tuple(scenario.class_settings())  # every class any config of the run names
        self._applied: list[AppliedChange] = []
        self.end_ms = int(scenario.duration * 1000)
        self._heap: list[tuple[int, int, int, Any]] = []
        self._order = itertools.count()
        self._arrivals = [stream_arrivals(scenario, i, scenario.duration) for i in range(len(scenario.streams))]
        self._service = service_samplers(scenario)
        self._stream_of = array("H", [0])  # job id -> stream (ids start at 1)
        self._pool_classes = [p.classes for p in scenario.workers]
        self._idle = [p.count for p in scenario.workers]
        # token -> (lease, started ms) of the jobs being worked
        self._running: list[dict[int, tuple[Lease, int]]] = [{} for _ in scenario.workers]
        self._abandoned: set[int] = set()  # tokens of jobs whose slot crashed
        self._tokens = itertools.count()
        self._heartbeat_ms = int(self.config.leases.visibility_timeout * 1000 / HEARTBEAT_SHARE)
        self._waits: dict[str, array[int]] = {n: array("q") for n in self.names}
        self._stream_waits: list[array[int]] = [array("q") for _ in scenario.streams]
        self.worker_time = WorkerTime()
        self.separator = scenario.account_separator
        self._tiers: dict[str, str] = {}  # tenant (account, with accounts) -> the tier its latest jobs came with
        self._keys: dict[str, set[str]] = {}  # account -> its tenant keys (with accounts)
        self._account_waits: dict[str, array[int]] = {}  # account -> first leases' waits (with accounts)
        self._starts = StartCounter(scenario.watched_tenants, scenario.duration)
        self._wake_ms: int | None = None  # when an idle slot is woken for a rate hold coming due
        self._completed: Counter[str] = Counter()
        self._completed_at_scrape: Counter[str] = Counter()
        self.timeline = Timeline()
        for series in (self.timeline.oldest_age, self.timeline.quiet_age, self.timeline.noisy_age,
                       self.timeline.share, self.timeline.fairness, self.timeline.active_tenants):
            for name in self.names:
                series[name] = []

    # ------------------------------------------------------------------ events

    def _push(self, at_ms: int, kind: int, arg: Any = None) -> None:
        heapq.heappush(self._heap, (at_ms, kind, next(self._order), arg))

    def _schedule_arrival(self, i: int) -> None:
        """Stream ``i``'s next arrival, if it has one before the end."""
        arrival = next(self._arrivals[i], None)
        if arrival is not None:
            self._push(round(arrival.at * 1000), _ARRIVE, arrival)

    def _arrive(self, now: int, arrival: Arrival) -> None:
        stream = self.scenario.streams[arrival.stream]
        for tenant, n in arrival.tenants:
            self._submit(now, arrival.stream, stream, tenant, n)
        self._schedule_arrival(arrival.stream)

    def _party(self, tenant: str) -> str:
        """Whom worker time is told for: the tenant's account when the scenario has accounts."""
        return account_of(tenant, self.separator)

    def _submit(self, now: int, i: int, stream: Stream, tenant: str, n: int) -> None:
        party = self._party(tenant)
        self._tiers[party] = stream.tier
        if self.separator is not None:
            self._keys.setdefault(party, set()).add(tenant)
        before = self.model.seq
        try:
            self.model.submit_many(now, stream.task, tenant, n, tier=stream.tier, user_waiting=stream.user_waiting)
        except (BudgetRejected, TenantLimitReached):
            pass  # counted by the model (jobs_rejected_total, jobs_refused_total); the jobs before it were queued
        self._stream_of.extend(array("H", [i]) * (self.model.seq - before))

    def _start(self, now: int, pool: int, entry: Any) -> None:
        job = entry.job
        i = self._stream_of[job.id]
        if self._starts:
            self._starts.start(now, entry.tenant, now - job.enqueued_ms if entry.attempts == 1 else None)
        if entry.attempts == 1:
            self._waits[entry.queue].append(now - job.enqueued_ms)
            self._stream_waits[i].append(now - job.enqueued_ms)
            if self.separator is not None:
                self._account_waits.setdefault(self._party(entry.tenant), array("q")).append(now - job.enqueued_ms)
            self._top_up(now, i, entry.tenant)
        service_ms = max(1, round(self._service[i]() * 1000))
        lease = Lease(job_id=str(job.id), queue=entry.queue, tenant=entry.tenant, reason=job.reason, task=job.task,
                      payload=None, enqueued_at=job.enqueued_ms / 1000.0, attempts=entry.attempts)
        done = now + service_ms
        token = next(self._tokens)
        self._running[pool][token] = (lease, now)
        self._push(done, _COMPLETE, (pool, token))
        if service_ms > self._heartbeat_ms:
            self._push(now + self._heartbeat_ms, _HEARTBEAT, (token, lease, done))

    def _top_up(self, now: int, i: int, tenant: str) -> None:
        """A backlog stream's tenant sends a job as one of its waiting ones starts, until the stream stops."""
        stream = self.scenario.streams[i]
        if isinstance(stream.arrivals, Backlog) and (stream.stop is None or now < stream.stop * 1000):
            self._submit(now, i, stream, tenant, 1)

    def _worked(self, now: int, lease: Lease, started: int, *, finished: bool = True) -> None:
        """Count a slot's busy time on a job, worked to the end or until the slot died."""
        self.worker_time.add(lease.queue, self._party(lease.tenant), now - started, finished=finished)
        if self._starts:
            self._starts.stop(lease.tenant)

    def _crash(self, now: int, pool: int, count: int) -> int:
        """Kill ``count`` slots of ``pool``, busy ones first (a crash takes running jobs with it;
        their leases are left to expire). Returns how many died."""
        running = self._running[pool]
        victims = sorted(running)[:count]
        for token in victims:
            self._worked(now, *running.pop(token), finished=False)
            self._abandoned.add(token)
        idle = min(self._idle[pool], count - len(victims))
        self._idle[pool] -= idle
        return len(victims) + idle

    def _dispatch(self, now: int) -> None:
        """Every idle slot pops until its pool finds nothing it may take."""
        for pool, idle in enumerate(self._idle):
            while idle:
                got = self.model.pop_entries(now, 1, classes=self._pool_classes[pool])
                if not got:
                    break
                idle -= 1
                self._start(now, pool, got[0])
            self._idle[pool] = idle
        if any(self._idle):
            self._wake_for_holds(now)

    def _wake_for_holds(self, now: int) -> None:
        """Idle slots pop again when the first rate hold comes due, as the script arms its class's
        wake key for then and an idle worker's wait ends at it: a tenant held by its dispatch rate
        starts its next job on time even when nothing else happens meanwhile."""
        due = self.model.hold_due()
        if due is None or due <= now or (self._wake_ms is not None and now < self._wake_ms <= due):
            return
        self._wake_ms = math.ceil(due)
        self._push(self._wake_ms, _WAKE)

    def _apply(self, now: int, change: ConfigChange) -> None:
        """Apply a config change as ``fairctl config apply`` does, move the removed classes' jobs,
        and follow the new config from now on (pools, heartbeats, the alert series). A refused
        change (a removed class still holding jobs, and no move) leaves the config as it was."""
        config = change_config(change, self.run_name)
        try:
            self.model.apply(now, config, moves=change.moves)
        except ConfigRefused as exc:
            self._applied.append(AppliedChange(now / 1000.0, (), str(exc)))
            return
        while self.model.move(now, SWEEP_LIMIT):
            pass
        self._applied.append(AppliedChange(now / 1000.0, tuple(differences(self.config, config))))
        self.config = config
        self._pool_classes = [change.pool_classes(classes) for classes in self._pool_classes]
        self._heartbeat_ms = int(config.leases.visibility_timeout * 1000 / HEARTBEAT_SHARE)
        if self.reconfigure is not None:
            self.reconfigure(now, config)

    def _scrape(self, now: int) -> None:
        parts = self.model.snapshots(now)
        snapshot = parts[0] if len(parts) == 1 else merged_snapshot(parts)
        tl = self.timeline
        tl.times_s.append(now / 1000.0)
        done = sum(self._completed.values()) - sum(self._completed_at_scrape.values())
        for name in self.names:
            tl.share[name].append((self._completed[name] - self._completed_at_scrape[name]) / done if done else math.nan)
            view = snapshot.classes.get(name)
            if view is None:  # not configured at this time
                for series in (tl.oldest_age, tl.quiet_age, tl.noisy_age, tl.fairness):
                    series[name].append(math.nan)
                tl.active_tenants[name].append(0)
                continue
            cls = self.model.classes.get(name)
            self.worker_time.scrape(name, {self._party(t) for t in cls.queues} if cls is not None else ())
            noisy = [age for tenant, age in view.oldest_tenants if tenant in view.noisy_tenants]
            tl.oldest_age[name].append(view.oldest_age)
            accounts = self.config.tenants.account_separator is not None  # then the figures judge accounts
            tl.quiet_age[name].append(view.quiet_accounts_oldest_age if accounts else view.quiet_oldest_age)
            tl.noisy_age[name].append(max(noisy) if noisy else math.nan)
            tl.fairness[name].append(view.fairness_index if view.processed_window > 0 else math.nan)
            tl.active_tenants[name].append(view.active_accounts if accounts else view.active_tenants)
        self._completed_at_scrape = Counter(self._completed)
        if self.observe is not None:
            self.observe(now, parts)
        if self.progress is not None:
            self.progress(now / self.end_ms)

    # ------------------------------------------------------------------ the run

    def run(self) -> PolicyRun:
        """The whole run, without the cyclic garbage collector: the run makes no cycles worth
        collecting, and with a storm's millions of queued jobs alive each collection walked them
        all (a sixth of the run's time)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> PolicyRun:
        started = time.perf_counter()
        model = self.model
        ttl = self.scenario.duration + 3600  # registrations outlive the run: nobody re-registers
        for pool in self.scenario.workers:
            model.register_worker(0, f"sim/{pool.name}", pool.count, ttl)
        for i in range(len(self.scenario.streams)):
            self._schedule_arrival(i)
        for p, pool in enumerate(self.scenario.workers):
            for crash in pool.crashes:
                self._push(int(crash.at * 1000), _CRASH, (p, crash))
        for change in self.scenario.config_changes:
            self._push(int(change.at * 1000), _APPLY, change)
        self._push(int(REAP_EVERY_S * 1000), _REAP)
        self._push(int(PROMOTE_EVERY_S * 1000), _PROMOTE)
        self._push(0, _SCRAPE)
        scrape_ms = int(self.scenario.scrape_interval * 1000)
        periods = {_REAP: int(REAP_EVERY_S * 1000), _PROMOTE: int(PROMOTE_EVERY_S * 1000), _SCRAPE: scrape_ms}
        heap, end = self._heap, self.end_ms
        pop = heapq.heappop
        while heap and heap[0][0] <= end:
            now, kind, _, arg = pop(heap)
            if kind == _COMPLETE:
                pool, token = arg
                if token in self._abandoned:
                    self._abandoned.discard(token)
                    continue  # its slot died: nobody acks, the lease expires
                lease, began = self._running[pool].pop(token)
                self._worked(now, lease, began)
                if model.ack(now, lease, runtime=(now - began) / 1000.0):
                    self._completed[lease.queue] += 1
                self._idle[pool] += 1
            elif kind == _HEARTBEAT:
                token, lease, done = arg
                if token not in self._abandoned and model.extend(now, lease) and now + self._heartbeat_ms < done:
                    self._push(now + self._heartbeat_ms, _HEARTBEAT, arg)
                continue  # nothing changed for the other slots
            elif kind == _CRASH:
                pool, crash = arg
                died = self._crash(now, pool, crash.count)
                if crash.restart_after is not None and died:
                    self._push(now + int(crash.restart_after * 1000), _RESTART, (pool, died))
            elif kind == _RESTART:
                pool, slots = arg
                self._idle[pool] += slots
            elif kind == _APPLY:
                self._apply(now, arg)
            elif kind == _ARRIVE:
                self._arrive(now, arg)
            elif kind == _REAP:
                model.reap(now, SWEEP_LIMIT)
            elif kind == _PROMOTE:
                model.promote_overdue(now, SWEEP_LIMIT)
            elif kind == _WAKE:
                if now == self._wake_ms:
                    self._wake_ms = None
            else:
                self._scrape(now)
            if kind in periods:
                self._push(now + periods[kind], kind)
            self._dispatch(now)
        return self._result(time.perf_counter() - started)

    def _result(self, wall_s: float) -> PolicyRun:
        total = sum(self._completed.values())
        tl = self.timeline
        classes: dict[str, ClassResult] = {}
        for name in self.names:
            waits = sorted(self._waits[name])
            classes[name] = ClassResult(
                jobs=len(waits),
                wait_mean_s=sum(waits) / len(waits) / 1000.0 if waits else None,
                wait_p50_s=_percentile(waits, 0.50) / 1000.0 if waits else None,
                wait_p99_s=_percentile(waits, 0.99) / 1000.0 if waits else None,
                wait_max_s=waits[-1] / 1000.0 if waits else None,
                max_oldest_age_s=max(_configured(tl.oldest_age[name]), default=0.0),
                realised_share=self._completed[name] / total if total else 0.0,
            )
        fairness: dict[str, float | None] = {}
        unserved: dict[str, float | None] = {}
        for name in self.names:
            backlogged = [f for f, n in zip(tl.fairness[name], tl.active_tenants[name]) if n >= 2]
            served = [f for f in backlogged if not math.isnan(f)]
            fairness[name] = sum(served) / len(served) if served else None
            unserved[name] = 1 - len(served) / len(backlogged) if backlogged else None
        quiet = {name: sorted(_configured(tl.quiet_age[name])) for name in self.names}
        stream_waits: dict[str, list[int]] = {}
        for stream, waits_ms in zip(self.scenario.streams, self._stream_waits):
            stream_waits.setdefault(stream.name, []).extend(waits_ms)
        tiers = self.config.tenants.tiers
        weights = {tenant: tiers.get(tier, tiers[self.config.tenants.default_tier]) for tenant, tier in self._tiers.items()}
        return PolicyRun(
            policy=self.policy, charge=self.charge, variant=self.variant, classes=classes,
            quiet_max_age_s={name: ages[-1] if ages else 0.0 for name, ages in quiet.items()},
            quiet_p95_age_s={name: _percentile(ages, 0.95) if ages else 0.0 for name, ages in quiet.items()},
            fairness_index=fairness, fairness_unserved=unserved, timeline=tl,
            jobs_started=sum(len(w) for w in self._waits.values()), jobs_enqueued=self.model.seq, wall_s=wall_s,
            config_changes=tuple(self._applied), worker_time=self.worker_time.result(weights),
            stream_wait_p99_s={name: _percentile(sorted(w), 0.99) / 1000.0 if w else None
                               for name, w in stream_waits.items()},
            shards=shard_figures(self.model),
            party="account" if self.config.tenants.account_separator is not None else "tenant",
            accounts=self._account_figures() if self.separator is not None else None,
            starts=self._start_figures() if self._starts else None,
        )

    def _start_figures(self) -> StartFigures:
        default = self.config.tenants.default_tier
        return self._starts.result({t: dispatch_limits(self.config, t, self._tiers.get(self._party(t), default))
                                    for t in self.scenario.watched_tenants})

    def _account_figures(self) -> AccountFigures:
        single = sorted(w for account, keys in self._keys.items() if len(keys) == 1
                        for w in self._account_waits.get(account, ()))
        return AccountFigures(
            keys={account: len(keys) for account, keys in self._keys.items()},
            wait_p99_s={account: _percentile(sorted(w), 0.99) / 1000.0 if w else None
                        for account, w in ((a, self._account_waits.get(a, ())) for a in self._keys)},
            single_key_p99_s=_percentile(single, 0.99) / 1000.0 if single else None)


def simulate(scenario: Scenario, policy: str, *, observe: Observer | None = None,
             progress: Progress | None = None, reconfigure: Reconfigure | None = None) -> PolicyRun:
    """Run ``scenario`` under ``policy`` (see :class:`Simulation`)."""
    return Simulation(scenario, policy, observe=observe, progress=progress, reconfigure=reconfigure).run()
