"""``fairctl simulate``: replay a scenario (the marketing storm by default) under each scheduling
policy, with no servers, and compare what waits, what starves and which alerts would fire.

The policies run through fairness_sim.policies (each on the reference model and, when promtool is
installed, through the real rule evaluation); this module is the command and its terminal and
JSON output. The exit code
says whether every policy behaved as the scenario's ``expect`` says it must: 0 yes, 1 no, 2 for
bad input.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from click.exceptions import Exit

from alerts import promtool
from fairness_core import ConfigError, parse_duration
from fairness_core.ages import human
from fairness_core.config import MAX_SHARDS, POLICIES
from fairness_sim.alert_evaluation import AlertEvaluationError
from fairness_sim.policies import PROGRESS_EVERY_S, Check, Outcome, alert_label, run_policies
from fairness_sim.report import (
    account_lines,
    fairness_text,
    same_starts_note,
    shard_lines,
    start_lines,
    verdict,
    worker_time_lines,
    write_report,
)
from fairness_sim.scenario import DEFAULT_SCENARIO, Scenario, load_scenario
from fairness_sim.simulator import PolicyRun

from .commands import Command, argument
from .common import PATH, check_policies, fail
from .text_table import text_table

EXIT_EXPECTATION = 1
TOP_TENANTS_JSON = 10  # tenants listed per class in --json's worker time, the heaviest first


# ------------------------------------------------------------------ progress


class ProgressBar:
    """One line on stderr, redrawn in place at most every PROGRESS_EVERY_S, only on a terminal."""

    def __init__(self, policies: Sequence[str]) -> None:
        self.policies = policies
        self.enabled = sys.stderr.isatty()
        self._drawn_at: float | None = None

    def draw(self, fractions: Sequence[float]) -> None:
        now = time.monotonic()
        if not self.enabled or (self._drawn_at is not None and now - self._drawn_at < PROGRESS_EVERY_S):
            return
        done = sum(fractions) / len(fractions)
        width = 24
        filled = int(done * width)
        parts = " · ".join(f"{p} {f:4.0%}" for p, f in zip(self.policies, fractions))
        sys.stderr.write(f"\rsimulating [{'#' * filled}{'.' * (width - filled)}] {done:4.0%}  {parts}\x1b[K")
        sys.stderr.flush()
        self._drawn_at = now

    def close(self) -> None:
        if self._drawn_at is not None:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# ------------------------------------------------------------------ presenting them


def _wait(seconds: float | None) -> str:
    return "-" if seconds is None else human(seconds)


def render(scenario: Scenario, outcomes: Sequence[Outcome], alerts_note: str | None) -> str:
    settings = scenario.class_settings()
    lines = [f"scenario {scenario.name}: {human(scenario.duration)} simulated, seed {scenario.seed}", ""]
    header = ("class", "jobs", "wait mean", "p50", "p99", "max", "max oldest", "SLO", "share", "weight")
    for outcome in outcomes:
        run = outcome.run
        lines.append(f"policy {run.title}  ({run.jobs_started:,} jobs started, {run.jobs_enqueued:,} enqueued; "
                     f"{run.wall_s:.1f}s)")
        lines.extend(f"  {change}" for change in run.config_changes)
        rows = [header]
        for c, weight_share in settings.values():
            r = run.classes[c.name]
            rows.append((c.name, f"{r.jobs:,}", _wait(r.wait_mean_s), _wait(r.wait_p50_s), _wait(r.wait_p99_s),
                         _wait(r.wait_max_s), human(r.max_oldest_age_s), human(c.max_age),
                         f"{r.realised_share:.1%}", f"{weight_share:.0%}"))
        lines += text_table(rows, numbers_right=True, indent="  ")
        worst, typical = (max(figures, key=lambda q: figures[q]) for figures in (run.quiet_max_age_s, run.quiet_p95_age_s))
        lines.append(f"  quiet {run.party}s' oldest age: max {human(run.quiet_max_age_s[worst])} ({worst}), "
                     f"95% of scrapes under {human(run.quiet_p95_age_s[typical])} ({typical})")
        fairness = ", ".join(f"{name} {fairness_text(run, name)}" for name in settings)
        lines.append(f"  {run.party} fairness index (1 = fair; while 2+ {run.party}s wait): {fairness}")
        if scenario.reports_worker_time:
            lines.extend(f"  {line}" for line in worker_time_lines(scenario, run))
        if scenario.account_separator is not None:
            lines.extend(f"  {line}" for line in account_lines(run))
        lines.extend(f"  {line}" for line in start_lines(scenario, run))
        lines.extend(f"  {line}" for line in shard_lines(scenario, run))
        lines.append(f"  verdict: {verdict(scenario, run).summary(outcome.alerts)}")
        if outcome.alerts is not None:
            if outcome.alerts:
                lines.append("  alerts fired (first firing):")
                lines.extend(f"    {human(a.first_firing_s):>6}  {alert_label(a)}" for a in outcome.alerts)
            else:
                lines.append("  alerts fired: none")
        lines.extend(f"  {check}" for check in outcome.checks(scenario, outcomes))
        lines.extend(f"  EXPECTATION FAILED: {p}" for p in outcome.alert_violations(scenario) or ())
        problems = outcome.violations(scenario, outcomes)
        if problems == []:
            lines.append("  as expected by the scenario")
        elif problems is None and scenario.unchecked_because:
            lines.append(f"  as expected by the scenario? n/a: {scenario.unchecked_because}")
        lines.append("")
    lines.extend(same_starts_note(outcomes))
    if alerts_note:
        lines.append(alerts_note)
    return "\n".join(lines).rstrip() + "\n"


def as_json(scenario: Scenario, outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The ``--json`` document: per policy, per class figures, alerts and expectations."""
    policies: dict[str, Any] = {}
    for outcome in outcomes:
        run = outcome.run
        policies[run.name] = {
            "classes": {q: {"jobs": r.jobs, "wait_mean_s": r.wait_mean_s, "wait_p50_s": r.wait_p50_s,
                            "wait_p99_s": r.wait_p99_s, "wait_max_s": r.wait_max_s,
                            "max_oldest_age_s": r.max_oldest_age_s, "realised_share": r.realised_share}
                        for q, r in run.classes.items()},
            "alerts": None if outcome.alerts is None else [
                {"alert": a.alert, "labels": dict(a.labels), "first_firing_s": a.first_firing_s,
                 "firing_periods_s": [list(p) for p in a.periods]} for a in outcome.alerts],
            "quiet_tenant_max_age_s": run.quiet_max_age_s,
            "quiet_tenant_p95_age_s": run.quiet_p95_age_s,
            "fairness_index": run.fairness_index,
            "fairness_unserved": run.fairness_unserved,
            "verdict": verdict(scenario, run).word,
            "class_status": {c.name: c.status for c in verdict(scenario, run).classes},
            "jobs_enqueued": run.jobs_enqueued,
            "jobs_started": run.jobs_started,
            "expectation_violations": outcome.violations(scenario, outcomes),
        }
        if scenario.reports_worker_time:
            policies[run.name] |= worker_time_json(run, outcome.checks(scenario, outcomes))
        if run.shards is not None:
            policies[run.name]["sharded"] = run.shards.figures()
        if run.accounts is not None:
            policies[run.name]["accounts"] = {
                "keys": run.accounts.keys, "wait_p99_s": run.accounts.wait_p99_s,
                "single_key_wait_p99_s": run.accounts.single_key_p99_s}
        if scenario.watched_tenants and run.starts is not None:
            policies[run.name]["starts"] = starts_json(scenario, run)
    return {"scenario": scenario.name, "duration_s": scenario.duration, "seed": scenario.seed, "policies": policies}


