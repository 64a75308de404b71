"""The exporter watching BullMQ (https://bullmq.io): a real BullMQ worker (Node.js) serves one queue
while another floods, and the exporter, reading BullMQ's own keys read-only, serves exact depths,
oldest ages within a scrape interval of the jobs' own timestamps, the completions BullMQ recorded,
the flooding tenant on top and Redis's memory; a real Prometheus loading the generated rules fires
QueueStarving for the starved class only. A job that fails its last attempt is a dead letter and
pages (JobsDeadLettered), the waits of the jobs started are BullMQ's own ``processedOn`` less
``timestamp``, and ``queue.pause()`` pauses the classes that take the queue. Classes taking some
priority levels of one queue get their bands' exact depths and ages, and a read-only ACL user reads
with as many commands at 1,001,000 jobs queued and failed as at 1,000.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml

from alerts.rules import JOBS_DEAD_LETTERED, QUEUE_STARVING
from benchmarks.peers import NODE_PACKAGES
from exporter import metrics as m
from exporter.sources import QueueRef, watched
from exporter.sources.bullmq import LEVEL, BullmqSource
from fairness_core import Config, load_config
from fairness_stack.servers import RedisServer, stop_process

from .conftest import EXAMPLE_CONFIG, GivenRedis
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

URGENT, BULK = "bullmq:interactive", "bullmq:bulk"
JOBS_SCRIPT = Path(__file__).resolve().parent / "watch_bullmq" / "jobs.mjs"
TENANTS = ("tenant-0", "tenant-1", "tenant-2", "tenant-3")


@dataclass(frozen=True)
class Node:
    binary: str
    modules: Path  # node_modules holding BullMQ and its Redis client


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    """Node.js with BullMQ installed in a directory of this run's own: a directory shared with the
    benchmarks' peers was once written by two installs at once."""
    binary = shutil.which("node")
    assert binary is not None, "Node.js is needed to run a real BullMQ (apt-get install nodejs npm)"
    prefix = tmp_path_factory.mktemp("bullmq-node")
    done = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", *NODE_PACKAGES.values()],
                          capture_output=True, timeout=300, check=False)
    modules = prefix / "node_modules"
    assert done.returncode == 0 and all((modules / p).exists() for p in NODE_PACKAGES), done.stderr.decode()[-3000:]
    return Node(binary, modules)


