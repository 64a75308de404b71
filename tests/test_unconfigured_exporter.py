"""The exporter's side of classes the config does not name and of Redis's memory, with hand-built
snapshots read through a real Scheduler's client (so INFO comes from a real redis-server): what is
served, bounded how, and that the collector follows the scheduler's config from scrape to scrape."""

from __future__ import annotations

import dataclasses

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from exporter import metrics as m
from exporter.collector import FairnessCollector
from fairness_core import Config, Snapshot
from fairness_core.scheduler import Scheduler
from fairness_core.layout import group_fingerprint
from fairness_core.snapshot import UnconfiguredClass

from .conftest import make_config
from .exporter_support import Scrape, parse, promtool_check_metrics
from .test_exporter_collector import idle_snapshot


class HandBuilt(Scheduler):
    """A real Scheduler (its client reads INFO) whose snapshot is the one the test sets."""

    current: Snapshot

    def snapshot(self) -> Snapshot:
        return self.current


def scrape_of(collector: Collector) -> Scrape:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return Scrape(text, parse(text), 0.0, 0.0)


def hand_built(client: redis.Redis, config: Config, **unconfigured: UnconfiguredClass) -> tuple[HandBuilt, FairnessCollector]:
    scheduler = HandBuilt(config, client)
    scheduler.current = dataclasses.replace(idle_snapshot(config), unconfigured={u.name: u for u in unconfigured.values()})
    return scheduler, FairnessCollector(config, scheduler, version="test")


def test_jobs_under_a_class_the_config_does_not_name_are_served_by_state(client: redis.Redis) -> None:
    config = make_config()
    old = UnconfiguredClass("jobs:bulk", depth=40, inflight=3, delayed=2, oldest_age=7200.0)
    _, collector = hand_built(client, config, old=old)
    scrape = scrape_of(collector)
    assert scrape.series(m.UNCONFIGURED_JOBS.name) == {
        ((m.QUEUE, "jobs:bulk"), (m.STATE, "delayed")): 2, ((m.QUEUE, "jobs:bulk"), (m.STATE, "inflight")): 3,
        ((m.QUEUE, "jobs:bulk"), (m.STATE, "queued")): 40}
    assert scrape.series(m.UNCONFIGURED_OLDEST_AGE.name) == {((m.QUEUE, "jobs:bulk"),): 7200.0}
    # The configured classes' own series are untouched, and none of them is called unconfigured.
    assert scrape.value(m.QUEUE_DEPTH.name, queue="jobs:high") == 0
    assert scrape.get(m.QUEUE_DEPTH.name, queue="jobs:bulk") is None
    checked = promtool_check_metrics(scrape.text)
    assert checked.returncode == 0 and not checked.stdout, checked.stdout + checked.stderr


def test_no_unconfigured_class_no_series(client: redis.Redis) -> None:
    names = scrape_of(hand_built(client, make_config())[1]).names()
    assert not names & {spec.name for spec in m.UNCONFIGURED}


def test_at_most_the_fullest_unconfigured_classes_are_served(client: redis.Redis) -> None:
    many = {f"c{i}": UnconfiguredClass(f"old:{i:02d}", depth=i, inflight=0, delayed=0, oldest_age=1.0)
            for i in range(1, m.MAX_UNCONFIGURED + 11)}
    _, collector = hand_built(client, make_config(), **many)
    served = {dict(labels)[m.QUEUE] for labels in scrape_of(collector).series(m.UNCONFIGURED_OLDEST_AGE.name)}
    assert served == {f"old:{i:02d}" for i in range(11, m.MAX_UNCONFIGURED + 11)}


def test_redis_memory_is_served_from_info(client: redis.Redis) -> None:
    _, collector = hand_built(client, make_config())
    client.config_set("maxmemory", 512 * 1048576)
    try:
        scrape = scrape_of(collector)
    finally:
        client.config_set("maxmemory", 0)
    assert 0 < scrape.value(m.REDIS_MEMORY_USED.name) < 512 * 1048576
    assert scrape.value(m.REDIS_MEMORY_MAX.name) == 512 * 1048576
    assert scrape.series(m.REDIS_MEMORY_POLICY.name) == {((m.POLICY, "noeviction"),): 1}
    assert scrape.value(m.REDIS_EVICTED_KEYS.name) == 0


def test_the_collector_follows_the_schedulers_config_and_derives_only_on_a_change(client: redis.Redis) -> None:
    config = make_config()
    scheduler, collector = hand_built(client, config)
    assert scrape_of(collector).value(m.QUEUE_WEIGHT_RATIO.name, queue="jobs:high") == pytest.approx(0.7)
    derived = collector._weight_ratio
    scrape_of(collector)
    assert collector._weight_ratio is derived, "same config object: nothing recomputed"
    heavier = dataclasses.replace(config.classes[2], weight=70)
    scheduler.config = dataclasses.replace(config, classes=(*config.classes[:2], heavier))
    scrape = scrape_of(collector)
    assert scrape.value(m.QUEUE_WEIGHT_RATIO.name, queue="jobs:low") == pytest.approx(70 / 160)
    assert scrape.value(m.QUEUE_WEIGHT_RATIO.name, queue="jobs:high") == pytest.approx(70 / 160)


def test_a_live_scrape_names_its_master_counts_resets_and_the_groups_config(client: redis.Redis) -> None:
    """The info gauges read 1 and the reset counter 0 on a Redis that kept its state; the master is
    the server the client reached, and the group's fingerprint is the applied config's as the group's."""
    scheduler, collector = hand_built(client, make_config())
    scrape = scrape_of(collector)
    reached = client.connection_pool.connection_kwargs
    run_id = client.info("server")["run_id"]
    assert scrape.series(m.REDIS_MASTER.name) == {
        ((m.MASTER, f"{reached['host']}:{reached['port']}"), (m.RUN_ID, run_id)): 1}
    assert scrape.value(m.STATE_RESETS.name) == 0
    fingerprint = group_fingerprint(scheduler.applied or scheduler.sync(), collector.group)
    assert scrape.series(m.GROUP_CONFIG.name) == {((m.FINGERPRINT, fingerprint),): 1}
