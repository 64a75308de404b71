"""A real Prometheus scrapes the exporter every second while workers drain a backlog in every class;
the three queries and the starvation alert that queue dashboards commonly write against these
metric names, exactly as such users write them, return what the workload implies. And at ten
thousand tenants, a tenant that floods a class after all of them is named and paged for, with the
same number of series per scrape as before the ten thousand came."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import redis

from alerts.output import rules_text
from alerts.rules import TENANT_DOMINATING_QUEUE
from exporter import metrics as m
from fairctl.handlers import sleep_handlers
from fairness_core import Queue, redis_client
from fairness_core.jobs import Envelope
from fairness_core.keys import Keys
from fairness_core.worker import Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .exporter_support import Prometheus, running_exporter, scrape
from .support import wait_for
from .test_worker import running

# Queries users already run against these names, verbatim: they must work unchanged.
OLDEST_AGE_PER_CLASS = 'max by (queue) (queue_oldest_message_age_seconds{queue=~"jobs:(high|medium|low)"})'
REALISED_SHARE = """sum by (queue) (rate(jobs_processed_total[10m]))
  / ignoring(queue) group_left sum(rate(jobs_processed_total[10m]))"""
# Per tenant, service is a windowed gauge of the busiest tenants (jobs_processed_total is per class).
TENANT_SHARE = "topk(5, max by (tenant) (tenant_share_ratio))"
LOW_PRIORITY_QUEUE_STARVING = 'max(queue_oldest_message_age_seconds{queue="jobs:low"}) > 3600'

SERVICE_S = 0.02  # 8 slots -> at most 400 jobs/s: the backlog below lasts longer than the run
RUN_S = 15.0
# Per class: (task, tenant -> (tier, jobs)). In jobs:high an enterprise tenant (weight 6) shares
# with five free ones (weight 1 each): it gets 6/11 of the class's 70%, about 38% of all work.
WORKLOAD = {
    "jobs:high": ("password_reset", {"bigcorp": ("enterprise", 3000), **{f"free-{i}": ("free", 600) for i in range(5)}}),
    "jobs:medium": ("sync_contacts", {f"m-{i}": ("free", 400) for i in range(5)}),
    "jobs:low": ("newsletter", {f"l-{i}": ("free", 250) for i in range(5)}),
}
WEIGHTS = {"jobs:high": 0.70, "jobs:medium": 0.20, "jobs:low": 0.10}


def test_common_queries_are_written_against_the_contract() -> None:
    assert m.QUEUE_OLDEST_AGE.name in OLDEST_AGE_PER_CLASS and m.QUEUE_OLDEST_AGE.name in LOW_PRIORITY_QUEUE_STARVING
    assert m.JOBS_PROCESSED.name in REALISED_SHARE and m.TENANT_SHARE.name in TENANT_SHARE
    assert (m.QUEUE,) == m.JOBS_PROCESSED.labels and m.QUEUE_OLDEST_AGE.labels == (m.QUEUE,)
    assert m.TENANT_SHARE.labels == (m.TENANT,)


def oldest_enqueued_s(url: str, keys: Keys, queue: str, tenants: list[str]) -> float:
    """Ground truth from the jobs: the earliest enqueue time among the tenants' head envelopes."""
    with redis.Redis.from_url(url, decode_responses=True) as client:
        heads = [client.lindex(keys.tenant_queue(queue, tenant), 0) for tenant in tenants]
    return min(Envelope.decode(head).enqueued_ms for head in heads if head) / 1000.0


def test_prometheus_sees_the_configured_shares_the_top_tenant_and_the_oldest_ages(
        redis_server: RedisServer, tmp_path: Path) -> None:
    config = make_config(redis={"url": redis_server.url}, scheduler={"budget_min_arrivals": 10**9})
    scheduler = Queue(config, redis_client(redis_server.url))
    for queue, (task, tenants) in WORKLOAD.items():
        for tenant, (tier, jobs) in tenants.items():
            for _ in range(jobs):
                scheduler.enqueue(task, tenant, {"service_s": SERVICE_S}, tier=tier)
    with ExitStack() as stack:
        exporter = stack.enter_context(running_exporter(config))
        prometheus = stack.enter_context(Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path))
        wait_for(lambda: len(prometheus.query(OLDEST_AGE_PER_CLASS)) == 3, 20, "the first scrape")
        with running(Worker(scheduler, sleep_handlers, concurrency=4)), \
                running(Worker(scheduler, sleep_handlers, concurrency=4)):
            time.sleep(RUN_S)
            shares = {labels["queue"]: v for labels, v in prometheus.query(REALISED_SHARE)}
            top = prometheus.query(TENANT_SHARE)
            starving_while_busy = prometheus.query(LOW_PRIORITY_QUEUE_STARVING)
        still_waiting = {queue: scheduler.snapshot().classes[queue].depth for queue in WORKLOAD}
        assert all(still_waiting.values()), f"every class stayed backlogged: {still_waiting}"
        assert shares.keys() == WEIGHTS.keys()
        for queue, weight in WEIGHTS.items():
            assert abs(shares[queue] - weight) < 0.04, (queue, shares)
        assert len(top) == 5 and top[0][0] == {"tenant": "bigcorp"}, top
        assert abs(top[0][1] - 0.70 * 6 / 11) < 0.05, top
        assert starving_while_busy == []

        # A newsletter queued two hours ago (the scheduler's clock set back) while nothing works.
        Queue(config, redis_client(redis_server.url), clock=lambda: int((time.time() - 7200) * 1000)).enqueue(
            "newsletter", "ancient")
        time.sleep(2.5)  # two scrape intervals
        at = time.time()
        ages = {labels["queue"]: v for labels, v in prometheus.query(OLDEST_AGE_PER_CLASS, at)}
        starving = prometheus.query(LOW_PRIORITY_QUEUE_STARVING, at)
    keys = Keys(config.redis.prefix)
    for queue, (_, tenants) in WORKLOAD.items():
        waiting = [*tenants, *(["ancient"] if queue == "jobs:low" else [])]
        truth = at - oldest_enqueued_s(redis_server.url, keys, queue, waiting)
        assert -0.25 <= truth - ages[queue] <= 1.25, (queue, truth, ages[queue])  # one scrape interval behind at most
    assert ages["jobs:low"] > 7200
    assert len(starving) == 1 and starving[0][1] == ages["jobs:low"]


