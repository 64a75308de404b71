"""Replies lost after Redis ran the call, with a fault-injecting proxy between the client and a
real redis-server: the caller is told the call may have run (ReplyLost), nothing is sent again
behind its back, and what the call did is found again: a lost pop's leases are reclaimed by
their worker, a lost ack's job counts as done, a lost apply is one apply."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from fairness_core import Queue, ReplyLost, open_queue, redis_client
from fairness_core.keys import WAKE_MEMBER
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .fault_proxy import FaultProxy, fault_proxy
from .support import running, totals, wait_for

POP = b"$3\r\npop\r\n"  # the bytes of a call of the script's pop (its operation, a bulk string)
ACK = b"$3\r\nack\r\n"
APPLY = b"$5\r\napply\r\n"


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with fault_proxy(redis_server.port) as faults:
        yield faults


def through(proxy: FaultProxy, **sections: object) -> Queue:
    """A scheduler whose every call goes through the proxy."""
    return Queue(make_config(redis={"url": proxy.url()}, **sections), redis_client(proxy.url()))


def test_a_lost_pops_leases_are_the_workers_and_it_gives_them_back(proxy: FaultProxy) -> None:
    s = through(proxy)
    ids = [s.submit("order", "acme").job_id for _ in range(3)]
    s.register_worker("w1", 10, 60)
    proxy.drop_reply_to(POP)
    with pytest.raises(ReplyLost, match="may have been applied"):
        s.ack_and_pop([], 3, owner="w1")
    assert proxy.dropped == 1
    t = totals(s)
    assert (t["depth"], t["inflight"]) == (0, 3), "the pop ran: its leases are out, nobody works them"
    assert s.reclaim("w1", []) == 3, "the worker holds none of them: all three go back"
    leases = s.pop(3, owner="w1")
    assert [(lease.job_id, lease.attempts) for lease in leases] == [(i, 1) for i in ids], "in order, at attempt 1"


@pytest.mark.parametrize("shards", [1, 6])
def test_a_worker_whose_pop_reply_is_lost_runs_every_job_once(redis_server: RedisServer, proxy: FaultProxy,
                                                              shards: int) -> None:
    """The worker's own pop loses its reply: it sends the pop again (a new lease) and gives back
    what the lost one leased at once, not after the 5-minute lease timeout; on a sharded queue too."""
    config = make_config(redis={"url": proxy.url(), "shards": shards})
    producer = open_queue(config, redis_client(redis_server.url))
    ids = {producer.submit("newsletter", f"t{i % 3}").job_id for i in range(30)}
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def record(lease: object) -> None:
        with lock:
            ran.append((lease.job_id, lease.attempts))  # type: ignore[attr-defined]

    proxy.drop_reply_to(POP)
    with running(Worker(open_queue(config, redis_client(proxy.url())), HandlerRegistry(fallback=record),
                        concurrency=4)):
        wait_for(lambda: counted(producer, "processed") == 30, 30, "every job done")
    assert proxy.dropped == 1
    assert sorted(job_id for job_id, _ in ran) == sorted(ids), "each ran once"
    assert counted(producer, "redelivered") == 0


def test_a_sharded_reclaim_reaches_the_shard_its_lost_pop_marked_down(proxy: FaultProxy) -> None:
    """The pop whose reply was lost marks its shard down for a second; the reclaim that follows at
    once (a worker retries the pop within 0.1 s, maybe on another shard) still reaches that shard,
    where the lost leases are. Skipping it left them the worker's until it stopped. Jobs given back
    wake the queue's idle workers, who would otherwise find them at their next look at every shard."""
    s = Queue(make_config(redis={"url": proxy.url(), "shards": 3, "shard_hand": 1}), redis_client(proxy.url()))
    s.register_worker("w1", 10, 60)
    queued = [s.submit("order", "acme").job_id for _ in range(3)]
    s.loads(fresh=True)  # the view the pop chooses from: the jobs just queued
    proxy.drop_reply_to(POP)
    with pytest.raises(ReplyLost):
        s.ack_and_pop([], 3, owner="w1")
    assert s.health.down() == [int(queued[0].split(":")[0])], "the shard is marked down"
    wake = s.keys.wake("jobs:medium")  # the queue's own, which its idle workers block on
    s.client.delete(wake)
    assert s.reclaim("w1", []) == 3, "its three leases go back at once"
    assert s.client.zscore(wake, WAKE_MEMBER) == 0, "and the queue's idle workers are woken"
    leases = s.pop(3, owner="w1")
    assert sorted(lease.job_id for lease in leases) == sorted(queued)
    s.client.delete(wake)
    assert s.give_back(leases) == 3 and s.client.zscore(wake, WAKE_MEMBER) == 0, "a stopping worker's too"


def counted(queue: Queue, counter: str) -> int:
    """A lifecycle counter summed over the queue's groups (one, or every shard)."""
    return sum(totals(group)[counter] for group in queue.groups())


def test_a_lost_acks_job_is_done_once_and_its_resend_says_so(proxy: FaultProxy) -> None:
    s = through(proxy)
    s.submit("order", "acme")
    (lease,) = s.pop(1, owner="w1")
    proxy.drop_reply_to(ACK)
    with pytest.raises(ReplyLost):
        s.ack(lease)
    t = totals(s)
    assert (t["processed"], t["inflight"], t["depth"]) == (1, 0, 0), "the ack ran"
    assert s.ack(lease) is False, "sent again, it finds the lease settled"
    assert not s.lease_taken_back(lease.job_id), "and not taken back: the job will not run again"


def test_a_lost_apply_is_one_apply_and_applying_again_changes_nothing(proxy: FaultProxy) -> None:
    s = through(proxy)
    s.submit("order", "acme")
    new = make_config(redis={"url": proxy.url(), "prefix": s.config.redis.prefix}, scheduler={"policy": "strict"})
    proxy.drop_reply_to(APPLY, skip=1)  # the first call finds the new config's script not loaded yet
    with pytest.raises(ReplyLost):
        s.apply(new)
    applied = s.groups()[0].read_applied()
    assert applied is not None and (applied.version, applied.config.scheduler.policy) == (2, "strict"), "it ran"
    (again,) = s.apply(new).shards.values()
    assert (again.version, again.changes) == (2, ()), "the same config again is no change, not a second version"
