"""The fault guarantees on a sharded logical queue: one queue group sharded 6 ways (a hand of 2) on
a loopback 3-master Redis Cluster, worked by real ``fairctl worker`` processes. Workers SIGKILLed
under load lose no job, and a job runs again only as a counted redelivery (as
tests/test_worker_crash.py shows on one queue group); a master SIGKILLed under load and restarted
from its AOF (appendfsync always) keeps the jobs of the shards it holds, and afterwards every job
is completed exactly once but for counted redeliveries. And a sharded pop keeps the leases it took
when acking a finished job on another shard fails because that shard's master is down."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fairness_core import Config, RedisUnavailable, redis_client
from fairness_core import queue as queue_module
from fairness_core.queue import Queue, split_job_id
from fairness_core.sharding import hand
from fairness_stack.servers import RedisClusterServers, RedisServer

from .conftest import make_config
from .crash_support import (
    TASKS,
    TENANTS,
    check_redeliveries,
    enqueue_jobs,
    kill_until_finished,
    producer,
    recorded,
    stop_all,
)
from .support import spawn_worker, totals, wait_for, write_config
from .test_cluster import owner
from .test_reliability import NO_BUDGET, PRODUCED_TENANTS, Producer

pytestmark = pytest.mark.slow

SHARDS = 6
HAND = 2
WORKER_ARGS = ("--concurrency", "4", "--batch", "5")
LEASES = {"visibility_timeout": "2s", "max_attempts": 1000}  # every redelivery is a retry, none a dead letter
# The 4 workers' 16 slots run at most 160 such jobs a second, about the producer's rate (50 every
# 0.3 s): the backlog lasts through the kills, so every kill cuts leases short.
SERVICE = {"service_s": 0.1}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    """3 masters, each with an AOF fsynced before every reply (RedisServer's appendfsync always)."""
    with RedisClusterServers(3, appendonly=True) as servers:
        yield servers


def sharded_config(tmp_path: Path, url: str, **sections: Any) -> tuple[Path, Config]:
    """The example config, sharded SHARDS ways with a hand of HAND, in a file for the workers."""
    section = {"url": url, "prefix": make_config().redis.prefix, "shards": SHARDS, "shard_hand": HAND}
    return write_config(tmp_path, url, redis=section, leases=LEASES, **sections)


def sharded_totals(queue: Queue) -> dict[str, int]:
    """tests/support.py's totals, summed over the shards."""
    out: Counter[str] = Counter()
    for shard in queue.groups():
        out.update(totals(shard))
    return dict(out)


def shard_of(job_id: str) -> int:
    return split_job_id(job_id)[0]


def victim_of(cluster: RedisClusterServers, queue: Queue) -> tuple[RedisServer, list[int]]:
    """The master to kill and the shards it holds: not the seed node the URL names; of the
    others, the one holding the most shards."""
    holders = {index: owner(cluster, queue.shard(index).keys.base) for index in range(SHARDS)}
    victim = max(cluster.nodes[1:], key=lambda node: list(holders.values()).count(node.port))
    on_victim = sorted(index for index, port in holders.items() if port == victim.port)
    assert on_victim, f"no shard on a master other than the seed: {holders}"
    return victim, on_victim


@contextmanager
def backlogged(queue: Queue, path: Path, records_url: str, tmp_path: Path,
               each: int) -> Iterator[tuple[list[subprocess.Popen[bytes]], list[Path], set[str]]]:
    """Two workers started (recording outside the cluster: the recording is the test's, not under
    the fault), then ``each`` jobs of 10 ms per tenant and task queued: leases are held on every
    shard when a master dies. Yields the workers, their logs and the job ids; stops the workers."""
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    # A summary line every second: a worker that wrote one is past its start, which refuses a
    # Redis that is down (a worker still starting when the master dies exits, as it should).
    workers = [spawn_worker(path, log, "record", records_url, *WORKER_ARGS, "--log-every", "1s") for log in logs]
    try:
        wait_for(lambda: all(": last " in log.read_text() for log in logs), 60, "the workers to start")
        backlog = [{"service_s": 0.01}] * each
        ids = {queued.job_id for tenant, tier in TENANTS for task in TASKS
               for queued in queue.submit_many(task, tenant, backlog, tier=tier) if queued is not None}
        assert len(ids) == len(TENANTS) * len(TASKS) * each
        yield workers, logs, ids
    finally:
        stop_all(workers)


def aof_loads(node: RedisServer) -> int:
    """How often the node's redis-server started from its append-only file (its log says)."""
    return (node.directory / "redis.log").read_text().count("DB loaded from append only file")


def cluster_ok(cluster: RedisClusterServers) -> bool:
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as conn:
            if conn.cluster("INFO")["cluster_state"] != "ok":
                return False
    return True


def test_sigkilled_workers_lose_no_job_of_the_sharded_queue_and_redeliveries_are_exact(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    upfront, streamed = 600, 1_200
    started = time.monotonic()
    path, config = sharded_config(tmp_path, cluster.url)
    queue = Queue(config, redis_client(cluster.url))
    key = f"{config.redis.prefix}:record"
    ids: set[str] = set()
    enqueue_jobs(queue, 0, upfront, ids, SERVICE)
    assert {shard_of(i) for i in ids} == set(range(SHARDS)), "jobs queued on every shard"

    def spawn(i: int) -> subprocess.Popen[bytes]:
        return spawn_worker(path, tmp_path / f"worker-{i}.log", key, cluster.url, *WORKER_ARGS)

    def finished() -> bool:
        t = sharded_totals(queue)
        return t["processed"] == upfront + streamed and t["depth"] == t["inflight"] == t["delayed"] == 0

    stream = producer(Queue(config, redis_client(cluster.url)), ids, upfront, streamed, 50, SERVICE)
    shard_0 = queue.shard(0)
    kills, kills_while_producing = kill_until_finished(
        spawn, 4, stream, finished, lambda: sharded_totals(queue),
        lambda: shard_0.client.zrange(shard_0.keys.workers, 0, -1), timeout=120)

    t = sharded_totals(queue)
    deliveries = recorded(queue.client, key)
    assert len(ids) == upfront + streamed
    assert set(deliveries) == ids, "every job ran to completion at least once"
    check_redeliveries(deliveries, t["redelivered"])
    assert t["failed"] == t["dead"] == 0
    assert kills_while_producing > 0 and t["redelivered"] > 0, "the kills must have cut leases short under load"
    redelivered_on = {shard_of(job) for job, attempts in deliveries.items() if max(attempts) > 1}
    print(f"\n{len(ids)} jobs on {SHARDS} shards ({streamed} enqueued during the kills), {kills} SIGKILLs "
          f"({kills_while_producing} while producing), {t['redelivered']} redeliveries on shards "
          f"{sorted(redelivered_on)}, {sum(len(a) > 1 for a in deliveries.values())} jobs completed more than "
          f"once, {time.monotonic() - started:.1f}s")


def test_a_master_killed_and_restarted_from_its_aof_keeps_the_jobs_of_its_shards(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    started = time.monotonic()
    path, config = sharded_config(tmp_path, cluster.url, scheduler=NO_BUDGET)
    queue = Queue(config, redis_client(cluster.url))
    victim, on_victim = victim_of(cluster, queue)
    with RedisServer() as records, backlogged(queue, path, records.url, tmp_path, 60) as (workers, logs, ids):
        with Producer(Queue(config, redis_client(cluster.url))) as produced:
            wait_for(lambda: sharded_totals(queue)["processed"] >= 300
                     and sum(totals(queue.shard(index))["inflight"] for index in on_victim) > 0, 60,
                     "workers to make progress and hold leases on the master's shards")
            at_kill = {index: totals(queue.shard(index)) for index in on_victim}
            held = {job for job in ids | produced.acknowledged.copy() if shard_of(job) in on_victim}
            loads_before = aof_loads(victim)
            victim.stop(kill=True)
            acknowledged_at_kill = len(produced.acknowledged)
            time.sleep(3.0)  # past the cluster's node timeout: the others mark the master failed
            acknowledged_in_outage = len(produced.acknowledged) - acknowledged_at_kill
            assert all(p.poll() is None for p in workers), "the workers ride the outage out"
            victim.start()
            assert aof_loads(victim) == loads_before + 1, "the master came back from its AOF"
            wait_for(lambda: cluster_ok(cluster), 60, "the restarted master to rejoin")
            acknowledged_at_restart = len(produced.acknowledged)
            wait_for(lambda: len(produced.acknowledged) >= acknowledged_at_restart + 500, 60,
                     "enqueues to resume")
        wait_for(lambda: sum(sharded_totals(queue)[n] for n in ("depth", "inflight", "delayed")) == 0, 120,
                 "the workers to drain every shard")
        assert all(p.poll() is None for p in workers), "the same processes recovered: no crash loop"
        with redis_client(records.url) as conn:
            deliveries = recorded(conn, "record")
        t = sharded_totals(queue)
    wait_for(lambda: cluster_ok(cluster), 60, "the cluster to be whole again")
    acknowledged = ids | produced.acknowledged
    doomed = [tenant for tenant in PRODUCED_TENANTS if set(queue._hand(tenant)) <= set(on_victim)]
    # a tenant whose whole hand died is refused; others may be too while the cluster says CLUSTERDOWN
    assert produced.refused or not doomed, f"the tenants {doomed}, whose whole hand died, were refused"
    assert acknowledged_in_outage > 0, "the other tenants were queued during the outage"
    queued_at_kill = sum(at_kill[index]["depth"] for index in on_victim)
    assert queued_at_kill > 0, "the master held queued jobs when it died"
    assert held <= set(deliveries), f"{len(held - set(deliveries))} jobs of shards {on_victim} were lost"
    assert acknowledged <= set(deliveries), f"{len(acknowledged - set(deliveries))} acknowledged enqueues were lost"
    unacknowledged = set(deliveries) - acknowledged
    assert len(unacknowledged) <= 1, "only the enqueue in flight at the kill may have run without its reply"
    assert t["processed"] == len(deliveries), "the counters came back from the AOF too"
    check_redeliveries(deliveries, t["redelivered"])
    assert t["failed"] == t["dead"] == 0
    for log in map(Path.read_text, logs):
        for index in on_victim:
            shard = queue.shard(index).config.redis.prefix
            assert f"shard {shard} (on 127.0.0.1:{victim.port}) does not answer" in log, log[-2000:]
            assert f"shard {shard} answers again after" in log, log[-2000:]
    print(f"\nmaster :{victim.port} (shards {on_victim} of {SHARDS}) killed with {queued_at_kill} jobs queued and "
          f"{sum(at_kill[index]['inflight'] for index in on_victim)} leased there, {len(held)} of its jobs "
          f"acknowledged by then, all completed; {len(acknowledged)} acknowledged enqueues in all, "
          f"{acknowledged_in_outage} queued and {len(produced.refused)} refused in the 3 s outage, {len(unacknowledged)} applied without a reply, "
          f"{t['redelivered']} redeliveries, {sum(len(a) > 1 for a in deliveries.values())} jobs completed twice, "
          f"{time.monotonic() - started:.1f}s")


def test_leases_popped_from_one_shard_reach_the_caller_when_an_ack_on_another_fails(
        cluster: RedisClusterServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ack_and_pop pops from one shard, then acks the finished leases of the others. An ack whose
    master is down must not cost the leases just popped: every lease the call took is in the
    caller's hands (or none was taken). A lease held by nobody keeps its job from running for a
    visibility timeout, then costs it an attempt it never ran (max_attempts 1: dead-lettered unrun)."""
    # The view of the shards' backlogs a busy worker read just before the master died (it is reused
    # for VIEW_TTL_S; a long one here so that the pop does not depend on how fast this machine is).
    monkeypatch.setattr(queue_module, "VIEW_TTL_S", 60.0)
    _, config = sharded_config(tmp_path, cluster.url)
    queue = Queue(config, redis_client(cluster.url))
    victim, on_victim = victim_of(cluster, queue)
    down = on_victim[0]
    up = next(index for index in range(SHARDS) if index not in on_victim)
    # Tenants whose home shard (first of the hand, where their first job goes) is ``down`` / ``up``.
    tenants = (f"tenant-{n}" for n in range(10_000))
    home = {index: next(t for t in tenants if hand(t, SHARDS, HAND)[0] == index) for index in (down, up)}
    # A worker that has been popping: it has worked a job of each of the two shards (and read the
    # masters' eviction policy once, as every process does before its first change to the queues),
    # the one of ``down`` finished but not acked yet (its ack rides with the next pop).
    leases = []
    for index in (up, down):
        job = queue.enqueue("newsletter", home[index])
        queue.loads(fresh=True)
        leases += queue.pop()
        assert leases[-1].job_id == job and shard_of(job) == index
    assert queue.ack(leases[0])
    lease = leases[1]
    waiting = queue.enqueue("newsletter", home[up])
    assert shard_of(waiting) == up
    queue.loads(fresh=True)
    victim.stop(kill=True)
    try:
        try:
            taken = queue.ack_and_pop([lease], 1).leases
        except RedisUnavailable:
            taken = []
    finally:
        victim.start()
        wait_for(lambda: cluster_ok(cluster), 60, "the cluster to be whole again")
    leased = totals(queue.shard(up))["inflight"]
    assert leased == len(taken), (
        f"shard {up} leased {leased} job(s) in the call, the caller got {len(taken)}: the job ({waiting}) is held "
        "by nobody until its lease expires, and is then redelivered without having run")


def live_processed(queue: Queue, shards: list[int]) -> int:
    return sum(totals(queue.shard(index))["processed"] for index in shards)


def test_a_dead_master_stops_only_its_shards_and_they_finish_after_its_restart(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    """With ``cluster-require-full-coverage no``, a master SIGKILLed under load costs only its
    shards: the workers (the same processes) keep completing the other shards' jobs at no less
    than half their rate before the kill, and a tenant with a live shard in its hand is queued.
    Restarted from its AOF, its shards' jobs complete too, each once but for counted redeliveries."""
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as conn:
            conn.config_set("cluster-require-full-coverage", "no")
    path, config = sharded_config(tmp_path, cluster.url, scheduler=NO_BUDGET)
    queue = Queue(config, redis_client(cluster.url))
    victim, on_victim = victim_of(cluster, queue)
    live = [index for index in range(SHARDS) if index not in on_victim]
    try:
        with RedisServer() as records, backlogged(queue, path, records.url, tmp_path, 200) as (workers, logs, ids):
            wait_for(lambda: sum(totals(queue.shard(index))["inflight"] for index in on_victim) > 0, 60,
                     "leases held on the master's shards")
            before = live_processed(queue, live)
            time.sleep(3.0)
            rate_before = (live_processed(queue, live) - before) / 3.0
            victim.stop(kill=True)
            time.sleep(2.0)  # the workers find the shards that do not answer
            during = live_processed(queue, live)
            time.sleep(6.0)
            rate_during = (live_processed(queue, live) - during) / 6.0
            assert all(p.poll() is None for p in workers), "the workers ride the outage out"
            spared = next(f"spared-{n}" for n in range(1000) if set(queue._hand(f"spared-{n}")) - set(on_victim))
            ids.add(queue.enqueue("newsletter", spared))
            victim.start()
            wait_for(lambda: cluster_ok(cluster), 60, "the restarted master to rejoin")
            wait_for(lambda: sum(sharded_totals(queue)[n] for n in ("depth", "inflight", "delayed")) == 0, 120,
                     "the workers to drain every shard")
            with redis_client(records.url) as conn:
                deliveries = recorded(conn, "record")
            t = sharded_totals(queue)
    finally:
        for node in cluster.nodes:
            with redis.Redis(port=node.port) as conn:
                conn.config_set("cluster-require-full-coverage", "yes")
    wait_for(lambda: cluster_ok(cluster), 60, "the cluster to be whole again")
    assert rate_during >= 0.5 * rate_before, (rate_before, rate_during)
    assert ids <= set(deliveries), f"{len(ids - set(deliveries))} jobs were lost"
    check_redeliveries(deliveries, t["redelivered"])
    for log in map(Path.read_text, logs):
        assert "does not answer" in log and "answers again" in log, log[-2000:]
    print(f"\nmaster :{victim.port} (shards {on_victim} of {SHARDS}) killed: the live shards completed "
          f"{rate_before:.0f} jobs/s before, {rate_during:.0f} jobs/s during; {len(ids)} jobs all completed, "
          f"{t['redelivered']} redeliveries")
