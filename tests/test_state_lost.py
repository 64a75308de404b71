"""A queue group whose Redis comes back empty (restarted without persistence; the same as a
failover to an empty replica or a FLUSHALL) is told, not silently re-created: the worker logs the
loss once at ERROR, says of the jobs it was running that their leases went with the group's state
(never "it may run again"), and the process that re-creates the group from its own file says so
at ERROR, naming the config it ran before when the file differs. In a real Prometheus the exporter's
fairness_state_resets_total makes QueueStateLost fire within its for:."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from alerts.output import rules_text
from alerts.promql import selector
from alerts.rules import QUEUE_STATE_LOST
from exporter import metrics as m
from fairctl.handlers import sleep_handlers
from fairness_core import Config, Lease, Queue, open_queue, redis_client
from fairness_core.sharding import hand
from fairness_core.worker import Worker
from fairness_stack.servers import RedisServer, free_port

from .conftest import make_config
from .exporter_support import Prometheus, running_exporter
from .support import running, wait_for

pytestmark = pytest.mark.live  # each test wipes a redis-server of its own by restarting it
LOST = "lost its state: its applied config"


def messages(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def wipe(server: RedisServer) -> None:
    """Redis restarted with no persistence: it comes back empty, on the same port."""
    server.stop()
    server.start()


@pytest.mark.parametrize("old_file", [False, True], ids=["same file", "old file"])
def test_a_worker_tells_a_wiped_group_once_and_re_creates_it_loudly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, old_file: bool) -> None:
    with RedisServer(port=free_port(), directory=str(tmp_path)) as server:
        config = make_config(redis={"url": server.url})
        producer = Queue(config, redis_client(server.url))
        if old_file:  # the group runs a newer config than the worker's file: re-weighted since
            classes = tuple(dataclasses.replace(c, weight=c.weight + 1) for c in config.classes)
            producer.apply(dataclasses.replace(config, classes=classes))
        for i in range(200):
            producer.enqueue("newsletter", f"t{i % 4}", {"service_s": 0.3})
        caplog.set_level(logging.INFO)
        worker = Worker(Queue(config, redis_client(server.url)), sleep_handlers, concurrency=4)
        with running(worker):
            wait_for(lambda: producer.snapshot().classes["jobs:low"].inflight > 0, 30, "jobs running")
            wipe(server)
            wait_for(lambda: messages(caplog, logging.ERROR, "applied"), 30, "the group created anew")
            time.sleep(1.5)  # the jobs running at the wipe finish, and the reaper looks again
    lost = messages(caplog, logging.ERROR, LOST)
    assert len(lost) == 1, lost
    assert "every job queued or leased in the group" in lost[0]
    (recreated,) = messages(caplog, logging.ERROR, "had lost its state: this process applied")
    if old_file:
        assert "which is not the config v1 it ran before" in recreated and "fairctl config apply" in recreated
    else:
        assert "the same config it ran before" in recreated
    assert not messages(caplog, logging.WARNING, "it may run again")
    assert messages(caplog, logging.WARNING, "lost with its queue group's state")


def leased_twice(queue: Queue | Queue, tenant: str) -> Lease:
    """A job of ``tenant``'s leased a second time: its first lease taken back from a worker that
    stopped holding it, so Redis remembers the id as one whose job may run again."""
    queue.enqueue("newsletter", tenant)
    queue.register_worker("gone", 3, 15.0)  # one slot past the 2 that jobs:high reserves
    assert len(queue.pop(owner="gone")) == 1 and queue.unregister_worker("gone") == 1
    if isinstance(queue, Queue):
        queue.loads(fresh=True)  # its view of the shards counts the job gone since its pop
    (lease,) = queue.pop()
    return lease


@pytest.mark.parametrize("shards", [1, 6], ids=["one group", "6 shards"])
def test_a_late_ack_from_before_a_wipe_never_settles_the_job_that_took_its_id(tmp_path: Path, shards: int) -> None:
    """Worker A holds alice's job; Redis is flushed; bob's job takes the same id (and the same
    attempt) in the new state and worker B leases it. A's ack, nack, heartbeat and give-back are
    refused, touching nothing; B's ack settles bob's job, once; A's worker says its job's lease
    went with the group's state, not that it may run again (the new state's job 1 may)."""
    with RedisServer(port=free_port(), directory=str(tmp_path)) as server:
        config = make_config(redis={"url": server.url, "shards": shards, "shard_hand": 1})
        bob = next(t for t in (f"bob-{i}" for i in range(100)) if hand(t, shards, 1) == hand("alice", shards, 1))
        worker_a = open_queue(config, redis_client(server.url))
        old = leased_twice(worker_a, "alice")
        redis_client(server.url).flushall()
        worker_b = open_queue(config, redis_client(server.url))
        new = leased_twice(worker_b, bob)
        assert (new.job_id, new.attempts, new.tenant) == (old.job_id, old.attempts, bob)
        assert worker_a.ack(old) is False
        assert worker_a.ack_and_pop([old]).acked == [False]
        assert worker_a.nack(old, "late") == "stale" and worker_a.defer_unhandled(old) == "stale"
        assert worker_a.extend(old) is False and worker_a.give_back([old]) == 0
        assert "lost with its queue group's state" in (Worker(worker_a, sleep_handlers)._lost_line(old) or "")
        assert worker_b.extend(new) is True and worker_b.ack(new) is True
        views = [group.snapshot().classes["jobs:low"] for group in worker_b.groups()]
    assert sum(v.counters["processed"] for v in views) == 1 and sum(v.counters["redelivered"] for v in views) == 1
    assert sum(v.depth + v.inflight for v in views) == 0


def test_queue_state_lost_fires_in_prometheus_within_its_for(tmp_path: Path) -> None:
    with RedisServer(port=free_port(), directory=str(tmp_path)) as server:
        config: Config = make_config(redis={"url": server.url}, alerts={"rate_window": "30s", "for": {QUEUE_STATE_LOST: "2s"}},
                                     exporter={"scrape_timeout": "800ms"})
        producer = Queue(config, redis_client(server.url))
        producer.enqueue("newsletter", "a")
        rules = tmp_path / "rules.yml"
        rules.write_text(rules_text(config))
        with running_exporter(config) as exporter, \
                Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)) as prometheus:
            resets = selector(m.STATE_RESETS.name, **{m.GROUP: config.redis.prefix})
            wait_for(lambda: prometheus.query(resets) != [], 30, "the exporter scraped")
            wipe(server)
            wiped = time.monotonic()
            firing = selector("ALERTS", alertname=QUEUE_STATE_LOST, alertstate="firing")
            wait_for(lambda: prometheus.query(firing) != [], 30, f"{QUEUE_STATE_LOST} firing")
            took = time.monotonic() - wiped
            (labels, _), = prometheus.query(firing)
    assert labels[m.GROUP] == labels[m.SHARD] == config.redis.prefix and labels["severity"] == "critical"
    # Its for: (2 s) after a scrape (1 s) and an evaluation (1 s): the page goes out within seconds.
    assert took < 30, took
