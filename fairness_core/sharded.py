"""One logical queue over N queue groups (shards), for a load one Redis master cannot carry.

Each shard is a queue group of its own (``redis.prefix`` ``P.i``, its own hash tag), run by the
same script as any group: on a Redis Cluster the shards spread over the masters, and every enqueue,
pop and ack stays one atomic script on one shard. A new shard's name is chosen to put it on a
master holding the fewest of the group's shards (``P.i``, else ``P.i-1``, ...:
:func:`fairness_core.sharding.place`), and the names are kept in the group's layout. What makes
the N groups one queue is here:

- **Enqueue** goes to one shard of the tenant's hand (:func:`fairness_core.sharding.hand`): the
  shard where the tenant already has jobs of that class queued (its jobs stay together and in
  order), else the one whose class is least backlogged, which is how shuffle sharding keeps a
  tenant off the shard a flood fills.
- **Pop** chooses the class first, for the whole fleet: each worker runs the class weights over the
  classes with work on any shard (the least served against its weight goes next), so the shares
  hold fleet-wide and not per shard. It then chooses a shard with work in that class, in
  proportion to the tier weights of the tenants queued there (smooth weighted round-robin), so
  each queued tenant of the fleet gets about its tier's share whichever shard it is on: a
  flooding tenant is one tenant, wherever it is. The shard's
  own script then picks the tenant (weighted fair queuing) and leases the job.
- **Ack, nack, extend** go to the shard the lease names: a sharded job id is ``shard:id``.
- **Re-sharding** (:meth:`ShardedScheduler.reshard`) changes where new jobs go; the jobs already
  queued stay where they are and are served there, since workers serve every shard that may hold
  jobs (the layout's ``serve``), so nothing is moved, lost or run twice.
- **The layout** (how many shards take new jobs and are served, and their names) is kept under
  the group's own tag, and each process writes every version of it it reads to a copy on each
  master: a process that starts while the layout's master is down runs the newest copy that
  answers, so it serves the shards on the masters that are up (:meth:`ShardedScheduler.layout`).
- **Applies and re-shards take turns** under a claim in the layout (:meth:`ShardedScheduler.apply`):
  each one reads the layout after claiming it, so every shard, the ones a re-shard adds too, ends
  on the group's last applied config, and an apply that read the group's config before another
  one was applied is refused, naming the one that won. A claim whose holder died lapses after
  :data:`CLAIM_TTL_MS`; the shards it left on two configs stay so until an apply reaches them all.

The choices read a view of every shard's queued jobs and tenants per class and tier, at most
:data:`VIEW_TTL_S` old: a command per shard, and one more per shard with jobs queued, pipelined
across the masters.

- **Idle**, a process reads no shard: an idle fleet costs Redis about what an unsharded one does,
  at any number of shards. The shards' wake keys sit in as many hash slots, which no one blocking
  command can wait on, so every enqueue also arms the queue's own wake key of its class, under the
  group's tag (:meth:`ShardedScheduler.wake`), which idle workers block on; while jobs are leased
  or wait to retry, only their shards are read, and every shard every :data:`LOOK_S`, which bounds
  what a wake-up lost with its producer costs. The sweeps (reaps, aging, moves, state checks and
  worker registrations) go to the shards holding jobs and shard 0 only: an idle shard has nothing
  to sweep, and a worker registers on a shard again before its first pop there.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import redis

from .accounts import account_of
from .classification import classify
from .config import MAX_SHARDS, Config
from .config_store import NO_MOVES, Applied, ConfigConflict, ConfigRefused, Moves, fingerprint
from .connection import ClusterClient, redis_errors, server_of
from .jobs import (
    SEP,
    Enqueued,
    FairnessError,
    Finished,
    InvalidJob,
    Lease,
    Popped,
    RedisUnavailable,
    ReplyLost,
    check_key,
    check_tenant,
    check_tier,
    decoded,
    settled,
)
from .keys import CLASS_PARTS, LAYOUT_COPY, WAKE_MEMBER, Keys
from .scheduler import ApplyOutcome, Scheduler, check_pop
from .settings import Settings
from .shard_health import RETRY_S, ShardHealth
from .sharding import hand, key_shard, place, shard_prefix

log = logging.getLogger("fairctl.config")

VIEW_TTL_S = 0.1  # how old a view of the shards' backlogs a pop may choose from
LAYOUT_TTL_S = 1.0  # how often a process re-reads the layout (where new jobs go)
IDLE_POLL_S = 0.1  # a waiting worker reads the shards holding leased or retrying jobs this often
LOOK_S = 10.0  # a process that saw no job reads every shard this often (a wake-up lost costs at most this)
JOB_SEP = ":"  # a sharded job id: shard, JOB_SEP, the shard's own id
WEIGHTED = ("weighted", "weighted-fair")
CLAIM_TTL_MS = 60_000  # a claim on the layout lapses this long after it was taken or renewed: its holder died
CLAIM_WAIT_S = 10.0  # how long an apply or a re-shard waits for another's claim (one takes well under a second)
CLAIM_POLL_S = 0.02  # how often a waiting one asks again
T = TypeVar("T")
# The groups this process runs a copy of the layout of, while its master does not answer: said once
# a process, however many of its ShardedSchedulers read it (a command's, its exporter's).
_COPY_RUN: dict[str, str] = {}

# Creates the layout on first use (from the config's redis.shards) and returns it; one call, so two
# processes starting a group at once agree on one layout. A hash with no shards (only a claim, taken
# as the layout was deleted) has none yet.
_LAYOUT_CREATE = """
if redis.call('HEXISTS', KEYS[1], 'shards') == 0 then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'shards', ARGV[1], 'serve', ARGV[1], 'version', 1,
             'changed_ms', now[1] * 1000 + math.floor(now[2] / 1000), 'prefixes', ARGV[2])
