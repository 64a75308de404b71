"""The exporter watching Sidekiq (https://sidekiq.org): a real ``sidekiq`` process serves weighted
queues while another floods, jobs queued by Sidekiq's own client, and the exporter, reading
Sidekiq's own keys read-only, serves exact depths, oldest ages within a scrape interval of the
jobs' own ``enqueued_at``, the busy jobs Sidekiq's heartbeat records, the flooding tenant on top
and Redis's memory; a real Prometheus loading the generated rules fires QueueStarving for the
starved class only. A job that dies is a dead letter of its queue's class and pages
(JobsDeadLettered), and the waits of the jobs seen running are their own start less ``enqueued_at``
to within the second Sidekiq's ``run_at`` keeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from alerts.rules import JOBS_DEAD_LETTERED, QUEUE_STARVING
from exporter import metrics as m
from exporter.sources import QueueRef, WatchConfig, watched
from exporter.sources.sidekiq import SidekiqSource
from fairness_core import Config, ConfigError, load_config, parse_config
from fairness_stack.servers import RedisServer, find_binary, stop_process

from .conftest import EXAMPLE_CONFIG, ROOT, GivenRedis
from .exporter_support import scrape
from .support import wait_for
from .watch_support import (
    STORM_BULK,
    STORM_INTERACTIVE,
    alerting,
    assert_memory_served,
    assert_waits,
    dead_lettered_config,
    first_read,
    pages,
    read_only_user,
    replay_storm,
    scraped_by,
    steady_cost,
    with_storm_rules,
)

URGENT, BULK = "sidekiq:interactive", "sidekiq:bulk"
JOBS = Path(__file__).resolve().parent / "watch_sidekiq"
SIDEKIQ_HINT = "install it with: apt-get install -y --no-install-recommends ruby-sidekiq"
SLOW = 6  # seconds a slow job runs: longer than Sidekiq 6.4's 5 s heartbeat, so one records it busy
SURELY_SEEN = SLOW + 2  # seconds a job runs that a heartbeat must see busy, even one a loaded machine delays


def watch_config(tmp_path: Path, url: str) -> Config:
    """Two classes: the urgent one over two weighted Sidekiq queues, the bulk one over ``bulk``,
    whose SLO is 2 s, so a flood starves it at once."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": URGENT, "weight": 70, "max_age": "30s", "starving_for": "1s"},
                       {"name": BULK, "weight": 30, "max_age": "2s", "starving_for": "1s"}]
    data["classification"] = [{"class": URGENT, "reason": "default"}]
    dead_lettered_config(data)
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    watch = WatchConfig(system="sidekiq", url=url, tenant=("args", "0"),
                        classes={URGENT: (QueueRef("interactive"), QueueRef("other")), BULK: (QueueRef("bulk"),)})
    return load_config(path).with_section("watch", watch)


def produce(url: str, *batches: dict[str, Any]) -> None:
    """Queues ``batches`` ({"queue", "class", "args": [[...], ...]}, and "retry" where given) with
    Sidekiq::Client.push_bulk."""
    subprocess.run([find_binary("ruby", SIDEKIQ_HINT), str(JOBS / "produce.rb")], input=json.dumps(batches).encode(),
                   env={**os.environ, "REDIS_URL": url}, check=True, capture_output=True, timeout=60)


