"""``fairctl drill``: a scenario replayed live on the real parts, and the alert timeline read back.

Per policy: the scenario's config with that policy is compressed by the speed
(:mod:`fairness_sim.timescale`), a stack runs it (or the workers run against a team's own Redis,
Prometheus and Alertmanager), the load generator enqueues the scenario's arrivals through
``Queue.submit`` and applies its config changes (compressed alike) at their time with
``Queue.apply``, and once the replay ends the firing alerts are read from Prometheus
(``ALERTS``) and from what Alertmanager delivered to the webhook receiver. Each alert's first
firing is mapped back to scenario time and set beside the scenario's ``expect`` and beside what
``fairctl simulate`` predicts for the same stretch of the scenario, within the resolution the
live pipeline allows on this machine (:mod:`fairness_sim.drill_timing`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerts.config import alert_settings
from alerts.output import rules_text
from alerts.rules import PRIORITY_INVERSION, QUEUE_STARVING, QUIET_TENANTS_STARVING, every_alert
from fairness_core.ages import human
from fairness_core.config import Config
from fairness_core.connection import redis_client
from fairness_core.queue import open_queue
from fairness_sim.loadgen import LoadGenerator, LoadStats, Replay, live_changes, quickest_service_s
from fairness_sim.scenario import Expectation, Fired, Scenario, alert_text
from fairness_sim.simulator import scenario_config
from fairness_stack.servers import wait_until
from fairness_stack.supervisor import Stack, StackState, WorkerPool, scraped_in_time
from fairness_stack.webhook import deliveries, epoch

from .alert_evaluation import FiredAlert
from .drill_timing import PipelineDelay, Room, first_firing, longest, measure, room, workable_speed
from .policies import run_policy, shown_labels, without_for
from .prometheus_query import prometheus_api, rules_evaluated_since
from .timescale import compress

# A first firing in the last tenth of the replay is "borderline": either run may reach it a little
# later or sooner, so it is reported but not counted as a disagreement.
BORDERLINE_SHARE = 0.1
SETTLE_EVALUATIONS = 3  # evaluations waited after the replay, for the last alerts to be delivered
WARM_UP_EVALUATIONS = 4  # the warm-up stretch whose gaps choose the speed, in evaluation intervals
MAX_SPEED_CHANGES = 2  # a policy's drill lowers its speed at most this often
# ALERTS is read back at this resolution (real s), within Prometheus's limit of points per series.
QUERY_STEP_S, MAX_POINTS = 0.1, 10_000

AlertKey = tuple[str, tuple[tuple[str, str], ...]]
Periods = list[tuple[float, float]]


@dataclass(frozen=True)
class External:
    """A team's own stack to drill against instead of starting one."""

    redis_url: str
    prometheus_url: str
    alertmanager_url: str | None = None


@dataclass(frozen=True)
class DrillAlert:
    """One alert of the live run, its times in scenario seconds (None: not seen there). How close
    it came where it did not fire: ``live_pending_s``, the longest it was pending live;
    ``simulated_held_s``, the longest its condition held in the simulation; ``for_s``, its ``for:``."""

    alert: str
    labels: Mapping[str, str]
    first_firing_s: float | None
    delivered_s: float | None
    simulated_s: float | None
    last_firing_s: float | None = None
    for_s: float | None = None
    live_pending_s: float | None = None
    simulated_held_s: float | None = None

    def __str__(self) -> str:
        return alert_text(self.alert, sorted(self.labels.items()))


@dataclass
class PolicyDrill:
    policy: str
    replay: Replay
    alerts: list[DrillAlert] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    near_misses: list[str] = field(default_factory=list)  # on one side only, within the resolution
    unchecked: list[str] = field(default_factory=list)  # parts of the expectation beyond the replay
    load: LoadStats = field(default_factory=LoadStats)
    delay: PipelineDelay | None = None  # the live pipeline's, over the replay
    speed_changes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def resolution_s(self) -> float:
        """How much later than the simulation the live pipeline can fire, in scenario seconds."""
        return 0.0 if self.delay is None else self.replay.scenario_seconds(self.delay.real_s)

    @property
    def shown_resolution_s(self) -> float:
        """The resolution as the report and the JSON both give it (to a tenth of a second, so the
        text never reads a second off the JSON where a whole second is crossed)."""
        return round(self.resolution_s, 1)


