"""The longest scheduler script run, from Redis's own ``SLOWLOG`` (microseconds, server side).

Every script call above ``THRESHOLD_US`` is logged while the other measurements run against the
100,000-tenant state (pops of 1 and of a batch, acks, scrapes), and :func:`sweeps` adds the
operations they do not: enqueue, nack, extend, reap, aging, worker registration. :func:`commands`
counts the Redis commands each pop+ack's script runs, at 100,000 tenants and at 10.

``SLOWLOG`` times a call by the wall clock, so a call during which the operating system gave
redis-server's core to another process is logged with that wait in it. :func:`on_cpu` tells the
two apart: around each pop+ack it reads the main thread's CPU time and run-queue wait from
``/proc/<pid>/task/<pid>/schedstat`` (Linux, nanoseconds). :func:`jitter` measures the machine
itself: a fixed piece of CPU work, no system calls, on every core at once.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import redis

from fairness_core import Lease, Queue

from .load import TASKS, payload

THRESHOLD_US = 100  # log every command slower than this
LOG_LENGTH = 1_000_000  # keep them all
FLEET_SLOTS = 1_000_000
OP_ARG = 3  # FCALL function numkeys KEYS... ARGV[1]: the op is the first argument after the keys


def start(client: redis.Redis) -> None:
    client.config_set("slowlog-log-slower-than", THRESHOLD_US)
    client.config_set("slowlog-max-len", LOG_LENGTH)
    client.slowlog_reset()


def sweeps(sched: Queue, rounds: int) -> None:
    """The operations the throughput and scrape runs do not exercise, ``rounds`` times each."""
    for n in range(rounds):
        sched.submit(TASKS[n % len(TASKS)], f"tenant-{n}", payload(n))
        first, second = sched.pop(2)
        sched.extend(first)
        sched.nack(second, "benchmark")
        sched.reap()
        sched.promote_overdue()
        sched.register_worker("bench", FLEET_SLOTS, 60)  # enough slots that no reservation holds pops back
        sched.ack(first)
    sched.unregister_worker("bench")


@dataclass(frozen=True)
class Longest:
    """The longest logged script run per operation, and how many runs went over ``limit_us``."""

    by_op: dict[str, int]
    over: list[str]  # each run over the limit: when it started, its operation and arguments, how long

    @property
    def over_limit(self) -> int:
        return len(self.over)

    @property
    def longest_us(self) -> int:
        return max(self.by_op.values(), default=0)


def longest(client: redis.Redis, base: str, limit_us: int) -> Longest:
    """Script runs on the queue group whose keys start with ``base`` (e.g. ``{big}:``)."""
    by_op: dict[str, int] = defaultdict(int)
    over = []
    for entry in sorted(client.slowlog_get(LOG_LENGTH), key=lambda e: e["id"]):
        args = entry["command"].split(b" ")
        if args[0].upper() != b"FCALL" or not args[OP_ARG].decode().startswith(base):
            continue
        at = OP_ARG + int(args[2])
        op, duration = args[at].decode(), int(entry["duration"])
        by_op[op] = max(by_op[op], duration)
        if duration > limit_us:
            started = time.strftime("%H:%M:%S", time.localtime(int(entry["start_time"])))
            shown = b" ".join([args[at], *args[at + 3:at + 5]]).decode(errors="replace").strip()  # the op, its first arguments
            over.append(f"{started} {shown}: {duration} µs")
    return Longest(dict(by_op), over)


@dataclass(frozen=True)
class OnCpu:
    """Pop+acks timed two ways: by ``SLOWLOG`` (every command logged for the while) and by
    redis-server's main thread, whose CPU time and run-queue wait (runnable, but another process
    had the core, or it was waking up) are read just before each call is sent and just after its
    reply comes, so the CPU time is an upper bound of the script's own. Microseconds."""

    calls: int
    longest_cpu_us: int  # the most CPU time a call's span took
    longest_us: int  # the longest call in SLOWLOG ...
    its_cpu_us: int  # ... the CPU time of its span ...
    its_wait_us: int  # ... and the time its span waited for a CPU
    over_1ms: int  # calls above 1 ms in SLOWLOG


