"""What the exporter reads from a job system it does not run (Celery, RQ, BullMQ, Sidekiq).

Each system is one small module with one :class:`Source`: it reads the system's own keys in that
system's Redis, read-only, with a bounded number of commands per scrape (they grow with the
classes, their queues and the tenant sample, never with the jobs), and turns them into one
:class:`ClassReading` per class of the config. What a system cannot tell (Celery's broker keeps no
enqueue time and no completions) is ``None`` there, and the system's ``supplies`` says which
metrics of the contract it serves, so the exporter, the rules and the dashboards leave the others
out rather than serve a zero that means "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import redis

from .watching import QueueRef, WatchConfig

__all__ = ["ClassReading", "QueueRef", "Source", "per_queue_sample", "tenant_of", "top_tenants"]


@dataclass(frozen=True)
class ClassReading:
    """One class at one scrape: the sum over its queues."""

    depth: int  # jobs waiting, exact at the moment of the read
    oldest_enqueued: float | None  # epoch seconds the oldest waiting job was enqueued (None: none waiting)
    inflight: int | None  # jobs started and not finished (None: the system keeps no record of them)
    processed: int | None  # jobs finished so far, a counter kept by the reader (None: not known)
    tenants: tuple[tuple[str, int], ...]  # (tenant, jobs) among the waiting jobs sampled, most first


class Source(Protocol):
    """A job system's reader for the classes of one config's ``watch`` section (built from it)."""

    kind: ClassVar[str]  # the ``watch.system`` value naming it
    has_priorities: ClassVar[bool]  # whether a class may take some of a queue's priorities (watch.classes)
    tenant_roots: ClassVar[tuple[str, ...]]  # where its jobs keep their arguments: a watch.tenant path's first step
    supplies: ClassVar[frozenset[str]]  # names of the contract's metrics (exporter.metrics) it serves

    def __init__(self, watch: WatchConfig) -> None: ...

    def read(self, client: redis.Redis, now: float) -> Mapping[str, ClassReading]:
        """One reading per class, in config order. Never writes; commands bounded as above."""
        ...


def tenant_of(arguments: Any, path: tuple[str, ...]) -> str | None:
    """The tenant a job's decoded arguments hold at ``path`` (``("kwargs", "tenant_id")``,
    ``("args", "0")``): mapping keys and list indices in turn; None where the path leads nowhere
    or to a mapping or list. Numbers and other scalars read as their text."""
    value = arguments
    for step in path:
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    if value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else str(value)


def top_tenants(tenants: list[str | None]) -> tuple[tuple[str, int], ...]:
    """The sampled jobs' tenants counted, most first (ties by name); jobs with none left out."""
    counts: dict[str, int] = {}
    for tenant in tenants:
        if tenant is not None:
            counts[tenant] = counts.get(tenant, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def per_queue_sample(queues: Mapping[str, tuple[str, ...]], watch: WatchConfig) -> dict[str, int]:
    """Jobs read per queue for the tenant sample: each class's ``watch.sample`` split among its
    queues (``queues``: a class's queue names), 0 without a tenant path (then only the job an age
    is read from)."""
    return {q: -(-watch.sample // len(names)) if watch.tenant is not None else 0
            for names in queues.values() for q in names}
