"""A scenario's arrivals, stream by stream, in scenario time: what the simulator and the live
load generator both replay, so ``fairctl simulate`` and ``fairctl drill`` see the same traffic.

Each stream draws from its own generator seeded ``"{seed}:arrivals:{i}"`` (gaps, then the
tenant of each arrival), and service times from ``"{seed}:service:{i}"``: the same seed gives the
same jobs, at the same times, for the same tenants, in both. A ``backlog`` stream is the
exception: only its first jobs are arrivals here, the rest arrive as the simulated scheduler
starts jobs, so only the simulator replays it.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .scenario import Backlog, Burst, Poisson, Scenario, Service, Stream, TenantPool


@dataclass(frozen=True)
class Arrival:
    """Jobs of one stream arriving at one instant: ``tenants`` is (tenant, jobs) pairs."""

    at: float  # scenario seconds
    stream: int
    tenants: tuple[tuple[str, int], ...]


def service_sampler(service: Service, rng: random.Random) -> Callable[[], float]:
    """Service time in seconds from the stream's distribution."""
    if service.kind == "constant":
        return lambda: service.a
    if service.kind == "exponential":
        rate = 1.0 / service.a
        return lambda: rng.expovariate(rate)
    mu = math.log(service.a)
    return lambda: rng.lognormvariate(mu, service.b)


def service_samplers(scenario: Scenario) -> list[Callable[[], float]]:
    """One service-time sampler per stream, seeded from the scenario."""
    return [service_sampler(s.service, random.Random(f"{scenario.seed}:service:{i}"))
            for i, s in enumerate(scenario.streams)]


def stream_arrivals(scenario: Scenario, index: int, end_s: float) -> Iterator[Arrival]:
    """Stream ``index``'s arrivals up to ``end_s``, in order."""
    stream = scenario.streams[index]
    rng = random.Random(f"{scenario.seed}:arrivals:{index}")

    def tenant() -> str:
        pool = stream.tenant
        return f"{pool.prefix}{rng.randrange(pool.size)}" if isinstance(pool, TenantPool) else pool

    arrivals = stream.arrivals
    if isinstance(arrivals, Backlog):  # the first jobs only: the simulator tops them up as they start
        if _open(stream, stream.start, end_s):
            yield Arrival(stream.start, index, tuple((t, arrivals.queued) for t in stream_tenants(stream)))
        return
    if isinstance(arrivals, Burst):
        if arrivals.at <= end_s:
            if isinstance(stream.tenant, TenantPool):
                counts = Counter(tenant() for _ in range(arrivals.count))
            else:
                counts = Counter({stream.tenant: arrivals.count})
            yield Arrival(arrivals.at, index, tuple(counts.items()))
        return
    at: float | None = None
    while True:
        if isinstance(arrivals, Poisson):
            at = (stream.start if at is None else at) + rng.expovariate(arrivals.rate_per_s)
        else:
            at = stream.start if at is None else at + 1.0 / arrivals.rate_per_s
        if not _open(stream, at, end_s):
            return
        yield Arrival(at, index, ((tenant(), 1),))


def stream_tenants(stream: Stream) -> list[str]:
    """Every tenant a stream can send jobs for."""
    pool = stream.tenant
    return [f"{pool.prefix}{k}" for k in range(pool.size)] if isinstance(pool, TenantPool) else [pool]


def _open(stream: Stream, at: float, end_s: float) -> bool:
    return (stream.stop is None or at < stream.stop) and at * 1000 <= int(end_s * 1000)


def all_arrivals(scenario: Scenario, end_s: float) -> Iterator[Arrival]:
    """Every stream's arrivals up to ``end_s``, merged in time order."""
    return heapq.merge(*(stream_arrivals(scenario, i, end_s) for i in range(len(scenario.streams))),
                       key=lambda a: a.at)
