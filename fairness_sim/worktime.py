"""Worker time in a simulated run: busy seconds per class and tenant, and each tenant's fair share.

Why worker time and not job counts: a scheduler that shares jobs fairly still hands a tenant of
20 s jobs a hundred times the workers a tenant of 0.2 s jobs gets. Under ``scheduler.charge:
runtime`` the shares are meant to be shares of worker time, so that is what a run is judged by.

A tenant's fair share of its class's worker time is the max-min one: the tenants that had jobs
waiting at every scrape of the run (backlogged throughout: they could always have used more)
divide what the others left by their tiers' weights; a tenant that was not always waiting got what
it asked for and has no fair share to miss.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class WorkerTime:
    """Accumulates busy worker milliseconds, and the tenants backlogged at every scrape so far."""

    ms: dict[str, Counter[str]] = field(default_factory=dict)  # class -> tenant -> busy ms
    jobs: dict[str, Counter[str]] = field(default_factory=dict)  # class -> tenant -> jobs worked to the end
    backlogged: dict[str, set[str]] = field(default_factory=dict)  # class -> tenants waiting at every scrape

    def add(self, queue: str, tenant: str, ms: int, *, finished: bool = True) -> None:
        """``ms`` of a slot's time on a job of ``tenant``, ``finished`` or cut short by a crash."""
        self.ms.setdefault(queue, Counter())[tenant] += ms
        if finished:
            self.jobs.setdefault(queue, Counter())[tenant] += 1

    def scrape(self, queue: str, waiting: Iterable[str]) -> None:
        """The tenants with jobs waiting in ``queue`` at a scrape."""
        seen = self.backlogged.get(queue)
        self.backlogged[queue] = set(waiting) if seen is None else seen.intersection(waiting)

    def result(self, weights: Mapping[str, float]) -> WorkerTimeResult:
        """The run's figures; ``weights``: tenant -> its tier's weight."""
        return WorkerTimeResult(
            seconds={q: {t: ms / 1000.0 for t, ms in tenants.items()} for q, tenants in self.ms.items()},
            backlogged={q: tuple(sorted(tenants)) for q, tenants in self.backlogged.items()},
            weights=dict(weights))


@dataclass(frozen=True)
class TenantTime:
    tenant: str
    seconds: float
    share: float  # of the class's worker time
    fair_share: float | None  # None: not backlogged throughout


@dataclass(frozen=True)
class WorkerTimeResult:
    seconds: dict[str, dict[str, float]]  # class -> tenant -> busy seconds
    backlogged: dict[str, tuple[str, ...]]  # class -> tenants with jobs waiting at every scrape
    weights: dict[str, float]  # tenant -> its tier's weight

    def total(self, queue: str | None = None) -> float:
        """Busy seconds of ``queue`` (None: of every class)."""
        classes = self.seconds.values() if queue is None else [self.seconds.get(queue, {})]
        return sum(sum(tenants.values()) for tenants in classes)

    def class_share(self, queue: str) -> float:
        """``queue``'s share of all worker time."""
        total = self.total()
        return self.total(queue) / total if total else 0.0

    def tenants(self, queue: str) -> list[TenantTime]:
        """The class's tenants, the heaviest first, with their share and fair share."""
        backlogged = self.backlogged.get(queue, ())
        waiting = set(backlogged)
        seconds = {t: 0.0 for t in backlogged} | self.seconds.get(queue, {})  # a starved tenant has none
        total = sum(seconds.values())
        left = 1.0 - sum(s for t, s in seconds.items() if t not in waiting) / total if total else 1.0
        weight = sum(self.weights.get(t, 1.0) for t in backlogged)
        fair = {t: left * self.weights.get(t, 1.0) / weight for t in backlogged}
        rows = [TenantTime(t, s, s / total if total else 0.0, fair.get(t)) for t, s in seconds.items()]
        return sorted(rows, key=lambda row: (-row.seconds, row.tenant))

    def tenant(self, queue: str, tenant: str) -> TenantTime:
        return next((row for row in self.tenants(queue) if row.tenant == tenant), TenantTime(tenant, 0.0, 0.0, None))

    def furthest_from_fair(self, queue: str) -> TenantTime | None:
        """The backlogged tenant whose share is furthest from its fair share (None: none backlogged)."""
        rows = [row for row in self.tenants(queue) if row.fair_share is not None]
        return max(rows, key=lambda row: abs(row.share - (row.fair_share or 0.0)), default=None)
