"""``fairctl drill``: a scenario replayed live on the real parts, and the alert timeline read back.

Per policy: the scenario's config with that policy is compressed by the speed
(:mod:`fairness_sim.timescale`), a stack runs it (or the workers run against a team's own Redis,
Prometheus and Alertmanager), the load generator enqueues the scenario's arrivals through
``Scheduler.submit`` and applies its config changes (compressed alike) at their time with
``Scheduler.apply``, and once the replay ends the firing alerts are read from Prometheus
(``ALERTS``) and from what Alertmanager delivered to the webhook receiver. Each alert's first
firing is mapped back to scenario time and set beside the scenario's ``expect`` and beside what
``fairctl simulate`` predicts for the same stretch of the scenario.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerts.output import rules_text
from fairness_core.config import Config
from fairness_core.connection import redis_client
from fairness_core.scheduler import Scheduler
from fairness_sim.loadgen import LoadGenerator, LoadStats, Replay, live_changes
from fairness_sim.scenario import Fired, Scenario, alert_text
from fairness_sim.simulator import scenario_config
from fairness_stack.servers import wait_until
from fairness_stack.supervisor import Stack, WorkerPool
from fairness_stack.webhook import deliveries, epoch

from .alert_evaluation import FiredAlert
from .policies import HIDDEN_LABELS, run_policy
from .timescale import compress

# A first firing in the last tenth of the replay is "borderline": either run may reach it a little
# later or sooner, so it is reported but not counted as a disagreement. So is an alert the
# simulation fires less than LAG_EVALUATIONS intervals (in real time) before the end: live, each
# alert waits for a scrape, then a rule evaluation, which the simulation does not.
BORDERLINE_SHARE = 0.1
LAG_EVALUATIONS = 3
SETTLE_EVALUATIONS = 3
# ALERTS is read back at this resolution (real s), within Prometheus's limit of points per series.
QUERY_STEP_S, MAX_POINTS = 0.1, 10_000  # evaluations waited after the replay, for the last alerts to be delivered

AlertKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class External:
    """A team's own stack to drill against instead of starting one."""

    redis_url: str
    prometheus_url: str
    alertmanager_url: str | None = None


@dataclass(frozen=True)
class DrillAlert:
    """One alert of the live run, its times in scenario seconds (None: not seen there)."""

    alert: str
    labels: Mapping[str, str]
    first_firing_s: float | None
    delivered_s: float | None
    simulated_s: float | None
    last_firing_s: float | None = None

    def __str__(self) -> str:
        return alert_text(self.alert, sorted(self.labels.items()))


@dataclass
class PolicyDrill:
    policy: str
    replay: Replay
    alerts: list[DrillAlert] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    load: LoadStats = field(default_factory=LoadStats)
    wall_s: float = 0.0


def _key(alert: str, labels: Mapping[str, str]) -> AlertKey:
    return alert, tuple(sorted((k, v) for k, v in labels.items() if k not in HIDDEN_LABELS))


def prometheus_api(base: str, path: str, params: Mapping[str, str]) -> Any:
    url = f"{base.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path}: {body.get('error', body)}")
    return body["data"]