def watch_config(tmp_path: Path, url: str, classes: Mapping[str, tuple[QueueRef, ...]]) -> Config:
    """Two classes over BullMQ queues (``classes``: their queues and priority levels); the bulk
    class's SLO is 2 s, so a flood starves it at once."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": URGENT, "weight": 70, "max_age": "30s", "starving_for": "1s"},
                       {"name": BULK, "weight": 30, "max_age": "2s", "starving_for": "1s"}]
    del data["classification"]  # BullMQ's callers choose the queue
    dead_lettered_config(data)
    data["watch"] = {"system": "bullmq", "url": url, "tenant": "data.tenant", "prefix": "bull", "classes": {
        name: [q.queue if not q.priorities else {"queue": q.queue, "priorities": list(q.priorities)} for q in queues]
        for name, queues in classes.items()}}
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _env(node: Node) -> dict[str, str]:
    return {**os.environ, "NODE_PATH": str(node.modules)}


def add(node: Node, url: str, queue: str, jobs: int, *, every_ms: int = 0, tenants: tuple[str, ...] = ("flooder",),
        priorities: tuple[int, ...] = (0,), fail: bool = False) -> None:
    """BullMQ's own Queue adds ``jobs`` jobs ``{tenant, n}``, tenants and priorities in turn (with
    ``fail``, jobs the test worker throws on). A
    producer that exits in error is judged by BullMQ's job counter: every job added (it failed
    closing) is done, none added is tried once more, some added fails the test with its output
    (once, in a loaded full-suite run, it exited 1 with its output not kept)."""
    counter = redis.Redis.from_url(url)

    def added() -> int:
        return int(counter.get(f"bull:{queue}:id") or 0)

    for attempt in (1, 2):
        before = added()
        done = subprocess.run([node.binary, str(JOBS_SCRIPT), "add", url, queue, str(jobs), str(every_ms), ",".join(tenants),
                               ",".join(map(str, priorities)), *(("fail",) if fail else ())], env=_env(node),
                              capture_output=True, timeout=120,
                              check=False)
        output = f"{done.stdout.decode()[-1000:]}{done.stderr.decode()[-3000:]}"
        if done.returncode == 0 or added() - before == jobs:
            return
        assert attempt == 1 and added() == before, f"adding BullMQ jobs failed (attempt {attempt}):\n{output}"
        warnings.warn(f"the BullMQ producer failed before adding a job; trying once more:\n{output}", stacklevel=2)


@contextmanager
def bullmq_worker(node: Node, url: str, queue: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real BullMQ Worker (concurrency 2) on ``queue`` until the block ends: 20 ms a job, or
    ``data.service_s`` for fairctl loadgen's."""
    process = subprocess.Popen([node.binary, str(JOBS_SCRIPT), "worker", url, queue], env=_env(node),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"ready", "the BullMQ worker did not start"
        yield process
    finally:
        stop_process(process, timeout=20)


def enqueued(client: redis.Redis, queue: str, job_id: bytes | str) -> float:
    """A job's own enqueue time (BullMQ's ``timestamp``, ms) in epoch seconds."""
    return int(client.hget(f"bull:{queue}:{job_id if isinstance(job_id, str) else job_id.decode()}", "timestamp")) / 1000


def test_a_flood_starves_its_class_and_the_exporter_sees_it_as_bullmq_does(
        redis_server: RedisServer | GivenRedis, tmp_path: Path, node: Node) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("interactive"),), BULK: (QueueRef("bulk"),)})
    add(node, redis_server.url, "bulk", 300)
    with alerting(config, tmp_path) as (server, prometheus):
        first_read(server)
        with bullmq_worker(node, redis_server.url, "interactive"):
            add(node, redis_server.url, "interactive", 20, every_ms=100, tenants=TENANTS)
            firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
            wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
            wait_for(lambda: client.zcard("bull:interactive:completed") == 20, 30, "the interactive jobs completed")
            seen = scrape(server.url)
            # The job's true age when the scrape's answer ended, at or after the read it served.
            truth_age = seen.answered - enqueued(client, "bulk", client.lindex("bull:bulk:wait", -1))
            assert [labels["queue"] for labels, _ in prometheus.query(firing)] == [BULK], "the starved class only"
    truth_depth = client.llen("bull:bulk:wait") + client.zcard("bull:bulk:prioritized")
    assert seen.value(m.QUEUE_DEPTH.name, queue=BULK) == truth_depth == 300
    assert seen.value(m.QUEUE_DEPTH.name, queue=URGENT) == 0
    assert 0 <= truth_age - seen.value(m.QUEUE_OLDEST_AGE.name, queue=BULK) <= 1.0, truth_age
    assert seen.value(m.JOBS_PROCESSED.name, queue=URGENT) == client.zcard("bull:interactive:completed") == 20
    assert seen.value(m.JOBS_PROCESSED.name, queue=BULK) == 0
    assert seen.value(m.QUEUE_INFLIGHT.name, queue=URGENT) == seen.value(m.QUEUE_INFLIGHT.name, queue=BULK) == 0
    shares = seen.series(m.QUEUE_TENANT_SHARE.name)
    assert shares[((m.QUEUE, BULK), (m.TENANT, "flooder"))] == 1.0
    assert seen.value(m.QUEUE_ACTIVE_TENANTS.name, queue=BULK) == 1
    assert seen.value(m.QUEUE_QUIET_OLDEST_AGE.name, queue=BULK) == 0, "the flooder is noisy: no quiet tenant waits"
    assert seen.value(m.QUEUE_PAUSED.name, queue=BULK) == seen.value(m.QUEUE_PAUSED.name, queue=URGENT) == 0
    assert seen.value(m.JOBS_WAIT.series("_count"), queue=URGENT) == 20
    assert (seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT), seen.value(m.DEAD_LETTERS.name)) == (0, 0)
    assert_memory_served(seen, client)
    assert m.JOBS_FAILED.name not in seen.names(), "what the reader does not tell is left out, not served as 0"


def job_waits(client: redis.Redis, queue: str) -> list[float]:
    """The waits of the queue's finished jobs as BullMQ's own records have them: from ``timestamp``
    to ``processedOn`` (ms)."""
    ids = [*client.zrange(f"bull:{queue}:completed", 0, -1), *client.zrange(f"bull:{queue}:failed", 0, -1)]
    times = [client.hmget(f"bull:{queue}:{job_id.decode()}", "timestamp", "processedOn") for job_id in ids]
    return [(int(processed) - int(added)) / 1000 for added, processed in times]