@contextmanager
def sidekiq(url: str, log: Path, *queues: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``sidekiq`` (3 threads, 1 s shutdown timeout) serving ``queues`` (``name,weight``)
    until the block ends; entered once its process has registered in Redis."""
    client = redis.Redis.from_url(url)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [find_binary("sidekiq", SIDEKIQ_HINT), "-r", str(JOBS / "worker.rb"), "-c", "3", "-t", "1",
             *(arg for q in queues for arg in ("-q", q))],
            cwd=ROOT, env={**os.environ, "REDIS_URL": url}, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: process.poll() is None and client.scard("processes") == 1, 30,
                 f"sidekiq registered ({log.read_text()[-2000:]})")
        yield process
    finally:
        stop_process(process, timeout=20)


def busy(client: redis.Redis) -> int:
    """Jobs running, as Sidekiq's own process records count them (the ``busy`` field of each)."""
    return sum(int(client.hget(identity, "busy") or 0) for identity in client.smembers("processes"))


def test_a_flood_starves_its_class_and_the_exporter_sees_it_as_sidekiq_does(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url)
    produce(redis_server.url, {"queue": "bulk", "class": "Work", "args": [["flooder", n] for n in range(300)]})
    with alerting(config, tmp_path) as (server, prometheus), \
            sidekiq(redis_server.url, tmp_path / "sidekiq.log", "interactive,3", "other,1"):
        first_read(server)
        produce(redis_server.url,
                {"queue": "other", "class": "Work", "args": [[f"slow-{n}", n, SLOW] for n in range(2)]},
                {"queue": "interactive", "class": "Work", "args": [[f"tenant-{n % 4}", n] for n in range(20)]})
        wait_for(lambda: scrape(server.url).value(m.QUEUE_INFLIGHT.name, queue=URGENT) == busy(client) == 2, 15,
                 "the two slow jobs served as in flight, as Sidekiq counts them")
        assert scrape(server.url).value(m.QUEUE_INFLIGHT.name, queue=BULK) == 0
        firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
        wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
        wait_for(lambda: client.llen("queue:interactive") == client.llen("queue:other") == 0, 30,
                 "the urgent jobs taken")
        seen = scrape(server.url)
        oldest = json.loads(client.lindex("queue:bulk", -1))  # type: ignore[arg-type]
        truth_age = seen.answered - oldest["enqueued_at"]
        assert [labels["queue"] for labels, _ in prometheus.query(firing)] == [BULK], "the starved class only"
    assert oldest["args"] == ["flooder", 0], "Sidekiq's oldest job is at the right end"
    assert seen.value(m.QUEUE_DEPTH.name, queue=BULK) == client.llen("queue:bulk") == 300
    assert seen.value(m.QUEUE_DEPTH.name, queue=URGENT) == 0
    assert 0 <= truth_age - seen.value(m.QUEUE_OLDEST_AGE.name, queue=BULK) <= 1.0, truth_age
    shares = seen.series(m.QUEUE_TENANT_SHARE.name)
    assert shares[((m.QUEUE, BULK), (m.TENANT, "flooder"))] == 1.0
    assert m.JOBS_PROCESSED.name not in seen.names(), "Sidekiq counts completions globally only: left out, not 0"
    assert m.QUEUE_PAUSED.name not in seen.names()
    assert seen.value(m.QUEUE_ACTIVE_TENANTS.name, queue=BULK) == 1
    assert seen.value(m.QUEUE_QUIET_OLDEST_AGE.name, queue=BULK) == 0, "the flooder is noisy: no quiet tenant waits"
    assert seen.value(m.JOBS_WAIT.series("_count"), queue=URGENT) >= 2, "the two slow jobs, seen busy"
    assert (seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT), seen.value(m.DEAD_LETTERS.name)) == (0, 0)
    assert_memory_served(seen, client)


