"""The simulator's queue: one reference model, or N shards, each the reference model, as one.

Why a module of its own: with ``redis.shards`` N > 1 a queue is N queue groups that the routing
(:mod:`fairness_core.routing`) makes one queue (enqueue to a shard of the tenant's hand, pop choosing
the class fleet-wide, then a shard). The question a simulation of it answers is whether those rules
keep what one group keeps: each class's share against its weight, fleet-wide, and each tenant's
fair service even beside a flooder on the same shard. So each shard here is the simulator's own
per-group model (:class:`~fairness_core.model.Model`, checked against the Lua), and the hands, the
shard an enqueue goes to and the pops' class and shard choices are the routing module's own
:class:`~fairness_core.routing.Router`, run over the models' backlogs instead of Redis reads, as
:class:`fairness_core.queue.Queue` runs it over Redis: nothing about the sharded queue is written
twice.

:class:`QueueModel` has the model's operations the simulator uses, and is what a
:class:`~fairness_sim.simulator.Simulation` runs on for any config (a queue of one group passes
each call to its one model, as the Redis queue passes it to its one group); :func:`predict` drains a
static backlog through it (what a live measurement of a sharded queue is compared against).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairness_core.classification import classify
from fairness_core.admission import NOWHERE, counts_limits
from fairness_core.config import Config
from fairness_core.config_store import NO_MOVES, Moves
from fairness_core.jobs import SEP, Lease, Record, check_tier
from fairness_core.merged_snapshot import merged_snapshot
from fairness_core.model import Model
from fairness_core.queue import group_configs
from fairness_core.routing import Router, ShardLoad, choose_shard, party, tenant_weights
from fairness_core.sharding import hand
from fairness_core.snapshot import Snapshot

from .scenario import class_job, sharded_config


@dataclass(frozen=True)
class Waiting:
    """A class's queued tenants over every shard (what the simulator reads of ``Model.classes``)."""

    queues: dict[str, Any]


