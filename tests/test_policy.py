"""The policy's promises on a real Redis: exact class shares, work conservation, tenant fairness."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

import redis

from fairness_core import Lease, Queue

from .conftest import make_config

NO_BUDGET_CLASSES = [
    {"name": "jobs:high", "weight": 70, "max_age": "60s"},
    {"name": "jobs:medium", "weight": 20, "max_age": "15m"},
    {"name": "jobs:low", "weight": 10, "max_age": "1h"},
]
TASK_OF = {"jobs:high": "password_reset", "jobs:medium": "order_confirmation", "jobs:low": "newsletter"}


def scheduler_for(client: redis.Redis, policy: str = "weighted-fair", **overrides: Any) -> Queue:
    config = make_config(classes=NO_BUDGET_CLASSES, scheduler={"policy": policy}, **overrides)
    return Queue(config, client)


def fill(s: Queue, per_class: dict[str, int], tenants: int = 5) -> None:
    for queue, n in per_class.items():
        for i in range(n):
            s.enqueue(TASK_OF[queue], f"tenant-{i % tenants}")


def shares(s: Queue, pops: int) -> dict[str, float]:
    counts = Counter(lease.queue for _ in range(pops) for lease in s.pop(1))
    total = sum(counts.values())
    assert total == pops, "a pop came back empty while work was queued"
    return {q: counts[q] / total for q in TASK_OF}


def batched_shares(s: Queue, jobs: int, key: Callable[[Lease], str]) -> dict[str, float]:
    """Pop 10 at a time until ``jobs`` are leased; each key's share of them."""
    counts: Counter[str] = Counter()
    while sum(counts.values()) < jobs:
        counts.update(key(lease) for lease in s.pop(10))
    total = sum(counts.values())
    return {k: n / total for k, n in counts.items()}


def test_backlogged_classes_realise_their_weights_within_one_point(client: redis.Redis) -> None:
    s = scheduler_for(client)
    fill(s, {"jobs:high": 10_000, "jobs:medium": 10_000, "jobs:low": 10_000})
    got = shares(s, 10_000)
    for queue, weight in (("jobs:high", 0.70), ("jobs:medium", 0.20), ("jobs:low", 0.10)):
        assert abs(got[queue] - weight) <= 0.01, got


def test_an_empty_class_gives_its_share_to_the_others(client: redis.Redis) -> None:
    """Work-conserving: with jobs:high empty, medium and low split 20:10 and no pop is empty."""
    s = scheduler_for(client)
    fill(s, {"jobs:medium": 10_000, "jobs:low": 10_000})
    got = shares(s, 6_000)
    assert got["jobs:high"] == 0
    assert abs(got["jobs:medium"] - 2 / 3) <= 0.015, got
    assert abs(got["jobs:low"] - 1 / 3) <= 0.015, got


def test_small_tenants_are_served_before_a_flooding_tenant_gets_far_ahead(client: redis.Redis) -> None:
    s = scheduler_for(client)
    batch = s.config.tenants.batch
    for _ in range(20_000):
        s.enqueue("newsletter", "big")
    for t in range(99):
        for _ in range(50):
            s.enqueue("newsletter", f"small-{t:02d}")
    small_left, big_served = 99 * 50, 0
    while small_left:
        for lease in s.pop(1):
            if lease.tenant == "big":
                big_served += 1
            else:
                small_left -= 1
    assert big_served <= 2 * 50 + batch, big_served


def test_tenant_tiers_realise_six_three_one(client: redis.Redis) -> None:
    s = scheduler_for(client, tenants={"batch": 10})
    for tenant, tier, n in (("ent", "enterprise", 7_000), ("pro", "pro", 4_000), ("free", "free", 2_000)):
        for _ in range(n):
            s.enqueue("newsletter", tenant, tier=tier)
    got = batched_shares(s, 10_000, lambda lease: lease.tenant)
    for tenant, expected in (("ent", 0.6), ("pro", 0.3), ("free", 0.1)):
        assert abs(got[tenant] - expected) <= 0.02, got


def test_batched_pops_keep_class_shares(client: redis.Redis) -> None:
    s = scheduler_for(client)
    fill(s, {"jobs:high": 8_000, "jobs:medium": 3_000, "jobs:low": 2_000})
    got = batched_shares(s, 10_000, lambda lease: lease.queue)
    for queue, weight in (("jobs:high", 0.70), ("jobs:medium", 0.20), ("jobs:low", 0.10)):
        assert abs(got[queue] - weight) <= 0.01, got


def test_strict_priority_starves_lower_classes(client: redis.Redis) -> None:
    s = scheduler_for(client, policy="strict")
    fill(s, {"jobs:high": 300, "jobs:low": 300})
    assert {lease.queue for _ in range(300) for lease in s.pop(1)} == {"jobs:high"}


def test_fifo_serves_in_arrival_order_across_classes(client: redis.Redis) -> None:
    """FIFO compares enqueue times at millisecond resolution (ties go to the more urgent class)."""
    s = scheduler_for(client, policy="fifo")
    order = []
    for q in ("jobs:low", "jobs:high", "jobs:medium", "jobs:low"):
        order.append(s.enqueue(TASK_OF[q], "t"))
        time.sleep(0.003)
    assert [lease.job_id for _ in order for lease in s.pop(1)] == order


def test_weighted_without_fair_queuing_serves_tenants_in_arrival_order(client: redis.Redis) -> None:
    s = scheduler_for(client, policy="weighted")
    for _ in range(30):
        s.enqueue("newsletter", "big")
    s.enqueue("newsletter", "quiet")
    assert [lease.tenant for _ in range(30) for lease in s.pop(1)] == ["big"] * 30
