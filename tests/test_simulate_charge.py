"""Charging by runtime in the simulator: worker time per class and tenant, the heavy-tenant
scenario's claims, class shares of worker time when job lengths differ, and how fast a tenant's
share recovers when its jobs get slower (simulation only: no Redis, no promtool)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from click.testing import CliRunner

from fairctl.cli import app
from fairctl.simulate_command import as_json, render
from fairness_core import ConfigError
from fairness_sim.loadgen import check_replayable
from fairness_sim.policies import Outcome
from fairness_sim.scenario import load_scenario, parse_scenario, scenario_file
from fairness_sim.simulator import PolicyRun, Simulation, simulate

from .conftest import EXAMPLE_CONFIG

WEIGHTS = {"jobs:high": 0.7, "jobs:medium": 0.2, "jobs:low": 0.1}


def scenario_of(streams: list[dict[str, Any]], duration: str, *, slots: int, scrape: str = "15s",
                **extra: Any) -> Any:
    """A scenario on the example config without reserved slots or arrival budgets (a backlogged
    interactive class would be demoted by its budget); ``extra`` adds or replaces fields."""
    return parse_scenario({
        "name": "t", "duration": duration, "seed": 3, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].reserved_slots": 0, "classes[0].arrival_budget": None},
        "workers": [{"count": slots}], "streams": streams, "scrape_interval": scrape, **extra,
    }, "t.yaml")


def backlog(cls: str, service_s: float, tenant: Any, queued: int = 5, **extra: Any) -> dict[str, Any]:
    return {"class": cls, "tenant": tenant, "arrivals": {"backlog": {"queued": queued}},
            "service_s": {"constant": service_s}, **extra}


# ------------------------------------------------------------------ the heavy-tenant scenario


@pytest.fixture(scope="module")
def heavy() -> tuple[Any, list[Outcome]]:
    scenario = load_scenario("heavy-tenant")
    return scenario, [Outcome(simulate(scenario, run), None) for run in scenario.run_names()]


def test_heavy_tenant_runs_each_charge_basis(heavy: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = heavy
    assert scenario.run_names() == ("weighted-fair/jobs", "weighted-fair/runtime")
    assert [(o.run.policy, o.run.charge) for o in outcomes] == [("weighted-fair", "jobs"), ("weighted-fair", "runtime")]


def test_heavy_tenant_holds_the_workers_when_charged_by_jobs(heavy: tuple[Any, list[Outcome]]) -> None:
    """Counting jobs, the enterprise studio gets 6 jobs for each shop's 1, and 6 x 20 s against
    50 x 0.2 s is 92% of the worker time, though the shares of jobs are fair."""
    run = heavy[1][0].run
    assert run.worker_time is not None
    studio = run.worker_time.tenant("jobs:medium", "studio")
    assert studio.share >= 0.9
    assert studio.fair_share == pytest.approx(6 / 56)
    assert len(run.worker_time.backlogged["jobs:medium"]) == 51


def test_heavy_tenant_shares_worker_time_by_tier_when_charged_by_runtime(heavy: tuple[Any, list[Outcome]]) -> None:
    jobs, runtime = (o.run for o in heavy[1])
    assert runtime.worker_time is not None
    rows = runtime.worker_time.tenants("jobs:medium")
    assert len(rows) == 51 and all(row.fair_share is not None for row in rows)
    for row in rows:
        assert abs(row.share - row.fair_share) <= 0.05, row  # type: ignore[operator]
    assert runtime.worker_time.tenant("jobs:medium", "studio").share == pytest.approx(6 / 56, abs=0.01)
    before, after = jobs.stream_wait_p99_s["image resizes"], runtime.stream_wait_p99_s["image resizes"]
    assert before is not None and after is not None and before >= 10 * after


def test_simulate_says_what_the_heavy_tenant_scenario_expects(heavy: tuple[Any, list[Outcome]]) -> None:
    scenario, outcomes = heavy
    assert all(o.violations(scenario, outcomes) == [] for o in outcomes)
    text = render(scenario, outcomes, None)
    jobs, runtime = text.split("policy weighted-fair, charge runtime")
    assert "policy weighted-fair, charge jobs" in jobs
    assert "checked: studio holds 92.3% of jobs:medium's worker time (expected at least 90%)" in jobs
    assert "heaviest tenants: studio 92.3% (fair 10.7%)" in jobs
    assert "checked: each of the 51 tenants backlogged throughout holds its tier-weighted fair share" in runtime
    assert "checked: the p99 wait of image resizes falls" in runtime and "expected at least 10x" in runtime
    assert text.count("as expected by the scenario") == 2 and "EXPECTATION FAILED" not in text
    document = as_json(scenario, outcomes)["policies"]
    assert set(document) == {"weighted-fair/jobs", "weighted-fair/runtime"}
    studio = document["weighted-fair/jobs"]["worker_time"]["jobs:medium"]["tenants"][0]
    assert studio["tenant"] == "studio" and studio["share"] >= 0.9
    assert all(check["ok"] for run in document.values() for check in run["checks"])


def test_a_run_that_misses_the_expected_figures_fails(heavy: tuple[Any, list[Outcome]]) -> None:
    """The same expectations against the other run: each check fails with what it saw, and a
    comparison with a run that was not simulated is not checked (nor counted as a failure)."""
    scenario, (jobs, runtime) = heavy
    swapped = {"weighted-fair/jobs": scenario.expect["weighted-fair/runtime"],
               "weighted-fair/runtime": scenario.expect["weighted-fair/jobs"]}
    other = dataclasses.replace(scenario, expect=swapped)
    problems = jobs.violations(other, [jobs, runtime])
    assert problems is not None and len(problems) == 2
    assert "furthest: studio, 92.3% against 10.7%" in problems[0] and "falls 1.0x from weighted-fair/jobs" in problems[1]
    assert runtime.violations(other, [jobs, runtime]) == [
        "studio holds 10.7% of jobs:medium's worker time (expected at least 90%)"]
    alone = runtime.checks(scenario, [runtime])
    assert [c.ok for c in alone] == [True, None] and runtime.violations(scenario, [runtime]) == []


# ------------------------------------------------------------------ class shares of worker time


def class_runs(charge: str) -> PolicyRun:
    """Every class backlogged, interactive jobs 50 ms, medium 200 ms, bulk 500 ms, on 4 slots."""
    streams = [backlog("jobs:high", 0.05, {"pool": 3, "prefix": "h-"}), backlog("jobs:medium", 0.2, {"pool": 3, "prefix": "m-"}),
               backlog("jobs:low", 0.5, {"pool": 3, "prefix": "l-"})]
    return simulate(scenario_of(streams, "330s", slots=4), f"weighted-fair/{charge}")


def test_class_shares_are_of_worker_time_when_charged_by_runtime() -> None:
    run = class_runs("runtime")
    assert run.jobs_started >= 10_000 and run.worker_time is not None
    for name, weight in WEIGHTS.items():
        assert run.worker_time.class_share(name) == pytest.approx(weight, abs=0.02), name


def test_class_shares_are_of_jobs_when_charged_by_jobs() -> None:
    run = class_runs("jobs")
    assert run.jobs_started >= 10_000 and run.worker_time is not None
    for name, weight in WEIGHTS.items():
        assert run.classes[name].realised_share == pytest.approx(weight, abs=0.02), name
    # 70 x 50 ms, 20 x 200 ms, 10 x 500 ms: 28%, 32% and 40% of the worker time
    assert run.worker_time.class_share("jobs:high") < 0.3 and run.worker_time.class_share("jobs:low") > 0.38


# ------------------------------------------------------------------ estimates


def shares_after_slowdown(charge: str, change_s: int = 60, window_s: int = 30) -> list[float]:
    """Two free-tier tenants, always backlogged, on 4 slots; at ``change_s`` tenant a's jobs (the
    same task) take 1 s instead of 0.1 s. Its share of the worker time over every ``window_s``
    from its 200th job after the change on."""
    streams = [backlog("jobs:medium", 0.1, "a", name="a short", stop=f"{change_s}s"),
               backlog("jobs:medium", 1.0, "a", name="a long", start=f"{change_s}s"),
               backlog("jobs:medium", 0.1, "b", name="b")]
    scenario = scenario_of(streams, "400s", slots=4, scrape="1s")
    seen: list[tuple[float, int, int, int]] = []  # (s, a's busy ms, b's busy ms, a's jobs)

    def observe(now: int, _: Any) -> None:
        ms, jobs = simulation.worker_time.ms.get("jobs:medium", {}), simulation.worker_time.jobs.get("jobs:medium", {})
        seen.append((now / 1000, ms.get("a", 0), ms.get("b", 0), jobs.get("a", 0)))

    simulation = Simulation(scenario, f"weighted-fair/{charge}", observe=observe)
    simulation.run()
    at_change = next(row for row in seen if row[0] >= change_s)[3]
    start = next(i for i, row in enumerate(seen) if row[3] - at_change >= 200)
    assert seen[start][0] < 400 - 3 * window_s, "too few windows left to judge"
    shares = []
    for i in range(start, len(seen) - window_s, window_s):
        (_, a0, b0, _), (_, a1, b1, _) = seen[i], seen[i + window_s]
        shares.append((a1 - a0) / ((a1 - a0) + (b1 - b0)))
    return shares


def test_a_tenants_share_recovers_within_200_jobs_after_its_jobs_get_10x_slower() -> None:
    """Its estimate was learnt on the short jobs; charged by runtime, within 200 of its jobs after
    the change its share of worker time is within 5 points of its fair share, half, in every
    30 s from then on. Charged by jobs it keeps half the jobs, so ten times b's worker time."""
    shares = shares_after_slowdown("runtime")
    assert all(abs(share - 0.5) <= 0.05 for share in shares), shares
    assert all(share > 0.85 for share in shares_after_slowdown("jobs"))


