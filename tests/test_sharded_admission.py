"""A tenant's admission limits are the logical queue's on a sharded queue: its jobs on the other
shards of its hand count, so a tenant whose two classes sit on two shards gets ``max_queued`` (or
its account ``account_max_queued``, or ``max_rate``) in all, not that much a shard. The same holds
in the simulator's sharded model, which runs the same routing."""

from __future__ import annotations

from typing import Any

import pytest

from fairness_core import Config, Queue, TenantLimitReached, open_queue
from fairness_core.jobs import SEP
from fairness_core.queue import split_job_id
from fairness_sim.shards import QueueModel
from fairness_stack.servers import RedisServer

from .conftest import GivenRedis, make_config

LOW, MEDIUM = "newsletter", "order"  # jobs:low and jobs:medium (the example config's default class)
JOBS = 300

LIMITS: dict[str, dict[str, Any]] = {
    "max_queued": {"max_queued": JOBS},
    "account_max_queued": {"account_separator": "/", "account_max_queued": JOBS},
    "max_rate": {"max_rate": f"{JOBS}/m", "rate_window": "60s"},
}


def _config(limit: str, url: str = "redis://127.0.0.1:1/0") -> Config:
    return make_config(redis={"url": url, "shards": 6, "shard_hand": 2}, tenants=LIMITS[limit])


def _tenants(limit: str) -> tuple[str, str]:
    """Who sends the two classes' jobs: one tenant, or two keys of one account."""
    return ("acme/alerts", "acme/digests") if limit == "account_max_queued" else ("acme", "acme")


def _split_classes(queue: Queue, tenant: str) -> tuple[int, int]:
    """The tenant's hand, with another tenant's jobs:medium job on its first shard: the tenant's
    jobs:low jobs then go to that first shard (the classes' backlogs tie there), and its
    jobs:medium jobs to the second, the least backlogged of its class."""
    first, second = queue.router.hand(tenant, queue.layout().shards)
    queue.shard(first).submit(MEDIUM, "filler")
    return first, second


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_a_limit_holds_for_the_queue_when_a_tenants_classes_sit_on_two_shards(
        redis_server: RedisServer | GivenRedis, limit: str) -> None:
    queue = open_queue(_config(limit, redis_server.url))
    low_tenant, medium_tenant = _tenants(limit)
    first, second = _split_classes(queue, low_tenant)
    low = queue.submit_many(LOW, low_tenant, [{"n": i} for i in range(JOBS)])
    medium = queue.submit_many(MEDIUM, medium_tenant, [{"n": i} for i in range(JOBS)])
    assert {split_job_id(j.job_id)[0] for j in low if j is not None} == {first}
    assert all(j is None for j in medium), "the second class's jobs were accepted on another shard"
    assert sum(j is not None for j in low + medium) == JOBS
    # Room made on the first shard (jobs popped) is room on the second: the limit is one count.
    if limit != "max_rate":
        leases = queue.pop(10, classes=["jobs:low"])
        assert len(leases) == 10
        again = queue.submit_many(MEDIUM, medium_tenant, [{"n": i} for i in range(20)])
        assert {split_job_id(j.job_id)[0] for j in again if j is not None} == {second}
        assert sum(j is not None for j in again) == 10


@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_the_simulators_sharded_model_holds_the_same_limit(limit: str) -> None:
    model = QueueModel(_config(limit))
    low_tenant, medium_tenant = _tenants(limit)
    first, second = model.router.hand(low_tenant, model.shards)
    model.models[first].submit_many(0, MEDIUM, "filler", 1)
    model.submit_many(0, LOW, low_tenant, JOBS)
    with pytest.raises(TenantLimitReached):
        model.submit_many(1, MEDIUM, medium_tenant, JOBS)
    assert sum(n for (_, tenant), n in model.enqueued.items() if tenant in {low_tenant, medium_tenant}) == JOBS
    assert model.models[first].stats[f"depth{SEP}jobs:low"] == JOBS
    assert model.models[second].stats.get(f"depth{SEP}jobs:medium", 0) == 0
