"""promtool unit tests for the generated rules, generated from the same config.

Each alert gets a file with at least one case where it fires (exact labels, value and annotations,
rendered by :mod:`alerts.annotations`) and one control where it must stay silent. The inputs are
the series an exporter would serve, named through the metric contract, with a ``job``, an
``instance`` and a ``group`` label; some cases run two exporters with identical series to show
nothing is counted twice, and one runs a second queue group of the same classes beside the first
to show the two are never merged. Scenarios take class names, SLOs and thresholds from the config, so ``fairctl check``
proves the rules generated for any config, not only the example.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.utils import floatToGoString

from exporter import metrics as m
from exporter.sources import watched
from fairness_core.config import OVER_BUDGET_REASON, Config, ConfigError
from fairness_core.snapshot import hold_reasons

from . import recording as rec
from . import rules as r
from .config import alert_settings
from .layout import RULES_FILE, TESTS_DIR
from .promql import duration, number, quote
from .side_by_side import arranged
from .supplied import series_metric, served_metrics
from .unittest_cases import Case, Check, ExprCheck, Firing, Sample, Series, TestFile

# Each exporter's scrape labels: on Kubernetes a pod label beside the instance, and the rules
# deduplicate over both (a rule that kept either would count the exporters twice).
EXPORTERS = tuple({"instance": f"exporter-{index}:29100", "pod": f"fairctl-exporter-{index}"} for index in range(2))
RETIRED = "jobs:retired"  # a class the config does not name (removed or renamed)
OTHER_GROUP = "another-group"  # a second queue group of the same classes, scraped under the same job
BUCKET_LABEL = "le"
EXPR_PRECISION = 0.001


# ---------------------------------------------------------------------------------- value strings

# A series that stays 0 throughout (as flat(0, n) writes it).
_ZERO = re.compile(r"^0x\d+$")


def flat(value: float, minutes: int) -> str:
    """One sample per interval from 0 to ``minutes`` inclusive."""
    return f"{number(value)}x{minutes}"


def ramp(step: float, minutes: int, start: float = 0) -> str:
    return f"{number(start)}+{number(step)}x{minutes}"


def listed(values: Iterable[float]) -> str:
    return " ".join(number(v) for v in values)


def prom_round(value: float, to_nearest: float) -> float:
    """PromQL's ``round(value, to_nearest)``, operation for operation."""
    inverse = 1 / to_nearest
    return math.floor(value * inverse + 0.5) / inverse


def near(value: float, part: float) -> float:
    """``part`` of ``value`` to three significant digits: an input this close to a threshold whose
    rendering (four digits) cannot fall on a tie that Prometheus's arithmetic would round the other
    way."""
    return float(f"{value * part:.3g}")


def prom_rate(increase: float, window_s: float) -> float:
    """``rate()`` of a counter that rose by ``increase`` between samples at both ends of its
    window, operation for operation as Prometheus 2 computes it: the increase times one factor,
    (covered / sampled) / window, which is not always ``increase / window``."""
    return increase * (1.0 / window_s)


def minutes(seconds: float) -> int:
    return math.ceil(seconds / 60)


# ---------------------------------------------------------------------------------- scenarios

class Scenario:
    """What every scenario needs: the config, its alerts, and series named like the exporter's."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.alerts = {a.name: a for a in r.every_alert(config)}
        self.basis = rec.basis(config)
        # Whose shares the exporter serves: tenants', and under accounts accounts' too.
        self.parties = tuple(dict.fromkeys((rec.TENANTS, rec.level(config))))
        self.job = alert_settings(config).exporter_job
        self.group = m.group_of(config)
        self.window = minutes(alert_settings(config).rate_window)

    def series(self, spec: m.MetricSpec, values: str, *, exporters: int = 1, suffix: str = "",
               **labels: str) -> list[Series]:
        """``spec``'s series as ``exporters`` exporters serve it (identical values)."""
        name = spec.series(suffix) if suffix else spec.name
        group = labels.get(m.GROUP, self.group)
        return [Series(name, {"job": self.job, **scrape, m.GROUP: group, m.SHARD: group, **labels}, values)
                for scrape in EXPORTERS[:exporters]]

    def shares(self, values: str, *, exporters: int = 1, **labels: str) -> list[Series]:
        """The share series of the first party of each level ("tenant-1"; "account-1" too under
        accounts), as :meth:`series`."""
        return [x for p in self.parties
                for x in self.series(p.share_metric, values, exporters=exporters, **labels, **{p.label: f"{p.noun}-1"})]

    def share_checks(self, minute: int, value: float, *where: Mapping[str, str]) -> list[ExprCheck]:
        """Each level's share recording at ``minute`` for the first party of :meth:`shares`: ``value``
        in each class ``where`` names (its labels)."""
        return [ExprCheck(minute, self.basis.share_of(p), tuple(Sample({**w, p.label: f"{p.noun}-1"}, value) for w in where))
                for p in self.parties]

    def for_minutes(self, alert: str, queue: str | None = None) -> int:
        return minutes(self.alerts[alert].variant(queue).for_seconds)

    def firing(self, alert: str, value: float, queue: str | None = None,
               queried: Mapping[str, float | str] | None = None, /, **labels: str) -> Firing:
        """An expected alert: the expression's labels (the group's, ``queue``'s and ``labels``)
        plus the rule's severity. Every keyword is a label, whatever its name (a label named by a
        variable, ``**{label: name}``, included), so the other arguments are positional only."""
        expr_labels = {"job": self.job, m.GROUP: self.group, **({m.QUEUE: queue} if queue else {}), **labels}
        return Firing({**expr_labels, "severity": self.alerts[alert].variant(queue).severity}, value, queried or {})

    def firing_on_up(self, alert: str, value: float) -> Firing:
        """An expected alert whose expression reads only Prometheus's own ``up``: it has no group."""
        return Firing({"job": self.job, "severity": self.alerts[alert].variant(None).severity}, value, {})

    def edge(self, alert: str, fire_at: int, *firing: Firing) -> tuple[Check, ...]:
        """The for: pinned from both sides: still pending one evaluation before ``fire_at``, firing
        at it (a for: one interval longer or shorter fails one of the two; at minute 0 there is no
        evaluation before)."""
        return (*((Check(fire_at - 1, alert),) if fire_at > 0 else ()), Check(fire_at, alert, firing))

    def shard(self, index: int) -> str:
        """The ``shard`` label of shard ``index`` of a sharded queue (its queue group's name)."""
        return f"{self.group}.{index}"

    def classes(self, count: int) -> list[tuple[str, float]]:
        """``count`` classes as (name, weight ratio among them): the config's most urgent first,
        padded with made-up classes for configs with fewer."""
        weights = [(c.name, float(c.weight)) for c in self.config.classes[:count]]
        weights += [(f"extra-{i}", weights[-1][1]) for i in range(count - len(weights))]
        total = sum(w for _, w in weights)
        return [(name, w / total) for name, w in weights]

    def reasons(self, queue: str) -> list[str]:
        """The reasons the classification rules give ``queue`` (as the exporter pre-creates them)."""
        return list(dict.fromkeys(rule.reason for rule in self.config.classification if rule.queue == queue))


def _starving(s: Scenario) -> list[Case]:
    alert = r.QUEUE_STARVING
    fire_at = {c.name: math.floor(c.max_age / 60) + 1 + s.for_minutes(alert, c.name) for c in s.config.classes}
    end = max(fire_at.values()) + 1
    growing = [x for c in s.config.classes for x in (
        *s.series(m.QUEUE_OLDEST_AGE, ramp(60, end), queue=c.name),
        *s.series(m.QUEUE_MAX_AGE, flat(c.max_age, end), queue=c.name),
        *s.series(m.QUEUE_PAUSED, flat(0, end), queue=c.name))]  # served as 0 when not paused
    checks = tuple(
        Check(t, alert, tuple(s.firing(alert, 60 * t, c.name, {"slo": c.max_age})
                              for c in s.config.classes if fire_at[c.name] <= t))
        for t in sorted({t for at in fire_at.values() for t in (at - 1, at)})
    )
    burst = [x for c in s.config.classes for x in (
        *s.series(m.QUEUE_DEPTH, listed([0, 5000, 2500, 500, 0, 0, 0, 0, 0]), queue=c.name),
        *s.series(m.QUEUE_OLDEST_AGE, listed(c.max_age * f for f in (0, 0.5, 0.9, 0.6, 0, 0, 0, 0, 0)), queue=c.name),
        *s.series(m.QUEUE_MAX_AGE, flat(c.max_age, 8), queue=c.name))]
    paused = [replace(x, values=flat(1, end)) for x in growing if x.name == m.QUEUE_PAUSED.name]
    healthy = [x for c in s.config.classes for x in (
        *s.series(m.QUEUE_OLDEST_AGE, flat(0, end), queue=c.name, group=OTHER_GROUP),
        *s.series(m.QUEUE_MAX_AGE, flat(3 * c.max_age, end), queue=c.name, group=OTHER_GROUP))]  # its own SLOs
    return [
        Case("every class's oldest job ages past its SLO: each fires after its own for:, with its severity",
             tuple(growing), checks),
        Case(f"the same beside a healthy group {OTHER_GROUP!r} of the same classes under the same job: only the "
             "starving group fires, each alert naming it and its own SLO", tuple(growing + healthy), checks),
        Case("the same, with every class paused (QueuePaused tells that story): silent throughout",
             tuple(x for x in growing if x.name != m.QUEUE_PAUSED.name) + tuple(paused),
             tuple(Check(chk.minute, alert) for chk in checks)),
        Case("a burst drains while its oldest job is younger than the SLO: silent throughout",
             tuple(burst), tuple(Check(t, alert) for t in range(9))),
    ]


