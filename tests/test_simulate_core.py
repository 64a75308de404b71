"""The simulator's core: the model's bulk enqueue, scenario validation, determinism, and queueing
results that can be worked out by hand or in closed form."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairness_core import BudgetRejected, ConfigError, Model, load_config
from fairness_sim.scenario import DEFAULT_SCENARIO, load_scenario, parse_scenario, scenario_file, shipped_scenarios
from fairness_sim.simulator import Simulation, simulate

from .conftest import EXAMPLE_CONFIG


def _budget_config(action: str = "demote") -> Any:
    config = load_config(EXAMPLE_CONFIG)
    scheduler = dataclasses.replace(config.scheduler, budget_min_arrivals=5, budget_action=action)
    return dataclasses.replace(config, scheduler=scheduler)


@pytest.mark.parametrize("action", ["demote", "reject"])
def test_submit_many_is_exactly_repeated_submits(action: str) -> None:
    """The bulk path (one step for a class without a budget, job by job where a budget decides)
    leaves the very state that the same submits one at a time leave, ids and budget decisions
    included, and reports the same classes and reasons."""
    config = _budget_config(action)
    bulk, single = Model(config), Model(config)
    plan = [
        (0, "password_reset", "shop-1", 3, None),
        (10, "newsletter", "acme", 10, "pro"),  # no budget on jobs:low: one step
        (20, "password_reset", "shop-2", 40, "enterprise"),  # over jobs:high's 20% budget part-way
        (700_000, "newsletter", "acme", 500, None),  # next budget window
        (700_001, "password_reset", "shop-3", 30, None),
    ]
    for now, task, tenant, count, tier in plan:
        runs: list[tuple[str, str]] = []
        try:
            for queue, reason, n in bulk.submit_many(now, task, tenant, count, {"x": 1}, tier=tier):
                runs += [(queue, reason)] * n
        except BudgetRejected:
            pass
        singles: list[tuple[str, str]] = []
        try:
            for _ in range(count):
                done = single.submit(now, task, tenant, {"x": 1}, tier=tier)
                singles.append((done.queue, done.reason))
        except BudgetRejected:
            pass
        if action == "demote":
            assert runs == singles
    assert bulk.state(700_001) == single.state(700_001)
    demoted = single.stats.get("demoted\tjobs:high", 0) + single.stats.get("rejected\tjobs:high", 0)
    assert demoted > 0, "the plan must exercise the budget"


def test_promotion_sweep_keeps_order_and_heads() -> None:
    """Aging moves a whole overdue run in one step; the jobs keep their order and age."""
    config = load_config(EXAMPLE_CONFIG)
    model = Model(config)
    model.submit_many(0, "newsletter", "acme", 5)
    model.submit_many(1000, "sync", "acme", 2)  # jobs:medium already has two of acme's jobs
    moved = model.promote_overdue(31 * 60 * 1000, limit=3)
    assert moved == 3
    medium = [j.id for j in model.classes["jobs:medium"].queues["acme"]]
    assert medium == [1, 2, 3, 6, 7]
    assert model.classes["jobs:medium"].heads.score("acme") == 0
    assert model.classes["jobs:low"].heads.score("acme") == 0 and len(model.classes["jobs:low"].queues["acme"]) == 2


# ------------------------------------------------------------------ scenarios

STORM: dict[str, Any] = yaml.safe_load(DEFAULT_SCENARIO.read_text())


def _scenario(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(STORM)
    data.pop("expect", None)
    data.update(changes)
    return data


def _parse(data: dict[str, Any]) -> Any:
    return parse_scenario(data, "s.yaml", DEFAULT_SCENARIO.parent)


def _with(path: str, value: Any) -> dict[str, Any]:
    """The storm scenario with one value replaced; ``path`` like ``streams.1.arrivals``."""
    data = _scenario()
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value
    return data


def test_shipped_scenarios_load_by_name() -> None:
    names = shipped_scenarios()
    assert {"marketing-storm", "priority-creep", "priority-inversion"} <= set(names)
    for name in names:
        scenario = load_scenario(name)
        assert scenario.streams and scenario.workers, name
    storm = load_scenario(DEFAULT_SCENARIO)
    assert storm.config.classes[0].reserved_slots == 0  # the config_patch applied
    assert sum(s.arrivals.count for s in storm.streams if hasattr(s.arrivals, "count")) == 2_300_000


@pytest.mark.parametrize(
    ("path", "value", "where", "what"),
    [
        ("duration", "2 hours", "duration", "expected a duration"),
        ("seed", -1, "seed", "between"),
        ("workers", [], "workers", "expected a list of 1"),
        ("workers.0.count", 0, "workers[0].count", "between 1"),
        ("workers.0.classes", ["jobs:urgent"], "workers[0].classes[0]", "expected one of jobs:high"),
        ("workers.0.classes", "some", "workers[0].classes", "expected all or a non-empty list"),
        ("workers.0.crashes", [{"at": "1m"}], "workers[0].crashes[0].count", "is required"),
        ("workers.0.crashes", [{"at": "1m", "count": 1, "restart_after": 0}], "workers[0].crashes[0].restart_after", "expected a duration"),
        ("streams.0.arrivals", {"poisson": {"rate_per_s": 0}}, "streams[0].arrivals.poisson.rate_per_s", "must be > 0"),
        ("streams.0.arrivals", {"gamma": {}}, "streams[0].arrivals", "exactly one of: poisson, constant, burst"),
        ("streams.0.arrivals", {"burst": {"at": "3h", "count": 5}}, "streams[0].arrivals.burst.at", "inside the scenario's duration"),
        ("streams.0.arrivals", {"burst": {"count": 0}}, "streams[0].arrivals.burst.count", "between 1"),
        ("streams.1.service_s", {"lognormal": {"median": 1}}, "streams[1].service_s.lognormal.sigma", "is required"),
        ("streams.1.service_s", {"constant": "1s"}, "streams[1].service_s.constant", "expected a number"),
        ("streams.1.service_s", {"exponential": {"mean": 1, "rate": 2}}, "streams[1].service_s.exponential.rate", "unknown key"),
        ("streams.1.tenant", {"pool": 0}, "streams[1].tenant.pool", "between 1"),
        ("streams.1.tier", "gold", "streams[1].tier", "expected one of enterprise"),
        ("streams.1.class", "jobs:low", "streams[1].task", "exactly one of task"),
        ("streams.1.stop", "0s", "streams[1].stop", "later than start"),
        ("policies", ["fifo", "lifo"], "policies[1]", "expected one of fifo"),
        ("policies", ["fifo", "fifo"], "policies", "twice"),
        ("expect", {"lifo": {}}, "expect.lifo", "expected one of"),
        ("expect", {"fifo": {"fire": ["QueueStarving{queue=jobs:high}"]}}, "expect.fifo.fire[0]", "optionally with labels"),
        ("expect", {"fifo": {"silent": [{"alert": "X", "before": "1m"}]}}, "expect.fifo.silent[0].before", "unknown key"),
        ("config", "missing.yaml", "config", "cannot read"),
        ("config_patch", {"classes[9].weight": 1}, 'config_patch."classes[9].weight"', "no list item [9]"),
        ("config_patch", {"classes[0].weight": 0}, "classes[0].weight", "must be > 0"),
        ("config_patch", {"nosuch.key": 1}, 'config_patch."nosuch.key"', "no section 'nosuch'"),
        ("scrape_interval", "3h", "scrape_interval", "not be longer than the duration"),
        ("colour", "red", "colour", "unknown key"),
    ],
)
def test_invalid_scenarios_name_the_field(path: str, value: Any, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(_with(path, value))
    assert err.value.path == where
    assert what in err.value.message


def test_explicit_class_goes_through_classification() -> None:
    stream = {"class": "jobs:high", "tenant": "t", "arrivals": {"constant": {"rate_per_s": 1}},
              "service_s": {"constant": 0.1}}
    scenario = _parse(_scenario(streams=[stream]))
    assert (scenario.streams[0].task, scenario.streams[0].user_waiting) == ("2fa_code", False)


def test_missing_scenario_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read scenario file"):
        load_scenario(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ the simulation


def scenario_of(streams: list[dict[str, Any]], duration: str, *, workers: list[dict[str, Any]] | None = None,
                seed: int = 1, scrape: str = "15s") -> Any:
    """A scenario on the example config without the interactive class's budget and reservation
    (so the queueing is the policy's alone)."""
    return parse_scenario({
        "name": "t", "duration": duration, "seed": seed, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].arrival_budget": None, "classes[0].reserved_slots": 0},
        "scrape_interval": scrape, "workers": workers or [{"count": 1}], "streams": streams,
    })


