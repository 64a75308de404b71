"""``fairctl worker`` processes under SIGKILL (while a producer keeps enqueueing) and SIGTERM:
nothing lost, redeliveries exact."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
import redis

from fairness_core import Scheduler, redis_client
from fairness_stack.servers import RedisServer

from .support import spawn_worker, totals, wait_for, write_config

pytestmark = pytest.mark.slow

UPFRONT = 5_000  # queued before the workers start
STREAMED = 15_000  # enqueued by a producer while workers are being killed
CHUNK = 500  # the producer enqueues this many, then pauses, so its stream spans many kills
PROCESSES = 4
WARM_UP_S = 2.0  # a respawned worker is not killed again before this
# Spread over all three classes (enterprise tenants' unlisted tasks go to jobs:medium) and tiers.
TASKS = ["password_reset", "order_confirmation", "newsletter", "invoice_pdf", "nightly_digest"]
TENANTS = [(f"tenant-{i}", ("free", "pro", "enterprise")[i % 3]) for i in range(7)]


def recorded(client: redis.Redis, key: str) -> dict[str, list[int]]:
    """job id -> attempts of every delivery that ran to completion."""
    out: dict[str, list[int]] = defaultdict(list)
    for item in client.lrange(key, 0, -1):
        job_id, attempts = (item.decode() if isinstance(item, bytes) else item).split(":")
        out[job_id].append(int(attempts))
    return out


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def enqueue_jobs(scheduler: Scheduler, start: int, count: int, ids: set[str]) -> None:
    for i in range(start, start + count):
        tenant, tier = TENANTS[i % len(TENANTS)]
        ids.add(scheduler.enqueue(TASKS[i % len(TASKS)], tenant, tier=tier))


def producer(scheduler: Scheduler, ids: set[str]) -> threading.Thread:
    """Enqueues STREAMED jobs in chunks with pauses: continuous load while workers die."""
    def run() -> None:
        for start in range(UPFRONT, UPFRONT + STREAMED, CHUNK):
            enqueue_jobs(scheduler, start, CHUNK, ids)
            time.sleep(0.3)
    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.start()
    return thread


def test_sigkilled_workers_under_continuous_load_lose_nothing_and_redeliveries_are_exact(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "2s", "max_attempts": 1000})
    scheduler = Scheduler(config, client)
    key = f"{config.redis.prefix}:record"
    ids: set[str] = set()
    enqueue_jobs(scheduler, 0, UPFRONT, ids)

    def spawn(i: int) -> subprocess.Popen[bytes]:
        return spawn_worker(path, tmp_path / f"worker-{i}.log", key, redis_server.url,
                            "--concurrency", "4", "--batch", "5")

    def finished() -> bool:
        t = totals(scheduler)
        return t["processed"] == UPFRONT + STREAMED and t["depth"] == t["inflight"] == t["delayed"] == 0

    rng = random.Random(2)
    workers = [spawn(i) for i in range(PROCESSES)]
    born = [time.monotonic()] * PROCESSES
    stream = producer(Scheduler(config, redis_client(redis_server.url)), ids)
    kills = kills_while_producing = 0
    deadline = time.monotonic() + 180
    try:
        while not finished():
            assert time.monotonic() < deadline, f"not finished after 180s: {totals(scheduler)}"
            time.sleep(rng.uniform(0.7, 1.3))
            victim = rng.randrange(PROCESSES)
            # A victim that has had time to start (a loaded machine starts Python slowly), killed
            # while jobs are in flight: a kill that cuts no lease tests nothing.
            time.sleep(max(0.0, born[victim] + WARM_UP_S - time.monotonic()))
            wait_for(lambda: finished() or totals(scheduler)["inflight"] > 0, 30, "jobs in flight")
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = spawn(victim)
            born[victim] = time.monotonic()
            kills += 1
            kills_while_producing += stream.is_alive()
    finally:
        stop_all(workers)
        stream.join(timeout=60)

    t = totals(scheduler)
    deliveries = recorded(client, key)
    assert len(ids) == UPFRONT + STREAMED
    assert set(deliveries) == ids, "every job ran to completion at least once"
    for job_id, attempts in deliveries.items():
        if len(attempts) > 1:
            assert max(attempts) >= 2, f"job {job_id} ran twice without a redelivery: {attempts}"
    assert t["redelivered"] == sum(max(a) - 1 for a in deliveries.values())
    assert t["failed"] == t["dead"] == 0
    assert kills_while_producing > 0 and t["redelivered"] > 0, "the kills must have cut leases short under load"
    print(f"\n{len(ids)} jobs ({STREAMED} enqueued during the kills), {kills} SIGKILLs ({kills_while_producing} "
          f"while producing), {t['redelivered']} redeliveries, "
          f"{sum(len(a) > 1 for a in deliveries.values())} jobs completed more than once")


def test_sigterm_lets_running_jobs_finish_and_redelivers_nothing(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "2s"})
    scheduler = Scheduler(config, client)
    key = f"{config.redis.prefix}:record"
    for _ in range(6):
        scheduler.enqueue("password_reset", "t", {"service_s": 1.5})
    proc = spawn_worker(path, tmp_path / "worker.log", key, redis_server.url, "--concurrency", "2", "--grace", "20")
    try:
        wait_for(lambda: totals(scheduler)["inflight"] == 2, 30, "two running jobs")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        stop_all([proc])
    t = totals(scheduler)
    assert t["processed"] >= 2 and t["processed"] + t["depth"] == 6
    assert t["inflight"] == t["redelivered"] == 0
    assert sorted(recorded(client, key).values()) == [[1]] * t["processed"]
    assert "stopping: no new jobs" in (tmp_path / "worker.log").read_text()


def test_second_signal_exits_at_once_and_the_lease_is_reaped(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "1s"})
    scheduler = Scheduler(config, client)
    scheduler.enqueue("password_reset", "t", {"service_s": 600})
    proc = spawn_worker(path, tmp_path / "worker.log", "unused", redis_server.url, "--concurrency", "2")
    try:
        wait_for(lambda: totals(scheduler)["inflight"] == 1, 30, "the job to start")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 1
    finally:
        stop_all([proc])
    wait_for(lambda: scheduler.reap() == 1, 10, "the abandoned lease to expire")
    t = totals(scheduler)
    assert (t["depth"], t["inflight"], t["redelivered"]) == (1, 0, 1)
