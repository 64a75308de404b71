"""Charging by runtime against a real redis-server, worked by ``fairctl worker`` processes whose
handlers sleep for a set time per job, as real handlers take time (the workers time each one and
report it with the ack).

Each proof runs under ``scheduler.charge: runtime`` and, as the counter-proof that the same check
can fail, under ``charge: jobs``, where job counts are shared and worker time is far off the
weights whenever job lengths differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from fairness_core import Queue
from fairness_stack.servers import RedisServer

from .support import fleet, wait_for, write_config

WORKERS, SLOTS = 2, 4  # fairctl worker processes, and --concurrency of each
INTERACTIVE_S, BULK_S = 0.005, 0.050  # job lengths 10x apart
WEIGHTS = {"jobs:high": 70, "jobs:medium": 20, "jobs:low": 10}
# No reserved slots (every slot serves every class, so the weights alone decide).
CLASSES = [{"name": name, "weight": weight, "max_age": "1h"} for name, weight in WEIGHTS.items()]
# Per class: a task the example config classifies there, and how long each of its jobs takes.
CLASS_WORK = {"jobs:high": ("password_reset", INTERACTIVE_S), "jobs:medium": ("sync_contacts", 0.020),
              "jobs:low": ("newsletter", BULK_S)}
TENANTS_PER_CLASS = 3
# Per class, comfortably more jobs than either basis serves it before the runs below stop, so
# every class stays backlogged: under runtime 10,000 jobs are ~92% jobs:high, ~7% medium, ~1% low.
QUEUED = {"jobs:high": 10_500, "jobs:medium": 1_000, "jobs:low": 450}


def configured(redis_server: RedisServer, client: redis.Redis, tmp_path: Path, charge: str) -> tuple[Path, Queue]:
    """The example config under ``charge`` with CLASSES and no arrival budget (the mixes below are
    no realistic arrival mix, and demotions would move jobs between the classes measured)."""
    path, config = write_config(tmp_path, redis_server.url, classes=CLASSES,
                                scheduler={"charge": charge, "budget_min_arrivals": 10**9})
    return path, Queue(config, client)


def counters(scheduler: Queue, name: str) -> dict[str, int]:
    """A stats counter of each class, e.g. ``worktime``: µs of reported runtimes of its settled jobs."""
    return {c: view.counters[name] for c, view in scheduler.snapshot().classes.items()}


@pytest.mark.parametrize("charge, jobs, tolerance", [("runtime", 10_000, 0.02), ("jobs", 2_000, None)])
def test_class_shares_of_worker_time_follow_the_weights(redis_server: RedisServer, client: redis.Redis,
                                                        tmp_path: Path, charge: str, jobs: int,
                                                        tolerance: float | None) -> None:
    """Three backlogged classes of jobs 5, 20 and 50 ms long, weights 70/20/10, weighted-fair, the
    drills' sleep handlers: under runtime each class gets its weight's share of worker time (the
    stats counter ``worktime``) over the jobs after a warm-up fifth; under jobs the shares of jobs
    are 70/20/10 and those of time far off (about 28/32/40)."""
    path, scheduler = configured(redis_server, client, tmp_path, charge)
    for name, (task, seconds) in CLASS_WORK.items():
        per = QUEUED[name] // TENANTS_PER_CLASS
        for t in range(TENANTS_PER_CLASS):
            scheduler.submit_many(task, f"{name}-tenant-{t}", [{"service_s": seconds}] * per)

    def done() -> int:
        return sum(counters(scheduler, "processed").values())

    with fleet(path, tmp_path, redis_server.url, f"{path.stem}:unused", WORKERS, SLOTS,
               handlers="fairctl.handlers:sleep_handlers"):
        wait_for(lambda: done() >= jobs // 5, 120, f"{jobs // 5} jobs done (the warm-up)")
        before = counters(scheduler, "worktime")
        wait_for(lambda: done() >= jobs, 300, f"{jobs} jobs done")
        after = counters(scheduler, "worktime")
        depth = {name: view.depth for name, view in scheduler.snapshot().classes.items()}
    assert all(depth[name] > 0 for name in WEIGHTS), f"a class ran dry, so the window is not all backlogged: {depth}"
    spent = {name: after[name] - before[name] for name in WEIGHTS}
    shares = {name: spent[name] / sum(spent.values()) for name in WEIGHTS}
    off = max(abs(shares[name] - weight / 100) for name, weight in WEIGHTS.items())
    seen = ", ".join(f"{name} {share:.1%}" for name, share in shares.items())
    if tolerance is not None:
        assert off <= tolerance, f"shares of worker time {seen}, weights 70/20/10"
    else:
        assert off > 0.2, f"under charge: jobs the shares of worker time were expected far off: {seen}"


class Runs:
    """What tests/recording_handlers.py's ``timed`` handlers recorded: (tenant, seconds the job
    took) in the order the jobs finished, read on as the list grows."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key
        self.seen: list[tuple[str, float]] = []

    def read(self) -> list[tuple[str, float]]:
        for raw in self.client.lrange(self.key, len(self.seen), -1):
            tenant, seconds = raw.decode().split("\t")
            self.seen.append((tenant, float(seconds)))
        return self.seen

    def of(self, tenant: str) -> int:
        return sum(1 for t, _ in self.read() if t == tenant)


