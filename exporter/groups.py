"""One exporter for several queue groups (``fairctl exporter --config a.yaml --config b.yaml``).

Each group keeps its own collector, Redis client and scrape budget; a scrape reads them all at
once, so it takes about one group's time, not their sum, and a group whose Redis is away answers
``fairness_exporter_redis_up{group=...} 0`` without holding up the others. Their families are
merged by name, so the exposition has one HELP and TYPE per metric whose samples every group
adds to, told apart by their ``group`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class GroupsCollector(Collector):
    def __init__(self, collectors: Sequence[Collector]) -> None:
        self.collectors = tuple(collectors)
        self._pool = ThreadPoolExecutor(max_workers=len(self.collectors), thread_name_prefix="exporter-group")

    def describe(self) -> Iterator[Metric]:
        return iter(merged(list(c.describe()) for c in self.collectors))

    def collect(self) -> Iterator[Metric]:
        return iter(merged(self._pool.map(lambda c: list(c.collect()), self.collectors)))


def merged(groups: Iterable[list[Metric]]) -> list[Metric]:
    """The groups' families as one list: a family of a name seen before adds its samples to it."""
    out: dict[str, Metric] = {}
    for families in groups:
        for family in families:
            if family.name in out:
                out[family.name].samples.extend(family.samples)
            else:
                out[family.name] = family
    return list(out.values())

