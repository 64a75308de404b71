"""Helpers of the tests that SIGKILL ``fairctl worker`` processes under load (tests/test_worker_crash.py
on one queue group, tests/test_sharded_faults.py on a sharded one): the jobs they enqueue, the
deliveries tests/recording_handlers.py recorded, killing and respawning workers, and the check that
a job ran more than once only as a counted redelivery."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis

from .support import wait_for

WARM_UP_S = 2.0  # a respawned worker is not killed again before this
BUSY_S = 0.2  # time for a registered worker to fill its slots from a backlog
# Spread over all three classes (enterprise tenants' unlisted tasks go to jobs:medium) and tiers.
TASKS = ["password_reset", "order_confirmation", "newsletter", "invoice_pdf", "nightly_digest"]
TENANTS = [(f"tenant-{i}", ("free", "pro", "enterprise")[i % 3]) for i in range(7)]


def recorded(client: redis.Redis, key: str) -> dict[str, list[int]]:
    """job id -> attempts of every delivery that ran to completion. A record is ``job_id:attempts``,
    and a sharded job id (``shard:id``) holds the separator too."""
    out: dict[str, list[int]] = defaultdict(list)
    for item in client.lrange(key, 0, -1):
        job_id, attempts = (item.decode() if isinstance(item, bytes) else item).rsplit(":", 1)
        out[job_id].append(int(attempts))
    return out


def check_reruns_were_redelivered(deliveries: dict[str, list[int]]) -> None:
    """A job completed more than once only after a redelivery (its lease expired: attempts > 1)."""
    for job_id, attempts in deliveries.items():
        if len(attempts) > 1:
            assert max(attempts) >= 2, f"job {job_id} ran twice without a redelivery: {attempts}"


def check_redeliveries(deliveries: dict[str, list[int]], redelivered: int) -> None:
    """As :func:`check_reruns_were_redelivered`, and the group's ``redelivered`` counter counts
    every redelivery of every job."""
    check_reruns_were_redelivered(deliveries)
    assert redelivered == sum(max(a) - 1 for a in deliveries.values())


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def enqueue_jobs(scheduler: Any, start: int, count: int, ids: set[str],
                 payload: dict[str, Any] | None = None) -> None:
    """Jobs ``start`` .. ``start + count - 1`` (task and tenant by number), each with ``payload``,
    their ids added to ``ids``; ``scheduler``: a Scheduler or a Queue."""
    for i in range(start, start + count):
        tenant, tier = TENANTS[i % len(TENANTS)]
        ids.add(scheduler.enqueue(TASKS[i % len(TASKS)], tenant, payload, tier=tier))


def producer(scheduler: Any, ids: set[str], start: int, count: int, chunk: int,
             payload: dict[str, Any] | None = None) -> threading.Thread:
    """Enqueues jobs ``start`` .. ``start + count - 1`` in chunks with pauses: continuous load while
    workers die."""
    def run() -> None:
        for first in range(start, start + count, chunk):
            enqueue_jobs(scheduler, first, min(chunk, start + count - first), ids, payload)
            time.sleep(0.3)
    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.start()
    return thread


def kill_until_finished(spawn: Callable[[int], subprocess.Popen[bytes]], processes: int, stream: threading.Thread,
                        finished: Callable[[], bool], totals: Callable[[], dict[str, int]],
                        registered: Callable[[], list[Any]], timeout: float) -> tuple[int, int]:
    """Run ``processes`` workers (``spawn(i)``) and, until ``finished()``, SIGKILL one at random
    about every second and respawn it; then kill them all and wait for the producer ``stream``.
    ``registered()``: the worker ids registered with the queue, str or bytes (each names its process id).
    The SIGKILLs, and those of them while ``stream`` was producing."""
    rng = random.Random(2)
    workers = [spawn(i) for i in range(processes)]
    born = [time.monotonic()] * processes
    kills = kills_while_producing = 0
    deadline = time.monotonic() + timeout
    try:
        while not finished():
            assert time.monotonic() < deadline, f"not finished after {timeout:.0f}s: {totals()}"
            time.sleep(rng.uniform(0.7, 1.3))
            victim = rng.randrange(processes)
            # A victim that has had time to start (a loaded machine starts Python slowly) and has
            # registered, killed while jobs wait: then each of its slots holds leases, and the kill
            # cuts them short. A kill that cuts no lease tests nothing.
            time.sleep(max(0.0, born[victim] + WARM_UP_S - time.monotonic()))
            pid = workers[victim].pid
            wait_for(lambda: finished() or any(f"-{pid}-" in str(worker) for worker in registered()), 30,
                     f"worker {pid} registered")
            wait_for(lambda: finished() or totals()["depth"] > 0, 30, "jobs waiting")
            time.sleep(BUSY_S)
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = spawn(victim)
            born[victim] = time.monotonic()
            kills += 1
            kills_while_producing += stream.is_alive()
    finally:
        stop_all(workers)
        stream.join(timeout=60)
    return kills, kills_while_producing
