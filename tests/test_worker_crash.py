"""``fairctl worker`` processes under SIGKILL (while a producer keeps enqueueing) and SIGTERM:
nothing lost, redeliveries exact."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from fairness_core import Queue, redis_client
from fairness_stack.servers import RedisServer

from .crash_support import (
    check_redeliveries,
    enqueue_jobs,
    kill_until_finished,
    producer,
    recorded,
    stop_all,
)
from .support import spawn_worker, totals, wait_for, write_config

pytestmark = pytest.mark.slow

UPFRONT = 5_000  # queued before the workers start
STREAMED = 15_000  # enqueued by a producer while workers are being killed
CHUNK = 500  # the producer enqueues this many, then pauses, so its stream spans many kills
PROCESSES = 4
# Each job's run: four workers of four slots take about as long over a chunk as the producer
# pauses, so a kill finds its slots holding leases. No-op jobs ran out between chunks, and kills
# cut nothing short.
SERVICE = {"service_s": 0.01}


def test_sigkilled_workers_under_continuous_load_lose_nothing_and_redeliveries_are_exact(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "2s", "max_attempts": 1000})
    scheduler = Queue(config, client)
    key = f"{config.redis.prefix}:record"
    ids: set[str] = set()
    enqueue_jobs(scheduler, 0, UPFRONT, ids, SERVICE)

    def spawn(i: int) -> subprocess.Popen[bytes]:
        return spawn_worker(path, tmp_path / f"worker-{i}.log", key, redis_server.url,
                            "--concurrency", "4", "--batch", "5")

    def finished() -> bool:
        t = totals(scheduler)
        return t["processed"] == UPFRONT + STREAMED and t["depth"] == t["inflight"] == t["delayed"] == 0

    stream = producer(Queue(config, redis_client(redis_server.url)), ids, UPFRONT, STREAMED, CHUNK, SERVICE)
    kills, kills_while_producing = kill_until_finished(
        spawn, PROCESSES, stream, finished, lambda: totals(scheduler),
        lambda: client.zrange(scheduler.keys.workers, 0, -1), timeout=180)

    t = totals(scheduler)
    deliveries = recorded(client, key)
    assert len(ids) == UPFRONT + STREAMED
    assert set(deliveries) == ids, "every job ran to completion at least once"
    check_redeliveries(deliveries, t["redelivered"])
    assert t["failed"] == t["dead"] == 0
    assert kills_while_producing > 0 and t["redelivered"] > 0, "the kills must have cut leases short under load"
    print(f"\n{len(ids)} jobs ({STREAMED} enqueued during the kills), {kills} SIGKILLs ({kills_while_producing} "
          f"while producing), {t['redelivered']} redeliveries, "
          f"{sum(len(a) > 1 for a in deliveries.values())} jobs completed more than once")


def test_sigterm_lets_running_jobs_finish_and_redelivers_nothing(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "2s"})
    scheduler = Queue(config, client)
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


def test_second_signal_exits_at_once_and_the_job_is_queued_again_as_it_goes(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """The job it abandons goes back as the worker unregisters, counted, with no reap and no
    lease timeout (an hour here) to wait out."""
    path, config = write_config(tmp_path, redis_server.url, leases={"visibility_timeout": "1h"})
    scheduler = Queue(config, client)
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
    assert "1 job(s) this worker was running or had not settled queued again" in (tmp_path / "worker.log").read_text()
    t = totals(scheduler)
    assert (t["depth"], t["inflight"], t["redelivered"]) == (1, 0, 1)
