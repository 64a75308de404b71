"""How the drill judges a live run against the simulation: the room a deadline leaves, the speed
that fits it, the expectation a shortened replay can check, and which one-sided alerts count."""

from __future__ import annotations

import pytest

from fairness_core.ages import human
from fairness_sim.alert_evaluation import FiredAlert
from fairness_sim.drill import (
    DrillAlert,
    PolicyDrill,
    Prediction,
    _disagreements,
    _explained_by_delay,
    unresolved_ages,
    windowed,
)
from fairness_sim.drill_timing import PipelineDelay, Room, room, workable_speed
from fairness_sim.loadgen import Replay
from fairness_sim.scenario import AlertMatch, Expectation, load_scenario
from fairness_sim.simulator import scenario_config

HIGH = {"queue": "jobs:high"}
LOW = {"queue": "jobs:low"}
STORM_FIFO = Expectation(fire=(AlertMatch("QueueStarving", HIGH, before=600),), silent=())


def fired(alert: str, labels: dict[str, str], at: float) -> FiredAlert:
    return FiredAlert(alert, labels, at, ((at, at + 15),))


def test_the_pipelines_delay_is_a_scrape_an_evaluation_and_one_more_for_its_for() -> None:
    delay = PipelineDelay(scrape_gap_s=1.2, scrape_s=0.05, evaluation_gap_s=1.1, load_lag_s=0.3, failed_scrapes=2)
    assert delay.real_s == pytest.approx(0.3 + 1.2 + 0.05 + 2 * 1.1)
    assert str(delay).startswith("3.75s: scrapes at most 1.20s apart and 0.05s long, rules evaluated at most 1.10s")
    assert "2 failed scrape(s)" in str(delay)


def test_room_is_the_least_a_deadline_leaves_after_the_simulated_firing() -> None:
    expectation = Expectation(fire=(AlertMatch("QueueStarving", HIGH, before=600),
                                    AlertMatch("QuietTenantsStarving", {}, before=900),
                                    AlertMatch("QueueStarving", LOW)), silent=())
    simulated = [fired("QueueStarving", HIGH, 135), fired("QuietTenantsStarving", HIGH, 375),
                 fired("QueueStarving", LOW, 4500)]
    least = room(expectation, simulated, until=7200)
    assert least == Room(465, 'QueueStarving{queue="jobs:high"}', 135, 600)
    assert room(expectation, simulated, until=800) == least
    assert room(expectation, simulated, until=500) is None  # no deadline within the replay
    # A deadline the simulation itself misses leaves no room to keep: the drill must fail on it.
    assert room(STORM_FIFO, [fired("QueueStarving", HIGH, 735)], until=7200) is None
    assert room(None, simulated, until=7200) is None


@pytest.mark.parametrize(("delay", "speed", "expected"), [
    (3.0, 120, None),  # 6m of 465s x 0.8 = 6m12s: fits
    (3.2, 120, 116.0),  # 6m24s does not: the fastest whole speed whose 3.2s fits in 372s
    (3.0, 60, None),
    (30.0, 120, 12.0),
    (400.0, 120, 1.0),  # never below 1
])
def test_the_speed_is_lowered_until_the_resolution_fits_in_the_room(delay: float, speed: float,
                                                                    expected: float | None) -> None:
    deadlines = Room(465, "QueueStarving", 135, 600)
    assert workable_speed(delay, speed, deadlines) == expected
    assert workable_speed(delay, speed, None) is None  # no deadline: any speed
    if expected is not None:
        assert delay * expected <= 0.8 * 465 < delay * (expected + 1) or expected == 1


def test_a_shortened_replay_checks_only_what_it_can_see() -> None:
    storm = load_scenario("marketing-storm")
    simulated = [fired("QueueStarving", LOW, 4515)]
    fair = storm.expect["weighted-fair"]
    kept, unchecked = windowed(fair, 1200, 360, simulated)
    assert [str(w) for w in kept.fire] == [] and kept.silent == fair.silent
    assert unchecked == ['QueueStarving{queue="jobs:low"}: the simulation fires it after the end of the replay (20m0s)']
    kept, unchecked = windowed(fair, 7200, 360, simulated)
    assert [str(w) for w in kept.fire] == ['QueueStarving{queue="jobs:low"}'] and unchecked == []
    kept, unchecked = windowed(fair, 4700, 360, simulated)  # fires 3 minutes before the end: live may not yet
    assert unchecked == [('QueueStarving{queue="jobs:low"}: the simulation fires it too near the end of the replay '
                         '(1h18m)')]
    kept, unchecked = windowed(storm.expect["fifo"], 1200, 360, [])  # a deadline within the replay always stands
    assert [w.before for w in kept.fire] == [600] and unchecked == []