def firing_from_prometheus(prometheus_url: str, start: float, end: float, step: float,
                           selector: str = "") -> dict[AlertKey, tuple[float, float]]:
    """First and last firing (epoch s) of every alert in ``ALERTS`` between ``start`` and ``end``."""
    query = 'ALERTS{alertstate="firing"%s}' % (f",{selector}" if selector else "")
    data = prometheus_api(prometheus_url, "query_range",
                          {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    out: dict[AlertKey, tuple[float, float]] = {}
    for series in data["result"]:
        labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertstate")}
        key = _key(labels.pop("alertname"), labels)
        times = [float(t) for t, _ in series["values"]]
        first, last = out.get(key, (min(times), max(times)))
        out[key] = (min(first, *times), max(last, *times))
    return out


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


def _delivered_from_log(log_file: Path) -> dict[AlertKey, float]:
    out: dict[AlertKey, float] = {}
    for d in deliveries(log_file):
        key = _key(d.alert, d.labels)
        out[key] = min(out.get(key, d.starts_at), d.starts_at)
    return out


def pools_of(scenario: Scenario) -> list[WorkerPool]:
    return [WorkerPool(p.name, p.count, p.classes) for p in scenario.workers]


def predicted(scenario: Scenario, policy: str, until: float) -> list[FiredAlert]:
    """What ``fairctl simulate`` says fires in the same first ``until`` seconds."""
    short = scenario.shortened(until)
    with tempfile.TemporaryDirectory(prefix="fairctl-drill-") as tmp:
        rules = Path(tmp) / "rules.yml"
        rules.write_text(rules_text(scenario.config), encoding="utf-8")
        outcome = run_policy(short, policy, rules)
    return outcome.alerts or []


def drill_config(config: Config, replay: Replay, interval: float, prefix: str) -> Config:
    """``config`` as a drill runs it: compressed, under the drill's own prefix (the first config and
    every change alike)."""
    config = compress(config, replay, scrape_interval=interval)
    return dataclasses.replace(config, redis=dataclasses.replace(config.redis, prefix=prefix))


def run_policy_drill(scenario: Scenario, policy: str, replay: Replay, directory: Path, *,
                     external: External | None = None, interval: float = 1.0,
                     say: Callable[[str], None] = lambda _: None,
                     on_stack: Callable[[Stack], None] = lambda _: None) -> PolicyDrill:
    """One policy, live: start, replay, read the timeline back, stop; always stops what it started
    (on Ctrl-C too: ``on_stack`` gets the stack before it starts, so a caller can say what its
    ``stopped`` holds afterwards)."""
    started = time.monotonic()
    result = PolicyDrill(policy, replay)
    say(f"{policy}: simulating the same {replay.until:g}s of the scenario for comparison")
    prediction = {_key(a.alert, a.labels): a.first_firing_s for a in predicted(scenario, policy, replay.until)}
    prefix = f"drill-{policy}"
    config = drill_config(scenario_config(scenario, policy), replay, interval, prefix)
    if (directory / policy).exists():  # a drill starts from empty queues, never an earlier run's
        shutil.rmtree(directory / policy)
    stack = Stack(directory / policy)
    on_stack(stack)
    say(f"{policy}: starting the stack under {stack.directory}")
    if external is None:
        state = stack.up(config, pools=pools_of(scenario), interval=interval, usual_ports=False)
    else:
        state = stack.up_workers(dataclasses.replace(config, redis=dataclasses.replace(config.redis, url=external.redis_url)),
                                 pools=pools_of(scenario), prometheus_url=external.prometheus_url,
                                 alertmanager_url=external.alertmanager_url)
    try:
        wait_for_targets(state.prometheus_url, config.alerts.exporter_job, 2 if external is None else 1)
        if external is None:
            wait_until_quiet(state.prometheus_url)
        scheduler = Scheduler(config, redis_client(state.redis_url))
        say(f"{policy}: replaying {replay.until:g} scenario seconds in {replay.real_seconds(replay.until):.0f}s "
            f"(speed {replay.speed:g}, one live job per {replay.volume:.3g})")
        changes = live_changes(scenario, policy, lambda c: drill_config(c, replay, interval, prefix))
        result.load = LoadGenerator(scenario, scheduler, replay, changes=changes,
                                    say=lambda line: say(f"{policy}: {line}")).run()
        time.sleep(SETTLE_EVALUATIONS * interval)
        t0, end = result.load.started_at, time.time()
        fired = firing_from_prometheus(state.prometheus_url, t0, end, max(QUERY_STEP_S, (end - t0) / MAX_POINTS),
                                       selector="" if external is None else f'job="{config.alerts.exporter_job}"')
        delivered = (_delivered_from_log(Path(state.webhook_log)) if external is None
                     else delivered_from_alertmanager(external.alertmanager_url) if external.alertmanager_url else {})
    finally:
        stack.down(state)
    scenario_s = replay.scenario_seconds
    # Only what fired within the replay counts; the settling evaluations are for delivery only.
    fired = {k: (first, min(last, t0 + replay.real_seconds(replay.until))) for k, (first, last) in fired.items()
             if scenario_s(first - t0) <= replay.until}
    # Alertmanager may still deliver what fired while the stack was starting, before the replay.
    delivered = {k: t for k, t in delivered.items() if 0 <= scenario_s(t - t0) <= replay.until}
    for key in sorted(fired.keys() | delivered.keys() | prediction.keys(),
                      key=lambda k: (fired.get(k, (float("inf"),))[0], prediction.get(k, float("inf")), k)):
        first, last = (max(0.0, scenario_s(t - t0)) for t in fired[key]) if key in fired else (None, None)
        result.alerts.append(DrillAlert(
            key[0], dict(key[1]), first,
            None if key not in delivered else max(0.0, scenario_s(delivered[key] - t0)),
            prediction.get(key), last))
    result.violations = _violations(scenario, policy, result.alerts)
    result.disagreements = _disagreements(result.alerts, replay, interval)
    result.wall_s = time.monotonic() - started
    return result


def _violations(scenario: Scenario, policy: str, alerts: Sequence[DrillAlert]) -> list[str]:
    """The scenario's expectation checked on Prometheus's timeline, and every alert that must fire
    checked on what reached the webhook too."""
    expectation = scenario.expect.get(policy)
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


def _disagreements(alerts: Sequence[DrillAlert], replay: Replay, interval: float) -> list[str]:
    """Alerts the live run and the simulation disagree on, leaving out the borderline ones."""
    cutoff = replay.until * (1 - BORDERLINE_SHARE)
    lag = replay.scenario_seconds(LAG_EVALUATIONS * interval)
    out = []
    for a in alerts:
        if (a.first_firing_s is None) == (a.simulated_s is None):
            continue
        seen = a.first_firing_s if a.first_firing_s is not None else a.simulated_s
        live_cutoff = cutoff if a.first_firing_s is not None else min(cutoff, replay.until - lag)
        if seen is not None and seen < live_cutoff:
            where = "the drill" if a.first_firing_s is not None else "the simulation"
            out.append(f"{a} fired only in {where} (at {seen:g}s)")
    return out


def as_json(scenario: Scenario, drills: Sequence[PolicyDrill]) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "policies": {d.policy: {
            "speed": d.replay.speed, "volume": d.replay.volume, "until_s": d.replay.until, "wall_s": round(d.wall_s, 1),
            "alerts": [{"alert": a.alert, "labels": dict(a.labels), "first_firing_s": a.first_firing_s,
                        "last_firing_s": a.last_firing_s, "delivered_s": a.delivered_s,
                        "simulated_first_firing_s": a.simulated_s} for a in d.alerts],
            "expectation_violations": d.violations,
            "disagreements_with_simulate": d.disagreements,
            "load": {"enqueued": dict(d.load.enqueued), "rejected": dict(d.load.rejected),
                     "max_lag_s": round(d.load.max_lag_s, 3), "retries": d.load.retries},
            "config_changes": [{"at_s": c.at_s, "changes": list(c.changes)} for c in d.load.config_changes],
        } for d in drills},
    }