def _share_below_weight(s: Scenario) -> list[Case]:
    alert = r.QUEUE_SHARE_BELOW_WEIGHT
    tolerance = alert_settings(s.config).share_tolerance
    end = s.window + s.for_minutes(alert) + 1

    def inputs(weights: Sequence[tuple[str, float]], shares: Mapping[str, float | None],
               empty: str | None = None) -> tuple[Series, ...]:
        """Every class but ``empty`` backlogged; a share (of the charge's basis) of None: the class
        has no series of it (no job of the class ever finished)."""
        out: list[Series] = []
        for name, weight in weights:
            out += s.series(m.QUEUE_DEPTH, flat(0 if name == empty else 1000, end), queue=name)
            out += s.series(m.QUEUE_PAUSED, flat(0, end), queue=name)
            out += s.series(m.QUEUE_WEIGHT_RATIO, flat(weight, end), queue=name)
            if (part := shares[name]) is not None:
                out += s.series(s.basis.counter, ramp(600 * part, end), queue=name)
        return tuple(out)

    def shares(weights: Sequence[tuple[str, float]], name: str, part: float) -> dict[str, float]:
        """``name`` takes ``part`` of the completions, the others split the rest by weight."""
        weight = dict(weights)[name]
        return {other: w * (1 - part) / (1 - weight) for other, w in weights if other != name} | {name: part}

    def sharded(weights: Sequence[tuple[str, float]], served: Sequence[Mapping[str, float]]) -> tuple[Series, ...]:
        """A queue of ``len(served)`` shards: each shard's completions per minute of each class
        (a class it serves is backlogged there, any other is empty there)."""
        out: list[Series] = []
        for index, rates in enumerate(served):
            shard = s.shard(index)
            for name, weight in weights:
                out += s.series(m.QUEUE_DEPTH, flat(1000 if name in rates else 0, end), queue=name, shard=shard)
                out += s.series(m.QUEUE_PAUSED, flat(0, end), queue=name, shard=shard)
                out += s.series(m.QUEUE_WEIGHT_RATIO, flat(weight, end), queue=name, shard=shard)
                out += s.series(s.basis.counter, ramp(rates.get(name, 0), end), queue=name, shard=shard)
        return tuple(out)

    weights = s.classes(max(2, len(s.config.classes)))
    starved, starved_weight = weights[-1]
    starved_share = near(starved_weight * tolerance, 0.5)
    entitled = {"entitled": starved_weight}
    three = s.classes(max(3, len(s.config.classes)))
    top, top_weight = three[0]
    low = three[-1][0]
    # Six shards served exactly by weight fleet-wide (3,600 a minute), but shard 2 holds a twentieth
    # of the top class's service beside all of the lowest class's flood: on that shard alone the
    # top class is far below its weight. Judged shard by shard, that paged; the queue is fair.
    fleet = {name: 3600 * w for name, w in three}
    others = fleet[three[1][0]] / 5 + fleet[low]
    # A twentieth, or less when the top class's weight is so large that a twentieth of its service
    # is still near its weight on that shard: half the part that would reach the tolerance.
    bound = tolerance * top_weight * others / (fleet[top] * (1 - tolerance * top_weight))
    odd_one = {top: fleet[top] * min(1 / 20, bound / 2), three[1][0]: fleet[three[1][0]] / 5, low: fleet[low]}
    rest = {name: (fleet[name] - odd_one[name]) / 5 for name, _ in three[:2]}
    uneven = [odd_one if index == 2 else rest for index in range(6)]
    if odd_one[top] / sum(odd_one.values()) >= tolerance * top_weight:
        raise ValueError("the uneven shard must be below the tolerance on its own")  # weights this skewed: none
    # The classes on shards of their own (two each): every shard serves one class, all of its
    # work, so each shard on its own looks fair; fleet-wide the top class gets half the tolerance.
    apart = shares(three, top, top_weight * tolerance / 2)
    separate = [{name: 3600 * apart[name] / 2} for name, _ in three for _ in range(2)]
    return [
        Case(f"every class backlogged, {starved} realises a fraction of its weight: pending from minute 1 (the "
             "first rate), fires after for:, for it alone",
             inputs(weights, shares(weights, starved, starved_share)),
             (*s.edge(alert, 1 + s.for_minutes(alert), s.firing(alert, starved_share, starved, entitled)),
              Check(end, alert, (s.firing(alert, starved_share, starved, entitled),)))),
        *(Case(f"every class backlogged, {starved} realises {number(part * 100)}% of the tolerance x its weight: "
               + ("just under it, fires" if part < 1 else "just over it, silent"),
               inputs(weights, shares(weights, starved, near(starved_weight * tolerance, part))),
               (Check(end, alert, (s.firing(alert, near(starved_weight * tolerance, part), starved, entitled),)
                      if part < 1 else ()),))
          for part in (0.95, 1.05)),
        Case(f"every class backlogged, {starved} never completed a job: fires for it",
             inputs(weights, {**shares(weights, starved, 0), starved: None}),
             (Check(end, alert, (s.firing(alert, 0, starved, entitled),)),)),
        # The empty class's few arrivals take far less than its weight (a rule blind to backlogs
        # would call it starved), and each other class realises MORE than its weight: the
        # surplus is being reallocated, as it should be.
        Case(f"{top} is empty, so the others realise more than their weights: silent",
             inputs(three, shares(three, top, top_weight * tolerance / 2), empty=top), (Check(end, alert),)),
        Case(f"six shards, shares exact fleet-wide; shard 2 serves {top} little beside all of {low}'s flood: "
             "the logical queue is fair, silent", sharded(three, uneven), (Check(end, alert),)),
        Case(f"each class on shards of its own (each shard fair on its own); fleet-wide {top} gets half the "
             "tolerance: fires once for the logical queue, naming no shard",
             sharded(three, separate),
             (Check(end, alert, (s.firing(alert, apart[top], top, {"entitled": top_weight}),)),)),
    ]


def _mix_drift(s: Scenario) -> list[Case]:
    alert = r.PRIORITY_MIX_DRIFT
    config = s.config
    names = [name for name, _ in s.classes(max(2, len(config.classes)))]
    budgeted = next((c for c in config.classes if c.arrival_budget is not None), None)
    queue, budget = (budgeted.name, budgeted.arrival_budget or 0) if budgeted else (names[0], 0.2)
    index = names.index(queue)
    demotes = config.scheduler.budget_action == "demote" and index + 1 < len(names)
    lower = names[index + 1] if index + 1 < len(names) else names[index - 1]
    window = minutes(config.scheduler.budget_window)
    end = window + s.for_minutes(alert) + 1
    enough = config.scheduler.budget_min_arrivals / window  # arrivals per minute

    def inputs(asked: float, per_minute: float, exporters: int) -> tuple[Series, ...]:
        """``asked`` of ``per_minute`` arrivals ask for ``queue``; the budget admits its share."""
        admitted = min(asked, budget)
        return counted(admitted * per_minute, (asked - admitted) * per_minute, (1 - asked) * per_minute, exporters)

    def counted(admitted: float, over: float, others: float, exporters: int = 1,
                gauge: str | None = None) -> tuple[Series, ...]:
        """Arrivals a minute: ``admitted`` into ``queue``, ``over`` its budget (demoted or refused),
        ``others`` into ``lower``; ``gauge``: the budget's series when not the config's."""
        counters = {name: {"demoted": 0.0, "rejected": 0.0} for name in names}
        counters[queue]["demoted" if demotes else "rejected"] = over
        enqueued = {(queue, (s.reasons(queue) or ["default"])[0]): admitted,
                    (lower, (s.reasons(lower) or ["default"])[0]): others}
        if demotes:
            enqueued[(lower, OVER_BUDGET_REASON)] = over
        out = [x for (name, reason), rate in enqueued.items()
               for x in s.series(m.JOBS_ENQUEUED, ramp(rate, end), exporters=exporters, queue=name, reason=reason)]
        for name in names:
            out += s.series(m.QUEUE_WEIGHT_RATIO, flat(1 / len(names), end), exporters=exporters, queue=name)
            limit = (gauge or flat(budget, end)) if name == queue else flat(1, end)
            out += s.series(m.QUEUE_ARRIVAL_BUDGET, limit, exporters=exporters, queue=name)
            out += s.series(m.JOBS_DEMOTED, ramp(counters[name]["demoted"], end), exporters=exporters, queue=name)
            out += s.series(m.JOBS_REJECTED, ramp(counters[name]["rejected"], end), exporters=exporters, queue=name)
        return tuple(out)

    asked = (1 + budget) / 2
    # Pending from the first minute with enough arrivals in the window (the counters start at 0).
    fire_at = max(1, math.ceil(window / 100)) + s.for_minutes(alert)
    drift = s.firing(alert, asked, queue, {"budget": budget})
    return [
        Case(f"two exporters; {number(asked * 100)}% of arrivals ask for {queue}: fires once, after for:",
             inputs(asked, 100 * enough, 2), (*s.edge(alert, fire_at, drift), Check(end, alert, (drift,)))),
        Case(f"{queue} asked for half its budget: silent", inputs(budget / 2, 100 * enough, 1), (Check(end, alert),)),
        Case(f"{queue} asked for 105% of its budget: fires", inputs(near(budget, 1.05), 100 * enough, 1),
             (Check(end, alert, (s.firing(alert, near(budget, 1.05), queue, {"budget": budget}),)),)),
        Case(f"{queue} asked for 95% of its budget: silent", inputs(near(budget, 0.95), 100 * enough, 1),
             (Check(end, alert),)),
        Case("105% of scheduler.budget_min_arrivals in the window, fewer of them for the drifting class alone: fires",
             inputs(asked, 1.05 * enough, 1), (Check(end, alert, (drift,)),)),
        Case("95% of scheduler.budget_min_arrivals in the window: too few to judge, silent",
             inputs(asked, 0.95 * enough, 1), (Check(end, alert),)),
        *(Case(f"{queue} asks for {what}: {verdict}", counted(*arrivals, gauge=gauge),
               (Check(end, alert, (s.firing(alert, share, queue, {"budget": budget}),) if fires else ()),))
          for what, verdict, fires, arrivals, share, gauge in _exact_mix(config, budget, end)),
        Case("two exporters each see the same few arrivals, all for one class: fewer than "
             "scheduler.budget_min_arrivals once deduplicated, so silent",
             inputs(1.0, 0.75 * enough, 2), (Check(end, alert),)),
    ]


def _on_least(config: Config) -> Iterator[tuple[int, int]]:
    """Splits of ``scheduler.budget_min_arrivals`` a window into two whole counts a minute whose
    rates, summed and times the window's seconds as the rules compute it, land exactly on it (the
    rate arithmetic rounds, so most splits miss by an ulp); none when no whole count a minute fits."""
    window = minutes(config.scheduler.budget_window)
    seconds = float(number(config.scheduler.budget_window))
    least = config.scheduler.budget_min_arrivals
    each = least // window if least % window == 0 else 0
    for first in range(1, each):
        if (prom_rate(first * window, seconds) + prom_rate((each - first) * window, seconds)) * seconds == least:
            yield first, each - first


def _exact_mix(config: Config, budget: float, end: int
               ) -> list[tuple[str, str, bool, tuple[int, int, int], float, str | None]]:
    """Whole arrivals a minute (admitted, over the budget, into another class) that put
    PriorityMixDrift exactly on its lines over a full window: exactly
    ``scheduler.budget_min_arrivals`` in the window, all asking for the class (enough: fires),
    admitted and over the budget in a split where Prometheus's arithmetic lands on it; and a
    requested share of exactly 1/2 against a budget gauge of 1/2 (not above it: silent), from
    rates that are multiples of 1/4 a second, exact however they are summed."""
    window = minutes(config.scheduler.budget_window)
    least = config.scheduler.budget_min_arrivals
    found: list[tuple[str, str, bool, tuple[int, int, int], float, str | None]] = []
    split = next(_on_least(config), None)
    if split and budget < 1:
        found.append(("all of exactly scheduler.budget_min_arrivals in the window", "fires", True,
                      (*split, 0), 1.0, None))
    k = 2 ** max(0, math.ceil(math.log2(least / (120 * window))))  # a power of 2 keeps the rates exact
    found.append(("a share of exactly 1/2 against a budget gauge of 1/2", "not above it, silent", False,
                  (45 * k, 15 * k, 60 * k), 0.5, flat(0.5, end)))
    return found