# The late flood, with the config's windows compressed: exporter.window (the tenant shares) 5 s,
# TenantDominatingQueue's for: 3 s, Prometheus scraping and evaluating every second. The flood
# gets the two slots of four that the other classes' reservations leave it: at most 250 jobs/s,
# so it lasts longer than the window and the for: together.
MANY = 10_000
FLOOD_WINDOW_S, FLOOD_FOR_S = 5, 3
FLOOD_JOBS, FLOOD_SERVICE_S = 4000, 0.008


def test_a_tenant_flooding_after_ten_thousand_others_is_named_and_paged(redis_server: RedisServer, tmp_path: Path) -> None:
    config = make_config(
        redis={"url": redis_server.url}, scheduler={"policy": "weighted", "budget_min_arrivals": 10**9},
        exporter={"window": f"{FLOOD_WINDOW_S}s"},
        alerts={"rate_window": f"{FLOOD_WINDOW_S}s", "for": {TENANT_DOMINATING_QUEUE: f"{FLOOD_FOR_S}s"}})
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    scheduler = Queue(config, redis_client(redis_server.url))
    queue, task = "jobs:low", "newsletter"

    def serve_all() -> None:
        done: list = []
        while True:
            popped = scheduler.ack_and_pop(done, 1000)
            if not popped.leases:
                return
            done = popped.leases

    # Before: 20 tenants, each with one job served and one waiting, fill every top-k list.
    for i in range(20):
        scheduler.submit_many(task, f"first-{i}", [None, None])
    scheduler.ack_and_pop(scheduler.pop(20), 1)
    with ExitStack() as stack:
        exporter = stack.enter_context(running_exporter(config))
        before = scrape(exporter.url)
        prometheus = stack.enter_context(Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)))
        # 10,000 more tenants, each completing a job; then the 20 queue one job each again.
        for i in range(MANY):
            scheduler.submit_many(task, f"tenant-{i:05d}", [None])
        serve_all()
        for i in range(20):
            scheduler.submit_many(task, f"first-{i}", [None])
        after = scrape(exporter.url)
        assert scheduler.snapshot().classes[queue].counters["processed"] >= MANY
        assert len(after.samples) == len(before.samples), "series per scrape do not grow with tenants seen"
        assert {(n, tuple(k for k, _ in labels)) for n, labels in after.samples} == \
            {(n, tuple(k for k, _ in labels)) for n, labels in before.samples}
        # A tenant never seen before floods the class; a few others queue behind it.
        time.sleep(2 * FLOOD_WINDOW_S)  # the 10,000's completions leave the window
        scheduler.submit_many(task, "late-flood", [{"service_s": FLOOD_SERVICE_S}] * FLOOD_JOBS)
        for i in range(5):
            scheduler.submit_many(task, f"after-{i}", [{"service_s": FLOOD_SERVICE_S}])
        started = time.monotonic()
        with running(Worker(scheduler, sleep_handlers, concurrency=4)):
            def top() -> str | None:
                shares = scrape(exporter.url).series(m.QUEUE_TENANT_SHARE.name)
                mine = {dict(labels)[m.TENANT]: v for labels, v in shares.items() if dict(labels)[m.QUEUE] == queue}
                return max(mine, key=mine.__getitem__) if mine else None

            wait_for(lambda: top() == "late-flood", FLOOD_WINDOW_S, "the flood named first in its class's top-k")
            named_after = time.monotonic() - started
            firing = f'ALERTS{{alertname="{TENANT_DOMINATING_QUEUE}",alertstate="firing",tenant="late-flood"}}'
            wait_for(lambda: prometheus.query(firing) != [], FLOOD_WINDOW_S + FLOOD_FOR_S + 10,
                     "TenantDominatingQueue firing for the flood")
            paged_after = time.monotonic() - started
            alerts = prometheus.query(firing)
            assert scheduler.snapshot().classes[queue].depth > 0, "the flood outlasted the check"
    assert named_after <= FLOOD_WINDOW_S
    assert paged_after <= FLOOD_WINDOW_S + FLOOD_FOR_S + 10
    assert [labels[m.QUEUE] for labels, _ in alerts] == [queue]
