"""``fairctl simulate --shards N --hand K``: the sharded queue modelled as N shards of the reference
model. One shard is today's simulation, output and all; six shards with hands of two keep the class
shares fleet-wide and serve the flooder's shard-mates like every other tenant; bad layouts exit 2
naming the option."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from fairctl.cli import app
from fairness_core.config import Config, load_config
from fairness_sim.shards import predict

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


def test_a_sharded_run_reports_the_drift_and_the_flood_cost(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    # expect is about the scenario's own layout (one group): another layout skips it
    wrong = {"weighted-fair": {"fire": ['QueueStarving{queue="jobs:high"}']}}
    result = invoke(scenario_file(tmp_path, expect=wrong), "--processes", "1", "--shards", "6", "--hand", "2",
                    "--json", out)
    assert result.exit_code == 0, result.output
    assert "EXPECTATION" not in result.stdout and "as expected" not in result.stdout
    assert re.search(r"6 shards, hands of 2; class shares fleet-wide \(weight, drift\): jobs:high [\d.]+% \(70%, "
                     r"[-+][\d.]+ points\)", result.stdout), result.stdout
    assert re.search(r"flood cost: acme-marketing's \d+ shard-mates in jobs:low got \d+% of the service per tenant "
                     r"of its \d+ other tenants", result.stdout), result.stdout
    sharded = json.loads(out.read_text())["policies"]["weighted-fair"]["sharded"]
    assert sharded["shards"] == 6 and sharded["hand"] == 2 and sharded["flood_cost"]["tenant"] == "acme-marketing"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "0"], "fairctl: error: --shards: expected 1 to 256 shards, got 0"),
        (["--shards", "4", "--hand", "5"], "fairctl: error: --hand: expected a hand of 1 to 4 shards (--shards 4), got 5"),
        (["--hand", "2"], "fairctl: error: --hand: expected a hand of 1 to 1 shards (--shards 1), got 2"),
        (["--shards", "3", "--hand", "0"], "fairctl: error: --hand: expected a hand of 1 to 3 shards"),
    ],
)
def test_a_bad_layout_exits_2_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(scenario_file(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