def starts_json(scenario: Scenario, run: PolicyRun) -> dict[str, Any]:
    """The watched tenants' starts for ``--json`` (scenarios with a tenant's dispatch limit)."""
    figures = run.starts
    assert figures is not None
    tenants: dict[str, Any] = {}
    for tenant, starts in figures.tenants.items():
        rate = scenario.downstream_rate(tenant)
        seconds, beyond = starts.over(rate) if rate is not None else (None, None)
        tenants[tenant] = {"limit": starts.limit, "started": starts.started, "span_s": starts.span_s,
                           "mean_per_s": starts.mean_rate, "peak_per_s": starts.peak,
                           "peak_in_flight": starts.peak_in_flight, "dispatch_rate": rate,
                           "seconds_over": seconds, "jobs_over": beyond, "per_second": list(starts.per_second)}
    return {"tenants": tenants, "other_tenants": figures.others, "others_wait_p95_s": figures.others_wait_p95_s,
            "others_wait_p99_s": figures.others_wait_p99_s}


def worker_time_json(run: PolicyRun, checks: Sequence[Check]) -> dict[str, Any]:
    """A run's worker time for ``--json`` (scenarios that compare charge bases or charge by runtime)."""
    worker_time = run.worker_time
    classes = {} if worker_time is None else {
        name: {"seconds": worker_time.total(name), "share": worker_time.class_share(name),
               "backlogged_tenants": len(worker_time.backlogged.get(name, ())),
               "tenants": [{"tenant": row.tenant, "seconds": row.seconds, "share": row.share, "fair_share": row.fair_share}
                           for row in worker_time.tenants(name)[:TOP_TENANTS_JSON]]}
        for name in worker_time.seconds}
    return {"policy": run.policy, "charge": run.charge, "variant": run.variant, "worker_time": classes,
            "stream_wait_p99_s": run.stream_wait_p99_s,
            "checks": [{"ok": c.ok, "text": c.text} for c in checks]}


# ------------------------------------------------------------------ the command