def test_a_crashed_slot_counts_its_worker_time_up_to_the_crash() -> None:
    """Two 90 s jobs on two slots, one slot dying at 10 s: 90 s worked to the end, 10 s cut short,
    and the reaper's redelivery worked again for 90 s, once its lease expired (5 min)."""
    scenario = scenario_of([{"task": "newsletter", "tenant": "acme", "arrivals": {"burst": {"at": 0, "count": 2}},
                             "service_s": {"constant": 90}}], "400s", slots=2,
                           workers=[{"count": 2, "crashes": [{"at": "10s", "count": 1}]}])
    simulation = Simulation(scenario, "fifo")
    run = simulation.run()
    assert run.worker_time is not None and run.worker_time.seconds == {"jobs:low": {"acme": 190.0}}
    assert simulation.worker_time.jobs == {"jobs:low": {"acme": 2}}


# ------------------------------------------------------------------ scenario files


@pytest.mark.parametrize(
    ("change", "where", "what"),
    [
        ({"charges": ["jobs", "jobs"]}, "charges", "lists a charge basis twice"),
        ({"charges": ["seconds"]}, "charges[0]", "expected one of jobs, runtime"),
        ({"expect": {"weighted-fair": {}}}, "expect.weighted-fair", "expected one of"),
        ({"streams": [backlog("jobs:medium", 1, "a", queued=0)]}, "streams[0].arrivals.backlog.queued", "between 1"),
        ({"streams": [backlog("jobs:medium", 1, {"pool": 10_000_000}, queued=11)]}, "streams[0].arrivals.backlog.queued",
         "more than 100,000,000 jobs waiting"),
        ({"expect": {"weighted-fair/runtime": {"fair_worker_time": [{"class": "jobs:urgent", "within": 0.05}]}}},
         "expect.weighted-fair/runtime.fair_worker_time[0].class", "expected one of"),
        ({"expect": {"weighted-fair/runtime": {"fair_worker_time": [{"class": "jobs:medium", "within": 5}]}}},
         "expect.weighted-fair/runtime.fair_worker_time[0].within", "between 0 and 1"),
        ({"expect": {"weighted-fair/runtime": {"worker_time": [{"tenant": "a", "class": "jobs:medium"}]}}},
         "expect.weighted-fair/runtime.worker_time[0].at_least", "at_least, at_most or both"),
        ({"expect": {"weighted-fair/runtime": {"p99_wait_falls": [{"stream": "a", "from": "fifo/jobs", "by": 10}]}}},
         "expect.weighted-fair/runtime.p99_wait_falls[0].stream", "expected one of"),
        ({"expect": {"weighted-fair/runtime": {"p99_wait_falls": [{"stream": "sync", "from": "weighted/x", "by": 10}]}}},
         "expect.weighted-fair/runtime.p99_wait_falls[0].from", "expected one of"),
    ],
)
def test_invalid_charge_fields_name_the_field(change: dict[str, Any], where: str, what: str) -> None:
    fields: dict[str, Any] = {"charges": ["jobs", "runtime"], **change}
    with pytest.raises(ConfigError) as info:
        scenario_of(fields.pop("streams", [backlog("jobs:medium", 1, "a", name="sync")]), "1m", slots=1, **fields)
    assert info.value.path == where and what in info.value.message