def test_a_burst_on_one_slot_waits_as_worked_by_hand() -> None:
    """Ten 1-second jobs at t=0 on one slot start at 0, 1, ..., 9 s; a job arriving every second
    from t=10 s finds the slot just freed (completions are handled before arrivals at the same
    millisecond) and never waits; a reserved pool serves its class at once whatever the backlog."""
    scenario = scenario_of([
        {"task": "newsletter", "tenant": "acme", "arrivals": {"burst": {"at": 0, "count": 10}}, "service_s": {"constant": 1}},
        {"task": "nightly_digest", "tenant": "b", "arrivals": {"constant": {"rate_per_s": 1}}, "service_s": {"constant": 1},
         "start": "10s"},
        {"task": "password_reset", "tenant": "c", "arrivals": {"constant": {"rate_per_s": 0.5}}, "service_s": {"constant": 1}},
    ], "30s", workers=[{"count": 1, "classes": ["jobs:low"]}, {"count": 1, "classes": ["jobs:high"]}], scrape="1s")
    run = simulate(scenario, "fifo")
    low, high = run.classes["jobs:low"], run.classes["jobs:high"]
    assert low.jobs == 10 + 21  # 10 burst jobs, then one a second from t=10 s to the end, t=30 s
    assert low.wait_max_s == 9 and low.wait_p50_s == 0 and math.isclose(low.wait_mean_s, 45 / 31)
    # A scrape sees the state after everything else due that millisecond: at t=8 s the last burst
    # job has waited 8 s; at t=9 s it has just started.
    assert low.max_oldest_age_s == 8
    assert high.jobs == 16 and high.wait_max_s == 0  # t = 0, 2, ..., 30 s
    assert run.jobs_enqueued == 10 + 21 + 16


