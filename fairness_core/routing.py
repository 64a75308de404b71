"""Where a queue's jobs go and which of its groups a pop reads: the rules that make N queue groups
(shards) one queue, with no Redis in them, so that the Redis queue (:class:`fairness_core.queue.Queue`)
and the simulator's sharded model (:mod:`fairness_sim.shards`) run the same code.

- **Hands.** A tenant's jobs go to the shards of its hand (:func:`fairness_core.sharding.hand`),
  its account's when accounts are on, so that every key of an account shares one hand.
- **Enqueue** (:func:`choose_shard`): of the hand, the shard where the tenant already has jobs of
  that class queued (its jobs stay together and in order), else the one whose class is least
  backlogged, which is how shuffle sharding keeps a tenant off the shard a flood fills. A keyed
  job goes to the shard of its key (:func:`fairness_core.sharding.key_shard`).
- **Pop** (:meth:`Router.choices`): the class first, for the whole fleet: each process runs the
  class weights over the classes with work on any shard (the least served against its weight goes
  next), so the shares hold fleet-wide and not per shard. Then a shard with work in that class, in
  proportion to the tier weights of the tenants queued there (smooth weighted round-robin), so each
  queued tenant of the fleet gets about its tier's share whichever shard it is on. The shard's own
  script then picks the tenant (weighted fair queuing) and leases the job.

A queue of one group (``redis.shards`` 1) has a hand of one and its group's script chooses the
class itself: :attr:`Router.single` says so, and nothing is read to route its jobs.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .accounts import account_of
from .config import Config
from .jobs import SEP
from .settings import Settings
from .sharding import hand, key_shard


@dataclass(frozen=True)
class ShardLoad:
    """One shard's queued jobs per class, its queued tenants' tier weights summed per class (each
    tenant counts its ``tenants.tiers`` weight: one tenant of weight 6 is served like six of
    weight 1), its paused classes, and whether it holds any job, queued, leased or waiting to retry
    (one that holds none has nothing to sweep, and no job that can come due)."""

    depth: dict[str, int]
    tenant_weight: dict[str, float]
    paused: frozenset[str]
    holds: bool = False

    def has_work(self, queue: str) -> bool:
        return self.depth.get(queue, 0) > 0 and queue not in self.paused

    def ran_dry(self, queue: str | None) -> None:
        """A pop of ``queue`` (None: any class) found nothing: until the view is read again, the
        shard has none, so no pop asks again and a class that ran dry is out of the rotation
        (back in, it starts level instead of owed for the pops it could not have)."""
        for name in self.depth if queue is None else [queue]:
            self.depth[name] = 0


def tier_counters(classes: Sequence[str], settings: Settings) -> list[tuple[str, str, str]]:
    """(stats field, class, tier) of the counters of each class's queued tenants by tier, for the
    tiers the applied config charges (its own, and those it moved)."""
    tiers = sorted({*settings.costs, *settings.tier_moved})
    return [(f"tenants{SEP}{c}{SEP}{tier}", c, tier) for c in classes for tier in tiers]


def tenant_weights(counts: Mapping[str, Any], classes: Sequence[str], settings: Settings) -> dict[str, float]:
    """Per class, the tier weights of its queued tenants summed, from a shard's stats ``counts``."""
    out = dict.fromkeys(classes, 0.0)
    for field, c, tier in tier_counters(classes, settings):
        out[c] += int(counts.get(field) or 0) * settings.tier_weight(tier)
    return out


def choose_shard(dealt: Sequence[int], holds: Sequence[bool], depths: Sequence[int]) -> int:
    """Of a tenant's hand ``dealt``, where its job goes: the first shard where the tenant ``holds``
    jobs of the class queued, else the one whose class has the fewest queued jobs (``depths``),
    the first in the hand on a tie."""
    held = [shard for shard, has in zip(dealt, holds) if has]
    if held:
        return held[0]
    return dealt[min(range(len(dealt)), key=lambda n: (depths[n], n))]


def pinned(settings: Settings, tenant: str) -> bool:
    """Whether a dispatch limit may hold ``tenant`` (a cap or a rate of its own, its tier's, the
    group's or its account's): then all its jobs go to the first shard of its hand, whose script
    holds its leases and its rate's bucket, so that a cap of 3 is 3 across the fleet. A limited
    tenant runs no faster than its limit, which one shard serves with room to spare."""
    return bool(settings.account_cap or settings.account_pace_us or any(settings.cap.values())
                or any(settings.pace_us.values()) or settings.tenant_cap.get(tenant)
                or settings.tenant_pace_us.get(tenant))


def party(config: Config, tenant: str) -> str:
    """Who a tenant's jobs are routed as: its account when accounts are on, else itself."""
    return account_of(tenant, config.tenants.account_separator)