class QueueModel:
    """The simulator's queue, as :class:`fairness_core.queue.Queue` is the Redis one: one model (a
    queue of one group, each call its model's own), or N shards' models as one queue, with the
    operations of :class:`Model` the simulator uses. Job ids are one sequence over the shards (each
    job's shard is remembered by id); a tenant's jobs go to a shard of its hand by the enqueue rule;
    each pop is the routing's choice."""

    def __init__(self, config: Config, *, seed: int = 0) -> None:
        self.shards = config.redis.shards
        self.hand_size = min(config.redis.shard_hand, self.shards)
        self.router = Router(config, seed=seed)
        self.models = [Model(group) for group in group_configs(config)]
        self._one = self.models[0] if self.router.single else None
        self._seq = 0
        self._shard_of = array("H", [0])  # job id -> shard (ids start at 1)
        self.enqueued: Counter[tuple[str, str]] = Counter()  # (class, tenant) -> jobs queued
        self.served: Counter[tuple[str, str]] = Counter()  # (class, tenant) -> jobs acked
        # class -> parties waiting, summed over the scrapes' shards where any waited, and those shards
        self.waiting: Counter[str] = Counter()
        self.waiting_shards: Counter[str] = Counter()

    def shard_for(self, queue: str, tenant: str) -> int:
        """The routing's rule (:func:`fairness_core.routing.choose_shard`) over the models: of the
        tenant's hand (its account's), the shard holding its (account's) queued jobs of the class,
        else the one whose class is least backlogged (first in the hand on ties)."""
        dealt = self.router.hand(tenant, self.shards, self.models[0].settings)
        routed_as = party(self.models[0].config, tenant)
        held = [queue in self.models[i].classes and self.models[i].classes[queue].tags.score(routed_as) is not None
                for i in dealt]
        return choose_shard(dealt, held, [self.models[i].stats.get(f"depth{SEP}{queue}", 0) for i in dealt])

    @property
    def seq(self) -> int:
        """The last job id given out."""
        return self._seq if self._one is None else self._one.seq

    @property
    def sharded(self) -> bool:
        return self._one is None

    def submit_many(self, now: int, task: str, tenant: str, count: int, payload: Any = None, *,
                    tier: str | None = None, user_waiting: bool = False) -> list[tuple[str, str, int]]:
        if self._one is not None:
            return self._one.submit_many(now, task, tenant, count, payload, tier=tier, user_waiting=user_waiting)
        config = self.models[0].config
        queue = classify(config, task, tier=check_tier(tier, config), user_waiting=user_waiting).queue
        index = self.shard_for(queue, tenant)
        model = self.models[index]
        model.seq = self._seq
        elsewhere = NOWHERE
        if counts_limits(model.settings):  # the tenant's limits are the queue's: its jobs on the hand's other shards count
            for other in self.router.hand(tenant, self.shards, self.models[0].settings):
                if other != index:
                    elsewhere = elsewhere + self.models[other].admission_counts(now, tenant)
        runs: list[tuple[str, str, int]] = []
        try:
            runs = model.submit_many(now, task, tenant, count, payload, tier=tier, user_waiting=user_waiting,
                                     elsewhere=elsewhere)
            return runs
        finally:  # the jobs before a refusal were queued too (in the class asked for, as counted here)
            added = model.seq - self._seq
            self._seq = model.seq
            self._shard_of.extend(array("H", [index]) * added)
            for ran, _, n in runs or [(queue, "", added)]:
                self.enqueued[ran, tenant] += n

    def pop_entries(self, now: int, max_jobs: int = 1, *, classes: Sequence[str] | None = None) -> list[Record]:
        """Up to ``max_jobs`` jobs of one class from one shard, chosen by the routing as the Redis
        queue chooses (its view read from the models, fresh at every pop). A queue of one group
        pops as its model chooses."""
        if self._one is not None:
            return self._one.pop_entries(now, max_jobs, classes=classes)
        first = self.models[0]
        for index, queue in self.router.choices(self._loads(), first.config, first.moves.classes, classes):
            got = self.models[index].pop_entries(now, max_jobs, classes=classes if queue is None else [queue])
            if got:
                self.router.count_served([record.queue for record in got])
                return got
        return []

    def _loads(self) -> list[ShardLoad]:
        return [ShardLoad(depth={c: m.stats.get(f"depth{SEP}{c}", 0) for c in m.names},
                          tenant_weight=tenant_weights(m.stats, m.names, m.settings),
                          paused=frozenset(m.paused)) for m in self.models]

    def _model(self, lease: Lease) -> Model:
        return self._one or self.models[self._shard_of[int(lease.job_id)]]

    def ack(self, now: int, lease: Lease, *, runtime: float | None = None) -> bool:
        done = self._model(lease).ack(now, lease, runtime=runtime)
        if done and self._one is None:
            self.served[lease.queue, lease.tenant] += 1
        return done

    def extend(self, now: int, lease: Lease) -> bool:
        return self._model(lease).extend(now, lease)

    def reap(self, now: int, limit: int = 1000) -> int:
        return sum(m.reap(now, limit) for m in self.models)

    def promote_overdue(self, now: int, limit: int = 1000) -> int:
        return sum(m.promote_overdue(now, limit) for m in self.models)

    def move(self, now: int, limit: int = 1000) -> int:
        return sum(m.move(now, limit) for m in self.models)

    def register_worker(self, now: int, worker_id: str, slots: int, ttl: float) -> None:
        """On every shard, as a worker of a sharded group registers."""
        for m in self.models:
            m.register_worker(now, worker_id, slots, ttl)

    def apply(self, now: int, config: Config, *, moves: Moves | Mapping[str, str] = NO_MOVES) -> None:
        for m, group in zip(self.models, group_configs(config)):
            m.apply(now, group, moves=moves)

    @property
    def classes(self) -> Mapping[str, Any]:
        """Each class's queued tenants, over every shard."""
        if self._one is not None:
            return self._one.classes
        out: dict[str, Waiting] = {}
        for m in self.models:
            for name, cls in m.classes.items():
                out.setdefault(name, Waiting({})).queues.update(cls.queues)
        return out

    def hold_due(self) -> float | None:
        """When the first rate hold of any shard comes due (ms; None: no tenant is held by a rate)."""
        dues = [first[1] for m in self.models if (first := m.held.first()) is not None and first[1] < math.inf]
        return min(dues, default=None)

    def snapshots(self, now: int) -> list[Snapshot]:
        """Each shard's snapshot, shard 0 first: what each shard's exporter would read. Each
        call is a scrape: the parties waiting on each shard are counted (:attr:`ShardFigures.waiting`)."""
        out = [m.snapshot(now) for m in self.models]
        for snapshot in out:
            for name, view in snapshot.classes.items():
                if waiting := view.active_accounts or view.active_tenants:
                    self.waiting[name] += waiting
                    self.waiting_shards[name] += 1
        return out

    def snapshot(self, now: int) -> Snapshot:
        """The queue's snapshot: its model's, or the shards' merged."""
        return self._one.snapshot(now) if self._one is not None else merged_snapshot(self.snapshots(now))


# ------------------------------------------------------------------ figures


