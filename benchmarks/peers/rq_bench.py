"""RQ's side of the end-to-end comparison; runs in RQ's own virtualenv (benchmarks/.peers/rq).

    python rq_bench.py run REDIS_URL QUEUE JOBS WORKERS   # wait for WORKERS workers, enqueue, wait for all

Jobs are enqueued in chunks with ``Queue.enqueue_many`` (one pipelined round trip per chunk) and
run by ``rq worker --worker-class rq.worker.SimpleWorker`` processes (no fork per job: RQ's
fastest mode); the run ends when RQ's finished-job registry holds every job. Prints the seconds.
"""

from __future__ import annotations

import sys
import time

from redis import Redis
from rq import Queue, Worker
from rq.registry import FailedJobRegistry, FinishedJobRegistry

CHUNK = 100


def noop() -> None:
    """The job: nothing, so the figure is the queue's own cost."""


def run(url: str, name: str, jobs: int, workers: int) -> float:
    connection = Redis.from_url(url)
    queue = Queue(name, connection=connection)
    while Worker.count(queue=queue) < workers:
        time.sleep(0.05)
    finished, failed = FinishedJobRegistry(queue=queue), FailedJobRegistry(queue=queue)
    started = time.perf_counter()
    for first in range(0, jobs, CHUNK):
        queue.enqueue_many([Queue.prepare_data("rq_bench.noop") for _ in range(first, min(jobs, first + CHUNK))])
    while finished.count < jobs:
        if failed.count:
            raise SystemExit(f"{failed.count} RQ jobs failed")
        time.sleep(0.01)
    return time.perf_counter() - started


if __name__ == "__main__":
    _, mode, url, name, jobs, workers = sys.argv
    assert mode == "run", mode
    print(f"{run(url, name, int(jobs), int(workers)):.6f}")