def test_a_failed_job_pages_as_a_dead_letter_and_the_waits_are_bullmqs_own(
        redis_server: RedisServer | GivenRedis, tmp_path: Path, node: Node) -> None:
    """A real worker runs ten jobs and one that throws on its only attempt: BullMQ moves it to its
    failed set, the exporter counts it dead-lettered for its class, and Prometheus fires
    JobsDeadLettered for that class alone; the wait histogram holds each started job's wait, from
    BullMQ's own timestamps. ``queue.pause()`` then pauses the class."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("interactive"),), BULK: (QueueRef("bulk"),)})
    with alerting(config, tmp_path) as (server, prometheus):
        first_read(server)
        scraped_by(prometheus, m.JOBS_DEAD_LETTERED.name)
        with bullmq_worker(node, redis_server.url, "interactive"):
            add(node, redis_server.url, "interactive", 10, every_ms=150, tenants=TENANTS)
            add(node, redis_server.url, "interactive", 1, fail=True)
            wait_for(lambda: (client.zcard("bull:interactive:completed"), client.zcard("bull:interactive:failed"))
                     == (10, 1), 30, "BullMQ's worker running every job")
            assert [labels["queue"] for labels in pages(prometheus, JOBS_DEAD_LETTERED)] == [URGENT]
            seen = scrape(server.url)
        assert seen.value(m.QUEUE_PAUSED.name, queue=URGENT) == 0
        subprocess.run([node.binary, str(JOBS_SCRIPT), "pause", redis_server.url, "interactive"], env=_env(node),
                       check=True, capture_output=True, timeout=60)
        paused = scrape(server.url)
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT) == client.zcard("bull:interactive:failed") == 1
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=BULK) == 0
    assert seen.value(m.DEAD_LETTERS.name) == 1
    assert seen.value(m.JOBS_PROCESSED.name, queue=URGENT) == 10
    assert_waits(seen, URGENT, job_waits(client, "interactive"), tolerance=1e-6)
    assert (paused.value(m.QUEUE_PAUSED.name, queue=URGENT), paused.value(m.QUEUE_PAUSED.name, queue=BULK)) == (1, 0)


def test_classes_taking_priority_levels_of_one_queue_get_their_bands(
        redis_server: RedisServer | GivenRedis, tmp_path: Path, node: Node) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    add(node, redis_server.url, "ranked", 40, tenants=("a", "b", "c", "d", "e"), priorities=(0, 1, 2, 3))
    by_level: dict[int, list[float]] = {}
    for job_id, score in client.zrange("bull:ranked:prioritized", 0, -1, withscores=True):
        by_level.setdefault(int(score) // LEVEL, []).append(enqueued(client, "ranked", job_id))
    wait_ids = client.lrange("bull:ranked:wait", 0, -1)
    by_level[0] = [enqueued(client, "ranked", job_id) for job_id in wait_ids]

    levels = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("ranked", (1,)),),
                                                       BULK: (QueueRef("ranked", (2, 3)),)})
    reading = BullmqSource(watched(levels)).read(client, time.time())  # type: ignore[arg-type]
    band = f"{1 * LEVEL}", f"{2 * LEVEL - 1}"
    assert reading[URGENT].depth == client.zcount("bull:ranked:prioritized", *band) == len(by_level[1]) == 10
    assert reading[BULK].depth == len(by_level[2]) + len(by_level[3]) == 20
    assert reading[URGENT].oldest_enqueued == min(by_level[1])
    assert reading[BULK].oldest_enqueued == min(by_level[2] + by_level[3])
    assert sum(n for _, n in reading[BULK].tenants) == 20, "the sample is the band's jobs"
    assert reading[URGENT].inflight is None and reading[URGENT].processed is None, "the active list is not split by level"

    whole = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("ranked", (0,)),), BULK: (QueueRef("ranked"),)})
    source = BullmqSource(watched(whole))  # type: ignore[arg-type]
    reading = source.read(client, time.time())
    assert reading[URGENT].depth == client.llen("bull:ranked:wait") == 10, "level 0: the wait list"
    assert reading[BULK].depth == 40
    assert reading[BULK].oldest_enqueued == reading[URGENT].oldest_enqueued == min(by_level[0])
    assert (reading[BULK].inflight, reading[BULK].processed) == (0, 0)
    client.rpush("bull:ranked:wait", "0:0")  # a BullMQ 4.x marker where workers take next
    assert source.read(client, time.time())[URGENT] == reading[URGENT]


def test_reads_run_as_a_read_only_user_with_commands_flat_in_the_jobs(
        redis_server: RedisServer | GivenRedis, tmp_path: Path, node: Node) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    watcher = read_only_user(admin, redis_server.url)
    config = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("interactive"),), BULK: (QueueRef("bulk"),)})
    source = BullmqSource(watched(config))  # type: ignore[arg-type]
    add(node, redis_server.url, "bulk", 1_000)  # real jobs where workers take next: the head and sample read them
    first = enqueued(admin, "bulk", admin.lindex("bull:bulk:wait", -1))
    with bullmq_worker(node, redis_server.url, "interactive"):  # real records in the completed and failed sets
        add(node, redis_server.url, "interactive", 12, tenants=TENANTS)
        add(node, redis_server.url, "interactive", 6, fail=True)
        wait_for(lambda: (admin.zcard("bull:interactive:completed"), admin.zcard("bull:interactive:failed")) == (12, 6),
                 30, "BullMQ's worker running every job")
    failed = admin.zrange("bull:interactive:failed", -1, -1, withscores=True)[0][1]
    admin.zadd("bull:bulk:failed", {f"padding-{n}": failed - 1 - n for n in range(1_000)})
    few = steady_cost(source, watcher, admin)

    pad = [f"padding-{n}" for n in range(10_000)]
    pipe = admin.pipeline(transaction=False)
    for chunk in range(100):  # 1,001,000 ids waiting, the padding at the newest end (BullMQ LPUSHes), and as many failed
        pipe.lpush("bull:bulk:wait", *pad)
        pipe.zadd("bull:bulk:failed", {f"old-{chunk}-{n}": failed - 10_000 - chunk * 10_000 - n for n in range(10_000)})
    pipe.execute()
    assert admin.llen("bull:bulk:wait") == 1_001_000 and admin.zcard("bull:bulk:failed") == 1_001_000
    try:
        many = steady_cost(source, watcher, admin)
        readings = source.read(watcher, time.time())
    finally:
        admin.flushdb()  # a million jobs' memory back to the shared server
    # two a list or band (each class: wait, paused, prioritized), six a queue, an HMGET a head and sampled job
    assert few == many == 2 * 3 * 2 + 6 * 2 + 100, (few, many)
    reading = readings[BULK]
    assert (reading.depth, reading.oldest_enqueued, reading.tenants) == (1_001_000, first, (("flooder", 100),))
    assert readings.dead_letters == 1_001_000 + 6
    assert (readings[URGENT].processed, readings[URGENT].dead_lettered) == (0, 0), "all there before its first read"



def test_loadgen_replays_a_storm_as_bullmq_jobs_that_real_workers_run(
        redis_server: RedisServer | GivenRedis, tmp_path: Path, node: Node) -> None:
    """Added with BullMQ's own Python client; the bulk class takes priority level 2 of ``bulk``, so
    its jobs are added with that priority."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url, {URGENT: (QueueRef("interactive"),),
                                                        BULK: (QueueRef("bulk", (2,)),)})
    data = yaml.safe_load((tmp_path / "watch.yaml").read_text())
    with_storm_rules(data, BULK, URGENT)
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(data))
    routes = replay_storm(tmp_path / "watch.yaml", tmp_path)
    assert "campaign: newsletter jobs, class bullmq:bulk, into bullmq queue bulk priority 2" in routes
    assert "resets: password_reset jobs, class bullmq:interactive, into bullmq queue interactive" in routes
    readings = BullmqSource(watched(config)).read(client, time.time())  # type: ignore[arg-type]
    assert (readings[BULK].depth, readings[URGENT].depth) == (STORM_BULK, STORM_INTERACTIVE)
    assert client.zcard("bull:bulk:prioritized") == STORM_BULK, "added at priority 2"
    assert readings[BULK].tenants == (("flooder", 100),), "the tenant is where watch.tenant says (data.tenant)"
    assert {tenant for tenant, _ in readings[URGENT].tenants} == {f"shop-{n}" for n in range(4)}
    with bullmq_worker(node, redis_server.url, "interactive"), bullmq_worker(node, redis_server.url, "bulk"):
        wait_for(lambda: client.zcard("bull:interactive:completed") + client.zcard("bull:bulk:completed")
                 == STORM_BULK + STORM_INTERACTIVE, 90, "BullMQ's workers running every job")
    assert client.zcard("bull:interactive:failed") + client.zcard("bull:bulk:failed") == 0
