"""Charging by runtime against a real redis-server, with jobs worked by the worker loop that
``fairctl worker`` runs (fairness_core.worker.Worker, slot threads and all) and handlers that sleep
for a set time per job, as real handlers take time.

Each proof runs under ``scheduler.charge: runtime`` and, as the counter-proof that the same check
can fail, under ``charge: jobs``, where job counts are shared and worker time is far off the
weights whenever job lengths differ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from fairctl.handlers import sleep_for_service_time
from fairness_core import Finished, Lease, Scheduler
from fairness_core.jobs import Popped
from fairness_core.worker import HandlerRegistry, Worker

from .conftest import make_config
from .support import running, wait_for

INTERACTIVE_S, BULK_S = 0.005, 0.050  # job lengths 10x apart
SLOTS = 8  # worker slots (threads); few enough that jobs in flight blur a window little
WEIGHTS = {"jobs:high": 70, "jobs:medium": 20, "jobs:low": 10}
# Per class: a task the example config classifies there, and how long each of its jobs takes.
CLASS_WORK = {"jobs:high": ("password_reset", INTERACTIVE_S), "jobs:medium": ("sync_contacts", 0.020),
              "jobs:low": ("newsletter", BULK_S)}
TENANTS_PER_CLASS = 3
# Per class, comfortably more jobs than either basis serves it before the runs below stop, so
# every class stays backlogged: under runtime 10,000 jobs are ~92% jobs:high, ~7% medium, ~1% low.
QUEUED = {"jobs:high": 10_500, "jobs:medium": 1_000, "jobs:low": 450}


class ReportingScheduler(Scheduler):
    """The scheduler, reporting for each job acked without a runtime the one its handler measured.

    ``Worker`` acks plain leases (with its next pop, or alone on the way out), so nothing would be
    charged but the pop's estimate; this attaches what ``measured`` holds for the lease. An ack that
    already carries a runtime (a :class:`Finished`) goes through unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.measured: dict[tuple[str, int], float] = {}  # (job id, attempts) -> seconds its handler ran

    def _finished(self, done: Lease | Finished) -> Lease | Finished:
        if isinstance(done, Finished):
            return done
        runtime = self.measured.pop((done.job_id, done.attempts), None)
        return done if runtime is None else Finished(done, runtime)

    def ack_and_pop(self, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None) -> Popped:
        return super().ack_and_pop([self._finished(d) for d in done], max_jobs, classes=classes)

    def ack(self, lease: Lease, *, runtime: float | None = None) -> bool:
        if runtime is None:
            runtime = self.measured.pop((lease.job_id, lease.attempts), None)
        return super().ack(lease, runtime=runtime)


def timed_sleeps(scheduler: ReportingScheduler, finished: list[tuple[str, float]]) -> HandlerRegistry:
    """Handlers that sleep ``payload["service_s"]`` (the drills' sleep handler) and time themselves
    with a monotonic clock; ``finished`` gets (tenant, seconds) in the order the jobs finish."""
    def work(lease: Lease) -> None:
        started = time.monotonic()
        sleep_for_service_time(lease)
        runtime = time.monotonic() - started
        scheduler.measured[lease.job_id, lease.attempts] = runtime
        finished.append((lease.tenant, runtime))
    return HandlerRegistry(fallback=work)


def charged(client: redis.Redis, charge: str, **overrides: Any) -> ReportingScheduler:
    """The example config under ``charge``, with no arrival budget (the mix below is no realistic
    arrival mix, and demotions would move jobs between the classes measured) and no reserved slots
    (every slot serves every class, so the weights alone decide)."""
    classes = [{"name": name, "weight": weight, "max_age": "1h"} for name, weight in WEIGHTS.items()]
    config = make_config(scheduler={"charge": charge, "budget_min_arrivals": 10**9}, classes=classes, **overrides)
    return ReportingScheduler(config, client)


def worker(scheduler: Scheduler, handlers: HandlerRegistry) -> Worker:
    return Worker(scheduler, handlers, concurrency=SLOTS, grace=10, log_every=0)


def worktime(scheduler: Scheduler) -> dict[str, int]:
    """The stats counter ``worktime`` of each class: µs of reported runtimes of its settled jobs."""
    return {name: view.counters["worktime"] for name, view in scheduler.snapshot().classes.items()}


