"""Redis memory live, on one real redis-server whose maxmemory and policy each test sets (and puts
back): an evicting policy is refused by producers, workers and the CLI and served by the exporter;
a worker whose Redis turns evicting stops loudly; and a flood against a small maxmemory is refused
at the headroom after Prometheus, loading the generated rules and scraping the real exporter, has
fired RedisMemoryHigh, while workers drain every accepted job exactly once, even past maxmemory."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis

from alerts.output import rules_text
from alerts.rules import REDIS_MAY_EVICT_JOBS, REDIS_MEMORY_HIGH
from exporter import metrics as m
from fairness_core import EvictionPolicyError, Lease, RedisMemoryFull, redis_client
from fairness_core.queue import Queue
from fairness_core.scheduler import Scheduler
from fairness_core.memory import read_memory
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .exporter_support import Prometheus, running_exporter, scrape
from .support import run_fairctl, running, wait_for, write_config

MIB = 1048576
PAYLOAD = {"blob": "x" * 1024}  # about 1.3 KiB per queued job
WARNING, HEADROOM = 0.6, 0.9


@contextmanager
def memory_settings(client: redis.Redis, **settings: str | int) -> Iterator[None]:
    """CONFIG SET for the test, put back after it (the server is shared by the module)."""
    before = {key: client.config_get(key)[key] for key in settings}
    for key, value in settings.items():
        client.config_set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            client.config_set(key, value)


def test_an_evicting_redis_is_refused_by_producers_workers_and_the_cli_and_served_by_the_exporter(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, redis_client(redis_server.url))
    with memory_settings(client, **{"maxmemory-policy": "allkeys-lru"}):
        for refused in (lambda: scheduler.submit("newsletter", "acme"), scheduler.pop,
                        lambda: Worker(scheduler, HandlerRegistry()).run()):
            with pytest.raises(EvictionPolicyError, match="has maxmemory-policy allkeys-lru: .* CONFIG SET "
                                                          "maxmemory-policy noeviction"):
                refused()
        assert scheduler.snapshot().classes["jobs:low"].depth == 0, "observers still read"
        cli = run_fairctl("enqueue", "newsletter", "--tenant", "acme", "--config", path)
        assert cli.returncode == 2 and f"fairctl: error: {path}: redis.url: Redis at 127.0.0.1:" in cli.stderr, cli.stderr
        assert "maxmemory-policy allkeys-lru" in cli.stderr
        with running_exporter(config) as exporter:
            served = scrape(exporter.url)
        assert served.value(m.EXPORTER_REDIS_UP.name) == 1
        assert served.series(m.REDIS_MEMORY_POLICY.name) == {((m.POLICY, "allkeys-lru"),): 1}
    assert scheduler.submit("newsletter", "acme").queue == "jobs:low", "noeviction again: accepted"
    # What RedisMayEvictJobs does with that series is proven by its promtool cases.
    assert REDIS_MAY_EVICT_JOBS in rules_text(config)


def test_a_running_worker_stops_loudly_when_the_policy_turns_evicting(
        redis_server: RedisServer, client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    scheduler = Queue(make_config(redis={"url": redis_server.url}), redis_client(redis_server.url))
    worker = Worker(scheduler, HandlerRegistry(fallback=lambda lease: None), concurrency=2, grace=5)
    outcome: list[BaseException | bool] = []

    def run() -> None:
        try:
            outcome.append(worker.run())
        except EvictionPolicyError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: scheduler.snapshot().worker_slots == 2, 10, "the worker to register")
    with memory_settings(client, **{"maxmemory-policy": "volatile-lru"}):
        started = time.monotonic()
        thread.join(timeout=15)
        stopped_after = time.monotonic() - started
    assert not thread.is_alive() and isinstance(outcome[0], EvictionPolicyError), outcome
    assert stopped_after < 3, "stops at the next reap tick"
    assert any("volatile-lru" in r.message and "stopping this worker" in r.message for r in caplog.records)


def test_a_flood_is_refused_at_the_headroom_after_the_alert_and_workers_drain_every_accepted_job_once(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    # Prometheus scrapes and evaluates every second; RedisMemoryHigh's for: is 1 s.
    config = make_config(redis={"url": redis_server.url, "memory_headroom": HEADROOM},
                         scheduler={"budget_min_arrivals": 10**9},
                         alerts={"memory_warning": WARNING, "for": {REDIS_MEMORY_HIGH: "1s"}})
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    scheduler = Queue(config, redis_client(redis_server.url))
    # This producer reads memory before every job, so its refusal is the headroom's, exactly: with
    # the default 0.1 s between readings a fast producer can pass the last 10% before it looks
    # again (that race, Redis's own refusal, is the racing producer's part below).
    scheduler.shard(0).memory.refresh = 0.0
    base = read_memory(client).used
    limit = base + 4 * MIB
    accepted: list[str] = []
    done: Counter[str] = Counter()
    lock = threading.Lock()

    def enqueue_until_refused(stop_at: float = 1.0) -> RedisMemoryFull | None:
        """Enqueue until refused, or until memory passes ``stop_at`` of maxmemory."""
        while scheduler.shard(0).memory.read().fill < stop_at:
            try:
                accepted.append(scheduler.submit("newsletter", "storm", PAYLOAD).job_id)
            except RedisMemoryFull as exc:
                return exc
        return None

    def record(lease: Lease) -> None:
        with lock:
            done[lease.job_id] += 1

    firing = f'ALERTS{{alertname="{REDIS_MEMORY_HIGH}",alertstate="firing"}}'
    with memory_settings(client, maxmemory=limit), ExitStack() as stack:
        exporter = stack.enter_context(running_exporter(config))
        prometheus = stack.enter_context(Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)))
        # A producer slower than scrape + for: near the warning: it fills to half way between the
        # warning and the headroom, and goes on once Prometheus has paged.
        assert enqueue_until_refused((WARNING + HEADROOM) / 2) is None, "refused before the headroom"
        wait_for(lambda: prometheus.query(firing) != [], 20, "RedisMemoryHigh firing")
        alert_at = time.monotonic()
        refused = enqueue_until_refused()
        refused_at = time.monotonic()
        assert refused is not None and alert_at < refused_at
        assert "refused by fairctl at redis.memory_headroom" in str(refused)
        assert f"of maxmemory {limit / MIB:.1f} MiB" in str(refused) and "redis.memory_headroom 90%" in str(refused)
        fill = scheduler.shard(0).memory.read(fresh=True).fill
        assert HEADROOM <= fill < 1.0, fill
        full_at = len(accepted)

        # Redis itself over maxmemory (the limit lowered under it): a producer whose last reading
        # is stale gets Redis's own refusal as the same error; then workers drain it all.
        racing = Scheduler(dataclasses.replace(config, redis=dataclasses.replace(config.redis, memory_headroom=0.99)),
                           redis_client(redis_server.url))
        assert racing.memory.read().fill < 0.99
        racing.memory.refresh = 3600.0
        client.config_set("maxmemory", int(read_memory(client).used * 0.8))
        with pytest.raises(RedisMemoryFull, match=r"refused by Redis at maxmemory\): used"):
            accepted.append(racing.submit("newsletter", "storm", PAYLOAD).job_id)
        with running(Worker(scheduler, HandlerRegistry(fallback=record), concurrency=4, batch=10)):
            wait_for(lambda: sum(done.values()) >= len(accepted), 60, "workers to drain every accepted job")
        assert scheduler.snapshot().classes["jobs:low"].depth == 0
    assert full_at > 1000, "the flood got far before the headroom"
    assert Counter(accepted) == done and set(done.values()) == {1}, "every accepted job processed exactly once"