def alert(name: str, *, live: float | None = None, simulated: float | None = None, delivered: bool = True,
          for_s: float = 120, pending: float | None = None, held: float | None = None) -> DrillAlert:
    return DrillAlert(name, HIGH, live, live if live is not None and delivered else None, simulated,
                      live, for_s, pending, held)


def test_one_sided_alerts_count_only_beyond_the_resolution() -> None:
    replay = Replay(speed=120, volume=115, until=7200)
    real, near = _disagreements([
        alert("Both", live=600, simulated=300),
        alert("Flicker", live=1300, delivered=False),  # never paged
        alert("Paged", live=1300, held=30),  # paged; the simulation's condition held 30s of 120s
        alert("Close", live=1300, held=100),  # ... 100s of 120s: within the 60s resolution
        alert("Missed", simulated=900),  # never pending live
        alert("Pending", simulated=900, pending=70),  # 70s of 120s pending live: within the resolution
        alert("Late", simulated=7000),  # in the last tenth
    ], replay, resolution_s=60, unresolved={})
    assert real == [
        ('Paged{queue="jobs:high"} fired only in the drill (at 21m40s, delivered); in the simulation its condition '
        'held for 30s at most of the 2m0s its for: asks'),
        'Missed{queue="jobs:high"} fired only in the simulation (at 15m0s); live it was never pending']
    assert near == [
        ('Flicker{queue="jobs:high"} fired only in the drill (at 21m40s, never delivered); its condition never held '
        'in the simulation'),
        ('Close{queue="jobs:high"} fired only in the drill (at 21m40s, delivered); in the simulation its condition '
        'held for 1m40s at most of the 2m0s its for: asks'),
        ('Pending{queue="jobs:high"} fired only in the simulation (at 15m0s); live it was pending for 1m10s at most '
        'of the 2m0s its for: asks'),
        'Late{queue="jobs:high"} fired only in the simulation (at 1h56m); live it was never pending']


def test_an_age_alert_of_a_class_the_replay_cannot_resolve_is_a_near_miss_live_only() -> None:
    """Each live storm job stands for 115 and holds its slot 115 times as long: about 3 minutes
    for the quickest, longer than jobs:high's max_age of 60 s. As the replay starts every slot
    takes a newsletter at once, and the next password reset waits for one to finish, which the
    simulation's slots never make it do: PriorityInversion on jobs:high, live only, is reported
    as a near miss with that reason. Other alerts, other classes and simulated-only firings are
    judged as before."""
    storm = load_scenario("marketing-storm")
    replay = Replay(speed=120, volume=115, until=1200)
    unresolved = unresolved_ages(storm, scenario_config(storm, "weighted-fair"), replay)
    assert list(unresolved) == ["jobs:high"] and 170 < unresolved["jobs:high"] < 190
    medium = {"queue": "jobs:medium"}
    real, near = _disagreements([
        alert("PriorityInversion", live=539),
        alert("QueueShareBelowWeight", live=539),  # not an age alert
        DrillAlert("QueueStarving", medium, 539, 539, None, 539, 120),  # jobs:medium's 15m are resolved
        alert("QueueStarving", simulated=300),  # fired only in the simulation: still a disagreement
    ], replay, resolution_s=60, unresolved=unresolved)
    assert near == [
        'PriorityInversion{queue="jobs:high"} fired only in the drill (at 8m59s, delivered); its condition never '
        f'held in the simulation; a live job here holds its slot for {human(unresolved["jobs:high"])}, one of 115 '
        "scenario jobs, longer than jobs:high's max_age"]
    assert [line.split(" fired")[0] for line in real] == [
        'QueueShareBelowWeight{queue="jobs:high"}', 'QueueStarving{queue="jobs:medium"}', 'QueueStarving{queue="jobs:high"}']


def test_a_missed_deadline_is_put_down_to_the_speed_only_within_the_runs_own_delay() -> None:
    storm = load_scenario("marketing-storm")
    replay = Replay(speed=120, volume=115, until=1200)

    def result(live: float, simulated: float, delay_s: float) -> bool:
        drill = PolicyDrill("fifo", replay, alerts=[alert("QueueStarving", live=live, simulated=simulated)],
                            delay=PipelineDelay(delay_s / 3, 0, delay_s / 3))
        return _explained_by_delay(drill, storm, Prediction([fired("QueueStarving", HIGH, simulated)], []))

    assert result(live=660, simulated=135, delay_s=4.5)  # 9m of resolution cover 8m45s late
    assert not result(live=660, simulated=135, delay_s=4.0)  # 8m do not: the live stack itself is late
    assert not result(live=540, simulated=135, delay_s=4.5)  # met
    assert not result(live=780, simulated=735, delay_s=4.5)  # the simulation misses it too: the rules are late
