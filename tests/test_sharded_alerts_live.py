"""The generated alerts judge a sharded queue as one logical queue, live: a real Prometheus loads
the generated rules and scrapes ``fairctl exporter --config sharded.yaml`` serving a 6-shard queue
on a 3-master loopback Redis Cluster, every class backlogged throughout, the classes placed
unevenly over the shards. Shard 0 holds one urgent tenant of twenty beside most of the bulk
class: judged alone, it realises far less of jobs:high than the weight entitles it to, as an
operator saw when the rules judged each shard and QueueShareBelowWeight fired falsely there.

1. Workers serving the weights fleet-wide: the logical shares are the weights, every shard's raw
   series are there, shard 0 on its own falls below jobs:high's weight, and yet no share or
   starvation alert is pending or firing over ten rate windows.
2. A pool serving only the bulk class on three shards, beside one small fleet-wide worker:
   QueueShareBelowWeight fires for jobs:high once, naming the logical queue and no shard.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from alerts import recording as rec
from alerts.config import alert_settings
from alerts.output import rules_text
from alerts.promql import selector
from alerts.rules import (
    PRIORITY_INVERSION,
    QUEUE_SHARD_STALLED,
    QUEUE_SHARE_BELOW_WEIGHT,
    QUEUE_STALLED,
    QUEUE_STARVING,
    QUIET_TENANTS_STARVING,
    TENANT_DOMINATING_QUEUE,
    WARNING,
    build_alerts,
)
from exporter import metrics as m
from fairctl.handlers import sleep_handlers
from fairness_core import Config, redis_client
from fairness_core.queue import Queue, shard_config
from fairness_core.worker import Worker
from fairness_stack.servers import RedisClusterServers

from .conftest import make_config
from .exporter_support import Prometheus
from .support import running, wait_for, write_config
from .test_groups import one_exporter_for_both
from .test_sharded import PLAIN_CLASSES, TASKS, WEIGHTS, tenants_homed

SHARDS = 6
# Tenants per class on each shard (hands of one: a tenant's jobs all go to its home shard). Served
# fleet-wide, jobs:high's one tenant on shard 0 gets 70% / 20 = 3.5% of the work and shard 0's
# bulk tenants 10% x 8/10 = 8%: within shard 0, jobs:high realises 30% against the 87.5% its
# weight entitles it to beside jobs:low alone.
PLACED = {"jobs:high": {0: 1, 1: 7, 2: 7, 3: 5}, "jobs:medium": {3: 2, 4: 4, 5: 4}, "jobs:low": {0: 8, 1: 1, 2: 1}}
LOW_SHARDS = sorted(PLACED["jobs:low"])  # where the forced pool serves jobs:low alone
# The config's windows, compressed: every rate and share over 3 s (Prometheus scrapes and
# evaluates every second), tenant shares over 5 s, a stall after 6 s, QueueShareBelowWeight's for: 2 s.
WINDOW_S, TENANT_WINDOW_S, STALL_S, FOR_S = 3, 5, 6, 2
OBSERVED_WINDOWS = 10
# Each job's sleep: the fair run's 12 worker slots complete at most 150 jobs/s, 450 a window, which
# judges the shares to a few points and leaves the CPU to the live drills that run beside this.
SERVICE_S = 0.08
# Jobs per tenant: a jobs:high tenant gets at most 150/s x 70% / 20 = 5.3 jobs/s in the fair run,
# a lone jobs:low tenant 12.5/s from its pool in the forced one: 800 outlast the runs, and the end
# of each test checks that every shard's classes are still backlogged.
JOBS = 800
# The alerts a fair fleet must not raise. The classes' SLOs are an hour (PLAIN_CLASSES), so the
# age-based ones (QueueStarving, QuietTenantsStarving, PriorityInversion) stay quiet here whatever
# the rules do with the shards: a backlog queued before the run is never older than the run.
SHARE_ALERTS = (QUEUE_SHARE_BELOW_WEIGHT, QUEUE_STARVING, QUIET_TENANTS_STARVING, TENANT_DOMINATING_QUEUE,
                QUEUE_STALLED, QUEUE_SHARD_STALLED, PRIORITY_INVERSION)


def firing_alerts(prometheus: Prometheus, at: float, **labels: str) -> list[dict[str, str]]:
    """The labels of every QueueShareBelowWeight alert firing at ``at`` with ``labels``."""
    alerts = selector("ALERTS", alertname=QUEUE_SHARE_BELOW_WEIGHT, alertstate="firing", **labels)
    return [got for got, _ in prometheus.query(alerts, at)]


def alerts_seen(prometheus: Prometheus, names: tuple[str, ...], seconds: float, at: float) -> list[dict[str, str]]:
    """The labels (state among them) of every alert of ``names`` pending or firing at some
    evaluation in the ``seconds`` before ``at``."""
    return [labels for labels, _ in prometheus.query(
        f'count_over_time(ALERTS{{alertname=~"{"|".join(names)}"}}[{seconds:.0f}s])', at)]


def by_queue(prometheus: Prometheus, expr: str, at: float) -> dict[str, float]:
    return {labels[m.QUEUE]: value for labels, value in prometheus.query(expr, at)}


@contextmanager
def watched_backlog(cluster: RedisClusterServers,
                    tmp_path: Path) -> Iterator[tuple[Config, Queue, Prometheus]]:
    """The sharded queue under a fresh prefix, its exporter started as a user starts it (``fairctl
    exporter --config``: one process serving every shard, answering within a second or two) and a
    Prometheus on the generated rules scraping it, then the backlog queued as :data:`PLACED` says
    while Prometheus comes to its first scrape. On leaving, every shard's classes must still be
    backlogged."""
    path, config = write_config(
        tmp_path, cluster.url, classes=PLAIN_CLASSES,
        redis={"url": cluster.url, "prefix": make_config().redis.prefix, "shards": SHARDS, "shard_hand": 1},
        exporter={"window": f"{TENANT_WINDOW_S}s", "scrape_timeout": "800ms"},  # within Prometheus's 1 s
        alerts={"rate_window": f"{WINDOW_S}s", "stall_after": f"{STALL_S}s",
                "for": {QUEUE_SHARE_BELOW_WEIGHT: f"{FOR_S}s"}})
    assert set(SHARE_ALERTS) <= {a.name for a in build_alerts(config)}
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    queue = Queue(config, redis_client(cluster.url))
    queue.groups()  # the layout, and each shard's config applied: what the exporter reads as it starts
    with one_exporter_for_both([], [path], tmp_path) as targets, Prometheus(targets, tmp_path, (rules,)) as prometheus:
        for name, shards in PLACED.items():
            for shard, count in shards.items():
                for tenant in tenants_homed(shard, count):
                    queue.submit_many(TASKS[name], tenant, [{"service_s": SERVICE_S}] * JOBS)
        placed = [{name: shards.get(i, 0) * JOBS for name, shards in PLACED.items()} for i in range(SHARDS)]
        assert [dict(load.depth) for load in queue.loads(fresh=True)] == placed
        names = queue.layout().prefixes
        waiting = {(names[i], name): depth for i, row in enumerate(placed) for name, depth in row.items() if depth}
        depths = selector(m.QUEUE_DEPTH.name, **{m.GROUP: config.redis.prefix}) + " > 0"
        wait_for(lambda: {(got[m.SHARD], got[m.QUEUE]): v for got, v in prometheus.query(depths)} == waiting, 30,
                 "every shard's backlog scraped, under the shard's name")
        yield config, queue, prometheus
    left = queue.loads(fresh=True)
    assert all(left[shard].depth[name] > 0 for name, shards in PLACED.items() for shard in shards), \
        [dict(load.depth) for load in left]


def test_a_fleet_serving_the_weights_raises_no_share_or_starvation_alert_on_uneven_shards(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    with watched_backlog(cluster, tmp_path) as (config, queue, prometheus), ExitStack() as stack:
        group, share, home = config.redis.prefix, rec.basis(config).backlogged_share, queue.layout().prefixes[0]
        for seed in range(3):
            stack.enter_context(running(Worker(Queue(config, redis_client(cluster.url), seed=seed),
                                               sleep_handlers, concurrency=4)))
        time.sleep(WINDOW_S + 2)  # a whole rate window of work, then a scrape and an evaluation of it
        start = time.time()
        time.sleep(OBSERVED_WINDOWS * WINDOW_S)
        end = time.time()
        span = f"[{end - start:.0f}s]"

        def over(function: str, series: str, **labels: str) -> str:
            return f"{function}({selector(series, **{m.GROUP: group}, **labels)}{span})"

        seen = alerts_seen(prometheus, SHARE_ALERTS, end - start, end)
        shares, lowest, backlogged = (by_queue(prometheus, over(f, series), end) for f, series in (
            ("avg_over_time", share), ("min_over_time", share), ("min_over_time", rec.BACKLOGGED)))
        served = over("increase", m.JOBS_PROCESSED.name)
        shards_serving = {labels[m.SHARD] for labels, _ in prometheus.query(f"sum by ({m.SHARD}) ({served}) > 0", end)}
        on_home = by_queue(prometheus, over("increase", m.JOBS_PROCESSED.name, **{m.SHARD: home}), end)
        slowest = prometheus.query(f"max_over_time(scrape_duration_seconds{span})", end)
    figures = f"logical shares {shares}, lowest {lowest}; shard 0 completed {on_home}; slowest scrape {slowest}"
    print(f"\nfair run: {figures}")
    assert seen == [], f"alerts pending or firing on a fair fleet: {seen}; {figures}"
    assert backlogged == dict.fromkeys(WEIGHTS, 1.0), backlogged
    for name, weight in WEIGHTS.items():
        assert abs(shares[name] - weight / 100) <= 0.03, figures
    assert shards_serving == set(queue.layout().prefixes[:SHARDS]), shards_serving  # each shard its own series
    # Judged alone, shard 0 gives jobs:high less than share_tolerance x the share its weight entitles
    # it to beside jobs:low: the per-shard false alert's case, which the logical rules do not raise.
    home_share = on_home["jobs:high"] / (on_home["jobs:high"] + on_home["jobs:low"])
    entitled = WEIGHTS["jobs:high"] / (WEIGHTS["jobs:high"] + WEIGHTS["jobs:low"])
    assert home_share < alert_settings(config).share_tolerance * entitled, figures


def test_a_fleet_forced_off_the_weights_is_paged_once_for_the_logical_queue(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    with watched_backlog(cluster, tmp_path) as (config, queue, prometheus), ExitStack() as stack:
        group, names = config.redis.prefix, queue.layout().prefixes
        started = time.time()
        for shard in LOW_SHARDS:  # a pool for jobs:low alone on three shards, one slot each
            stack.enter_context(running(Worker(Queue(shard_config(config, shard, names[shard]),
                                                         redis_client(cluster.url)),
                                               sleep_handlers, concurrency=1, classes=["jobs:low"])))
        stack.enter_context(running(Worker(Queue(config, redis_client(cluster.url)), sleep_handlers,
                                           concurrency=1)))
        wait_for(lambda: firing_alerts(prometheus, time.time(), queue="jobs:high") != [], 60,
                 f"{QUEUE_SHARE_BELOW_WEIGHT} firing for jobs:high")
        at = time.time()
        firing = firing_alerts(prometheus, at)
        ever = alerts_seen(prometheus, (QUEUE_SHARE_BELOW_WEIGHT,), at - started, at)
        shares = by_queue(prometheus, selector(rec.basis(config).backlogged_share, **{m.GROUP: group}), at)
        entitled = by_queue(prometheus, selector(rec.ENTITLED_SHARE, **{m.GROUP: group}), at)
    print(f"\nforced run, {at - started:.1f}s in: shares {shares}, entitled {entitled}; firing {firing}; ever {ever}")
    high = [labels for labels in firing if labels[m.QUEUE] == "jobs:high"]
    assert len(high) == 1 and high[0]["severity"] == WARNING, firing
    assert all(labels[m.GROUP] == group and m.SHARD not in labels for labels in firing), firing
    assert len({labels[m.QUEUE] for labels in firing}) == len(firing), f"a class named twice: {firing}"
    assert ever and all(m.SHARD not in labels for labels in ever), f"pending or firing at some point: {ever}"
    assert shares["jobs:high"] < alert_settings(config).share_tolerance * entitled["jobs:high"], (shares, entitled)