CHANGER, STEADY = "changing", ("steady-1", "steady-2")
CHANGE_AT = 100  # the changing tenant's first jobs take INTERACTIVE_S, the rest BULK_S
SETTLE, MEASURE = 200, 100  # its share is measured over its jobs CHANGE_AT+SETTLE+1 .. CHANGE_AT+SETTLE+MEASURE


@pytest.mark.parametrize("charge, tolerance", [("runtime", 0.05), ("jobs", None)])
def test_a_tenant_whose_jobs_turn_10x_longer_is_back_to_its_share_within_200_jobs(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, charge: str, tolerance: float | None) -> None:
    """Three backlogged tenants of one tier in one class, 5 ms jobs each, until one tenant's jobs
    (the same task) take 50 ms: under runtime its estimate follows, and from its 200th long job on
    it has its third of the worker time again (within 5 points); under jobs it takes 10 jobs' time
    per turn, some 83% of the time."""
    path, scheduler = configured(redis_server, client, tmp_path, charge)
    task = CLASS_WORK["jobs:medium"][0]
    changed = CHANGE_AT + SETTLE + MEASURE
    short: dict[str, Any] = {"service_s": INTERACTIVE_S}
    scheduler.submit_many(task, CHANGER, [short] * CHANGE_AT + [{"service_s": BULK_S}] * (changed + 50))
    steady_jobs = 3_600  # each: ~10 short jobs per long one of the changing tenant's, and a margin
    for tenant in STEADY:
        scheduler.submit_many(task, tenant, [short] * steady_jobs)
    runs = Runs(client, f"{scheduler.config.redis.prefix}:ran")
    with fleet(path, tmp_path, redis_server.url, runs.key, WORKERS, SLOTS, handlers="tests.recording_handlers:timed"):
        wait_for(lambda: runs.of(CHANGER) >= changed, 300, f"{changed} jobs of the changing tenant done")
    order = runs.read()
    ends = [i for i, (tenant, _) in enumerate(order) if tenant == CHANGER]
    window = order[ends[CHANGE_AT + SETTLE - 1] + 1: ends[changed - 1] + 1]
    for tenant in STEADY:
        assert runs.of(tenant) < steady_jobs, f"{tenant} ran dry, so the window is not all backlogged"
    share = sum(seconds for tenant, seconds in window if tenant == CHANGER) / sum(seconds for _, seconds in window)
    fair = 1 / (1 + len(STEADY))
    if tolerance is not None:
        assert abs(share - fair) <= tolerance, f"{share:.1%} of the worker time, fair share {fair:.1%}"
    else:
        assert share - fair > 0.3, f"under charge: jobs the share was expected far above {fair:.1%}: {share:.1%}"
