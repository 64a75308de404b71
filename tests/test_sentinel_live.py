"""A queue on a Sentinel-managed master follows a failover by itself: a master, a replica and
three sentinels on loopback; `SENTINEL FAILOVER` demotes the master, then the new master is
killed and the old one is promoted back, and the same `Queue` keeps enqueueing and popping, with
every job accepted served once."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fairness_core import Queue, RedisUnavailable
from fairness_core.connection import redis_client
from fairness_core.redis_url import check_url, location
from fairness_stack.servers import RedisServer, free_port

from .conftest import make_config
from .support import wait_for

SERVICE = "fq-master"


class Sentinels:
    """Three sentinels watching one master, each its own redis-server --sentinel process."""

    def __init__(self, directory: Path, master_port: int) -> None:
        self.ports = [free_port() for _ in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []
        for port in self.ports:
            conf = directory / f"sentinel-{port}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
                            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                            f"sentinel failover-timeout {SERVICE} 4000\n", encoding="utf-8")
            self.processes.append(subprocess.Popen(["redis-server", str(conf), "--sentinel"],
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            wait_for(lambda p=port: _answers(p), 10, f"sentinel on {port}")

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + f"/{SERVICE}/0"

    def master_port(self) -> int | None:
        reply = redis.Redis(port=self.ports[0]).sentinel_get_master_addr_by_name(SERVICE)
        return int(reply[1]) if reply else None

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def _failover(sentinels: Sentinels) -> bool:
    """Ask for a failover; False while the sentinels know no replica good to promote yet (they
    rate a replica by its INFO, which they read every few seconds)."""
    try:
        return bool(redis.Redis(port=sentinels.ports[0]).execute_command("SENTINEL", "FAILOVER", SERVICE))
    except redis.ResponseError as exc:
        if "NOGOODSLAVE" in str(exc):
            return False
        raise


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer, Sentinels]]:
    master = RedisServer().start()
    replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(master.port))).start()
    wait_for(lambda: redis.Redis(port=replica.port).info("replication").get("master_link_status") == "up", 15,
             "the replica's link to its master")
    sentinels = Sentinels(tmp_path, master.port)
    wait_for(lambda: redis.Redis(port=sentinels.ports[0]).sentinel_master(SERVICE).get("num-slaves", 0) >= 1, 15,
             "the sentinels to find the replica")
    try:
        yield master, replica, sentinels
    finally:
        sentinels.stop()
        replica.stop()
        master.stop()


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


def test_a_queue_follows_a_failover_and_a_killed_master(sentinel_group: tuple[RedisServer, RedisServer, Sentinels]) -> None:
    master, replica, sentinels = sentinel_group
    queue = Queue(make_config(redis={"url": sentinels.url}), redis_client(sentinels.url))
    accepted = [queue.submit("password_reset", f"t{i % 7}").job_id for i in range(60)]
    served = _served(queue, 20, time.monotonic() + 30)
    assert len(served) == 20
    wait_for(lambda: redis.Redis(port=replica.port).info("replication").get("master_repl_offset")
             == redis.Redis(port=master.port).info("replication").get("master_repl_offset"), 15, "the replica to catch up")

    # A demotion: the master becomes the replica's replica, and every call goes to the new one.
    wait_for(lambda: _failover(sentinels), 30, "the sentinels to accept a failover (a replica they rate good)")
    wait_for(lambda: sentinels.master_port() == replica.port, 30, "the replica's promotion")
    # Until the sentinels demote it, the old master takes writes that its resync then drops (what
    # Sentinel can lose, docs/deployment.md): the queue's calls go on once it is a replica.
    wait_for(lambda: redis.Redis(port=master.port).info("replication").get("master_link_status") == "up", 30,
             "the old master replicating the new one")
    accepted += [queue.submit("password_reset", "after-failover").job_id]
    served += _served(queue, 20, time.monotonic() + 30)
    assert len(served) == 40

    # The new master killed: the old one, its replica now, is promoted back.
    wait_for(lambda: redis.Redis(port=master.port).info("replication").get("slave_repl_offset")
             == redis.Redis(port=replica.port).info("replication").get("master_repl_offset"), 15, "the catch-up")
    assert replica.process is not None
    replica.process.send_signal(signal.SIGKILL)
    replica.process.wait()
    wait_for(lambda: sentinels.master_port() == master.port, 40, "the old master's promotion")
    served += _served(queue, len(accepted) - 40, time.monotonic() + 40)
    assert sorted(served) == sorted(accepted)  # every job accepted, served once
    assert queue.snapshot().classes["jobs:high"].depth == 0
