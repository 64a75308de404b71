"""The exporter watching RQ (https://python-rq.org): a real ``rq worker`` serves one queue while
another floods, and the exporter, reading RQ's own keys read-only, serves exact depths, oldest
ages within a scrape interval of the truth, the completions RQ recorded and the flooding tenant on
top; a real Prometheus loading the generated rules fires QueueStarving for the starved class only.
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

from alerts.rules import (
    JOBS_DEAD_LETTERED,
    PRIORITY_INVERSION,
    QUEUE_STARVING,
    TENANT_DOMINATING_QUEUE,
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
from .test_unconfigured_exporter import scrape_of
from .support import run_fairctl, wait_for
from .watch_support import (
    STORM_BULK,
    STORM_INTERACTIVE,
    alerting,
    read_cost,
    read_only_user,
    replay_storm,
    with_storm_rules,
)

URGENT, BULK = "rq:interactive", "rq:bulk"
TASK = "tests.watch_rq_tasks.work"


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
    with alerting(config, tmp_path) as (server, prometheus), \
            rq_worker(redis_server.url, "interactive"):
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
    assert m.QUEUE_PAUSED.name not in seen.names(), "what RQ cannot tell is left out, not served as 0"


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
    admin = redis.Redis.from_url(redis_server.url)
    admin.flushdb()
    watcher = read_only_user(admin, redis_server.url)
    source = RqSource(watched(watch_config(tmp_path, redis_server.url)))  # type: ignore[arg-type]
    bulk = Queue("bulk", connection=admin)
    for n in range(100):  # real jobs at the head: the sample reads their hashes
        bulk.enqueue(TASK, "flooder", n=n)
    commands_per_read = read_cost(source, watcher, admin)

    pad = [f"padding-{n}" for n in range(10_000)]
    few = commands_per_read()
    pipe = admin.pipeline(transaction=False)
    for _ in range(100):  # 1,000,100 ids queued
        pipe.rpush("rq:queue:bulk", *pad)
    pipe.execute()
    assert admin.llen("rq:queue:bulk") == 1_000_100
    many = commands_per_read()
    assert few == many, (few, many)
    assert source.read(watcher, time.time())[BULK].depth == 1_000_100



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
    assert {TENANT_DOMINATING_QUEUE, PRIORITY_INVERSION, JOBS_DEAD_LETTERED} <= set(left_out(config))
    rules = (tmp_path / "out" / "alerts" / "generated" / "fairctl-rules.yml").read_text()
    assert f"alert: {QUEUE_STARVING}" in rules and f"alert: {TENANT_DOMINATING_QUEUE}" not in rules
    assert m.QUEUE_PAUSED.name not in rules and m.JOBS_WAIT.name not in rules, "no series RQ cannot feed"
    checked = run_fairctl("check", "--config", config.source)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # one promtool test file per generated alert, RedisMasterChanged among them
    assert "promtool test rules: 6 files passed" in checked.stdout, checked.stdout


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
