"""Cases of one test file side by side in one promtool test group, each in its own queue group.

promtool evaluates every rule of the rules file at every evaluation step from minute 0 to a test
group's last check, group after group, so a file's time grows with the sum of its groups' lengths.
Cases whose series all carry the ``group`` label cannot see each other once each case's ``group``
and ``shard`` values get a suffix of their own (``fq`` becomes ``fq#3`` in the file's third case):
every rule keeps ``group`` through its aggregations and matchings. So those cases run as one test
group, as long as the longest of them, and a file costs about two cases' time instead of one per
case. A packed case checks its alerts through Prometheus's ``ALERTS`` series, scoped to its own
groups; an ``alert_rule_test`` would list every case's alerts at once. So the first case where
the alert fires stays alone, with its exact labels, value and annotations; so does any case with
a series or an alert without ``group`` (Prometheus's own ``up``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from exporter import metrics as m

from .promql import quote
from .unittest_cases import Case, Check, ExprCheck, Firing, Sample, Series

MARK = "#"  # between a group's name and its case's number
SCOPED = (m.GROUP, m.SHARD)  # the labels renamed per case
PACKED_NAME = f"side by side, each case in its own queue group (the {m.GROUP} label ends in {MARK} and its number)"


def arranged(cases: Sequence[Case]) -> tuple[Case, ...]:
    """``cases`` as promtool test groups: the cases that must stay alone, then (when at least two
    can) the others packed into one."""
    headline = next((c for c in cases if any(chk.firing for chk in c.checks)), None)
    packable = [(number, c) for number, c in enumerate(cases, 1) if c is not headline and _packable(c)]
    if len(packable) < 2:
        return tuple(cases)
    packed_ids = {id(c) for _, c in packable}
    alone = tuple(c for c in cases if id(c) not in packed_ids)
    return (*alone, packed(packable))


def _packable(case: Case) -> bool:
    return (bool(case.series) and all(m.GROUP in x.labels for x in case.series)
            and all(m.GROUP in f.labels for chk in case.checks for f in chk.firing))


def packed(numbered: Sequence[tuple[int, Case]]) -> Case:
    """One case holding each numbered case's series and checks, in its own groups."""
    series: list[Series] = []
    checks: list[ExprCheck] = []
    for number, case in numbered:
        series += [replace(x, labels=scoped(x.labels, number)) for x in case.series]
        checks += [alerts_check(chk, number) for chk in case.checks]
        checks += [replace(chk, record=within(chk.record, number),
                           samples=tuple(replace(s, labels=scoped(s.labels, number)) for s in chk.samples))
                   for chk in case.expr_checks]
    names = "; ".join(f"{MARK}{number}: {case.name}" for number, case in numbered)
    return Case(f"{PACKED_NAME}: {names}", tuple(series), (), tuple(checks))


def scoped(labels: Mapping[str, str], number: int) -> dict[str, str]:
    """``labels`` with each group and shard name suffixed with the case's number."""
    return {k: f"{v}{MARK}{number}" if k in SCOPED else v for k, v in labels.items()}


def matcher(number: int) -> str:
    """The label matcher of one packed case's series (a regex matches the whole value)."""
    return f"{m.GROUP}=~{quote(f'.*{MARK}{number}')}"


def within(selector: str, number: int) -> str:
    """An expression reading one series selector (``name``, ``name{...}`` or an aggregation of
    ``name{...}``), scoped to one packed case's groups."""
    if "{" in selector:
        return selector.replace("{", "{" + matcher(number) + ", ", 1)
    if selector.replace(":", "").replace("_", "").isalnum():
        return f"{selector}{{{matcher(number)}}}"
    raise ValueError(f"cannot scope {selector!r}: it reads no series selector")


def alerts_check(check: Check, number: int) -> ExprCheck:
    """An alert check as the ``ALERTS`` series of its firing alerts in one packed case: the same
    label sets, without the value and annotations."""
    selector = f"ALERTS{{alertname={quote(check.alert)}, alertstate=\"firing\"}}"

    def sample(firing: Firing) -> Sample:
        return Sample({**scoped(firing.labels, number), "alertname": check.alert, "alertstate": "firing"}, 1)

    return ExprCheck(check.minute, within(selector, number), tuple(sample(f) for f in check.firing))
