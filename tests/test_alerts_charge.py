"""The alerts under each ``scheduler.charge``: under ``runtime`` the realised shares are shares of
worker time (``queue_worker_seconds_total``) and the rules, their promtool tests and the runbooks
say so; under ``jobs`` they are shares of completions, as before. Worker time is recorded under
both, so an operator sees the worker-time imbalance before switching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import promtool, recording
from alerts.layout import RULES_FILE, TESTS_DIR, runbook_file
from alerts.output import render
from alerts.rules import ALERTS_SERIES, QUEUE_SHARE_BELOW_WEIGHT, TENANT_DOMINATING_QUEUE, UP
from alerts.runbooks import diagnostics
from alerts.weights import notes, weights_report
from exporter import metrics as m
from fairness_core import Config, parse_config
from fairness_core.config import CHARGES

from .support import promtool_passes_generated_tests
from .test_alerts import generate_into, metric_names
from .test_config import with_change

COUNTERS = {"jobs": m.JOBS_PROCESSED, "runtime": m.QUEUE_WORKER_SECONDS}
# What each basis's alert texts speak of, and what they must not.
WORDS = {"jobs": "jobs completed", "runtime": "worker time"}


def charged(charge: str) -> Config:
    return parse_config(with_change("scheduler.charge", charge))


def rules_of(config: Config) -> dict[str, dict[str, Any]]:
    """Recording and alerting rules by name (the first of an alert's rules)."""
    rules = yaml.safe_load(render(config)[RULES_FILE])["groups"][0]["rules"]
    out: dict[str, dict[str, Any]] = {}
    for rule in rules:
        out.setdefault(rule.get("alert") or rule["record"], rule)
    return out


def test_every_charge_has_a_basis() -> None:
    assert set(recording.BASES) == set(CHARGES) == set(COUNTERS)


def test_rules_and_unit_tests_generated_under_charge_runtime_pass_promtool(tmp_path: Path) -> None:
    generated = generate_into(charged("runtime"), tmp_path)
    promtool.check_rules(generated / RULES_FILE)
    assert len(list((generated / TESTS_DIR).glob("*.yml"))) > 10
    promtool_passes_generated_tests(generated, tmp_path / "pruned")
    # The share alert's cases feed worker time only: the rules read no completions for it.
    share_case = yaml.safe_load((generated / TESTS_DIR / f"{QUEUE_SHARE_BELOW_WEIGHT}.yml").read_text())
    fed = {s["series"].split("{")[0] for case in share_case["tests"] for s in case["input_series"]}
    assert m.QUEUE_WORKER_SECONDS.name in fed and m.JOBS_PROCESSED.name not in fed


@pytest.mark.parametrize("charge", sorted(COUNTERS))
def test_the_shares_alerts_and_runbooks_follow_the_configured_basis(charge: str) -> None:
    config = charged(charge)
    basis, (other,) = recording.basis(config), {c for c in COUNTERS if c != charge}
    assert basis.counter is COUNTERS[charge]
    rules = rules_of(config)
    assert metric_names(rules[basis.rate]["expr"]) == {basis.counter.name, recording.WEIGHT_RATIO}
    assert metric_names(rules[basis.share]["expr"]) == {basis.rate}
    assert basis.backlogged_share in rules[QUEUE_SHARE_BELOW_WEIGHT]["expr"]
    assert basis.tenant_share in rules[TENANT_DOMINATING_QUEUE]["expr"]
    assert recording.WORKER_RATE in rules, "worker time is recorded whatever the charge"
    others = recording.BASES[other]
    assert not {others.share, others.backlogged_share, others.tenant_share} & set(rules)
    for alert in (QUEUE_SHARE_BELOW_WEIGHT, TENANT_DOMINATING_QUEUE):
        description = rules[alert]["annotations"]["description"]
        assert WORDS[charge] in description and WORDS[other] not in description, (alert, description)
    # Every name the rules and runbook queries use is served or recorded.
    contract = {spec.name for spec in m.ALL} | {m.JOBS_WAIT.series(s) for s in ("_bucket", "_sum", "_count")}
    expressions = [r["expr"] for r in rules.values()] + [d.promql for d in diagnostics(config).values()]
    used = set().union(*map(metric_names, expressions))
    assert used <= contract | set(rules) | {UP, ALERTS_SERIES}, used - contract - set(rules)
    runbooks = render(config)
    assert f"of a class's {basis.served} over" in runbooks[runbook_file(TENANT_DOMINATING_QUEUE)]
    share_runbook = runbooks[runbook_file(QUEUE_SHARE_BELOW_WEIGHT)]
    assert f"{basis.share} / " in share_runbook
    assert ("is not reported" in share_runbook) == (charge == "runtime")


def test_the_weights_lint_reads_weights_as_shares_of_worker_time_under_runtime() -> None:
    """The example's bulk class runs 10x longer jobs than the urgent one: counted in jobs its weight
    of 10 buys 40% of the slot time, charged by runtime only 10%, less than the 10.4% it needs."""
    by_jobs, by_runtime = (weights_report(charged(c)).classes[2] for c in ("jobs", "runtime"))
    assert (by_jobs.guaranteed, by_jobs.short) == (pytest.approx(0.4), False)
    assert (by_runtime.guaranteed, by_runtime.short, by_runtime.min_weight) == (pytest.approx(0.1), True, 11)
    report = weights_report(charged("runtime"))
    assert sum(c.weight_share for c in report.classes) == pytest.approx(1)
    assert report.classes[0].weight_share > report.classes[0].guaranteed  # short jobs: more pops than time
    assert any("scheduler.charge: runtime" in line for line in notes(report))
    data = with_change("scheduler.charge", "runtime")
    data["classes"][2]["weight"] = 11
    assert not weights_report(parse_config(data)).warnings()