def test_other_scenarios_print_no_worker_time() -> None:
    """A scenario that neither lists charges nor charges by runtime prints what it printed before
    charging by runtime existed: no worker-time lines, runs named by their policy alone."""
    scenario = scenario_of([backlog("jobs:medium", 0.5, "a")], "1m", slots=2)
    outcome = Outcome(simulate(scenario, "weighted-fair"), None)
    text = render(scenario, [outcome], None)
    assert "policy weighted-fair  (" in text and "worker time" not in text and "p99 wait per stream" not in text
    assert set(as_json(scenario, [outcome])["policies"]["weighted-fair"]) >= {"verdict"}
    assert "worker_time" not in as_json(scenario, [outcome])["policies"]["weighted-fair"]
    runtime = scenario_of([backlog("jobs:medium", 0.5, "a")], "1m", slots=2,
                          config_patch={"classes[0].reserved_slots": 0, "scheduler.charge": "runtime"})
    assert runtime.reports_worker_time and "worker time" in render(runtime, [Outcome(simulate(runtime, "weighted-fair"), None)], None)


def test_a_live_replay_refuses_a_backlog_stream() -> None:
    """fairctl drill and loadgen cannot know when the scheduler will start a backlog stream's jobs,
    so they refuse the scenario, naming the stream, instead of replaying its first jobs only."""
    with pytest.raises(ConfigError) as info:
        check_replayable(load_scenario("heavy-tenant"))
    assert info.value.path == "streams[0].arrivals.backlog" and "fairctl simulate" in info.value.message
    check_replayable(load_scenario("marketing-storm"))


@pytest.mark.parametrize("command", ["drill", "loadgen"])
def test_drill_and_loadgen_refuse_a_backlog_scenario_before_starting_anything(command: str) -> None:
    result = CliRunner().invoke(app, [command, str(scenario_file("heavy-tenant"))])
    assert result.exit_code == 2
    assert "streams[0].arrivals.backlog: a backlog stream's jobs arrive as the scheduler" in result.stderr
