"""The transitions a fleet lives through, on a real redis-server with real workers: a worker
stopped past its grace, one SIGKILLed, a rolling deploy of a worker that lacks a handler, a
stall of Redis; and what the worker says of each (every log line true)."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fairness_core import Queue, redis_client
from fairness_core.jobs import Lease
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .crash_support import recorded, stop_all
from .support import running, spawn_worker, totals, wait_for, write_config

pytestmark = pytest.mark.slow

NO_BUDGET = {"budget_min_arrivals": 10**9}  # a storm of one task, which an arrival budget would demote


class Completions:
    """What a test's in-process worker ran: (job id, attempts) in order, and when the first came."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []
        self.first_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self, lease: Lease) -> None:
        with self._lock:
            self.runs.append((lease.job_id, lease.attempts))
            if self.first_at is None:
                self.first_at = time.monotonic()

    def attempts(self) -> dict[str, list[int]]:
        with self._lock:
            out: dict[str, list[int]] = {}
            for job_id, attempts in self.runs:
                out.setdefault(job_id, []).append(attempts)
            return out


def holding(scheduler: Queue, path: Path, log: Path, key: str, url: str, *args: str) -> subprocess.Popen[bytes]:
    """A ``fairctl worker`` of 4 slots that leases 5 jobs a slot (``--prefetch 0``), once it holds
    18 leases: 4 jobs running, 14 waiting for their slot (it registers 20 slots, and the example
    config keeps 2 of them for jobs:high)."""
    worker = spawn_worker(path, log, key, url, "--concurrency", "4", "--batch", "5", "--prefetch", "0", *args,
                          start_new_session=True)
    try:
        wait_for(lambda: totals(scheduler)["inflight"] == 18, 30, "the worker to hold 18 leases")
    except AssertionError:
        stop_all([worker])
        raise
    time.sleep(0.5)  # each slot has started its first job
    return worker


