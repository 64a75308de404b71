"""The weights lint: does every class's weight let it keep up with its expected load?

The rule of thumb: compute the share each class needs from its arrival rate and service time,
set weights so each class has at least that much, and give the surplus to the latency-sensitive
class. The formula used here, for a fleet of N worker slots (jobs run at once, ``alerts.worker_slots``):

* **needed**: class c keeps up when it gets ``rho_c = arrival_rate_c * service_time_c / N`` of
  the fleet's slot time (its utilisation of the whole fleet). Above 1 no weight can save it;
  the needs of all classes together above 1 mean the fleet itself is too small.
* **guaranteed**: a weight is a share of *pops*, not of time. When every class is backlogged,
  class c gets ``w_c / sum(w)`` of the jobs started, which occupy
  ``g_c = w_c * S_c / sum_i(w_i * S_i)`` of the slot time (S: service time). When some class has no
  ``service_time``, equal service times are assumed and ``g_c = w_c / sum(w)``.
* A class whose ``g_c < rho_c`` falls behind whenever the others are busy; the smallest weight
  that fixes it, the others unchanged, is ``rho_c * sum_(i != c)(w_i * S_i) / ((1 - rho_c) * S_c)``.
* Under ``scheduler.charge: runtime`` a weight is a share of worker *time* itself:
  ``g_c = w_c / sum(w)`` whatever the service times (the pops then split as ``w_c / S_c``), and
  the smallest weight is the formula above with every ``S`` equal.

Weights of zero cannot happen: the config refuses them (``classes[i].weight: must be > 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairness_core.config import Config

from .config import alert_settings


@dataclass(frozen=True)
class ClassNeed:
    index: int
    name: str
    weight: int
    weight_share: float  # of pops, every class backlogged (equal service times assumed when unknown)
    guaranteed: float  # of slot time, every class backlogged
    arrival_rate: float | None  # jobs/s
    service_time: float | None  # s
    needed: float | None  # of slot time, to keep up
    min_weight: int | None  # None: no figures, or no weight can do it
    reserved_slots: int = 0

    @property
    def short(self) -> bool:
        return self.needed is not None and self.guaranteed < self.needed


@dataclass(frozen=True)
class WeightsReport:
    slots: int | None
    equal_service_times: bool
    classes: tuple[ClassNeed, ...]
    by_runtime: bool = False  # scheduler.charge: runtime, the weights share out worker time

    def warnings(self) -> list[str]:
        """One line per problem, naming the config field to change."""
        has_load = any(c.arrival_rate is not None for c in self.classes)
        if has_load and self.slots is None:
            return [("classes have arrival_rate and service_time but the fleet's size is unknown: "
                     "set alerts.worker_slots (or pass --slots) to check the weights against the load")]
        out = []
        total = sum(c.needed or 0 for c in self.classes)
        if total > 1:
            out.append(f"the classes need {total:.0%} of the fleet's {self.slots} slots together: "
                       "no weights can keep up; add workers (alerts.worker_slots)")
        out += self._reservation_warnings()
        for c in self.classes:
            if not c.short:
                continue
            fix = (f"raise it to at least {c.min_weight}" if c.min_weight is not None
                   else "it needs more than the whole fleet: add workers")
            out.append(f"classes[{c.index}].weight: {c.name} needs {c.needed:.1%} of the slot time to keep up "
                       f"({c.arrival_rate:.3g}/s x {c.service_time:.3g}s / {self.slots} slots), its weight {c.weight} "
                       f"guarantees {c.guaranteed:.1%} when every class is backlogged; {fix}")
        return out

    def _reservation_warnings(self) -> list[str]:
        """Reservations the fleet cannot hold: a worker serving every class keeps the unmet
        reservations of the other classes free, so once they add up to the fleet a class without
        one never runs there (the script's ``capacity``)."""
        if not self.slots:
            return []
        out = [f"classes[{c.index}].reserved_slots: {c.name} reserves {c.reserved_slots} slots, more than the "
               f"fleet's {self.slots} (alerts.worker_slots)" for c in self.classes if c.reserved_slots > self.slots]
        reserving = [c for c in self.classes if c.reserved_slots]
        total = sum(c.reserved_slots for c in reserving)
        if total >= self.slots:
            left = [c.name for c in self.classes if not c.reserved_slots]
            starved = f"{', '.join(left)} (no reservation) run none" if left else "the others wait"
            out.append(f"{' + '.join(f'classes[{c.index}].reserved_slots' for c in reserving)}: the classes "
                       f"reserve {total} slots together, the fleet's {self.slots} or more: while a reservation is "
                       f"unmet, the classes below theirs take every free slot and {starved}")
        return out


def _min_weight(needed: float, own_time: float, others: float) -> int | None:
    if needed >= 1:
        return None
    return max(1, math.ceil(needed * others / ((1 - needed) * own_time) - 1e-9))


def weights_report(config: Config, slots: int | None = None) -> WeightsReport:
    """The derived table; ``slots`` overrides ``alerts.worker_slots``."""
    slots = slots if slots is not None else alert_settings(config).worker_slots
    classes = config.classes
    by_runtime = config.scheduler.charge == "runtime"
    timed = all(c.service_time is not None for c in classes)
    service = [(c.service_time or 0.0) if timed else 1.0 for c in classes]
    # Under charge: runtime the weights share out slot time, so a class's time per job does not
    # scale its share of time; it divides its share of pops instead.
    time_of = [1.0] * len(classes) if by_runtime else service
    work = [c.weight * t for c, t in zip(classes, time_of)]
    pops = [c.weight / t for c, t in zip(classes, service)] if by_runtime and timed else [float(c.weight) for c in classes]
    needs = []
    for i, c in enumerate(classes):
        needed = (c.arrival_rate * c.service_time / slots
                  if c.arrival_rate is not None and c.service_time is not None and slots else None)
        own_time = time_of[i] if timed and time_of[i] else 1.0
        needs.append(ClassNeed(
            index=i, name=c.name, weight=c.weight, weight_share=pops[i] / sum(pops),
            guaranteed=work[i] / sum(work), arrival_rate=c.arrival_rate, service_time=c.service_time,
            needed=needed,
            min_weight=None if needed is None else _min_weight(needed, own_time, sum(work) - work[i]),
            reserved_slots=c.reserved_slots,
        ))
    return WeightsReport(slots, not timed, tuple(needs), by_runtime)


def table_rows(report: WeightsReport) -> list[tuple[str, ...]]:
    """The report as table cells, header first, for ``fairctl weights`` and ``fairctl check``."""
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    rows: list[tuple[str, ...]] = [
        ("class", "weight", "pop share", "time share", "arrivals/s", "service s", "needs", "min weight", "keeps up")]
    for c in report.classes:
        rows.append((
            c.name, str(c.weight), pct(c.weight_share), pct(c.guaranteed),
            "-" if c.arrival_rate is None else f"{c.arrival_rate:.3g}",
            "-" if c.service_time is None else f"{c.service_time:.3g}",
            pct(c.needed), "-" if c.min_weight is None else str(c.min_weight),
            "SHORT" if c.short else ("ok" if c.needed is not None else "-"),
        ))
    return rows


def notes(report: WeightsReport) -> list[str]:
    """What the table's fleet, time share and needs mean for this report."""
    assumed = " (equal service times assumed: not every class has service_time)" if report.equal_service_times else ""
    time_share = ("time share: of the fleet's slot time when every class is backlogged: the weights themselves "
                  "(scheduler.charge: runtime)" if report.by_runtime
                  else "time share: of the fleet's slot time when every class is backlogged" + assumed)
    return [f"fleet: {report.slots} worker slots" if report.slots else "fleet: size unknown (alerts.worker_slots)",
            time_share, *([f"pop share: of the jobs started{assumed}"] if report.by_runtime else []),
            "needs: arrival_rate x service_time / slots, the slot time the class needs to keep up"]
