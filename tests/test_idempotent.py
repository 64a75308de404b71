"""Keyed submits: a key names its first job for scheduler.dedup_window, so a producer's retry,
or the scheduler's own second send after a lost reply, queues nothing more."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fairness_core import ConfigError, InvalidJob, Lease, Queue, ReplyLost
from fairness_core.config import parse_config
from fairness_core.config_dump import config_to_data
from fairness_core.connection import redis_client
from fairness_core.jobs import MAX_KEY_BYTES, check_key
from fairness_core.queue import split_job_id
from fairness_core.sharding import hand
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import ROOT, make_config
from .fault_proxy import FaultProxy, fault_proxy
from .support import running, wait_for, write_config


def _queued(scheduler: Queue) -> int:
    """Jobs the group accepted, by its id counter: every job queued gets the next id."""
    return int(scheduler.client.get(scheduler.keys.seq) or 0)


def _deduplicated(scheduler: Queue) -> int:
    return sum(c.counters["deduplicated"] for c in scheduler.snapshot().classes.values())


def test_a_key_returns_its_first_job_queued_or_done(client: redis.Redis) -> None:
    config = make_config(scheduler={"dedup_window": "1h"})
    s = Queue(config, client)
    first = s.submit("password_reset", "acme", {"n": 1}, key="acme:reset-1")
    assert s.submit("password_reset", "acme", {"n": 2}, key="acme:reset-1") == first  # queued
    (lease,) = s.pop()
    assert lease.payload == {"n": 1} and s.ack(lease)
    assert s.submit("newsletter", "other", key="acme:reset-1") == first  # done: still that job
    other = s.submit("password_reset", "acme", key="acme:reset-2")
    assert other.job_id != first.job_id
    assert (_queued(s), _deduplicated(s)) == (2, 2)
    assert s.snapshot().classes[first.queue].counters["deduplicated"] == 2
    assert 3_590_000 < client.pttl(s.keys.dedup("acme:reset-1")) <= 3_600_000  # the record goes with the window


def test_a_batch_of_keys_is_one_job_per_key(client: redis.Redis) -> None:
    s = Queue(make_config(), client)
    keys = [f"k{i % 40}" for i in range(60)]  # 20 keys twice, in one batch and across its calls
    got = s.submit_many("order", "acme", [{"i": i} for i in range(60)], keys=keys)
    assert all(g is not None for g in got)
    assert [g.job_id for g in got[40:]] == [g.job_id for g in got[:20]]  # type: ignore[union-attr]
    assert s.submit_many("order", "acme", [{}] * 40, keys=keys[:40]) == got[:40]
    assert (_queued(s), _deduplicated(s)) == (40, 60)


def test_a_refused_job_leaves_its_key_free(client: redis.Redis) -> None:
    """Only an accepted job's key is recorded: a retry after a refusal is decided anew."""
    s = Queue(make_config(tenants={"max_queued": 1}), client)
    s.submit("order", "acme", key="a")
    assert s.submit_many("order", "acme", [{}], keys=["b"]) == [None]
    s.pop()
    assert s.submit("order", "acme", key="b").job_id == "2"


@pytest.mark.parametrize("key, why", [
    ("", "must not be empty"), ("a\nb", "control characters"), ("tab\tkey", "control characters"),
    ("x" * (MAX_KEY_BYTES + 1), f"at most {MAX_KEY_BYTES}"), (7, "expected a string"),
])
def test_bad_keys_are_refused_before_redis(key: object, why: str) -> None:
    s = Queue(make_config(), redis.Redis(port=1))  # never reached
    for submit in (lambda: s.submit("order", "acme", key=key),  # type: ignore[arg-type]
                   lambda: s.submit_many("order", "acme", [{}], keys=[key])):  # type: ignore[list-item]
        with pytest.raises(InvalidJob, match=why) as caught:
            submit()
        assert caught.value.field == "key"
    with pytest.raises(InvalidJob, match="one key per payload") as caught:
        s.submit_many("order", "acme", [{}, {}], keys=["a"])
    assert caught.value.field == "key"


