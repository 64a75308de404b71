"""The Celery reader (exporter/sources/celery.py) against real Celery: tasks sent with Celery's own
client into the module's redis-server, and a real worker (tests/watch_celery_app.py) consuming some
queues. So depth, priority lists and tenants are checked against kombu's layout itself, not against
a copy of it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import celery
import pytest
import redis
import yaml

from alerts.rules import QUEUE_STARVING
from exporter import metrics as m
from exporter.sources import QueueRef, WatchConfig, watched
from exporter.sources.base import tenant_figures
from exporter.sources.celery import CelerySource, list_keys
from fairness_core import Config, load_config, redis_client
from fairness_stack.servers import RedisServer

from .conftest import EXAMPLE_CONFIG, ROOT, GivenRedis
from .exporter_support import scrape
from .support import wait_for
from .watch_celery_app import BROKER_VARIABLE, app, work
from .watch_support import STORM_BULK, STORM_INTERACTIVE, alerting, assert_memory_served, replay_storm, with_storm_rules

INTERVAL = 0.5  # seconds between the storm test's reads, standing in for the scrape interval
TICK = 0.1  # seconds between its steps: a read every INTERVAL, sends at the steps between
SLACK = 0.15  # a read's and a send's own time
TENANT = ("kwargs", "tenant_id")


@pytest.fixture(scope="module")
def celery_app(redis_server: RedisServer | GivenRedis) -> Iterator[celery.Celery]:
    """The test app, sending to the module's redis-server."""
    app.close()
    app.conf.broker_url = redis_server.url
    yield app
    app.close()


@pytest.fixture(autouse=True)
def empty_redis(client: redis.Redis) -> Iterator[None]:
    """Each test starts on an empty Redis (the module's own server)."""
    client.flushdb()
    yield
    client.flushdb()


