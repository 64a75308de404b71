"""What every measurement shares: repeated timing, the table row it becomes, and the machine line.

Absolute times on a shared 2-core machine mean little, so each row is a ratio against a baseline
measured in the same run, and each side is the median of several runs taken in turn (ours,
baseline, ours, baseline, ...) so a burst of load from elsewhere hits both.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TypeVar

import redis

T = TypeVar("T")


@dataclass(frozen=True)
class Row:
    """One line of BENCHMARKS.md: our figure, the baseline's, their ratio and the target."""

    number: str
    what: str
    ours: str
    baseline: str
    ratio: float | None
    target: str
    met: bool | None  # None: nothing to judge (a peer could not run, or an informative row)
    limits: str = ""


def rate(jobs: int, run: Callable[[], None]) -> float:
    """Jobs per second of one call of ``run`` (which works ``jobs`` jobs)."""
    started = time.perf_counter()
    run()
    return jobs / (time.perf_counter() - started)


def in_turns(repeats: int, *runs: Callable[[], T]) -> list[list[T]]:
    """Each ``run``'s results over ``repeats`` rounds, the runs taking turns each round, so a
    change in the machine's load falls on all of them alike."""
    results: list[list[T]] = [[] for _ in runs]
    for _ in range(repeats):
        for out, run in zip(results, runs):
            out.append(run())
    return results


def alternate(repeats: int, *runs: Callable[[], float]) -> list[float]:
    """Median of each ``run``'s result over ``repeats`` rounds taken in turns."""
    return [statistics.median(r) for r in in_turns(repeats, *runs)]


def server_us(client: redis.Redis, command: str, run: Callable[[], object], per: int | None = None) -> float:
    """Mean microseconds Redis spent per call of ``command`` (e.g. ``fcall``) during ``run``, or
    per one of ``per`` things the calls did (jobs, when a call queues many)."""
    def totals() -> tuple[int, int]:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {"usec": 0, "calls": 0})
        return int(stats["usec"]), int(stats["calls"])
    usec, calls = totals()
    run()
    after_usec, after_calls = totals()
    return (after_usec - usec) / (per or max(1, after_calls - calls))


def log(message: str) -> None:
    """A progress line on stderr: the report goes to stdout or a file."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def per_second(value: float) -> str:
    return f"{value:,.0f} jobs/s"


def machine(client: redis.Redis) -> str:
    """CPU, cores, load, and the versions that the figures depend on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{cpu}, {os.cpu_count()} cores, load average {load} at the start; Linux {platform.release()}; "
            f"Python {platform.python_version()}, redis-py {metadata.version('redis')}; {server_name(client)}")


def server_name(client: redis.Redis) -> str:
    """The server and its version: ``redis-server 7.0.15``, or a Valkey's own version with the
    Redis version it answers as."""
    info = client.info("server")
    if "valkey_version" in info:
        return f"valkey-server {info['valkey_version']} (as Redis {info['redis_version']})"
    return f"redis-server {info['redis_version']}"