class Router:
    """The routing of one queue of ``config`` (its file config: ``redis.shard_hand``, accounts)
    over ``shards`` shards, and one process's account of the pops it chose (the class weights'
    account and the shard rotations), shared by a worker's slots."""

    def __init__(self, config: Config, *, seed: int | None = None) -> None:
        self.config = config
        self.single = config.redis.shards == 1
        self._served: dict[str, float] = {}  # jobs this process leased per class (the class weights' account)
        self._eligible: set[str] = set()
        self._random = random.Random(seed)  # where each shard joins this process's rotations
        self._credit: dict[str | None, dict[int, float]] = {}  # the rotations, per class (None: any class)
        self._account = threading.Lock()

    def hand(self, tenant: str, shards: int, applied: Settings | None = None) -> tuple[int, ...]:
        """The shards of ``shards`` a job of ``tenant`` may go to, best first: its account's hand
        (every key of an account shares one), else its own; only its first when the ``applied``
        settings limit what it runs (:func:`pinned`)."""
        if shards == 1:
            return (0,)
        dealt = hand(party(self.config, tenant), shards, min(self.config.redis.shard_hand, shards))
        return dealt[:1] if applied is not None and pinned(applied, tenant) else dealt

    def key_shard(self, tenant: str, key: str, shards: int, applied: Settings | None = None) -> int:
        """The shard a keyed job of ``tenant`` goes to: one of its hand's, by the key's hash alone
        (not by load), so that every retry of the key reaches the shard that holds its record."""
        return key_shard(self.hand(tenant, shards, applied), key)

    def choices(self, loads: Sequence[ShardLoad], applied: Config, moved: Mapping[str, str],
                classes: Sequence[str] | None, *, prefer: int | None = None) -> list[tuple[int, str | None]]:
        """(shard, class) pops to try in turn, over the shards' ``loads`` under the ``applied``
        config (which ``moved`` classes): the chosen class on the shards with its work, in
        proportion to their queued tenants; then (under fifo, or in case the view was stale) the
        shards with any work, in proportion to their queued jobs, with the worker's ``classes``
        (None: as the shard's own policy chooses). Proportional, not busiest first: the busiest
        shard first would serve a flood's shard alone while every other shard waited. ``prefer``
        goes first when the rotation owes it a pop."""
        busy = {i: sum(load.depth.values()) for i, load in enumerate(loads)}
        with self._account:
            queue = self._next_class(loads, applied, moved, classes)
            first = [] if queue is None else self._rotated(
                queue, {i: load.tenant_weight.get(queue, 0) for i, load in enumerate(loads) if load.has_work(queue)},
                prefer)
            rest = self._rotated(None, {i: depth for i, depth in busy.items() if depth > 0}, prefer)
        out = [(index, queue) for index in first]
        tried = set(first)
        only = None if classes is None else list(classes)
        for index in rest:
            for allowed in ([None] if only is None else only):
                if allowed != queue or index not in tried:
                    out.append((index, allowed))
        return out

    def _rotated(self, key: str | None, weights: Mapping[int, float], prefer: int | None) -> list[int]:
        """The shards with work, the next to pop from first, by smooth weighted round-robin over
        ``weights`` (at least 1 each: a shard with jobs of a class counts one tenant there even if
        the view caught none), one rotation per class (``key``): over any run of pops each shard's
        part is its weight's part to within one pop, with no sampling noise. ``prefer`` goes first
        while the rotation owes it (its credit is not negative): it then gets no more than its
        part, only sooner. A shard joining the rotation starts at a random point of it, so a
        fleet's workers do not all pop the same shard at once."""
        credit = self._credit.setdefault(key, {})
        for index in [i for i in credit if i not in weights]:
            del credit[index]  # idle now: it comes back owed nothing
        total = sum(max(1.0, w) for w in weights.values())
        for index, weight in weights.items():
            credit[index] = credit.get(index, self._random.random() * total) + max(1.0, weight)
        order = sorted(weights, key=lambda i: (i != prefer or credit[i] < 0, -credit[i]))
        if order:
            credit[order[0]] -= total
        return order

    def _next_class(self, loads: Sequence[ShardLoad], applied: Config, moved: Mapping[str, str],
                    classes: Sequence[str] | None) -> str | None:
        """The class the next pop takes, fleet-wide: under the weighted policies the class with
        work furthest behind its weight in this process's account (a class coming back from idle
        starts level with the others, owed nothing for its idle time); under strict, the first
        class with work; under fifo none (each shard's own oldest job)."""
        names = classes_of(applied, moved, classes)
        eligible = [c for c in names if any(load.has_work(c) for load in loads)]
        policy = applied.scheduler.policy
        if not eligible or policy == "fifo":
            return None
        if policy == "strict":
            return eligible[0]
        weight = {c.name: c.weight for c in applied.classes}
        level = min((self._served.get(c, 0.0) / weight[c] for c in eligible if c in self._eligible), default=0.0)
        for c in eligible:
            if c not in self._eligible:
                self._served[c] = max(self._served.get(c, 0.0), level * weight[c])
        self._eligible = set(eligible)
        return min(eligible, key=lambda c: (self._served.get(c, 0.0) + 1) / weight[c])

    def count_served(self, queues: Sequence[str]) -> None:
        """Jobs of ``queues`` (one entry a job) were leased by this process's pops."""
        with self._account:
            for queue in queues:
                self._served[queue] = self._served.get(queue, 0.0) + 1


def classes_of(applied: Config, moved: Mapping[str, str], classes: Sequence[str] | None) -> list[str]:
    """The classes whose jobs ``classes`` (all when None) stand for under the ``applied`` config: a
    class it ``moved`` stands for the class its jobs went to."""
    return list(applied.class_names) if classes is None else [*dict.fromkeys(moved.get(c, c) for c in classes)]


def any_work(loads: Sequence[ShardLoad], names: Sequence[str]) -> bool:
    """Whether any shard has work (queued and not paused) in any of the classes ``names``."""
    return any(load.has_work(c) for load in loads for c in names)
