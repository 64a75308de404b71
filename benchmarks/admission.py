"""A storm against a queued-jobs limit: one tenant sends ten times its limit, Redis memory stays flat.

The marketing storm's lesson is that fairness alone leaves a flooding tenant's whole backlog in
Redis. With ``tenants.max_queued`` the tenant's jobs past the limit are refused inside the enqueue
script, so what Redis holds stops growing at the limit however long the storm goes on. This
measures it on a real redis-server: ``used_memory`` grown by the jobs accepted up to the limit,
against what it grows by while nine times as many are refused, and the enqueue script's time in
Redis for an accepted job against a refused one. Other tenants' jobs are still accepted at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import redis

from fairness_core import Queue
from fairness_stack.servers import RedisServer

from .harness import Row, server_us
from .load import bench_config, payload
from .memory import grown_by
from .report import table

CHUNK = 10_000  # jobs per submit_many (one pipelined round trip)
TENANT = "marketing"
TARGET = 0.01  # memory grown while refused, as a share of what the accepted jobs took


def flood(scheduler: Queue, jobs: int) -> int:
    """Submit ``jobs`` newsletter jobs for the flooding tenant in chunks; how many were accepted."""
    accepted = 0
    for first in range(0, jobs, CHUNK):
        done = scheduler.submit_many("newsletter", TENANT, [payload(n) for n in range(first, min(jobs, first + CHUNK))])
        accepted += sum(d is not None for d in done)
    return accepted


def row(url: str, limit: int, storm: int) -> Row:
    """Row 7b: a ``storm`` of one tenant's jobs against ``max_queued: limit``."""
    client = redis.Redis.from_url(url)
    config = bench_config(url, "admission")
    config = dataclasses.replace(config, tenants=dataclasses.replace(config.tenants, max_queued=limit))
    scheduler = Queue(config, client)
    counts: dict[str, int] = {}
    accepted_bytes = grown_by(client, lambda: counts.update(accepted=flood(scheduler, limit)))
    accept_us = server_us(client, "fcall", lambda: scheduler.submit_many(
        "newsletter", "sample", [payload(n) for n in range(1_000)]), per=1_000)
    refused_bytes = grown_by(client, lambda: counts.update(later=flood(scheduler, storm - limit)))
    refuse_us = server_us(client, "fcall", lambda: flood(scheduler, CHUNK), per=CHUNK)
    others = sum(scheduler.submit("newsletter", f"other-{i}") is not None for i in range(100))
    assert counts == {"accepted": limit, "later": 0} and others == 100, (counts, others)
    share = max(0, refused_bytes) / accepted_bytes
    return Row("7b", f"a storm of {storm:,} jobs from one tenant at `tenants.max_queued: {limit:,}`",
               f"{refused_bytes / 2**20:+.2f} MiB while {storm - limit:,} refused",
               f"{accepted_bytes / 2**20:.1f} MiB for the {limit:,} accepted", share, f"≤ {TARGET:.0%}",
               share <= TARGET,
               f"enqueue script in Redis: {refuse_us:.0f} µs a refused job, {accept_us:.0f} µs an accepted one; "
               "100 other tenants' jobs accepted after the storm")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100_000, help="tenants.max_queued (default 100000)")
    parser.add_argument("--storm", type=int, default=1_000_000, help="jobs the tenant sends (default 1000000)")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        print(table([row(server.url, args.limit, args.storm)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
