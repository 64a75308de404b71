"""Dispatch limits on a real redis-server, worked by real ``fairctl worker`` processes whose
handlers (tests/recording_handlers.py's ``intervals``) record when each job started and ended, so
the tests judge what ran, not what the scripts counted:

- a tenant capped at 3 (``tenants.overrides``) never runs more than 3 jobs at once in a worker of
  12 slots, and the 24 tenants beside it finish about as fast as they do without it;
- a tenant paced at 5 jobs a second starts 5 ± burst in every second for 60 s while the other
  tenants keep the rest of the fleet busy;
- on a queue of 6 shards worked by 3 workers, the cap of 3 holds across the fleet, and the capped
  tenant's jobs all go to the first shard of its hand, though it is the deepest of the hand.

The rate's test takes 60 s by its nature: tests/conftest.py's SPREAD_MODULES makes each test here
a group of its own, so the suite runs it beside the others rather than after them.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from fairness_core import Queue
from fairness_core.queue import split_job_id
from fairness_core.sharding import hand
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .support import fleet, wait_for, write_config
from .test_charge_live import CLASSES

pytestmark = pytest.mark.slow

HANDLERS = "tests.recording_handlers:intervals"
TASK = "sync_contacts"  # jobs:medium; CLASSES reserve no slot for another class, so every slot serves it
MEDIUM = "jobs:medium"


@dataclass(frozen=True)
class Run:
    """One job as the handler saw it: its tenant, id, worker process, start and end (monotonic s)."""

    tenant: str
    job_id: str
    pid: int
    start: float
    end: float


class Intervals:
    """What the ``intervals`` handlers recorded in the list ``key``, read on as it grows."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key
        self.seen: list[Run] = []

    def read(self) -> list[Run]:
        for raw in self.client.lrange(self.key, len(self.seen), -1):
            tenant, job_id, pid, start, end = raw.decode().split("\t")
            self.seen.append(Run(tenant, job_id, int(pid), float(start), float(end)))
        return self.seen

    def of(self, *tenants: str) -> list[Run]:
        return [run for run in self.read() if run.tenant in tenants]


def most_at_once(runs: list[Run]) -> int:
    """The most of ``runs`` running at one instant (a job ending as another starts: one at a time,
    as the cap counts a job's lease, which ends after its handler returns and before the next pops)."""
    events = sorted([(run.start, 1) for run in runs] + [(run.end, -1) for run in runs])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def limited(redis_server: RedisServer, client: redis.Redis, tmp_path: Path, overrides: dict[str, dict[str, Any]],
            **sections: Any) -> tuple[Path, Queue]:
    """The example config with CLASSES (no reserved slots), no arrival budget (the loads here are
    no realistic arrival mix) and ``overrides`` as ``tenants.overrides``."""
    path, config = write_config(tmp_path, redis_server.url, classes=CLASSES, scheduler={"budget_min_arrivals": 10**9},
                                tenants={"overrides": overrides}, **sections)
    return path, Queue(config, client)


def submit_at_once(queue: Queue, jobs: dict[str, int], service_s: float, chunk: int = 5) -> None:
    """``jobs[tenant]`` jobs of ``service_s`` for each tenant, in the order given, ``chunk`` a call
    (each call routed on its own on a sharded queue, as jobs arriving over time are), all visible to
    the workers at once (queued while the class is paused), so no tenant's run starts later for
    being queued later."""
    queue.pause(MEDIUM)
    for tenant, n in jobs.items():
        for first in range(0, n, chunk):
            queue.submit_many(TASK, tenant, [{"service_s": service_s}] * min(chunk, n - first))
    queue.resume(MEDIUM)


CAPPED, CAP = "capped", 3
JOB_S = 0.2
OTHERS, OTHER_JOBS, CAPPED_JOBS = 24, 15, 150
SLOTS = 12
# The others' completion time beside the capped tenant may exceed theirs alone by 20%, plus this.
# Both runs take about 6 s (360 jobs of 0.2 s on 12 slots); on a 2-core machine shared with other
# test runs, one run's worker can lose a few hundred ms (its 12 threads waiting for a core at a
# round's start, an ack's round trip behind another process's burst) that the other does not, and
# that loss does not scale with the run's length: 20% of 6 s is 1.2 s, and the loss alone can be
# a third of that. Its jobs finish in rounds of 0.2 s, so the figure also moves by a round.
SLACK_S = 0.5


