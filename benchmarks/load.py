"""Queue states the measurements run against: N tenants with jobs queued, some in flight, some done.

Loading is pipelined (``Queue.submit_many``, one round trip per tenant) over two processes, so a
million jobs load in about a minute on two cores; every job still goes through the enqueue script.
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fairness_core import Config, Lease, Queue, load_config, redis_client

EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "fairness.yaml"
TASKS = ("password_reset", "sync_contacts", "newsletter")  # one per class of the example config
LOADERS = 2  # processes submitting jobs (the machine has 2 cores; redis-server needs one of them)
POP = 1000  # jobs leased per pop while processing part of the load


def payload(n: int) -> dict[str, Any]:
    """A typical small job payload (about 100 bytes as JSON)."""
    return {"user_id": 100_000 + n, "email": f"user{100_000 + n}@example.com", "template": "welcome", "locale": "en"}


PAYLOAD_BYTES = len(json.dumps(payload(0), separators=(",", ":")))


def bench_config(url: str, prefix: str, charge: str = "jobs", account_separator: str | None = None) -> Config:
    """The example config on ``url`` under ``prefix``, ``scheduler.charge`` and
    ``tenants.account_separator``, with arrival budgets off: the load is not a realistic arrival
    mix, and demotions would only move jobs between classes."""
    config = load_config(EXAMPLE_CONFIG)
    return dataclasses.replace(
        config, redis=dataclasses.replace(config.redis, url=url, prefix=prefix),
        scheduler=dataclasses.replace(config.scheduler, budget_min_arrivals=10**9, charge=charge),
        tenants=dataclasses.replace(config.tenants, account_separator=account_separator))


def scheduler(url: str, prefix: str, charge: str = "jobs", account_separator: str | None = None) -> Queue:
    return Queue(bench_config(url, prefix, charge, account_separator), redis_client(url))


def _load_tenants(url: str, prefix: str, first: int, last: int, jobs_per_tenant: int) -> None:
    """Tenant i queues its jobs in class i % 3, in one pipelined round trip."""
    sched = scheduler(url, prefix)
    for tenant in range(first, last):
        sched.submit_many(TASKS[tenant % len(TASKS)], f"tenant-{tenant}",
                          [payload(tenant * jobs_per_tenant + j) for j in range(jobs_per_tenant)])


def fill(url: str, prefix: str, tenants: int, jobs_per_tenant: int) -> None:
    """Queue ``jobs_per_tenant`` jobs for each of ``tenants`` tenants."""
    step = -(-tenants // LOADERS)
    ranges = [(first, min(tenants, first + step)) for first in range(0, tenants, step)]
    if len(ranges) == 1:
        _load_tenants(url, prefix, *ranges[0], jobs_per_tenant)
        return
    with ProcessPoolExecutor(len(ranges)) as pool:
        list(pool.map(_load_tenants, *zip(*[(url, prefix, a, b, jobs_per_tenant) for a, b in ranges])))


def work_some(url: str, prefix: str, jobs: int) -> None:
    """Lease a fifth of ``jobs`` (at most 20,000) and ack all but 5% of those, so the in-flight,
    processed and windowed-service structures the exporter reads are populated too."""
    sched = scheduler(url, prefix)
    leased = min(jobs // 5, 20_000)
    kept = leased // 20
    done: list[Lease] = []
    while leased > 0:
        leases = sched.ack_and_pop(done, min(POP, leased)).leases
        leased -= len(leases)
        done = leases[kept:]
        kept = max(0, kept - len(leases))
    for lease in done:
        sched.ack(lease)


def populate(url: str, prefix: str, tenants: int, jobs_per_tenant: int) -> None:
    fill(url, prefix, tenants, jobs_per_tenant)
    work_some(url, prefix, tenants * jobs_per_tenant)
