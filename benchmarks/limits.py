"""Pop+ack with dispatch limits configured, and with 1,000 tenants held by them, against none.

All three loops are row 1's (one job per call, the ack riding with the next pop) over the same 10
tenants of one class, each on a queue group of its own on one redis-server, in turns:

- no limits: the baseline, as row 1;
- limits configured, no tenant held: every tenant has a cap (``tenants.max_in_flight: 100``) and a
  rate (``dispatch_rate: 10000/s``, ``dispatch_burst: 10``) that the loop never reaches, so each pop
  reads the tenant's running count and its bucket and writes both, and each ack counts the lease
  off again: the cost of limits on the path every job takes;
- 1,000 tenants held: the same, and 1,000 tenants of tier ``pro`` (``tenants.limits.pro
  .max_in_flight: 1``) with one job leased each and one more queued, parked out of the class's
  fair order before the timing starts (the stats count 1,000 held at ``cap``).

The notes of 1f give the script's time in Redis without limits beside the same 1,000 jobs leased
(and none queued: with no cap they would be popped), which tells the holds' cost from that of
the leases they keep. Each run checks that no tenant of the 10 was ever held (the stats' held counts), so the rows
measure the limits' bookkeeping, never a tenant waiting for its rate.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import redis

from fairness_core import Queue, redis_client
from fairness_core.config import TierLimits

from . import script_latency, throughput
from .harness import Row, alternate, log, per_second
from .load import bench_config, payload
from .report import run_alone

TENANTS = 10  # row 1's
HELD, HELD_TIER = 1_000, "pro"
CLASS = "jobs:medium"  # where throughput.refill queues (sync_contacts), and the held tenants too
TARGET = 1.15  # time per job with limits / without: 15% slower at most
# Every tenant's limits (the group's), which the loop's tenants never reach: about a tenth of
# some 10,000 pops a second each, one job leased at a time.
CAP, RATE, BURST = 100, 10_000.0, 10


def queue(url: str, prefix: str, limits: bool = True) -> Queue:
    """The benchmarks' config with leases of an hour (the held tenants' leases outlive every run)
    and, with ``limits``, CAP, RATE and BURST for every tenant and a cap of 1 for tier HELD_TIER."""
    config = bench_config(url, prefix)
    config = dataclasses.replace(config, leases=dataclasses.replace(config.leases, visibility_timeout=3600.0))
    if limits:
        config = dataclasses.replace(config, tenants=dataclasses.replace(
            config.tenants, max_in_flight=CAP, dispatch_rate=RATE, dispatch_burst=BURST,
            limits={HELD_TIER: TierLimits(max_in_flight=1)}))
    return Queue(config, redis_client(url))


def lease_one_each(sched: Queue, tenants: int, queued: int) -> None:
    """``tenants`` tenants of HELD_TIER, each with one job leased and ``queued`` more queued: one
    pop leases a job of each, visiting each once."""
    for t in range(tenants):
        sched.submit_many("sync_contacts", f"held-{t}", [payload(n) for n in range(1 + queued)], tier=HELD_TIER)
    leased = sched.pop(tenants)
    assert len(leased) == tenants, f"leased {len(leased)} jobs of {tenants} tenants, expected one each"


def hold(sched: Queue, tenants: int) -> None:
    """``tenants`` tenants of HELD_TIER at their cap, a job queued each, all parked: the pop after
    the one that leased their first jobs visits each again, finds it at its cap and parks it, and
    leases nothing (the class has no other work yet)."""
    lease_one_each(sched, tenants, 1)
    assert sched.pop(1) == [], "a held tenant's second job was leased past its cap"
    assert held(sched) == {"cap": tenants}, held(sched)


def held(sched: Queue) -> dict[str, int]:
    """Members held in CLASS, by reason (the stats' counts)."""
    return dict(sched.snapshot().classes[CLASS].held)


def checked(sched: Queue, expected: dict[str, int], run: Callable[[], float]) -> Callable[[], float]:
    """``run``, then a check that the holds are as they were: no tenant of the loop was held."""
    def go() -> float:
        rate = run()
        assert held(sched) == expected, f"holds after a run: {held(sched)}, expected {expected}"
        return rate
    return go


def rows(url: str, jobs: int, repeats: int) -> list[Row]:
    """Rows 1e and 1f: time per job of the loop with limits configured, and with HELD tenants
    held, each against no limits; the script's µs per call in Redis and the commands it runs."""
    client = redis.Redis.from_url(url)
    bare, crowded = queue(url, "limits-none", limits=False), queue(url, "limits-none-leased", limits=False)
    idle, busy = queue(url, "limits-idle"), queue(url, "limits-held")
    log(f"parking {HELD:,} tenants at their cap")
    hold(busy, HELD)
    lease_one_each(crowded, HELD, 0)  # the held tenants' leases, with no limit and nothing queued

    def loop(sched: Queue, n: int) -> None:
        throughput.drain(sched, n, 1)

    base, configured, at_held = alternate(
        repeats,
        throughput.scheduler_run(bare, jobs, loop, TENANTS),
        checked(idle, {}, throughput.scheduler_run(idle, jobs, loop, TENANTS)),
        checked(busy, {"cap": HELD}, throughput.scheduler_run(busy, jobs, loop, TENANTS)),
    )
    def script(sched: Queue) -> Callable[[], float]:
        return lambda: throughput.script_us(client, sched, TENANTS, jobs, 1)

    base_us, idle_us, busy_us, crowded_us = alternate(repeats, *map(script, (bare, idle, busy, crowded)))
    counted = max(1, jobs // 5)
    commands: dict[str, float] = {}
    for name, sched in (("none", bare), ("idle", idle), ("held", busy)):
        throughput.refill(sched, TENANTS, counted)
        commands[name] = script_latency.commands(client, sched, counted).median
    assert held(busy) == {"cap": HELD} and held(idle) == {}

    def row(number: str, what: str, rate: float, script: float, ran: float, more: str = "") -> Row:
        ratio = base / rate  # time per job, ours / the baseline's
        return Row(number, what, f"{1e6 / rate:.0f} µs a job ({per_second(rate)})",
                   f"no limits {1e6 / base:.0f} µs ({per_second(base)})", ratio, f"≤ {TARGET}", ratio <= TARGET,
                   f"in Redis: {script:.0f} µs per call, {base_us:.0f} µs without limits{more}; commands per call "
                   f"(median): {ran:.0f}, {commands['none']:.0f} without")

    return [
        row("1e", f"pop+ack, one job per call, {TENANTS} tenants each under a cap and a dispatch rate it never "
            "reaches (`max_in_flight`, `dispatch_rate`): no tenant held", configured, idle_us, commands["idle"]),
        row("1f", f"the same beside {HELD:,} tenants held at their cap of 1, a job queued each", at_held, busy_us,
            commands["held"], f" ({crowded_us:.0f} µs without limits beside the same {HELD:,} jobs leased)"),
    ]


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
