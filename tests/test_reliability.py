"""Faults under load on a real redis-server: Redis SIGKILLed and restarted from its AOF while a
producer enqueues and worker and exporter processes run; Redis stalled (CLIENT PAUSE, DEBUG SLEEP)
under a running worker and exporter."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from exporter import metrics as m
from fairctl.handlers import sleep_for_service_time
from fairness_core import Lease, Queue, RedisUnavailable, redis_client
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer, free_port, stop_process

from .conftest import make_config
from .exporter_support import redis_up, running_exporter, scrape
from .support import (
    running,
    spawn_exporter,
    spawn_worker,
    totals,
    wait_for,
    write_config,
)
from .crash_support import check_reruns_were_redelivered, recorded

pytestmark = pytest.mark.slow

TASKS = ("password_reset", "order_confirmation", "newsletter")
NO_BUDGET = {"budget_min_arrivals": 10**9}


PRODUCED_TENANTS = tuple(f"tenant-{i}" for i in range(11))


class Producer:
    """Enqueues in a thread until stopped. ``acknowledged`` holds the ids of every enqueue that
    returned; ``refused`` the messages of those that raised RedisUnavailable (none of them may be
    counted as queued by the caller, and at most the one in flight at the kill may have been)."""

    def __init__(self, scheduler: Queue) -> None:
        self.scheduler = scheduler
        self.acknowledged: set[str] = set()
        self.refused: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.acknowledged.add(self.scheduler.enqueue(TASKS[i % 3], PRODUCED_TENANTS[i % len(PRODUCED_TENANTS)]))
            except RedisUnavailable as exc:
                self.refused.append(str(exc))
                self._stop.wait(0.05)
            i += 1
            if i % 50 == 0:
                self._stop.wait(0.05)  # about 1,000 jobs a second at most: the two workers keep up

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_redis_killed_and_restarted_from_its_aof_loses_no_acknowledged_enqueue(tmp_path: Path) -> None:
    """appendonly yes, appendfsync always: every enqueue whose call returned survives a SIGKILL of
    Redis; workers and the exporter ride the outage out in the same processes."""
    server = RedisServer(appendonly=True).start()
    path, config = write_config(tmp_path, server.url, scheduler=NO_BUDGET, exporter={"scrape_timeout": "1s"},
                                leases={"visibility_timeout": "3s", "max_attempts": 1000})
    scheduler = Queue(config, redis_client(server.url))
    key = f"{config.redis.prefix}:record"
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    workers = [spawn_worker(path, tmp_path / f"worker-{i}.log", key, server.url, "--concurrency", "4", "--batch", "5")
               for i in range(2)]
    exporter = spawn_exporter(path, tmp_path / "exporter.log", "--listen", f"127.0.0.1:{port}")
    restarted: RedisServer | None = None
    try:
        wait_for(lambda: redis_up(metrics) == 1, 30, "the exporter to read Redis")
        with Producer(Queue(config, redis_client(server.url))) as producer:
            wait_for(lambda: totals(scheduler)["processed"] >= 500, 60, "workers to make progress under load")
            server.stop(kill=True)
            with pytest.raises(RedisUnavailable, match=rf"^Redis at 127\.0\.0\.1:{server.port} is unavailable"):
                scheduler.enqueue("newsletter", "acme")
            down = scrape(metrics)
            assert down.value(m.EXPORTER_REDIS_UP.name) == 0 and down.seconds < 1.0 + 1.0
            time.sleep(2.0)  # the producer, the workers' slots, heartbeats and sweeps all hit the outage
            assert all(p.poll() is None for p in [*workers, exporter]), "nothing crashed"
            restarted = RedisServer(port=server.port, appendonly=True, directory=str(server.directory)).start()
            wait_for(lambda: redis_up(metrics) == 1, 30, "the exporter to read Redis again")
            acknowledged_at_restart = len(producer.acknowledged)
            wait_for(lambda: len(producer.acknowledged) >= acknowledged_at_restart + 500, 60, "enqueues to resume")
        wait_for(lambda: totals(scheduler)["depth"] + totals(scheduler)["inflight"] + totals(scheduler)["delayed"] == 0,
                 120, "the workers to drain the queue")
        assert all(p.poll() is None for p in [*workers, exporter]), "the same processes recovered: no crash loop"
        deliveries = recorded(scheduler.client, key)
        t = totals(scheduler)
    finally:
        for process in [*workers, exporter]:
            process.send_signal(signal.SIGTERM)
        for process in [*workers, exporter]:
            stop_process(process, timeout=30)
        (restarted or server).close()
    acknowledged = producer.acknowledged
    # Refused while down, or while the restarted server was still loading its AOF; and at most
    # the one in flight at the kill told that it may have been applied.
    lost = f"Redis at 127.0.0.1:{server.port}: the connection failed after the call was sent, before its reply"
    assert producer.refused and set(producer.refused) <= {
        f"Redis at 127.0.0.1:{server.port} is unavailable ({error})" for error in ("ConnectionError", "BusyLoadingError")
    } | {f"{lost} ({error}): it may have been applied" for error in ("ConnectionError", "TimeoutError")}
    assert sum(message.startswith(lost) for message in producer.refused) <= 1
    assert acknowledged <= set(deliveries), f"{len(acknowledged - set(deliveries))} acknowledged enqueues were lost"
    unacknowledged = set(deliveries) - acknowledged
    assert len(unacknowledged) <= 1, "only the enqueue in flight at the kill may have run without its reply"
    assert t["processed"] == len(deliveries), "the counters came back from the AOF too"
    check_reruns_were_redelivered(deliveries)
    for i in range(2):
        log = (tmp_path / f"worker-{i}.log").read_text()
        # The outage's one line: its first failed call could not connect, or lost its reply.
        assert "; backing off and retrying" in log and "Redis reachable again" in log, log[-2000:]
    log = (tmp_path / "exporter.log").read_text()
    assert log.count("cannot read the scheduler's bookkeeping") == 1 and "Redis readable again" in log, log[-2000:]
    print(f"\n{len(acknowledged)} acknowledged enqueues, {len(producer.refused)} refused while Redis was down, "
          f"{len(unacknowledged)} applied without a reply, {t['redelivered']} redeliveries, "
          f"{sum(len(a) > 1 for a in deliveries.values())} jobs completed twice")


@pytest.fixture(scope="module")
def debuggable_redis() -> Iterator[RedisServer]:
    """A redis-server that accepts DEBUG from loopback clients (DEBUG SLEEP stalls it)."""
    with RedisServer(extra_args=("--enable-debug-command", "local")) as server:
        yield server


def stall(url: str, how: str, seconds: float) -> threading.Thread:
    """Stall the server for ``seconds``: ``pause`` (CLIENT PAUSE ALL: connections are accepted and
    commands held) or ``sleep`` (DEBUG SLEEP: the server's event loop blocks)."""
    def run() -> None:
        with redis.Redis.from_url(url, socket_timeout=seconds + 30) as admin:
            if how == "pause":
                admin.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
            else:
                admin.execute_command("DEBUG", "SLEEP", seconds)
    thread = threading.Thread(target=run, name=f"stall-{how}", daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("how, stall_s, visibility", [
    ("pause", 3.0, "6s"),  # shorter than the visibility timeout: no lease may expire
    ("sleep", 3.0, "6s"),
    ("sleep", 4.0, "2s"),  # longer: leases may expire; any second run is a counted redelivery
])
def test_a_stalled_redis_answers_scrapes_in_budget_and_serves_each_lease_once(
        debuggable_redis: RedisServer, how: str, stall_s: float, visibility: str) -> None:
    config = make_config(redis={"url": debuggable_redis.url}, scheduler=NO_BUDGET, exporter={"scrape_timeout": "1s"},
                         leases={"visibility_timeout": visibility, "max_attempts": 1000})
    scheduler = Queue(config, redis_client(debuggable_redis.url))
    jobs = 60
    for i in range(jobs):
        scheduler.enqueue(TASKS[i % 3], f"tenant-{i % 7}", {"service_s": 0.2})
    completions: list[tuple[str, int]] = []
    lock = threading.Lock()

    def record(lease: Lease) -> None:
        sleep_for_service_time(lease)
        with lock:
            completions.append((lease.job_id, lease.attempts))

    with running_exporter(config) as exporter, running(Worker(
            Queue(config, redis_client(debuggable_redis.url)), HandlerRegistry(fallback=record), concurrency=4)):
        wait_for(lambda: len(completions) >= 8, 30, "some jobs done")
        stalling = stall(debuggable_redis.url, how, stall_s)
        time.sleep(0.3)
        for _ in range(2):
            stalled = scrape(exporter.url)
            assert stalled.seconds < 1.0 + 1.0, "a scrape answers within its budget (plus slack) whatever Redis does"
            assert stalled.value(m.EXPORTER_REDIS_UP.name) == 0
        stalling.join(timeout=stall_s + 30)
        wait_for(lambda: scrape(exporter.url).value(m.EXPORTER_REDIS_UP.name) == 1, 20, "the exporter to recover")
        wait_for(lambda: totals(scheduler)["processed"] == jobs, 60, "every job done")
    t = totals(scheduler)
    by_job: dict[str, list[int]] = {}
    for job_id, attempts in completions:
        by_job.setdefault(job_id, []).append(attempts)
    assert len(by_job) == jobs and (t["depth"], t["inflight"], t["delayed"]) == (0, 0, 0)
    duplicates = sum(len(a) - 1 for a in by_job.values())
    if visibility == "6s":
        assert t["redelivered"] == 0 and duplicates == 0, "a stall shorter than the lease double-serves nothing"
    else:  # whether a lease expired depends on which runs first after the stall: the reaper or the heartbeat
        check_reruns_were_redelivered(by_job)
    assert t["processed"] == jobs, "a late ack from a worker whose lease expired is not counted twice"
