"""The verdict ``fairctl simulate`` prints per policy agrees with its SLO table and its alerts, and a
run whose expectations cannot be checked says why."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from click.testing import CliRunner

from fairctl.cli import app
from fairctl.simulate_command import render
from fairness_sim.alert_evaluation import FiredAlert
from fairness_sim.policies import Outcome
from fairness_sim.report import _expectation, verdict
from fairness_sim.scenario import load_scenario

from .test_simulate_cli import write_scenario

STORM = load_scenario("marketing-storm")  # jobs:high SLO 1m, jobs:medium 15m, jobs:low 1h
HOUR = 3600.0


def run(**oldest: float) -> Any:
    """A hand-built run of the storm: each class's max oldest age (default 1 s); jobs:low's backlog
    is the noisy tenant's alone (its quiet tenants' oldest 2 s), every class served above its weight."""
    names = ("jobs:high", "jobs:medium", "jobs:low")
    ages = {name: oldest.get(name.split(":")[1], 1.0) for name in names}
    classes = {name: SimpleNamespace(max_oldest_age_s=ages[name], jobs=1000, realised_share=0.9) for name in names}
    return SimpleNamespace(classes=classes, quiet_max_age_s={name: 2.0 for name in names},
                           timeline=SimpleNamespace(noisy_age={name: [1.0] for name in names}),
                           name="weighted-fair", title="weighted-fair", config_changes=[], party="tenant")


def fired(name: str, queue: str, at: float) -> FiredAlert:
    return FiredAlert(name, {"queue": queue, "severity": "warning"}, at, ((at, 2 * HOUR),))


def test_the_noisy_tenants_own_backlog_over_the_slo_is_a_miss() -> None:
    """The storm under weighted-fair: jobs:low's oldest job (the flooding tenant's) 2h against a
    1h SLO, QueueStarving fired. The verdict names the class, its age and SLO, and the alert."""
    v = verdict(STORM, run(low=2 * HOUR))
    assert [c.status for c in v.classes] == ["met", "met", "noisy only"]
    assert v.word == "late" and v.interactive_met
    line = v.summary([fired("QueueStarving", "jobs:low", 4500)])
    assert line == "late: missed the SLO of jobs:low (oldest 2h0m, SLO 1h0m; noisy tenant only); QueueStarving fired"
    assert "met SLOs" not in line


def test_met_only_when_every_class_is_within_its_slo() -> None:
    v = verdict(STORM, run(low=50 * 60))
    assert v.word == "met SLOs" and not v.missed
    assert v.summary() == v.summary([]) == "met SLOs"
    # An alert that fired is named even when the SLOs were met: the line never hides one.
    assert v.summary([fired("TenantDominatingQueue", "jobs:low", 900)]) == "met SLOs; TenantDominatingQueue fired"


def test_a_miss_with_no_alert_says_so_and_each_missed_class_is_named() -> None:
    v = verdict(STORM, run(high=90, low=2 * HOUR))
    assert v.word == "late" and not v.interactive_met  # over the SLO is a miss, the noisy tenant's job or not
    line = v.summary([])
    assert line.startswith("late: missed the SLO of jobs:high (oldest 1m30s, SLO 1m0s; noisy tenant only), ")
    assert "jobs:low (oldest 2h0m, SLO 1h0m; noisy tenant only)" in line and line.endswith("; no alert fired")
    # Alerts not evaluated: nothing said of them.
    assert not v.summary(None).endswith("fired")


def test_starved_names_the_class_and_each_alert_once() -> None:
    starved = run(high=30 * 60)
    starved.classes["jobs:high"].realised_share = 0.0
    v = verdict(STORM, starved)
    alerts = [fired("QueueStarving", "jobs:high", 135), fired("QueueStalled", "jobs:high", 915),
              fired("QueueStarving", "jobs:medium", 1095)]
    assert v.summary(alerts) == ("starved: missed the SLO of jobs:high (oldest 30m0s, SLO 1m0s; starved); "
                                 "QueueStarving, QueueStalled fired")


def test_the_terminal_prints_the_verdict_with_the_alerts() -> None:
    outcome = Outcome(run(low=2 * HOUR), [fired("QueueStarving", "jobs:low", 4500)])
    scenario = STORM.shortened(2 * HOUR)
    lines = [line for line in _lines(scenario, outcome) if "verdict:" in line]
    assert lines == ["  verdict: late: missed the SLO of jobs:low (oldest 2h0m, SLO 1h0m; noisy tenant only); "
                     "QueueStarving fired"]


def _lines(scenario: Any, outcome: Outcome) -> list[str]:
    r = outcome.run
    for c in r.classes.values():
        c.wait_mean_s = c.wait_p50_s = c.wait_p99_s = c.wait_max_s = None
    r.jobs_started = r.jobs_enqueued = 1
    r.wall_s = 0.0
    r.quiet_p95_age_s = r.quiet_max_age_s
    r.fairness_index = {name: None for name in r.classes}
    r.fairness_unserved = {name: None for name in r.classes}
    r.shards = None
    return render(scenario, [outcome], None).splitlines()


def test_a_shortened_run_says_why_its_expectations_are_not_checked() -> None:
    short = STORM.shortened(30 * 60)
    assert short.unchecked_because == "the scenario's expectations are about its whole 2h0m run, not this 30m0s window"
    outcome = Outcome(run(), [])
    text, _ = _expectation(short, outcome, [outcome])
    assert text == "n/a <small>(the scenario's expectations are about its whole 2h0m run, not this 30m0s window)</small>"
    assert "  as expected by the scenario? n/a: the scenario's expectations are about its whole 2h0m run, " \
           "not this 30m0s window" in _lines(short, outcome)
    # The full run checks them, and a scenario with no expectations has nothing to explain.
    assert STORM.unchecked_because is None
    text, _ = _expectation(STORM, outcome, [outcome])
    assert text.startswith("NO: ")
    assert STORM.shortened(30 * 60).with_shards(4, 2).unchecked_because == short.unchecked_because
    assert "own layout (1 shard), not 4 shards" in (STORM.with_shards(4, 2).unchecked_because or "")


def test_a_real_short_run_agrees_with_its_table_and_alerts(tmp_path: Path) -> None:
    """A 6-minute mini storm through the command: every class over its SLO is named in the verdict
    (none reads met), and the cut-short expectations say why they are n/a."""
    scenario = write_scenario(tmp_path, duration="12m", policies=["fifo", "weighted-fair"])
    result = CliRunner().invoke(app, ["simulate", str(scenario), "--duration", "6m", "--processes", "1"])
    assert result.exit_code == 0, result.output
    for part in result.stdout.split("\npolicy ")[1:]:
        over = [name for name, oldest, slo in re.findall(r"^  (jobs:\w+) .*? (\S+) +(\S+) +\S+% +\S+%$", part, re.M)
                if _seconds(oldest) > _seconds(slo)]
        line = next(line for line in part.splitlines() if "verdict:" in line)
        assert line.startswith("  verdict: met SLOs") == (not over), part
        for name in over:
            assert f"{name} (oldest " in line, part
        assert part.count("as expected by the scenario? n/a: the scenario's expectations are about its whole "
                          "12m0s run, not this 6m0s window") == 1, part


def _seconds(text: str) -> float:
    parts = re.findall(r"([\d.]+)([hms])", text)
    assert parts, text
    return sum(float(number) * {"h": 3600, "m": 60, "s": 1}[unit] for number, unit in parts)
