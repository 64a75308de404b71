"""Idle pickup: how soon a job enqueued into a fleet idle for a while starts, and what an idle fleet
sends Redis, for fairctl and BullMQ on the same redis-server.

Each system's worker (``fairctl worker``, BullMQ's ``Worker``) runs with the same slots; after
``idle`` seconds with nothing queued one job is enqueued, stamped with the wall clock, and its
handler pushes how long after the stamp it started. Commands an idle fleet sends are counted with
``MONITOR`` (commands a script runs inside Redis left out) over an idle spell with many slots.
And what leasing ahead costs a more urgent job: the interactive class's wait while a flood of
bulk jobs keeps every slot busy, with the worker's default flags (up to ``--batch 10``, bounded by
``--prefetch 10ms``), with ``--batch 1`` and with ``--prefetch 0`` (always ten ahead). And what an idle fleet costs at
many shards: the commands a few idle ``fairctl worker`` processes make Redis run (``INFO
commandstats``, scripts' own commands counted) on a queue of 64 shards against one queue group.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
import yaml

from fairness_core import Queue, open_queue, parse_config, redis_client
from fairness_core.queue import LOOK_S
from fairness_stack.servers import RedisServer, stop_process

from . import peers
from .harness import Row, in_turns
from .load import EXAMPLE_CONFIG, bench_config
from .report import table

READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Pickup:
    """One system's figures: pickup latencies (ms), and commands per second its idle fleet sent."""

    latencies: list[float]
    idle_commands: float

    @property
    def p99(self) -> float:
        return p99(self.latencies)


def sent_per_second(url: str, seconds: float) -> float:
    """Commands per second clients sent ``url`` over ``seconds`` (MONITOR; scripts' own commands not counted)."""
    client = redis.Redis.from_url(url)
    counted, done = [0], threading.Event()

    def watch(monitor: object) -> None:
        while True:
            command = monitor.next_command()  # type: ignore[attr-defined]
            if done.is_set():
                return
            if command.get("client_type") != "lua":
                counted[0] += 1

    with client.monitor() as monitor:
        thread = threading.Thread(target=watch, args=(monitor,), daemon=True)
        thread.start()
        time.sleep(seconds)
        done.set()
        redis.Redis.from_url(url).ping()  # the command the watcher ends on, not counted
        thread.join(10)
    return counted[0] / seconds


def measure(url: str, key: str, enqueue: Callable[[], None], samples: int, idle: float) -> list[float]:
    """``samples`` pickups, each of one job enqueued after ``idle`` seconds of nothing."""
    client = redis.Redis.from_url(url)
    out = []
    for _ in range(samples):
        time.sleep(idle)
        enqueue()
        got = client.blpop([key], timeout=30)
        if got is None:
            raise RuntimeError(f"no job started within 30 s ({key})")
        out.append(float(got[1]))
    return out


