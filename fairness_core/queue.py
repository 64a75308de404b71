"""The queue: one class for producers, workers, the CLI, the exporter and the simulator, over N >= 1
queue groups. A queue of one group (``redis.shards`` 1, the default) is that group under its plain
``redis.prefix``; a sharded one (``redis.shards`` N > 1) is N groups, its shards, ``P.0`` .. ``P.N-1``,
each its own hash tag, so that a Redis Cluster spreads them over its masters while every script
still runs on one shard. Either way, code written against :class:`Queue` keeps working when the
queue is sharded.

Each group is driven by a :class:`~fairness_core.scheduler.Scheduler` (one group's Lua, its
connections, its applied config); what makes N groups one queue is the routing
(:mod:`fairness_core.routing`: hands, where a job goes, which group a pop reads), the layout
(:mod:`fairness_core.layout`: how many shards, their names, the claim applies take turns under) and
this class:

- **Enqueue** goes to one shard of the tenant's hand, by the routing's rule; the tenant's
  admission limits (``max_queued``, ``max_rate`` and their account forms) are the logical queue's:
  the shard's script counts the tenant's jobs on the other shards of its hand too, read in the same
  round trip that chooses the shard (:meth:`Queue._limit_reads`).
- **Pop** chooses the class fleet-wide, then a shard (:meth:`fairness_core.routing.Router.choices`),
  from a view of every shard's queued jobs and tenants per class and tier, at most
  :data:`VIEW_TTL_S` old: a command per shard, and one more per shard with jobs queued, pipelined
  across the masters. A queue of one group reads no view: its script chooses the class.
- **Ack, nack, extend** go to the group the lease names: a sharded job id is ``shard:id``; a job
  id of a queue of one group is its group's own.
- **Re-sharding** (:meth:`Queue.reshard`) changes where new jobs go; the jobs already queued stay
  where they are and are served there, since workers serve every shard that may hold jobs (the
  layout's ``serve``), so nothing is moved, lost or run twice.
- **Idle**, a process reads no shard: an idle fleet costs Redis about what an unsharded one does,
  at any number of shards. The shards' wake keys sit in as many hash slots, which no one blocking
  command can wait on, so every enqueue also arms the queue's own wake key of its class, under the
  queue's tag (:meth:`Queue.wake`), which idle workers block on; while jobs are leased or wait to
  retry, only their shards are read, and every shard every :data:`LOOK_S`, which bounds what a
  wake-up lost with its producer costs. The sweeps (reaps, aging, moves, state checks and worker
  registrations) go to the shards holding jobs and shard 0 only: an idle shard has nothing to
  sweep, and a worker registers on a shard again before its first pop there.
- **Dead letters, snapshots and applies** are the queue's: the dead letters of every group under
  the queue's job ids, the groups' snapshots merged (:func:`~fairness_core.merged_snapshot.merged_snapshot`),
  and a config applied to every group under one claim.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from .classification import classify
from .config import MAX_SHARDS, Config
from .config_store import NO_MOVES, Applied, ConfigConflict, ConfigRefused, Moves
from .connection import ClusterClient, redis_client, redis_errors, server_of
from .jobs import (
    SEP,
    DeadOutcome,
    Enqueued,
    FairnessError,
    Finished,
    InvalidJob,
    Lease,
    Popped,
    RedisUnavailable,
    ReplyLost,
    check_job_id,
    check_key,
    check_tenant,
    check_tier,
    decoded,
    settled,
)
from .keys import CLASS_PARTS, WAKE_MEMBER, Keys
from .layout import (
    CLAIM_TTL_MS, ApplyLost, GroupConfig, Layout, LayoutStore, PartlyApplied, fixed_layout,
    group_fingerprint,
)
from .merged_snapshot import merged_snapshot, summed_counts
from .admission import NOWHERE, Elsewhere, LimitReads, counts_limits, summed
from .routing import Router, ShardLoad, any_work, choose_shard, classes_of, party, tenant_weights, tier_counters
from .scheduler import DEAD_PAGE, SWEEP_LIMIT, ApplyOutcome, Scheduler, check_pop
from .shard_health import RETRY_S, ShardHealth
from .sharding import shard_prefix
from .snapshot import Snapshot

VIEW_TTL_S = 0.1  # how old a view of the shards' backlogs a pop may choose from
IDLE_POLL_S = 0.1  # a waiting worker reads the shards holding leased or retrying jobs this often
LOOK_S = 10.0  # a process that saw no job reads every shard this often (a wake-up lost costs at most this)
JOB_SEP = ":"  # a sharded job id: shard, JOB_SEP, the shard's own id
T = TypeVar("T")


@runtime_checkable
class QueueGroup(Protocol):
    """What an observer (``fairctl status``, ``config show``, the exporter) reads of one group of a
    queue: a shard of a sharded queue, or a queue's one group."""

    resets: int  # times this process found the group's state reset under it

    @property
    def keys(self) -> Keys: ...

    @property
    def config(self) -> Config: ...

    @property
    def client(self) -> Any: ...

    @property
    def file_config(self) -> Config: ...

    @property
    def applied(self) -> Applied | None: ...

    def sync(self) -> Applied: ...

    def read_applied(self) -> Applied | None: ...

    def snapshot(self) -> Snapshot: ...

    def dead_letter_counts(self) -> dict[str, int]: ...

    def check_state(self) -> bool: ...


@dataclass(frozen=True)
class QueueApply:
    """What :meth:`Queue.apply` did: the queue's config now, and each group's apply by the group's
    name, shard 0 first."""

    group: GroupConfig
    shards: Mapping[str, ApplyOutcome]


class NotSharded(FairnessError):
    """A re-shard or settle of a queue of one group (``redis.shards`` 1)."""


def shard_config(config: Config, shard: int, prefix: str | None = None) -> Config:
    """The config shard ``shard`` runs: the group's, under the shard's name (``prefix``, default
    ``P.shard``), itself unsharded (so each shard's applied config is an ordinary group's,
    fingerprint and all)."""
    name = prefix or shard_prefix(config.redis.prefix, shard)
    return replace(config, redis=replace(config.redis, prefix=name, shards=1, shard_hand=1))