end
return 1
"""
LAYOUT_FIELDS = ("shards", "serve", "version", "changed_ms", "prefixes")
PREFIX_SEP = ","  # between the shards' names in the layout (no name can hold one)
# Re-shards to ARGV[1] shards, or with ARGV[1] = '' settles: serve drops to shards (the caller has
# checked that the shards beyond are empty). ARGV[2]: the version the caller read (a conflict
# returns the layout unchanged, 0); ARGV[3]: every shard's name, with the new ones'; ARGV[4]: the
# claim a re-shard holds (-1 when it lapsed and another took it), '' for a settle, which takes none
# (it only stops serving empty shards, which no apply needs to reach).
_LAYOUT_CHANGE = """
local shards, serve, version = unpack(redis.call('HMGET', KEYS[1], 'shards', 'serve', 'version'))
if tostring(version) ~= ARGV[2] then return 0 end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[1], 'claim') ~= ARGV[4] then return -1 end
local now = redis.call('TIME')
local to = ARGV[1] == '' and tonumber(shards) or tonumber(ARGV[1])
local keep = ARGV[1] == '' and to or math.max(tonumber(serve), to)
redis.call('HSET', KEYS[1], 'shards', to, 'serve', keep, 'version', tonumber(version) + 1,
           'changed_ms', now[1] * 1000 + math.floor(now[2] / 1000), 'prefixes', ARGV[3])
return 1
"""
# Claims the layout for ARGV[1] (an apply or a re-shard) for ARGV[2] ms of Redis time, unless
# another holds a claim that has not lapsed; with ARGV[3] = '1', renews a claim ARGV[1] still holds
# (and takes none it lost). Returns {1, version, fingerprint} (the group's config as its last apply
# recorded it, '' before the first) or {0, holder ('' for none), ms until its claim lapses}.
_LAYOUT_CLAIM = """
local holder, till, version, found = unpack(redis.call('HMGET', KEYS[1], 'claim', 'claim_until_ms',
                                                       'config_version', 'config_fingerprint'))
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local left = holder and math.max(0, tonumber(till) - now) or 0
if holder ~= ARGV[1] and (left > 0 or ARGV[3] == '1') then return {0, holder or '', left} end
redis.call('HSET', KEYS[1], 'claim', ARGV[1], 'claim_until_ms', now + tonumber(ARGV[2]))
return {1, version or '', found or ''}
"""
# Ends ARGV[1]'s claim; with ARGV[2] (a version) and ARGV[3] (a fingerprint), records them as the
# group's applied config in the same step. 0 when ARGV[1] no longer holds it (it lapsed, and
# another took it).
_LAYOUT_RELEASE = """
if redis.call('HGET', KEYS[1], 'claim') ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'config_version', ARGV[2], 'config_fingerprint', ARGV[3]) end
redis.call('HDEL', KEYS[1], 'claim', 'claim_until_ms')
return 1
"""
GROUP_CONFIG_FIELDS = ("config_version", "config_fingerprint")
# Writes ARGV (the LAYOUT_FIELDS' values) to a copy of the layout, unless the copy holds a newer
# one: by the Redis time of its change, then its version (a layout deleted and made anew starts
# again at v1, later). 1 when it wrote.
_COPY_WRITE = """
local changed, version = unpack(redis.call('HMGET', KEYS[1], 'changed_ms', 'version'))
changed, version = tonumber(changed), tonumber(version)
local at = tonumber(ARGV[4])
if changed and (changed > at or (changed == at and version >= tonumber(ARGV[3]))) then return 0 end
redis.call('HSET', KEYS[1], 'shards', ARGV[1], 'serve', ARGV[2], 'version', ARGV[3], 'changed_ms', ARGV[4],
           'prefixes', ARGV[5])
return 1
"""


class LayoutConflict(RuntimeError):
    """The layout changed between reading it and changing it."""


@dataclass(frozen=True)
class GroupConfig:
    """A sharded group's applied config as its last apply recorded it: shard 0's version, and the
    fingerprint of the config as the group's (:func:`group_fingerprint`, the same on every shard)."""

    version: int
    fingerprint: str


@dataclass(frozen=True)
class ShardedApply:
    """What :meth:`ShardedScheduler.apply` did: the group's config now, and each shard's apply by
    the shard's name, shard 0 first."""

    group: GroupConfig
    shards: Mapping[str, ApplyOutcome]


class GroupBusy(FairnessError):
    """Another apply or re-shard of the group held its claim longer than :data:`CLAIM_WAIT_S`."""


