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
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .alert_evaluation import FiredAlert, SeriesRecorder, evaluate
from .scenario import Fired, Scenario
from .simulator import PolicyRun, scenario_config, simulate

# Labels every simulated alert carries alike (the simulated exporter's job), or shown apart.
HIDDEN_LABELS = {"severity", "job", "instance"}
PROGRESS_EVERY_S = 0.2


@dataclass(frozen=True)
class Outcome:
    """One policy's run and the alerts it fired (None: not evaluated)."""

    run: PolicyRun
    alerts: list[FiredAlert] | None

    def violations(self, scenario: Scenario) -> list[str] | None:
        """What contradicts the scenario's ``expect`` (None: nothing to check it against)."""
        expectation = scenario.expect.get(self.run.policy)
        if expectation is None or self.alerts is None:
            return None
        step = scenario.evaluation_interval  # a firing period ends at the first evaluation that no longer fires
        return expectation.violations([Fired(a.alert, a.labels, a.first_firing_s, a.periods[-1][1] - step)
                                       for a in self.alerts])


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
               progress: Callable[[float], None] | None = None) -> Outcome:
    """Simulate one policy and, with a rules file, evaluate its alerts."""
    recorder = SeriesRecorder(scenario_config(scenario, policy)) if rules is not None else None
    run = simulate(scenario, policy, observe=recorder.observe if recorder else None, progress=progress,
                   reconfigure=recorder.reconfigure if recorder else None)
    if recorder is None or rules is None:
        return Outcome(run, None)
    alerts = evaluate(rules, policy, recorder.input_series(), scrape_interval=scenario.scrape_interval,
                      evaluation_interval=scenario.evaluation_interval, duration=scenario.duration)
    return Outcome(run, alerts)


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
    pool.shutdown(wait=True)


def alert_label(alert: FiredAlert) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(alert.labels.items()) if k not in HIDDEN_LABELS)
    severity = alert.labels.get("severity")
    return alert.alert + (f"{{{inner}}}" if inner else "") + (f" ({severity})" if severity else "")