def group_configs(config: Config) -> list[Config]:
    """The configs of the groups of ``config``'s queue as first laid out: itself, or each shard's
    under its plain name (a Cluster's placement may salt the names; the layout holds them)."""
    return [config] if config.redis.shards == 1 else [shard_config(config, i) for i in range(config.redis.shards)]


def split_job_id(job_id: str) -> tuple[int, str]:
    """A sharded job id's shard and the shard's own id; InvalidJob naming ``job id`` otherwise."""
    shard, sep, own = str(job_id).partition(JOB_SEP)
    if not sep or not shard.isdigit() or not own.isdigit():
        raise InvalidJob("job id", f"expected a sharded job id such as 3{JOB_SEP}42 (shard, then id), got {job_id!r}")
    return int(shard), own


class Queue:
    """One queue over its groups: the interface producers, workers and every tool use."""

    def __init__(self, config: Config, client: Any, *, seed: int | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        """``seed``: where this process's shard rotations start; ``clock`` (milliseconds) stands in
        for Redis ``TIME`` in every group, for tests that compare against the reference model."""
        if config.redis.shards < 1:
            raise ValueError(f"redis.shards: expected at least 1, got {config.redis.shards}")
        self.file_config = config
        self.client = client
        self.keys = Keys(config.redis.prefix)
        self.router = Router(config, seed=seed)
        self.sharded = not self.router.single  # a layout of shards, re-shardable, with sharded job ids
        self._clock = clock
        self._store = LayoutStore(config, client) if self.sharded else None
        self._schedulers: dict[str, Scheduler] = {}  # by group name
        self._lock = threading.Lock()
        self._one = None if self.sharded else self._scheduler(0, config.redis.prefix)
        self._view: tuple[float, list[ShardLoad]] | None = None
        self._looked = -math.inf  # when (monotonic) the view last read every shard
        self._stirred = False  # woken since: the next view reads every shard
        self._woke_next = -math.inf  # when a pop of this process last armed the queue's wake keys
        self._wake_down_until = -math.inf  # the queue's wake keys did not answer: left alone until then
        self._registration: tuple[str, int, float] | None = None  # this worker's: id, slots, ttl
        self._registered_at: dict[int, float] = {}  # when it last registered on each shard (monotonic)
        self.health = ShardHealth(self.shard)  # the shards that do not answer, left out for a while
        self._lost_pops: set[int] = set()  # shards where a pop's reply was lost, until a reclaim reaches them

    @property
    def config(self) -> Config:
        """The config this queue runs: its group's applied config (the file's until the first call
        syncs it); a sharded queue's file config (each shard runs the applied one)."""
        return self.file_config if self._one is None else self._one.config

    @property
    def layout_copy(self) -> str | None:
        """Where a sharded queue's layout was last read from while its own master did not answer."""
        return None if self._store is None else self._store.layout_copy

    # ------------------------------------------------------------------ groups and layout

    def shard(self, index: int) -> Scheduler:
        """The driver of group ``index`` (one per group, made on first use)."""
        if self._one is not None:
            if index != 0:
                raise IndexError(f"queue group {self.keys.prefix} has one group, not {index + 1}")
            return self._one
        return self._scheduler(index, self.layout().prefixes[index])

    def _scheduler(self, index: int, prefix: str) -> Scheduler:
        with self._lock:
            if prefix not in self._schedulers:
                config = self.file_config if not self.sharded else shard_config(self.file_config, index, prefix)
                self._schedulers[prefix] = Scheduler(config, self.client, clock=self._clock)
            return self._schedulers[prefix]

    def layout(self, *, fresh: bool = False) -> Layout:
        """The queue's layout (:meth:`fairness_core.layout.LayoutStore.layout`); a queue of one
        group has a fixed one, never read."""
        return fixed_layout(self.keys.prefix) if self._store is None else self._store.layout(fresh=fresh)

    def served_shards(self) -> range:
        return range(self.layout().serve)

    def masters(self) -> dict[str, list[int]]:
        """The groups the layout serves by the master that holds each (``host:port``), as the
        cluster's slot map says now (placed evenly, they stay so until slots move); {} off a
        Cluster."""
        if not isinstance(self.client, ClusterClient):
            return {}
        held: dict[str, list[int]] = {}
        with redis_errors(self.client):
            for index in self.served_shards():
                held.setdefault(server_of(self.client, self.shard(index).keys.config), []).append(index)
        return held

    def groups(self) -> list[QueueGroup]:
        """The queue groups this queue is made of, shard 0 first: the shards the layout serves, or
        the queue's one group."""
        return [self.shard(i) for i in self.served_shards()]

    def locate(self, job_id: str) -> tuple[int, str]:
        """Which of :meth:`groups` holds ``job_id``, and the id that group knows it by (a sharded
        queue's ids are ``shard:id``); InvalidJob naming ``job id`` for an id of another shape or
        of a shard the queue does not serve."""
        if not self.sharded:
            return 0, check_job_id(job_id)
        index, own = split_job_id(job_id)
        if index >= self.layout().serve:
            raise InvalidJob("job id", f"{job_id}: the queue has no shard {index} (it serves {self.layout().serve})")
        return index, own

    def job_id_in(self, group: int, job_id: str) -> str:
        """The queue's id of the job ``job_id`` of group ``group`` (the inverse of :meth:`locate`)."""
        return f"{group}{JOB_SEP}{job_id}" if self.sharded else job_id

    def _sharded_store(self, what: str) -> LayoutStore:
        if self._store is None:
            raise NotSharded(f"queue group {self.keys.prefix} is not sharded (redis.shards is 1): {what} needs a "
                             "sharded group, set with redis.shards in the config it starts with")
        return self._store

    def _each(self, call: Callable[[Scheduler], T]) -> list[T]:
        return [call(self.shard(i)) for i in self.served_shards()]

    def _each_live(self, call: Callable[[Scheduler], T]) -> list[T]:
        """``call`` on each served group that answers (sweeps, registration: a dead shard's turn
        comes when it is back); RedisUnavailable only when none does."""
        if self._one is not None:
            return [call(self._one)]
        return self.health.each(self.served_shards(), lambda i: call(self.shard(i)))

    def reshard(self, shards: int) -> Layout:
        """New jobs go to ``shards`` shards from now on (tenants re-homed by their new hands); the
        shards that held jobs stay served until :meth:`settle` finds them empty. A new shard gets
        the group's applied config (shard 0's) before any job can reach it. Under the group's claim
        (:meth:`apply`). NotSharded for a queue of one group: an apply under way is waited for, and its config is the one the new
        shards get; GroupBusy when it takes longer than :data:`CLAIM_WAIT_S`."""
        store = self._sharded_store("a re-shard")
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards: expected a whole number from 1 to {MAX_SHARDS}, got {shards!r}")
        token, _ = store.claim("a re-shard")
        try:
            before = self.layout(fresh=True)
            with redis_errors(self.client):
                names = [*before.prefixes, *store.placed(range(len(before.prefixes), shards), before.prefixes)]
            applied = self.shard(0).read_applied()
            added = [self._scheduler(index, names[index]) for index in range(before.serve, shards)]
            for shard in added:
                if applied is not None:  # also over a config left from when the shard was served before
                    shard.apply(replace(applied.config, redis=replace(applied.config.redis, prefix=shard.keys.prefix)),
                                moves=applied.moves)
            self._copy_paused(added)  # before any job can reach them
            store.change(str(shards), before, names, token)
            self._copy_paused(added)  # and a pause or resume that went shard by shard meanwhile
        finally:
            store.release(token)
        return self.layout(fresh=True)

    def _copy_paused(self, shards: Sequence[Scheduler]) -> None:
        """Pause on ``shards`` the classes paused on shard 0, and resume the others: a pause holds
        a class fleet-wide, on shards added later too. Each change is one command, so a class
        paused on shard 0 is never released on a live shard on the way."""
        with redis_errors(self.client):
            paused = {decoded(p) for p in self.client.smembers(self.shard(0).keys.paused)}
            for shard in shards:
                held = {decoded(p) for p in self.client.smembers(shard.keys.paused)}
                if paused - held:
                    self.client.sadd(shard.keys.paused, *sorted(paused - held))
                if held - paused:
                    self.client.srem(shard.keys.paused, *sorted(held - paused))

    def settle(self) -> Layout:
        """Stop serving the shards a re-shard left behind (beyond ``shards``) once every one is
        empty (no job queued, leased or waiting for a retry) and every process has had time to see
        the change (two layout re-reads): a producer still on the old layout could add to them until
        then. Returns the layout, changed or not."""
        store = self._sharded_store("settling a re-shard")
        layout = self.layout(fresh=True)
        if layout.serve == layout.shards:
            return layout
        if not store.seen_by_all(layout):
            return layout
        if any(self.held_jobs(i) for i in range(layout.shards, layout.serve)):
            return layout
        store.change("", layout, layout.prefixes)
        return self.layout(fresh=True)

    def held_jobs(self, index: int) -> int:
        """The jobs shard ``index`` holds, queued, leased or waiting for a retry (its counters say):
        what a settle waits for."""
        with redis_errors(self.client):
            stats = self.client.hgetall(self.shard(index).keys.stats)
        counted = ("depth" + SEP, "inflight" + SEP, "delayed" + SEP)
        return sum(int(v) for k, v in stats.items() if decoded(k).startswith(counted))

    # ------------------------------------------------------------------ the view

    def loads(self, *, fresh: bool = False) -> list[ShardLoad]:
        """Each served shard's queued jobs, tenant weights and paused classes, at most
        :data:`VIEW_TTL_S` old while some shard has work. Otherwise only the shards holding jobs
        are read again (leased ones come back, retries come due), none when no shard holds any;
        every shard when woken (:meth:`wait_for_work`), at least every :data:`LOOK_S`, and now
        when ``fresh``."""
        now = time.monotonic()
        view = self._view
        if not fresh and view is not None and now - view[0] <= VIEW_TTL_S:
            return view[1]
        served = self.served_shards()
        if (fresh or view is None or len(view[1]) != len(served) or self._stirred or now - self._looked >= LOOK_S
                or self._any_work(view[1], None)):
            self._stirred, self._looked = False, now  # before the read: a wake-up during it stirs again
            loads = self._read_loads(served)
        else:
            holding = [i for i, load in enumerate(view[1]) if load.holds]
            if not holding:
                return view[1]
            loads = list(view[1])
            with contextlib.suppress(RedisUnavailable):  # none of them answers: read them again next time
                for index, load in zip(holding, self._read_loads(holding)):
                    loads[index] = load
        self._view = (now, loads)
        return loads

    def _read_loads(self, indices: Sequence[int]) -> list[ShardLoad]:
        """The loads of shards ``indices``: their counters, one pipeline per master, then the
        paused classes of those with jobs queued. A shard that does not answer shows no work
        until it does, and holds jobs, so that it is read again."""
        settings = self.shard(0).settings
        classes = self.shard(0).config.class_names
        counted = [*classes, *self.shard(0).moves.classes]  # the jobs of a removed class still need sweeps
        held = [f"{counter}{SEP}{c}" for c in counted for counter in ("depth", "inflight", "delayed")]
        fields = held + [field for field, _, _ in tier_counters(classes, settings)]
        replies = self.health.read(indices, lambda pipe, shard: pipe.hmget(shard.keys.stats, fields), per_shard=1)
        counts = {i: dict(zip(fields, replies[i][0])) for i in replies}
        queued = [i for i in counts if any(int(counts[i][f"depth{SEP}{c}"] or 0) for c in classes)]
        paused: dict[int, list[Any]] = {}
        if queued:
            with contextlib.suppress(RedisUnavailable):  # their masters lost since: their pops fail on their own
                paused = self.health.read(queued, lambda pipe, shard: pipe.smembers(shard.keys.paused), per_shard=1)
        return [ShardLoad(depth={c: int(counts[i][f"depth{SEP}{c}"] or 0) for c in classes},
                          tenant_weight=tenant_weights(counts[i], classes, settings),
                          paused=frozenset(decoded(p) for p in paused.get(i, [[]])[0]),
                          holds=any(int(counts[i][field] or 0) for field in held))
                if i in counts else ShardLoad(depth={}, tenant_weight={}, paused=frozenset(), holds=True)
                for i in indices]

    # ------------------------------------------------------------------ producing

    def enqueue(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
                user_waiting: bool = False) -> str:
        """Classify and queue one job; returns its id. Raises InvalidJob before touching Redis,
        TenantLimitReached when the tenant is at a ``tenants`` limit (queued jobs or arrival rate),
        BudgetRejected when the class is over its arrival budget and rejects (nothing is queued then)."""
        return self.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting).job_id

    def submit(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False, key: str | None = None) -> Enqueued:
        """Like :meth:`enqueue`, also telling the class and reason the job was queued under;
        ``key`` makes it safe to retry (:meth:`fairness_core.scheduler.Scheduler.submit`). On a
        sharded queue the job goes to the shard the routing chooses; a keyed job to the shard of
        its key."""
        if self._one is not None:
            return self._one.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting, key=key)
        index, queued = self._to_hand(
            task, tenant, tier, user_waiting,
            lambda s, held: s.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting, key=key,
                                     elsewhere=held), key=key)
        self.wake([queued.queue])
        return replace(queued, job_id=self.job_id_in(index, queued.job_id))

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False, keys: Sequence[str] | None = None) -> list[Enqueued | None]:
        """One job per payload, all for the same task and tenant, in one pipelined round trip
        (:meth:`fairness_core.scheduler.Scheduler.submit_many`); None for a job a budget rejected or
        a tenant limit refused. On a sharded queue all go to one shard (the tenant's, as for
        :meth:`submit`); with ``keys``, each job to the shard of its key, one pipelined call per shard."""
        if self._one is not None:
            return self._one.submit_many(task, tenant, payloads, tier=tier, user_waiting=user_waiting, keys=keys)
        if keys is not None:
            return self._submit_keyed(task, tenant, payloads, tier, user_waiting, keys)
        index, queued = self._to_hand(task, tenant, tier, user_waiting,
                                      lambda s, held: s.submit_many(task, tenant, payloads, tier=tier,
                                                                    user_waiting=user_waiting, elsewhere=held))
        self.wake(sorted({q.queue for q in queued if q is not None}))
        return [None if q is None else replace(q, job_id=self.job_id_in(index, q.job_id)) for q in queued]

    def _submit_keyed(self, task: str, tenant: str, payloads: Sequence[Any], tier: str | None, user_waiting: bool,
                      keys: Sequence[str]) -> list[Enqueued | None]:
        if len(keys) != len(payloads):
            raise InvalidJob("key", f"expected one key per payload, got {len(keys)} for {len(payloads)} payloads")
        by_shard: dict[int, list[int]] = {}
        for n, key in enumerate(keys):
            by_shard.setdefault(self.shard_of_key(tenant, key), []).append(n)
        results: list[Enqueued | None] = [None] * len(keys)
        for index, jobs in by_shard.items():
            held = self._held_elsewhere(tenant, self._hand(tenant), index)
            queued = self.health.call(index, lambda: self.shard(index).submit_many(
                task, tenant, [payloads[n] for n in jobs], tier=tier, user_waiting=user_waiting,
                keys=[keys[n] for n in jobs], elsewhere=held))
            for n, q in zip(jobs, queued):
                results[n] = None if q is None else replace(q, job_id=self.job_id_in(index, q.job_id))
        self.wake(sorted({q.queue for q in results if q is not None}))
        return results

    def shard_of_key(self, tenant: str, key: str) -> int:
        """The shard a keyed job of ``tenant`` goes to (:meth:`fairness_core.routing.Router.key_shard`)."""
        return self.router.key_shard(check_tenant(tenant, self.shard(0).config), check_key(key), self.layout().shards,
                                     self.shard(0).settings)

    def _to_hand(self, task: str, tenant: str, tier: str | None, user_waiting: bool,
                 send: Callable[[Scheduler, Elsewhere], T], key: str | None = None) -> tuple[int, T]:
        """``send`` to the shard :meth:`shard_for` chooses, with what the tenant's limits count on
        the hand's other shards; when that shard does not answer, to the next of the tenant's hand
        that does (the tenant's jobs then sit on two shards, each in its order). RedisUnavailable
        naming the hand's shards and masters when none answers. A keyed job goes to the shard of
        its key, and to no other: a retry must find its record."""
        if key is not None:
            index = self.shard_of_key(tenant, key)
            held = self._held_elsewhere(tenant, self._hand(tenant), index)
            return index, self.health.call(index, lambda: send(self.shard(index), held))
        while True:
            index, held = self._routed(task, tenant, tier, user_waiting)
            try:
                return index, self.health.call(index, lambda: send(self.shard(index), held))
            except RedisUnavailable:
                if not any(self.health.usable(i) for i in self._hand(tenant)):
                    raise self.health.unavailable(self._hand(tenant), []) from None

    def _hand(self, tenant: str) -> tuple[int, ...]:
        """The tenant's hand under the applied config (its first shard alone when a limit may hold it)."""
        return self.router.hand(tenant, self.layout().shards, self.shard(0).settings)

    def shard_for(self, task: str, tenant: str, *, tier: str | None = None, user_waiting: bool = False) -> int:
        """The shard a job of ``tenant`` goes to: of its hand's shards that answer, the one where
        the tenant (with accounts, its account) already has jobs of the class queued, else the one
        whose class is least backlogged (first in the hand on a tie:
        :func:`fairness_core.routing.choose_shard`). A hand of one costs no read. RedisUnavailable,
        naming each shard of the hand and its master, when none of them answers."""
        return self._routed(task, tenant, tier, user_waiting)[0]

    def _routed(self, task: str, tenant: str, tier: str | None, user_waiting: bool) -> tuple[int, Elsewhere]:
        """:meth:`shard_for`'s shard, and what the tenant's limits count on the hand's other shards,
        read in the same round trip."""
        config = self.shard(0).config
        tenant = check_tenant(tenant, config)
        dealt = self._hand(tenant)
        if len(dealt) == 1:
            return dealt[0], NOWHERE
        queue = classify(config, task, tier=check_tier(tier, config), user_waiting=user_waiting).queue
        limits = self._limit_reads(tenant)
        routed_as = party(config, tenant)

        def read(pipe: Any, shard: Scheduler) -> None:
            pipe.zscore(shard.keys.class_key(queue, CLASS_PARTS["tags"]), routed_as)
            pipe.hget(shard.keys.stats, f"depth{SEP}{queue}")
            if limits is not None:
                limits.queue(pipe, shard.keys)

        replies = self.health.read(dealt, read, per_shard=2 + (0 if limits is None else limits.per_shard))
        live = [i for i in dealt if i in replies]
        index = choose_shard(live, [replies[i][0] is not None for i in live], [int(replies[i][1] or 0) for i in live])
        if limits is None:
            return index, NOWHERE
        return index, summed(limits, {i: replies[i][2:] for i in live}, index)

    def _limit_reads(self, tenant: str) -> LimitReads | None:
        """The reads of the tenant's admission counts, when the applied config has limits to count."""
        settings = self.shard(0).settings
        if not counts_limits(settings):
            return None
        return LimitReads.of(settings, tenant, party(self.shard(0).config, tenant))

    def _held_elsewhere(self, tenant: str, dealt: Sequence[int], index: int) -> Elsewhere:
        """What the tenant's limits count on the shards of ``dealt`` other than ``index``: one
        pipelined read, none when there are no limits or no other shards."""
        others = [i for i in dealt if i != index]
        limits = self._limit_reads(tenant)
        if limits is None or not others:
            return NOWHERE
        with contextlib.suppress(RedisUnavailable):  # a shard that does not answer counts nothing
            return summed(limits, self.health.read(others, lambda pipe, shard: limits.queue(pipe, shard.keys),
                                                   per_shard=limits.per_shard), index)
        return NOWHERE

    # ------------------------------------------------------------------ consuming

    def pop(self, max_jobs: int = 1, *, classes: Sequence[str] | None = None, owner: str = "") -> list[Lease]:
        return self.ack_and_pop((), max_jobs, classes=classes, owner=owner).leases

    def ack_and_pop(self, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None, owner: str = "") -> Popped:
        """Complete ``done``, then lease up to ``max_jobs`` jobs of one class from one shard, the
        class and shard chosen as the module says. A done lease of the shard popped from is settled
        in the same call; the others each in a call of their own shard. A queue of one group pops
        with its group's script choosing the class."""
        if self._one is not None:
            return self._one.ack_and_pop(done, max_jobs, classes=classes, owner=owner)
        check_pop(max_jobs, classes)
        by_shard: dict[int, list[tuple[int, Lease | Finished]]] = {}
        for n, item in enumerate(done):
            index, inner = self._inner(item)
            by_shard.setdefault(index, []).append((n, inner))
        acked: list[bool | None] = [None] * len(done)
        leases: list[Lease] = []
        # Popping from the shard of a done lease lets its ack ride along, when the rotation allows.
        choices = self.router.choices(self.loads(), self.shard(0).config, self.shard(0).moves.classes, classes,
                                      prefer=next(iter(by_shard), None))
        # The done leases of other shards than the first pop's are settled first: a failure there
        # then leaves nothing popped (and so nothing leased that the caller never hears of). A
        # shard that does not answer keeps its acks unsent (None) for the caller to send again.
        for index in [i for i in by_shard if not choices or i != choices[0][0]]:
            for n, item in by_shard.pop(index):
                lease, runtime = settled(item)
                if self.health.usable(index):
                    with contextlib.suppress(RedisUnavailable):
                        acked[n] = self.health.call(index, partial(self.shard(index).ack, lease, runtime=runtime))
        held = bool(choices)  # held back: every shard asked had work its reservations kept
        for index, queue in choices:
            settle = by_shard.pop(index, [])
            self._registered_on(index)
            try:
                popped = self.health.call(index, partial(self.shard(index).ack_and_pop, [item for _, item in settle],
                                                         max_jobs, classes=None if queue is None else [queue],
                                                         owner=owner))
            except ReplyLost:  # it may have leased jobs: the caller decides (a worker reclaims them)
                self._lost_pops.add(index)
                raise
            except RedisUnavailable:
                self.loads()[index].ran_dry(None)
                held = False
                continue
            for (n, _), ok in zip(settle, popped.acked):
                acked[n] = ok
            if popped.leases:
                leases = [replace(lease, job_id=self.job_id_in(index, lease.job_id)) for lease in popped.leases]
                self.router.count_served([lease.queue for lease in leases])
                self._left_behind(index, popped.leases)
                break
            held = held and popped.held_back
            self.loads()[index].ran_dry(queue)
        return Popped(acked=acked, leases=leases, held_back=held and not leases)

    def _inner(self, item: Lease | Finished) -> tuple[int, Lease | Finished]:
        if self._one is not None:
            return 0, item
        lease = item.lease if isinstance(item, Finished) else item
        index, own = self.locate(lease.job_id)
        inner = replace(lease, job_id=own)
        return index, (replace(item, lease=inner) if isinstance(item, Finished) else inner)

    def _route(self, lease: Lease) -> tuple[Scheduler, Lease]:
        """The driver of the group ``lease`` names, and the lease as that group knows it."""
        if self._one is not None:
            return self._one, lease
        index, own = self.locate(lease.job_id)
        return self.shard(index), replace(lease, job_id=own)

    def ack(self, lease: Lease, *, runtime: float | None = None) -> bool:
        shard, inner = self._route(lease)
        return shard.ack(inner, runtime=runtime)

    def nack(self, lease: Lease, error: str | None = None, *, final: bool = False,
             runtime: float | None = None) -> str:
        shard, inner = self._route(lease)
        return shard.nack(inner, error, final=final, runtime=runtime)

    def defer_unhandled(self, lease: Lease) -> str:
        """:meth:`Scheduler.defer_unhandled`, on the shard the lease names."""
        shard, inner = self._route(lease)
        return shard.defer_unhandled(inner)

    def extend(self, lease: Lease) -> bool:
        shard, inner = self._route(lease)
        return shard.extend(inner)

    def _by_shard(self, leases: Sequence[Lease]) -> dict[int, list[Lease]]:
        """``leases`` by the shard each names, each with that shard's own job id."""
        if self._one is not None:
            return {0: list(leases)}
        by_shard: dict[int, list[Lease]] = {}
        for lease in leases:
            index, own = self.locate(lease.job_id)
            by_shard.setdefault(index, []).append(replace(lease, job_id=own))
        return by_shard

    def give_back(self, leases: Sequence[Lease]) -> int:
        """:meth:`Scheduler.give_back`, each on the shard its lease names; the idle workers of
        their classes are woken (a stopping worker's jobs are the others' now, not at their next
        look at every shard)."""
        given = sum(self.shard(index).give_back(inner) for index, inner in self._by_shard(leases).items())
        if given:
            self.wake(sorted({lease.queue for lease in leases}))
        return given

    def reclaim(self, owner: str, held: Sequence[Lease]) -> int:
        """:meth:`Scheduler.reclaim` on each served shard that answers, keeping the leases it holds
        there; the queue's idle workers are woken for the jobs it gives back."""
        by_shard = self._by_shard(held)
        if self._one is not None:
            return self._one.reclaim(owner, by_shard[0])

        def one(index: int) -> int:
            count = self.shard(index).reclaim(owner, by_shard.get(index, []))
            self._lost_pops.discard(index)
            return count

        # The shards that answer, and those where a pop's reply was lost even if marked down since:
        # that failure marked its shard down a moment ago, and the lost leases are there. Not every
        # shard marked down: a dead master's would cost each reclaim its connect timeout.
        asked = [i for i in self.served_shards() if self.health.usable(i) or i in self._lost_pops]
        count = sum(self.health.each(asked, one, even_down=True))
        if count:
            self.wake()  # which classes they were, the reply that was lost knew
        return count

    def lease_taken_back(self, job_id: str) -> bool:
        """Whether the reaper took the lease of ``job_id`` back from its worker within the hour."""
        if self._one is not None:
            return self._one.lease_taken_back(job_id)
        index, own = self.locate(job_id)
        return self.shard(index).lease_taken_back(own)

    def lost_with_state(self, lease: Lease) -> bool:
        """:meth:`Scheduler.lost_with_state`, on the shard the lease names."""
        shard, inner = self._route(lease)
        return shard.lost_with_state(inner)

    def wait_for_work(self, timeout: float, classes: Sequence[str] | None = None) -> float | None:
        """Until one of ``classes`` has work on some shard (0.0), or None after ``timeout``. The
        shards' wake keys are in different hash slots, which no one blocking command may wait on
        together, so a worker blocks on the queue's own, one per class (:meth:`wake`): for at most
        :data:`IDLE_POLL_S` while some shard holds jobs (a retry that comes due, or a lease taken
        back, arms no key of the queue), else until the next look at every shard (:meth:`loads`).
        A wake-up is a hint: the view read after it decides."""
        if self._one is not None:
            return self._one.wait_for_work(timeout, classes)
        deadline = time.monotonic() + timeout
        while True:
            loads = self.loads()
            if self._any_work(loads, classes):
                return 0.0
            now = time.monotonic()
            if now >= deadline:
                return None
            until = now + IDLE_POLL_S if any(load.holds for load in loads) else self._looked + LOOK_S
            self._block(max(0.01, min(deadline, until) - now), classes)

    def _block(self, timeout: float, classes: Sequence[str] | None) -> None:
        """Block on the wake keys of ``classes`` (all when None) for up to ``timeout`` seconds;
        woken, the next view reads every shard. While the keys do not answer, every view does (a
        worker looks every :data:`IDLE_POLL_S` then, as no wake-up reaches it)."""
        try:
            if self._on_wake_keys(lambda: self.client.bzpopmin([self.keys.wake(c) for c in self._classes_of(classes)],
                                                               timeout=timeout)) is None:
                return
        except RedisUnavailable:
            time.sleep(min(IDLE_POLL_S, timeout))
        self._stirred = True

    def wake(self, classes: Sequence[str] | None = None) -> None:
        """Arm the queue's own wake keys of ``classes`` (all when None): one worker blocked on each
        wakes and reads every shard. Every enqueue arms its class's, and so do a resume, a dead
        letter requeued and a pop that leaves work behind (the next idle worker takes the rest: a
        chain, not a herd). A hint: when they cannot be armed, workers find the work at their next
        look. A queue of one group has none of its own: its group's script arms its wake keys."""
        if self._one is not None:
            return
        with contextlib.suppress(RedisUnavailable):
            for name in self._classes_of(classes):
                self._on_wake_keys(lambda: self.client.zadd(self.keys.wake(name), {WAKE_MEMBER: 0}))

    def _classes_of(self, classes: Sequence[str] | None) -> list[str]:
        return classes_of(self.shard(0).config, self.shard(0).moves.classes, classes)

    def _on_wake_keys(self, command: Callable[[], T]) -> T:
        """``command`` on the queue's own wake keys. After they did not answer, RedisUnavailable
        without asking for :data:`~fairness_core.shard_health.RETRY_S`: a master cut off would
        hold every enqueue for its connect timeout."""
        if time.monotonic() < self._wake_down_until:
            raise RedisUnavailable(f"the wake keys of queue group {self.keys.prefix} did not answer")
        try:
            with redis_errors(self.client):
                return command()
        except RedisUnavailable:
            self._wake_down_until = time.monotonic() + RETRY_S
            raise

    def _left_behind(self, index: int, leases: Sequence[Lease]) -> None:
        """Leases popped from shard ``index``: the view the pop chose from counts their jobs gone,
        and while it shows work left, the next idle worker of each class with some is woken, at
        most every :data:`VIEW_TTL_S` (a pop that took the last job wakes nobody for nothing)."""
        loads = self.loads()
        for lease in leases:
            loads[index].depth[lease.queue] = max(0, loads[index].depth.get(lease.queue, 0) - 1)
        now = time.monotonic()
        if now - self._woke_next < VIEW_TTL_S:
            return
        left = [c for c in self.shard(0).config.class_names if self._any_work(loads, [c])]
        if left:
            self._woke_next = now
            self.wake(left)

    def _any_work(self, loads: list[ShardLoad], classes: Sequence[str] | None) -> bool:
        return any_work(loads, self.shard(0).config.class_names if classes is None else classes)

    # ------------------------------------------------------------------ sweeps, registration, control

    def reap(self, limit: int = SWEEP_LIMIT) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).reap(limit)))

    def promote_overdue(self, limit: int = SWEEP_LIMIT) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).promote_overdue(limit)))

    def move_pending(self, limit: int = SWEEP_LIMIT) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).move_pending(limit)))

    def _each_swept(self, call: Callable[[int], T]) -> list[T]:
        """``call`` on each shard the view saw holding jobs and on the first served shard that
        answers (shard 0 while it does: the fleet's slots are read there), of those that answer. A
        shard that holds none has no lease to take back, retry to release or job to age or move."""
        if self._one is not None:
            return [call(0)]
        loads, served = self.loads(), self.served_shards()
        first = next((i for i in served if self.health.usable(i)), 0)
        return self.health.each([i for i in served if i == first or (i < len(loads) and loads[i].holds)], call)

    def register_worker(self, worker_id: str, slots: int, ttl: float) -> None:
        """On the shards holding jobs and shard 0, of those that answer (:meth:`_each_swept`): each
        shard's reserved capacity counts the slots registered there. An idle shard keeps this
        worker's last registration, unrenewed, until the worker's first pop there renews it
        (:meth:`_registered_on`); a dead shard's comes with the next heartbeat after it is back."""
        self._registration = (worker_id, slots, ttl)

        def register(index: int) -> None:
            self.shard(index).register_worker(worker_id, slots, ttl)
            self._registered_at[index] = time.monotonic()

        self._each_swept(register)

    def _registered_on(self, index: int) -> None:
        """Before this worker pops from shard ``index``: register it there again unless it did
        within half its registration's TTL (an idle shard's lapses while unrenewed). A failure is
        left to the pop, which meets it too."""
        registration = self._registration
        if registration is None or time.monotonic() - self._registered_at.get(index, -math.inf) < registration[2] / 2:
            return
        with contextlib.suppress(RedisUnavailable):
            self.health.call(index, partial(self.shard(index).register_worker, *registration))
            self._registered_at[index] = time.monotonic()

    def unregister_worker(self, worker_id: str) -> int:
        return sum(self._each_live(lambda s: s.unregister_worker(worker_id)))

    def fleet_slots(self) -> int:
        """The fleet's slots, from the first served shard that answers: each holds every worker's
        registration."""
        if self._one is not None:
            return self._one.fleet_slots()
        return self.health.first(self.served_shards(), lambda i: self.shard(i).fleet_slots())

    def pause(self, queue: str) -> None:
        self._each(lambda s: s.pause(queue))

    def resume(self, queue: str) -> None:
        self._each(lambda s: s.resume(queue))
        self.wake([queue])

    def sync(self) -> None:
        self._each(lambda s: s.sync())

    def check_state(self) -> bool:
        """Whether any shard's state was reset since it was last looked at (the shards holding jobs
        and shard 0 look, of those that answer: an idle shard held no lease of this process)."""
        return any(self._each_swept(lambda i: self.shard(i).check_state()))

    # ------------------------------------------------------------------ applies: one queue, one config

    def apply(self, config: Config, *, moves: Moves = NO_MOVES, expect: str | None = None) -> QueueApply:
        """``config`` applied to every shard the layout serves, each under its own name and
        atomically, under the group's claim: applies and re-shards take turns, and each reads the
        layout once it holds the claim, so every shard (the ones a re-shard adds too) ends on the
        last config applied. ``expect``: the fingerprint of :meth:`applied_group` the caller saw
        ('' for none); ApplyLost, naming the config that won, when another apply came between.
        GroupBusy when another holds the claim longer than :data:`CLAIM_WAIT_S`. ConfigRefused,
        changing nothing, when shard 0 refuses ``config``; PartlyApplied when a later shard does,
        or the claim lapsed part way: the shards before it run ``config``. A queue of one group
        applies to its group, atomically, with no claim to take."""
        if config.redis.prefix != self.keys.prefix:
            raise ValueError(f"redis.prefix: {config.redis.prefix!r} is another queue group than {self.keys.prefix!r}")
        if self._one is not None:
            return self._apply_one(self._one, config, moves, expect)
        store = self._sharded_store("an apply")
        token, seen = store.claim("an apply")
        done: dict[str, ApplyOutcome] = {}
        record: GroupConfig | None = None
        try:
            if expect is not None and expect != (seen.fingerprint if seen else ""):
                if seen is None:
                    raise ConfigConflict(f"the config recorded for queue group {self.keys.prefix} is gone (was its "
                                         "layout deleted?); run `fairctl config diff` and apply again")
                raise ApplyLost(self.keys.prefix, seen)
            layout = self.layout(fresh=True)
            for index, name in enumerate(layout.prefixes[:layout.serve]):
                if done and not store.renew(token):
                    raise self._partly(done, f"the claim on the group lapsed (held over {CLAIM_TTL_MS // 1000}s) "
                                             "and another apply or re-shard took it")
                try:
                    done[name] = self._scheduler(index, name).apply(shard_config(config, index, name), moves=moves)
                except ConfigRefused as exc:
                    if not done:
                        raise
                    raise self._partly(done, f"shard {index} refused it ({exc})") from exc
            first = self._scheduler(0, layout.prefixes[0])
            record = GroupConfig(done[layout.prefixes[0]].version,
                                 group_fingerprint(first.applied or first.sync(), self.keys.prefix))
        finally:
            released = store.release(token, record)
        if not released:
            raise self._partly(done, "the claim on the group lapsed before the apply ended, and another apply or "
                                     "re-shard took it")
        return QueueApply(record, done)

    def _apply_one(self, one: Scheduler, config: Config, moves: Moves, expect: str | None) -> QueueApply:
        try:
            outcome = one.apply(config, moves=moves, expect=expect)
        except ConfigConflict as exc:
            won = one.read_applied()  # the config that came between
            if won is None or isinstance(exc, ApplyLost):
                raise
            raise ApplyLost(self.keys.prefix, GroupConfig(won.version, won.fingerprint)) from exc
        return QueueApply(GroupConfig(outcome.version, outcome.fingerprint), {self.keys.prefix: outcome})

    def applied_group(self) -> GroupConfig | None:
        """The queue's config as its last apply recorded it; None before the first (a new group
        starts on the config of the first process that serves it)."""
        if self._one is not None:
            applied = self._one.read_applied()
            return None if applied is None else GroupConfig(applied.version, applied.fingerprint)
        return self._sharded_store("the group's config").applied_group()

    def _partly(self, done: Mapping[str, ApplyOutcome], why: str) -> PartlyApplied:
        return PartlyApplied(f"the apply stopped part way: {why}. Shards {', '.join(done)} of queue group "
                             f"{self.keys.prefix} run the new config and the others their old one until an apply "
                             "reaches every shard: apply again once the cause is fixed")

    # ------------------------------------------------------------------ observing: snapshots and dead letters

    def snapshot(self) -> Snapshot:
        """The queue's counters, depths, ages and tenant service per class: its group's snapshot,
        or the snapshots of a sharded queue's shards that answer, merged as one queue's."""
        if self._one is not None:
            return self._one.snapshot()
        return merged_snapshot(self.health.each(self.served_shards(), lambda i: self.shard(i).snapshot()))

    def dead_letters(self, start: int = 0, end: int = 99, *, queue: str | None = None) -> list[dict[str, Any]]:
        """Dead-lettered jobs ``start`` .. ``end`` (inclusive), oldest first over every group, each
        with the error that finished it and the queue's job id; ``queue``: of that class only.
        Reads each group's list in pages, up to ``end + 1`` of its own."""
        names = self.shard(0).config.class_names
        if queue is not None and queue not in names:
            raise ValueError(f"queue: unknown class {queue!r}; configured: {', '.join(names)}")
        wanted = end + 1
        rows: list[dict[str, Any]] = []
        for index, group in enumerate(self._each(lambda s: s)):
            count, found, at = group.dead_letter_count(), 0, 0
            while found < wanted and at < count:
                page = group.dead_letters(at, at + DEAD_PAGE - 1)
                if not page:
                    break
                kept = [self._relabelled(index, item) for item in page
                        if queue is None or item["lease"].queue == queue]
                rows += kept
                found += len(kept)
                at += DEAD_PAGE
        rows.sort(key=lambda item: item["dead_at"])
        return rows[start:wanted]

    def _relabelled(self, index: int, item: dict[str, Any]) -> dict[str, Any]:
        """A group's dead letter with the queue's job id."""
        if self._one is not None:
            return item
        return {**item, "lease": replace(item["lease"], job_id=self.job_id_in(index, item["lease"].job_id))}

    def dead_letter(self, job_id: str) -> dict[str, Any] | None:
        """The dead letter of job ``job_id`` (as :meth:`dead_letters` gives them), or None."""
        index, own = self.locate(job_id)
        item = self.shard(index).dead_letter(own)
        return None if item is None else self._relabelled(index, item)

    def dead_letter_count(self) -> int:
        """Jobs in the dead-letter lists of every group."""
        return sum(self._each(lambda s: s.dead_letter_count()))

    def dead_letter_counts(self) -> dict[str, int]:
        """Dead letters of each configured class, over every group."""
        return summed_counts(self._each(lambda s: s.dead_letter_counts()))

    def requeue_dead(self, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                     limit: int = DEAD_PAGE) -> DeadOutcome:
        """Put dead letters back in their class, atomically in each group: the given jobs (by the
        queue's ids), or with no ids the oldest ``limit`` of ``queue`` (any class when None) of each
        group in turn, ``limit`` in all. Each keeps its id, tenant, class, task, reason and payload;
        its attempts start again from zero. A dead letter whose class is no longer configured stays
        in the list (``skipped``). Idle workers are woken for the jobs requeued."""
        outcome = self._dead("requeue", job_ids, queue, limit)
        if outcome.done:
            self.wake()
        return outcome

    def drop_dead(self, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                  limit: int = DEAD_PAGE) -> DeadOutcome:
        """Delete dead letters for good, atomically in each group; the same selection as
        :meth:`requeue_dead`."""
        return self._dead("drop", job_ids, queue, limit)

    def _dead(self, action: str, job_ids: Sequence[str] | None, queue: str | None, limit: int) -> DeadOutcome:
        done: list[str] = []
        skipped: list[str] = []

        def took(index: int, outcome: DeadOutcome) -> None:
            done.extend(self.job_id_in(index, i) for i in outcome.done)
            skipped.extend(self.job_id_in(index, i) for i in outcome.skipped)

        def run(group: Scheduler) -> Callable[..., DeadOutcome]:
            return group.requeue_dead if action == "requeue" else group.drop_dead

        if job_ids:
            by_group: dict[int, list[str]] = {}
            for job_id in job_ids:
                index, own = self.locate(job_id)
                by_group.setdefault(index, []).append(own)
            for index, ids in by_group.items():
                for at in range(0, len(ids), DEAD_PAGE):
                    took(index, run(self.shard(index))(ids[at:at + DEAD_PAGE], queue=queue))
            return DeadOutcome(done=done, skipped=skipped)
        for index in self.served_shards():
            left = limit - len(done) - len(skipped)
            if left <= 0:
                break
            took(index, run(self.shard(index))(None, queue=queue, limit=left))
        return DeadOutcome(done=done, skipped=skipped)


def open_queue(config: Config, client: Any = None) -> Queue:
    """The queue ``config`` describes, on ``client`` (default: a client of ``config.redis.url``)."""
    return Queue(config, redis_client(config.redis.url) if client is None else client)
