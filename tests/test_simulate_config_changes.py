"""Config changes rehearsed in ``fairctl simulate``: ``config_changes`` validated at load, applied
to the reference model at their time (new weights, policy, removed classes moved), the alert
series following the applied config, and the storm-reweight scenario's page resolving after the
fix."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from alerts.output import rules_text
from exporter import metrics as m
from fairctl.cli import app
from fairness_core import ConfigError
from fairness_sim.alert_evaluation import SeriesRecorder
from fairness_sim.policies import run_policy
from fairness_sim.scenario import load_scenario, parse_scenario
from fairness_sim.simulator import scenario_config, simulate

from .conftest import EXAMPLE_CONFIG
from .test_simulate_core import _parse, _scenario

EXAMPLE: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
# Two classes kept busy by bursts they cannot drain: their shares are the weights' (ties aside).
BACKLOGS = [
    {"class": "jobs:medium", "tenant": "m", "arrivals": {"burst": {"count": 5000}}, "service_s": {"constant": 1}},
    {"task": "newsletter", "tenant": "n", "arrivals": {"burst": {"count": 5000}}, "service_s": {"constant": 1}},
]
# jobs:low removed: its batch rule sends jobs to jobs:medium instead.
WITHOUT_LOW = {"classes": EXAMPLE["classes"][:2], "classification[2].class": "jobs:medium"}


def scenario_with(changes: list[dict[str, Any]], *, policies: list[str] | None = None,
                  workers: list[dict[str, Any]] | None = None) -> Any:
    return parse_scenario({
        "name": "t", "duration": "20m", "seed": 1, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].arrival_budget": None, "classes[0].reserved_slots": 0},
        "workers": workers or [{"count": 4}], "streams": BACKLOGS, "policies": policies or ["weighted"],
        "config_changes": changes,
    })


def _mean(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present)


@pytest.mark.parametrize(
    ("change", "where", "what"),
    [
        ({"at": "3h", "patch": {}}, "config_changes[0].at", "inside the scenario's duration"),
        ({"at": 0, "patch": {}}, "config_changes[0].at", "inside the scenario's duration"),
        ({"at": "soon", "patch": {}}, "config_changes[0].at", "expected a duration"),
        ({"at": "20m"}, "config_changes[0].patch", "is required"),
        ({"at": "20m", "patch": {"nosuch.key": 1}}, 'config_changes[0].patch."nosuch.key"', "no section 'nosuch'"),
        ({"at": "20m", "patch": {"classes[9].weight": 1}}, 'config_changes[0].patch."classes[9].weight"', "no list item"),
        ({"at": "20m", "patch": {"classes[0].weight": 0}}, "config_changes[0].patch", "classes[0].weight: must be > 0"),
        ({"at": "20m", "patch": {"scheduler.policy": "lifo"}}, "config_changes[0].patch", "scheduler.policy"),
        ({"at": "20m", "patch": WITHOUT_LOW, "moves": {"jobs:low": "jobs:urgent"}}, "config_changes[0].moves",
         "'jobs:urgent' is not in the config"),
        ({"at": "20m", "patch": {}, "moves": {"jobs:high": "jobs:medium"}}, "config_changes[0].moves",
         "'jobs:high' is still in the config"),
        ({"at": "20m", "patch": {}, "moves": ["jobs:low"]}, "config_changes[0].moves", "expected a mapping"),
        ({"at": "20m", "patch": {}, "when": "now"}, "config_changes[0].when", "unknown key"),
    ],
)
def test_invalid_config_changes_name_the_field(change: dict[str, Any], where: str, what: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(_scenario(config_changes=[change]))
    assert err.value.path == where
    assert what in err.value.message


def test_changes_in_time_order_and_pools_keep_a_class() -> None:
    with pytest.raises(ConfigError, match=r"config_changes\[1\]\.at: must be later than config_changes\[0\]\.at"):
        _parse(_scenario(config_changes=[{"at": "20m", "patch": {}}, {"at": "10m", "patch": {}}]))
    pools = [{"count": 2, "classes": ["jobs:low"]}]
    with pytest.raises(ConfigError, match=r"workers\[0\]\.classes: config_changes\[0\] removes every class"):
        scenario_with([{"at": "5m", "patch": WITHOUT_LOW}], workers=pools)


def test_patches_build_on_each_other_and_the_policy_is_the_runs_until_set() -> None:
    scenario = scenario_with([{"at": "5m", "patch": {"classes[2].weight": 40}},
                              {"at": "10m", "patch": {"scheduler.policy": "fifo"}},
                              {"at": "15m", "patch": {"classes[1].weight": 30}}])
    first, second, third = scenario.config_changes
    assert [c.config.classes[2].weight for c in scenario.config_changes] == [40, 40, 40]
    assert third.config.classes[1].weight == 30
    assert (first.policy, second.policy, third.policy) == (None, "fifo", "fifo")
    assert scenario.final_config is third.config
    assert scenario.class_settings()["jobs:low"][1] == pytest.approx(40 / 140)
    assert scenario.shortened(12 * 60).config_changes == (first, second)


def test_shares_follow_the_new_weights_from_the_change_on() -> None:
    """jobs:medium (20) and jobs:low (10) both backlogged under weighted: medium takes 2/3 of the
    completions until jobs:low is re-weighted to 40 at 10 minutes, 1/3 after; the exporter's
    weight gauge the alerts compare against changes at the same scrape."""
    scenario = scenario_with([{"at": "10m", "patch": {"classes[2].weight": 40}}])
    recorder = SeriesRecorder(scenario_config(scenario, "weighted"))
    run = simulate(scenario, "weighted", observe=recorder.observe, reconfigure=recorder.reconfigure)
    times, share = run.timeline.times_s, run.timeline.share["jobs:medium"]
    before = _mean([s for t, s in zip(times, share) if 120 <= t <= 600])
    after = _mean([s for t, s in zip(times, share) if 660 <= t])
    assert before == pytest.approx(2 / 3, abs=0.05)
    assert after == pytest.approx(1 / 3, abs=0.05)
    assert [str(c) for c in run.config_changes] == ["10m0s: config applied: classes.jobs:low.weight: 10 -> 40"]
    series = {s["series"]: s["values"] for s in recorder.input_series()}
    weight = next(v for k, v in series.items() if k.startswith(f'{m.QUEUE_WEIGHT_RATIO.name}{{') and "jobs:low" in k)
    assert weight.split() == ["0.1+0x39", f"{40 / 130!r}+0x40"]  # scrapes 0..39 (before 10m), then 40..80


def test_a_removed_class_moves_its_jobs_and_its_reserved_pool_follows() -> None:
    """jobs:low removed at 5 minutes with its jobs moved to jobs:medium: the moved jobs keep their
    age (medium's oldest is then as old as the run), jobs:low is no longer scraped, and its
    reserved pool serves jobs:medium; without a move the change is refused and nothing changes."""
    pools = [{"count": 2, "classes": ["jobs:medium"]}, {"count": 2, "classes": ["jobs:low"]}]
    moved = scenario_with([{"at": "5m", "patch": WITHOUT_LOW, "moves": {"jobs:low": "jobs:medium"}}], workers=pools)
    run = simulate(moved, "weighted")
    at = run.timeline.times_s.index(5 * 60)
    assert math.isnan(run.timeline.oldest_age["jobs:low"][at]) and run.timeline.oldest_age["jobs:low"][at - 1] > 0
    assert run.timeline.oldest_age["jobs:medium"][-1] >= 19 * 60
    assert _mean(run.timeline.share["jobs:medium"][at + 4:]) == pytest.approx(1.0)  # all four slots serve it
    assert run.config_changes[0].refused is None

    refused = simulate(scenario_with([{"at": "5m", "patch": WITHOUT_LOW}]), "weighted")
    assert refused.config_changes[0].refused is not None and "jobs:low" in str(refused.config_changes[0])
    assert not math.isnan(refused.timeline.oldest_age["jobs:low"][-1])


@pytest.mark.slow  # two storm replays with the rules evaluated: 15-60 s
def test_storm_reweight_pages_under_fifo_then_resolves_after_the_fix() -> None:
    scenario = load_scenario("storm-reweight")
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yml"
        rules.write_text(rules_text(scenario.config), encoding="utf-8")
        outcome = run_policy(scenario, "fifo", rules)
    assert outcome.alerts is not None
    starving = next(a for a in outcome.alerts if a.alert == "QueueStarving" and a.labels["queue"] == "jobs:high")
    assert starving.first_firing_s < 10 * 60 and 20 * 60 < starving.periods[-1][1] <= 25 * 60
    assert outcome.violations(scenario) == []
    assert "scheduler.policy: fifo -> weighted-fair" in str(outcome.run.config_changes[0])


@pytest.mark.slow  # the storm replayed by fairctl simulate: 15-30 s
def test_fairctl_simulate_storm_reweight_says_what_changed_and_when(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["simulate", "storm-reweight", "--duration", "25m", "--json", str(out),
                                      "--processes", "1"])
    assert result.exit_code == 0, result.output
    assert "policy fifo" in result.stdout
    assert "  20m0s: config applied: scheduler.policy: fifo -> weighted-fair;" in result.stdout
    assert "classes.jobs:low.weight: 10 -> 5" in result.stdout
