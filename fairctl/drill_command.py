"""``fairctl drill`` and ``fairctl loadgen``: a scenario live, against real Redis and workers."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.exceptions import Exit

from exporter.sources import watched
from fairness_core.ages import human
from fairness_core.config import Config, ConfigError, parse_duration
from fairness_sim.loadgen import (
    ChangeRefused,
    LoadGenerator,
    LoadStats,
    Producer,
    Replay,
    check_replayable,
    live_changes,
    volume_for,
)
from fairness_sim.producers import ClientMissing, producer_for
from fairness_sim.scenario import DEFAULT_SCENARIO, ConfigChange, Scenario, load_scenario
from fairness_sim.simulator import scenario_config
from fairness_sim.timescale import SpeedTooHigh, compress

from .commands import Command, F, argument
from .common import PATH, check_policies, clear_errors, connect, fail, load, redis_url_option, with_redis_url
from .interrupts import stopped
from .text_table import text_table

if TYPE_CHECKING:  # drill() imports the drill and the stack (jinja2 among them) itself: loadgen needs neither
    from fairness_sim.drill import PolicyDrill

DEFAULT_SPEED = 120.0
# What this 2-core machine carries beside Prometheus, Alertmanager and two exporters.
DEFAULT_MAX_RATE = 150.0  # live jobs per second through the workers
DEFAULT_MAX_BURST = 20_000  # live jobs enqueued at one instant
EXIT_EXPECTATION = 1

scenario_argument = argument(
    "scenario_file", metavar="[SCENARIO]", type=PATH, required=False,
    help="Scenario YAML, or the name of a shipped scenario (marketing-storm, priority-creep, ...); "
         "default: marketing-storm, 2.3M newsletters ahead of password resets.")


def speed_option(default: float) -> Callable[[F], F]:
    return click.option(
        "--speed", metavar="X", type=click.FloatRange(min=1), default=default,
        help="Scenario seconds per real second (120: one scenario hour in 30 s). Every duration in the config and "
             "the rules is divided by it.")


until_option = click.option(
    "--until", metavar="DURATION", help="Replay only the first DURATION of the scenario (default: all of it).")
volume_option = click.option(
    "--volume", metavar="N", type=click.FloatRange(min=1), show_default=False,
    help="Scenario jobs per live job, with service times stretched alike so ages and shares keep their shape; "
         f"default: the least that keeps the workers under {DEFAULT_MAX_RATE:g} jobs/s and bursts under "
         f"{DEFAULT_MAX_BURST:,} jobs.")


def _scenario(path: Path | None, config_file: Path | None = None) -> Scenario:
    """The scenario to replay live, refused (exit 2) before anything starts when it cannot be."""
    try:
        scenario = load_scenario(path or DEFAULT_SCENARIO, config_file)
        check_replayable(scenario)
        return scenario
    except ConfigError as exc:
        fail("SCENARIO", str(exc))


def _replay(scenario: Scenario, speed: float, until: str | None, volume: float | None) -> Replay:
    try:
        end = scenario.duration if until is None else parse_duration(until, "--until")
    except ConfigError as exc:
        fail("--until", str(exc).removeprefix("--until: "))
    if end > scenario.duration:
        fail("--until", f"the scenario lasts {human(scenario.duration)}; got {until}")
    chosen = volume or volume_for(scenario, speed, max_rate=DEFAULT_MAX_RATE, max_burst=DEFAULT_MAX_BURST)
    return Replay(speed=speed, volume=chosen, until=end)


def render(drills: list[PolicyDrill], scenario: Scenario) -> str:
    lines = []
    for d in drills:
        r = d.replay
        lines.append(f"policy {d.policy}: {human(r.until)} of {scenario.name} at speed {r.speed:g}, one live job per "
                     f"{r.volume:.3g} ({sum(d.load.enqueued.values()):,} live jobs; {d.wall_s:.0f}s)")
        lines += [f"  {c}" for c in d.speed_changes]
        if d.delay is not None:
            lines.append(f"  resolution {human(d.shown_resolution_s)}: the live pipeline's delay here, {d.delay}")
        lines += [f"  {c}" for c in d.load.config_changes]
        rows: list[tuple[str, ...]] = [("alert", "first firing", "delivered", "simulate")]
        rows += [(str(a), *("-" if t is None else human(t) for t in (a.first_firing_s, a.delivered_s, a.simulated_s)))
                 for a in d.alerts]
        lines += text_table(rows, indent="  ")
        if len(rows) == 1:
            lines.append("  no alert fired, live or simulated")
        lines += [f"  EXPECTATION FAILED: {v}" for v in d.violations]
        lines += [f"  DIFFERS FROM SIMULATE: {v}" for v in d.disagreements]
        lines += [f"  within the resolution: {v}" for v in d.near_misses]
        lines += [f"  not checked: {v}" for v in d.unchecked]
        if not d.violations and d.policy in scenario.expect:
            lines.append("  as expected by the scenario")
        lines.append("")
    return "\n".join(lines)


@click.command(cls=Command)
@scenario_argument
@click.option("--policy", "-p", metavar="P", multiple=True, show_default=False,
              help="Policy to drill; repeat for several. Default: fifo and weighted-fair.")
@speed_option(DEFAULT_SPEED)
@until_option
@volume_option
@click.option("--json", "json_file", metavar="FILE", type=PATH, help="Also write the timeline as JSON.")
@click.option("--dir", "directory", metavar="DIR", type=PATH,
              help="Keep each policy's stack (config, rules, logs) under DIR/POLICY; default: a temporary directory.")
@redis_url_option
@click.option("--prometheus-url", metavar="URL",
              help="Drill a team's own stack: read the timeline from this Prometheus (needs --redis-url; see "
                   "docs/drills.md).")
@click.option("--alertmanager-url", metavar="URL",
              help="With --prometheus-url: the Alertmanager to read deliveries from.")
@click.option("--failover", is_flag=True,
              help="Instead of a scenario: the failover drill on a Sentinel group of its own (a master, a replica, "
                   "three sentinels): the master killed under load, then the sentinels stopped (see below).")
@click.option("--jobs", metavar="N", type=click.IntRange(min=30), default=3000, show_default=True,
              help="With --failover: jobs queued before the master is killed.")
@click.option("--sentinel-outage", metavar="DURATION", default="20s", show_default=True,
              help="With --failover: how long every sentinel is stopped while the master lives.")
@click.pass_context
def drill(ctx: click.Context, scenario_file: Path | None, policy: tuple[str, ...], speed: float, until: str | None,
          volume: float | None, json_file: Path | None, directory: Path | None, redis_url: str | None,
          prometheus_url: str | None, alertmanager_url: str | None, failover: bool, jobs: int,
          sentinel_outage: str) -> None:
    """Replay a scenario live and check the alerts that fire, against the scenario's expect.

    Per policy: a native stack (fairctl stack) with the config and rules compressed by --speed,
    the scenario's worker pools as real fairctl workers, the load generator enqueueing its
    arrivals and applying its config_changes (compressed alike) as fairctl config apply would,
    Prometheus evaluating the rules every second and Alertmanager delivering to a webhook. Prints
    each alert's first firing in scenario time (in Prometheus, at the webhook, and as fairctl
    simulate predicts it), and the drill's resolution: the live pipeline's delay measured on this
    machine, times the speed. When that leaves a deadline of the scenario's expect too little
    room, the drill lowers the speed and says so. Exits 1 when the run contradicts the scenario's
    expect, or the simulation beyond the resolution, or when Redis refuses one of its config
    changes.

    With --failover: a master, a replica and three sentinels (redis-server --sentinel) on
    loopback, --jobs queued, a producer at 50 jobs/s and a fairctl worker on the
    redis+sentinel:// URL. The master is killed (SIGKILL) a third of the way through: prints when
    the replica was promoted, when the worker ran jobs again (no restart), the producer's errors
    and what became of every job accepted (each should run once; those in flight at the kill may
    run again, those accepted in the last 2 s may be lost with the writes the replica never got).
    Then every sentinel is stopped for --sentinel-outage while the master lives: the worker must go
    on. Needs redis-server only; about a minute. Exits 1 when a job is lost or run twice beyond
    that, or the worker does not resume within 30 s."""
    if failover:
        _failover_drill(ctx, jobs, sentinel_outage, json_file, directory)
        return
    for name in FAILOVER_ONLY:
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            fail(f"--{name.replace('_', '-')}", "goes with --failover only")
    from fairness_sim.drill import External, as_json, run_policy_drill
    from fairness_stack.supervisor import Stack, StackError

    from .stack_command import shown

    scenario = _scenario(scenario_file)
    chosen = check_policies(policy or ("fifo", "weighted-fair"))
    if (redis_url is None) != (prometheus_url is None):
        fail("--prometheus-url" if prometheus_url is None else "--redis-url",
             "--redis-url and --prometheus-url go together (a team's own stack), or neither (start one)")
    replay = _replay(scenario, speed, until, volume)
    external = None
    if redis_url is not None and prometheus_url is not None:
        external = External(with_redis_url(scenario.config, redis_url).redis.url, prometheus_url, alertmanager_url)
    try:
        compress(scenario.config, replay, scrape_interval=1.0)
    except SpeedTooHigh as exc:
        fail("--speed", str(exc))
    drills = []
    stacks: list[Stack] = []
    with tempfile.TemporaryDirectory(prefix="fairctl-drill-") as tmp:
        root = directory or Path(tmp)
        for name in chosen:
            try:
                with clear_errors():
                    drills.append(run_policy_drill(
                        scenario, name, replay, root, external=external,
                        say=lambda line: click.echo(f"drill: {line}", err=True), on_stack=stacks.append,
                        replay_at=lambda lower: _replay(scenario, lower, until, volume)))
            except (StackError, FileNotFoundError) as exc:
                fail("--dir", str(exc), code=1)
            except ChangeRefused as exc:  # run_policy_drill has stopped its stack
                fail("SCENARIO", str(exc), code=1)
            except KeyboardInterrupt as exc:  # run_policy_drill has stopped its stack
                names = [shown(n) for stack in stacks[len(drills):] for n in stack.stopped]
                stopped(exc, f"stopped the {name} drill's stack ({len(names)} process(es): "
                             f"{', '.join(names) or 'none had started'})")
                raise
    click.echo(render(drills, scenario), nl=False)
    if json_file is not None:
        json_file.write_text(json.dumps(as_json(scenario, drills), indent=2) + "\n", encoding="utf-8")
    if any(d.violations or d.disagreements for d in drills):
        raise Exit(EXIT_EXPECTATION)


FAILOVER_ONLY = ("jobs", "sentinel_outage")


def _failover_drill(ctx: click.Context, jobs: int, outage: str, json_file: Path | None,
                    directory: Path | None) -> None:
    """``drill --failover``: its own servers, so no scenario, stack or policy option goes with it."""
    from fairness_sim.failover import render as render_failover
    from fairness_sim.failover import run_failover_drill

    for param in ctx.command.params:
        name = param.name or ""
        given = ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        if given and name not in (*FAILOVER_ONLY, "failover", "json_file", "directory"):
            fail(param.opts[0] if isinstance(param, click.Option) else "SCENARIO",
                 "does not go with --failover (the failover drill starts its own servers and load)")
    try:
        outage_s = parse_duration(outage, "--sentinel-outage")
    except ConfigError as exc:
        fail("--sentinel-outage", str(exc).removeprefix("--sentinel-outage: "))
    with tempfile.TemporaryDirectory(prefix="fairctl-failover-") as tmp:
        root = directory or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        try:
            report = run_failover_drill(root, jobs=jobs, outage_s=outage_s,
                                        say=lambda line: click.echo(f"drill: {line}", err=True))
        except (FileNotFoundError, RuntimeError) as exc:
            fail("--failover", str(exc), code=1)
    click.echo(render_failover(report), nl=False)
    if json_file is not None:
        json_file.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    if report.violations:
        raise Exit(EXIT_EXPECTATION)


@click.command(cls=Command)
@scenario_argument
@redis_url_option
@click.option("--policy", metavar="P", help="Scheduler policy in the jobs' config; default: the scenario config's.")
@speed_option(1.0)
@until_option
@volume_option
@click.option("--config", "config_file", metavar="FILE", type=PATH,
              help="Run the scenario on this fairness.yaml (the one your workers read) instead of the config it "
                   "names; its config_patch still applies. A config with a watch section queues into that job "
                   "system instead (see below).")
@click.option("--job", metavar="NAME",
              help="With a watch config: the function the jobs call, {task} standing for the stream's task. Default: "
                   "the sleep job docs/watching.md defines (rq: fairness_sim.watched_jobs.sleep; celery: "
                   "fairctl.sleep; bullmq: {task}; sidekiq: FairctlSleep).")
def loadgen(scenario_file: Path | None, redis_url: str | None, policy: str | None, speed: float, until: str | None,
            volume: float | None, config_file: Path | None, job: str | None) -> None:
    """Enqueue a scenario's arrivals into Redis in real time, for workers of your own to consume.

    Time is compressed by --speed, volume thinned by --volume (see fairctl drill); the scenario's
    config_changes are applied at their time, as fairctl config apply would. Jobs carry
    {"service_s": S} payloads (fairctl.handlers:sleep_handlers sleeps that long). Queues under the
    scenario config's redis.prefix; stops at the end, or on Ctrl-C or SIGTERM (exit 130 or 143).

    With a --config that has a watch section (Celery, RQ, BullMQ, Sidekiq), the jobs are that
    system's own, written with its own client into the queue its watch.classes maps each job's class
    to (the config's classification rules choose the class), carrying service_s and the tenant where
    watch.tenant says, for the team's own workers to run (into watch.url, else redis.url).
    The scenario keeps its own config, and its config_changes, which retune fairctl's
    scheduler, are not replayed there."""
    watched = _watched(config_file, redis_url)
    if watched is not None:
        scenario = _scenario(scenario_file)
        _watched_loadgen(watched, scenario, policy, _replay(scenario, speed, until, volume), job)
        return
    if job is not None:
        fail("--job", "names a watched system's job function: it needs a --config with a watch section")
    scenario = _scenario(scenario_file, config_file)
    if policy is not None:
        check_policies([policy])
    replay = _replay(scenario, speed, until, volume)
    run_policy = policy or scenario.config.scheduler.policy
    config = with_redis_url(scenario_config(scenario, run_policy), redis_url)
    changes = live_changes(scenario, run_policy, lambda c: with_redis_url(c, redis_url))
    _run_loadgen(scenario, connect(config), replay, changes, f"into {config.redis.prefix}")


def _watched(config_file: Path | None, redis_url: str | None) -> Config | None:
    """The --config when it watches a job system (its Redis: watch.url, else redis.url, which
    --redis-url overrides, as for the exporter); None for a config of fairctl's own queues."""
    if config_file is None:
        return None
    config = load(config_file, redis_url)
    return config if watched(config) is not None else None


def _watched_loadgen(config: Config, scenario: Scenario, policy: str | None, replay: Replay, job: str | None) -> None:
    """Replay ``scenario`` into the job system ``config`` watches, as that system's own jobs."""
    watch = watched(config)
    assert watch is not None
    system = watch.system
    if policy is not None:
        fail("--policy", f"{system} schedules its own jobs: a policy is for fairctl's scheduler")
    try:
        producer = producer_for(config, job)
    except (ClientMissing, ConfigError) as exc:
        fail("--config", str(exc))
    with closing(producer):
        for stream in scenario.streams:
            name, target = producer.target(stream.task, stream.tier, stream.user_waiting)
            priority = "" if target.priority is None else f" priority {target.priority}"
            click.echo(f"loadgen: {stream.name}: {producer.job_name(stream.task)} jobs, class {name}, into {system} "
                       f"queue {target.queue}{priority}", err=True)
        if scenario.config_changes:
            click.echo(f"loadgen: the scenario's {len(scenario.config_changes)} config change(s) retune fairctl's "
                       f"scheduler and are not replayed into {system}", err=True)
        _run_loadgen(scenario, producer, replay, (), f"into {system}")


def _run_loadgen(scenario: Scenario, producer: Producer, replay: Replay, changes: Sequence[ConfigChange],
                 into: str) -> None:
    stop = threading.Event()
    generator = LoadGenerator(scenario, producer, replay, changes=changes, stop=stop,
                              say=lambda line: click.echo(f"loadgen: {line}", err=True))
    click.echo(f"loadgen: {scenario.name}, {human(replay.until)} at speed {replay.speed:g}, one live job per "
               f"{replay.volume:.3g}, {into}", err=True)
    try:
        stats = generator.run()
    except ChangeRefused as exc:
        _loadgen_summary(generator.stats)
        fail("SCENARIO", str(exc), code=1)
    except KeyboardInterrupt:  # what was enqueued so far, on stdout; the interruption's line on stderr
        stop.set()
        _loadgen_summary(generator.stats)
        raise
    _loadgen_summary(stats)


def _loadgen_summary(stats: LoadStats) -> None:
    click.echo(f"enqueued {sum(stats.enqueued.values()):,} jobs ({', '.join(f'{k}: {v:,}' for k, v in stats.enqueued.items())}); "
               f"rejected by budgets {sum(stats.rejected.values()):,}; at most {stats.max_lag_s:.2f}s behind; "
               f"{stats.retries} retries while Redis was away")
