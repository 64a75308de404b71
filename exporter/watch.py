"""The exporter for a job system fairctl does not run (the config's ``watch``): the metric contract
read from that system's own keys, for the metrics it can supply (exporter/sources), with the same
config gauges and health series as for fairctl's queues, and Redis's memory from the one INFO a
scrape already sends for the master's run_id. It only ever reads their Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import redis
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from fairness_core import Config, MemoryInfo
from fairness_core.connection import ClusterClient, server_of
from fairness_core.memory import memory_from_info
from fairness_core.version import fairctl_version

from . import metrics as m
from .collector import (
    FairnessCollector,
    Families,
    Master,
    ScrapeHealth,
    SnapshotReader,
    add_config,
    scrape_client,
    weight_ratios,
)
from .config import serving
from .sources import WatchConfig, source_for, watched
from .sources.base import ClassReading, Source, tenant_figures

# (epoch seconds of the read, a reading per class, Redis's memory: None once INFO was refused)
Reading = tuple[float, Mapping[str, ClassReading], MemoryInfo | None]


def watch_client(config: Config) -> redis.Redis:
    """The scrape client of the watched system's Redis (``watch.url``, else ``redis.url``): one
    node, as Celery, RQ and Sidekiq run on (ValueError for a Cluster URL); a Sentinel URL gives
    fairctl's own Sentinel client, which finds the master again after a failover."""
    client = scrape_client(config, _watch(config).url)
    if isinstance(client, ClusterClient):
        raise ValueError("watch.url: a Redis Cluster URL; the watched system's queues are read from one Redis node")
    return client


def _watch(config: Config) -> WatchConfig:
    watch = watched(config)
    assert watch is not None, "a watch collector needs the config's watch section"
    return watch


class WatchCollector(Collector):
    """Serves what ``source`` reads, one read per scrape under the scrape budget."""

    def __init__(self, config: Config, client: redis.Redis, source: Source | None = None) -> None:
        watch = _watch(config)
        self.config, self.client = config, client
        self.source = source or source_for(watch)
        self._specs = [spec for spec in m.FROM_REDIS if spec.name in self.source.supplies]
        self._ratios = weight_ratios(config)
        self._reader: SnapshotReader[Reading] = SnapshotReader(self._read)
        self._health = ScrapeHealth(f"{watch.system}'s queues")
        self._master: Master | None = None  # the master last read, with its run_id
        self._info_refused = False  # INFO is refused to the user (a read-only ACL without +info)

    def _read(self) -> Reading:
        now = time.time()
        classes = self.source.read(self.client, now)
        run_id, memory = self._info()
        self._master = Master(server_of(self.client, ""), run_id)
        return now, classes, memory

    def _info(self) -> tuple[str, MemoryInfo | None]:
        """The server's run_id and its memory (INFO server, memory and stats: one command a
        scrape), or ("", None) once INFO was refused: the master's address alone then tells a
        failover (RedisMasterChanged), not a restart, and no memory series is served."""
        if not self._info_refused:
            try:
                reply = self.client.info("server", "memory", "stats")
                return str(reply["run_id"]), memory_from_info(reply)
            except redis.exceptions.NoPermissionError:
                self._info_refused = True
        return "", None

    def describe(self) -> Iterator[Metric]:
        return (spec.family() for spec in (*self._specs, *m.WHERE, *m.FROM_CONFIG, *m.EXPORTER_HEALTH))

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        families = Families(m.group_of(self.config), m.group_of(self.config))
        reading = self._health.read(self._reader, serving(self.config).scrape_timeout)
        if reading is not None:
            self._add_reading(families, *reading)
        master = self._master or Master(server_of(self.client, ""))
        families.add(m.REDIS_MASTER, 1, master=master.address, run_id=master.run_id)
        add_config(families, self.config, self._ratios)
        self._health.add(families, reading is not None)
        families.add(m.EXPORTER_BUILD_INFO, 1, version=fairctl_version(), charge=self.config.scheduler.charge)
        families.add(m.EXPORTER_SCRAPE_DURATION, time.monotonic() - started)
        return iter(families)

    def _add_reading(self, families: Families, now: float, classes: Mapping[str, ClassReading],
                     memory: MemoryInfo | None) -> None:
        supplies, exporter = self.source.supplies, self.config.exporter
        topk, sampled_tenants = exporter.topk_tenants, _watch(self.config).tenant is not None

        def age(at: float | None) -> float:
            return max(0.0, now - at) if at is not None else 0.0

        for name, r in classes.items():
            families.add(m.QUEUE_DEPTH, r.depth, queue=name)
            if m.QUEUE_OLDEST_AGE.name in supplies:
                families.add(m.QUEUE_OLDEST_AGE, age(r.oldest_enqueued), queue=name)
            if m.QUEUE_INFLIGHT.name in supplies and r.inflight is not None:
                families.add(m.QUEUE_INFLIGHT, r.inflight, queue=name)
            if m.JOBS_PROCESSED.name in supplies and r.processed is not None:
                families.add(m.JOBS_PROCESSED, r.processed, queue=name)
            if m.QUEUE_TENANT_SHARE.name in supplies and r.tenants:
                sampled = sum(n for _, n in r.tenants)
                for tenant, n in r.tenants[:topk]:
                    families.add(m.QUEUE_TENANT_SHARE, n / sampled, queue=name, tenant=tenant)
            if m.QUEUE_PAUSED.name in supplies and r.paused is not None:
                families.add(m.QUEUE_PAUSED, 1 if r.paused else 0, queue=name)
            if m.JOBS_DEAD_LETTERED.name in supplies and r.dead_lettered is not None:
                families.add(m.JOBS_DEAD_LETTERED, r.dead_lettered, queue=name)
            if m.JOBS_WAIT.name in supplies and r.waits is not None:
                families.add_histogram(m.JOBS_WAIT, r.waits.counts, r.waits.total, queue=name)
            if sampled_tenants:  # the tenant sample's figures: none without a tenant path
                figures = tenant_figures(r.sample, r.depth, exporter.noisy_min_queued)
                if m.QUEUE_ACTIVE_TENANTS.name in supplies:
                    families.add(m.QUEUE_ACTIVE_TENANTS, figures.active, queue=name)
                if m.QUEUE_QUIET_OLDEST_AGE.name in supplies:
                    families.add(m.QUEUE_QUIET_OLDEST_AGE, age(figures.quiet_oldest), queue=name)
                if m.TENANT_OLDEST_AGE.name in supplies:
                    for tenant, at in figures.oldest[:topk]:
                        families.add(m.TENANT_OLDEST_AGE, age(at), queue=name, tenant=tenant)
        dead_letters = getattr(classes, "dead_letters", None)
        if m.DEAD_LETTERS.name in supplies and dead_letters is not None:
            families.add(m.DEAD_LETTERS, dead_letters)
        if memory is not None and m.REDIS_MEMORY_USED.name in supplies:
            FairnessCollector._add_memory(families, memory)  # as for fairctl's own queues