def test_a_key_is_any_text_up_to_the_bound() -> None:
    key = "ключ/{x} :é" + "é" * ((MAX_KEY_BYTES - 16) // 2)
    assert check_key(key) == key and len(key.encode()) <= MAX_KEY_BYTES


@pytest.mark.parametrize("window, problem", [("0s", "longer than zero"), ("31d", "from 1s to 30d"),
                                             ("500ms", "from 1s to 30d"), (5, "duration")])
def test_the_window_is_checked(window: object, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        make_config(scheduler={"dedup_window": window})
    assert make_config().scheduler.dedup_window == 86400


# ------------------------------------------------------------------ lost replies, a fault proxy between


# The bytes of a call of the script's enqueue op and of its keyed batch op (bulk strings).
ENQUEUE, KEYED_MANY = b"$7\r\nenqueue\r\n", b"$18\r\nenqueue_keyed_many\r\n"


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with fault_proxy(redis_server.port) as faults:
        yield faults


def _behind(proxy: FaultProxy) -> Queue:
    """A scheduler whose every call goes through ``proxy``, with two jobs queued (ids 1 and 2)."""
    s = Queue(make_config(redis={"url": proxy.url()}), redis_client(proxy.url()))
    s.submit_many("order", "warm-up", [{}, {}])
    return s


def test_a_keyed_submit_whose_reply_was_lost_returns_the_job_it_made(proxy: FaultProxy) -> None:
    s = _behind(proxy)
    proxy.drop_reply_to(ENQUEUE)
    got = s.submit("order", "acme", {"n": 1}, key="order-1")
    assert proxy.dropped == 1
    assert (got.job_id, _queued(s), _deduplicated(s)) == ("3", 3, 1)  # the first send ran; the second found its job
    assert s.submit("order", "acme", {"n": 1}, key="order-1") == got
    proxy.drop_reply_to(ENQUEUE)
    with pytest.raises(ReplyLost):  # unkeyed: sent again, it would be a second job
        s.submit("order", "acme", {"n": 2})
    assert _queued(s) == 4


def test_a_keyed_batch_whose_reply_was_lost_returns_the_jobs_it_made(proxy: FaultProxy) -> None:
    s = _behind(proxy)
    keys = [f"order-{i}" for i in range(20)]  # one script call: Redis ran it whole
    proxy.drop_reply_to(KEYED_MANY)
    got = s.submit_many("order", "acme", [{"n": i} for i in range(20)], keys=keys)
    assert proxy.dropped == 1
    assert (_queued(s), _deduplicated(s)) == (2 + 20, 20)
    assert [g.job_id for g in got] == [str(i) for i in range(3, 23)]  # type: ignore[union-attr]
    assert s.submit_many("order", "acme", [{}] * 20, keys=keys) == got


def test_a_keyed_batch_cut_mid_pipeline_is_sent_again_without_duplicates(proxy: FaultProxy) -> None:
    s = _behind(proxy)
    keys = [f"order-{i}" for i in range(1000)]
    payloads = [{"n": i, "pad": "x" * 100} for i in range(1000)]
    proxy.cut_after(70_000)  # about half the pipeline's 40 calls reach Redis
    got = s.submit_many("order", "acme", payloads, keys=keys)
    assert proxy.cut == 1
    ran_before_the_cut = _deduplicated(s)
    assert 0 < ran_before_the_cut < 1000
    assert s.submit_many("order", "acme", payloads, keys=keys) == got  # the caller's own retry
    assert _queued(s) == 2 + 1000
    assert len({g.job_id for g in got if g is not None}) == 1000
    assert s.snapshot().classes[got[0].queue].depth == 2 + 1000  # type: ignore[union-attr]


def test_a_key_goes_to_one_shard_of_its_hand_whatever_the_load(redis_server: RedisServer, client: redis.Redis) -> None:
    url = redis_server.url
    data = config_to_data(make_config())
    data["redis"].update(url=url, shards=6, shard_hand=2)
    queue = Queue(parse_config(data), redis_client(url))
    keys = [f"acme:{i}" for i in range(40)]
    first = [queue.submit("newsletter", "acme", key=k) for k in keys]
    assert {split_job_id(e.job_id)[0] for e in first} == set(hand("acme", 6, 2))  # by key, not where acme's jobs are
    for shard in hand("acme", 6, 2):  # the loads change: each key still finds its shard
        queue.shard(shard).submit_many("newsletter", "someone-else", [None] * 300)
        assert [queue.submit("newsletter", "acme", key=k) for k in keys] == first
    assert queue.submit_many("newsletter", "acme", [None] * 40, keys=keys) == first
    assert sum(queue.shard(i).snapshot().classes["jobs:low"].depth for i in range(6)) == 40 + 600


# ------------------------------------------------------------------ live: producers retrying under a worker


def test_producers_retrying_at_random_complete_every_key_once(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """4 producer processes make 50,000 keyed submits in all (batches of 50), each sent again at
    random as if its reply were lost (in a batch, or one by one), while a worker runs: every key's
    job runs exactly once."""
    path, config = write_config(tmp_path, redis_server.url, scheduler={"budget_min_arrivals": 10**9})
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def handle(lease: Lease) -> None:
        with lock:
            runs[lease.payload["key"]] += 1

    worker = Worker(Queue(config, client), HandlerRegistry(fallback=handle), concurrency=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with running(worker):
        producers = [subprocess.Popen([sys.executable, "-m", "tests.keyed_producer", str(path), str(p), "12500"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) for p in range(4)]
        sent = sum(int(proc.communicate(timeout=120)[0]) for proc in producers)
        assert [proc.returncode for proc in producers] == [0] * 4
        wait_for(lambda: sum(runs.values()) >= 50_000, 60, "every key's job to run")
    assert sent > 60_000  # the retries were sent
    assert len(runs) == 50_000 and set(runs.values()) == {1}
    assert _deduplicated(Queue(config, client)) == sent - 50_000