class ApplyLost(ConfigConflict):
    """Another apply came between reading the group's config and applying a new one: it won."""

    def __init__(self, prefix: str, won: GroupConfig) -> None:
        self.won = won
        super().__init__(f"another apply won: config v{won.version} (fingerprint {won.fingerprint}) is applied to "
                         f"queue group {prefix}; run `fairctl config diff` and apply again")


class PartlyApplied(FairnessError):
    """An apply that stopped after some shards took the config: the group runs two configs until
    an apply reaches every shard."""


@dataclass(frozen=True)
class Layout:
    """Where a sharded group's jobs go and are served."""

    shards: int  # new jobs go to shards 0..shards-1
    serve: int  # shards 0..serve-1 may hold jobs (serve >= shards): workers serve them all
    version: int
    changed_ms: int  # Redis time of the last change
    prefixes: tuple[str, ...]  # each shard's name (redis.prefix and hash tag), at least serve of them

    @property
    def recency(self) -> tuple[int, int]:
        """What orders two layouts of a group: the time of the change, then the version (a layout
        deleted and made anew starts at v1 again, later)."""
        return self.changed_ms, self.version


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


def group_fingerprint(applied: Applied, group: str) -> str:
    """The fingerprint of a shard's applied config as its logical queue's, ``group``: the shard's
    own name put back to the group's, and the names its jobs store as codes left out (each shard
    lists them in the order its own history gave them). Every shard running one config shows the
    same one; a shard an apply did not reach shows another."""
    config = applied.config
    return fingerprint(replace(config, redis=replace(config.redis, prefix=group)), applied.moves)


def _recorded(version: bytes | str | None, found: bytes | str | None) -> GroupConfig | None:
    """The group's config from the layout's fields; None before its first apply."""
    return GroupConfig(int(version), decoded(found)) if version and found else None


def _parsed(stored: Sequence[Any]) -> Layout:
    """A layout from the values of its LAYOUT_FIELDS as stored."""
    shards, serve, version, changed, names = stored
    return Layout(int(shards), int(serve), int(version), int(changed), tuple(decoded(names).split(PREFIX_SEP)))


def shard_config(config: Config, shard: int, prefix: str | None = None) -> Config:
    """The config shard ``shard`` runs: the group's, under the shard's name (``prefix``, default
    ``P.shard``), itself unsharded (so each shard's applied config is an ordinary group's,
    fingerprint and all)."""
    name = prefix or shard_prefix(config.redis.prefix, shard)
    return replace(config, redis=replace(config.redis, prefix=name, shards=1, shard_hand=1))


def split_job_id(job_id: str) -> tuple[int, str]:
    """A sharded job id's shard and the shard's own id; InvalidJob naming ``job id`` otherwise."""
    shard, sep, own = str(job_id).partition(JOB_SEP)
    if not sep or not shard.isdigit() or not own.isdigit():
        raise InvalidJob("job id", f"expected a sharded job id such as 3{JOB_SEP}42 (shard, then id), got {job_id!r}")
    return int(shard), own


def choose_shard(dealt: Sequence[int], holds: Sequence[bool], depths: Sequence[int]) -> int:
    """Of a tenant's hand ``dealt``, where its job goes: the first shard where the tenant ``holds``
    jobs of the class queued, else the one whose class has the fewest queued jobs (``depths``),
    the first in the hand on a tie."""
    held = [shard for shard, has in zip(dealt, holds) if has]
    if held:
        return held[0]
    return dealt[min(range(len(dealt)), key=lambda n: (depths[n], n))]