@dataclass(frozen=True)
class Prediction:
    """What ``fairctl simulate`` says of the same stretch: the alerts that fire, and the periods
    every alert's condition held (``for:`` aside)."""

    fired: list[FiredAlert]
    held: list[FiredAlert]


class SlowDown(Exception):
    """The resolution at this speed leaves the scenario's deadlines too little room."""

    def __init__(self, speed: float, why: str) -> None:
        super().__init__(why)
        self.speed, self.why = speed, why


def _key(alert: str, labels: Mapping[str, str]) -> AlertKey:
    return alert, tuple(shown_labels(labels))


def alert_periods(prometheus_url: str, state: str, start: float, end: float, step: float,
                  selector: str = "") -> dict[AlertKey, Periods]:
    """Every alert's periods (epoch s) in ``state`` (firing, pending) in ``ALERTS`` between
    ``start`` and ``end``, at ``step`` resolution."""
    matchers = f'alertstate="{state}"' + (f",{selector}" if selector else "")
    query = f"ALERTS{{{matchers}}}"
    data = prometheus_api(prometheus_url, "query_range",
                          {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    out: dict[AlertKey, Periods] = {}
    for series in data["result"]:
        labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertstate")}
        periods = out.setdefault(_key(labels.pop("alertname"), labels), [])
        for t in sorted(float(t) for t, _ in series["values"]):
            if periods and t - periods[-1][1] <= 1.5 * step:
                periods[-1] = (periods[-1][0], t)
            else:
                periods.append((t, t))
    return {k: sorted(v) for k, v in out.items()}


def wait_for_targets(prometheus_url: str, job: str, count: int, timeout: float = 60.0) -> None:
    """Until Prometheus has scraped ``count`` targets of ``job`` successfully: load before that
    would age jobs nobody watches, and the exporter-down alert would fire on the gap."""
    def up() -> list[Any]:
        return list(prometheus_api(prometheus_url, "query", {"query": f'up{{job="{job}"}} == 1'})["result"])

    if not wait_until(lambda: len(up()) >= count, timeout, every=0.2):
        raise RuntimeError(f"Prometheus at {prometheus_url} scraped {len(up())} of {count} exporters of job "
                           f"{job!r} within {timeout:g}s")


def wait_until_quiet(prometheus_url: str, timeout: float = 60.0) -> None:
    """Until no alert is pending or firing (the gap before the first scrapes can leave one): the
    drill's timeline must start from silence."""
    if not wait_until(lambda: not prometheus_api(prometheus_url, "query", {"query": "ALERTS"})["result"],
                      timeout, every=0.2):
        raise RuntimeError(f"alerts still pending or firing in Prometheus at {prometheus_url} after {timeout:g}s")


def wait_until_evaluated(prometheus_url: str, since: float, timeout: float = 60.0) -> None:
    """Until every rule group has been evaluated after ``since`` (the exporters' first scrapes):
    the replay's clock starts on a warm pipeline, not on rules that have never run."""
    if not wait_until(lambda: rules_evaluated_since(prometheus_url, since), timeout, every=0.2):
        raise RuntimeError(f"Prometheus at {prometheus_url} has not evaluated its rules within {timeout:g}s "
                           "of scraping the exporters")


def delivered_from_alertmanager(alertmanager_url: str) -> dict[AlertKey, float]:
    """Alerts Alertmanager holds now (a team's own stack has no webhook log of ours)."""
    with urllib.request.urlopen(f"{alertmanager_url.rstrip('/')}/api/v2/alerts", timeout=30) as response:
        alerts = json.load(response)
    out: dict[AlertKey, float] = {}
    for alert in alerts:
        labels = dict(alert["labels"])
        key = _key(labels.pop("alertname"), labels)
        out[key] = epoch(alert["startsAt"])
    return out


def _delivered_from_log(log_file: Path) -> tuple[dict[AlertKey, float], float | None]:
    """When each alert first reached the webhook (epoch s), and the longest a delivery took after
    the alert started firing."""
    out: dict[AlertKey, float] = {}
    took: list[float] = []
    for d in deliveries(log_file):
        key = _key(d.alert, d.labels)
        at = d.starts_at if d.received_at is None else d.received_at
        out[key] = min(out.get(key, at), at)
        if d.received_at is not None:
            took.append(d.received_at - d.starts_at)
    return out, max(took, default=None)


def pools_of(scenario: Scenario) -> list[WorkerPool]:
    return [WorkerPool(p.name, p.count, p.classes) for p in scenario.workers]


def predicted(scenario: Scenario, policy: str, until: float) -> Prediction:
    """What ``fairctl simulate`` says of the same first ``until`` seconds."""
    short = scenario.shortened(until)
    with tempfile.TemporaryDirectory(prefix="fairctl-drill-") as tmp:
        rules, held = Path(tmp) / "rules.yml", Path(tmp) / "held.yml"
        text = rules_text(scenario.config)
        rules.write_text(text, encoding="utf-8")
        held.write_text(without_for(text), encoding="utf-8")
        outcome = run_policy(short, policy, rules, held_rules=held)
    return Prediction(outcome.alerts or [], outcome.held or [])


def drill_config(config: Config, replay: Replay, interval: float, prefix: str) -> Config:
    """``config`` as a drill runs it: compressed, under the drill's own prefix, scraped in time as
    its stack applies it (the first config and every change alike: no difference to warn of)."""
    config = compress(config, replay, scrape_interval=interval)
    return scraped_in_time(dataclasses.replace(config, redis=dataclasses.replace(config.redis, prefix=prefix)), interval)


def run_policy_drill(scenario: Scenario, policy: str, replay: Replay, directory: Path, *,
                     external: External | None = None, interval: float = 1.0,
                     say: Callable[[str], None] = lambda _: None,
                     on_stack: Callable[[Stack], None] = lambda _: None,
                     replay_at: Callable[[float], Replay] | None = None) -> PolicyDrill:
    """One policy, live: start, replay, read the timeline back, stop; always stops what it started
    (on Ctrl-C too: ``on_stack`` gets each stack before it starts, so a caller can say what its
    ``stopped`` holds afterwards). ``replay_at(speed)``: the replay at a lower speed, for when the
    pipeline here is too slow for the scenario's deadlines at this one (None: keep the speed)."""
    started = time.monotonic()
    say(f"{policy}: simulating the same {replay.until:g}s of the scenario for comparison")
    prediction = predicted(scenario, policy, replay.until)
    deadlines = room(scenario.expect.get(policy), prediction.fired, replay.until)
    changes: list[str] = []
    while True:
        try:
            result = _drill_once(scenario, policy, replay, directory, prediction, deadlines, external=external,
                                 interval=interval, say=say, on_stack=on_stack,
                                 may_slow_down=replay_at is not None and len(changes) < MAX_SPEED_CHANGES)
        except SlowDown as slower:
            assert replay_at is not None
            changes.append(f"speed {replay.speed:g} -> {slower.speed:g}: {slower.why}")
            say(f"{policy}: {changes[-1]}")
            replay = replay_at(slower.speed)
            continue
        result.speed_changes = changes
        result.wall_s = time.monotonic() - started
        return result


def _too_slow(delay: PipelineDelay, speed: float, deadlines: Room | None, when: str) -> SlowDown | None:
    slower = workable_speed(delay.real_s, speed, deadlines)
    if slower is None or deadlines is None:
        return None
    return SlowDown(slower, f"{when} the live pipeline took up to {delay.real_s:.2f}s, "
                            f"{human(delay.real_s * speed)} of scenario time at speed {speed:g}, which leaves too "
                            f"little of the {human(deadlines.seconds)} {deadlines} has")


def _drill_once(scenario: Scenario, policy: str, replay: Replay, directory: Path, prediction: Prediction,
                deadlines: Room | None, *, external: External | None, interval: float,
                say: Callable[[str], None], on_stack: Callable[[Stack], None], may_slow_down: bool) -> PolicyDrill:
    """One live run at ``replay``'s speed; raises :class:`SlowDown` (its stack stopped) when the
    warm-up, or the run's own delay behind a missed deadline, shows the speed too high."""
    result = PolicyDrill(policy, replay)
    prefix = f"drill-{policy}"
    config = drill_config(scenario_config(scenario, policy), replay, interval, prefix)
    if (directory / policy).exists():  # a drill starts from empty queues, never an earlier run's
        shutil.rmtree(directory / policy)
    stack = Stack(directory / policy)
    on_stack(stack)
    say(f"{policy}: starting the stack under {stack.directory}")
    job = alert_settings(config).exporter_job
    if external is None:
        state = stack.up(config, pools=pools_of(scenario), interval=interval, usual_ports=False)
    else:
        state = stack.up_workers(dataclasses.replace(config, redis=dataclasses.replace(config.redis, url=external.redis_url)),
                                 pools=pools_of(scenario), prometheus_url=external.prometheus_url,
                                 alertmanager_url=external.alertmanager_url)
    try:
        warm = _warm_up(state, job, external, interval)
        say(f"{policy}: the pipeline is warm; its delay here: {warm}")
        if may_slow_down and (slower := _too_slow(warm, replay.speed, deadlines, "warming up,")) is not None:
            raise slower
        scheduler = open_queue(config, redis_client(state.redis_url))
        say(f"{policy}: replaying {replay.until:g} scenario seconds in {replay.real_seconds(replay.until):.0f}s "
            f"(speed {replay.speed:g}, one live job per {replay.volume:.3g})")
        changes = live_changes(scenario, policy, lambda c: drill_config(c, replay, interval, prefix))
        result.load = LoadGenerator(scenario, scheduler, replay, changes=changes,
                                    say=lambda line: say(f"{policy}: {line}")).run()
        time.sleep(SETTLE_EVALUATIONS * interval)
        t0, end = result.load.started_at, time.time()
        replay_end = t0 + replay.real_seconds(replay.until)
        selector = "" if external is None else f'job="{job}"'
        step = max(QUERY_STEP_S, (end - t0) / MAX_POINTS)
        firing = alert_periods(state.prometheus_url, "firing", t0, end, step, selector)
        pending = alert_periods(state.prometheus_url, "pending", t0, end, step, selector)
        if external is None:
            delivered, delivery_s = _delivered_from_log(Path(state.webhook_log))
        else:
            delivered = delivered_from_alertmanager(external.alertmanager_url) if external.alertmanager_url else {}
            delivery_s = None
        result.delay = delay = measure(state.prometheus_url, job, t0, replay_end, interval=interval,
                                       load_lag_s=result.load.max_lag_s, delivery_s=delivery_s)
    finally:
        stack.down(state)
    _timeline(result, scenario, prediction, t0, firing, pending, delivered)
    if may_slow_down and _explained_by_delay(result, scenario, prediction):
        slower = _too_slow(delay, replay.speed, deadlines, "replaying,")
        if slower is not None:
            raise slower
    return result


def _warm_up(state: StackState, job: str, external: External | None, interval: float) -> PipelineDelay:
    """Wait until Prometheus has scraped every exporter, holds no alert (own stack) and has
    evaluated its rules since, then for a few more evaluations: the pipeline's gaps over that
    stretch, before any load."""
    wait_for_targets(state.prometheus_url, job, 2 if external is None else 1)
    scraped = time.time()
    if external is None:
        wait_until_quiet(state.prometheus_url)
    wait_until_evaluated(state.prometheus_url, scraped)
    time.sleep(max(0.0, scraped + WARM_UP_EVALUATIONS * interval - time.time()))
    return measure(state.prometheus_url, job, scraped, time.time(), interval=interval)


def _timeline(result: PolicyDrill, scenario: Scenario, prediction: Prediction, t0: float,
              firing: Mapping[AlertKey, Periods], pending: Mapping[AlertKey, Periods],
              delivered: Mapping[AlertKey, float]) -> None:
    """Fill ``result``'s alerts, violations, disagreements and near misses from the live
    timeline (epoch s) and the prediction."""
    replay = result.replay

    def scenario_s(t: float) -> float:
        return max(0.0, replay.scenario_seconds(t - t0))

    def live_periods(periods: Periods) -> Periods:
        """In scenario seconds, cut at the replay's end: the settling evaluations are for delivery only."""
        return [(scenario_s(a), min(scenario_s(b), replay.until)) for a, b in periods if scenario_s(a) <= replay.until]

    fired = {k: p for k, p in ((k, live_periods(v)) for k, v in firing.items()) if p}
    waiting = {k: live_periods(v) for k, v in pending.items()}
    # Alertmanager may still deliver what fired while the stack was starting, before the replay.
    reached = {k: scenario_s(t) for k, t in delivered.items() if 0 <= replay.scenario_seconds(t - t0) <= replay.until}
    simulated = {_key(a.alert, a.labels): a.first_firing_s for a in prediction.fired}
    held = {_key(a.alert, a.labels): longest(a.periods) for a in prediction.held}
    config = scenario_config(scenario, result.policy)
    fors = for_durations(config)
    for key in sorted(fired.keys() | reached.keys() | simulated.keys(),
                      key=lambda k: (fired[k][0][0] if k in fired else float("inf"), simulated.get(k, float("inf")), k)):
        periods, labels = fired.get(key), dict(key[1])
        result.alerts.append(DrillAlert(
            key[0], labels, periods[0][0] if periods else None, reached.get(key), simulated.get(key),
            periods[-1][1] if periods else None, for_s=fors.get((key[0], labels.get("queue")), fors.get((key[0], None))),
            live_pending_s=longest(waiting.get(key, [])), simulated_held_s=held.get(key)))
    expectation = scenario.expect.get(result.policy)
    if expectation is not None:
        expectation, result.unchecked = windowed(expectation, replay.until, result.resolution_s, prediction.fired)
    result.violations = _violations(expectation, result.alerts)
    result.disagreements, result.near_misses = _disagreements(result.alerts, replay, result.resolution_s,
                                                              unresolved_ages(scenario, config, replay))


# The alerts that compare a class's waits or ages with its max_age.
AGE_ALERTS = frozenset({QUEUE_STARVING, QUIET_TENANTS_STARVING, PRIORITY_INVERSION})


def unresolved_ages(scenario: Scenario, config: Config, replay: Replay) -> dict[str, float]:
    """The classes whose ages the live replay cannot resolve, with how long a live job holds its
    slot (scenario seconds). Each live job stands for ``volume`` jobs and runs that much longer,
    so live slots come free ``volume`` times as seldom: an urgent job that arrives while every
    slot is busy (as all are when the replay starts, and whenever several finish together) waits
    up to one such job, however urgent. A class whose max_age is shorter than the scenario's
    quickest jobs so stretched can look starved live where the simulation's slots free up in time."""
    hold = quickest_service_s(scenario) * replay.volume
    return {c.name: hold for c in config.classes if c.max_age < hold}


def for_durations(config: Config) -> dict[tuple[str, str | None], float]:
    """Each rule's ``for:`` (scenario s) by alert and class (None: an alert with one rule for all)."""
    return {(a.name, v.queue): v.for_seconds for a in every_alert(config) for v in a.variants}


def windowed(expectation: Expectation, until: float, resolution_s: float,
             simulated: Sequence[FiredAlert]) -> tuple[Expectation, list[str]]:
    """What of a whole scenario's expectation a replay of its first ``until`` seconds can check,
    and a line for each part it cannot. A deadline within the replay stands; an alert wanted with
    a later deadline or none is checked only where the simulation fires it early enough for the
    live pipeline to follow within the replay; a ``resolved_by`` after the end is dropped."""
    fire, unchecked = [], []
    for want in expectation.fire:
        resolved_by = None if (want.resolved_by or 0) > until else want.resolved_by
        if want.before is not None and want.before <= until:
            fire.append(dataclasses.replace(want, resolved_by=resolved_by))
            continue
        first = first_firing(want, simulated)
        if first is not None and first + resolution_s < until:
            fire.append(dataclasses.replace(want, before=None, resolved_by=resolved_by))
        else:
            where = "after" if first is None or first >= until else "too near"
            unchecked.append(f"{want}: the simulation fires it {where} the end of the replay ({human(until)})")
    return dataclasses.replace(expectation, fire=tuple(fire)), unchecked


def _violations(expectation: Expectation | None, alerts: Sequence[DrillAlert]) -> list[str]:
    """The scenario's expectation checked on Prometheus's timeline, and every alert that must fire
    checked on what reached the webhook too."""
    if expectation is None:
        return []
    live = [Fired(a.alert, a.labels, a.first_firing_s, a.last_firing_s) for a in alerts
            if a.first_firing_s is not None and a.last_firing_s is not None]
    out = expectation.violations(live)
    for want in expectation.fire:
        if any(want.matches(a.alert, a.labels) for a in alerts if a.first_firing_s is not None) and \
                not any(want.matches(a.alert, a.labels) for a in alerts if a.delivered_s is not None):
            out.append(f"{want} fired in Prometheus but Alertmanager never delivered it")
    return out


def _explained_by_delay(result: PolicyDrill, scenario: Scenario, prediction: Prediction) -> bool:
    """Whether a deadline the simulation meets was missed live by no more than the run's own
    delay: the speed, not the rules, decided that verdict."""
    expectation = scenario.expect.get(result.policy)
    for want in expectation.fire if expectation is not None else ():
        simulated, live = first_firing(want, prediction.fired), first_firing(want, result.alerts)
        if want.before is None or simulated is None or live is None or simulated > want.before:
            continue
        if want.before < live <= simulated + result.resolution_s:
            return True
    return False


def _closeness(a: DrillAlert) -> str:
    """How close an alert seen on one side came on the other."""
    of_for = "" if a.for_s is None else f" of the {human(a.for_s)} its for: asks"
    if a.first_firing_s is not None:
        paged = "delivered" if a.delivered_s is not None else "never delivered"
        held = ("its condition never held in the simulation" if a.simulated_held_s is None
                else f"in the simulation its condition held for {human(a.simulated_held_s)} at most{of_for}")
        return f"{a} fired only in the drill (at {human(a.first_firing_s)}, {paged}); {held}"
    assert a.simulated_s is not None
    pending = ("live it was never pending" if a.live_pending_s is None
               else f"live it was pending for {human(a.live_pending_s)} at most{of_for}")
    return f"{a} fired only in the simulation (at {human(a.simulated_s)}); {pending}"


def _disagreements(alerts: Sequence[DrillAlert], replay: Replay, resolution_s: float,
                   unresolved: Mapping[str, float]) -> tuple[list[str], list[str]]:
    """Alerts only one side fired: the real disagreements, and the near misses reported beside them.

    A near miss: first seen in the replay's last tenth, or too late for the other side to catch
    within the resolution; came within the resolution of its ``for:`` on the other side; live
    only, never delivered (a flicker shorter than Alertmanager's wait, which pages nobody); or,
    live only, an age alert of a class whose ages the replay cannot resolve (``unresolved``, see
    :func:`unresolved_ages`)."""
    cutoff = replay.until * (1 - BORDERLINE_SHARE)
    real: list[str] = []
    near: list[str] = []
    for a in alerts:
        if (a.first_firing_s is None) == (a.simulated_s is None):
            continue
        queue = a.labels.get("queue", "")
        coarse = a.first_firing_s is not None and a.alert in AGE_ALERTS and queue in unresolved
        if a.first_firing_s is not None:
            other = a.simulated_held_s
            close = a.first_firing_s >= cutoff or a.delivered_s is None or coarse
        else:
            assert a.simulated_s is not None
            other = a.live_pending_s
            close = a.simulated_s >= min(cutoff, replay.until - resolution_s)
        close = close or (other is not None and a.for_s is not None and other + resolution_s >= a.for_s)
        why = (f"; a live job here holds its slot for {human(unresolved[queue])}, one of {replay.volume:g} "
               f"scenario jobs, longer than {queue}'s max_age" if coarse else "")
        (near if close else real).append(_closeness(a) + why)
    return real, near


def as_json(scenario: Scenario, drills: Sequence[PolicyDrill]) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "policies": {d.policy: {
            "speed": d.replay.speed, "volume": d.replay.volume, "until_s": d.replay.until, "wall_s": round(d.wall_s, 1),
            "speed_changes": d.speed_changes,
            "resolution_s": d.shown_resolution_s,
            "pipeline_delay": None if d.delay is None else {
                "real_s": round(d.delay.real_s, 3), **{k: round(v, 3) if isinstance(v, float) else v
                                                       for k, v in dataclasses.asdict(d.delay).items()}},
            "alerts": [{"alert": a.alert, "labels": dict(a.labels), "first_firing_s": a.first_firing_s,
                        "last_firing_s": a.last_firing_s, "delivered_s": a.delivered_s,
                        "simulated_first_firing_s": a.simulated_s, "for_s": a.for_s,
                        "live_longest_pending_s": a.live_pending_s,
                        "simulated_longest_held_s": a.simulated_held_s} for a in d.alerts],
            "expectation_violations": d.violations,
            "disagreements_with_simulate": d.disagreements,
            "near_misses": d.near_misses,
            "not_checked": d.unchecked,
            "load": {"enqueued": dict(d.load.enqueued), "rejected": dict(d.load.rejected),
                     "max_lag_s": round(d.load.max_lag_s, 3), "retries": d.load.retries},
            "config_changes": [{"at_s": c.at_s, "changes": list(c.changes)} for c in d.load.config_changes],
        } for d in drills},
    }