def _reason_shift(s: Scenario, step: int) -> list[Case]:
    alert = r.PRIORITY_REASON_SHIFT
    config = s.config
    queue = config.classes[0].name
    old, *others = s.reasons(queue) or ["default"]
    second = others[0] if others else "another reason"
    new = "a new classification rule"
    baseline = minutes(alert_settings(config).reason_baseline)
    after = -(-(minutes(config.scheduler.budget_window) + s.for_minutes(alert)) // step) * step + 2 * step
    end = baseline + after
    before_n, after_n = baseline // step, after // step

    def counter(before: float | None, later: float) -> str:
        """Arrivals per minute ``before`` the baseline (None: no series yet) and ``later``."""
        if before is None:
            return f"_x{before_n + 1} {ramp(later * step, after_n - 1)}"
        return f"{ramp(before * step, before_n)} {ramp(later * step, after_n - 1, (before * before_n + later) * step)}"

    def inputs(mix: Mapping[str, tuple[float | None, float]]) -> tuple[Series, ...]:
        return tuple(x for reason, (before, later) in mix.items()
                     for x in s.series(m.JOBS_ENQUEUED, counter(before, later), queue=queue, reason=reason))

    # The new reason's share: 60%, or halfway from the threshold to all when the threshold is 50% or more.
    threshold = alert_settings(config).reason_shift
    share = 0.6 if threshold < 0.5 else round((1 + threshold) / 2, 2)
    # A reason's share of a day ago, from which it rises by 95% and 105% of the threshold.
    was = near((1 - 1.05 * threshold) / 2, 1)
    enough = config.scheduler.budget_min_arrivals / minutes(config.scheduler.budget_window)  # arrivals a minute
    exact = _exact_reason_counts(config, step, share)

    def alternating(before: float, later: float) -> str:
        """Like ``counter``, but the arrivals before the baseline come every other step (none, then
        twice ``before``): a day-ago window of two steps or more sees the average, half of it not."""
        values, total = [0.0], 0.0
        for i in range(1, before_n + after_n + 1):
            total += (2 * before * step * (i % 2 == 0)) if i <= before_n else later * step
            values.append(total)
        return listed(values)

    def uneven(mix: Mapping[str, tuple[float | None, float, bool]]) -> tuple[Series, ...]:
        return tuple(x for reason, (before, later, every_other) in mix.items()
                     for x in s.series(m.JOBS_ENQUEUED, alternating(before or 0, later) if every_other
                                       else counter(before, later), queue=queue, reason=reason))

    # A day ago one reason came in every other step: 1/5 of the arrivals over the window, 0 or 2/5
    # over half of it. Today it rises to just over the threshold above 1/5, under it above 2/5.
    rise = 0.2 + threshold + 0.025
    windowed = (minutes(config.scheduler.budget_window) >= 2 * step and after <= baseline and rise < 1
                and baseline % step == 0)  # the day-ago windows start on a sample
    return [
        Case(f"a new reason brings {number(share * 100)}% of {queue}'s arrivals: fires for it, not for the one that shrank",
             inputs({old: (100, 100 * (1 - share)), new: (None, 100 * share)}),
             (Check(end, alert, (s.firing(alert, share, queue, {"baseline": 0}, reason=new),)),)),
        Case("the same mix as a day ago: silent", inputs({old: (70, 70), second: (30, 30)}), (Check(end, alert),)),
        *(Case(f"{old} rises from {number(was * 100)}% to {number((was + near(threshold, part)) * 100)}% of "
               f"{queue}'s arrivals, {number(part * 100)}% of the threshold: " + ("fires" if part > 1 else "silent"),
               inputs({old: (100 * was, 100 * (was + near(threshold, part))),
                       second: (100 * (1 - was), 100 * (1 - was - near(threshold, part)))}),
               (Check(end, alert, (s.firing(alert, was + near(threshold, part), queue, {"baseline": was}, reason=old),)
                      if part > 1 else ()),))
          # A threshold near 1 leaves no room below it; a baseline shorter than the case reads
          # the shift itself a baseline ago.
          for part in ((0.95, 1.05) if was > 0 and after <= baseline else ())),
        *(Case(f"a new reason brings {number(share * 100)}% of {number(part * 100)}% of scheduler.budget_min_arrivals "
               "in the window (fewer of them its own): " + ("fires" if part > 1 else "too few to judge, silent"),
               inputs({old: (enough, enough * part * (1 - share)), new: (None, enough * part * share)}),
               (Check(end, alert, (s.firing(alert, share, queue, {"baseline": 0}, reason=new),) if part > 1 else ()),))
          for part in (0.95, 1.05)),
        *(Case(f"a new reason brings {number(100 * name_new / (name_new + name_old))}% of {queue}'s arrivals, "
               f"{what}: {verdict}",
               inputs({old: (name_old + name_new, name_old), new: (None, name_new)}),
               (Check(end, alert, (s.firing(alert, share, queue, {"baseline": 0}, reason=new),) if fires else ()),))
          for what, verdict, fires, (name_new, name_old) in exact),
        *([Case(f"a day ago {old} came every other {step}m, 20% of {queue}'s arrivals over the window; now "
                f"{number(rise * 100)}%: fires (a baseline over half the window would be 0% or 40%)",
                uneven({old: (25, 100 * rise, True), second: (100, 100 * (1 - rise), False)}),
                (Check(end, alert, (s.firing(alert, rise, queue, {"baseline": 0.2}, reason=old),)),)),
           Case(f"a day ago {queue} got arrivals every other {step}m only; now a new reason brings "
                f"{number(share * 100)}%: fires (half the window would see none a day ago)",
                uneven({old: (100, 100 * (1 - share), True), new: (None, 100 * share, False)}),
                (Check(end, alert, (s.firing(alert, share, queue, {"baseline": 0}, reason=new),)),))]
          if windowed else []),
        *_reason_shift_for(s, step, share, old, new),
        Case("the class's arrivals were counted at 0 a day ago: no baseline to judge against, silent",
             inputs({old: (0, 100 * (1 - share)), new: (None, 100 * share)}), (Check(end, alert),)),
        Case("no arrivals a day ago (a fresh install): silent",
             inputs({old: (None, 100 * (1 - share)), new: (None, 100 * share)}), (Check(end, alert),)),
    ]


def _exact_reason_counts(config: Config, step: int, share: float) -> list[tuple[str, str, bool, tuple[int, int]]]:
    """Arrivals a minute (new reason, the other) that put the rule exactly on its lines, as
    Prometheus computes them over a full window of whole counts: exactly
    ``scheduler.budget_min_arrivals`` in the window (enough: fires), and a new reason's share
    exactly the threshold over a baseline of 0 (not above it: silent). A line no whole counts reach
    exactly gets no case."""
    window_m = minutes(config.scheduler.budget_window)
    seconds = float(number(config.scheduler.budget_window))
    per_step = max(1, window_m // step)  # whole counts per step: the per-minute rate is a multiple of it
    least, threshold = config.scheduler.budget_min_arrivals, float(number(alert_settings(config).reason_shift))

    def rate(per_minute: int) -> float:
        return prom_rate(per_minute * window_m, seconds)

    found = []
    enough = next(((n, o) for n, o in _on_least(config) if n / (n + o) > threshold and n % per_step == 0 == o % per_step),
                  None)
    if enough:
        found.append(("exactly scheduler.budget_min_arrivals in the window", "fires", True, enough))
    lowest = max(1, math.ceil(least / window_m))
    at_line = next(((n, t - n) for t in range(lowest, lowest + 400) for n in range(1, t)
                    if rate(n) / (rate(n) + rate(t - n)) == 0 + threshold), None)
    if at_line and share > threshold:
        found.append(("exactly the threshold over a baseline of 0", "not above it, silent", False, at_line))
    return found


def _reason_shift_for(s: Scenario, step: int, share: float, old: str, new: str) -> list[Case]:
    """The for: pinned from both sides. The other reason arrives from minute 0, the new one from
    before the baseline's offset reaches the present, so a baseline first exists (two samples a
    baseline ago) at a step the case knows: the alert is pending from there and fires ``for:``
    later, while the new reason still had no arrivals a baseline before."""
    alert = r.PRIORITY_REASON_SHIFT
    config = s.config
    baseline = minutes(alert_settings(config).reason_baseline)
    window = minutes(config.scheduler.budget_window)
    per_minute = max(100, 2 * math.ceil(config.scheduler.budget_min_arrivals / window))
    start = -(-(baseline + step) // step) * step
    fire_at = start + -(-s.for_minutes(alert) // step) * step
    quiet = (start - window) // step  # the new reason's last step without arrivals
    if window < 2 * step or quiet * step < fire_at - baseline or quiet < 1:
        return []
    steps = fire_at // step
    queue = config.classes[0].name
    other = ramp((1 - share) * per_minute * step, steps)
    fresh = f"{flat(0, quiet)} {ramp(share * per_minute * step, steps - quiet - 1, share * per_minute * step)}"
    return [Case(f"{new} arrives from before a baseline first exists, at minute {start}: pending then, "
                 f"firing {fire_at - start}m later",
                 (*s.series(m.JOBS_ENQUEUED, other, queue=queue, reason=old),
                  *s.series(m.JOBS_ENQUEUED, fresh, queue=queue, reason=new)),
                 (Check(fire_at - step, alert),
                  Check(fire_at, alert, (s.firing(alert, share, queue, {"baseline": 0}, reason=new),))))]


def _dominating(s: Scenario, party: rec.Level) -> list[Case]:
    """TenantDominatingQueue's cases, or under accounts AccountDominatingQueue's: the same cases,
    judging each ``party`` (tenant or account), and under accounts those of :func:`_customers`."""
    alert = r.dominating_alert(party)
    who, one, label = party.noun, party.one, party.label  # its ids start with who: "tenant-big", "account-big"
    queue = s.config.classes[-1].name
    elsewhere = next((name for name, _ in s.classes(2) if name != queue))
    for_minutes = s.for_minutes(alert)
    end = for_minutes + 2
    settings = alert_settings(s.config)
    d, min_jobs = settings.tenant_dominance, settings.tenant_min_jobs
    big = (1 + d) / 2
    k = s.config.exporter.topk_tenants
    window = minutes(s.config.exporter.window)
    # Jobs completed per minute: enough that a minute's worth is evidence and that ``big`` clears
    # the entry margin from minute 1, whatever the config (that needs n > 16 d / (1 - d)).
    per_minute = max(60, min_jobs, math.ceil(32 * d / (1 - d)))

    def margin(minute: int) -> float:
        """The rule's entry margin over ``d`` at ``minute``, when the window holds per_minute x
        min(minute, window) completions (the counter starts at 0: no extrapolation)."""
        return r.DOMINANCE_MARGIN_SD * math.sqrt(d * (1 - d) / (per_minute * min(minute, window)))

    def inputs(shares: Mapping[str, str], active: int, *, exporters: int = 1,
               completed: str | None = None, queue: str = queue) -> tuple[Series, ...]:
        """``shares``: each named tenant's share series (the exporter serves one only while the
        tenant is among the class's busiest of the window); ``completed``: the class's completions
        counter, ``per_minute`` a minute unless given."""
        length = max(end, window) + 20
        jobs = completed or ramp(per_minute, length)
        out = s.series(party.active_metric, flat(active, length), exporters=exporters, queue=queue)
        out += s.series(m.JOBS_PROCESSED, jobs, exporters=exporters, queue=queue)
        if s.basis.counter != m.JOBS_PROCESSED:  # what the shares share
            out += s.series(s.basis.counter, ramp(60, length), exporters=exporters, queue=queue)
        for name, values in shares.items():
            out += s.series(party.share_metric, values, exporters=exporters, queue=queue, **{label: name})
        return tuple(out)

    def nothing_pending(*at: int, **where: str) -> tuple[ExprCheck, ...]:
        matchers = "".join(f", {k}={quote(v)}" for k, v in where.items())
        return tuple(ExprCheck(minute, f"ALERTS{{alertname={quote(alert)}{matchers}}}", ()) for minute in at)

    def pending(minute: int, name: str) -> ExprCheck:
        """Pending at ``minute``, or already firing when for: is that short."""
        labels = {**s.firing(alert, 0, queue, **{label: name}).labels, "alertname": alert}
        return ExprCheck(minute, f"max without (alertstate) (ALERTS{{alertname={quote(alert)}}})", (Sample(labels, 1),))

    small = (1 - big) / 2
    rest = {f"{who}-small-1": flat(small, end), f"{who}-small-2": flat(small, end)}
    # 100,000 tenants ever seen: the exporter names the k busiest of each window. Until minute
    # ``late``, k old tenants share the class; then a tenant first seen after all of them floods it
    # and takes the top place while the old ones drop out of the list (a series that leaves the
    # scrape goes stale at once).
    many, late = 100_000, 3
    old = {f"{who}-{i}": f"{flat(1 / k, late - 1)} stale" for i in range(1, k + 1)}
    newcomer = f"{who}-{many + 1}"
    takeover = {**old, newcomer: f"_x{late} {flat(big, end + 17 - late)}",
                **{f"{who}-{i}": f"_x{late} {flat((1 - big) / (k - 1), end + 17 - late)}" for i in range(k + 1, 2 * k)}}
    fire_at = late + for_minutes
    # The flood stops: its share of the window falls as the window slides on, under the threshold
    # and then out of the top list.
    stops_at = for_minutes + 2
    falling = [big] * (stops_at + 1) + [big * 0.8, d * 0.9, 0.2]
    stopping = {f"{who}-big": f"{listed(falling)} stale", **rest}
    # Hysteresis: once firing (from minute 1 + for:), a share that falls to between the threshold
    # and the entry margin keeps it firing; a share there from the start never starts it.
    fired = 1 + for_minutes
    holding = d + margin(fired + 3) / 2
    rising = d + margin(end) / 2
    # Two tenants at the line take turns just above it (50.08% / 49.92% at 50%).
    near = min(0.0008, margin(end) / 4)
    turns = {f"{who}-a": listed(d + (near if i % 2 else -near) for i in range(end + 1)),
             f"{who}-b": listed(d + (-near if i % 2 else near) for i in range(end + 1))}
    # After a pause longer than the window, the first completions are one tenant's: 100% of
    # fewer than tenant_min_jobs jobs is no evidence.
    span = max(end, 8)
    resumed = listed([0] * 6 + [min_jobs - 1] * (span - 5))
    # Exactly tenant_min_jobs completed: enough, when 100% of that many clears the entry margin.
    evidence = listed([0] * 6 + [min_jobs] * (span - 5))
    judged = d + r.DOMINANCE_MARGIN_SD * math.sqrt(d * (1 - d) / min_jobs) < 1
    # Around the entry margin once the window is full: 1.9 and 2.1 of the share's noise over d.
    sd = margin(window) / r.DOMINANCE_MARGIN_SD
    full = window + 1
    near_entry = [(k, d + k * sd) for k in (1.9, 2.1) if d + k * sd < 1]
    # Exactly on each line, as Prometheus computes it once the window is full: the entry margin for
    # the window's completions (not above it: never pending), and, once firing, the threshold
    # itself (not above it: resolves).
    served = prom_rate((60 if s.basis.counter != m.JOBS_PROCESSED else per_minute) * window, window * 60)
    d_rule = float(number(d))
    entry = d_rule + r.DOMINANCE_MARGIN_SD * math.sqrt(float(number(d * (1 - d))) / (per_minute * window))
    on_entry, on_threshold = _share_input(entry, served), _share_input(d_rule, served)
    exact = [
        *([Case(f"{one} exactly at the entry margin once the window is full: never pending",
                inputs({f"{who}-big": f"{on_entry!r}x{end + window}", **rest}, 3), (), nothing_pending(full))]
          if on_entry is not None and entry < 1 else []),
        *([Case(f"firing, the {who}'s share falls to exactly the threshold: it resolves",
                inputs({f"{who}-big": f"{flat(big, fired + window)} {on_threshold!r}x3", **rest}, 3),
                (Check(fired + window + 1, alert),))]
          if on_threshold is not None else []),
    ]
    return [
        *exact,
        *(_customers(s, alert, end, big, inputs) if party is rec.ACCOUNTS else []),
        Case(f"two {who}s; one gets {number(big * 100)}% of {queue} while the other waits: fires",
             inputs({f"{who}-big": flat(big, end), f"{who}-small": flat(d / 2, end)}, 2),  # under any threshold
             (Check(end, alert, (s.firing(alert, big, queue, {"active": 2}, **{label: f"{who}-big"}),)),)),
        *([Case(f"one {who} has all of exactly {min_jobs} jobs completed in the window (tenant_min_jobs): pending",
                inputs({f"{who}-big": flat(1, span)}, 3, completed=evidence), (), (pending(6, f"{who}-big"),))]
          if judged else []),
        *(Case(f"{one} {k} times its share's noise over the threshold once the window is full: "
               + ("pending" if k > r.DOMINANCE_MARGIN_SD else "not pending"),
               inputs({f"{who}-big": flat(share, end + window), **rest}, 3),
               (), (pending(full, f"{who}-big") if k > r.DOMINANCE_MARGIN_SD else nothing_pending(full)[0],))
          for k, share in near_entry),
        Case(f"two exporters; one {who} gets {number(big * 100)}% of {queue} while two others wait: fires once for it",
             inputs({f"{who}-big": flat(big, end), **rest}, 3, exporters=2),
             (Check(for_minutes - 1, alert),
              Check(end, alert, (s.firing(alert, big, queue, {"active": 3}, **{label: f"{who}-big"}),)))),
        Case(f"the big {who} is alone in the class: silent", inputs({f"{who}-big": flat(1, end)}, 1), (Check(end, alert),)),
        Case(f"{many:,} {who}s seen before; {newcomer}, first seen at minute {late}, floods {queue}: fires for it "
             f"after for:, as it would for the first {who} ever seen",
             inputs(takeover, many + 1),
             (Check(fire_at - 1, alert),
              Check(fire_at, alert, (s.firing(alert, big, queue, {"active": many + 1}, **{label: newcomer}),)))),
        Case(f"the flooding {who} stops: its windowed share falls below the threshold and the alert resolves",
             inputs(stopping, 3),
             (Check(stops_at, alert, (s.firing(alert, big, queue, {"active": 3}, **{label: f"{who}-big"}),)),
              Check(stops_at + 2, alert), Check(stops_at + 4, alert))),
        Case(f"firing, the {who}'s share falls to {holding * 100:.1f}%: above the threshold, under the entry "
             "margin: it keeps firing",
             inputs({f"{who}-big": f"{flat(big, fired)} {listed([holding] * 3)}", **rest}, 3),
             tuple(Check(minute, alert, (s.firing(alert, holding, queue, {"active": 3}, **{label: f"{who}-big"}),))
                   for minute in range(fired + 1, fired + 4))),
        Case(f"{one} at {rising * 100:.1f}% from the start, above the threshold by less than the noise of "
             "its share: never pending",
             inputs({f"{who}-big": flat(rising, end), **rest}, 3), (Check(end, alert),), nothing_pending(end)),
        # Once pending or firing, a tenant holds while above the threshold: only the same tenant of
        # the same class (its alert of the last evaluation), not its namesake in another class nor
        # another tenant of the class whose alert has just resolved.
        Case(f"{who}-big dominates {queue} and sits under the entry margin in {elsewhere}: never pending there",
             (*inputs({f"{who}-big": flat(big, end), **rest}, 3),
              *inputs({f"{who}-big": flat(rising, end), **rest}, 3, queue=elsewhere)),
             (), nothing_pending(end, **{m.QUEUE: elsewhere})),
        Case(f"{who}-a, pending, drops out at minute {late} as {who}-b rises to under the entry margin: "
             f"{who}-b never pending",
             inputs({f"{who}-a": f"{flat(big, late - 1)} {flat(min(0.2, d / 2), end - late)}",
                     f"{who}-b": f"{flat(min(0.2, d / 2), late - 1)} {flat(rising, end - late)}",
                     f"{who}-small": flat(small, end)}, 3),
             (), nothing_pending(end, **{label: f"{who}-b"})),
        Case(f"two {who}s at the line take turns {number(near * 100)} points above it: never pending",
             inputs(turns, 2), (Check(end, alert),), nothing_pending(end - 1, end)),
        Case(f"after a long pause one {who} has all of the {min_jobs - 1} jobs completed in the window: "
             f"too few to judge (tenant_min_jobs: {min_jobs}), never pending",
             inputs({f"{who}-big": flat(1, span)}, 3, completed=resumed), (Check(span, alert),), nothing_pending(6)),
    ]


def _customers(s: Scenario, alert: str, end: int, big: float,
               inputs: Callable[[Mapping[str, str], int], tuple[Series, ...]]) -> list[Case]:
    """AccountDominatingQueue's own cases: a customer that floods a class through many keys, each
    far under the threshold, fires it; many customers of one small key each do not. ``inputs``
    builds the accounts' series (shares by account, active accounts); the keys' own series are
    served beside them, as the exporter serves both."""
    queue, k = s.config.classes[-1].name, s.config.exporter.topk_tenants
    separator = s.config.tenants.account_separator
    flood, keys, others, small = max(0.9, big), 200, 20, 200

    def with_keys(shares: Mapping[str, str], active: int) -> tuple[Series, ...]:
        """The keys' series: each listed key's share of the class, and the keys with due jobs."""
        return (*s.series(m.QUEUE_ACTIVE_TENANTS, flat(active, end), queue=queue),
                *(x for key, values in shares.items()
                  for x in s.series(m.QUEUE_TENANT_SHARE, values, queue=queue, tenant=key)))

    # The exporter lists the k busiest keys (all bigco's) and the k busiest accounts.
    flooding = {"bigco": flat(flood, end), **{f"account-{i}": flat((1 - flood) / others, end) for i in range(1, k)}}
    its_keys = {f"bigco{separator}key-{i}": flat(flood / keys, end) for i in range(1, k + 1)}
    singles = {f"account-{i}": flat(1 / small, end) for i in range(1, k + 1)}
    return [
        Case(f"a {keys}-key flood: account bigco's keys get {number(flood / keys * 100)}% of {queue} each, "
             f"{number(flood * 100)}% together, while {others} other accounts wait: fires, naming the account",
             (*inputs(flooding, others + 1), *with_keys(its_keys, keys + others)),
             (Check(end, alert, (s.firing(alert, flood, queue, {"active": others + 1}, **{m.ACCOUNT: "bigco"}),)),)),
        Case(f"{small} small accounts, each one key with {number(100 / small)}% of {queue}: silent",
             (*inputs(singles, small), *with_keys(singles, small)), (Check(end, alert),)),
    ]


def _share_input(share: float, served: float) -> float | None:
    """The tenant share gauge that the share recording, ``gauge * rate / rate``, turns into exactly
    ``share`` (a float within a few ulps of it), or None when none does."""
    up = down = share
    for _ in range(64):
        for x in (up, down):
            if x * served / served == share:
                return x
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
    return None


def _quiet_tenants(s: Scenario) -> list[Case]:
    alert = r.QUIET_TENANTS_STARVING
    cls = s.config.classes[0]
    fire_at = math.floor(cls.max_age / 60) + 1 + s.for_minutes(alert)
    slo = s.series(m.QUEUE_MAX_AGE, flat(cls.max_age, fire_at), queue=cls.name)
    served = s.series(m.QUEUE_PAUSED, flat(0, fire_at), queue=cls.name)  # not paused: served as 0
    # with accounts the alert reads the quiet accounts' age: a flooding account's keys are each quiet
    quiet = m.QUEUE_QUIET_OLDEST_AGE if rec.level(s.config) is rec.TENANTS else m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE
    quiet_served = s.series(quiet, flat(10, fire_at), queue=cls.name)
    if quiet is not m.QUEUE_QUIET_OLDEST_AGE:  # the flooding account's own keys, each quiet by itself, are old
        quiet_served += s.series(m.QUEUE_QUIET_OLDEST_AGE, ramp(60, fire_at), queue=cls.name)
    return [
        Case(f"the quiet {rec.level(s.config).noun}s' oldest job in {cls.name} ages past the SLO: fires after for:",
             tuple(slo + served + s.series(quiet, ramp(60, fire_at), queue=cls.name)),
             (Check(fire_at - 1, alert),
              Check(fire_at, alert, (s.firing(alert, 60 * fire_at, cls.name, {"slo": cls.max_age}),)))),
        Case(f"the same while {cls.name} is paused (QueuePaused tells that story): silent",
             tuple(slo + s.series(quiet, ramp(60, fire_at), queue=cls.name)
                   + s.series(m.QUEUE_PAUSED, flat(1, fire_at), queue=cls.name)),
             (Check(fire_at, alert),)),
        Case(f"only the noisy {rec.level(s.config).noun}'s own backlog is old, the quiet ones are served: silent",
             tuple(slo + s.series(m.QUEUE_OLDEST_AGE, ramp(60, fire_at), queue=cls.name) + quiet_served),
             (Check(fire_at, alert),)),
    ]


@dataclass(frozen=True)
class Due:
    """A class's (or one shard's) due jobs and completions in a stall test: 500 due jobs from
    minute ``due_from`` (none before, nor at minute ``empty_at``; no scrape at ``unscraped``),
    ``per_minute`` completions (None: it never completed one) until ``served_until`` when given,
    and paused throughout when ``paused``, or before minute ``resumed_at``."""

    per_minute: float | None = 0
    paused: int = 0
    due_from: int = 0
    served_until: int | None = None
    empty_at: int | None = None
    unscraped: int | None = None
    resumed_at: int = 0

    def series(self, s: Scenario, end: int, queue: str, shard: str | None = None) -> list[Series]:
        """The class's series, on ``shard`` of it (None: the unsharded queue, its own shard)."""
        on = s.group if shard is None else shard
        depth = " ".join("_" if t == self.unscraped else number(0 if t < self.due_from or t == self.empty_at else 500)
                         for t in range(end + 1))
        out = s.series(m.QUEUE_DEPTH, depth, queue=queue, shard=on)
        # A flat 0 when never paused: the form a system that serves no pauses may be fed (_ZERO).
        paused = listed(1 if t < self.resumed_at else self.paused for t in range(end + 1)) if self.resumed_at else (
            flat(self.paused, end))
        out += s.series(m.QUEUE_PAUSED, paused, queue=queue, shard=on)
        if self.per_minute is not None:
            n, until = self.per_minute, self.served_until
            served = ramp(n, end, 1234) if until is None else f"{ramp(n, until, 1234)} {flat(1234 + n * until, end - until - 1)}"
            out += s.series(m.JOBS_PROCESSED, served, queue=queue, shard=on)
        return out


def _stall_timings(s: Scenario, alert: str, what: str, fire_at: int, firing: Firing,
                   inputs: Callable[[Due], tuple[Series, ...]]) -> list[Case]:
    """A stall alert's exact minutes, from both sides, for ``what`` (a class, or a shard) stalling
    as ``inputs`` puts it: jobs due from minute 2 stall once they stayed due for stall_after
    (neither the window's first scrape nor the depth stall_after ago may be 0, nor a scrape
    missing there), completions that stop at minute 2 and a pause until then leave the window
    stall_after later, and one empty scrape holds it off until the window passed it (a rule
    reading only the depth stall_after ago would fire before)."""
    stall = minutes(alert_settings(s.config).stall_after)
    late, dip = 2, s.for_minutes(alert) + 1
    return [
        Case(f"{what} is empty for one scrape at minute {dip}, completing nothing: not even pending until the "
             "window has passed it", inputs(Due(empty_at=dip)),
             (Check(fire_at, alert), *s.edge(alert, dip + 1 + fire_at, firing)),
             (ExprCheck(dip + stall - 1, f"ALERTS{{alertname={quote(alert)}}}", ()),)),
        Case(f"jobs arrive in {what} between the scrapes of minutes {late - 1} and {late + 1} (none at {late}), "
             "none completes: the window must hold only due scrapes and start with one",
             inputs(Due(due_from=late, unscraped=late)), s.edge(alert, late + 1 + fire_at, firing)),
        Case(f"{what} is paused until minute {late}, then completes nothing: fires once the pause left the window",
             inputs(Due(resumed_at=late)), s.edge(alert, late + fire_at, firing)),
        Case(f"500 jobs arrive in {what} at minute {late} and none completes: fires stall_after + for: later",
             inputs(Due(due_from=late)), s.edge(alert, late + fire_at, firing)),
        Case(f"{what} completes a job a minute until minute {late}, then none: fires stall_after + for: later",
             inputs(Due(per_minute=1, served_until=late)), s.edge(alert, late + fire_at, firing)),
    ]


def _stalled(s: Scenario) -> list[Case]:
    alert = r.QUEUE_STALLED
    stall = minutes(alert_settings(s.config).stall_after)
    fire_at = stall + s.for_minutes(alert)
    end = 2 * fire_at + 3
    (counted, _), (never, _) = s.classes(2)

    def inputs(queue: str, due: Due) -> list[Series]:
        return due.series(s, end, queue)

    return [
        *_stall_timings(s, alert, counted, fire_at, s.firing(alert, 500, counted),
                        lambda due: tuple(inputs(counted, due))),
        Case(f"{counted}'s completions stop, {never} never completed a job: both fire after {duration(60 * stall)} + for:",
             tuple(inputs(counted, Due()) + inputs(never, Due(per_minute=None))),
             (Check(fire_at - 1, alert),
              Check(fire_at, alert, tuple(s.firing(alert, 500, q) for q in sorted((counted, never))))),
             ),
        Case(f"{counted} is paused: silent", tuple(inputs(counted, Due(paused=1))), (Check(end, alert),)),
        Case(f"{counted} completes a job a minute: silent", tuple(inputs(counted, Due(per_minute=1))), (Check(end, alert),)),
    ]


def _shard_stalled(s: Scenario) -> list[Case]:
    alert = r.QUEUE_SHARD_STALLED
    stall = minutes(alert_settings(s.config).stall_after)
    fire_at = stall + s.for_minutes(alert)
    stalled_at = stall + s.for_minutes(r.QUEUE_STALLED)  # the queue's alert, with a for: of its own
    end = 2 * max(fire_at, stalled_at) + 3
    queue = s.config.classes[0].name
    masters = [f"10.0.0.{index + 1}:6379" for index in range(3)]

    def shard(index: int | None, per_minute: float, paused: int = 0, due: Due | None = None) -> list[Series]:
        """One shard of ``queue`` (None: the unsharded queue, its own shard) with 500 due jobs,
        or as ``due`` says."""
        on = s.group if index is None else s.shard(index)
        out = (due or Due(per_minute=per_minute, paused=paused)).series(s, end, queue, on)
        return out + s.series(m.REDIS_MASTER, flat(1, end), master=masters[index or 0], shard=on)

    stuck = s.firing(alert, 500, queue, {"master": masters[1]}, shard=s.shard(1))
    return [
        *_stall_timings(s, alert, "shard 1 (the others draining)", fire_at, stuck,
                        lambda due: tuple(shard(0, 60) + shard(1, 0, due=due) + shard(2, 60))),
        Case(f"shard 1 of three completes nothing while the others drain: fires for it after "
             f"{duration(60 * stall)} + for:, naming its Redis; {r.QUEUE_STALLED} stays silent",
             tuple(shard(0, 60) + shard(1, 0) + shard(2, 60)),
             (Check(fire_at - 1, alert), Check(fire_at, alert, (stuck,)), Check(fire_at, r.QUEUE_STALLED))),
        Case(f"every shard stalls: {r.QUEUE_STALLED} fires once for the queue, no shard alert",
             tuple(shard(0, 0) + shard(1, 0) + shard(2, 0)),
             (Check(fire_at, alert), *((Check(stalled_at, alert),) if stalled_at != fire_at else ()),
              Check(stalled_at, r.QUEUE_STALLED, (s.firing(r.QUEUE_STALLED, 1500, queue),)))),
        Case(f"an unsharded queue stalls: {r.QUEUE_STALLED} tells it, no shard alert",
             tuple(shard(None, 0)), (Check(fire_at, alert),)),
        Case(f"shard 1 completes nothing while {queue} is paused: silent",
             tuple(shard(0, 0, 1) + shard(1, 0, 1) + shard(2, 60, 1)), (Check(end, alert),)),
        # The queue as a whole is judged over the same window as the shard: a pause of the others
        # (one that did not reach shard 1) or their completions, anywhere in it, keep the stall
        # shard 1's alone.
        Case(f"shards 0 and 2 are paused until minute {s.for_minutes(alert) + 1} (shard 1 never), then complete "
             "nothing either: fires for shard 1 while their pause is in the window",
             tuple(shard(0, 0, due=Due(resumed_at=s.for_minutes(alert) + 1)) + shard(1, 0)
                   + shard(2, 0, due=Due(resumed_at=s.for_minutes(alert) + 1))),
             s.edge(alert, fire_at, stuck)),
        Case(f"shards 0 and 2 complete jobs until minute {s.for_minutes(alert) + 1}, then none: fires for shard 1 "
             "while their completions are in the window",
             tuple(shard(0, 0, due=Due(per_minute=60, served_until=s.for_minutes(alert) + 1)) + shard(1, 0)
                   + shard(2, 0, due=Due(per_minute=60, served_until=s.for_minutes(alert) + 1))),
             s.edge(alert, fire_at, stuck)),
    ]


def _inversion(s: Scenario) -> list[Case]:
    alert = r.PRIORITY_INVERSION
    cls = s.config.classes[0]
    edges = [b for b in m.WAIT_BUCKETS if b >= cls.max_age]
    if len(edges) < 2:
        raise ConfigError("classes[0].max_age", f"{alert} needs an SLO below {floatToGoString(m.WAIT_BUCKETS[-2])}s: "
                          f"{m.JOBS_WAIT.name} cannot tell longer waits apart", s.config.source)
    low, high = edges[0], edges[1]
    end = s.window + s.for_minutes(alert) + 1
    limit = alert_settings(s.config).inversion_max_depth
    # Below the limit once deduplicated, above it if two exporters' depths were summed.
    shallow = limit // 2 + 1 if limit else 0

    def inputs(waits_over: float, depth: float, exporters: int, resumed_at: int = 0,
               leased: Callable[[float], float] | None = None) -> tuple[Series, ...]:
        """Ten leases a minute, each having waited just over ``waits_over`` seconds (or
        ``leased(bound)`` a minute waiting at most ``bound``); paused before minute ``resumed_at``."""
        out = s.series(m.QUEUE_DEPTH, flat(depth, end), exporters=exporters, queue=cls.name)
        out += s.series(m.QUEUE_PAUSED, listed(int(t < resumed_at) for t in range(end + 1)), exporters=exporters,
                        queue=cls.name)
        out += s.series(m.QUEUE_MAX_AGE, flat(cls.max_age, end), exporters=exporters, queue=cls.name)
        for bound in (*m.WAIT_BUCKETS, math.inf):
            per_minute = leased(bound) if leased else 10 if bound > waits_over else 0
            out += s.series(m.JOBS_WAIT, ramp(per_minute, end), exporters=exporters,
                            suffix="_bucket", queue=cls.name, **{BUCKET_LABEL: floatToGoString(bound)})
        return tuple(out)

    p99 = low + (high - low) * 0.99
    inverted = s.firing(alert, p99, cls.name, {"slo": cls.max_age, "depth": shallow})
    resumed = 2  # a pause until then is in the window until minute rate_window + 2
    end = max(end, s.window + resumed + s.for_minutes(alert) + 1)
    cases = []
    if cls.max_age == low and m.WAIT_BUCKETS.index(low) > 0:
        # 99% of 6,000 leases a minute waited at most the SLO, the rest longer: once the window is
        # full every rate is a whole number and the p99 is the SLO exactly, which is not over it.
        cases.append(Case(f"{cls.name}'s p99 wait is exactly its SLO: silent",
                          inputs(0, shallow, 1, leased=lambda bound: 0 if bound < low else 5940 if bound == low else 6000),
                          (Check(end, alert),)))
    return cases + [
        Case(f"two exporters; {cls.name} waits over its SLO with {shallow} jobs due: fires once, for: after the "
             "first rate",
             inputs(low, shallow, 2),
             (*s.edge(alert, 1 + s.for_minutes(alert), inverted), Check(end, alert, (inverted,)))),
        Case(f"{cls.name} waits over its SLO with {limit} jobs due, the most still called nearly empty: fires",
             inputs(low, limit, 1),
             (Check(end, alert, (s.firing(alert, p99, cls.name, {"slo": cls.max_age, "depth": limit}),)),)),
        Case(f"{cls.name} waits over its SLO with {limit + 1} jobs due, one more than nearly empty: silent",
             inputs(low, limit + 1, 1), (Check(end, alert),)),
        Case(f"{cls.name} waits over its SLO with a deep backlog (starvation, not inversion): silent",
             inputs(low, limit + 100, 1), (Check(end, alert),)),
        Case(f"{cls.name} was paused until minute {resumed} (its waits then are the pause's): pending only once the "
             "pause left the window", inputs(low, shallow, 1, resumed_at=resumed),
             s.edge(alert, s.window + resumed + s.for_minutes(alert),
                    s.firing(alert, p99, cls.name, {"slo": cls.max_age, "depth": shallow}))),
        Case(f"{cls.name}'s waits are short: silent", inputs(0, shallow, 1), (Check(end, alert),)),
    ]


def _redelivered(s: Scenario) -> list[Case]:
    alert = r.JOBS_REDELIVERED_HIGH
    queue = s.config.classes[0].name
    ratio = alert_settings(s.config).redelivery_ratio
    for_minutes = s.for_minutes(alert)
    end = s.window + for_minutes + 1

    def inputs(redelivered: str, completed: float = 100) -> tuple[Series, ...]:
        return tuple(s.series(m.JOBS_PROCESSED, ramp(completed, end), queue=queue)
                     + s.series(m.QUEUE_WEIGHT_RATIO, flat(1, end), queue=queue)
                     + s.series(m.JOBS_REDELIVERED, redelivered, queue=queue))

    # 6,000 completions a minute: once the window is full each rate is a whole number over the
    # window's seconds, so a ratio of exactly the threshold is computed exactly where it can be.
    many, at_ratio = 6000, 6000 * ratio
    seconds = 60 * s.window
    exact = at_ratio == round(at_ratio) and prom_rate(at_ratio * s.window, seconds) / prom_rate(many * s.window, seconds) == ratio
    cases = [
        Case(f"leases expire at {number(4 * ratio * 100)}% of completions: fires for: after the first rate",
             inputs(ramp(400 * ratio, end)),
             (*s.edge(alert, 1 + for_minutes, s.firing(alert, 4 * ratio, queue)),
              Check(end, alert, (s.firing(alert, 4 * ratio, queue),)))),
        Case(f"leases expire at {number(ratio * 50)}% of completions: silent",
             inputs(ramp(50 * ratio, end)), (Check(end, alert),)),
        Case(f"leases expire at {number(near(ratio, 1.05) * 100)}% of completions, just over the threshold: fires",
             inputs(ramp(many * near(ratio, 1.05), end), many),
             (Check(end, alert, (s.firing(alert, near(ratio, 1.05), queue),)),)),
        Case("leases expire and no job completes (a ratio over 0): fires at +Inf",
             inputs(ramp(10, end), 0), (Check(end, alert, (s.firing(alert, math.inf, queue),)),)),
        Case("nothing expires and nothing completes (0 over 0): silent", inputs(flat(0, end), 0), (Check(end, alert),)),
    ]
    if exact:
        cases.append(Case(f"leases expire at exactly {number(ratio * 100)}% of completions: not over it, silent",
                          inputs(ramp(at_ratio, end), many), (Check(end, alert),)))
    if for_minutes > s.window:  # a burst leaves the window before for: elapses
        burst = 400 * ratio * s.window
        cases.append(Case("one burst of expiries (a worker killed once): silent while it is in the window",
                          inputs(f"{flat(0, 4)} {flat(burst, end - 5)}"),
                          tuple(Check(t, alert) for t in range(5, end + 1, 2))))
    return cases


def _dead_lettered(s: Scenario) -> list[Case]:
    alert = r.JOBS_DEAD_LETTERED
    queue = s.config.classes[-1].name
    fire_at = 1 + s.for_minutes(alert)  # the first increase, then for:
    end = s.window + s.for_minutes(alert) + 1

    def inputs(values: str) -> tuple[Series, ...]:
        return tuple(s.series(m.JOBS_DEAD_LETTERED, values, exporters=2, queue=queue))

    return [
        Case(f"two exporters; a job of {queue} dead-lettered every minute: fires once, counting each job once",
             inputs(ramp(1, end)), (*s.edge(alert, fire_at, s.firing(alert, min(fire_at, s.window), queue)),
                                    Check(end, alert, (s.firing(alert, s.window, queue),)))),
        Case("old dead letters, none new in the window: silent", inputs(flat(3, end)), (Check(end, alert),)),
    ]


def _unhandled(s: Scenario) -> list[Case]:
    alert = r.JOBS_WITHOUT_HANDLER
    queue = s.config.classes[-1].name
    for_minutes = s.for_minutes(alert)
    window = minutes(r.unhandled_window(s.config))
    end = window + for_minutes + 1

    def inputs(values: str) -> tuple[Series, ...]:
        return tuple(s.series(m.JOBS_UNHANDLED, values, exporters=2, queue=queue))

    return [
        Case(f"two exporters; a lease of {queue} given back every minute: fires once after for:, counting each once",
             inputs(ramp(1, end)), (*s.edge(alert, 1 + for_minutes, s.firing(alert, min(1 + for_minutes, window), queue)),
                                    Check(end, alert, (s.firing(alert, window, queue),)))),
        Case("a rolling deploy: old workers give back 82 jobs at once, then none: silent before for: elapses, "
             "and once they left the window",
             inputs(f"{flat(0, 2)} {flat(82, end + window)}"),
             (Check(2 + for_minutes - 1, alert), Check(end + window, alert))),
        Case("no lease given back: silent", inputs(flat(0, end)), (Check(end, alert),)),
    ]


def _refused(s: Scenario) -> list[Case]:
    alert = r.TENANT_AT_LIMIT
    queue = s.config.classes[-1].name
    for_minutes = s.for_minutes(alert)
    end = s.window + for_minutes + 1

    def inputs(values: str) -> tuple[Series, ...]:
        return tuple(s.series(m.JOBS_REFUSED, values, exporters=2, queue=queue))

    return [
        Case(f"two exporters; 10 arrivals for {queue} refused every minute: fires once after for:, counting each "
             "refusal once",
             inputs(ramp(10, end)),
             (*s.edge(alert, 1 + for_minutes, s.firing(alert, 10 * min(1 + for_minutes, s.window), queue)),
              Check(end, alert, (s.firing(alert, 10 * s.window, queue),)))),
        Case("one burst of refusals, then none: silent before for: elapses, and once it left the window",
             inputs(f"{flat(0, 2)} {flat(50, end + s.window)}"),
             (Check(2 + for_minutes - 1, alert), Check(end + s.window, alert))),
        Case("no refusals: silent", inputs(flat(0, end)), (Check(end, alert),)),
    ]


def _held(s: Scenario) -> list[Case]:
    """Jobs held by their tenants' dispatch limits while the class is past its SLO (only with such
    limits: the reasons are the config's)."""
    alert = r.TENANTS_HELD_PAST_MAX_AGE
    reasons = hold_reasons(s.config)
    reason = reasons[0]
    cls = s.config.classes[0]
    for_minutes = s.for_minutes(alert)
    end = for_minutes + 2
    slo, over = cls.max_age, cls.max_age + 90

    def shard(index: int, jobs: float, tenants: float, age: float, paused: int = 0,
              exporters: int = 2) -> list[Series]:
        """Shard ``index`` of the class: ``jobs`` of ``tenants`` held for ``reason`` (0 for every
        other reason the config gives, as the exporter serves them), its oldest job ``age`` s old."""
        on = s.shard(index)
        out = s.series(m.QUEUE_OLDEST_AGE, flat(age, end), exporters=exporters, queue=cls.name, shard=on)
        out += s.series(m.QUEUE_MAX_AGE, flat(slo, end), exporters=exporters, queue=cls.name, shard=on)
        out += s.series(m.QUEUE_PAUSED, flat(paused, end), exporters=exporters, queue=cls.name, shard=on)
        for why in reasons:
            held = (jobs, tenants) if why == reason else (0, 0)
            out += s.series(m.QUEUE_HELD_JOBS, flat(held[0], end), exporters=exporters, queue=cls.name, shard=on,
                            reason=why)
            out += s.series(m.QUEUE_HELD_TENANTS, flat(held[1], end), exporters=exporters, queue=cls.name,
                            shard=on, reason=why)
        return out

    def held(age: float = over, paused: int = 0) -> tuple[Series, ...]:
        """Two shards, two exporters each: 40 jobs of 2 tenants held on shard 0, 20 of 1 on shard 1;
        the class's oldest job, ``age``, on shard 0 (shard 1's is a quarter of the SLO old)."""
        return tuple(shard(0, 40, 2, age, paused) + shard(1, 20, 1, slo / 4, paused))

    firing = s.firing(alert, 60, cls.name, {"slo": slo, "age": over, "tenants": 3}, reason=reason)
    labels = {"job": s.job, m.GROUP: s.group, m.QUEUE: cls.name}
    recorded = tuple(
        ExprCheck(end, record, tuple(Sample({**labels, m.REASON: why}, count if why == reason else 0)
                                     for why in reasons))
        for record, count in ((rec.HELD_JOBS, 60), (rec.HELD_TENANTS, 3)))
    return [
        Case(f"two shards, two exporters each: 60 jobs of {cls.name} held ({reason}) while its oldest job is past "
             "its SLO: fires once after for:, for the class and that reason, counting every job and tenant once",
             held(), (*s.edge(alert, for_minutes, firing), Check(end, alert, (firing,))), recorded),
        Case(f"the same, {cls.name}'s oldest job exactly at its SLO: silent", held(age=slo), (Check(end, alert),)),
        Case(f"the same, {cls.name}'s oldest job under its SLO: silent", held(age=slo / 2), (Check(end, alert),)),
        Case(f"the same while {cls.name} is paused (QueuePaused tells that story): silent", held(paused=1),
             (Check(end, alert),)),
        Case(f"{cls.name} past its SLO with no job held (every reason served at 0): silent",
             tuple(shard(0, 0, 0, over) + shard(1, 0, 0, slo / 4)), (Check(end, alert),)),
    ]


def _paused(s: Scenario) -> list[Case]:
    """QueuePaused fires for a forgotten pause (the starvation files show their alerts silent)."""
    alert = r.QUEUE_PAUSED
    cls = s.config.classes[0]
    paused_for = s.for_minutes(alert)
    end = paused_for + 1
    depth = 250

    def inputs(paused: int) -> tuple[Series, ...]:
        return tuple(s.series(m.QUEUE_PAUSED, flat(paused, end), exporters=2, queue=cls.name)
                     + s.series(m.QUEUE_DEPTH, flat(depth, end), exporters=2, queue=cls.name))

    return [
        Case(f"two exporters; {cls.name} stays paused: fires once after for:",
             inputs(1), (*s.edge(alert, paused_for, s.firing(alert, 1, cls.name, {"depth": depth})),
                         Check(end, alert, (s.firing(alert, 1, cls.name, {"depth": depth}),)))),
        Case(f"{cls.name} not paused: silent", inputs(0), (Check(end, alert),)),
    ]


def _unconfigured(s: Scenario) -> list[Case]:
    """Jobs left under a class the config no longer names (removed without --move)."""
    alert = r.JOBS_UNDER_UNCONFIGURED_CLASS
    queue = RETIRED
    for_minutes = s.for_minutes(alert)
    end = for_minutes + 1
    counts = {"queued": 40, "inflight": 3, "delayed": 2}
    age_start = 7200

    def inputs(moved_at: int | None) -> tuple[Series, ...]:
        """The class's jobs; ``moved_at``: the minute `config apply --move` empties it (then the
        exporter stops serving it)."""
        def values(count: float) -> str:
            return flat(count, end) if moved_at is None else f"{flat(count, moved_at - 1)} 0 stale"
        out = [x for state, count in counts.items()
               for x in s.series(m.UNCONFIGURED_JOBS, values(count), exporters=2, queue=queue, state=state)]
        return tuple(out + s.series(m.UNCONFIGURED_OLDEST_AGE, ramp(60, end, age_start), exporters=2, queue=queue))

    total = sum(counts.values())
    return [
        Case(f"two exporters; {total} jobs under {queue}, which the config does not name: fires once after for:",
             inputs(None),
             (*s.edge(alert, for_minutes, s.firing(alert, total, queue, {"age": age_start + 60 * for_minutes})),
              Check(end, alert, (s.firing(alert, total, queue, {"age": age_start + 60 * end}),)))),
        # Moved a minute before for: runs out; with a for: of 1m, at minute 1 (a series needs minute 0).
        Case(f"{queue}'s jobs are moved to a configured class within for:: silent", inputs(max(1, for_minutes - 1)),
             (Check(end, alert),)),
        Case(f"{queue} served with 0 jobs in every state: silent",
             tuple(x for state in counts for x in s.series(m.UNCONFIGURED_JOBS, flat(0, end), queue=queue, state=state)),
             (Check(end, alert),)),
    ]


def _memory_high(s: Scenario) -> list[Case]:
    """Memory fills from below alerts.memory_warning towards redis.memory_headroom."""
    alert = r.REDIS_MEMORY_HIGH
    warning, headroom = alert_settings(s.config).memory_warning, s.config.redis.memory_headroom
    for_minutes = s.for_minutes(alert)
    end = for_minutes + 6
    limit = 1_000_000_000
    step = (headroom - warning) / (for_minutes + 4)  # reaches the headroom only after the alert fires
    fill = [warning + (t - 2) * step for t in range(end + 1)]
    fire_at = 3 + for_minutes

    def inputs(fills: Sequence[float], maxmemory: float, exporters: int = 1) -> tuple[Series, ...]:
        return tuple(s.series(m.REDIS_MEMORY_USED, listed(round(f * limit) for f in fills), exporters=exporters)
                     + s.series(m.REDIS_MEMORY_MAX, flat(maxmemory, end), exporters=exporters))

    return [
        Case(f"two exporters; memory climbs past {number(warning * 100)}%: fires once, while still under the "
             f"{number(headroom * 100)}% headroom",
             inputs(fill, limit, 2),
             (Check(fire_at - 1, alert), Check(fire_at, alert, (s.firing(alert, round(fill[fire_at] * limit) / limit),)))),
        Case(f"memory steady at {number(warning * 90)}%: silent", inputs([warning * 0.9] * (end + 1), limit),
             (Check(end, alert),)),
        Case("no maxmemory (0: no limit): silent however much is used", inputs([5.0] * (end + 1), 0),
             (Check(end, alert),)),
    ]


def _may_evict(s: Scenario) -> list[Case]:
    """An evicting maxmemory-policy, or keys evicted (a policy changed and changed back)."""
    alert = r.REDIS_MAY_EVICT_JOBS
    evicted_at = 2
    # Keys evicted at minute 2 stay in the window until it passes them: check within it, after for:.
    fire_at = evicted_at + s.for_minutes(alert)
    end = max(fire_at, evicted_at + minutes(r.event_window(s.config, alert)) - 1)
    unsafe = "allkeys-lru"

    def inputs(policy: str, evicted: str) -> tuple[Series, ...]:
        return tuple(s.series(m.REDIS_MEMORY_POLICY, flat(1, end), exporters=2, policy=policy)
                     + s.series(m.REDIS_EVICTED_KEYS, evicted, exporters=2))

    jumped = f"{flat(0, evicted_at - 1)} {flat(250, end - evicted_at)}"
    return [
        Case(f"two exporters; maxmemory-policy {unsafe}: fires once, naming the policy",
             inputs(unsafe, flat(0, end)), (Check(end, alert, (s.firing(alert, 1, policy=unsafe),)),)),
        Case(f"{m.SAFE_POLICY} again, but keys were evicted meanwhile: fires without a policy",
             inputs(m.SAFE_POLICY, jumped), (Check(fire_at - 1, alert), Check(fire_at, alert, (s.firing(alert, 0),)),
                                            Check(end, alert, (s.firing(alert, 0),)))),
        Case(f"{unsafe} and keys evicted: fires once, for the policy",
             inputs(unsafe, jumped), (Check(fire_at, alert, (s.firing(alert, 1, policy=unsafe),)),)),
        Case(f"{m.SAFE_POLICY} and nothing evicted: silent", inputs(m.SAFE_POLICY, flat(0, end)), (Check(end, alert),)),
    ]


def _exporter_down(s: Scenario) -> list[Case]:
    alert = r.FAIRNESS_EXPORTER_DOWN
    end = s.for_minutes(alert) + 1
    up = r.UP

    def inputs(*values: int) -> tuple[Series, ...]:
        return tuple(Series(up, {"job": s.job, **scrape}, flat(value, end)) for scrape, value in zip(EXPORTERS, values))

    return [
        Case("both exporters down: fires once after for:", inputs(0, 0),
             s.edge(alert, end - 1, s.firing_on_up(alert, 0))),
        Case("no exporter target at all: fires", (), (Check(end, alert, (s.firing_on_up(alert, 1),)),)),
        Case("one of two exporters down, the other still sees: silent", inputs(0, 1), (Check(end, alert),)),
    ]


def _redis_down(s: Scenario) -> list[Case]:
    alert = r.FAIRNESS_EXPORTER_REDIS_DOWN
    end = s.for_minutes(alert) + 1

    master = "10.0.0.1:6379"

    def inputs(*values: int) -> tuple[Series, ...]:
        """Each exporter's redis_up, and the master both last read from the slot map."""
        where = {"job": s.job, m.GROUP: s.group, m.SHARD: s.group}
        return tuple(x for scrape, value in zip(EXPORTERS, values) for x in (
            Series(m.EXPORTER_REDIS_UP.name, {**where, **scrape}, flat(value, end)),
            Series(m.REDIS_MASTER.name, {**where, **scrape, m.MASTER: master}, flat(1, end))))

    return [
        Case("no exporter can read Redis: fires once after for:, naming the Redis", inputs(0, 0),
             s.edge(alert, end - 1, s.firing(alert, 0, None, {"master": master}, shard=s.group))),
        Case("one exporter cannot read Redis, the other can: silent", inputs(0, 1), (Check(end, alert),)),
    ]


def _state_lost(s: Scenario) -> list[Case]:
    alert = r.QUEUE_STATE_LOST
    fire_at, reset_at = 3 + s.for_minutes(alert), 3
    window = minutes(r.event_window(s.config, alert))
    end = reset_at + window + 2

    def resets(values: str, **labels: str) -> list[Series]:
        return s.series(m.STATE_RESETS, values, exporters=2, **labels)

    lost = f"{flat(0, reset_at - 1)} {flat(1, end - reset_at)}"  # two exporters both see it at minute 3
    return [
        Case(f"two exporters find the group's state reset at minute {reset_at}: fires once after for:, naming the "
             f"shard; resolves {window}m after", tuple(resets(lost)),
             (Check(fire_at - 1, alert), Check(fire_at, alert, (s.firing(alert, 1, shard=s.group),)),
              Check(reset_at + window - 1, alert, (s.firing(alert, 1, shard=s.group),)),
              Check(reset_at + window + 1, alert))),
        Case("an exporter restarts (its count starts again at 0): silent",
             tuple(resets(f"{flat(0, reset_at - 1)} stale {flat(0, end - reset_at - 1)}")), (Check(fire_at, alert),)),
        Case("no reset: silent", tuple(resets(flat(0, end))), (Check(end, alert),)),
    ]


def _config_split(s: Scenario) -> list[Case]:
    alert = r.QUEUE_CONFIG_SPLIT
    applied_at = 2
    fire_at = applied_at + s.for_minutes(alert)
    end = fire_at + 2
    old, new = "0123456789abcdef", "fedcba9876543210"  # fingerprints as the group's

    def shard(index: int | None, changed_at: int | None, exporters: int = 2) -> list[Series]:
        """A shard's config (None: the unsharded queue, its own shard): ``old``, then ``new`` from
        minute ``changed_at`` (None: never), the old series going stale as an exporter drops it."""
        labels = {} if index is None else {m.SHARD: s.shard(index)}
        if changed_at is None:
            return s.series(m.GROUP_CONFIG, flat(1, end), exporters=exporters, fingerprint=old, **labels)
        return (s.series(m.GROUP_CONFIG, f"{flat(1, changed_at - 1)} stale", exporters=exporters, fingerprint=old,
                         **labels)
                + s.series(m.GROUP_CONFIG, f"_x{changed_at} {flat(1, end - changed_at)}", exporters=exporters,
                           fingerprint=new, **labels))

    lagging = applied_at + s.for_minutes(alert) - 1  # split for one evaluation less than for:
    return [
        Case(f"shards 0 and 1 of three take a new config at minute {applied_at} and shard 2 never does (the apply's "
             "process died): fires after for:, once for the queue",
             tuple(shard(0, applied_at) + shard(1, applied_at) + shard(2, None)),
             (Check(fire_at - 1, alert), Check(fire_at, alert, (s.firing(alert, 2),)),
              Check(end, alert, (s.firing(alert, 2),)))),
        Case(f"shard 2 takes it {lagging - applied_at}m after the others (sooner than for:): silent",
             tuple(shard(0, applied_at) + shard(1, applied_at) + shard(2, lagging)),
             tuple(Check(t, alert) for t in range(applied_at, end + 1))),
        Case("an unsharded queue changes config, one exporter a minute after the other: silent",
             tuple(shard(None, applied_at, exporters=1)
                   + [replace(x, labels={**x.labels, **EXPORTERS[1]})
                      for x in shard(None, applied_at + 1, exporters=1)]),
             tuple(Check(t, alert) for t in range(applied_at, end + 1))),
    ]


def _master_changed(s: Scenario) -> list[Case]:
    alert = r.REDIS_MASTER_CHANGED
    changed_at = 3
    fire_at = changed_at + s.for_minutes(alert)
    window = minutes(r.event_window(s.config, alert))
    end = changed_at + window + 2
    old, new = "10.0.0.1:6379", "10.0.0.2:6379"
    old_run, new_run = "a" * 40, "b" * 40  # INFO server's run_id: 40 hex digits, drawn at each start
    before = f"{flat(1, changed_at - 1)} stale"  # served until the change, then dropped
    after = f"_x{changed_at} {flat(1, end - changed_at)}"  # served from the change on

    def master(address: str, run_id: str, values: str, *exporters: int) -> list[Series]:
        """The master's series as the exporters numbered ``exporters`` (default: the first) serve it."""
        both = s.series(m.REDIS_MASTER, values, exporters=2, master=address, run_id=run_id)
        return [both[i] for i in exporters or (0,)]

    def firing(address: str) -> Firing:
        return s.firing(alert, 2, None, {"master": address}, shard=s.group)

    silent = tuple(Check(t, alert) for t in range(changed_at, end + 1))
    return [
        Case(f"a failover at minute {changed_at}, seen by two exporters: fires once after for:, naming the new "
             f"master; resolves {window}m after the old one's last read",
             tuple(master(old, old_run, before, 0, 1) + master(new, new_run, after, 0, 1)),
             (*s.edge(alert, fire_at, firing(new)), Check(changed_at + window - 1, alert, (firing(new),)),
              Check(changed_at + window + 1, alert))),
        Case("the master restarts at the same address (another run_id): fires",
             tuple(master(old, old_run, before) + master(old, new_run, after)), (Check(fire_at, alert, (firing(old),)),)),
        Case("an exporter starts while Redis is down (its run_id not read yet), then reads it: silent",
             tuple(master(old, "", before) + master(old, old_run, after)), silent),
        Case("an exporter restarts (two scrapes missed), and another pod comes beside it, on the same master: silent",
             tuple(master(old, old_run, f"{before} _ {flat(1, end - changed_at - 2)}")
                   + master(old, old_run, f"_x{changed_at + 1} {flat(1, end - changed_at - 1)}", 1)), silent),
    ]


def _recording(s: Scenario) -> list[Case]:
    """Two exporters serving the same queues: every recorded figure counts them once."""
    end = s.window + 1
    weights = s.classes(max(2, len(s.config.classes)))
    per_minute = {name: max(1, round(600 * w)) for name, w in weights}
    # Less urgent classes run longer jobs, so shares of worker time differ from shares of jobs.
    seconds_per_minute = {name: per_minute[name] * 0.5 * (i + 1) for i, (name, _) in enumerate(weights)}
    by_counter: dict[m.MetricSpec, Mapping[str, float]] = {m.JOBS_PROCESSED: per_minute,
                                                           m.QUEUE_WORKER_SECONDS: seconds_per_minute}
    served = by_counter[s.basis.counter]
    series = [x for name, w in weights for x in (
        *s.series(m.QUEUE_DEPTH, flat(7, end), exporters=2, queue=name),
        *s.series(m.QUEUE_WEIGHT_RATIO, flat(w, end), exporters=2, queue=name),
        *s.series(m.JOBS_PROCESSED, ramp(per_minute[name], end), exporters=2, queue=name),
        *s.series(m.QUEUE_WORKER_SECONDS, ramp(seconds_per_minute[name], end), exporters=2, queue=name),
        *s.shares(flat(0.25, end), exporters=2, queue=name))]

    def samples(value: Callable[[str], float]) -> tuple[Sample, ...]:
        return tuple(Sample({"job": s.job, m.GROUP: s.group, m.QUEUE: name}, value(name)) for name, _ in weights)

    # One class over three shards: tenant-1 has half of shard 0's service (60 a minute) and is
    # outside shard 1's top list (180 a minute); shard 2 serves none of the class.
    name = weights[0][0]
    over_shards = [x for index, (depth, age, rate) in enumerate(((5, 30, 60), (7, 90, 180), (0, 0, 0)))
                   for x in (*s.series(m.QUEUE_DEPTH, flat(depth, end), queue=name, shard=s.shard(index)),
                             *s.series(m.QUEUE_OLDEST_AGE, flat(age, end), queue=name, shard=s.shard(index)),
                             *s.series(m.QUEUE_WEIGHT_RATIO, flat(weights[0][1], end), queue=name, shard=s.shard(index)),
                             *s.series(s.basis.counter, ramp(rate, end), queue=name, shard=s.shard(index)))]
    over_shards += s.shares(flat(0.5, end), queue=name, shard=s.shard(0))
    over_shards += [x for index, age in enumerate((30, 90, 0))
                    for x in s.series(m.UNCONFIGURED_OLDEST_AGE, flat(age, end), queue=RETIRED, shard=s.shard(index))]
    series += s.series(m.UNCONFIGURED_OLDEST_AGE, flat(120, end), exporters=2, queue=RETIRED)
    logical = {"job": s.job, m.GROUP: s.group, m.QUEUE: name}
    retired = {"job": s.job, m.GROUP: s.group, m.QUEUE: RETIRED}
    return [_recorded_windows(s), Case(
        "three shards of one logical queue: depth summed, oldest age the oldest, a tenant's share over every shard",
        tuple(over_shards), expr_checks=(
            ExprCheck(end, rec.DEPTH, (Sample(logical, 12),)),
            ExprCheck(end, rec.OLDEST_AGE, (Sample(logical, 90),)),
            ExprCheck(end, s.basis.rate, (Sample(logical, 4),)),
            *s.share_checks(end, 0.5 * 60 / 240, logical),
            ExprCheck(end, rec.UNCONFIGURED_AGE, (Sample(retired, 90),)),
        )), Case(
        "two exporters serve identical series: depth, rates and shares are those of one",
        tuple(series), expr_checks=(
            ExprCheck(end, rec.DEPTH, samples(lambda name: 7)),
            ExprCheck(end, rec.PROCESSED_RATE, samples(lambda name: per_minute[name] / 60)),
            ExprCheck(end, rec.WORKER_RATE, samples(lambda name: seconds_per_minute[name] / 60)),
            ExprCheck(end, s.basis.share, samples(lambda name: served[name] / sum(served.values()))),
            *s.share_checks(end, 0.25, *({"job": s.job, m.GROUP: s.group, m.QUEUE: name} for name, _ in weights)),
            ExprCheck(end, rec.UNCONFIGURED_AGE, (Sample(retired, 120),)),
        ))]


def _recorded_windows(s: Scenario) -> Case:
    """Every windowed recording reads its whole window: each counter's rate triples after the
    window's first minute (the first half of the rate window, for a window of 2m or less), the
    class's depth is 0 and another class is paused only at the window's first sample, and a class
    with no completions in the window has no tenant shares (not 0/0)."""
    window, budget = s.window, minutes(s.config.scheduler.budget_window)
    end = max(window, budget) + 1
    names = [name for name, _ in s.classes(3)]
    busy, paused, idle = names
    labels = {"job": s.job, m.GROUP: s.group}

    def turn(window: int) -> int:
        """The last minute at the first rate: one increment of the window at it, none of the half window."""
        return end - max(1, window - 1)

    def counter(slow: float, window: int) -> str:
        at = turn(window)
        return f"{ramp(slow, at)} {ramp(3 * slow, end - at - 1, slow * at + 3 * slow)}"

    def rate(slow: float, window: int) -> float:
        at = turn(window)
        return (slow * (at - (end - window)) + 3 * slow * (end - at)) / (window * 60)

    def first_sample(value: float, then: float) -> str:
        return f"{flat(value, end - window)} {flat(then, window - 1)}"

    series = [
        *s.series(m.QUEUE_DEPTH, first_sample(0, 5), queue=busy), *s.series(m.QUEUE_PAUSED, flat(0, end), queue=busy),
        *s.series(m.QUEUE_DEPTH, flat(5, end), queue=paused), *s.series(m.QUEUE_PAUSED, first_sample(1, 0), queue=paused),
        *s.series(m.QUEUE_DEPTH, flat(5, end), queue=idle), *s.series(m.QUEUE_PAUSED, flat(0, end), queue=idle),
        *s.series(m.JOBS_PROCESSED, counter(60, window), queue=busy),
        *s.series(m.QUEUE_WORKER_SECONDS, counter(30, window), queue=busy),
        *s.series(m.JOBS_REDELIVERED, counter(6, window), queue=busy),
        *s.series(m.JOBS_ENQUEUED, counter(60, budget), queue=busy, reason=(s.reasons(busy) or ["default"])[0]),
        *s.series(m.JOBS_DEMOTED, counter(10, budget), queue=busy),
        *s.series(m.JOBS_REJECTED, counter(20, budget), queue=busy),
        *s.shares(flat(0.25, end), queue=busy),
        *s.series(m.JOBS_PROCESSED, flat(0, end), queue=idle), *s.series(m.QUEUE_WORKER_SECONDS, flat(0, end), queue=idle),
        *s.shares(flat(0.25, end), queue=idle),
        # A class with a weight and nothing counted in the window: its rates are 0, not absent.
        *s.series(m.QUEUE_WEIGHT_RATIO, flat(0.5, end), queue=paused),
        *s.series(m.JOBS_DEMOTED, flat(0, end), queue=paused), *s.series(m.JOBS_REJECTED, flat(0, end), queue=paused),
    ]
    # Waits: the first rate's jobs within the first bound, the tripled rate's up to the second.
    low, high = m.WAIT_BUCKETS[:2]
    at = turn(window)
    for bound in (*m.WAIT_BUCKETS, math.inf):
        values = (flat(0, end) if bound < low else counter(60, window) if bound >= high
                  else f"{ramp(60, at)} {flat(60 * at, end - at - 1)}")
        series += s.series(m.JOBS_WAIT, values, suffix="_bucket", queue=busy, **{BUCKET_LABEL: floatToGoString(bound)})
    under, total = 60 * (at - (end - window)) / (window * 60), rate(60, window)
    p99 = low + (high - low) * ((0.99 * total - under) / (total - under))
    one = {**labels, m.QUEUE: busy}
    none = (Sample({**labels, m.QUEUE: paused}, 0), Sample({**labels, m.QUEUE: idle}, 0))
    return Case(
        "rates change within the window, depth and pauses at its first sample: each recording reads the whole window",
        tuple(series), expr_checks=(
            ExprCheck(end, rec.PROCESSED_RATE, (Sample(one, rate(60, window)), *none)),
            ExprCheck(end, rec.WORKER_RATE, (Sample(one, rate(30, window)), *none)),
            ExprCheck(end, rec.REDELIVERED_RATE, (Sample(one, rate(6, window)),)),
            ExprCheck(end, rec.ENQUEUED_RATE, (Sample({**one, m.REASON: (s.reasons(busy) or ["default"])[0]},
                                                     rate(60, budget)),)),
            ExprCheck(end, rec.REQUESTED_RATE, (Sample(one, rate(60, budget) + rate(10, budget) + rate(20, budget)),
                                                Sample({**labels, m.QUEUE: paused}, 0))),
            ExprCheck(end, rec.WAIT_P99, (Sample(one, p99),)),
            ExprCheck(end, rec.BACKLOGGED, tuple(Sample({**labels, m.QUEUE: name}, float(name == idle)) for name in names)),
            *s.share_checks(end, 0.25, one),
        ))


REASON_SHIFT_STEP = 5  # minutes between samples: a day of history stays small


def test_files(config: Config) -> tuple[TestFile, ...]:
    """One file per alert the config's exporter can feed (named after it) and, for fairctl's own
    queues, one for the recording rules."""
    kept = {alert.name for alert in r.build_alerts(config)} | ({"recording"} if watched(config) is None else set())
    served = served_metrics(config)
    if served is None:
        return tuple(f for f in _every_test_file(config) if f.name in kept)
    files = (replace(f, cases=tuple(_served_case(c, served) for c in f.cases if _possible(c, served)))
             for f in _every_test_file(config) if f.name in kept)
    return tuple(f for f in files if f.cases)


def _possible(case: Case, served: frozenset[str]) -> bool:
    """Whether an exporter serving only ``served`` can show ``case``: a case fed a series it never
    serves at a value but zero (a pause, for a system whose pauses it cannot see) cannot happen."""
    return all(series_metric(x.name) in served or _ZERO.match(x.values) for x in case.series)


def _served_case(case: Case, served: frozenset[str]) -> Case:
    """``case`` less its zero series of metrics not ``served`` (absent there, as a zero would be)."""
    return replace(case, series=tuple(x for x in case.series if series_metric(x.name) in served))


def _every_test_file(config: Config) -> tuple[TestFile, ...]:
    s = Scenario(config)
    return (
        TestFile(r.QUEUE_STARVING, tuple(_starving(s))),
        TestFile(r.QUEUE_SHARE_BELOW_WEIGHT, tuple(_share_below_weight(s))),
        TestFile(r.PRIORITY_MIX_DRIFT, tuple(_mix_drift(s))),
        TestFile(r.PRIORITY_REASON_SHIFT, tuple(_reason_shift(s, REASON_SHIFT_STEP)), REASON_SHIFT_STEP),
        TestFile(r.dominating_alert(rec.level(config)), tuple(_dominating(s, rec.level(config)))),
        TestFile(r.QUIET_TENANTS_STARVING, tuple(_quiet_tenants(s))),
        TestFile(r.QUEUE_STALLED, tuple(_stalled(s))),
        TestFile(r.QUEUE_SHARD_STALLED, tuple(_shard_stalled(s))),
        TestFile(r.PRIORITY_INVERSION, tuple(_inversion(s))),
        TestFile(r.JOBS_REDELIVERED_HIGH, tuple(_redelivered(s))),
        TestFile(r.JOBS_DEAD_LETTERED, tuple(_dead_lettered(s))),
        TestFile(r.JOBS_WITHOUT_HANDLER, tuple(_unhandled(s))),
        TestFile(r.QUEUE_PAUSED, tuple(_paused(s))),
        TestFile(r.JOBS_UNDER_UNCONFIGURED_CLASS, tuple(_unconfigured(s))),
        TestFile(r.REDIS_MEMORY_HIGH, tuple(_memory_high(s))),
        TestFile(r.REDIS_MAY_EVICT_JOBS, tuple(_may_evict(s))),
        TestFile(r.FAIRNESS_EXPORTER_DOWN, tuple(_exporter_down(s))),
        TestFile(r.FAIRNESS_EXPORTER_REDIS_DOWN, tuple(_redis_down(s))),
        TestFile(r.TENANT_AT_LIMIT, tuple(_refused(s))),
        *((TestFile(r.TENANTS_HELD_PAST_MAX_AGE, tuple(_held(s))),) if rec.holds(config) else ()),
        TestFile(r.QUEUE_STATE_LOST, tuple(_state_lost(s))),
        TestFile(r.QUEUE_CONFIG_SPLIT, tuple(_config_split(s))),
        TestFile(r.REDIS_MASTER_CHANGED, tuple(_master_changed(s))),
        TestFile("recording", tuple(_recording(s))),
    )


# ---------------------------------------------------------------------------------- promtool YAML

def document(config: Config, test_file: TestFile) -> dict[str, Any]:
    """The promtool test file, its rule file named relative to it (as promtool resolves it)."""
    alerts = {a.name: a for a in r.build_alerts(config)}
    step = f"{test_file.interval_minutes}m"
    rules_path = "/".join([".."] * len(TESTS_DIR.parts) + [str(RULES_FILE)])

    def expected(alert: r.Alert, firing: Firing) -> dict[str, Any]:
        texts = {"summary": alert.summary, "description": alert.description, **r.links(config, alert.name)}
        return {"exp_labels": dict(firing.labels),
                "exp_annotations": {k: t.render(firing.labels, firing.value, firing.queried) for k, t in texts.items()}}

    def case(c: Case) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": c.name, "interval": step,
            "input_series": [{"series": x.text(), "values": x.values} for x in c.series],
        }
        if c.checks:
            out["alert_rule_test"] = [
                {"eval_time": f"{chk.minute}m", "alertname": chk.alert,
                 "exp_alerts": [expected(alerts[chk.alert], f) for f in chk.firing]} for chk in c.checks]
        if c.expr_checks:
            # Rounded: promtool compares exactly, and rate()'s extrapolation leaves float noise.
            out["promql_expr_test"] = [
                {"expr": f"round({chk.record}, {number(EXPR_PRECISION)})", "eval_time": f"{chk.minute}m",
                 "exp_samples": [{"labels": Series("", x.labels, "").text(), "value": prom_round(x.value, EXPR_PRECISION)}
                                 for x in chk.samples]} for chk in c.expr_checks]
        return out

    return {"rule_files": [rules_path], "evaluation_interval": step, "tests": [case(c) for c in arranged(test_file.cases)]}
