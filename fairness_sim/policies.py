"""Each policy of a scenario simulated on the reference model and, given a rules file, its alerts
evaluated through promtool: what ``fairctl simulate`` compares and ``fairctl drill`` checks
against.

The policies run in separate processes (a storm is CPU-bound Python; two cores finish four
policies in half the time). Forked workers inherit the scenario rather than unpickling it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics as m
from fairness_core.ages import human

from .alert_evaluation import FiredAlert, SeriesRecorder, evaluate
from .scenario import FairWorkerTime, FigureCheck, Fired, PeakStarts, Scenario, TenantWorkerTime, WaitFalls
from .simulator import PolicyRun, scenario_config, simulate

# Labels every simulated alert carries alike (the simulated exporter's job and its one queue
# group), or shown apart.
HIDDEN_LABELS = {"severity", "job", "instance", m.GROUP}


def shown_labels(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """An alert's labels as a run's report names it, sorted: without those every alert carries
    alike, nor the ``shard`` of an unsharded queue (its one shard, the group itself), as a rule
    that does not fold the shards away keeps it."""
    one_shard = labels.get(m.SHARD) == labels.get(m.GROUP)
    return sorted((k, v) for k, v in labels.items() if k not in HIDDEN_LABELS and not (k == m.SHARD and one_shard))
PROGRESS_EVERY_S = 0.2


@dataclass(frozen=True)
class Check:
    """One of the figures the scenario expects of a run, as checked: ``ok`` None when it could
    not be (the run it compares with was not simulated)."""

    ok: bool | None
    text: str

    def __str__(self) -> str:
        return {True: "checked", False: "EXPECTATION FAILED", None: "not checked"}[self.ok] + f": {self.text}"


def _points(share: float) -> str:
    return f"{share * 100:.1f} points"


def judge(check: FigureCheck, run: PolicyRun, runs: dict[str, PolicyRun]) -> Check:
    """A figure check on ``run``; ``runs``: every run simulated, by name (for comparisons)."""
    if isinstance(check, TenantWorkerTime):
        share = run.worker_time.tenant(check.queue, check.tenant).share if run.worker_time else 0.0
        bounds = [f"at least {check.at_least:.0%}" if check.at_least is not None else "",
                  f"at most {check.at_most:.0%}" if check.at_most is not None else ""]
        ok = (check.at_least is None or share >= check.at_least) and (check.at_most is None or share <= check.at_most)
        return Check(ok, f"{check.tenant} holds {share:.1%} of {check.queue}'s worker time "
                         f"(expected {' and '.join(b for b in bounds if b)})")
    if isinstance(check, FairWorkerTime):
        worst = run.worker_time.furthest_from_fair(check.queue) if run.worker_time else None
        if worst is None or worst.fair_share is None:
            return Check(False, f"no tenant of {check.queue} was backlogged throughout: no fair share to compare with")
        count = len(run.worker_time.backlogged[check.queue]) if run.worker_time else 0
        gap = abs(worst.share - worst.fair_share)
        return Check(gap <= check.within, f"each of the {count:,} tenants backlogged throughout holds its "
                     f"tier-weighted fair share of {check.queue}'s worker time within {_points(check.within)} "
                     f"(furthest: {worst.tenant}, {worst.share:.1%} against {worst.fair_share:.1%})")
    if isinstance(check, PeakStarts):
        starts = run.starts.tenants.get(check.tenant) if run.starts else None
        peak = starts.peak if starts is not None else 0
        bounds = [f"at least {check.at_least:,}" if check.at_least is not None else "",
                  f"at most {check.at_most:,}" if check.at_most is not None else ""]
        ok = (check.at_least is None or peak >= check.at_least) and (check.at_most is None or peak <= check.at_most)
        return Check(ok, f"{check.tenant}'s busiest second: {peak:,} jobs started "
                         f"(expected {' and '.join(b for b in bounds if b)})")
    assert isinstance(check, WaitFalls)
    baseline = runs.get(check.baseline)
    now = run.stream_wait_p99_s.get(check.stream)
    if baseline is None:
        return Check(None, f"{check.stream}: p99 wait against {check.baseline}, which was not simulated")
    before = baseline.stream_wait_p99_s.get(check.stream)
    if before is None or now is None:
        return Check(False, f"{check.stream}: no job started in {'this run' if now is None else check.baseline}, "
                            "so no p99 wait to compare")
    factor = before / now if now > 0 else float("inf")
    return Check(factor >= check.by, f"the p99 wait of {check.stream} falls {factor:.1f}x from {check.baseline} "
                                     f"({human(before)} -> {human(now)}; expected at least {check.by:g}x)")


@dataclass(frozen=True)
class Outcome:
    """One policy's run and the alerts it fired (None: not evaluated); ``held``: when asked for,
    the periods each alert's condition held, ``for:`` or not."""

    run: PolicyRun
    alerts: list[FiredAlert] | None
    held: list[FiredAlert] | None = None

    def alert_violations(self, scenario: Scenario) -> list[str] | None:
        """What contradicts the alerts the scenario's ``expect`` names (None: nothing to check)."""
        expectation = scenario.expect.get(self.run.name)
        if expectation is None or self.alerts is None or (expectation.figures and not expectation.has_alerts):
            return None
        step = scenario.evaluation_interval  # a firing period ends at the first evaluation that no longer fires
        return expectation.violations([Fired(a.alert, a.labels, a.first_firing_s, a.periods[-1][1] - step)
                                       for a in self.alerts])

    def checks(self, scenario: Scenario, outcomes: Sequence[Outcome] = ()) -> list[Check]:
        """The figures the scenario's ``expect`` names for this run, checked; ``outcomes``: the
        other runs, for comparisons."""
        expectation = scenario.expect.get(self.run.name)
        runs = {o.run.name: o.run for o in outcomes}
        return [judge(check, self.run, runs) for check in (expectation.figures if expectation else ())]

    def violations(self, scenario: Scenario, outcomes: Sequence[Outcome] = ()) -> list[str] | None:
        """What contradicts the scenario's ``expect`` (None: nothing to check it against)."""
        alerts = self.alert_violations(scenario)
        checks = self.checks(scenario, outcomes)
        if alerts is None and not any(c.ok is not None for c in checks):
            return None
        return (alerts or []) + [c.text for c in checks if c.ok is False]


