"""Queue pop+ack throughput against raw ``LPOP`` from the same Python client on the same Redis.

Raw ``LPOP`` of the same payloads is the physical floor of a Redis pop from Python: one round trip,
no decision, no lease. The scheduler's loop is the worker's: each call acks the jobs of the call
before and leases the next (``ack_and_pop``), one job per call or ``batch`` per call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import redis

from fairness_core import Finished, Lease, Queue

from .harness import rate, server_us
from .load import payload

CHUNK = 10_000  # elements per pipelined RPUSH when filling the raw list


def raw_lpop(client: redis.Redis, key: str, jobs: int) -> Callable[[], float]:
    """One run: fill a plain list with ``jobs`` payloads, then ``LPOP`` them one per call."""
    def run() -> float:
        client.delete(key)
        for first in range(0, jobs, CHUNK):
            client.rpush(key, *(json.dumps(payload(n), separators=(",", ":"))
                                for n in range(first, min(jobs, first + CHUNK))))
        return rate(jobs, lambda: [client.lpop(key) for _ in range(jobs)])
    return run


def refill(sched: Queue, tenants: int | Sequence[str], jobs: int) -> None:
    """Queue ``jobs`` jobs over ``tenants`` tenants (a count, or their ids), all in one class
    (jobs:medium)."""
    ids = [f"tenant-{t}" for t in range(tenants)] if isinstance(tenants, int) else tenants
    per = -(-jobs // len(ids))
    for tenant in ids:
        sched.submit_many("sync_contacts", tenant, [payload(n) for n in range(per)])


def ran_for(lease: Lease) -> float:
    """A runtime to report for a job: 1 to 10 ms by its payload, so a tenant's jobs differ and
    their acks under ``charge: runtime`` correct the estimate charged at the pop."""
    return 0.001 * (1 + lease.payload["user_id"] % 10)


def drain(sched: Queue, jobs: int, per_call: int, *, report: bool = False) -> None:
    """Pop and ack ``jobs`` jobs, ``per_call`` per call, each call acking the previous call's;
    with ``report``, each ack carries the job's runtime (:func:`ran_for`), as a worker's does."""
    def finished(leases: list[Lease]) -> list[Lease | Finished]:
        return [Finished(lease, ran_for(lease)) if report else lease for lease in leases]

    leases: list[Lease] = []
    left = jobs
    while left > 0:
        leases = sched.ack_and_pop(finished(leases), min(per_call, left)).leases
        if not leases:
            raise RuntimeError(f"the queue ran dry with {left} jobs still to pop")
        left -= len(leases)
    for lease in leases:
        sched.ack(lease, runtime=ran_for(lease) if report else None)


def pop_then_ack(sched: Queue, jobs: int) -> None:
    """The loop without acks riding on pops: two round trips per job."""
    for _ in range(jobs):
        for lease in sched.pop(1):
            sched.ack(lease)


def scheduler_run(sched: Queue, jobs: int, work: Callable[[Queue, int], None],
                  tenants: int | Sequence[str] | None = None) -> Callable[[], float]:
    """One run of ``work`` over ``jobs`` jobs; with ``tenants``, the queue is refilled first (a
    small state is drained by each run; the 100,000-tenant state is far larger than a run)."""
    def run() -> float:
        if tenants is not None:
            refill(sched, tenants, jobs)
        return rate(jobs, lambda: work(sched, jobs))
    return run


def script_us(client: redis.Redis, sched: Queue, tenants: int | Sequence[str], jobs: int, per_call: int, *,
              report: bool = False) -> float:
    """Mean microseconds Redis spends in the script per call of :func:`drain` (what limits it)."""
    refill(sched, tenants, jobs)
    return server_us(client, "fcall", lambda: drain(sched, jobs, per_call, report=report))
