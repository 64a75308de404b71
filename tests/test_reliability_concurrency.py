"""Concurrency at scale: 4 producer processes enqueue 200,160 jobs for 1,000 tenants in three
classes, 8 ``fairctl worker`` processes work them. Nothing is lost, nothing runs twice without a
counted redelivery, the classes get their weights and the tenants their tier shares, within the
bounds the scheduler guarantees."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import redis

from fairness_core import Config, Queue, load_config, redis_client
from fairness_stack.servers import RedisServer

from .support import spawn_worker, totals, wait_for, write_config
from .crash_support import stop_all

pytestmark = pytest.mark.slow

TENANTS = 1000
PRODUCERS = 4
WORKERS = 8
# Jobs per tenant and class, per unit of tier weight: 42:12:6 is the classes' 70:20:10, and a
# tenant's jobs are proportional to its weight, so every tenant stays backlogged until near the end.
PER_WEIGHT = {"jobs:high": 42, "jobs:medium": 12, "jobs:low": 6}
TASK = {"jobs:high": "password_reset", "jobs:medium": "invoice_pdf", "jobs:low": "newsletter"}
TIERS = ("enterprise", "pro", "free")


def tenant(i: int) -> tuple[str, str]:
    return f"tenant-{i}", TIERS[i % len(TIERS)]


def produce(config_path: str, first: int, step: int) -> list[tuple[str, str, str]]:
    """One producer process: every ``step``-th tenant from ``first``, classes interleaved.
    Returns (job id, class, tenant) of each enqueue that returned."""
    config = load_config(config_path)
    scheduler = Queue(config, redis_client(config.redis.url))
    done = []
    for i in range(first, TENANTS, step):
        name, tier = tenant(i)
        weight = config.tenants.tiers[tier]
        for queue, per_weight in PER_WEIGHT.items():
            for _ in range(per_weight * weight):
                done.append((scheduler.enqueue(TASK[queue], name, tier=tier), queue, name))
    return done


def completions(client: redis.Redis, key: str) -> list[tuple[str, int]]:
    """(job id, attempts) of every completed delivery, in completion order."""
    out = []
    for item in client.lrange(key, 0, -1):
        job_id, attempts = item.decode().split(":")
        out.append((job_id, int(attempts)))
    return out


def class_shares(order: list[str], upto: int) -> dict[str, float]:
    counts = Counter(order[:upto])
    return {queue: counts[queue] / upto for queue in PER_WEIGHT}


def virtual_time_spread(config: Config, served: Counter[str], tiers: dict[str, str]) -> float:
    """max - min over tenants of jobs served x per-job cost (lcm of tier weights / weight): the
    tenants' virtual-time tags, which weighted fair queuing keeps within one visit of each other."""
    tags = [served[name] * config.tenants.cost(tiers[name]) for name in tiers]
    return max(tags) - min(tags)


def test_eight_workers_two_hundred_thousand_jobs_a_thousand_tenants(redis_server: RedisServer, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, scheduler={"budget_min_arrivals": 10**9})
    client = redis_client(redis_server.url)
    scheduler = Queue(config, client)
    key = f"{config.redis.prefix}:record"
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(PRODUCERS) as pool:
        produced = pool.starmap(produce, [(str(path), first, PRODUCERS) for first in range(PRODUCERS)])
    enqueued_s = time.monotonic() - started
    jobs = {job_id: (queue, name) for batch in produced for job_id, queue, name in batch}
    tiers = {tenant(i)[0]: tenant(i)[1] for i in range(TENANTS)}
    expected = sum(per * config.tenants.tiers[tier] for per in PER_WEIGHT.values() for tier in tiers.values())
    assert len(jobs) == sum(len(b) for b in produced) == expected >= 200_000, "ids are unique"

    workers = [spawn_worker(path, tmp_path / f"worker-{i}.log", key, redis_server.url,
                            "--concurrency", "2", "--batch", "10") for i in range(WORKERS)]
    try:
        wait_for(lambda: totals(scheduler)["processed"] == expected, 600, "every job processed")
    finally:
        stop_all(workers)
    worked_s = time.monotonic() - started - enqueued_s

    t = totals(scheduler)
    assert (t["depth"], t["inflight"], t["delayed"], t["failed"], t["dead"]) == (0, 0, 0, 0, 0)
    done = completions(client, key)
    runs: dict[str, list[int]] = defaultdict(list)
    for job_id, attempts in done:
        runs[job_id].append(attempts)
    assert set(runs) == set(jobs), "no job lost, none invented"
    duplicates = sum(len(a) - 1 for a in runs.values())
    assert duplicates <= t["redelivered"], "a job ran twice only after its lease expired and was counted"

    first_runs = [job_id for job_id, attempts in done if attempts == 1]
    order = [jobs[job_id][0] for job_id in first_runs]
    # While every class is backlogged (up to 90% of the jobs), each class's share of completions
    # is its weight to within a point: the scheduler's pops are exact, completions lag them by at
    # most the jobs in flight (8 workers x 2 slots x batch 10 = 160).
    for upto in (20_000, len(order) // 2, len(order) * 9 // 10):
        shares = class_shares(order, upto)
        for queue, share in shares.items():
            weight = config.classes[config.class_index(queue)].weight / sum(c.weight for c in config.classes)
            assert abs(share - weight) <= 0.01, f"{queue} after {upto} jobs: {share:.4f} against {weight}"
    # Tenants: in each class, halfway through, every tenant has been served in proportion to its
    # tier (weights 6:3:1) to within one visit (batch x the costliest tier's cost), plus one batch
    # in flight: served x cost, the tenant's virtual time, spans at most 2 x batch x max cost.
    bound = 2 * config.tenants.batch * max(config.tenants.cost(tier) for tier in config.tenants.tiers)
    spreads = {}
    for queue in PER_WEIGHT:
        in_class = [jobs[job_id][1] for job_id in first_runs if jobs[job_id][0] == queue]
        half = Counter(in_class[: len(in_class) // 2])
        spreads[queue] = virtual_time_spread(config, half, tiers)
        assert spreads[queue] <= bound, f"{queue}: tenants' virtual times span {spreads[queue]} > {bound}"
    print(f"\n{expected} jobs, {TENANTS} tenants: enqueued by {PRODUCERS} processes in {enqueued_s:.0f}s, worked by "
          f"{WORKERS} processes in {worked_s:.0f}s; {t['redelivered']} redeliveries, {duplicates} duplicates; "
          f"shares at 90%: {class_shares(order, len(order) * 9 // 10)}; tenant virtual-time spread at half "
          f"(bound {bound}): {spreads}")
