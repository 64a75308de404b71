"""The bookkeeping the scheduler maintains, read back in one round trip (what the exporter serves).

Both the Redis scheduler and the reference model keep their counters in the same flat form
(``"<counter>\\t<class>"`` -> int), so one builder turns either into a :class:`Snapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .config import Config

# Upper bounds (seconds) of the enqueue->first-lease wait histogram; the documents' SLOs
# (60 s, 15 min, 1 h) are bucket edges so alerts can read them exactly. The last bucket is +Inf.
WAIT_BUCKETS_S: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400,
)

# Per-class lifecycle counters kept by the scripts (stats field "<name>\t<class>").
COUNTERS = ("processed", "failed", "redelivered", "dead", "promoted", "demoted", "rejected")


@dataclass(frozen=True)
class ClassSnapshot:
    name: str
    depth: int
    inflight: int
    delayed: int
    paused: bool
    oldest_age: float
    active_tenants: int
    counters: Mapping[str, int]
    enqueued: Mapping[str, int]
    wait_buckets: tuple[int, ...]
    wait_sum: float
    wait_count: int
    top_backlog: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Snapshot:
    time: float
    classes: Mapping[str, ClassSnapshot]
    dead_letters: int
    worker_slots: int


@dataclass(frozen=True)
class ClassView:
    """What a reader found for one class besides the counters."""

    head_ms: float | None
    active_tenants: int
    top_backlog: Iterable[tuple[str, int]]


def build_snapshot(
    config: Config,
    now_ms: float,
    stats: Mapping[str, int],
    paused: Iterable[str],
    views: Mapping[str, ClassView],
    dead_letters: int,
) -> Snapshot:
    paused_set = set(paused)
    enqueued: dict[str, dict[str, int]] = {c: {} for c in config.class_names}
    for field, value in stats.items():
        parts = field.split("\t")
        if parts[0] == "enq" and parts[1] in enqueued:
            enqueued[parts[1]][parts[2]] = int(value)
    classes = {}
    for name in config.class_names:
        view = views[name]

        def get(counter: str, _name: str = name) -> int:
            return int(stats.get(f"{counter}\t{_name}", 0))

        buckets = tuple(int(stats.get(f"wb\t{name}\t{i + 1}", 0)) for i in range(len(WAIT_BUCKETS_S) + 1))
        classes[name] = ClassSnapshot(
            name=name,
            depth=get("depth"),
            inflight=get("inflight"),
            delayed=get("delayed"),
            paused=name in paused_set,
            oldest_age=max(0.0, (now_ms - view.head_ms) / 1000.0) if view.head_ms is not None else 0.0,
            active_tenants=view.active_tenants,
            counters={c: get(c) for c in COUNTERS},
            enqueued=enqueued[name],
            wait_buckets=buckets,
            wait_sum=get("ws") / 1000.0,
            wait_count=get("wc"),
            top_backlog=tuple((t, int(n)) for t, n in view.top_backlog),
        )
    return Snapshot(time=now_ms / 1000.0, classes=classes, dead_letters=dead_letters,
                    worker_slots=int(stats.get("slots", 0)))