@pytest.mark.parametrize("charge, jobs, tolerance", [("runtime", 10_000, 0.02), ("jobs", 2_000, None)])
def test_class_shares_of_worker_time_follow_the_weights(client: redis.Redis, charge: str, jobs: int,
                                                        tolerance: float | None) -> None:
    """Three backlogged classes of jobs 5, 20 and 50 ms long, weights 70/20/10, weighted-fair: under
    runtime each class gets its weight's share of worker time (the stats counter ``worktime``) over
    the jobs after a warm-up fifth; under jobs the shares of jobs are 70/20/10 and those of time far
    off (about 28/32/40)."""
    scheduler = charged(client, charge)
    for name, (task, seconds) in CLASS_WORK.items():
        per = QUEUED[name] // TENANTS_PER_CLASS
        for t in range(TENANTS_PER_CLASS):
            scheduler.submit_many(task, f"{name}-tenant-{t}", [{"service_s": seconds}] * per)
    finished: list[tuple[str, float]] = []
    with running(worker(scheduler, timed_sleeps(scheduler, finished))):
        wait_for(lambda: len(finished) >= jobs // 5, 120, f"{jobs // 5} jobs done (the warm-up)")
        before = worktime(scheduler)
        wait_for(lambda: len(finished) >= jobs, 300, f"{jobs} jobs done")
        after = worktime(scheduler)
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


CHANGER, STEADY = "changing", ("steady-1", "steady-2")
CHANGE_AT = 100  # the changing tenant's first jobs take INTERACTIVE_S, the rest BULK_S
SETTLE, MEASURE = 200, 100  # its share is measured over its jobs CHANGE_AT+SETTLE+1 .. CHANGE_AT+SETTLE+MEASURE


@pytest.mark.parametrize("charge, tolerance", [("runtime", 0.05), ("jobs", None)])
def test_a_tenant_whose_jobs_turn_10x_longer_is_back_to_its_share_within_200_jobs(
        client: redis.Redis, charge: str, tolerance: float | None) -> None:
    """Three backlogged tenants of one tier in one class, 5 ms jobs each, until one tenant's jobs
    (the same task) take 50 ms: under runtime its estimate follows, and from its 200th long job on
    it has its third of the worker time again (within 5 points); under jobs it takes 10 jobs' time
    per turn, some 83% of the time."""
    scheduler = charged(client, charge)
    task = CLASS_WORK["jobs:medium"][0]
    changed = CHANGE_AT + SETTLE + MEASURE
    short, long = {"service_s": INTERACTIVE_S}, {"service_s": BULK_S}
    scheduler.submit_many(task, CHANGER, [short] * CHANGE_AT + [long] * (changed + 50))
    steady_jobs = 3_600  # each: ~10 short jobs per long one of the changing tenant's, and a margin
    for tenant in STEADY:
        scheduler.submit_many(task, tenant, [short] * steady_jobs)
    finished: list[tuple[str, float]] = []

    def changer_done() -> int:
        return sum(1 for tenant, _ in list(finished) if tenant == CHANGER)

    with running(worker(scheduler, timed_sleeps(scheduler, finished))):
        wait_for(lambda: changer_done() >= changed, 300, f"{changed} jobs of the changing tenant done")
    order = list(finished)
    ends = [i for i, (tenant, _) in enumerate(order) if tenant == CHANGER]
    window = order[ends[CHANGE_AT + SETTLE - 1] + 1: ends[changed - 1] + 1]
    for tenant in STEADY:
        served = sum(1 for t, _ in order if t == tenant)
        assert served < steady_jobs, f"{tenant} ran dry, so the window is not all backlogged"
    total = sum(seconds for _, seconds in window)
    share = sum(seconds for tenant, seconds in window if tenant == CHANGER) / total
    fair = 1 / (1 + len(STEADY))
    if tolerance is not None:
        assert abs(share - fair) <= tolerance, f"{share:.1%} of the worker time, fair share {fair:.1%}"
    else:
        assert share - fair > 0.3, f"under charge: jobs the share was expected far above {fair:.1%}: {share:.1%}"