class ShardedScheduler:
    """The :class:`Scheduler` interface over the shards of one sharded queue group."""

    def __init__(self, config: Config, client: Any, *, seed: int | None = None) -> None:
        if config.redis.shards < 1:
            raise ValueError(f"redis.shards: expected at least 1, got {config.redis.shards}")
        self.file_config = self.config = config
        self.client = client
        self.keys = Keys(config.redis.prefix)
        self._schedulers: dict[str, Scheduler] = {}  # by shard name
        self._lock = threading.Lock()
        self._layout: tuple[float, Layout] | None = None
        self._view: tuple[float, list[ShardLoad]] | None = None
        self._looked = -math.inf  # when (monotonic) the view last read every shard
        self._stirred = False  # woken since: the next view reads every shard
        self._woke_next = -math.inf  # when a pop of this process last armed the queue's wake keys
        self._wake_down_until = -math.inf  # the queue's wake keys did not answer: left alone until then
        self._registration: tuple[str, int, float] | None = None  # this worker's: id, slots, ttl
        self._registered_at: dict[int, float] = {}  # when it last registered on each shard (monotonic)
        self._served: dict[str, float] = {}  # jobs this process leased per class (the class weights' account)
        self._eligible: set[str] = set()
        self._random = random.Random(seed)  # where each shard joins this process's rotations
        self._credit: dict[str | None, dict[int, float]] = {}  # the rotations, per class (None: any class)
        self._account = threading.Lock()  # the class weights' account, shared by a worker's slots
        self.health = ShardHealth(self.shard)  # the shards that do not answer, left out for a while
        self.layout_copy: str | None = None  # where the layout was read from while its own master does not answer
        self._copies_of: tuple[int, int] | None = None  # the recency of the layout last written to its copies

    # ------------------------------------------------------------------ shards and layout

    def shard(self, index: int) -> Scheduler:
        """The scheduler of shard ``index`` (one per shard, made on first use)."""
        return self._scheduler(index, self.layout().prefixes[index])

    def _scheduler(self, index: int, prefix: str) -> Scheduler:
        with self._lock:
            if prefix not in self._schedulers:
                self._schedulers[prefix] = Scheduler(shard_config(self.file_config, index, prefix), self.client)
            return self._schedulers[prefix]

    def layout(self, *, fresh: bool = False) -> Layout:
        """The group's layout, re-read at most every :data:`LAYOUT_TTL_S` (``fresh``: now). A group
        with none yet gets one: the config's redis.shards, each shard placed (:meth:`_placed`).
        While the layout's master does not answer, the layout last read goes on; a process that
        has read none yet, or asks ``fresh``, reads the newest copy of it that answers
        (:meth:`_copied`; the one it had, when newer), so a dead master costs its own shards only."""
        now = time.monotonic()
        if not (fresh or self._layout is None or now - self._layout[0] > LAYOUT_TTL_S):
            return self._layout[1]
        try:
            layout = _parsed(self._read_layout())
        except RedisUnavailable as exc:
            if not fresh and self._layout is not None:
                # The layout's master is down: the shards on the others go on where they were.
                self._layout = (now, self._layout[1])
                return self._layout[1]
            layout = self._copied(exc)
            if self._layout is not None and self._layout[1].recency > layout.recency:
                layout = self._layout[1]  # a copy that missed a change this process saw
        else:
            self._from_master(layout)
        if self._layout is None and layout.shards != self.file_config.redis.shards:
            log.warning("queue group %s runs %d shards (its layout v%d, from fairctl reshard), and %s says "
                        "redis.shards: %d: the layout wins; set redis.shards: %d there", self.keys.prefix,
                        layout.shards, layout.version, self.file_config.source or "this process's config",
                        self.file_config.redis.shards, layout.shards)
        self._layout = (now, layout)
        return layout

    def _from_master(self, layout: Layout) -> None:
        """``layout`` was read from its own master: say so when a copy stood in for it, and write it
        to its copies once per version read."""
        self.layout_copy = None
        if _COPY_RUN.pop(self.keys.prefix, None) is not None:
            log.warning("queue group %s: the master holding its layout answers again", self.keys.prefix)
        if self._copies_of != layout.recency:
            self._write_copies(layout)

    def _write_copies(self, layout: Layout) -> None:
        """``layout`` to its copy on each master (a copy of a newer layout is left as it is), for
        processes that start while the layout's own master does not answer. Every process writes
        each version it reads once, so the copies follow a change, a master that was down during
        it and slots moved since; a master that fails is skipped."""
        self._copies_of = layout.recency
        try:
            with redis_errors(self.client):
                keys = self._copy_keys()
        except RedisUnavailable:
            return
        values = (layout.shards, layout.serve, layout.version, layout.changed_ms, PREFIX_SEP.join(layout.prefixes))
        for key in keys:
            with contextlib.suppress(RedisUnavailable, redis.ResponseError), redis_errors(self.client):
                self.client.eval(_COPY_WRITE, 1, key, *values)

    def _copied(self, cause: RedisUnavailable) -> Layout:
        """The newest copy of the layout on the masters that answer (by the time of its change,
        then its version), for a process with none while the layout's own master does not answer:
        said once, until that master answers again. ``cause`` when there are no copies to read
        (off a Cluster, or when the Cluster does not answer at all); RedisUnavailable naming the
        layout's master when no master that answers holds a copy."""
        try:
            with redis_errors(self.client):
                keys = self._copy_keys()
                master = server_of(self.client, self.keys.layout)
        except RedisUnavailable:
            raise cause from None
        if not keys:
            raise cause
        found: list[tuple[Layout, str]] = []
        for key in keys:
            try:
                with redis_errors(self.client):
                    stored = self.client.hmget(key, LAYOUT_FIELDS)
            except RedisUnavailable:
                continue
            if stored[0] is not None:
                found.append((_parsed(stored), server_of(self.client, key)))
        if not found:
            raise RedisUnavailable(f"the layout of queue group {self.keys.prefix} is on {master}, which does not "
                                   "answer, and no master that answers holds a copy of it")
        layout, where = max(found, key=lambda copy: copy[0].recency)
        if self.keys.prefix not in _COPY_RUN:
            log.warning("queue group %s: the master holding its layout (%s) does not answer: running layout v%d from "
                        "its copy on %s, the newest of %d that answered; re-shards and config applies need that "
                        "master", self.keys.prefix, master, layout.version, where, len(found))
        _COPY_RUN[self.keys.prefix] = self.layout_copy = where
        return layout

    def _read_layout(self) -> list[Any]:
        with redis_errors(self.client):
            stored = self.client.hmget(self.keys.layout, LAYOUT_FIELDS)
            if stored[0] is None:
                shards = self.file_config.redis.shards
                names = PREFIX_SEP.join(self._placed(range(shards), ()))
                self.client.eval(_LAYOUT_CREATE, 1, self.keys.layout, shards, names)
                stored = self.client.hmget(self.keys.layout, LAYOUT_FIELDS)
        return list(stored)

    def _placed(self, shards: range, placed: Sequence[str]) -> list[str]:
        """Names for new ``shards``: on a Cluster, each on a master with the fewest of the group's
        shards by the slot map now (:func:`fairness_core.sharding.place`); elsewhere ``P.i``."""
        prefix = self.keys.prefix
        if not isinstance(self.client, ClusterClient):
            return [shard_prefix(prefix, i) for i in shards]
        master_of, masters = self._slot_map()
        return place(prefix, shards, placed, master_of, masters)

    def _copy_keys(self) -> list[str]:
        """The keys of the layout's copies, one on each master by the slot map now, named as shards
        are placed; none off a Cluster (one Redis holds the layout and every shard)."""
        if not isinstance(self.client, ClusterClient):
            return []
        master_of, masters = self._slot_map()
        return [Keys(name).layout for name in place(self.keys.prefix + LAYOUT_COPY, range(len(masters)), (),
                                                    master_of, masters)]

    def _slot_map(self) -> tuple[Callable[[str], str], list[str]]:
        """On a Cluster, the master of a queue group by its name, and the masters holding slots (a
        master without slots takes no shard), by the client's slot map now."""
        client = self.client

        def master_of(name: str) -> str:
            return server_of(client, Keys(name).config)

        return master_of, sorted({f"{nodes[0].host}:{nodes[0].port}"
                                  for nodes in client.cluster().nodes_manager.slots_cache.values() if nodes})

    def served_shards(self) -> range:
        return range(self.layout().serve)

    def masters(self) -> dict[str, list[int]]:
        """The shards the layout serves by the master that holds each (``host:port``), as the
        cluster's slot map says now (placed evenly, they stay so until slots move); {} off a
        Cluster."""
        if not isinstance(self.client, ClusterClient):
            return {}
        held: dict[str, list[int]] = {}
        with redis_errors(self.client):
            for index in self.served_shards():
                held.setdefault(server_of(self.client, self.shard(index).keys.config), []).append(index)
        return held

    def groups(self) -> list[Scheduler]:
        """The queue groups this queue is made of: the schedulers of the shards the layout serves,
        shard 0 first."""
        return [self.shard(i) for i in self.served_shards()]

    def locate(self, job_id: str) -> tuple[int, str]:
        """Which of :meth:`groups` holds ``job_id`` (``shard:id``), and the shard's own id;
        InvalidJob naming ``job id`` for an id of another shape."""
        return split_job_id(job_id)

    def job_id_in(self, group: int, job_id: str) -> str:
        """The queue's id (``shard:id``) of the job ``job_id`` of shard ``group``."""
        return f"{group}{JOB_SEP}{job_id}"

    def _each(self, call: Callable[[Scheduler], T]) -> list[T]:
        return [call(s) for s in self.groups()]

    def _each_live(self, call: Callable[[Scheduler], T]) -> list[T]:
        """``call`` on each served shard that answers (sweeps, registration: a dead shard's turn
        comes when it is back); RedisUnavailable only when none does."""
        return self.health.each(self.served_shards(), lambda i: call(self.shard(i)))

    def reshard(self, shards: int) -> Layout:
        """New jobs go to ``shards`` shards from now on (tenants re-homed by their new hands); the
        shards that held jobs stay served until :meth:`settle` finds them empty. A new shard gets
        the group's applied config (shard 0's) before any job can reach it. Under the group's claim
        (:meth:`apply`): an apply under way is waited for, and its config is the one the new
        shards get; GroupBusy when it takes longer than :data:`CLAIM_WAIT_S`."""
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards: expected a whole number from 1 to {MAX_SHARDS}, got {shards!r}")
        token, _ = self._claim("a re-shard")
        try:
            before = self.layout(fresh=True)
            with redis_errors(self.client):
                names = [*before.prefixes, *self._placed(range(len(before.prefixes), shards), before.prefixes)]
            applied = self.shard(0).read_applied()
            added = [self._scheduler(index, names[index]) for index in range(before.serve, shards)]
            for shard in added:
                if applied is not None:  # also over a config left from when the shard was served before
                    shard.apply(replace(applied.config, redis=replace(applied.config.redis, prefix=shard.keys.prefix)),
                                moves=applied.moves)
            self._copy_paused(added)  # before any job can reach them
            self._change_layout(str(shards), before, names, token)
            self._copy_paused(added)  # and a pause or resume that went shard by shard meanwhile
        finally:
            self._release(token)
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
        layout = self.layout(fresh=True)
        if layout.serve == layout.shards:
            return layout
        with redis_errors(self.client):
            now_s, now_us = self.client.time()
        if now_s * 1000 + now_us // 1000 - layout.changed_ms < 2 * LAYOUT_TTL_S * 1000:
            return layout
        if any(self._holds_jobs(i) for i in range(layout.shards, layout.serve)):
            return layout
        self._change_layout("", layout, layout.prefixes)
        return self.layout(fresh=True)

    def _holds_jobs(self, index: int) -> bool:
        """Shard ``index`` has a job queued, leased or waiting for a retry (its counters say)."""
        with redis_errors(self.client):
            stats = self.client.hgetall(self.shard(index).keys.stats)
        counted = ("depth" + SEP, "inflight" + SEP, "delayed" + SEP)
        return any(decoded(k).startswith(counted) and int(v) != 0 for k, v in stats.items())

    def _change_layout(self, to: str, seen: Layout, names: Sequence[str], claim: str = "") -> None:
        with redis_errors(self.client):
            changed = self.client.eval(_LAYOUT_CHANGE, 1, self.keys.layout, to, seen.version, PREFIX_SEP.join(names),
                                       claim)
        if changed == -1:
            raise LayoutConflict(f"the claim on the layout of {self.keys.prefix} lapsed (held over "
                                 f"{CLAIM_TTL_MS // 1000}s) and another apply or re-shard took it; run this again")
        if not changed:
            raise LayoutConflict(f"the layout of {self.keys.prefix} changed since it was read; read it again and retry")

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
        return self.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting).job_id

    def submit(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False, key: str | None = None) -> Enqueued:
        """As :meth:`Scheduler.submit`; a keyed job goes to the shard of its key (:meth:`shard_of_key`)."""
        index, queued = self._to_hand(task, tenant, tier, user_waiting,
                                      lambda s: s.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting,
                                                         key=key), key=key)
        self.wake([queued.queue])
        return replace(queued, job_id=self.job_id_in(index, queued.job_id))

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False, keys: Sequence[str] | None = None) -> list[Enqueued | None]:
        """All to one shard (the tenant's, as for :meth:`submit`), in one pipelined round trip; with
        ``keys``, each job to the shard of its key, one pipelined submit_many per shard."""
        if keys is not None:
            return self._submit_keyed(task, tenant, payloads, tier, user_waiting, keys)
        index, queued = self._to_hand(task, tenant, tier, user_waiting,
                                      lambda s: s.submit_many(task, tenant, payloads, tier=tier,
                                                              user_waiting=user_waiting))
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
            queued = self.health.call(index, lambda: self.shard(index).submit_many(
                task, tenant, [payloads[n] for n in jobs], tier=tier, user_waiting=user_waiting,
                keys=[keys[n] for n in jobs]))
            for n, q in zip(jobs, queued):
                results[n] = None if q is None else replace(q, job_id=self.job_id_in(index, q.job_id))
        self.wake(sorted({q.queue for q in results if q is not None}))
        return results

    def shard_of_key(self, tenant: str, key: str) -> int:
        """The shard a keyed job of ``tenant`` goes to: one of its hand's, by the key's hash alone
        (not by load), so that every retry of the key reaches the shard that holds its record."""
        return key_shard(self._hand(check_tenant(tenant, self.shard(0).config)), check_key(key))

    def _to_hand(self, task: str, tenant: str, tier: str | None, user_waiting: bool,
                 send: Callable[[Scheduler], T], key: str | None = None) -> tuple[int, T]:
        """``send`` to the shard :meth:`shard_for` chooses; when that shard does not answer, to the
        next of the tenant's hand that does (the tenant's jobs then sit on two shards, each in
        its order). RedisUnavailable naming the hand's shards and masters when none answers. A
        keyed job goes to the shard of its key, and to no other: a retry must find its record."""
        if key is not None:
            index = self.shard_of_key(tenant, key)
            return index, self.health.call(index, lambda: send(self.shard(index)))
        while True:
            index = self.shard_for(task, tenant, tier=tier, user_waiting=user_waiting)
            try:
                return index, self.health.call(index, lambda: send(self.shard(index)))
            except RedisUnavailable:
                if not any(self.health.usable(i) for i in self._hand(tenant)):
                    raise self.health.unavailable(self._hand(tenant), []) from None

    def _hand(self, tenant: str) -> tuple[int, ...]:
        """The tenant's hand: its account's (every key of an account shares one hand), else its own."""
        layout = self.layout()
        party = account_of(tenant, self.file_config.tenants.account_separator)
        return hand(party, layout.shards, min(self.file_config.redis.shard_hand, layout.shards))

    def shard_for(self, task: str, tenant: str, *, tier: str | None = None, user_waiting: bool = False) -> int:
        """The shard a job of ``tenant`` goes to: of its hand's shards that answer, the one where
        the tenant (with accounts, its account) already has jobs of the class queued, else the one
        whose class is least backlogged (first in the hand on a tie). A hand of one costs no read.
        RedisUnavailable, naming each shard of the hand and its master, when none of them answers."""
        config = self.shard(0).config
        tenant = check_tenant(tenant, config)
        dealt = self._hand(tenant)
        party = account_of(tenant, config.tenants.account_separator)
        if len(dealt) == 1:
            return dealt[0]
        queue = classify(config, task, tier=check_tier(tier, config), user_waiting=user_waiting).queue

        def read(pipe: Any, shard: Scheduler) -> None:
            pipe.zscore(shard.keys.class_key(queue, CLASS_PARTS["tags"]), party)
            pipe.hget(shard.keys.stats, f"depth{SEP}{queue}")

        replies = self.health.read(dealt, read, per_shard=2)
        live = [i for i in dealt if i in replies]
        return choose_shard(live, [replies[i][0] is not None for i in live], [int(replies[i][1] or 0) for i in live])

    # ------------------------------------------------------------------ consuming

    def pop(self, max_jobs: int = 1, *, classes: Sequence[str] | None = None, owner: str = "") -> list[Lease]:
        return self.ack_and_pop((), max_jobs, classes=classes, owner=owner).leases

    def ack_and_pop(self, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None, owner: str = "") -> Popped:
        """Complete ``done``, then lease up to ``max_jobs`` jobs of one class from one shard, the
        class and shard chosen as the module says. A done lease of the shard popped from is settled
        in the same call; the others each in a call of their own shard."""
        check_pop(max_jobs, classes)
        by_shard: dict[int, list[tuple[int, Lease | Finished]]] = {}
        for n, item in enumerate(done):
            index, inner = self._inner(item)
            by_shard.setdefault(index, []).append((n, inner))
        acked: list[bool | None] = [None] * len(done)
        leases: list[Lease] = []
        # Popping from the shard of a done lease lets its ack ride along, when the rotation allows.
        choices = list(self.choices(classes, prefer=next(iter(by_shard), None)))
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
                raise
            except RedisUnavailable:
                self.loads()[index].ran_dry(None)
                held = False
                continue
            for (n, _), ok in zip(settle, popped.acked):
                acked[n] = ok
            if popped.leases:
                leases = [replace(lease, job_id=self.job_id_in(index, lease.job_id)) for lease in popped.leases]
                self.count_served(leases)
                self._left_behind(index, popped.leases)
                break
            held = held and popped.held_back
            self.loads()[index].ran_dry(queue)
        return Popped(acked=acked, leases=leases, held_back=held and not leases)

    def choices(self, classes: Sequence[str] | None, *, prefer: int | None = None) -> Iterator[tuple[int, str | None]]:
        """(shard, class) pops to try in turn: the chosen class on the shards with its work, in
        proportion to their queued tenants; then (under fifo, or in case the view was stale)
        the shards with any work, in proportion to their queued jobs, with the worker's
        classes (None: as the shard's own policy chooses). Proportional, not busiest first: the
        busiest shard first would serve a flood's shard alone while every other shard waited.
        ``prefer`` goes first when the rotation owes it a pop."""
        loads = self.loads()
        busy = {i: sum(load.depth.values()) for i, load in enumerate(loads)}
        with self._account:
            queue = self._next_class(loads, classes)
            first = [] if queue is None else self._rotated(
                queue, {i: load.tenant_weight.get(queue, 0) for i, load in enumerate(loads) if load.has_work(queue)},
                prefer)
            rest = self._rotated(None, {i: depth for i, depth in busy.items() if depth > 0}, prefer)
        yield from ((index, queue) for index in first)
        tried = set(first)
        only = None if classes is None else list(classes)
        for index in rest:
            for allowed in ([None] if only is None else only):
                if allowed != queue or index not in tried:
                    yield index, allowed

    def _rotated(self, key: str | None, weights: dict[int, int], prefer: int | None) -> list[int]:
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
        total = sum(max(1, w) for w in weights.values())
        for index, weight in weights.items():
            credit[index] = credit.get(index, self._random.random() * total) + max(1, weight)
        order = sorted(weights, key=lambda i: (i != prefer or credit[i] < 0, -credit[i]))
        if order:
            credit[order[0]] -= total
        return order

    def _next_class(self, loads: list[ShardLoad], classes: Sequence[str] | None) -> str | None:
        """The class the next pop takes, fleet-wide: under the weighted policies the class with
        work furthest behind its weight in this process's account (a class coming back from idle
        starts level with the others, owed nothing for its idle time); under strict, the first
        class with work; under fifo none (each shard's own oldest job)."""
        config = self.shard(0).config
        names = self._classes_of(classes)
        eligible = [c for c in names if any(load.has_work(c) for load in loads)]
        policy = config.scheduler.policy
        if not eligible or policy == "fifo":
            return None
        if policy == "strict":
            return eligible[0]
        weight = {c.name: c.weight for c in config.classes}
        level = min((self._served.get(c, 0.0) / weight[c] for c in eligible if c in self._eligible), default=0.0)
        for c in eligible:
            if c not in self._eligible:
                self._served[c] = max(self._served.get(c, 0.0), level * weight[c])
        self._eligible = set(eligible)
        return min(eligible, key=lambda c: (self._served.get(c, 0.0) + 1) / weight[c])

    def count_served(self, leases: list[Lease]) -> None:
        with self._account:
            for lease in leases:
                self._served[lease.queue] = self._served.get(lease.queue, 0.0) + 1

    def _inner(self, item: Lease | Finished) -> tuple[int, Lease | Finished]:
        lease = item.lease if isinstance(item, Finished) else item
        index, own = self.locate(lease.job_id)
        inner = replace(lease, job_id=own)
        return index, (replace(item, lease=inner) if isinstance(item, Finished) else inner)

    def _route(self, lease: Lease) -> tuple[Scheduler, Lease]:
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
        by_shard: dict[int, list[Lease]] = {}
        for lease in leases:
            index, own = self.locate(lease.job_id)
            by_shard.setdefault(index, []).append(replace(lease, job_id=own))
        return by_shard

    def give_back(self, leases: Sequence[Lease]) -> int:
        """:meth:`Scheduler.give_back`, each on the shard its lease names."""
        return sum(self.shard(index).give_back(inner) for index, inner in self._by_shard(leases).items())

    def reclaim(self, owner: str, held: Sequence[Lease]) -> int:
        """:meth:`Scheduler.reclaim` on each served shard that answers, keeping the leases it holds there."""
        by_shard = self._by_shard(held)
        return sum(self.health.each(self.served_shards(),
                                    lambda index: self.shard(index).reclaim(owner, by_shard.get(index, []))))

    def lease_taken_back(self, job_id: str) -> bool:
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
        look."""
        with contextlib.suppress(RedisUnavailable):
            for name in self._classes_of(classes):
                self._on_wake_keys(lambda: self.client.zadd(self.keys.wake(name), {WAKE_MEMBER: 0}))

    def _classes_of(self, classes: Sequence[str] | None) -> list[str]:
        """The classes whose jobs ``classes`` (all when None) stand for: a class the applied config
        moved stands for the class its jobs went to."""
        moved = self.shard(0).moves.classes
        return list(self.shard(0).config.class_names) if classes is None else [
            *dict.fromkeys(moved.get(c, c) for c in classes)]

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
        names = self.shard(0).config.class_names if classes is None else classes
        return any(load.has_work(c) for load in loads for c in names)

    # ------------------------------------------------------------------ sweeps, registration, control

    def reap(self, limit: int = 1000) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).reap(limit)))

    def promote_overdue(self, limit: int = 1000) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).promote_overdue(limit)))

    def move_pending(self, limit: int = 1000) -> int:
        return sum(self._each_swept(lambda i: self.shard(i).move_pending(limit)))

    def _each_swept(self, call: Callable[[int], T]) -> list[T]:
        """``call`` on each shard the view saw holding jobs and on the first served shard that
        answers (shard 0 while it does: the fleet's slots are read there), of those that answer. A
        shard that holds none has no lease to take back, retry to release or job to age or move."""
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

    # ------------------------------------------------------------------ applies: one group, one config

    def apply(self, config: Config, *, moves: Moves = NO_MOVES, expect: str | None = None) -> ShardedApply:
        """``config`` applied to every shard the layout serves, each under its own name and
        atomically, under the group's claim: applies and re-shards take turns, and each reads the
        layout once it holds the claim, so every shard (the ones a re-shard adds too) ends on the
        last config applied. ``expect``: the fingerprint of :meth:`applied_group` the caller saw
        ('' for none); ApplyLost, naming the config that won, when another apply came between.
        GroupBusy when another holds the claim longer than :data:`CLAIM_WAIT_S`. ConfigRefused,
        changing nothing, when shard 0 refuses ``config``; PartlyApplied when a later shard does,
        or the claim lapsed part way: the shards before it run ``config``."""
        if config.redis.prefix != self.keys.prefix:
            raise ValueError(f"redis.prefix: {config.redis.prefix!r} is another queue group than {self.keys.prefix!r}")
        token, seen = self._claim("an apply")
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
                if done and not self._renew(token):
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
            released = self._release(token, record)
        if not released:
            raise self._partly(done, "the claim on the group lapsed before the apply ended, and another apply or "
                                     "re-shard took it")
        return ShardedApply(record, done)

    def applied_group(self) -> GroupConfig | None:
        """The group's config as its last apply recorded it; None before the first (a new group's
        shards start on the config of the first process that serves them)."""
        with redis_errors(self.client):
            return _recorded(*self.client.hmget(self.keys.layout, GROUP_CONFIG_FIELDS))

    def _claim(self, what: str) -> tuple[str, GroupConfig | None]:
        """Claim the group for ``what`` (an apply or a re-shard), waiting while another holds it, up
        to :data:`CLAIM_WAIT_S` (GroupBusy naming the holder); the claim's token, which names who
        holds it for whoever waits, and the group's config as recorded now."""
        self.layout(fresh=True)  # the claim is a field of the layout, which is made on first use
        token = f"{what} from {socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            with redis_errors(self.client):
                got, first, second = self.client.eval(_LAYOUT_CLAIM, 1, self.keys.layout, token, CLAIM_TTL_MS, "")
            if got:
                return token, _recorded(first, second)
            if time.monotonic() >= deadline:
                raise GroupBusy(f"queue group {self.keys.prefix} is being changed by {decoded(first)}, still after "
                                f"{CLAIM_WAIT_S:g}s (if its process died, its claim lapses in "
                                f"{int(second) / 1000:.0f}s): run this again once it is done")
            time.sleep(CLAIM_POLL_S)

    def _renew(self, token: str) -> bool:
        """Whether ``token`` still held the group's claim, now renewed for another :data:`CLAIM_TTL_MS`."""
        with redis_errors(self.client):
            return bool(self.client.eval(_LAYOUT_CLAIM, 1, self.keys.layout, token, CLAIM_TTL_MS, "1")[0])

    def _release(self, token: str, record: GroupConfig | None = None) -> bool:
        """End ``token``'s claim, recording ``record`` as the group's config; whether it still held it."""
        version, found = ("", "") if record is None else (record.version, record.fingerprint)
        with redis_errors(self.client):
            return bool(self.client.eval(_LAYOUT_RELEASE, 1, self.keys.layout, token, version, found))

    def _partly(self, done: Mapping[str, ApplyOutcome], why: str) -> PartlyApplied:
        return PartlyApplied(f"the apply stopped part way: {why}. Shards {', '.join(done)} of queue group "
                             f"{self.keys.prefix} run the new config and the others their old one until an apply "
                             "reaches every shard: apply again once the cause is fixed")
