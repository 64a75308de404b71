"""The in-process Worker: handler outcomes, lease heartbeat, riding out a Redis outage."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis

from fairctl.common import connect
from fairctl.handlers import sleep_handlers
from fairness_core import Lease, Scheduler
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer, free_port

from .conftest import make_config
from .support import running, totals, wait_for


def test_registry_decorator_fallback_and_validation() -> None:
    registry = HandlerRegistry()

    @registry.handler("a")
    def handle_a(lease: Lease) -> None:
        pass

    assert registry["a"] is handle_a and list(registry) == ["a"] and len(registry) == 1
    assert registry.resolve("b") is None
    registry.fallback = handle_a
    assert registry.resolve("b") is handle_a
    with pytest.raises(TypeError, match="must be callable"):
        registry["c"] = "not a function"  # type: ignore[assignment]


def test_worker_rejects_unknown_classes(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="classes: unknown class 'jobs:nope'"):
        Worker(Scheduler(make_config(), client), HandlerRegistry(), classes=["jobs:nope"])


def test_success_acks_failure_and_unknown_task_nack_with_the_error(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(leases={"max_attempts": 1}), client)
    registry = HandlerRegistry()
    ran: list[str] = []

    @registry.handler("password_reset")
    def ok(lease: Lease) -> None:
        ran.append(lease.job_id)

    @registry.handler("checkout_receipt")
    def broken(lease: Lease) -> None:
        raise RuntimeError("smtp said no")

    good = scheduler.enqueue("password_reset", "t")
    scheduler.enqueue("checkout_receipt", "t")
    scheduler.enqueue("2fa_code", "t")
    with running(Worker(scheduler, registry, concurrency=2)):
        wait_for(lambda: totals(scheduler)["dead"] == 2 and totals(scheduler)["processed"] == 1, 20, "3 settled jobs")
    assert ran == [good]
    errors = sorted(d["error"] for d in scheduler.dead_letters())
    assert errors == ["no handler for task 2fa_code", "smtp said no"]


def test_heartbeat_keeps_a_job_longer_than_the_visibility_timeout(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(leases={"visibility_timeout": "1s"}), client)
    calls: list[int] = []

    def slow(lease: Lease) -> None:
        calls.append(lease.attempts)
        time.sleep(3.5)  # several visibility timeouts; the worker's reaper runs meanwhile

    scheduler.enqueue("password_reset", "t")
    with running(Worker(scheduler, HandlerRegistry(fallback=slow), concurrency=2)):
        wait_for(lambda: totals(scheduler)["processed"] == 1, 30, "the slow job")
    t = totals(scheduler)
    assert calls == [1] and t["redelivered"] == 0 and t["inflight"] == 0


def test_worker_rides_out_a_redis_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    jobs = 300
    with RedisServer(port=free_port(), appendonly=True, directory=str(tmp_path)) as server:
        # A script whose reply is lost in the outage (a pop) leaves a lease nobody holds: a short
        # visibility timeout brings such jobs back quickly (at least once, never lost).
        scheduler = connect(make_config(redis={"url": server.url}, leases={"visibility_timeout": "2s"}))
        for i in range(jobs):
            scheduler.enqueue("password_reset", f"t{i % 5}", {"service_s": 0.01})
        caplog.set_level(logging.WARNING, logger="fairness_core.worker")
        with running(Worker(scheduler, sleep_handlers, concurrency=4)) as thread:
            wait_for(lambda: totals(scheduler)["processed"] >= 20, 30, "some progress")
            server.stop()
            time.sleep(1.5)  # slots, heartbeat and sweeps all hit the outage
            assert thread.is_alive()
            server.start()
            wait_for(lambda: totals(scheduler)["processed"] == jobs, 60, "every job after the restart")
        t = totals(scheduler)
    assert (t["depth"], t["inflight"], t["delayed"], t["failed"]) == (0, 0, 0, 0)
    outage_lines = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(outage_lines) == 1, outage_lines
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_a_fleet_with_only_reserved_slots_says_so(client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config()  # jobs:high reserves 2 slots
    caplog.set_level(logging.WARNING, logger="fairness_core.worker")
    with running(Worker(Scheduler(config, client), HandlerRegistry(), concurrency=2)):
        wait_for(lambda: any("reserved_slots add up to 2" in r.getMessage() for r in caplog.records), 10, "the warning")


def test_classes_limit_a_worker_to_its_reserved_pool(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(), client)
    seen: list[str] = []
    scheduler.enqueue("newsletter", "t")
    scheduler.enqueue("password_reset", "t")
    with running(Worker(scheduler, HandlerRegistry(fallback=lambda lease: seen.append(lease.queue)),
                        concurrency=4, classes=["jobs:high"])):
        wait_for(lambda: totals(scheduler)["processed"] == 1, 20, "the high job")
    assert seen == ["jobs:high"] and scheduler.snapshot().classes["jobs:low"].depth == 1
