"""Job starts per second of chosen tenants in a simulated run: what their downstream receives.

Why starts and not waits or shares: a tenant's ``dispatch_rate`` and ``max_in_flight`` protect what
its jobs call (its webhook endpoint, its own API), and that endpoint sees every start, redeliveries
included, one clock second at a time. A run tells, for each tenant a ``tenants.overrides`` entry
limits in some config of the scenario (or that an ``expect`` names), its starts in every second of
the run, the most of its jobs running at once, and the waits of every other tenant's jobs beside it:
so a run with the limit compares with one without it, the downstream's side and the neighbours'.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairness_core.config import Config


@dataclass(frozen=True)
class TenantStarts:
    """One tenant's starts in a run: ``per_second[k]`` jobs leased in second k of the run."""

    per_second: tuple[int, ...]
    peak_in_flight: int  # the most of its jobs worked at once
    limit: str | None  # the run's dispatch limits on it, as the config in force at the end states them (None: none)

    @property
    def started(self) -> int:
        return sum(self.per_second)

    @property
    def peak(self) -> int:
        """The most jobs it started in one second of the clock."""
        return max(self.per_second, default=0)

    @property
    def span_s(self) -> int:
        """Seconds from its first start's second to its last's, both included (0: it started none)."""
        busy = [k for k, n in enumerate(self.per_second) if n]
        return busy[-1] - busy[0] + 1 if busy else 0

    @property
    def mean_rate(self) -> float:
        """Its jobs started per second over :attr:`span_s`."""
        return self.started / self.span_s if self.span_s else 0.0

    def over(self, rate: float) -> tuple[int, int]:
        """The seconds in which it started more than ``rate`` jobs, and the starts beyond ``rate`` in them."""
        above = [n - rate for n in self.per_second if n > rate]
        return len(above), math.ceil(sum(above))


@dataclass(frozen=True)
class StartFigures:
    """The watched tenants' starts, and the first-lease waits of every other tenant's jobs."""

    tenants: dict[str, TenantStarts]
    others: int  # other tenants that sent jobs
    others_wait_p95_s: float | None  # None: none of their jobs started
    others_wait_p99_s: float | None


def dispatch_limits(config: Config, tenant: str, tier: str) -> str | None:
    """The dispatch limits ``config`` holds ``tenant`` (of ``tier``) to, as its fields read
    (``dispatch_rate 5/s, burst 1, max_in_flight 5``; None: none). Only weighted-fair holds."""
    if config.scheduler.policy != "weighted-fair":
        return None
    tenants = config.tenants
    parts = []
    rate = tenants.limit_for(tier, "dispatch_rate", tenant)
    if rate:
        parts.append(f"dispatch_rate {rate:g}/s, burst {tenants.limit_for(tier, 'dispatch_burst', tenant) or 1}")
    cap = tenants.limit_for(tier, "max_in_flight", tenant)
    if cap:
        parts.append(f"max_in_flight {cap}")
    return ", ".join(parts) or None


def _percentile(ordered: Sequence[int], q: float) -> int:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class StartCounter:
    """Counts the watched tenants' starts and jobs in flight, and the other tenants' waits."""

    def __init__(self, tenants: Iterable[str], duration_s: float) -> None:
        seconds = math.ceil(duration_s) + 1
        self.per_second = {t: array("l", [0]) * seconds for t in tenants}
        self.in_flight = dict.fromkeys(self.per_second, 0)
        self.peak_in_flight = dict.fromkeys(self.per_second, 0)
        self.others: set[str] = set()
        self.other_waits = array("q")

    def __bool__(self) -> bool:
        return bool(self.per_second)

    def start(self, now_ms: int, tenant: str, wait_ms: int | None) -> None:
        """A lease of ``tenant``'s job at ``now_ms``; ``wait_ms``: its enqueue-to-start wait on its
        first lease (None: a redelivery)."""
        counts = self.per_second.get(tenant)
        if counts is None:
            self.others.add(tenant)
            if wait_ms is not None:
                self.other_waits.append(wait_ms)
            return
        counts[now_ms // 1000] += 1
        running = self.in_flight[tenant] = self.in_flight[tenant] + 1
        self.peak_in_flight[tenant] = max(self.peak_in_flight[tenant], running)

    def stop(self, tenant: str) -> None:
        """A job of ``tenant`` no longer worked (done, or its slot died)."""
        if tenant in self.in_flight:
            self.in_flight[tenant] -= 1

    def result(self, limits: dict[str, str | None]) -> StartFigures:
        """The run's figures; ``limits``: each watched tenant's dispatch limits in the run."""
        waits = sorted(self.other_waits)
        return StartFigures(
            tenants={t: TenantStarts(tuple(counts), self.peak_in_flight[t], limits.get(t))
                     for t, counts in self.per_second.items()},
            others=len(self.others),
            others_wait_p95_s=_percentile(waits, 0.95) / 1000.0 if waits else None,
            others_wait_p99_s=_percentile(waits, 0.99) / 1000.0 if waits else None)