@contextmanager
def fairctl_worker(url: str, slots: int, name: str, *options: str, reserved: bool = True) -> Iterator[Queue]:
    """One ``fairctl worker --concurrency slots *options`` on the prefix ``name`` (its pickups go to
    the list ``pickup:<name>``); ``reserved`` False: the example config without reserved slots."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {"url": url, "prefix": name}
    data["scheduler"]["budget_min_arrivals"] = bench_config(url, name).scheduler.budget_min_arrivals
    if not reserved:
        for item in data["classes"]:
            item["reserved_slots"] = 0
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        yaml.safe_dump(data, file)
    # The producer runs the worker's config: the first to call applies its own to the group.
    scheduler = Queue(parse_config(data), redis_client(url))
    env = {**os.environ, "PICKUP_REDIS_URL": url, "PICKUP_KEY": f"pickup:{name}"}
    worker = subprocess.Popen([sys.executable, "-m", "fairctl", "worker", "--config", file.name, "--handlers",
                               "benchmarks.pickup_handlers:handlers", "--concurrency", str(slots), "--log-every", "0",
                               *options],
                              cwd=peers.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while scheduler.snapshot().worker_slots < slots:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("fairctl worker did not register")
            time.sleep(0.05)
        yield scheduler
    finally:
        stop_process(worker, timeout=10)
        os.unlink(file.name)


@contextmanager
def bullmq_worker(found: peers.Peers, url: str, slots: int) -> Iterator[Callable[[], None]]:
    """One BullMQ Worker of concurrency ``slots``; yields how to add one stamped job."""
    with peers.bullmq_worker(found, "bullmq_pickup.mjs", url, f"pickup-{slots}", slots) as run_mode:
        yield lambda: run_mode("add") and None


def stamped(scheduler: Queue) -> Callable[[], None]:
    """Enqueue one interactive job stamped with the wall clock (ms)."""
    return lambda: scheduler.submit("password_reset", "acme", {"t": time.time() * 1000}) and None


def fairctl_pickup(url: str, slots: int, fleet: int, samples: int, idle: float) -> Pickup:
    with fairctl_worker(url, slots, "idle") as scheduler:
        latencies = measure(url, "pickup:idle", stamped(scheduler), samples, idle)
    with fairctl_worker(url, fleet, "idle-fleet"):
        time.sleep(1.0)
        return Pickup(latencies, sent_per_second(url, max(idle, 2.0)))


def bullmq_pickup(found: peers.Peers, url: str, slots: int, fleet: int, samples: int, idle: float) -> Pickup:
    with bullmq_worker(found, url, slots) as add:
        latencies = measure(url, f"pickup-{slots}:pickup", add, samples, idle)
    with bullmq_worker(found, url, fleet):
        time.sleep(1.0)
        return Pickup(latencies, sent_per_second(url, max(idle, 2.0)))


def rows(url: str, found: peers.Peers, *, slots: int = 4, fleet: int = 40, samples: int = 20,
         idle: float = 5.0) -> list[Row]:
    """Row 9: idle pickup p99 against BullMQ's; row 9b: commands an idle fleet of ``fleet`` slots sends."""
    ours = fairctl_pickup(url, slots, fleet, samples, idle)
    peers.flush(url)
    theirs = bullmq_pickup(found, url, slots, fleet, samples, idle) if found.node else None
    peers.flush(url)
    how = f"{samples} jobs, each after {idle:g} s idle, {slots} slots"
    spread = f"median {statistics.median(ours.latencies):.1f} ms, max {max(ours.latencies):.1f} ms"
    if theirs is None:
        pickup = Row("9", f"idle pickup p99 ({how}) vs BullMQ", f"{ours.p99:.1f} ms", "BullMQ: not run", None,
                     "≤ 10 ms", ours.p99 <= 10, spread)
        idle_row = Row("9b", f"commands an idle fleet of {fleet} slots sends Redis", f"{ours.idle_commands:.1f}/s",
                       "BullMQ: not run", None, "a few per second", ours.idle_commands <= 5)
        return [pickup, idle_row]
    return [
        Row("9", f"idle pickup p99 ({how}) vs BullMQ", f"{ours.p99:.1f} ms", f"BullMQ {theirs.p99:.1f} ms",
            ours.p99 / theirs.p99, "≤ 10 ms", ours.p99 <= 10,
            f"{spread}; BullMQ median {statistics.median(theirs.latencies):.1f} ms"),
        Row("9b", f"commands an idle fleet of {fleet} slots sends Redis", f"{ours.idle_commands:.1f}/s",
            f"BullMQ {theirs.idle_commands:.1f}/s", ours.idle_commands / max(theirs.idle_commands, 0.1),
            "a few per second", ours.idle_commands <= 5, "MONITOR, commands scripts run inside Redis not counted"),
    ]


SHARDS = 64  # the sharded queue of row 9c
IDLE_WORKERS = 4  # row 9c's fleet: `fairctl worker` processes of 2 slots
IDLE_WINDOW_S = 2 * LOOK_S  # row 9c's measure: twice the longest period an idle worker acts on


