"""``fairctl simulate --shards N --hand K``: the sharded queue modelled as N shards of the reference
model. One shard is today's simulation, output and all; six shards with hands of two keep the class
shares fleet-wide and serve the flooder's shard-mates like every other tenant; the rules, fed each
shard's series as production exporters serve them, judge the logical queue exactly as they judge
the shards merged into one; bad layouts exit 2 naming the option."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from alerts.output import rules_text
from exporter import metrics as m
from fairctl.cli import app
from fairness_core.config import Config, load_config
from fairness_core.merged_snapshot import merged_snapshot
from fairness_core.snapshot import Snapshot
from fairness_sim.alert_evaluation import SeriesRecorder, evaluate
from fairness_sim.scenario import load_scenario
from fairness_sim.shards import predict
from fairness_sim.simulator import scenario_config, simulate

from .conftest import EXAMPLE_CONFIG
from .test_simulate_core import MINI_STORM

runner = CliRunner()
WALL_TIME = re.compile(r"; \d+\.\ds\)")  # the one figure of the output that is not the run's


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["simulate", *(str(a) for a in args)])


def scenario_file(tmp_path: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "name": "mini-storm", "description": "20,000 newsletters beside password resets and digests",
        "duration": "4m", "seed": 7, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].arrival_budget": None, "classes[0].reserved_slots": 0},
        "workers": [{"count": 8, "classes": "all"}], "streams": MINI_STORM, "policies": ["weighted-fair"], **changes,
    }
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def no_budgets() -> Config:
    """The example config without arrival budgets: a static backlog stays in the class it names."""
    config = load_config(EXAMPLE_CONFIG)
    return dataclasses.replace(config, classes=tuple(dataclasses.replace(c, arrival_budget=0) for c in config.classes))


def test_one_shard_is_todays_simulation_output_and_all(tmp_path: Path) -> None:
    scenario = scenario_file(tmp_path)
    runs = {}
    for name, flags in {"plain": [], "one": ["--shards", "1"], "one-one": ["--shards", "1", "--hand", "1"]}.items():
        out = tmp_path / f"{name}.json"
        result = invoke(scenario, "--processes", "1", "--json", out, *flags)
        assert result.exit_code == 0, result.output
        runs[name] = (WALL_TIME.sub("", result.stdout), out.read_bytes())
    assert runs["one"] == runs["plain"] == runs["one-one"]
    assert "shards" not in runs["plain"][0] and "flood cost" not in runs["plain"][0]
    assert "sharded" not in json.loads(runs["plain"][1])["policies"]["weighted-fair"]


def test_six_shards_keep_the_class_shares_fleet_wide() -> None:
    config = no_budgets()
    backlogs = [(c, f"shop-{i}", 500) for c in config.class_names for i in range(60)]
    prediction = predict(backlogs, 6, 2, config, 9000)
    assert sum(prediction.classes.values()) == 9000
    for c in config.classes:
        assert abs(prediction.shares()[c.name] - c.weight / config.total_weight) <= 0.02, prediction.classes
    # ... and within each class, tenants alike (weighted fair queuing, shard by shard)
    low = [n for (q, _), n in prediction.tenants.items() if q == "jobs:low"]
    assert max(low) - min(low) <= 0.5 * sum(low) / len(low), low


@pytest.mark.slow  # a sharded storm replay: 10 s
def test_the_flooders_shard_mates_are_served_like_the_other_tenants() -> None:
    config = no_budgets()
    backlogs = [("jobs:low", "flooder", 200_000)] + [(c, f"shop-{i}", 2000) for c in config.class_names
                                                      for i in range(60)]
    prediction = predict(backlogs, 6, 2, config, 40_000)
    cost = prediction.figures.flood_cost()
    assert cost is not None and cost.tenant == "flooder" and cost.queue == "jobs:low"
    assert cost.mates > 10 and cost.others > 10  # hands of 2 of 6: about 60% share a shard with any one tenant
    assert cost.percent is not None and abs(cost.percent - 100) <= 5, cost
    # the flooder is one tenant: about a tenant's share of its class, not the class
    assert prediction.tenants["jobs:low", "flooder"] <= 1.5 * cost.others_served


def test_tenants_waiting_on_a_shard_that_serves_nothing_count_in_the_fleets_fairness() -> None:
    """The storm's first 5 minutes under fifo: the flood's older jobs take every slot, so the other
    tenants of jobs:low wait on their own shards and get nothing. Each shard's index is exact for
    it: 1 on the flood's (one tenant waits), 0 on the others; the fleet's must not be 1 for leaving
    the starved shards out (it was 1.00, as for a fair fleet)."""
    scenario = dataclasses.replace(load_scenario("marketing-storm").with_shards(6, 2), duration=300.0)
    low = simulate(scenario, "fifo").fairness_index["jobs:low"]
    assert low is not None and low < 0.1, low


def test_a_sharded_run_reports_the_drift_and_the_flood_cost(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    # expect is about the scenario's own layout (one group): another layout skips it
    wrong = {"weighted-fair": {"fire": ['QueueStarving{queue="jobs:high"}']}}
    result = invoke(scenario_file(tmp_path, expect=wrong), "--processes", "1", "--shards", "6", "--hand", "2",
                    "--json", out)
    assert result.exit_code == 0, result.output
    assert "EXPECTATION" not in result.stdout and "as expected by the scenario\n" not in result.stdout
    assert ("as expected by the scenario? n/a: the scenario's expectations are about its own layout (1 shard), "
            "not 6 shards with hands of 2") in result.stdout
    assert re.search(r"6 shards, hands of 2; class shares fleet-wide \(weight, drift\): jobs:high [\d.]+% \(70%, "
                     r"[-+][\d.]+ points\)", result.stdout), result.stdout
    assert re.search(r"flood cost: acme-marketing's \d+ shard-mates in jobs:low got \d+% of the service per tenant "
                     r"of its \d+ other tenants", result.stdout), result.stdout
    sharded = json.loads(out.read_text())["policies"]["weighted-fair"]["sharded"]
    assert sharded["shards"] == 6 and sharded["hand"] == 2 and sharded["flood_cost"]["tenant"] == "acme-marketing"


def test_policies_that_start_the_same_jobs_on_shards_are_told_why(tmp_path: Path) -> None:
    """The mini storm on 6 shards, hands of 2: one tenant waits per shard, so strict, weighted
    and weighted-fair start the same jobs; the output says so and gives the figure behind it."""
    result = invoke(scenario_file(tmp_path), "--processes", "1", "--shards", "6", "--hand", "2",
                    "-p", "strict", "-p", "weighted", "-p", "weighted-fair")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("tenants waiting per shard (mean, where any wait): jobs:low 1.0; ") == 3
    assert ("strict, weighted, weighted-fair: the same jobs started in every class. On 6 shards with hands of 2 "
            "few tenants wait on any one shard") in result.stdout
    alone = invoke(scenario_file(tmp_path), "--processes", "1", "-p", "strict", "-p", "weighted")
    assert "the same jobs started" not in alone.stdout  # unsharded: no such note


@pytest.mark.slow  # a sharded replay with the rules evaluated: 20 s
def test_the_rules_judge_the_shards_series_as_the_one_queue_they_make(tmp_path: Path) -> None:
    """The first half hour of the storm on 6 shards, hands of 2, under fifo (where most alerts
    fire): the rules given each shard's series (group and shard labels, as ``fairctl exporter``
    serves a sharded queue) fire the same alerts for the logical queue, at the same evaluations,
    as given the shards' snapshots merged into one queue group's. Only the shard-level alert adds
    to them, naming a shard."""
    scenario = dataclasses.replace(load_scenario("marketing-storm").with_shards(6, 2), duration=1800.0)
    config = scenario_config(scenario, "fifo")
    one_group = dataclasses.replace(config, redis=dataclasses.replace(config.redis, shards=1, shard_hand=1))
    shards, merged = SeriesRecorder(config), SeriesRecorder(one_group)

    def observe(now: int, parts: Sequence[Snapshot]) -> None:
        assert len(parts) == 6
        shards.observe(now, parts)
        merged.observe(now, [merged_snapshot(parts)])

    simulate(scenario, "fifo", observe=observe)
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))

    def fired(recorder: SeriesRecorder) -> list[tuple[str, float, dict[str, str]]]:
        alerts = evaluate(rules, "fifo", recorder.input_series(), scrape_interval=scenario.scrape_interval,
                          evaluation_interval=scenario.evaluation_interval, duration=scenario.duration)
        return [(a.alert, a.first_firing_s, dict(a.labels)) for a in alerts]

    by_shard, logical = fired(shards), fired(merged)
    assert {name for name, _, _ in logical} >= {"QueueStarving", "QueueShareBelowWeight", "TenantDominatingQueue"}
    assert [a for a in by_shard if a[0] != "QueueShardStalled"] == logical
    assert all(m.SHARD not in labels for _, _, labels in logical)
    assert all(labels[m.SHARD].startswith(f"{config.redis.prefix}.") for name, _, labels in by_shard
               if name == "QueueShardStalled")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "0"], "fairctl: error: --shards: expected 1 to 64 shards, got 0"),
        (["--shards", "4", "--hand", "5"], "fairctl: error: --hand: expected a hand of 1 to 4 shards (--shards 4), got 5"),
        (["--hand", "2"], "fairctl: error: --hand: expected a hand of 1 to 1 shards (--shards 1), got 2"),
        (["--shards", "3", "--hand", "0"], "fairctl: error: --hand: expected a hand of 1 to 3 shards"),
    ],
)
def test_a_bad_layout_exits_2_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(scenario_file(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
