"""A sharded queue's layout: how many shards take new jobs and are served, and their names, kept
under the queue's own hash tag, with a copy on each master of a Cluster, and the claim that applies
and re-shards take turns under.

- **The layout** is made on first use from the config's ``redis.shards``, each new shard named to
  sit on a master holding the fewest of the queue's shards (``P.i``, else ``P.i-1``, ...:
  :func:`fairness_core.sharding.place`). Each process writes every version of it it reads to a copy
  on each master: a process that starts while the layout's master is down runs the newest copy
  that answers, so it serves the shards on the masters that are up (:meth:`LayoutStore.layout`).
- **Applies and re-shards take turns** under a claim in the layout (:meth:`LayoutStore.claim`):
  each one reads the layout after claiming it, so every shard, the ones a re-shard adds too, ends
  on the queue's last applied config, and an apply that read the config before another one was
  applied is refused, naming the one that won. A claim whose holder died lapses after
  :data:`CLAIM_TTL_MS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from .config import Config
from .config_store import Applied, ConfigConflict, fingerprint
from .connection import ClusterClient, redis_errors, server_of
from .jobs import FairnessError, RedisUnavailable, decoded
from .keys import LAYOUT_COPY, Keys
from .sharding import place, shard_prefix

log = logging.getLogger("fairctl.config")

LAYOUT_TTL_S = 1.0  # how often a process re-reads the layout (where new jobs go)
CLAIM_TTL_MS = 60_000  # a claim on the layout lapses this long after it was taken or renewed: its holder died
CLAIM_WAIT_S = 10.0  # how long an apply or a re-shard waits for another's claim (one takes well under a second)
CLAIM_POLL_S = 0.02  # how often a waiting one asks again
# The groups this process runs a copy of the layout of, while its master does not answer: said once
# a process, however many of its queues read it (a command's, its exporter's).
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



def fixed_layout(prefix: str) -> Layout:
    """The layout of a queue of one group (``redis.shards`` 1): that group, under the queue's own
    name, never changed and never stored."""
    return Layout(1, 1, 0, 0, (prefix,))


class LayoutStore:
    """A sharded queue's layout in Redis (read, made on first use, copied to every master) and the
    claim its applies and re-shards take turns under; ``config`` is the queue's file config."""

    def __init__(self, config: Config, client: Any) -> None:
        self.file_config = config
        self.client = client
        self.keys = Keys(config.redis.prefix)
        self._layout: tuple[float, Layout] | None = None
        self.layout_copy: str | None = None  # where the layout was read from while its own master does not answer
        self._copies_of: tuple[int, int] | None = None  # the recency of the layout last written to its copies

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
                names = PREFIX_SEP.join(self.placed(range(shards), ()))
                self.client.eval(_LAYOUT_CREATE, 1, self.keys.layout, shards, names)
                stored = self.client.hmget(self.keys.layout, LAYOUT_FIELDS)
        return list(stored)

    def placed(self, shards: range, placed: Sequence[str]) -> list[str]:
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

    def seen_by_all(self, layout: Layout) -> bool:
        """Whether every process has had time to read ``layout`` since its change (two re-reads of
        :data:`LAYOUT_TTL_S`, by Redis's clock)."""
        with redis_errors(self.client):
            now_s, now_us = self.client.time()
        return bool(now_s * 1000 + now_us // 1000 - layout.changed_ms >= 2 * LAYOUT_TTL_S * 1000)

    def change(self, to: str, seen: Layout, names: Sequence[str], claim: str = "") -> None:
        with redis_errors(self.client):
            changed = self.client.eval(_LAYOUT_CHANGE, 1, self.keys.layout, to, seen.version, PREFIX_SEP.join(names),
                                       claim)
        if changed == -1:
            raise LayoutConflict(f"the claim on the layout of {self.keys.prefix} lapsed (held over "
                                 f"{CLAIM_TTL_MS // 1000}s) and another apply or re-shard took it; run this again")
        if not changed:
            raise LayoutConflict(f"the layout of {self.keys.prefix} changed since it was read; read it again and retry")

    def applied_group(self) -> GroupConfig | None:
        """The group's config as its last apply recorded it; None before the first (a new group's
        shards start on the config of the first process that serves them)."""
        with redis_errors(self.client):
            return _recorded(*self.client.hmget(self.keys.layout, GROUP_CONFIG_FIELDS))

    def claim(self, what: str) -> tuple[str, GroupConfig | None]:
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

    def renew(self, token: str) -> bool:
        """Whether ``token`` still held the group's claim, now renewed for another :data:`CLAIM_TTL_MS`."""
        with redis_errors(self.client):
            return bool(self.client.eval(_LAYOUT_CLAIM, 1, self.keys.layout, token, CLAIM_TTL_MS, "1")[0])

    def release(self, token: str, record: GroupConfig | None = None) -> bool:
        """End ``token``'s claim, recording ``record`` as the group's config; whether it still held it."""
        version, found = ("", "") if record is None else (record.version, record.fingerprint)
        with redis_errors(self.client):
            return bool(self.client.eval(_LAYOUT_RELEASE, 1, self.keys.layout, token, version, found))