def test_a_job_that_dies_pages_as_a_dead_letter_and_the_waits_are_sidekiqs_own(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """Five slow jobs and one that dies, queued before Sidekiq (3 threads) starts, so they wait
    for it and for each other: Sidekiq sends the dying one (``retry: 0``) to its dead set, the
    exporter counts it dead-lettered for its queue's class, and Prometheus fires JobsDeadLettered
    for that class alone. Each job runs longer than a heartbeat, so each is seen busy once: the
    wait histogram holds each one's wait, its own start less its ``enqueued_at``, to within the
    second of Sidekiq's ``run_at``."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url)
    with alerting(config, tmp_path) as (server, prometheus):
        first_read(server)
        scraped_by(prometheus, m.JOBS_DEAD_LETTERED.name)
        produce(redis_server.url,
                {"queue": "other", "class": "Work", "args": [[f"slow-{n}", n, SURELY_SEEN] for n in range(5)]},
                {"queue": "interactive", "class": "Doomed", "args": [["tenant-9", 0, SURELY_SEEN]], "retry": 0})
        queued = [json.loads(raw) for queue in ("queue:other", "queue:interactive") for raw in client.lrange(queue, 0, -1)]
        with sidekiq(redis_server.url, tmp_path / "sidekiq.log", "interactive,3", "other,1"):
            wait_for(lambda: client.zcard("dead") == 1, 90, "Sidekiq sending the dying job to its dead set")
            assert [labels["queue"] for labels in pages(prometheus, JOBS_DEAD_LETTERED)] == [URGENT]
            wait_for(lambda: client.hlen("test:started") == 6 and busy(client) == 0, 60, "every job run")
            time.sleep(2)  # busy 0: a heartbeat after the last job, which the heartbeat before showed busy
            seen = scrape(server.url)
    dead = json.loads(client.zrange("dead", 0, -1)[0])
    assert (dead["class"], dead["queue"]) == ("Doomed", "interactive")
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT) == 1
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=BULK) == 0
    assert seen.value(m.DEAD_LETTERS.name) == 1
    started = {jid.decode(): float(at) for jid, at in client.hgetall("test:started").items()}
    truth = [started[job["jid"]] - job["enqueued_at"] for job in queued]
    assert sum(1 for wait in truth if wait > SURELY_SEEN - 1) == 3, truth  # half of them waited for one of the 3 threads
    assert_waits(seen, URGENT, truth, tolerance=1.0)



def test_loadgen_replays_a_storm_as_sidekiq_jobs_that_a_real_sidekiq_runs(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": URGENT, "weight": 70, "max_age": "30s"}, {"name": BULK, "weight": 30, "max_age": "1h"}]
    with_storm_rules(data, BULK, URGENT)
    data["watch"] = {"system": "sidekiq", "url": redis_server.url, "tenant": "args.0",
                     "classes": {URGENT: ["interactive", "other"], BULK: ["bulk"]}}
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(data))
    routes = replay_storm(tmp_path / "watch.yaml", tmp_path)
    assert "campaign: FairctlSleep jobs, class sidekiq:bulk, into sidekiq queue bulk" in routes
    assert "resets: FairctlSleep jobs, class sidekiq:interactive, into sidekiq queue interactive" in routes, \
        "a class's first queue"
    watch = watched(load_config(tmp_path / "watch.yaml"))
    readings = SidekiqSource(watch).read(client, time.time())  # type: ignore[arg-type]
    assert (readings[BULK].depth, readings[URGENT].depth) == (STORM_BULK, STORM_INTERACTIVE)
    assert readings[BULK].tenants == (("flooder", 100),), "the tenant is where watch.tenant says (args.0)"
    assert {tenant for tenant, _ in readings[URGENT].tenants} == {f"shop-{n}" for n in range(4)}
    assert client.smembers("queues") == {b"bulk", b"interactive"}, "the queues registered as Sidekiq's client does"
    with sidekiq(redis_server.url, tmp_path / "sidekiq.log", "interactive,3", "bulk,1"):
        wait_for(lambda: int(client.get("stat:processed") or 0) == STORM_BULK + STORM_INTERACTIVE, 60,
                 "Sidekiq running every job (its stats are written with each heartbeat)")
    assert int(client.get("stat:failed") or 0) == 0, (tmp_path / "sidekiq.log").read_text()[-2000:]


def test_reads_run_as_a_read_only_user_with_commands_flat_in_the_jobs(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    watcher = read_only_user(admin, redis_server.url)
    source = SidekiqSource(watched(watch_config(tmp_path, redis_server.url)))  # type: ignore[arg-type]
    produce(redis_server.url, {"queue": "bulk", "class": "Work", "args": [["flooder", n] for n in range(1_000)]},
            {"queue": "interactive", "class": "Doomed", "args": [[f"tenant-{n}", n] for n in range(5)], "retry": 0})

    with sidekiq(redis_server.url, tmp_path / "sidekiq.log", "interactive") as process:
        wait_for(lambda: admin.zcard("dead") == 5, 30, "Sidekiq sending the dying jobs to its dead set")
        # Killed, it stays registered until its heartbeat keys expire (60 s), as a crashed process
        # does: its keys are read, and no fetch or heartbeat of its own lands in the count.
        stop_process(process, kill=True)
    try:
        few = steady_cost(source, watcher, admin)
        pad = json.dumps({"class": "Work", "args": ["padding", 0], "queue": "bulk", "jid": "0",
                          "enqueued_at": time.time()})
        died = admin.zrange("dead", 0, 0, withscores=True)[0][1]
        pipe = admin.pipeline(transaction=False)
        for chunk in range(100):  # 1,001,000 jobs queued, the padding newer (left of) the real ones, and 1,000,000 older dead
            pipe.lpush("queue:bulk", *[pad] * 10_000)
            pipe.zadd("dead", {json.dumps({"class": "Doomed", "queue": "bulk", "jid": f"{chunk}-{n}"}):
                               died - 1 - chunk * 10_000 - n for n in range(10_000)})
        pipe.execute()
        assert admin.llen("queue:bulk") == 1_001_000 and admin.zcard("dead") == 1_000_005
        many = steady_cost(source, watcher, admin)
        readings = source.read(watcher, time.time())
    finally:
        admin.flushdb()  # a million jobs' memory back to the shared server
    assert few == many == 2 * 3 + 1 + 2 + 2, (few, many)  # 2 a queue, the process set, 2 the dead set, 2 a process
    reading = readings[BULK]
    assert reading.depth == 1_001_000
    assert reading.tenants == (("flooder", 100),), "the sample is the oldest jobs, at the right end"
    assert readings.dead_letters == 1_000_005
    assert readings[URGENT].dead_lettered == 0, "all dead before its first read"


def test_a_class_takes_whole_sidekiq_queues(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": URGENT, "weight": 70, "max_age": "30s"}, {"name": BULK, "weight": 30, "max_age": "2s"}]
    data["classification"] = [{"class": URGENT, "reason": "default"}]
    data["watch"] = {"system": "sidekiq", "classes": {URGENT: ["interactive"], BULK: [{"queue": "bulk", "priorities": [1]}]}}
    with pytest.raises(ConfigError, match=rf"watch\.classes\.{BULK}\[0\]\.priorities: sidekiq's queues have no priorities"):
        parse_config(data, "watch.yaml")