@contextmanager
def idle_fleet(url: str, name: str, shards: int) -> Iterator[None]:
    """IDLE_WORKERS ``fairctl worker`` processes of 2 slots on a queue of ``shards`` shards under
    the prefix ``name``, registered."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {"url": url, "prefix": name, "shards": shards}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        yaml.safe_dump(data, file)
    queue = open_queue(parse_config(data))
    workers = [subprocess.Popen([sys.executable, "-m", "fairctl", "worker", "--config", file.name, "--concurrency", "2",
                                 "--log-every", "0"], cwd=peers.ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(IDLE_WORKERS)]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while queue.fleet_slots() < 2 * IDLE_WORKERS:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError("the idle fleet's workers did not register")
            time.sleep(0.05)
        yield
    finally:
        for worker in workers:
            stop_process(worker, timeout=10)
        os.unlink(file.name)


def commands_per_second(url: str, shards: int, seconds: float) -> float:
    """Commands a second Redis runs (INFO commandstats, scripts' own counted) for an idle fleet on a
    queue of ``shards`` shards, over ``seconds`` once it has settled."""
    client = redis.Redis.from_url(url)

    def ran() -> int:
        return sum(stat["calls"] for stat in client.info("commandstats").values())

    with idle_fleet(url, f"idle-{shards}", shards):
        time.sleep(2.0)
        before = ran()
        time.sleep(seconds)
        return (ran() - before) / seconds


def sharded_idle_row(url: str, seconds: float = IDLE_WINDOW_S) -> Row:
    """Row 9c: what an idle fleet costs Redis on a queue of SHARDS shards against one queue group."""
    one = commands_per_second(url, 1, seconds)
    sharded = commands_per_second(url, SHARDS, seconds)
    return Row("9c", f"commands {IDLE_WORKERS} idle workers make Redis run on {SHARDS} shards vs one queue group",
               f"{sharded:.1f}/s", f"one group {one:.1f}/s", sharded / one, "≤ 2", sharded <= 2 * one,
               f"INFO commandstats over {seconds:g} s, scripts' own commands counted")


BULK_S = 0.02  # each flood job's run: long enough that a prefetched batch of them holds a slot


def flood_pickup(url: str, slots: int, samples: int, *flags: str) -> list[float]:
    """Pickups of ``samples`` interactive jobs, 0.1 s apart, while a bulk flood of BULK_S jobs keeps
    every slot of ``fairctl worker`` with ``flags`` busy. No reserved slots: they would keep threads
    free, and measure the reservation instead of the prefetch."""
    name = "flood" + "".join(flags).replace("-", "")
    with fairctl_worker(url, slots, name, *flags, reserved=False) as scheduler:
        per_tenant = int(2 * slots * (samples * 0.1 + 2) / BULK_S / 10)  # twice what the run can work
        for t in range(10):
            scheduler.submit_many("newsletter", f"bulk-{t}", [{"service_s": BULK_S}] * per_tenant)
        time.sleep(0.5)
        latencies = measure(url, f"pickup:{name}", stamped(scheduler), samples, 0.1)
        if scheduler.snapshot().classes["jobs:low"].depth == 0:
            raise RuntimeError("the bulk flood ran out before the interactive jobs were measured")
    return latencies


def p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[98] if len(latencies) > 1 else latencies[0]


def prefetch_row(url: str, slots: int, samples: int, repeats: int) -> Row:
    """Row 10: the interactive class's p99 wait under a bulk flood, the default flags against
    ``--batch 1`` (and ``--prefetch 0`` beside them), over ``repeats`` runs of each taken in turns.

    Each p99 is over the waits of all the runs pooled: the p99 of one run's waits (100 at the
    full preset) is its one or two longest, which a single stall of the machine decides, while the
    pooled one ranks ``repeats`` times as many."""
    one, default, unbounded = (p99([wait for run in runs for wait in run]) for runs in in_turns(
        repeats,
        lambda: flood_pickup(url, slots, samples, "--batch", "1"),
        lambda: flood_pickup(url, slots, samples),
        lambda: flood_pickup(url, slots, samples, "--prefetch", "0"),
    ))
    return Row("10", f"interactive p99 wait under a flood of {BULK_S * 1000:.0f} ms bulk jobs, {slots} slots, default "
               "flags (`--batch 10 --prefetch 10ms`) vs `--batch 1`", f"{default:.1f} ms", f"`--batch 1` {one:.1f} ms",
               default / one, "≤ 1.25", default <= 1.25 * one,
               f"{repeats} runs of {samples} interactive jobs each, pooled; `--prefetch 0` (always ten ahead): "
               f"{unbounded:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20, help="jobs each system picks up (default 20)")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before each job (default 5)")
    parser.add_argument("--flood-samples", type=int, default=100,
                        help="interactive jobs per run under the bulk flood (default 100)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each --batch under the flood (default 3)")
    parser.add_argument("--peers", choices=["install", "installed", "none"], default="installed",
                        help="install BullMQ when missing, use it only if installed (default), or skip it")
    args = parser.parse_args(argv)
    found = peers.find(args.peers)
    with RedisServer() as server:
        print(table([*rows(server.url, found, samples=args.samples, idle=args.idle), sharded_idle_row(server.url),
                     prefetch_row(server.url, 4, args.flood_samples, args.repeats)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