def test_a_worker_stopped_past_its_grace_gives_every_lease_back_as_it_stops(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """The example config (2 slots reserved for jobs:high), newsletters of 5 s, a worker with
    ``--grace 1`` stopped with Ctrl-C twice while it holds 18 leases: the 14 it had not started go
    back at once with their attempts, the 4 it cut short as it unregisters (redelivered), so a
    fresh worker serves jobs:low at once instead of waiting out the 5-minute lease timeout."""
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    ids = {e.job_id for e in scheduler.submit_many("newsletter", "acme-marketing", [{"service_s": 5}] * 400)}
    log = tmp_path / "stopped.log"
    old = holding(scheduler, path, log, f"{config.redis.prefix}:record", redis_server.url, "--grace", "1")
    try:
        os.killpg(old.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(old.pid, signal.SIGINT)
        assert old.wait(timeout=30) == 1, log.read_text()
    finally:
        stop_all([old])
    stopped_at = time.monotonic()
    text = log.read_text()
    assert "gave back 14 leased job(s) not started" in text, text
    assert "4 job(s) this worker was running or had not settled queued again" in text, text
    t = totals(scheduler)
    assert (t["inflight"], t["depth"], t["redelivered"]) == (0, 400, 4), "no lease outlives the worker"

    ran = Completions()
    with running(Worker(Queue(config, redis_client(redis_server.url)), HandlerRegistry(fallback=ran),
                        concurrency=4)):
        wait_for(lambda: len(ran.runs) == 400, 60, "the fresh worker to run all 400")
    assert ran.first_at is not None and ran.first_at - stopped_at < 10, "jobs:low served at once, not after 5m"
    attempts = ran.attempts()
    assert set(attempts) == ids and all(len(a) == 1 for a in attempts.values()), "each ran once on the fresh worker"
    assert sorted(a[0] for a in attempts.values()).count(2) == 4, "the 4 cut short are second attempts"
    assert sorted(a[0] for a in attempts.values()).count(1) == 396, "the 14 never started kept their first"


def test_a_killed_workers_jobs_run_again_when_its_registration_lapses(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """SIGKILL a worker holding 18 leases (default settings: 5-minute leases, a 15 s registration):
    the reaper of the worker beside it takes them back when the registration lapses, and every one
    completes there within 40 s, none lost, each counted as a redelivery."""
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    ids = {e.job_id for e in scheduler.submit_many("newsletter", "acme-marketing", [{"service_s": 30}] * 18)}
    log = tmp_path / "killed.log"
    doomed = holding(scheduler, path, log, f"{config.redis.prefix}:record", redis_server.url)
    ran = Completions()
    with running(Worker(Queue(config, redis_client(redis_server.url)), HandlerRegistry(fallback=ran),
                        concurrency=4)):
        stop_all([doomed])  # SIGKILL
        killed_at = time.monotonic()
        wait_for(lambda: len(ran.runs) == 18, 60, "the other worker to run the killed one's 18 jobs")
        done_in = time.monotonic() - killed_at
    assert done_in < 40, f"the killed worker's jobs ran again {done_in:.0f}s after the kill"
    attempts = ran.attempts()
    assert set(attempts) == ids and all(a == [2] for a in attempts.values()), attempts
    t = totals(scheduler)
    assert (t["redelivered"], t["processed"], t["depth"], t["inflight"]) == (18, 18, 0, 0)


def test_a_worker_without_a_handler_leaves_the_backlog_to_one_that_has_it(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """A rolling deploy: an old worker that has no ``newsletter`` handler beside a new one that
    has (2 slots each, a pool of jobs:low, which no reservation of another class holds back), 600
    newsletters of 50 ms: the old one gives back what it takes at once and pauses, and the new one
    runs at least 90% of them within 60 s."""
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    key = f"{config.redis.prefix}:record"
    scheduler.submit_many("newsletter", "acme-marketing", [{"service_s": 0.05}] * 600)
    pool = ("--concurrency", "2", "--classes", "jobs:low")
    workers = [spawn_worker(path, tmp_path / "old.log", key, redis_server.url, *pool,
                            handlers="tests.recording_handlers:password_reset_only"),
               spawn_worker(path, tmp_path / "new.log", key, redis_server.url, *pool)]
    try:
        wait_for(lambda: totals(scheduler)["unhandled"] > 0 and client.llen(key) > 0, 30, "both workers at work")
        wait_for(lambda: client.llen(key) >= 540, 60, "the new worker to run 90% of the newsletters")
    finally:
        stop_all(workers)
    assert totals(scheduler)["failed"] == 0 and totals(scheduler)["dead"] == 0
    assert all(attempts == [1] for attempts in recorded(client, key).values()), "given back with its attempt"


def test_instant_jobs_with_no_fault_log_no_lost_lease(
        redis_server: RedisServer, client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """100,000 instant jobs under a 1 s lease (a heartbeat every third of a second, racing the
    acks): no line says a lease was taken back or that a job may run again."""
    config = make_config(redis={"url": redis_server.url}, leases={"visibility_timeout": "1s"}, scheduler=NO_BUDGET)
    scheduler = Queue(config, client)
    for first in range(0, 100_000, 5_000):
        scheduler.submit_many("newsletter", f"tenant-{first // 5_000}", [None] * 5_000)
    ran = Completions()
    with caplog.at_level(logging.INFO, logger="fairness_core.worker"), running(Worker(
            Queue(config, redis_client(redis_server.url)), HandlerRegistry(fallback=ran), concurrency=4)):
        wait_for(lambda: totals(scheduler)["processed"] == 100_000, 300, "100,000 jobs done")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], warnings[:5]
    assert totals(scheduler)["redelivered"] == 0


@pytest.fixture(scope="module")
def debuggable_redis() -> Iterator[RedisServer]:
    """A redis-server that accepts DEBUG from loopback clients (DEBUG SLEEP stalls it)."""
    with RedisServer(extra_args=("--enable-debug-command", "local")) as server:
        yield server


def test_a_stall_shorter_than_the_lease_costs_no_lease_and_is_timed_from_its_start(
        debuggable_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """DEBUG SLEEP 5 under a busy worker whose client gives up after 2 s (so acks' replies are
    lost and sent again) and whose registration lapses after 3 s: its leases stay its own (the
    reaper sees the stall), no line says a job may run again, and the outage it logs is the
    stall's length, within a second."""
    config = make_config(redis={"url": debuggable_redis.url}, scheduler=NO_BUDGET)
    scheduler = Queue(config, redis_client(debuggable_redis.url))
    scheduler.submit_many("newsletter", "acme", [{"service_s": 0.01}] * 3_000)
    ran = Completions()
    worker = Worker(Queue(config, redis_client(debuggable_redis.url, timeout=2.0)), HandlerRegistry(fallback=ran),
                    concurrency=4, registration_ttl=3.0)
    with caplog.at_level(logging.INFO, logger="fairness_core.worker"), running(worker):
        wait_for(lambda: len(ran.runs) >= 100, 30, "the worker at work")
        with redis.Redis.from_url(debuggable_redis.url, socket_timeout=60) as admin:
            admin.execute_command("DEBUG", "SLEEP", 5)
        wait_for(lambda: totals(scheduler)["processed"] == 3_000, 120, "every job done")
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "may run again" in m], messages
    outages = [float(m) for line in messages for m in re.findall(r"Redis reachable again after ([\d.]+)s", line)]
    assert len(outages) == 1 and abs(outages[0] - 5.0) <= 1.0, outages
    assert totals(scheduler)["redelivered"] == 0