# ------------------------------------------------------------------ running the policies

_worker: dict[str, Any] = {}  # in a worker process: the scenario, rules file and shared progress


def _init_worker(scenario: Scenario, rules: Path | None, progress: Any) -> None:
    """Forked worker set-up: the scenario is inherited, never pickled (nor is the Config in it).

    Only the parent decides when a run stops. A worker is its own process group, so a terminal's
    Ctrl-C reaches the parent alone, and it ignores SIGINT and takes SIGTERM's default (it inherited
    the parent's handlers, which would raise in it and have it write the error back into a result
    pipe nobody reads any more). On an interruption the parent kills each worker's group (the
    worker and its promtool, if one runs): a worker has nothing to clean up, and its policy's
    result is no longer wanted, so it is not waited for."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _worker.update(scenario=scenario, rules=rules, progress=progress)


def run_policy(scenario: Scenario, policy: str, rules: Path | None,
               progress: Callable[[float], None] | None = None, *, held_rules: Path | None = None) -> Outcome:
    """Simulate one policy and, with a rules file, evaluate its alerts; with ``held_rules`` (the
    same rules without their ``for:``, see :func:`without_for`), also when their conditions held."""
    recorder = SeriesRecorder(scenario_config(scenario, policy)) if rules is not None else None
    run = simulate(scenario, policy, observe=recorder.observe if recorder else None, progress=progress,
                   reconfigure=recorder.reconfigure if recorder else None)
    if recorder is None or rules is None:
        return Outcome(run, None)
    series = recorder.input_series()

    def fired(rules_file: Path) -> list[FiredAlert]:
        return evaluate(rules_file, policy, series, scrape_interval=scenario.scrape_interval,
                        evaluation_interval=scenario.evaluation_interval, duration=scenario.duration)

    return Outcome(run, fired(rules), None if held_rules is None else fired(held_rules))


def without_for(rules_text: str) -> str:
    """A rules file's text with every alert's ``for:`` removed: an alert then fires whenever its
    condition holds, which shows how close it came to firing."""
    data = yaml.safe_load(rules_text)
    for group in data["groups"]:
        for rule in group.get("rules") or []:
            rule.pop("for", None)
    return yaml.safe_dump(data, sort_keys=False)


def _run_in_worker(policy: str, index: int) -> Outcome:
    """run_policy in a worker process, reporting progress through the shared array."""
    def progress(fraction: float) -> None:
        _worker["progress"][index] = fraction
    return run_policy(_worker["scenario"], policy, _worker["rules"], progress)


def run_policies(scenario: Scenario, policies: Sequence[str], rules: Path | None, processes: int,
                 progress: Callable[[Sequence[float]], None] | None = None) -> list[Outcome]:
    """Every policy, ``processes`` at a time; ``progress`` gets each policy's completed fraction
    (at least every PROGRESS_EVERY_S when the policies run in other processes)."""
    report = progress or (lambda fractions: None)
    fractions = [0.0] * len(policies)
    if processes <= 1:
        outcomes = []
        for i, policy in enumerate(policies):
            def tick(fraction: float, i: int = i) -> None:
                fractions[i] = fraction
                report(fractions)
            outcomes.append(run_policy(scenario, policy, rules, tick))
        return outcomes
    context = multiprocessing.get_context("fork")
    shared = context.Array("d", fractions, lock=False)
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=context, initializer=_init_worker,
                               initargs=(scenario, rules, shared))
    try:
        futures = [pool.submit(_run_in_worker, p, i) for i, p in enumerate(policies)]
        pending: set[Future[Outcome]] = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=PROGRESS_EVERY_S, return_when=FIRST_EXCEPTION)
            for future in finished:
                future.result()  # raise the first failure now, not after the others finish
            report(list(shared))
        outcomes = [f.result() for f in futures]
    except BaseException:  # Ctrl-C, SIGTERM or a policy's failure: the other policies are not waited for
        _kill_workers(pool)
        raise
    pool.shutdown()
    return outcomes


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool at once: SIGKILL each worker's process group, then reap them."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown() forgets it
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.kill()  # a worker killed before its setpgid had no group of its own
    for process in workers:
        process.join(timeout=5)
    # The pool's manager thread sees its workers gone and ends; joined now, the interpreter's exit
    # has nothing left to wake (waking it there races its pipe's close and prints a traceback).
    # The first shutdown dropped the pool's reference to it, so a second one would join nothing.
    if manager is not None:
        manager.join(timeout=10)


def alert_label(alert: FiredAlert) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in shown_labels(alert.labels))
    severity = alert.labels.get("severity")
    return alert.alert + (f"{{{inner}}}" if inner else "") + (f" ({severity})" if severity else "")
