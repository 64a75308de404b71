"""A queue on a Sentinel-managed master follows a failover by itself: a master, a replica and
three sentinels on loopback; `SENTINEL FAILOVER` demotes the master, then the new master is
killed and the old one is promoted back, and the same `Queue` keeps enqueueing and popping, with
every job accepted served once."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from fairness_core import Queue, RedisUnavailable
from fairness_core.connection import redis_client
from fairness_core.redis_url import check_url, location
from fairness_stack.sentinel import SERVICE, SentinelGroup
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .support import wait_for

PRODUCERS = 3


def _failover(group: SentinelGroup) -> bool:
    """Ask for a failover; False while the sentinels know no replica good to promote yet (they
    rate a replica by its INFO, which they read every few seconds)."""
    try:
        return bool(redis.Redis(port=group.sentinels[0].port).execute_command("SENTINEL", "FAILOVER", SERVICE))
    except redis.ResponseError as exc:
        if "NOGOODSLAVE" in str(exc):
            return False
        raise


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        yield group


def _served(queue: Queue, want: int, deadline: float) -> list[str]:
    """Pop and ack until ``want`` jobs are served, riding out the switch's errors."""
    done: list[str] = []
    while len(done) < want and time.monotonic() < deadline:
        try:
            for lease in queue.pop(10):
                queue.ack(lease)
                done.append(lease.job_id)
        except RedisUnavailable:
            time.sleep(0.2)
    return done


def test_sentinel_urls_are_checked_and_named_without_secrets() -> None:
    check_url("redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.1:26380/main/2")
    check_url("rediss+sentinel://10.0.0.1:26379/main")
    assert location("redis+sentinel://app:s3cret@127.0.0.1:26379,10.0.0.2:26380/main") == \
        "main via sentinel 127.0.0.1:26379,10.0.0.2:26380"
    for bad in ("redis+sentinel://127.0.0.1:26379", "redis+sentinel://h:port/main", "redis+sentinel://h:1/main/x"):
        with pytest.raises(ValueError) as err:
            check_url(bad)
        assert "s3cret" not in str(err.value)


def test_a_queue_follows_a_failover_and_a_killed_master(sentinel_group: SentinelGroup) -> None:
    group = sentinel_group
    master, replica = group.servers
    queue = Queue(make_config(redis={"url": group.url}), redis_client(group.url))
    accepted = [queue.submit("password_reset", f"t{i % 7}").job_id for i in range(60)]
    served = _served(queue, 20, time.monotonic() + 30)
    assert len(served) == 20
    wait_for(lambda: group.replica_in_sync(replica.port), 15, "the replica to catch up")

    # A demotion: the master becomes the replica's replica, and every call goes to the new one.
    wait_for(lambda: _failover(group), 30, "the sentinels to accept a failover (a replica they rate good)")
    wait_for(lambda: group.master_port() == replica.port, 30, "the replica's promotion")
    # Until the sentinels demote it, the old master takes writes that its resync then drops (what
    # Sentinel can lose, docs/deployment.md): the queue's calls go on once it is a replica.
    wait_for(lambda: redis.Redis(port=master.port).info("replication").get("master_link_status") == "up", 30,
             "the old master replicating the new one")
    accepted += [queue.submit("password_reset", "after-failover").job_id]
    served += _served(queue, 20, time.monotonic() + 30)
    assert len(served) == 40

    # The new master killed: the old one, its replica now, is promoted back.
    wait_for(lambda: group.replica_in_sync(master.port), 15, "the catch-up")
    assert group.kill_master() == replica.port
    wait_for(lambda: group.master_port() == master.port, 40, "the old master's promotion")
    served += _served(queue, len(accepted) - 40, time.monotonic() + 40)
    assert sorted(served) == sorted(accepted)  # every job accepted, served once
    assert queue.snapshot().classes["jobs:high"].depth == 0


@pytest.mark.live
def test_a_master_short_of_replicas_is_an_outage_the_queue_rides_out() -> None:
    """min-replicas-to-write refuses every write while too few replicas are in sync: a producer
    gets RedisUnavailable naming the setting (not a script error), and serving resumes by itself
    once the master accepts writes again."""
    with RedisServer(extra_args=("--min-replicas-to-write", "1")) as server:
        queue = Queue(make_config(redis={"url": server.url}), redis_client(server.url))
        with pytest.raises(RedisUnavailable, match="min-replicas-to-write"):
            queue.submit("password_reset", "t1")
        with pytest.raises(RedisUnavailable, match="NOREPLICAS"):
            queue.pop(1)
        redis.Redis(port=server.port).config_set("min-replicas-to-write", 0)
        job = queue.submit("password_reset", "t1").job_id
        assert [lease.job_id for lease in queue.pop(1)] == [job]


def test_clients_leave_a_master_that_returns_after_its_failover(sentinel_group: SentinelGroup) -> None:
    """A master frozen (SIGSTOP) long enough to be failed over comes back still a master, and the
    sentinels demote it only about 8 s later. Producers connected to it must not write into it
    meanwhile: its demotion drops every such write. Only the calls in flight at the freeze (one
    per producer) may be lost; before clients asked the sentinels again, 2,395 were in a run."""
    group = sentinel_group
    queue = Queue(make_config(redis={"url": group.url}), redis_client(group.url))
    accepted: list[str] = []
    stop = threading.Event()

    def produce(name: str) -> None:
        n = 0
        while not stop.is_set():
            key = f"{name}-{n}"
            try:
                queue.submit("password_reset", f"t{n % 5}", {"key": key}, key=key)
            except RedisUnavailable:
                time.sleep(0.05)
                continue
            accepted.append(key)
            n += 1
            time.sleep(0.01)

    producers = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(PRODUCERS)]
    for producer in producers:
        producer.start()
    old = group.master_port()
    assert old is not None
    process = group.server(old).process
    assert process is not None
    wait_for(lambda: len(accepted) > 100, 30, "the producers to start")
    process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: group.master_port() not in (None, old), 30, "the replica's promotion")
        time.sleep(2)  # the producers write to the new master now
    finally:
        process.send_signal(signal.SIGCONT)
    wait_for(lambda: group.replica_in_sync(old), 60, "the old master demoted and in sync")
    stop.set()
    for producer in producers:
        producer.join()
    served: list[str] = []
    while leases := queue.pop(100):
        for lease in leases:
            served.append(lease.payload["key"])
            queue.ack(lease)
    lost = set(accepted) - set(served)
    assert len(lost) <= PRODUCERS, f"{len(lost)} of {len(accepted)} accepted jobs lost"
    assert len(served) == len(set(served))
