"""Keyed submits against unkeyed ones: what an idempotency key costs a producer.

The same jobs are submitted with and without a key, side by side in turns, each key new (a
producer's first send: the enqueue script looks the key up, then records it with its expiry).
Each side submits one job a call, as a producer does, and reports the enqueue script's time in
Redis per job for ``submit_many`` batches too, where the script's own work is all there is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from itertools import count

import redis

from fairness_core import Queue

from .harness import Row, alternate, per_second, rate, server_us
from .load import bench_config, payload
from .report import run_alone

TASK, TENANT = "sync_contacts", "producer"
BATCH = 1_000  # jobs of the submit_many measurement of the script's time
TARGET = 0.85  # keyed submits at most 15% slower


def row(url: str, jobs: int, repeats: int) -> Row:
    """Row 7c: ``jobs`` submits, keyed against unkeyed, the median of ``repeats`` runs in turns."""
    client = redis.Redis.from_url(url)
    scheduler = Queue(bench_config(url, "keyed"), client)
    runs = count()

    def submits(keyed: bool) -> Callable[[], float]:
        def run() -> float:
            n = next(runs)
            return rate(jobs, lambda: [scheduler.submit(TASK, TENANT, payload(i), key=f"{n}:{i}" if keyed else None)
                                       for i in range(jobs)])
        return run

    scheduler.submit(TASK, TENANT, key="warm-up")  # the group's first call (its config, the library) is no run's
    keyed_rate, plain_rate = alternate(repeats, submits(True), submits(False))
    batch = [payload(i) for i in range(BATCH)]
    keyed_us = server_us(client, "fcall", lambda: scheduler.submit_many(
        TASK, TENANT, batch, keys=[f"batch:{i}" for i in range(BATCH)]), per=BATCH)
    plain_us = server_us(client, "fcall", lambda: scheduler.submit_many(TASK, TENANT, batch), per=BATCH)
    ratio = keyed_rate / plain_rate
    return Row("7c", f"keyed submits (`submit(..., key=)`, each key new), {jobs:,} one job a call, vs the same unkeyed",
               per_second(keyed_rate), f"unkeyed {per_second(plain_rate)}", ratio, f"≥ {TARGET}", ratio >= TARGET,
               f"enqueue script in Redis, in batches of {BATCH:,} (submit_many): {keyed_us:.1f} µs a keyed job, "
               f"{plain_us:.1f} µs an unkeyed one")


def main(argv: list[str] | None = None) -> int:
    return run_alone(row, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
