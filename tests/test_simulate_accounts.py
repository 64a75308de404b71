"""Two-level fairness in the simulator: the key-spread and spread-keys-victim scenarios, each run
flat (fair queuing across tenant keys) and two-level (tenants.account_separator), compared account
by account, and the ``variants`` field that declares such a comparison (simulation only: no Redis,
no promtool)."""

from __future__ import annotations

from typing import Any

import pytest

from fairctl.simulate_command import as_json, render
from fairness_core import ConfigError
from fairness_sim.policies import Outcome
from fairness_sim.scenario import load_scenario, parse_scenario
from fairness_sim.simulator import PolicyRun, simulate

from .conftest import EXAMPLE_CONFIG

CLASS = "jobs:medium"


def runs_of(name: str) -> tuple[Any, list[Outcome]]:
    scenario = load_scenario(name)
    return scenario, [Outcome(simulate(scenario, run), None) for run in scenario.run_names()]


@pytest.fixture(scope="module")
def key_spread() -> tuple[Any, list[Outcome]]:
    return runs_of("key-spread")


def share(run: PolicyRun, account: str) -> float:
    assert run.worker_time is not None
    return run.worker_time.tenant(CLASS, account).share


def test_key_spread_runs_flat_and_two_level(key_spread: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = key_spread
    assert scenario.run_names() == ("weighted-fair/flat", "weighted-fair/two-level")
    assert [o.run.config_changes for o in outcomes] == [(), ()]
    assert [(o.run.variant, o.run.charge) for o in outcomes] == [("flat", None), ("two-level", None)]
    assert scenario.variants["flat"].tenants.account_separator is None
    assert scenario.variants["two-level"].tenants.account_separator == "/"


def test_two_level_judges_accounts_in_its_quiet_and_fairness_figures(key_spread: tuple[Any, list[Outcome]]) -> None:
    """Judged by keys, the two-level run scored 0.61 (bigco's 200 keys each get a sliver of one
    account's share) and its quiet tenants waited minutes (bigco's own keys): judged by accounts, the
    unit it is fair to, the index is high and the quiet accounts wait seconds."""
    _, (flat, two_level) = key_spread
    assert (flat.run.party, two_level.run.party) == ("tenant", "account")
    index = two_level.run.fairness_index["jobs:medium"]
    assert index is not None and index >= 0.85
    assert two_level.run.quiet_max_age_s["jobs:medium"] < 10


def test_flat_gives_the_account_of_200_keys_most_of_the_class(key_spread: tuple[Any, list[Outcome]]) -> None:
    """200 keys of 250 parties: 80% of the jobs; each one-key account gets 1/250 of the fleet."""
    flat = key_spread[1][0].run
    assert share(flat, "bigco") == pytest.approx(200 / 250, abs=0.01)
    assert flat.accounts is not None and flat.accounts.keys["bigco"] == 200
    assert sum(1 for n in flat.accounts.keys.values() if n == 1) == 50


def test_two_level_gives_it_one_accounts_share_of_what_the_others_leave(key_spread: tuple[Any, list[Outcome]]) -> None:
    """Each one-key account is entitled to 1/51 of the fleet (1.96 jobs/s), more than the 1.9 it
    sends: it gets all it asks for, and bigco what is left (5% of 100 jobs/s), within the bound
    of tenants.batch/w_a + tenants.batch/w_b jobs (20) over the 30,000 jobs of the run."""
    scenario, outcomes = key_spread
    two_level = outcomes[1].run
    bound = 2 * scenario.variants["two-level"].tenants.batch
    asked = 95 * scenario.duration  # the one-key accounts' jobs: 1.9/s each
    left = two_level.jobs_started - asked
    assert two_level.jobs_started * share(two_level, "bigco") <= left + bound + 4 * asked ** 0.5  # Poisson's noise
    assert share(two_level, "bigco") < 0.06
    for shop in (f"shop-{k}" for k in range(50)):
        assert share(two_level, shop) == pytest.approx(1.9 / 100, abs=0.005), shop


def test_one_key_accounts_p99_wait_falls_by_90_percent(key_spread: tuple[Any, list[Outcome]]) -> None:
    flat, two_level = (o.run.accounts for o in key_spread[1])
    assert flat is not None and two_level is not None
    assert flat.single_key_p99_s is not None and two_level.single_key_p99_s is not None
    assert two_level.single_key_p99_s <= 0.1 * flat.single_key_p99_s
    worst = max(v or 0.0 for a, v in two_level.wait_p99_s.items() if a != "bigco")
    assert worst <= 0.1 * max(v or 0.0 for a, v in flat.wait_p99_s.items() if a != "bigco")


def test_simulate_says_what_key_spread_expects(key_spread: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = key_spread
    assert all(o.violations(scenario, outcomes) == [] for o in outcomes)
    text = render(scenario, outcomes, None)
    flat, two_level = text.split("policy weighted-fair, two-level")
    assert "policy weighted-fair, flat" in flat
    assert "p99 wait per account: bigco " in flat and "(200 keys); 50 one-key accounts " in flat
    assert "heaviest accounts: bigco 80.0%" in flat
    assert "checked: the p99 wait of one-key accounts falls" in two_level
    assert text.count("as expected by the scenario") == 2 and "EXPECTATION FAILED" not in text
    document = as_json(scenario, outcomes)["policies"]
    assert document["weighted-fair/two-level"]["variant"] == "two-level"
    assert document["weighted-fair/flat"]["accounts"]["keys"]["bigco"] == 200


def test_spread_keys_victim_waits_far_less_under_two_level() -> None:
    scenario, outcomes = runs_of("spread-keys-victim")
    flat, two_level = (o.run.stream_wait_p99_s["victim"] for o in outcomes)
    assert flat is not None and two_level is not None and two_level <= 0.1 * flat
    assert [o.violations(scenario, outcomes) for o in outcomes] == [None, []]  # flat expects nothing
    assert "1 one-key account " in render(scenario, outcomes, None)


def variant_scenario(**fields: Any) -> Any:
    return parse_scenario({
        "name": "t", "duration": "1m", "seed": 3, "config": str(EXAMPLE_CONFIG), "workers": [{"count": 2}],
        "streams": [{"class": CLASS, "tenant": "a/k", "arrivals": {"poisson": {"rate_per_s": 1}},
                     "service_s": {"constant": 0.1}}], **fields}, "t.yaml")


@pytest.mark.parametrize(
    ("fields", "where", "what"),
    [
        ({"variants": {"flat": {}}}, "variants", "two or more names"),
        ({"variants": {"a/b": {}, "c": {}}}, "variants.a/b", "a name of letters"),
        ({"variants": {"a": {}, "b": {"tenants.account_separator": ""}}}, "variants.b", "the patched config is invalid"),
        ({"variants": {"a": {}, "b": {"classes[2]": None}}}, "variants.b", "the patched config is invalid"),
        ({"variants": {"a": {}, "b": {}}, "charges": ["jobs", "runtime"]}, "variants", "charges or variants"),
        ({"variants": {"a": {}, "b": {}}, "expect": {"weighted-fair": {}}}, "expect.weighted-fair", "expected one of"),
    ],
)
def test_invalid_variants_name_the_field(fields: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        variant_scenario(**fields)
    assert info.value.path == where and what in info.value.message, str(info.value)


def test_a_scenario_without_accounts_reports_none() -> None:
    run = simulate(variant_scenario(), "weighted-fair")
    assert run.accounts is None and run.variant is None and "p99 wait per account" not in render(
        variant_scenario(), [Outcome(run, None)], None)
