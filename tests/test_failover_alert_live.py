"""A failover is seen and paged, live: a Sentinel group (a master, a replica, three sentinels on
loopback), a queue on its ``redis+sentinel://`` URL holding jobs, the exporter on that URL scraped
every second by a real Prometheus evaluating the generated rules. Before the kill,
RedisMasterChanged stays inactive through many evaluations; after ``kill_master()`` the same
exporter (no restart) reads the promoted replica, serves its address and run_id and the same jobs,
and the alert fires. The same for an exporter watching RQ queues on the Sentinel URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from rq import Queue as RqQueue

from alerts.output import rules_text
from alerts.promql import selector
from alerts.rules import REDIS_MASTER_CHANGED
from exporter import metrics as m
from exporter.watch import watch_client
from fairness_core import Config, Queue, load_config, redis_client
from fairness_stack.sentinel import SentinelGroup

from .conftest import EXAMPLE_CONFIG, make_config
from .exporter_support import Prometheus, Scrape, running_exporter, scrape
from .support import wait_for
from .watch_support import alerting

JOBS = 20
FOR = "2s"  # RedisMasterChanged's for:, shortened (Prometheus scrapes and evaluates every second)
QUIET_EVALUATIONS = 10  # evaluations of the rules with one master that must raise nothing
SETTLE_S, FIRE_S = 60, 90  # bounds of a hung test only: a failover takes a few seconds here
ALERTS = {"for": {REDIS_MASTER_CHANGED: FOR}}


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        yield group


def identity(port: int) -> tuple[str, str]:
    """The ``master`` and ``run_id`` labels the exporter must serve for the server on ``port``."""
    return f"127.0.0.1:{port}", str(redis.Redis(port=port).info("server")["run_id"])


def served_master(got: Scrape) -> tuple[str, str] | None:
    """The master a scrape names, when it read Redis; None when it could not."""
    if got.value(m.EXPORTER_REDIS_UP.name) != 1:
        return None
    (labels, _), = got.series(m.REDIS_MASTER.name).items()
    return dict(labels)[m.MASTER], dict(labels)[m.RUN_ID]


def alert_states(prometheus: Prometheus) -> list[dict[str, Any]]:
    """RedisMasterChanged as Prometheus's /api/v1/alerts lists it (pending or firing)."""
    return [a for a in prometheus.api("alerts", {})["alerts"] if a["labels"]["alertname"] == REDIS_MASTER_CHANGED]


def evaluations_with_master(prometheus: Prometheus) -> float:
    """How many scrapes Prometheus holds of a master whose run_id was read."""
    got = prometheus.query(f'count_over_time({m.REDIS_MASTER.name}{{{m.RUN_ID}!=""}}[1h])')
    return max((value for _, value in got), default=0.0)


def failover_is_paged(group: SentinelGroup, metrics_url: str, prometheus: Prometheus, depth: str) -> None:
    """The exporter at ``metrics_url`` on the group's URL, scraped by ``prometheus``: quiet with one
    master, then after the master is killed it serves the new master (``depth``'s jobs still
    there) and RedisMasterChanged fires for its shard, naming that master."""
    old = group.master_port()
    assert old is not None
    (new,) = [server.port for server in group.servers if server.port != old]
    before = identity(old)
    wait_for(lambda: served_master(scrape(metrics_url)) == before, SETTLE_S, "the exporter to name the master")
    wait_for(lambda: evaluations_with_master(prometheus) >= QUIET_EVALUATIONS, SETTLE_S,
             f"{QUIET_EVALUATIONS} scrapes of the master in Prometheus")
    assert alert_states(prometheus) == []
    assert prometheus.query(f"count_over_time({selector('ALERTS', alertname=REDIS_MASTER_CHANGED)}[1h])") == []
    jobs = scrape(metrics_url).series(depth)

    wait_for(lambda: group.replica_in_sync(new), SETTLE_S, "the replica to catch up before the kill")
    assert group.kill_master() == old
    after = identity_when_promoted(new)
    wait_for(lambda: served_master(scrape(metrics_url)) == after, SETTLE_S,
             "the same exporter to read the promoted replica")
    assert scrape(metrics_url).series(depth) == jobs, "the jobs were replicated before the kill"

    wait_for(lambda: [a["state"] for a in alert_states(prometheus)] == ["firing"], FIRE_S,
             f"{REDIS_MASTER_CHANGED} firing")
    (fired,) = alert_states(prometheus)
    assert fired["labels"][m.SHARD] and fired["labels"]["severity"] == "critical"
    assert f"on {after[0]} now" in fired["annotations"]["description"]


def identity_when_promoted(port: int) -> tuple[str, str]:
    """The identity of the server on ``port`` once it is the master (its run_id does not change
    with its role: promotion is no restart)."""
    wait_for(lambda: redis.Redis(port=port).info("replication")["role"] == "master", SETTLE_S,
             "the sentinels to promote the replica")
    return identity(port)


def test_the_exporter_follows_a_failover_and_pages_it(sentinel_group: SentinelGroup, tmp_path: Path) -> None:
    group = sentinel_group
    config = make_config(redis={"url": group.url}, exporter={"scrape_timeout": "800ms"}, alerts=ALERTS)
    queue = Queue(config, redis_client(group.url))
    for i in range(JOBS):
        queue.submit("password_reset", f"tenant-{i % 4}")
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    with running_exporter(config) as exporter, \
            Prometheus([exporter.url.split("/")[2]], tmp_path, (rules,)) as prometheus:
        failover_is_paged(group, exporter.url, prometheus, m.QUEUE_DEPTH.name)


def rq_watch(tmp_path: Path, url: str) -> Config:
    """Two classes over two RQ queues on ``url``, with RedisMasterChanged's for: shortened."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": "rq:interactive", "weight": 70, "max_age": "1h"},
                       {"name": "rq:bulk", "weight": 30, "max_age": "1h"}]
    del data["classification"]
    data["exporter"] = {**data.get("exporter", {}), "scrape_timeout": "800ms"}
    data["alerts"] = {**data.get("alerts", {}), **ALERTS}
    data["watch"] = {"system": "rq", "url": url, "tenant": "args.0",
                     "classes": {"rq:interactive": ["interactive"], "rq:bulk": ["bulk"]}}
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_a_watch_exporter_on_a_sentinel_url_reads_rq_and_follows_a_failover(sentinel_group: SentinelGroup,
                                                                             tmp_path: Path) -> None:
    group = sentinel_group
    config = rq_watch(tmp_path, group.url)
    bulk = RqQueue("bulk", connection=watch_client(config))
    for i in range(JOBS):
        bulk.enqueue("tests.watch_rq_tasks.work", f"tenant-{i % 3}", n=i)
    with alerting(config, tmp_path) as (exporter, prometheus):
        assert scrape(exporter.url).value(m.QUEUE_DEPTH.name, queue="rq:bulk") == JOBS
        failover_is_paged(group, exporter.url, prometheus, m.QUEUE_DEPTH.name)