def test_same_seed_same_run_other_seed_other_run() -> None:
    streams = [{"task": "sync", "tenant": {"pool": 20}, "arrivals": {"poisson": {"rate_per_s": 3}},
                "service_s": {"lognormal": {"median": 0.5, "sigma": 1}}}]
    first = simulate(scenario_of(streams, "10m", workers=[{"count": 2}]), "weighted-fair")
    again = simulate(scenario_of(streams, "10m", workers=[{"count": 2}]), "weighted-fair")
    other = simulate(scenario_of(streams, "10m", workers=[{"count": 2}], seed=2), "weighted-fair")
    assert (first.classes, first.timeline) == (again.classes, again.timeline)
    assert first.classes != other.classes


@pytest.mark.slow  # a long replay, for the statistics: 5 s
def test_mm1_waits_match_the_closed_form() -> None:
    """Poisson arrivals at 0.5/s, exponential service of mean 1 s, one slot: Wq = rho/(mu - lambda) = 1 s."""
    scenario = scenario_of([{"task": "sync", "tenant": {"pool": 50}, "arrivals": {"poisson": {"rate_per_s": 0.5}},
                             "service_s": {"exponential": {"mean": 1}}}], "30h", scrape="1h")
    medium = simulate(scenario, "fifo").classes["jobs:medium"]
    assert medium.jobs > 50_000
    assert medium.wait_mean_s == pytest.approx(1.0, rel=0.05)


@pytest.mark.slow  # a long replay, for the statistics: 7 s
def test_strict_priority_waits_match_non_preemptive_priority() -> None:
    """M/M/1 with two non-preemptive priority classes (Cobham): W0 = sum(lambda_i E[S^2]) / 2 = 0.7,
    Wq_high = W0 / (1 - rho_high) = 1 s, Wq_medium = W0 / ((1 - rho_high)(1 - rho)) = 3.33 s."""
    exp1 = {"exponential": {"mean": 1}}
    scenario = scenario_of([
        {"task": "password_reset", "tenant": {"pool": 50}, "arrivals": {"poisson": {"rate_per_s": 0.3}}, "service_s": exp1},
        {"task": "sync", "tenant": {"pool": 50}, "arrivals": {"poisson": {"rate_per_s": 0.4}}, "service_s": exp1},
    ], "30h", scrape="1h")
    run = simulate(scenario, "strict")
    assert run.classes["jobs:high"].wait_mean_s == pytest.approx(1.0, rel=0.05)
    assert run.classes["jobs:medium"].wait_mean_s == pytest.approx(0.7 / (0.7 * 0.3), rel=0.05)


MINI_STORM = [
    {"task": "newsletter", "tenant": "acme-marketing", "tier": "pro",
     "arrivals": {"burst": {"at": "30s", "count": 20_000}}, "service_s": {"constant": 0.5}},
    {"task": "password_reset", "tenant": {"pool": 30, "prefix": "shop-"}, "arrivals": {"poisson": {"rate_per_s": 0.2}},
     "service_s": {"lognormal": {"median": 0.2, "sigma": 0.3}}},
    {"task": "nightly_digest", "tenant": {"pool": 10, "prefix": "pub-"}, "arrivals": {"poisson": {"rate_per_s": 0.2}},
     "service_s": {"exponential": {"mean": 0.3}}},
]