@contextmanager
def celery_worker(url: str, queues: str, log: Path, loglevel: str = "warning") -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery worker`` consuming ``queues`` (comma-separated), stopped on exit; at
    ``loglevel`` info it logs each task's success."""
    args = [sys.executable, "-m", "celery", "-A", "tests.watch_celery_app", "worker", "--pool", "threads",
            "--concurrency", "2", "-Q", queues, "--without-heartbeat", "--without-mingle", "--without-gossip",
            "--loglevel", loglevel]
    with log.open("wb") as out:
        process = subprocess.Popen(args, cwd=ROOT, env={**os.environ, BROKER_VARIABLE: url}, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def true_depth(client: redis.Redis, queue: str) -> int:
    """LLEN summed over every one of kombu's lists for ``queue``, read directly."""
    return sum(client.llen(key) for _, key in list_keys(QueueRef(queue)))


def send(tenant: str, queue: str, ms: float = 5, **options: Any) -> None:
    work.apply_async((ms,), {"tenant_id": tenant}, queue=queue, **options)


def test_serves_no_inflight_and_no_completions() -> None:
    """kombu's ``unacked`` is not in-flight under default acks and the broker keeps no
    completions, failures or start times (see the module docstring): those metrics are left out,
    not served as zero. What the lists, the tenant sample and INFO tell is served."""
    assert CelerySource.supplies == {
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_TENANT_SHARE.name, m.QUEUE_ACTIVE_TENANTS.name,
        m.QUEUE_QUIET_OLDEST_AGE.name, m.TENANT_OLDEST_AGE.name, *(spec.name for spec in m.REDIS_MEMORY)}


def test_a_flooding_tenant_shows_in_depth_age_and_tenants(
        redis_server: RedisServer | GivenRedis, client: redis.Redis, celery_app: celery.Celery, tmp_path: Path) -> None:
    """A storm: "flooder" sends 300 tasks to ``bulk``, which no worker consumes, while a worker
    serves ``interactive``. Depth is the lists' true length at every read, flooder tops the
    tenant sample, and the age counts from when the head was sent, to within one read interval."""
    source = CelerySource(WatchConfig(
        "celery", {"interactive": (QueueRef("interactive"),), "bulk": (QueueRef("bulk"),)}, tenant=TENANT,
        sample=100))
    plan: list[tuple[str, str]] = []  # (tenant, queue) after the head: 299 of flooder's, 10 of carol's, 6 interactive
    for i in range(1, 300):
        plan.append(("flooder", "bulk"))
        if i % 30 == 15:
            plan.append(("carol", "bulk"))
        if i % 50 == 25:
            plan.append(("alice" if i % 100 == 25 else "bob", "interactive"))
    sent_before = sent_after = first_seen = None
    with celery_worker(redis_server.url, "interactive", tmp_path / "worker.log"):
        start = time.monotonic()
        for tick in range(40):  # a read every INTERVAL, sends at the ticks between
            time.sleep(max(0.0, start + tick * TICK - time.monotonic()))
            if tick % round(INTERVAL / TICK) == 0:
                now = time.time()
                bulk = source.read(client, now)["bulk"]
                assert bulk.depth == true_depth(client, "bulk")
                if sent_before is None or sent_after is None:
                    assert bulk.oldest_enqueued is None
                    continue
                first_seen = first_seen or now  # the first read after the head was sent
                assert bulk.oldest_enqueued == first_seen
                assert first_seen >= sent_before  # the age is a lower bound ...
                assert first_seen - sent_after <= INTERVAL + SLACK  # ... short by at most one interval
            elif tick >= 2 and sent_before is None:  # the head, between two reads
                sent_before = time.time()
                send("flooder", "bulk")
                sent_after = time.time()
            elif sent_before is not None:
                for tenant, queue in plan[:12]:
                    send(tenant, queue, ms=20 if queue == "interactive" else 5)
                del plan[:12]
        assert not plan and first_seen is not None
        wait_for(lambda: true_depth(client, "interactive") == 0 and not client.hlen("unacked"), 30,
                 "the worker to finish the interactive tasks")
        reading = source.read(client, time.time())
    bulk = reading["bulk"]
    assert bulk.depth == true_depth(client, "bulk") == 310
    assert bulk.oldest_enqueued == first_seen
    assert bulk.tenants[0][0] == "flooder"
    assert sum(count for _, count in bulk.tenants) == 100  # the sample, not the backlog
    assert dict(bulk.tenants).get("carol", 0) < 10
    assert bulk.inflight is None and bulk.processed is None
    interactive = reading["interactive"]
    assert interactive.depth == 0 and interactive.oldest_enqueued is None and interactive.tenants == ()


def test_a_class_takes_only_its_priorities_of_a_queue(client: redis.Redis, celery_app: celery.Celery) -> None:
    """Celery priorities land in kombu's step lists (0-2 in ``q``, 3-5, 6-8, 9); a class mapped to
    priorities 6 and 9 counts the messages of those steps, one mapped to 0 and 3 the rest."""
    sent = {0: 4, 1: 1, 3: 3, 5: 2, 6: 2, 7: 1, 9: 5}
    for priority, count in sent.items():
        for _ in range(count):
            send(f"p{priority}", "prio", priority=priority)
    assert [client.llen(k) for k in ("prio", "prio\x06\x163", "prio\x06\x166", "prio\x06\x169")] == [5, 5, 3, 5]
    source = CelerySource(WatchConfig(
        "celery", {"high": (QueueRef("prio", (6, 9)),), "low": (QueueRef("prio", (0, 3)),)}, tenant=TENANT))
    reading = source.read(client, time.time())
    assert reading["high"].depth == 8
    assert reading["low"].depth == 10
    assert dict(reading["high"].tenants) == {"p6": 2, "p7": 1, "p9": 5}
    assert dict(reading["low"].tenants) == {"p0": 4, "p1": 1, "p3": 3, "p5": 2}


def test_reads_as_a_read_only_user(redis_server: RedisServer | GivenRedis, client: redis.Redis, celery_app: celery.Celery) -> None:
    """Every command of a read is allowed to a user with only read commands (no SCAN or KEYS);
    the same user cannot write, nor open a transaction."""
    if isinstance(redis_server, GivenRedis):
        pytest.skip("creates an ACL user on the test's own redis-server")
    for tenant in ("acme", "acme", "globex"):
        send(tenant, "reports", priority=4)
    send("acme", "emails")
    client.execute_command("ACL", "SETUSER", "watcher", "on", ">pw", "~*", "&*", "-@all", "+@read", "-@dangerous",
                           "-scan", "-keys", "+ping")
    watcher = redis_client(f"redis://watcher:pw@127.0.0.1:{redis_server.port}/0")
    try:
        watch = WatchConfig("celery", {"reports": (QueueRef("reports"),), "emails": (QueueRef("emails"),)},
                            tenant=TENANT)
        now = time.time()
        assert CelerySource(watch).read(watcher, now) == CelerySource(watch).read(client, now)
        assert CelerySource(watch).read(watcher, now)["reports"].tenants == (("acme", 2), ("globex", 1))
        with pytest.raises(redis.exceptions.NoPermissionError):
            watcher.lpush("reports", "x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            watcher.scan()
        with pytest.raises(redis.exceptions.NoPermissionError):
            watcher.pipeline(transaction=True).llen("reports").execute()
    finally:
        watcher.close()
        client.execute_command("ACL", "DELUSER", "watcher")


def captured_message(client: redis.Redis) -> dict[str, Any]:
    """A message exactly as Celery sent it to the broker (removed from Redis again)."""
    send("template", "capture")
    raw = client.lindex("capture", -1)
    client.delete("capture")
    return json.loads(raw)


def synthetic(template: dict[str, Any], tenant: str) -> bytes:
    """``template`` as another task: a fresh id and delivery tag, ``tenant`` in its kwargs."""
    task_id = str(uuid.uuid4())
    args, kwargs, embed = json.loads(base64.b64decode(template["body"]))
    kwargs = {**kwargs, "tenant_id": tenant}
    message = {
        **template,
        "body": base64.b64encode(json.dumps([args, kwargs, embed]).encode()).decode(),
        "headers": {**template["headers"], "id": task_id, "root_id": task_id, "kwargsrepr": repr(kwargs)},
        "properties": {**template["properties"], "correlation_id": task_id, "delivery_tag": str(uuid.uuid4())},
    }
    return json.dumps(message).encode()


def fill(client: redis.Redis, queue: str, template: dict[str, Any], count: int) -> None:
    """LPUSH ``count`` synthetic messages to ``queue`` (as kombu publishes), in pipelined chunks."""
    chunk = 2_000
    for start in range(0, count, chunk):
        pipe = client.pipeline(transaction=False)
        for first in range(start, min(start + chunk, count), 200):
            pipe.lpush(queue, *(synthetic(template, f"t{i % 7}") for i in range(first, min(first + 200, count))))
        pipe.execute()


def commands_of(client: redis.Redis) -> dict[str, int]:
    return {name: stats["calls"] for name, stats in client.info("commandstats").items()}


def test_a_read_costs_the_same_at_1000_and_1000000_queued(client: redis.Redis, celery_app: celery.Celery) -> None:
    """The commands a read issues depend on the configured lists and the sample, not on how many
    messages wait: the same count with 1,000 and with 1,000,000 queued (Celery messages at the
    consume end, where the sample reads; the rest, newer, cheap stand-ins)."""
    template = captured_message(client)
    source = CelerySource(WatchConfig(
        "celery", {"bulk": (QueueRef("bulk"),), "quiet": (QueueRef("quiet", (9,)),)}, tenant=TENANT, sample=100))
    fill(client, "bulk", template, 1_000)
    counts = []
    try:
        for queued in (1_000, 1_000_000):
            pipe = client.pipeline(transaction=False)
            for first in range(client.llen("bulk"), queued, 10_000):
                pipe.lpush("bulk", *(f"newer-{n}" for n in range(first, min(first + 10_000, queued))))
            pipe.execute()
            before = commands_of(client)
            reading = source.read(client, time.time())
            after = commands_of(client)
            counts.append(sum(calls - before.get(name, 0) for name, calls in after.items() if name != "cmdstat_info"))
            assert reading["bulk"].depth == queued
            assert sum(n for _, n in reading["bulk"].tenants) == 100
    finally:
        client.delete("bulk")
    # LLEN and LINDEX for each of bulk's 4 lists and quiet's 1, then one LRANGE for bulk's one non-empty list.
    assert counts == [11, 11]


def test_odd_messages_count_and_never_raise(client: redis.Redis) -> None:
    """Elements that are not Celery JSON messages count in depth and carry no tenant; the age
    follows the messages by their identity, from when a read first found each among the sampled,
    and is forgotten when the list empties."""
    odd = [b"not json", b"[1, 2]", b"{}", json.dumps({"headers": 7, "body": "!!!"}).encode(),
           json.dumps({"content-type": "application/x-python-serialize", "body": "gAN9cQAu",
                       "headers": {"id": "pickled"}, "properties": {"body_encoding": "base64"}}).encode(),
           json.dumps({"content-type": "application/json", "body": "bm90IGpzb24=", "headers": {"id": "bad-body"},
                       "properties": {"body_encoding": "base64"}}).encode()]
    client.lpush("odd", *odd)
    source = CelerySource(WatchConfig("celery", {"odd": (QueueRef("odd"),)}, tenant=TENANT))
    first = source.read(client, 1000.0)["odd"]
    assert (first.depth, first.oldest_enqueued, first.tenants) == (6, 1000.0, ())
    assert source.read(client, 1010.0)["odd"].oldest_enqueued == 1000.0  # the same head
    client.rpop("odd")
    assert source.read(client, 1020.0)["odd"].oldest_enqueued == 1000.0  # a new head, sampled since 1000
    client.delete("odd")
    client.lpush("odd", b"not json")
    assert source.read(client, 1025.0)["odd"].oldest_enqueued == 1025.0  # a message never sampled: new
    client.delete("odd")
    assert source.read(client, 1030.0)["odd"].oldest_enqueued is None
    client.lpush("odd", b"not json")
    assert source.read(client, 1040.0)["odd"].oldest_enqueued == 1040.0


def test_the_quiet_tenants_age_counts_from_when_their_message_was_first_sampled(client: redis.Redis,
                                                                                 celery_app: celery.Celery) -> None:
    """A quiet tenant's task behind a flood's head, within the sample: its age counts from the read
    that first found it there, while the flooder (noisy) is left out of the quiet tenants' oldest."""
    send("flooder", "bulk")
    send("carol", "bulk")
    for _ in range(150):
        send("flooder", "bulk")
    source = CelerySource(WatchConfig("celery", {"bulk": (QueueRef("bulk"),)}, tenant=TENANT, sample=100))
    source.read(client, 1000.0)
    client.rpop("bulk")  # the flooder's head taken: carol's task is next
    reading = source.read(client, 1100.0)["bulk"]
    figures = tenant_figures(reading.sample, reading.depth, noisy_min_queued=100)
    assert (figures.active, figures.quiet_oldest) == (2, 1000.0)
    assert dict(figures.oldest) == {"carol": 1000.0, "flooder": 1000.0}
    assert reading.oldest_enqueued == 1000.0


def test_prometheus_fires_queue_starving_for_the_flooded_class_only(
        redis_server: RedisServer | GivenRedis, client: redis.Redis, celery_app: celery.Celery, tmp_path: Path) -> None:
    """The whole path: the exporter serving a watch config (the YAML a user writes), a real
    Prometheus loading the rules ``fairctl generate`` writes for it, a real worker keeping the
    interactive class healthy while ``bulk`` floods past its 2 s SLO."""
    config = _watch_yaml(tmp_path, redis_server.url)
    with alerting(config, tmp_path) as (server, prometheus), \
            celery_worker(redis_server.url, "interactive", tmp_path / "worker.log"):
        for _ in range(200):
            send("flooder", "bulk")
        for n in range(20):
            send(f"tenant-{n % 4}", "interactive")
            time.sleep(0.1)
        firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
        wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
        wait_for(lambda: true_depth(client, "interactive") == 0, 30, "the worker to finish the interactive tasks")
        seen = scrape(server.url)
        assert [labels["queue"] for labels, _ in prometheus.query(firing)] == ["celery:bulk"], "the flooded class only"
    assert seen.value(m.QUEUE_DEPTH.name, queue="celery:bulk") == true_depth(client, "bulk") == 200
    assert seen.value(m.QUEUE_DEPTH.name, queue="celery:interactive") == 0
    assert seen.value(m.QUEUE_TENANT_SHARE.name, queue="celery:bulk", tenant="flooder") == 1.0
    assert seen.value(m.QUEUE_ACTIVE_TENANTS.name, queue="celery:bulk") == 1
    assert seen.value(m.QUEUE_QUIET_OLDEST_AGE.name, queue="celery:bulk") == 0, "the flooder is noisy"
    assert_memory_served(seen, client)
    assert m.QUEUE_INFLIGHT.name not in seen.names() and m.JOBS_PROCESSED.name not in seen.names()
    assert m.JOBS_DEAD_LETTERED.name not in seen.names() and m.JOBS_WAIT.series("_count") not in seen.names()


def _watch_yaml(tmp_path: Path, url: str) -> Config:
    """Two classes over two Celery queues, as docs/watching.md writes them; the bulk class's SLO is
    2 s, so a flood starves it at once."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": "celery:interactive", "weight": 70, "max_age": "30s", "starving_for": "1s"},
                       {"name": "celery:bulk", "weight": 30, "max_age": "2s", "starving_for": "1s"}]
    del data["classification"]
    data["watch"] = {"system": "celery", "url": url, "tenant": "kwargs.tenant_id",
                     "classes": {"celery:interactive": ["interactive"], "celery:bulk": ["bulk"]}}
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_loadgen_replays_a_storm_as_celery_tasks_that_a_real_worker_runs(
        redis_server: RedisServer | GivenRedis, client: redis.Redis, tmp_path: Path) -> None:
    """The bulk class takes priorities 6 and 9 of ``bulk``: its tasks are sent with priority 6,
    so kombu files them in that step's list."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": "celery:interactive", "weight": 70, "max_age": "30s"},
                       {"name": "celery:bulk", "weight": 30, "max_age": "1h"}]
    with_storm_rules(data, "celery:bulk", "celery:interactive")
    data["watch"] = {"system": "celery", "url": redis_server.url, "tenant": "kwargs.tenant_id",
                     "classes": {"celery:interactive": ["interactive"],
                                 "celery:bulk": [{"queue": "bulk", "priorities": [6, 9]}]}}
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(data))
    routes = replay_storm(tmp_path / "watch.yaml", tmp_path)
    assert "campaign: fairctl.sleep jobs, class celery:bulk, into celery queue bulk priority 6" in routes
    assert "resets: fairctl.sleep jobs, class celery:interactive, into celery queue interactive" in routes
    watch = watched(load_config(tmp_path / "watch.yaml"))
    readings = CelerySource(watch).read(client, time.time())  # type: ignore[arg-type]
    assert (readings["celery:bulk"].depth, readings["celery:interactive"].depth) == (STORM_BULK, STORM_INTERACTIVE)
    assert client.llen("bulk\x06\x166") == STORM_BULK, "kombu's list for priority step 6"
    assert readings["celery:bulk"].tenants == (("flooder", 100),), "the tenant is where watch.tenant says"
    assert {tenant for tenant, _ in readings["celery:interactive"].tenants} == {f"shop-{n}" for n in range(4)}
    log = tmp_path / "worker.log"
    with celery_worker(redis_server.url, "interactive,bulk", log, loglevel="info"):
        wait_for(lambda: log.read_text().count("succeeded in") == STORM_BULK + STORM_INTERACTIVE, 90,
                 "Celery's worker running every task")
    assert true_depth(client, "bulk") == true_depth(client, "interactive") == 0
