"""How late a drill's live stack can fire an alert, measured on the machine at hand, and the speed
that leaves the scenario's deadlines room for it.

Live, an alert fires later than in the simulation for reasons the simulation does not model: the
load generator may queue a job late; an exporter's reading waits for the next scrape (Prometheus
stamps it with the scrape's start); the reading waits for the next rule evaluation; and a ``for:``
that runs out between evaluations waits for the one after. Each of those gaps is read back from
Prometheus's own samples (one ``up`` sample per scrape, one sample of a recording rule per
evaluation), so a busy machine's late scrapes and skipped evaluations count and an idle one's are
not assumed. Their sum is the pipeline's delay in real seconds; times the speed, it is the drill's
resolution in scenario time, within which the live firings are held to the simulation's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

from alerts import recording as rec
from fairness_core.ages import human

from .alert_evaluation import FiredAlert
from .prometheus_query import Samples, raw_samples
from .scenario import AlertMatch, Expectation

# The share of a deadline's room the resolution may take when the speed is chosen: the warm-up is
# measured before the replay loads the machine, which adds to every gap.
ROOM_USED = 0.8


@dataclass(frozen=True)
class PipelineDelay:
    """The live pipeline's worst gaps over a stretch of a drill (real seconds)."""

    scrape_gap_s: float  # between two successful scrapes of an exporter
    scrape_s: float  # one scrape
    evaluation_gap_s: float  # between two evaluations of the rules
    load_lag_s: float = 0.0  # how far the load generator ran behind its schedule
    failed_scrapes: int = 0
    delivery_s: float | None = None  # from firing to the webhook's receipt (None: not measured)

    @property
    def real_s(self) -> float:
        """The longest a condition true in Redis can take to fire past its ``for:``: queued late,
        then a scrape, an evaluation, and one more evaluation for the ``for:``."""
        return self.load_lag_s + self.scrape_gap_s + self.scrape_s + 2 * self.evaluation_gap_s

    def __str__(self) -> str:
        failed = f"{self.failed_scrapes} failed scrape(s)" if self.failed_scrapes else "no failed scrape"
        delivered = "" if self.delivery_s is None else f"; Alertmanager delivered within {self.delivery_s:.2f}s"
        return (f"{self.real_s:.2f}s: scrapes at most {self.scrape_gap_s:.2f}s apart and {self.scrape_s:.2f}s long, "
                f"rules evaluated at most {self.evaluation_gap_s:.2f}s apart (once for the reading, once for "
                f"for:), the load generator at most {self.load_lag_s:.2f}s behind, {failed}{delivered}")


def _longest_gap(samples: Samples, least: float) -> float:
    times = [t for t, _ in samples]
    return max([least, *(b - a for a, b in pairwise(times))])


def measure(prometheus_url: str, job: str, start: float, end: float, *, interval: float, load_lag_s: float = 0.0,
            delivery_s: float | None = None) -> PipelineDelay:
    """The pipeline's gaps between ``start`` and ``end`` (epoch s), from what Prometheus stored:
    the exporters of ``job`` (``interval``: the configured scrape and evaluation interval, the
    least any gap can be)."""
    ups = raw_samples(prometheus_url, f'up{{job="{job}"}}', start, end)
    scrapes = raw_samples(prometheus_url, f'scrape_duration_seconds{{job="{job}"}}', start, end)
    evaluations = raw_samples(prometheus_url, rec.PAUSED, start, end)  # one per class, recorded at every evaluation
    return PipelineDelay(
        scrape_gap_s=max((_longest_gap([s for s in samples if s[1] == 1], interval) for _, samples in ups),
                         default=interval),
        scrape_s=max((v for _, samples in scrapes for _, v in samples), default=0.0),
        evaluation_gap_s=max((_longest_gap(samples, interval) for _, samples in evaluations), default=interval),
        load_lag_s=load_lag_s,
        failed_scrapes=sum(1 for _, samples in ups for _, v in samples if v == 0),
        delivery_s=delivery_s)


@dataclass(frozen=True)
class Room:
    """The least time a scenario's deadlines leave after the simulation's firings."""

    seconds: float
    alert: str  # the expectation that leaves the least
    simulated_s: float
    before_s: float

    def __str__(self) -> str:
        return f"{self.alert} (simulated at {human(self.simulated_s)}, expected within {human(self.before_s)})"


class Seen(Protocol):
    """An alert as a run saw it: a simulated one, or one of a drill's timeline."""

    @property
    def alert(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def first_firing_s(self) -> float | None: ...


def first_firing(want: AlertMatch, seen: Iterable[Seen]) -> float | None:
    """The earliest first firing (s) of the alerts ``want`` matches; None when none fired."""
    return min((a.first_firing_s for a in seen if a.first_firing_s is not None and want.matches(a.alert, a.labels)),
               default=None)


def room(expectation: Expectation | None, predicted: Iterable[FiredAlert], until: float) -> Room | None:
    """The room between each alert the scenario wants fired before a deadline within the first
    ``until`` seconds and its simulated first firing, at its least; None when no deadline applies
    (or the simulation itself misses every one: then no speed makes the drill pass, and none should)."""
    fired = list(predicted)
    best: Room | None = None
    for want in expectation.fire if expectation is not None else ():
        simulated = first_firing(want, fired)
        if want.before is None or want.before > until or simulated is None or simulated > want.before:
            continue
        left = want.before - simulated
        if best is None or left < best.seconds:
            best = Room(left, str(want), simulated, want.before)
    return best


def workable_speed(delay_real_s: float, speed: float, deadlines: Room | None) -> float | None:
    """None when ``speed`` keeps the resolution within its share of the deadlines' room; else the
    fastest whole speed that does (at least 1)."""
    if deadlines is None or delay_real_s * speed <= ROOM_USED * deadlines.seconds:
        return None
    return float(max(1, math.floor(ROOM_USED * deadlines.seconds / delay_real_s)))


def longest(periods: Sequence[tuple[float, float]]) -> float | None:
    """The longest of some periods (s); None when there are none."""
    return max((b - a for a, b in periods), default=None)
