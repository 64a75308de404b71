"""The exporter watching RQ (https://python-rq.org): a real ``rq worker`` serves one queue while
another floods, and the exporter, reading RQ's own keys read-only, serves exact depths, oldest
ages within a scrape interval of the truth, the completions RQ recorded, the flooding tenant on
top and Redis's memory; a real Prometheus loading the generated rules fires QueueStarving for the
starved class only. A job that fails is a dead letter and pages (JobsDeadLettered), the waits of
the jobs started are RQ's own ``started_at`` less ``enqueued_at``, and ``rq suspend`` pauses every
class.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml
from rq import Queue
from rq.job import Job
from rq.suspension import resume, suspend

from alerts.rules import (
    JOBS_DEAD_LETTERED,
    JOBS_REDELIVERED_HIGH,
    PRIORITY_INVERSION,
    QUEUE_PAUSED,
    QUEUE_STARVING,
    QUIET_TENANTS_STARVING,
    REDIS_MAY_EVICT_JOBS,
    REDIS_MEMORY_HIGH,
    TENANT_DOMINATING_QUEUE,
    build_alerts,
    left_out,
)
from exporter import metrics as m
from exporter.sources import watched
from exporter.sources.rq import RqSource
from exporter.watch import WatchCollector
from fairness_core import Config, load_config
from fairness_stack.servers import RedisServer, stop_process

from .conftest import EXAMPLE_CONFIG, ROOT, GivenRedis
from .exporter_support import scrape
from .support import run_fairctl, wait_for
from .test_unconfigured_exporter import scrape_of
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
    scrape_cost,
    scraped_by,
    steady_cost,
    with_storm_rules,
)

URGENT, BULK = "rq:interactive", "rq:bulk"
TASK = "tests.watch_rq_tasks.work"
FAILING = "tests.watch_rq_tasks.fail"


def watch_config(tmp_path: Path, url: str, *, storm_rules: bool = False) -> Config:
    """Two classes over two RQ queues; the bulk class's SLO is 2 s, so a flood starves it at once.
    RQ's callers choose the queue, so no classification rules, except ``storm_rules`` for
    fairctl loadgen's storm."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["classes"] = [{"name": URGENT, "weight": 70, "max_age": "30s", "starving_for": "1s"},
                       {"name": BULK, "weight": 30, "max_age": "2s", "starving_for": "1s"}]
    del data["classification"]
    if storm_rules:
        with_storm_rules(data, BULK, URGENT)
    dead_lettered_config(data)
    data["watch"] = {"system": "rq", "url": url, "tenant": "args.0",
                     "classes": {URGENT: ["interactive"], BULK: ["bulk"]}}
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


@contextmanager
def rq_worker(url: str, *queues: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``rq worker`` (no fork per job) serving ``queues`` until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--url", url, "--worker-class", "rq.worker.SimpleWorker",
         "--quiet", *queues], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield process
    finally:
        stop_process(process, timeout=20)


def test_a_flood_starves_its_class_and_the_exporter_sees_it_as_rq_does(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url)
    interactive, bulk = Queue("interactive", connection=client), Queue("bulk", connection=client)
    first_bulk = time.time()
    for n in range(300):
        bulk.enqueue(TASK, "flooder", n=n)
    with alerting(config, tmp_path) as (server, prometheus):
        first_read(server)
        with rq_worker(redis_server.url, "interactive"):
            for n in range(20):
                interactive.enqueue(TASK, f"tenant-{n % 4}", n=n)
                time.sleep(0.1)
            firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
            wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
            wait_for(lambda: client.zcard("rq:finished:interactive") == 20, 30, "the interactive jobs finished")
            seen = scrape(server.url)
            truth_age = seen.answered - first_bulk  # first_bulk: before RQ stamped the first job
            assert [labels["queue"] for labels, _ in prometheus.query(firing)] == [BULK], "the starved class only"
    assert seen.value(m.QUEUE_DEPTH.name, queue=BULK) == client.llen("rq:queue:bulk") == 300
    assert seen.value(m.QUEUE_DEPTH.name, queue=URGENT) == 0
    assert 0 <= truth_age - seen.value(m.QUEUE_OLDEST_AGE.name, queue=BULK) <= 1.0, truth_age
    assert seen.value(m.JOBS_PROCESSED.name, queue=URGENT) == 20 and seen.value(m.JOBS_PROCESSED.name, queue=BULK) == 0
    shares = seen.series(m.QUEUE_TENANT_SHARE.name)
    assert shares[((m.QUEUE, BULK), (m.TENANT, "flooder"))] == 1.0
    assert seen.value(m.QUEUE_ACTIVE_TENANTS.name, queue=BULK) == 1
    assert seen.value(m.QUEUE_QUIET_OLDEST_AGE.name, queue=BULK) == 0, "the flooder is noisy: no quiet tenant waits"
    assert seen.value(m.QUEUE_PAUSED.name, queue=BULK) == 0
    assert (seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT), seen.value(m.DEAD_LETTERS.name)) == (0, 0)
    assert seen.value(m.JOBS_WAIT.series("_count"), queue=URGENT) == 20
    assert_memory_served(seen, client)
    assert m.JOBS_FAILED.name not in seen.names(), "what RQ cannot tell is left out, not served as 0"


