"""One exporter for several queue groups (``fairctl exporter --config a.yaml --config b.yaml``, or
the shards of a sharded queue).

Each group keeps its own collector, Redis client and scrape budget; a scrape reads them all at
once, so it takes about one group's time, not their sum, and a group whose Redis is away answers
``fairness_exporter_redis_up{group=...} 0`` without holding up the others. Their families are
merged by name, so the exposition has one HELP and TYPE per metric whose samples every group
adds to, told apart by their ``group`` label.

A queue's groups follow its layout (:class:`QueueCollector`): the shards a re-shard
adds are served from the next scrape on, and those a settle retires are gone from it, with no
restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol
from concurrent.futures import ThreadPoolExecutor

import redis
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from fairness_core import Config, RedisUnavailable
from fairness_core.config import MAX_SHARDS
from fairness_core.layout import Layout
from fairness_core.queue import Queue, shard_config

from . import metrics as m
from .collector import (
    FairnessCollector,
    SnapshotReader,
    SnapshotTimeout,
    group_collector,
    scrape_client,
    snapshot_deadline,
)
from .config import serving

log = logging.getLogger(__name__)

# Of a scrape's snapshot deadline, the part reading a sharded queue's layout may take; its shards
# are read in what is left.
LAYOUT_SHARE = 0.25


class Describing(Protocol):
    """A collector that also describes its families without reading (every collector here does)."""

    def describe(self) -> Iterator[Metric]: ...

    def collect(self) -> Iterator[Metric]: ...


class GroupsCollector(Collector):
    def __init__(self, collectors: Sequence[Describing]) -> None:
        self.collectors = tuple(collectors)
        self._pool = ThreadPoolExecutor(max_workers=len(self.collectors), thread_name_prefix="exporter-group")

    def describe(self) -> Iterator[Metric]:
        return iter(merged(list(c.describe()) for c in self.collectors))

    def collect(self) -> Iterator[Metric]:
        return iter(merged(self._pool.map(lambda c: list(c.collect()), self.collectors)))


class QueueCollector(Collector):
    """A queue's groups (a sharded queue's shards), each read by a collector of its own (its own client and budget,
    all at once), as its layout says at each scrape: the layout is read again first (one HMGET
    on its master, or its newest copy while that master does not answer; see
    :meth:`fairness_core.queue.Queue.layout`), within :data:`LAYOUT_SHARE` of the budget. A layout
    not read in time leaves the shards as they were. ``groups``: the shards at start."""

    def __init__(self, config: Config, groups: Sequence[Config]) -> None:
        self.config = config
        self.queue = Queue(config, scrape_client(config))
        self._shards = {group.redis.prefix: group_collector(group, config.redis.prefix) for group in groups}
        self._layouts = SnapshotReader(lambda: self.queue.layout(fresh=True))
        self._lock = threading.Lock()
        self._unread = False  # the last scrape could not read the layout (said once)
        self._pool = ThreadPoolExecutor(max_workers=MAX_SHARDS, thread_name_prefix="exporter-shard")

    def describe(self) -> Iterator[Metric]:
        """The contract's families, as each shard's collector describes them (no Redis read)."""
        return (spec.family() for spec in m.ALL)

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        shards = self._follow()
        spent = time.monotonic() - started
        return iter(merged(self._pool.map(lambda shard: list(shard.collect(spent)), shards)))

    def _follow(self) -> list[FairnessCollector]:
        """The shards' collectors as the layout says now: made for the shards it adds, dropped for
        those it no longer serves; as they were when it cannot be read in time."""
        current = list(self._shards.values())
        try:
            layout = self._layouts.read(snapshot_deadline(serving(current[0].config).scrape_timeout) * LAYOUT_SHARE)
        except (SnapshotTimeout, RedisUnavailable, redis.RedisError) as exc:
            if not self._unread:
                log.warning("cannot read the layout of queue %s: %s; serving its shards as they were (%s)",
                            self.config.redis.prefix, exc, ", ".join(self._shards))
            self._unread = True
            return current
        except Exception:  # a bug must not cost the shards' series
            log.exception("reading the layout of queue %s failed", self.config.redis.prefix)
            return current
        if self._unread:
            log.info("read the layout of queue %s again", self.config.redis.prefix)
            self._unread = False
        return self._served(layout)

    def _served(self, layout: Layout) -> list[FairnessCollector]:
        names = layout.prefixes[:layout.serve]
        with self._lock:
            if tuple(self._shards) != names:
                self._shards = {name: self._shards.get(name)
                                or group_collector(shard_config(self.config, i, name), self.config.redis.prefix)
                                for i, name in enumerate(names)}
                log.info("queue %s: layout v%d, serving %d shards: %s", self.config.redis.prefix, layout.version,
                         len(names), ", ".join(names))
            return list(self._shards.values())


def merged(groups: Iterable[list[Metric]]) -> list[Metric]:
    """The groups' families as one list: a family of a name seen before adds its samples to it."""
    out: dict[str, Metric] = {}
    for families in groups:
        for family in families:
            if family.name in out:
                out[family.name].samples.extend(family.samples)
            else:
                out[family.name] = family
    return list(out.values())