def _layout(scenario: Scenario, shards: int | None, hand: int | None) -> tuple[int, int]:
    """``--shards`` and ``--hand``, checked, with the config's where not given (exit 2 otherwise)."""
    redis = scenario.config.redis
    if shards is not None and not 1 <= shards <= MAX_SHARDS:
        fail("--shards", f"expected 1 to {MAX_SHARDS} shards, got {shards}")
    n = redis.shards if shards is None else shards
    k = hand if hand is not None else min(redis.shard_hand, n) if redis.shards > 1 else min(2, n)
    if not 1 <= k <= n:
        fail("--hand", f"expected a hand of 1 to {n} shards (--shards {n}), got {k}")
    return n, k


def _rules_for(scenario: Scenario, given: Path | None, workdir: Path) -> tuple[Path | None, str | None]:
    """The rules file to evaluate (``--rules``, else the rules ``fairctl generate`` would write for
    the scenario's config, config_patch included) and, when there is none, the line that says why."""
    try:
        promtool.binary()
    except promtool.PromtoolMissing as exc:
        return None, f"alerts not evaluated: {exc}"
    if given is not None:
        if not given.is_file():
            fail("--rules", f"no such file: {given}")
        return given, None
    from alerts.output import rules_text

    path = workdir / "rules.yml"
    path.write_text(rules_text(scenario.config), encoding="utf-8")
    return path, None


@click.command(cls=Command)
@argument("scenario_file", metavar="[SCENARIO]", type=PATH, required=False,
          help="Scenario YAML, or the name of a shipped scenario (marketing-storm, priority-creep, ...); "
               "default: marketing-storm, 2.3M newsletters ahead of password resets.")
@click.option("--policy", "-p", metavar="P", multiple=True, show_default=False,
              help=f"Policy to simulate ({', '.join(POLICIES)}); repeat for several (each under every charge basis "
                   "a scenario's charges list). Default: the scenario's list.")
@click.option("--json", "json_file", metavar="FILE", type=PATH, help="Also write the results as JSON.")
@click.option("--report", metavar="FILE.html", type=PATH, help="Also write a self-contained HTML report with plots.")
@click.option("--rules", metavar="FILE", type=PATH,
              help="Prometheus rules file to evaluate; default: the rules generated from the scenario's config.")
@click.option("--duration", metavar="DURATION",
              help="Simulate only this long (30m, 2h) instead of the scenario's duration.")
@click.option("--processes", "-j", metavar="N", type=click.IntRange(min=0), default=0,
              help="Policies simulated at once; 0: one per CPU.")
@click.option("--shards", metavar="N", type=int,
              help="Run the queue as N shards (redis.shards); default: the scenario config's. 1: one queue group.")
@click.option("--hand", metavar="K", type=int,
              help="Shards a tenant's jobs may go to (redis.shard_hand); default: the config's, or min(2, N) "
                   "when --shards shards an unsharded config.")
def simulate(scenario_file: Path | None, policy: tuple[str, ...], json_file: Path | None, report: Path | None,
             rules: Path | None, duration: str | None, processes: int, shards: int | None, hand: int | None) -> None:
    """Replay a scenario under each scheduling policy and compare waits, fairness and alerts."""
    if report is not None:  # the report's charts need matplotlib: a missing one fails now, not after the run
        import matplotlib  # noqa: F401
    path = scenario_file or DEFAULT_SCENARIO
    try:
        scenario = load_scenario(path)
        if duration is not None:  # the scenario's expectations are about its whole duration
            scenario = scenario.shortened(parse_duration(duration, "--duration"))
    except ConfigError as exc:
        fail("--duration" if exc.path == "--duration" else "SCENARIO", str(exc).removeprefix("--duration: "))
    if shards is not None or hand is not None:
        scenario = scenario.with_shards(*_layout(scenario, shards, hand))
    chosen = scenario.run_names(check_policies(policy or scenario.policies))
    processes = processes or min(os.cpu_count() or 1, len(chosen))
    with tempfile.TemporaryDirectory(prefix="fairctl-simulate-") as tmp:
        rules_file, note = _rules_for(scenario, rules, Path(tmp))
        try:
            bar = ProgressBar(chosen)
            try:
                outcomes = run_policies(scenario, chosen, rules_file, min(processes, len(chosen)), bar.draw)
            finally:
                bar.close()
        except AlertEvaluationError as exc:
            fail("--rules", str(exc))
    click.echo(render(scenario, outcomes, note), nl=False)
    if json_file is not None:
        json_file.write_text(json.dumps(as_json(scenario, outcomes), indent=2) + "\n", encoding="utf-8")
    if report is not None:
        write_report(report, scenario, outcomes)
        click.echo(f"report written to {report.resolve()}")
    if any(o.violations(scenario, outcomes) for o in outcomes):
        raise Exit(EXIT_EXPECTATION)