def job_wait(client: redis.Redis, job_id: str) -> float:
    """A job's wait as RQ's own record has it: from ``enqueued_at`` to ``started_at``."""
    job = Job.fetch(job_id, connection=client)
    assert job.started_at is not None and job.enqueued_at is not None
    return (job.started_at - job.enqueued_at).total_seconds()


def test_a_failed_job_pages_as_a_dead_letter_and_the_waits_are_rqs_own(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """A real worker runs ten jobs and one that raises: RQ files it in its failed registry, the
    exporter counts it dead-lettered for its class, and Prometheus fires JobsDeadLettered for that
    class alone; the wait histogram holds each started job's wait, from RQ's own timestamps."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url)
    interactive, bulk = Queue("interactive", connection=client), Queue("bulk", connection=client)
    bulk.enqueue(TASK, "flooder")  # a class with a queue no worker serves: nothing dead-lettered there
    with alerting(config, tmp_path) as (server, prometheus):
        first_read(server)
        scraped_by(prometheus, m.JOBS_DEAD_LETTERED.name)
        with rq_worker(redis_server.url, "interactive"):
            jobs = []
            for n in range(10):
                jobs.append(interactive.enqueue(TASK, f"tenant-{n % 4}", n=n).id)
                time.sleep(0.15)
            jobs.append(interactive.enqueue(FAILING, "tenant-9").id)
            wait_for(lambda: client.zcard("rq:finished:interactive") == 10 and client.zcard("rq:failed:interactive") == 1,
                     30, "RQ's worker running every job")
            assert [labels["queue"] for labels in pages(prometheus, JOBS_DEAD_LETTERED)] == [URGENT]
            seen = scrape(server.url)
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=URGENT) == client.zcard("rq:failed:interactive") == 1
    assert seen.value(m.JOBS_DEAD_LETTERED.name, queue=BULK) == 0
    assert seen.value(m.DEAD_LETTERS.name) == 1
    assert seen.value(m.JOBS_PROCESSED.name, queue=URGENT) == 10
    assert_waits(seen, URGENT, [job_wait(client, job_id) for job_id in jobs], tolerance=1e-3)
    assert seen.value(m.JOBS_WAIT.series("_count"), queue=BULK) == 0, "a job never started has no wait"


def test_rq_suspend_pauses_every_class(redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """``rq suspend`` stops every worker of the Redis: every class is served as paused until
    ``rq resume``."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    source = RqSource(watched(watch_config(tmp_path, redis_server.url)))  # type: ignore[arg-type]
    assert {name: r.paused for name, r in source.read(client, time.time()).items()} == {URGENT: False, BULK: False}
    suspend(client)
    try:
        assert {name: r.paused for name, r in source.read(client, time.time()).items()} == {URGENT: True, BULK: True}
    finally:
        resume(client)
    assert not source.read(client, time.time())[URGENT].paused


def test_loadgen_replays_a_storm_as_rq_jobs_that_a_real_worker_runs(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url, storm_rules=True)
    routes = replay_storm(tmp_path / "watch.yaml", tmp_path)
    assert "campaign: fairness_sim.watched_jobs.sleep jobs, class rq:bulk, into rq queue bulk" in routes
    assert "resets: fairness_sim.watched_jobs.sleep jobs, class rq:interactive, into rq queue interactive" in routes
    readings = RqSource(watched(config)).read(client, time.time())  # type: ignore[arg-type]
    assert (readings[BULK].depth, readings[URGENT].depth) == (STORM_BULK, STORM_INTERACTIVE)
    assert readings[BULK].tenants == (("flooder", 100),), "the tenant is where watch.tenant says (args.0)"
    assert {tenant for tenant, _ in readings[URGENT].tenants} == {f"shop-{n}" for n in range(4)}
    with rq_worker(redis_server.url, "interactive", "bulk"):
        wait_for(lambda: client.zcard("rq:finished:interactive") + client.zcard("rq:finished:bulk")
                 == STORM_BULK + STORM_INTERACTIVE, 60, "RQ's worker running every job")
    assert client.zcard("rq:failed:interactive") + client.zcard("rq:failed:bulk") == 0


def test_reads_run_as_a_read_only_user_with_commands_flat_in_the_jobs(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """The same commands a read at 1,000 jobs queued and failed as at 1,000,000 of each: 7 a
    queue and the suspension, then an HMGET for the head and each job of the tenant sample."""
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    watcher = read_only_user(admin, redis_server.url)
    config = watch_config(tmp_path, redis_server.url)
    source = RqSource(watched(config))  # type: ignore[arg-type]
    exporter = WatchCollector(config, watcher)
    bulk = Queue("bulk", connection=admin)
    for n in range(1_000):  # real jobs at the head: the sample reads their hashes
        bulk.enqueue(TASK, "flooder", n=n)
    with rq_worker(redis_server.url, "interactive"):  # real records in the finished and failed registries
        for n in range(18):
            Queue("interactive", connection=admin).enqueue(TASK if n % 3 else FAILING, f"tenant-{n % 4}", n=n)
        wait_for(lambda: admin.zcard("rq:finished:interactive") == 12 and admin.zcard("rq:failed:interactive") == 6,
                 30, "RQ's worker running every job")
    failed = admin.zrange("rq:failed:interactive", -1, -1, withscores=True)[0][1]
    admin.zadd("rq:failed:bulk", {f"padding-{n}": failed - 1 - n for n in range(1_000)})
    few = steady_cost(source, watcher, admin)

    pad = [f"padding-{n}" for n in range(10_000)]
    pipe = admin.pipeline(transaction=False)
    for chunk in range(100):  # 1,000,000 more ids queued, and as many older failures
        pipe.rpush("rq:queue:bulk", *pad)
        pipe.zadd("rq:failed:bulk", {f"old-{chunk}-{n}": failed - 10_000 - chunk * 10_000 - n for n in range(10_000)})
    pipe.execute()
    assert admin.llen("rq:queue:bulk") == 1_001_000 and admin.zcard("rq:failed:bulk") == 1_001_000
    try:
        many = steady_cost(source, watcher, admin)
        reading = source.read(watcher, time.time())
        scraped = scrape_cost(exporter, admin)
    finally:
        admin.flushdb()  # a million jobs' memory back to the shared server
    sample = 100  # watch.sample over the class's one queue: an HMGET each
    assert few == many == 7 * 2 + 1 + sample, (few, many)
    assert scraped == many + 1, "a scrape: the read and one INFO (the master's run_id, Redis's memory)"
    assert reading[BULK].depth == 1_001_000
    assert reading.dead_letters == 1_001_000 + 6
    assert (reading[URGENT].processed, reading[URGENT].dead_lettered) == (0, 0), "all there before its first read"



def test_the_master_is_served_with_its_run_id_and_without_it_when_info_is_refused(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """One INFO a scrape names the server's run_id; a user refused INFO is still read, served with
    an empty run_id (which RedisMasterChanged does not count), and is not asked again."""
    if isinstance(redis_server, GivenRedis):
        pytest.skip("creates an ACL user on the test's own redis-server")
    admin = redis.Redis.from_url(redis_server.url)
    config = watch_config(tmp_path, redis_server.url)
    address, run_id = f"127.0.0.1:{redis_server.port}", str(admin.info("server")["run_id"])
    watcher = read_only_user(admin, redis_server.url)
    assert scrape_of(WatchCollector(config, watcher)).series(m.REDIS_MASTER.name) == {
        ((m.MASTER, address), (m.RUN_ID, run_id)): 1}

    def info_calls() -> tuple[int, int]:
        """INFO's calls and refusals so far (this one's own call counted by the next)."""
        stats = admin.info("commandstats")["cmdstat_info"]
        return int(stats["calls"]), int(stats.get("rejected_calls", 0))

    admin.execute_command("ACL", "SETUSER", "watcher", "-info")
    refused = WatchCollector(config, watcher)
    calls, rejected = info_calls()
    first = scrape_of(refused)
    assert first.value(m.EXPORTER_REDIS_UP.name) == 1
    assert first.series(m.REDIS_MASTER.name) == {((m.MASTER, address), (m.RUN_ID, "")): 1}
    assert info_calls() == (calls + 1, rejected + 1), "asked once, and refused"
    scrape_of(refused)
    assert info_calls() == (calls + 2, rejected + 1), "not asked again"


def test_generate_writes_only_the_rules_and_panels_rq_can_feed_and_says_what_it_left_out(tmp_path: Path) -> None:
    config = watch_config(tmp_path, "redis://127.0.0.1:6379/0")
    generated = run_fairctl("generate", "--config", config.source, "--out", tmp_path / "out")
    assert generated.returncode == 0, generated.stderr
    assert f"watch.system rq: its queues do not supply the series of {len(left_out(config))} alert(s)" in generated.stderr
    kept = {a.name for a in build_alerts(config)}
    assert {TENANT_DOMINATING_QUEUE, PRIORITY_INVERSION, JOBS_DEAD_LETTERED, QUEUE_PAUSED, QUIET_TENANTS_STARVING,
            REDIS_MEMORY_HIGH, REDIS_MAY_EVICT_JOBS} <= kept
    assert JOBS_REDELIVERED_HIGH in left_out(config)
    rules = (tmp_path / "out" / "alerts" / "generated" / "fairctl-rules.yml").read_text()
    assert f"alert: {QUEUE_STARVING}" in rules and f"alert: {JOBS_REDELIVERED_HIGH}" not in rules
    assert m.JOBS_REDELIVERED.name not in rules and m.QUEUE_DELAYED.name not in rules, "no series RQ cannot feed"
    checked = run_fairctl("check", "--config", config.source)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # one promtool test file per generated alert, RedisMasterChanged among them
    assert f"promtool test rules: {len(kept)} files passed" in checked.stdout and len(kept) == 13, checked.stdout


def test_commands_that_would_write_refuse_a_watch_config(redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    config = watch_config(tmp_path, redis_server.url)
    for command in (("status",), ("enqueue", "newsletter", "--tenant", "acme"), ("config", "apply", config.source)):
        refused = run_fairctl(*command, "--config", config.source) if command[0] != "config" else \
            run_fairctl(*command)
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert "its watch section reads the queues of a rq deployment" in refused.stderr, refused.stderr
    assert client.dbsize() == 0, "nothing written to the watched Redis"


def test_realised_shares_are_the_completions_the_worker_made(redis_server: RedisServer | GivenRedis,
                                                             tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    source = RqSource(watched(watch_config(tmp_path, redis_server.url)))  # type: ignore[arg-type]
    source.read(client, time.time())  # a scrape before any work: the counters start there
    queued = {"interactive": 40, "bulk": 60}
    for queue, n in queued.items():
        for i in range(n):
            Queue(queue, connection=client).enqueue(TASK, f"tenant-{i % 3}", n=i)
    done = subprocess.run([sys.executable, "-m", "rq.cli", "worker", "--url", redis_server.url, "--burst", "--quiet",
                           "--worker-class", "rq.worker.SimpleWorker", "interactive", "bulk"], cwd=ROOT,
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    reading = source.read(client, time.time())
    made = {queue: client.zcard(f"rq:finished:{queue}") for queue in queued}  # RQ's own record of each job
    assert made == queued
    processed = {URGENT: reading[URGENT].processed, BULK: reading[BULK].processed}
    assert processed == {URGENT: 40, BULK: 60}
    assert abs(processed[URGENT] / sum(processed.values()) - 0.4) < 0.02  # the realised share, within 2 points