def test_a_tenant_capped_at_3_runs_3_at_once_and_the_others_finish_as_fast_as_without_it(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """``max_in_flight: 3`` for one tenant with 150 jobs of 0.2 s beside 24 tenants of 15 each, on
    12 slots: it runs 3 at once (while the others run and after they are done, when 12 slots are
    free for it) and never more; the others finish within 20% (and SLACK_S) of their time in a
    run of the same worker without it. Their time is from the run's first start to their last end."""
    path, queue = limited(redis_server, client, tmp_path, {CAPPED: {"max_in_flight": CAP}})
    runs = Intervals(client, f"{queue.config.redis.prefix}:ran")

    def run(prefix: str, capped_jobs: int) -> tuple[list[Run], list[Run]]:
        others = [f"{prefix}-{i}" for i in range(OTHERS)]
        submit_at_once(queue, {**dict.fromkeys(others, OTHER_JOBS), **({CAPPED: capped_jobs} if capped_jobs else {})},
                       JOB_S)
        total = OTHERS * OTHER_JOBS + capped_jobs
        wait_for(lambda: len(runs.of(*others, CAPPED)) == total, 120, f"{total} jobs of the {prefix} run done")
        return runs.of(*others), runs.of(CAPPED)

    with fleet(path, tmp_path, redis_server.url, runs.key, 1, SLOTS, handlers=HANDLERS):
        alone, none = run("alone", 0)
        beside, capped = run("beside", CAPPED_JOBS)
    assert none == []

    def finished_in(others: list[Run], everyone: list[Run]) -> float:
        return max(r.end for r in others) - min(r.start for r in everyone)

    alone_s, beside_s = finished_in(alone, alone), finished_in(beside, beside + capped)
    assert most_at_once(capped) == CAP, f"the capped tenant ran {most_at_once(capped)} at once"
    assert most_at_once(beside + capped) == SLOTS, "the fleet was full: the cap, not a lack of slots, held it"
    assert beside_s <= 1.2 * alone_s + SLACK_S, (
        f"the others finished in {beside_s:.2f}s beside the capped tenant, {alone_s:.2f}s without it")
    print(f"\nothers finished in {alone_s:.2f}s alone, {beside_s:.2f}s beside a tenant capped at {CAP} "
          f"({beside_s / alone_s:.2f}x); the capped tenant's {CAPPED_JOBS} jobs ran at most {CAP} at once")


PACED = "paced"
RATE, BURST = 5, 2  # dispatch_rate 5/s; a burst of 2 lets a start that came late (no slot free yet) be made up
WINDOW_S = 60
PACED_JOB_S, BUSY_JOB_S = 0.05, 0.1
# 6,000 jobs of 0.1 s: 75 s of the 8 slots, past the window. The 8 slots pop some 80 jobs a second,
# and fair queuing (charge: jobs) gives each of the 5 tenants a fifth of them, some 16 a second:
# the paced tenant's share is thrice its rate, so its rate is what holds it. (Among 16 tenants of
# 0.25 s jobs its share would be 2 a second, and fairness, not the rate, would hold it there.)
RATE_SLOTS, BUSY_TENANTS, BUSY_JOBS = 8, 4, 1_500


def test_a_tenant_paced_at_5_a_second_starts_5_in_every_second_while_the_others_fill_the_fleet(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """``dispatch_rate: 5/s`` with ``dispatch_burst: 2`` for one tenant with more jobs than 60 s of
    its rate, beside 4 tenants that could fill the 8 slots for 75 s: from its first start on, every
    1 s window after the first holds 5 ± 2 of its starts, the 60 s hold about 300 + 2, and the
    others keep the slots it leaves busy (their jobs fill at least 90% of that time: their
    throughput is not held)."""
    path, queue = limited(redis_server, client, tmp_path, {PACED: {"dispatch_rate": f"{RATE}/s",
                                                                     "dispatch_burst": BURST}})
    runs = Intervals(client, f"{queue.config.redis.prefix}:ran")
    busy = [f"busy-{i}" for i in range(BUSY_TENANTS)]
    submit_at_once(queue, dict.fromkeys(busy, BUSY_JOBS), BUSY_JOB_S)
    queue.submit_many(TASK, PACED, [{"service_s": PACED_JOB_S}] * (RATE * WINDOW_S + 100))

    def past_the_window() -> bool:
        paced = runs.of(PACED)
        # A start recorded 1 s past the window: every job started in it has ended and been recorded.
        return bool(paced) and max(r.start for r in paced) >= min(r.start for r in paced) + WINDOW_S + 1

    with fleet(path, tmp_path, redis_server.url, runs.key, 1, RATE_SLOTS, handlers=HANDLERS):
        wait_for(past_the_window, WINDOW_S + 60, f"{WINDOW_S + 1}s of the paced tenant's starts")
    t0 = min(r.start for r in runs.of(PACED))
    starts = [r.start - t0 for r in runs.of(PACED) if r.start < t0 + WINDOW_S]
    per_second = [sum(1 for s in starts if k <= s < k + 1) for k in range(WINDOW_S)]
    off = [(k, n) for k, n in enumerate(per_second) if k >= 1 and abs(n - RATE) > BURST]
    assert off == [], f"windows (second, starts) outside {RATE} ± {BURST}: {off}; every window: {per_second}"
    assert RATE * WINDOW_S + BURST - 6 <= len(starts) <= RATE * WINDOW_S + BURST, (
        f"{len(starts)} starts in {WINDOW_S}s at {RATE}/s, burst {BURST}")

    others = [r for r in runs.of(*busy) if r.start < t0 + WINDOW_S]
    assert len(others) < BUSY_TENANTS * BUSY_JOBS, "the other tenants ran dry: the fleet was not theirs to fill"
    paced_busy = sum(min(r.end, t0 + WINDOW_S) - r.start for r in runs.of(PACED) if r.start < t0 + WINDOW_S)
    others_busy = sum(min(r.end, t0 + WINDOW_S) - max(r.start, t0) for r in others if r.end > t0)
    left = RATE_SLOTS * WINDOW_S - paced_busy
    assert others_busy >= 0.9 * left, f"the others ran {others_busy:.0f} of the {left:.0f} slot-seconds left to them"
    print(f"\n{len(starts)} starts in {WINDOW_S}s at {RATE}/s burst {BURST}: {min(per_second[1:])} to "
          f"{max(per_second[1:])} a second after the first ({per_second[0]}); the others ran "
          f"{others_busy / left:.1%} of the slot time left to them")


SHARDS, HAND = 6, 3
WORKERS, WORKER_SLOTS = 3, 4
SHARDED_OTHERS, SHARDED_OTHER_JOBS = 12, 10
# The capped tenant's jobs: some queued with the others', then more in calls of 3 while it runs
# (each call routed on its own, as jobs arriving over time are).
SHARDED_CAPPED_FIRST, SHARDED_CAPPED_LATER, ARRIVAL_S = 15, 30, 0.1
NEIGHBOUR_JOBS = 30


def test_a_cap_of_3_holds_across_the_fleet_on_a_sharded_queue(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """6 shards on one redis-server (``shard_hand: 3``), 3 workers of 4 slots: the tenant capped
    at 3 has its jobs all on the first shard of its hand, whose script counts its leases whichever
    worker holds them, so it never runs more than 3 at once across the workers (and reaches 3,
    worked by more than one of them), though most of its jobs arrive while it runs. That shard is
    the deepest of its hand when its first jobs come (a neighbour capped too, whose hand starts
    there, queued 30 first), where a tenant no limit held would go to a shallower one, and so would
    it, were it not pinned. The other tenants' jobs spread over their hands' shards."""
    home = hand(CAPPED, SHARDS, HAND)[0]
    neighbour = next(name for name in (f"neighbour-{i}" for i in itertools.count())
                     if hand(name, SHARDS, HAND)[0] == home)
    redis_section = {"url": redis_server.url, "prefix": make_config().redis.prefix, "shards": SHARDS,
                     "shard_hand": HAND}
    path, queue = limited(redis_server, client, tmp_path, {CAPPED: {"max_in_flight": CAP},
                                                           neighbour: {"max_in_flight": CAP}}, redis=redis_section)
    runs = Intervals(client, f"{queue.config.redis.prefix}:ran")
    others = [f"other-{i}" for i in range(SHARDED_OTHERS)]
    total = SHARDED_CAPPED_FIRST + SHARDED_CAPPED_LATER + NEIGHBOUR_JOBS + SHARDED_OTHERS * SHARDED_OTHER_JOBS
    with fleet(path, tmp_path, redis_server.url, runs.key, WORKERS, WORKER_SLOTS, handlers=HANDLERS) as logs:
        # Every worker up first: on a busy machine one may start seconds after another, and the
        # first alone could run all of the capped tenant's 3 s of work.
        wait_for(lambda: all("slots" in log.read_text() for log in logs), 60, "the workers to start")
        submit_at_once(queue, {neighbour: NEIGHBOUR_JOBS, **dict.fromkeys(others, SHARDED_OTHER_JOBS),
                               CAPPED: SHARDED_CAPPED_FIRST}, JOB_S)
        wait_for(lambda: len(runs.of(CAPPED)) > 0, 60, "the capped tenant at work")
        for _ in range(0, SHARDED_CAPPED_LATER, CAP):
            queue.submit_many(TASK, CAPPED, [{"service_s": JOB_S}] * CAP)
            time.sleep(ARRIVAL_S)  # the pace of the arrivals (nothing waits on it)
        wait_for(lambda: len(runs.read()) == total, 120, f"all {total} jobs done")
    capped = runs.of(CAPPED)
    for tenant in (CAPPED, neighbour):
        shards = {split_job_id(r.job_id)[0] for r in runs.of(tenant)}
        assert shards == {home}, f"{tenant}'s jobs ran from shards {shards}, not {home} alone"
        assert most_at_once(runs.of(tenant)) == CAP, f"{tenant} ran {most_at_once(runs.of(tenant))} at once"
    assert len({split_job_id(r.job_id)[0] for r in runs.of(*others)}) > 1, "the others' jobs spread over shards"
    assert len({r.pid for r in capped}) > 1, "more than one worker ran the capped tenant's jobs"
    print(f"\nthe capped tenant's {len(capped)} jobs: shard {home}, {len({r.pid for r in capped})} workers, "
          f"at most {most_at_once(capped)} at once; the whole fleet at most {most_at_once(runs.read())}")
