"""``fairctl worker``: run a :class:`fairness_core.worker.Worker` with handlers from a module."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

import click
from click.exceptions import Exit

from fairness_core.config import ConfigError, parse_duration
from fairness_core.worker import BATCH, UNHANDLED, UNHANDLED_WAIT, HandlerRegistry, Worker, require_noeviction_of

from .common import (
    check_classes,
    clear_errors,
    config_file,
    config_option,
    connect,
    fail,
    load,
    redis_url_option,
)
from .worker_processes import follow_parent, run_processes


def load_handlers(spec: str) -> HandlerRegistry:
    """``package.module:attribute`` naming a HandlerRegistry, imported as ``python -m`` would: the
    working directory comes first on the import path, so ``myapp/jobs.py`` next to you is found."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        fail("--handlers", f"expected module:attribute, e.g. fairctl.handlers:sleep_handlers, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        fail("--handlers", f"cannot import {module_name!r}: {exc}")
    if not hasattr(module, attribute):
        found = sorted(name for name, value in vars(module).items() if isinstance(value, HandlerRegistry))
        has = f"; its HandlerRegistry objects: {', '.join(found)}" if found else "; it holds no HandlerRegistry"
        fail("--handlers", f"{module_name} has no attribute {attribute!r}{has}")
    registry = getattr(module, attribute)
    if not isinstance(registry, HandlerRegistry):
        fail("--handlers", f"{spec} is {type(registry).__name__}, expected a fairness_core.worker.HandlerRegistry")
    return registry


def _duration_or_zero(value: str, option: str) -> float:
    """A duration option that may also be 0 (``--log-every``: no periodic line; ``--prefetch``: no bound)."""
    if value.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(value, option)
    except ConfigError as exc:
        fail(option, str(exc).removeprefix(f"{option}: "))


@click.command()
@click.option("--handlers", default="fairctl.handlers:sleep_handlers",
              help="module:attribute of the HandlerRegistry that runs each task (myapp.jobs:handlers for "
                   "./myapp/jobs.py: the current directory comes first, as with python -m).")
@click.option("--concurrency", metavar="N", type=click.IntRange(1, 1000), default=4,
              help="Jobs worked at once (threads); counted as fleet slots for reserved_slots, times --batch while "
                   "the slots lease ahead.")
@click.option("--classes", help="Serve only these classes, comma-separated (a reserved pool), e.g. jobs:high.")
@click.option("--batch", metavar="N", type=click.IntRange(1, 1000), default=BATCH, show_default=True,
              help="Jobs a slot leases per pop at most, within --prefetch; it works them in turn, and their acks "
                   "ride with its next pop. Short jobs then cost a round trip per N jobs, not per job; --batch 1 "
                   "leases one job at a time.")
@click.option("--prefetch", metavar="DURATION", default="10ms", show_default=True,
              help="Lease ahead no more jobs than the slot expects to finish within this, by the average runtime "
                   "of this worker's jobs (one until a job has run), so a more urgent job arriving meanwhile waits "
                   "at most about this long for the slot: jobs longer than half of it go one at a time "
                   "(0: always --batch).")
@click.option("--grace", metavar="SECONDS", type=click.FloatRange(min=0), default=30.0,
              help="Seconds running jobs get to finish after SIGTERM/SIGINT.")
@click.option("--log-every", metavar="DURATION", default="60s",
              help="Log a summary line this often: jobs done, failed, retried and dead-lettered per class since the "
                   "last one (0: only the final one, on stop).")
@click.option("--unhandled", type=click.Choice(UNHANDLED), default=UNHANDLED_WAIT, show_default=True,
              help="A job whose task --handlers has no handler for: wait gives it back to the head of its queue at "
                   "once (its attempt too, so it is never dead-lettered for it) for a worker that has the handler, "
                   "pauses that slot (0.1s doubling to 5s) before it pops again, counts it in jobs_unhandled_total "
                   "and logs a warning once a minute per task; a rolling deploy or an older build loses no job. dead-letter dead-letters it "
                   "at once (fairctl dead list), for fleets where every worker runs the same build.")
@click.option("--processes", metavar="N", type=click.IntRange(1, 256), default=1,
              help="Worker processes, each with --concurrency slots (N x concurrency in all). A process's slots are "
                   "threads sharing Python's GIL: use more processes for CPU-bound handlers, or for the most short "
                   "jobs per second (the client side of every pop then runs on more than one core). Signals go to "
                   "this parent process, which passes each one to every child; it exits non-zero if any child "
                   "failed, stopping the others.")
@config_option
@redis_url_option
def worker(handlers: str, concurrency: int, classes: str | None, batch: int, prefetch: str, grace: float,
           log_every: str, unhandled: str, processes: int, config: Path, redis_url: str | None) -> None:
    """Work jobs until SIGTERM or SIGINT.

    Leases jobs, runs the task's handler, acks (or nacks when it raises) with the seconds the
    handler ran: the class's worker time, and its charge under scheduler.charge: runtime. Keeps
    leases of long jobs alive, reaps leases of dead workers, promotes overdue jobs and rides out
    Redis outages. The first signal stops taking jobs and lets running ones finish (exit 0); a
    second one exits at once (exit 1; the reaper re-delivers what was running). Exits 2 if Redis
    is down at start. With --processes N, N such workers run as child processes of this one."""
    if not follow_parent():
        raise Exit(1)
    every = _duration_or_zero(log_every, "--log-every")
    ahead = _duration_or_zero(prefetch, "--prefetch")
    config = config_file(config)
    cfg = load(config, redis_url)
    only = check_classes(cfg, [c.strip() for c in classes.split(",")], "--classes") if classes else None
    registry = load_handlers(handlers)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if processes > 1:
        scheduler = connect(cfg)
        with clear_errors():  # one clear error here, not one per child
            require_noeviction_of(scheduler)
        args = ["--handlers", handlers, "--concurrency", str(concurrency), "--batch", str(batch), "--prefetch", prefetch,
                "--grace", str(grace), "--log-every", log_every, "--unhandled", unhandled, "--config", str(config),
                *(["--classes", classes] if classes else [])]
        # The URL may hold a password: it goes to the children in their environment, never on a command line.
        env = {**os.environ, **({"FAIRCTL_REDIS_URL": redis_url} if redis_url else {})}
        raise Exit(run_processes(processes, args, env))
    runner = Worker(connect(cfg), registry, concurrency=concurrency, classes=only, batch=batch, grace=grace,
                    log_every=every, prefetch=ahead, unhandled=unhandled)
    with clear_errors():
        clean = runner.run()
    raise Exit(0 if clean else 1)
