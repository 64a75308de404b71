"""A tenant's dispatch limit in the simulator: the downstream-limit scenario run without and with
``tenants.overrides.acme: {dispatch_rate: 5/s, max_in_flight: 5}``, the starts per second each run
tells of the limited tenant and the waits of the tenants beside it, the ``starts_per_second``
check, and idle slots woken when a rate hold comes due (simulation only: no Redis, no promtool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fairctl.simulate_command import as_json, render
from fairness_core import ConfigError
from fairness_sim.policies import Outcome
from fairness_sim.report import write_report
from fairness_sim.scenario import load_scenario, parse_scenario
from fairness_sim.simulator import simulate
from fairness_sim.starts import StartFigures, TenantStarts

from .conftest import EXAMPLE_CONFIG

RATE = 5.0  # jobs a second acme's endpoint takes: the limited variant's dispatch_rate
# The shops' p95 wait under the limit: they find a free slot at once (the fleet is 60% busy).
OTHERS_P95_BOUND_S = 0.05


@pytest.fixture(scope="module")
def runs() -> tuple[Any, list[Outcome]]:
    scenario = load_scenario("downstream-limit")
    return scenario, [Outcome(simulate(scenario, run), None) for run in scenario.run_names()]


def starts(outcome: Outcome) -> tuple[TenantStarts, StartFigures]:
    figures = outcome.run.starts
    assert figures is not None
    return figures.tenants["acme"], figures


def test_it_runs_acme_without_and_with_its_limit(runs: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = runs
    assert scenario.run_names() == ("weighted-fair/unlimited", "weighted-fair/limited")
    assert scenario.watched_tenants == ("acme",) and scenario.downstream_rate("acme") == RATE
    assert scenario.variants["unlimited"].tenants.overrides == {}
    limit = scenario.variants["limited"].tenants.overrides["acme"]
    assert (limit.dispatch_rate, limit.max_in_flight, limit.dispatch_burst) == (RATE, 5, None)
    assert [starts(o)[0].limit for o in outcomes] == [None, "dispatch_rate 5/s, burst 1, max_in_flight 5"]


def test_limited_acme_starts_5_a_second_and_never_more(runs: tuple[Any, list[Outcome]]) -> None:
    """A GCRA bucket of 5/s and burst 1 starts a job every 200 ms at most: no second of the clock
    holds more than 5 (within rate + burst, the bound of any burst), and acme, always backlogged,
    gets all of them (its downstream takes what it can, not less)."""
    scenario, outcomes = runs
    acme, _ = starts(outcomes[1])
    burst = 1
    assert acme.peak <= RATE + burst and acme.peak == RATE
    assert acme.over(RATE) == (0, 0)
    assert acme.mean_rate == pytest.approx(RATE, abs=0.1)
    assert acme.started == pytest.approx(RATE * scenario.duration, rel=0.02)
    assert acme.peak_in_flight <= 5


def test_unlimited_acme_starts_far_more_than_its_downstream_takes(runs: tuple[Any, list[Outcome]]) -> None:
    """Without the limit fair queuing gives acme what the shops leave of 20 slots: about 24 jobs
    a second, over 5 in nearly every second."""
    acme, _ = starts(runs[1][0])
    seconds, beyond = acme.over(RATE)
    assert acme.mean_rate >= 4 * RATE and acme.peak >= 6 * RATE
    assert seconds >= 0.95 * acme.span_s and beyond >= 2000
    assert acme.peak_in_flight == 20  # every slot calling acme's endpoint at once


def test_the_shops_wait_no_longer_under_the_limit(runs: tuple[Any, list[Outcome]]) -> None:
    unlimited, limited = (starts(o)[1] for o in runs[1])
    assert unlimited.others == limited.others == 50
    assert limited.others_wait_p95_s is not None and unlimited.others_wait_p95_s is not None
    assert limited.others_wait_p99_s is not None and unlimited.others_wait_p99_s is not None
    assert limited.others_wait_p95_s <= min(OTHERS_P95_BOUND_S, unlimited.others_wait_p95_s)
    assert limited.others_wait_p99_s <= unlimited.others_wait_p99_s


def test_simulate_says_what_downstream_limit_expects(runs: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = runs
    assert all(o.violations(scenario, outcomes) == [] for o in outcomes)
    text = render(scenario, outcomes, None)
    unlimited, limited = text.split("policy weighted-fair, limited")
    assert "starts of acme (no limit): " in unlimited and "; peak 37 in a second, 20 at once; over 5/s " in unlimited
    assert "checked: acme's busiest second: 37 jobs started (expected at least 10)" in unlimited
    assert ("starts of acme (dispatch_rate 5/s, burst 1, max_in_flight 5): 600 in 2m0s, 5.0/s; peak 5 in a second"
            in limited) and "in 0 of 120 seconds\n" in limited
    assert "checked: acme's busiest second: 5 jobs started (expected at most 5)" in limited
    assert text.count("other tenants' waits (50 tenants beside acme): p95 ") == 2
    assert text.count("as expected by the scenario") == 2 and "EXPECTATION FAILED" not in text
    document = as_json(scenario, outcomes)["policies"]
    limited_json = document["weighted-fair/limited"]["starts"]
    assert limited_json["tenants"]["acme"]["peak_per_s"] == 5 and limited_json["tenants"]["acme"]["jobs_over"] == 0
    assert document["weighted-fair/unlimited"]["starts"]["tenants"]["acme"]["limit"] is None
    assert len(limited_json["tenants"]["acme"]["per_second"]) == scenario.duration + 1


def test_the_report_shows_both_runs_starts_side_by_side(runs: tuple[Any, list[Outcome]], tmp_path: Path) -> None:
    scenario, outcomes = runs
    page = tmp_path / "report.html"
    write_report(page, scenario, outcomes)
    text = page.read_text(encoding="utf-8")
    unlimited, limited = text.split('<h2 id="weighted-fair/limited">')
    assert "<p>starts of acme (no limit): 2,926 in 2m0s" in unlimited
    assert "<p>starts of acme (dispatch_rate 5/s, burst 1, max_in_flight 5): 600 in 2m0s" in limited
    assert text.count("jobs started per second by each tenant with a dispatch limit") == 2  # a plot per run


def alone(rate: str, **extra: Any) -> Any:
    """One tenant with jobs always waiting, alone on one slot of 0.1 s jobs, held to ``rate``."""
    return parse_scenario({
        "name": "t", "duration": "1m", "seed": 3, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].reserved_slots": 0, "tenants.overrides": {"solo": {"dispatch_rate": rate}}},
        "workers": [{"count": 1}], "policies": ["weighted-fair"],
        "streams": [{"class": "jobs:medium", "tenant": "solo", "arrivals": {"backlog": {"queued": 3}},
                     "service_s": {"constant": 0.1}}], **extra}, "t.yaml")


def test_an_idle_slot_wakes_when_the_rate_hold_comes_due() -> None:
    """Nothing happens between solo's jobs (its job is done in 0.1 s, the next sweep is up to a
    second away): the slot still starts the next one when its bucket allows it, 2 a second, as a
    worker woken by the wake key the script arms for that time."""
    run = simulate(alone("2/s"), "weighted-fair")
    assert run.starts is not None
    solo = run.starts.tenants["solo"]
    assert solo.started == 121 and set(solo.per_second[:-1]) == {2}
    assert run.starts.others == 0 and run.starts.others_wait_p95_s is None


def test_a_policy_that_holds_no_one_reports_no_limit() -> None:
    """Only weighted-fair holds tenants: under fifo the same override is no limit."""
    solo = simulate(alone("2/s"), "fifo").starts
    assert solo is not None and solo.tenants["solo"].limit is None and solo.tenants["solo"].peak == 10


def test_a_scenario_without_a_dispatch_limit_tells_no_starts() -> None:
    scenario = load_scenario("key-spread").shortened(5.0)
    assert scenario.watched_tenants == ()
    assert simulate(scenario, scenario.run_names()[0]).starts is None


@pytest.mark.parametrize(
    ("check", "where", "what"),
    [
        ({"tenant": "solo"}, "starts_per_second[0].at_least", "give at_least, at_most or both"),
        ({"tenant": "solo", "at_most": -1}, "starts_per_second[0].at_most", "between"),
        ({"at_most": 3}, "starts_per_second[0].tenant", "required"),
    ],
)
def test_invalid_starts_per_second_checks_name_the_field(check: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        alone("2/s", expect={"weighted-fair": {"starts_per_second": [check]}})
    assert info.value.path == f"expect.weighted-fair.{where}" and what in info.value.message, str(info.value)


def test_a_tenant_named_by_a_check_is_watched_without_a_limit() -> None:
    scenario = alone("2/s", expect={"weighted-fair": {"starts_per_second": [{"tenant": "other", "at_most": 0}]}})
    assert scenario.watched_tenants == ("solo", "other") and scenario.downstream_rate("other") is None
    run = simulate(scenario, "weighted-fair")
    outcome = Outcome(run, None)
    assert [str(c) for c in outcome.checks(scenario, [outcome])] == [
        "checked: other's busiest second: 0 jobs started (expected at most 0)"]