def on_cpu(client: redis.Redis, pid: int, sched: Queue, calls: int) -> OnCpu | None:
    """``calls`` pop+acks of one job each, timed as :class:`OnCpu` says; None where the kernel
    keeps no schedstat (not Linux, or built without it). Leaves the slow log empty, at Redis's
    default threshold."""
    path = Path(f"/proc/{pid}/task/{pid}/schedstat")
    if not path.exists():
        return None
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", LOG_LENGTH)
    client.slowlog_reset()
    spans: list[tuple[int, int]] = []
    with path.open("rb") as stat:
        def read() -> tuple[int, int]:
            stat.seek(0)
            ran, waited, _ = stat.read().split()
            return int(ran), int(waited)

        done: list[Lease] = []
        for _ in range(calls):
            ran, waited = read()
            done = sched.ack_and_pop(done, 1).leases
            ran_after, waited_after = read()
            spans.append(((ran_after - ran) // 1000, (waited_after - waited) // 1000))
    entries = sorted((e for e in client.slowlog_get(LOG_LENGTH) if e["command"].upper().startswith(b"FCALL")),
                     key=lambda e: e["id"])
    client.config_set("slowlog-log-slower-than", 10_000)
    client.slowlog_reset()
    for lease in done:
        sched.ack(lease)
    if len(entries) != calls:
        raise RuntimeError(f"the slow log kept {len(entries)} of {calls} pop+acks: raise LOG_LENGTH")
    durations = [int(e["duration"]) for e in entries]
    k = max(range(calls), key=durations.__getitem__)
    return OnCpu(calls, max(r for r, _ in spans), durations[k], spans[k][0], spans[k][1],
                 sum(d > 1000 for d in durations))


@dataclass(frozen=True)
class Commands:
    """The Redis commands each of ``calls`` pop+acks ran inside its script: their median and most."""

    calls: int
    median: float
    most: int


NOT_THE_SCRIPTS = {"fcall", "info"}  # the calls themselves, and the counting


def commands(client: redis.Redis, sched: Queue, calls: int) -> Commands:
    """``calls`` pop+acks of one job each, the commands each ran counted from ``INFO
    commandstats`` read just before and after it: the work a call does, which the machine's
    stalls do not change. Nothing else may use the server meanwhile."""
    def total() -> int:
        return sum(int(stats["calls"]) for name, stats in client.info("commandstats").items()
                   if name.removeprefix("cmdstat_") not in NOT_THE_SCRIPTS)

    counts: list[int] = []
    done: list[Lease] = []
    for _ in range(calls):
        before = total()
        done = sched.ack_and_pop(done, 1).leases
        counts.append(total() - before)
    for lease in done:
        sched.ack(lease)
    return Commands(calls, statistics.median(counts), max(counts))


SPIN = 3_000  # loop turns of one work unit: about 130 µs of CPU on the machine of BENCHMARKS.md


@dataclass(frozen=True)
class Jitter:
    """A fixed work unit run over and over on every core at once: its median and longest time
    (µs), how many runs took over 1 ms, and how many of those the kernel never switched out (so
    the time went to the machine under the process: interrupts, or a hypervisor's other guests)."""

    runs: int
    median_us: int
    longest_us: int
    over_1ms: int
    not_switched: int


def _spin(runs: int) -> list[tuple[int, int]]:
    """(µs, involuntary context switches) of each of ``runs`` work units."""
    out = []
    for _ in range(runs):
        switches = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
        started = time.perf_counter_ns()
        total = 0
        for i in range(SPIN):
            total += i * i
        took = (time.perf_counter_ns() - started) // 1000
        out.append((took, resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - switches))
    return out


def jitter(runs: int) -> Jitter:
    """``runs`` work units on each core, all cores at once (one process each)."""
    cores = os.cpu_count() or 1
    with ProcessPoolExecutor(cores) as pool:
        spans = [span for part in pool.map(_spin, [runs] * cores) for span in part]
    return Jitter(len(spans), int(statistics.median(t for t, _ in spans)), max(t for t, _ in spans),
                  sum(t > 1000 for t, _ in spans), sum(t > 1000 and not s for t, s in spans))