@dataclass(frozen=True)
class FloodCost:
    """The flooder's (the heaviest tenant's) cost to the tenants that share a shard with it: their
    mean service per tenant in its class against the other tenants' of the class."""

    tenant: str
    queue: str
    mates: int  # tenants of the class whose hands share a shard with the flooder's
    others: int
    mates_served: float  # jobs served per tenant
    others_served: float

    @property
    def percent(self) -> float | None:
        """The mates' service per tenant as a percentage of the others' (None: nothing to compare)."""
        if not self.mates or not self.others or self.others_served <= 0:
            return None
        return 100.0 * self.mates_served / self.others_served


@dataclass(frozen=True)
class ShardFigures:
    """A sharded run's own figures: the layout, and what each (class, tenant) queued and was served."""

    shards: int
    hand: int
    enqueued: Mapping[tuple[str, str], int]
    served: Mapping[tuple[str, str], int]
    # class -> parties waiting on a shard, mean over the scrapes' shards where any waited: few to a
    # shard leave a policy little to order, and each shard's fairness index is over them alone
    waiting: Mapping[str, float] = field(default_factory=dict)

    def flood_cost(self) -> FloodCost | None:
        """The heaviest tenant's (most jobs queued) flood cost in its heaviest class (None: no jobs)."""
        if not self.enqueued:
            return None
        (queue, flooder), _ = max(self.enqueued.items(), key=lambda kv: (kv[1], kv[0]))
        flooded = set(hand(flooder, self.shards, self.hand))
        tenants = sorted({t for (q, t) in self.enqueued if q == queue and t != flooder})
        mates = [t for t in tenants if flooded.intersection(hand(t, self.shards, self.hand))]
        others = [t for t in tenants if t not in set(mates)]

        def mean(group: Sequence[str]) -> float:
            return sum(self.served.get((queue, t), 0) for t in group) / len(group) if group else math.nan

        return FloodCost(flooder, queue, len(mates), len(others), mean(mates), mean(others))

    def figures(self) -> dict[str, Any]:
        """For ``--json``."""
        cost = self.flood_cost()
        return {"shards": self.shards, "hand": self.hand, "waiting_per_shard": dict(self.waiting),
                "flood_cost": None if cost is None else {
                    "tenant": cost.tenant, "class": cost.queue, "mates": cost.mates, "others": cost.others,
                    "mates_served_per_tenant": cost.mates_served, "others_served_per_tenant": cost.others_served,
                    "percent": cost.percent}}


def shard_figures(model: QueueModel) -> ShardFigures | None:
    """A sharded run's own figures; None for a queue of one group."""
    if not model.sharded:
        return None
    waiting = {name: n / model.waiting_shards[name] for name, n in model.waiting.items()}
    return ShardFigures(model.shards, model.hand_size, dict(model.enqueued), dict(model.served), waiting)


# ------------------------------------------------------------------ a static backlog drained


@dataclass(frozen=True)
class Prediction:
    """Jobs served per class and per (class, tenant) by a number of pops."""

    classes: dict[str, int]
    tenants: dict[tuple[str, str], int]
    figures: ShardFigures | None  # None for a queue of one group

    def shares(self) -> dict[str, float]:
        total = sum(self.classes.values())
        return {c: n / total if total else 0.0 for c, n in self.classes.items()}


def predict(backlogs: Sequence[tuple[str, str, int]], shards: int, hand_size: int, config: Config, pops: int,
            *, seed: int = 0) -> Prediction:
    """Queue each (class, tenant, count) backlog in order on ``shards`` shards with hands of
    ``hand_size`` under ``config``'s policy, then pop (and at once ack) ``pops`` jobs one at a time,
    a millisecond apart: the jobs served per class and per tenant, as a live sharded queue drained
    by one worker slot would serve them."""
    model = QueueModel(sharded_config(config, shards, hand_size), seed=seed)
    for queue, tenant, count in backlogs:
        job = class_job(model.models[0].config, queue)
        if job is None:
            raise ValueError(f"backlogs: no classification rule sends jobs to {queue}")
        task, tier, user_waiting = job
        model.submit_many(0, task, tenant, count, tier=tier, user_waiting=user_waiting)
    names = model.models[0].settings.names
    for now in range(1, pops + 1):
        got = model.pop_entries(now)
        if not got:
            break
        model.ack(now, got[0].lease(names))
    served: Counter[str] = Counter()
    for (queue, _), n in model.served.items():
        served[queue] += n
    return Prediction({c: served[c] for c in config.class_names}, dict(model.served), shard_figures(model))
