"""What snapshot() derives for the exporter, checked against figures worked out by hand."""

from __future__ import annotations

import pytest
import redis

from fairness_core import ClassSnapshot, Lease, Scheduler
from fairness_core.snapshot import OTHER_TENANTS, jain_index

from .conftest import make_config
from .test_lifecycle import Clock


def scheduler(client: redis.Redis, **exporter: object) -> tuple[Scheduler, Clock]:
    clock = Clock()
    config = make_config(exporter={"window": "10m", "noisy_min_inflight": 3, **exporter},
                         tenants={"batch": 1})
    return Scheduler(config, client, clock=clock), clock


def work(s: Scheduler, n: int) -> list[Lease]:
    leases = []
    for _ in range(n):
        leases += s.pop(1)
    return leases


def test_jain_index() -> None:
    assert jain_index([5, 5, 5]) == 1
    assert jain_index([10, 0]) == 0.5
    assert jain_index([]) == 1 and jain_index([0, 0]) == 1


def test_noisy_tenant_and_quiet_tenants_oldest_age(client: redis.Redis) -> None:
    s, clock = scheduler(client)
    s.enqueue("newsletter", "quiet")
    for _ in range(20):
        s.enqueue("newsletter", "storm")
    clock.advance(30)
    s.enqueue("newsletter", "late")
    s.pop(8, classes=["jobs:low"])  # batch 1: round-robin quiet, storm, late, storm, storm ...
    low = s.snapshot().classes["jobs:low"]
    assert dict(low.top_inflight)["storm"] == 6
    assert low.noisy_tenants == ("storm",)
    assert low.oldest_age == pytest.approx(30), "storm's next job has waited since t=0"
    assert low.quiet_oldest_age == 0, "quiet and late have nothing left waiting"


def serve_two_backlogged_tenants(s: Scheduler, jobs: int) -> ClassSnapshot:
    """Tenants a and b queue 10 jobs each in jobs:low; ``jobs`` of them are worked and acked."""
    for tenant in ("a", "b"):
        for _ in range(10):
            s.enqueue("newsletter", tenant)
    for lease in work(s, jobs):
        s.ack(lease)
    return s.snapshot().classes["jobs:low"]


def test_fairness_index_over_backlogged_tenants(client: redis.Redis) -> None:
    s, _ = scheduler(client)
    low = serve_two_backlogged_tenants(s, 6)
    assert low.fairness_index == pytest.approx(1.0), "weighted-fair served a and b alike"
    assert low.processed_window == 6 and dict(low.top_processed) == {"a": 3.0, "b": 3.0}


def test_fairness_index_sees_an_unfair_policy(client: redis.Redis) -> None:
    s = Scheduler(make_config(scheduler={"policy": "weighted"}), client)
    low = serve_two_backlogged_tenants(s, 8)
    assert low.fairness_index == pytest.approx(0.5), "FIFO inside the class served only a"
    assert low.top_processed[0] == ("a", 8.0)
    assert s.snapshot().tenant_shares[0] == ("a", 1.0)


def test_tenant_labels_are_bounded_and_other_keeps_the_rest(client: redis.Redis) -> None:
    s, _ = scheduler(client, tenant_label_limit=2)
    for tenant in ("a", "b", "c", "d", "a"):
        s.enqueue("newsletter", tenant)
    for lease in work(s, 5):
        s.ack(lease)
    low = s.snapshot().classes["jobs:low"]
    assert low.processed_by_tenant == {"a": 2, "b": 1, OTHER_TENANTS: 2}
    assert sum(low.processed_by_tenant.values()) == low.counters["processed"] == 5


def test_window_buckets_age_out(client: redis.Redis) -> None:
    s, clock = scheduler(client)
    s.enqueue("newsletter", "a")
    (lease,) = s.pop()
    s.ack(lease)
    assert s.snapshot().classes["jobs:low"].processed_window == 1
    clock.advance(25 * 60)
    assert s.snapshot().classes["jobs:low"].processed_window == 0
    assert s.snapshot().tenant_shares == ()


def test_a_flood_kept_to_few_slots_is_still_noisy_by_its_backlog(client: redis.Redis) -> None:
    s, clock = scheduler(client, noisy_min_queued=100)
    for _ in range(300):
        s.enqueue("newsletter", "storm")
    s.pop(1)  # one storm job in flight: below noisy_min_inflight
    clock.advance(60)
    s.enqueue("newsletter", "digest")
    clock.advance(5)
    low = s.snapshot().classes["jobs:low"]
    assert low.noisy_tenants == ("storm",)
    assert low.oldest_age == pytest.approx(65) and low.quiet_oldest_age == pytest.approx(5)
