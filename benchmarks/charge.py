"""Pop+ack under ``scheduler.charge: runtime`` against ``charge: jobs``, in turns on one redis-server.

Both loops are row 1's (one job per call, the ack riding with the next pop) over the same 10
tenants of one class. Under runtime each ack reports its job's runtime, as a worker's does, and
the script does more: the pop reads the tenant's estimate and records each job's charge, the ack
reads the charge back, teaches the estimates and corrects the tenant's tag and the class shares.
Under jobs the acks report nothing, as they did before runtimes could be reported; the script's
time with runtimes reported under jobs (one counter of worker time more) is given beside it.
"""

from __future__ import annotations

import argparse
import sys

import redis

from fairness_stack.servers import RedisServer

from . import throughput
from .harness import Row, alternate, per_second
from .load import scheduler
from .report import table


def row(url: str, tenants: int, jobs: int, repeats: int) -> Row:
    """Row 1c: jobs per second under runtime against jobs, and the script's µs per call in Redis
    (each the median of ``repeats`` runs, the bases taking turns)."""
    client = redis.Redis.from_url(url)
    by_jobs, by_runtime = scheduler(url, "charge-jobs"), scheduler(url, "charge-runtime", "runtime")
    ours, baseline = alternate(
        repeats,
        throughput.scheduler_run(by_runtime, jobs, lambda s, j: throughput.drain(s, j, 1, report=True), tenants),
        throughput.scheduler_run(by_jobs, jobs, lambda s, j: throughput.drain(s, j, 1), tenants),
    )
    runtime_us, jobs_us, reported_us = alternate(
        repeats,
        lambda: throughput.script_us(client, by_runtime, tenants, jobs, 1, report=True),
        lambda: throughput.script_us(client, by_jobs, tenants, jobs, 1),
        lambda: throughput.script_us(client, by_jobs, tenants, jobs, 1, report=True),
    )
    return Row("1c", "pop+ack, one job per call, `charge: runtime` (each ack reports its runtime)",
               per_second(ours), f"`charge: jobs` {per_second(baseline)}", ours / baseline, "informative", None,
               f"in Redis: {runtime_us:.0f} µs per call under runtime, {jobs_us:.0f} µs under jobs "
               f"({reported_us:.0f} µs with runtimes reported)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per run (default 5000, as --preset full)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each basis, in turns (default 5)")
    parser.add_argument("--tenants", type=int, default=10, help="tenants the jobs are queued for (default 10)")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        print(table([row(server.url, args.tenants, args.jobs, args.repeats)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
