"""An idle fleet costs Redis about what it costs unsharded, however many shards its queue has: 4
idle workers on a queue of 64 shards send at most twice the commands a second of the same workers
on one queue group, and a job queued into the idle fleet is still taken at once. (Each idle worker
used to read every shard ten times a second and sweep every shard each second: 4 workers on 64
shards sent 7,164 commands a second against 47 unsharded.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from fairness_core import Config, open_queue, redis_client
from fairness_core import queue as queue_module
from fairness_core.jobs import Lease
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .support import running, wait_for

pytestmark = pytest.mark.slow

SHARDS = 64
WORKERS = 4
# Two looks at every shard per worker (queue_module.LOOK_S) and two aging ticks: a multiple of the
# longest period, so both fleets' windows hold the same ticks.
WINDOW_S = 2 * queue_module.LOOK_S
WARM_UP_S = 2.0  # the workers have registered and read the group's state


@contextmanager
def fleet(config: Config, handlers: HandlerRegistry) -> Iterator[None]:
    """WORKERS workers of 2 slots on ``config``'s queue, each with a queue of its own, in threads."""
    with ExitStack() as stack:
        for _ in range(WORKERS):
            stack.enter_context(running(Worker(open_queue(config), handlers, concurrency=2, log_every=0)))
        yield


def idle_rate(server: RedisServer) -> float:
    """The commands a second (INFO commandstats) ``server`` serves over WINDOW_S, after WARM_UP_S."""
    time.sleep(WARM_UP_S)
    client = redis_client(server.url)
    client.config_resetstat()
    time.sleep(WINDOW_S)
    return sum(stat["calls"] for stat in client.info("commandstats").values()) / WINDOW_S


def test_an_idle_sharded_fleet_costs_about_what_it_costs_unsharded_and_takes_jobs_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The unsharded fleet is measured on a Redis of its own at the same time. Then, with no
    periodic look at every shard left, only the group's wake key can tell the idle workers of a
    job: the first is taken, then a burst over every shard, each job once."""
    unsharded: list[float] = []

    def measure_unsharded() -> None:
        with RedisServer() as server, fleet(make_config(redis={"url": server.url}), HandlerRegistry()):
            unsharded.append(idle_rate(server))

    beside = threading.Thread(target=measure_unsharded)
    beside.start()
    done: list[str] = []
    lock = threading.Lock()

    def record(lease: Lease) -> None:
        with lock:
            done.append(lease.job_id)

    with RedisServer() as server:
        config = make_config(redis={"url": server.url, "shards": SHARDS})
        queue = open_queue(config)
        with fleet(config, HandlerRegistry(fallback=record)):
            rate = idle_rate(server)
            monkeypatch.setattr(queue_module, "LOOK_S", 3600.0)
            first = queue.enqueue("newsletter", "shop-0")
            wait_for(lambda: done == [first], 60, "the first job to be done")
            burst = [queue.enqueue("newsletter", f"shop-{n}") for n in range(1, 641)]
            assert len({queue.locate(job)[0] for job in burst}) == SHARDS
            wait_for(lambda: len(done) == 1 + len(burst), 60, "the burst to be done")
    beside.join()
    assert rate <= 2 * unsharded[0], (rate, unsharded)
    assert sorted(done) == sorted([first, *burst])
    print(f"\n{WORKERS} idle workers: {rate:.1f} commands/s on {SHARDS} shards, {unsharded[0]:.1f} on one group "
          f"(x{rate / unsharded[0]:.2f})")