def test_mini_storm_fifo_starves_the_interactive_class_weighted_fair_does_not() -> None:
    # 8 slots: enough for the storm's tenant to count as noisy (exporter.noisy_min_inflight is 5)
    scenario = scenario_of(MINI_STORM, "15m", workers=[{"count": 8}])
    fifo = simulate(scenario, "fifo")
    fair = simulate(scenario, "weighted-fair")
    weighted = simulate(scenario, "weighted")
    slo = scenario.config.classes[0].max_age
    assert fifo.classes["jobs:high"].max_oldest_age_s > 10 * slo  # behind 20,000 older newsletters
    assert fair.classes["jobs:high"].max_oldest_age_s < slo / 10
    assert fair.classes["jobs:high"].wait_max_s < 5
    # Tenant isolation: the other tenants' digests wait behind the storm without it, not with it.
    assert weighted.quiet_max_age_s["jobs:low"] > 5 * 60
    assert fair.quiet_max_age_s["jobs:low"] < 30


def test_a_crashed_slot_abandons_its_job_to_the_reaper() -> None:
    """Two 90-second jobs on two slots; one slot dies at 10 s for good. Its job is never acked:
    the lease (visibility 5 min) expires at 300 s, the reaper (every second) returns it then and the
    surviving slot, idle since 90 s, works it again until 390 s."""
    scenario = scenario_of([{"task": "newsletter", "tenant": "acme", "arrivals": {"burst": {"at": 0, "count": 2}},
                             "service_s": {"constant": 90}}], "400s",
                           workers=[{"count": 2, "crashes": [{"at": "10s", "count": 1}]}])
    simulation = Simulation(scenario, "fifo")
    run = simulation.run()
    assert run.classes["jobs:low"].jobs == 2 and run.classes["jobs:low"].wait_max_s == 0  # first leases only
    assert simulation.model.models[0].stats["redelivered\tjobs:low"] == 1
    assert simulation.model.models[0].stats["processed\tjobs:low"] == 2
    assert simulation.model.models[0].stats["inflight\tjobs:low"] == 0


def test_a_class_that_served_nothing_has_no_waits_and_no_fairness_index() -> None:
    """Under fifo, password resets from 30 shops queue behind 20,000 older newsletters and none
    starts in 5 minutes: no wait to report (None, shown as -), and no fairness index (the gauge
    reads 1 when nobody is served; the tenants waited and got nothing, which is starvation, not
    fairness); weighted-fair serves them and measures their index."""
    streams = [MINI_STORM[0] | {"arrivals": {"burst": {"at": 0, "count": 20_000}}}, MINI_STORM[1]]
    scenario = scenario_of(streams, "5m", workers=[{"count": 8}])
    fifo, fair = simulate(scenario, "fifo"), simulate(scenario, "weighted-fair")
    high = fifo.classes["jobs:high"]
    assert high.jobs == 0 and high.max_oldest_age_s > 60
    assert (high.wait_mean_s, high.wait_p50_s, high.wait_p99_s, high.wait_max_s) == (None, None, None, None)
    assert max(fifo.timeline.active_tenants["jobs:high"]) >= 2
    assert fifo.fairness_index["jobs:high"] is None and fifo.fairness_unserved["jobs:high"] == 1.0
    assert fair.classes["jobs:high"].jobs > 0 and fair.classes["jobs:high"].wait_mean_s is not None
    assert fifo.fairness_index["jobs:low"] is None and fifo.fairness_unserved["jobs:low"] is None  # one tenant only


def test_the_late_flood_comes_after_thousands_of_tenants_of_its_class() -> None:
    """The shipped late-flood scenario is what it claims: by the time its flooding tenant sends its
    first job, at least 5,000 other tenants have sent jobs to the same class."""
    from fairness_core.classification import classify
    from fairness_sim.arrivals import all_arrivals

    scenario = load_scenario(scenario_file("late-flood"))
    config = scenario.config
    flood = next(s for s in scenario.streams if s.tenant == "bigcorp")
    queue = classify(config, flood.task, tier=flood.tier).queue
    seen: set[str] = set()
    for arrival in all_arrivals(scenario, scenario.duration):
        stream = scenario.streams[arrival.stream]
        if stream is flood:
            break
        if classify(config, stream.task, tier=stream.tier, user_waiting=stream.user_waiting).queue == queue:
            seen.update(tenant for tenant, _ in arrival.tenants)
    assert "bigcorp" not in seen and len(seen) >= 5000
