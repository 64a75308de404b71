"""``fairctl demo``: a miniature marketing storm on a private redis-server, worked live.

One tenant floods the low class with newsletters while ~50 other tenants keep sending password
resets, order confirmations and nightly digests. The point to see: the urgent classes and the
quiet tenants keep short waits while the storm drains on the capacity they leave idle. It needs
no setup (it starts its own redis-server) and stays well under half a minute.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import click

from fairness_core import Config, Lease, Queue, classify
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .common import clear_errors, config_option, connect, fail, load
from .handlers import sleep_for_service_time
from .interrupts import stopped
from .status_view import ClassStatus, class_statuses, render

STORM_TENANT = "acme-marketing"
STORM_TASK = "newsletter"
STORM_JOBS = 20_000
QUIET_TENANTS = [f"shop-{i:02d}" for i in range(1, 51)]
# task -> simulated service time (s); the storm's jobs are the cheapest, as newsletters are.
TRICKLE = {"password_reset": 0.004, "order_confirmation": 0.008, "nightly_digest": 0.015}
STORM_SERVICE_S = 0.002
TRICKLE_EVERY_S = 0.01
WORKER_SLOTS = 8


class WaitRecorder:
    """Longest enqueue-to-start wait per task, measured as jobs start (Redis and the demo share
    a host, so the lease's Redis-clock enqueue time is comparable with ``time.time()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.max_wait: dict[str, float] = defaultdict(float)
        self.done: dict[str, int] = defaultdict(int)

    def __call__(self, lease: Lease) -> None:
        wait = max(0.0, time.time() - lease.enqueued_at)
        with self._lock:
            self.max_wait[lease.task] = max(self.max_wait[lease.task], wait)
            self.done[lease.task] += 1
        sleep_for_service_time(lease)


def trickle(scheduler: Queue, stop: threading.Event) -> None:
    """Steady interactive and batch work from many small tenants, next to the storm."""
    rng = random.Random(7)
    tiers = list(scheduler.config.tenants.tiers)
    tier_of = {tenant: rng.choice(tiers) for tenant in QUIET_TENANTS}
    while not stop.wait(TRICKLE_EVERY_S):
        task = rng.choice(list(TRICKLE))
        tenant = rng.choice(QUIET_TENANTS)
        scheduler.enqueue(task, tenant, {"service_s": TRICKLE[task]}, tier=tier_of[tenant])


def conclusion(config: Config, recorder: WaitRecorder, storm: ClassStatus, seconds: float) -> str:
    def waited(task: str) -> str:
        queue = classify(config, task, tier=config.tenants.default_tier).queue
        return f"{task} ({queue}) at most {recorder.max_wait[task] * 1000:,.0f} ms"

    drained = recorder.done[STORM_TASK]
    return "\n".join([
        f"With {STORM_TENANT}'s {STORM_JOBS:,} {STORM_TASK} jobs queued ahead of them, the other "
        f"{len(QUIET_TENANTS)} tenants' jobs waited: " + ", ".join(waited(t) for t in TRICKLE if recorder.done[t]) + ".",
        "Fair queuing serves each tenant in turn inside a class, so a quiet tenant's job waits for one turn, "
        "not for the storm's backlog.",
        f"The storm drained {drained:,} jobs ({drained / seconds:,.0f}/s): {storm.name} took "
        f"{storm.share_pct or 0:.0f}% of the work at a {storm.weight_pct:.0f}% weight, because the classes above "
        f"left their share idle; {storm.name} still holds {storm.depth:,} jobs.",
    ])


def run_demo(config: Config, seconds: float) -> None:
    scheduler = connect(config)
    click.echo(f"Enqueuing {STORM_JOBS:,} {STORM_TASK} jobs from {STORM_TENANT} (policy {config.scheduler.policy}) ...")
    for _ in range(STORM_JOBS):
        scheduler.enqueue(STORM_TASK, STORM_TENANT, {"service_s": STORM_SERVICE_S})
    before = scheduler.snapshot()
    click.echo("\nBefore:\n" + render(class_statuses(config, None, before, 3), None, charge=config.scheduler.charge))

    recorder = WaitRecorder()
    worker = Worker(scheduler, HandlerRegistry(fallback=recorder), concurrency=WORKER_SLOTS, grace=5.0)
    stop = threading.Event()
    threads = [threading.Thread(target=worker.run, daemon=True),
               threading.Thread(target=trickle, args=(scheduler, stop), daemon=True)]
    for thread in threads:
        thread.start()
    click.echo(f"\nWorking for {seconds:g}s with {WORKER_SLOTS} worker slots, "
               f"while {len(QUIET_TENANTS)} other tenants send {', '.join(TRICKLE)} ...")
    try:
        time.sleep(seconds)
    finally:  # on Ctrl-C too: the threads stop before their redis-server does, or they would fail on it
        stop.set()
        worker.stop()
        for thread in threads:
            thread.join()

    rows = class_statuses(config, before, scheduler.snapshot(), 3)
    click.echo(f"\nAfter {seconds:g}s:\n" + render(rows, seconds, charge=config.scheduler.charge))
    storm_class = classify(config, STORM_TASK, tier=config.tenants.default_tier).queue
    click.echo("\n" + conclusion(config, recorder, next(r for r in rows if r.name == storm_class), seconds))


@click.command()
@click.option("--seconds", metavar="SECONDS", type=click.FloatRange(1, 120), default=8.0, help="How long the worker runs.")
@config_option
def demo(seconds: float, config: Path) -> None:
    """Replay a marketing storm in miniature; needs no setup.

    On a private redis-server: 20,000 newsletters from one tenant next to a steady trickle of
    password resets, order confirmations and nightly digests from 50 others, worked by an
    in-process worker; prints the status before and after, and what it shows."""
    cfg = load(config, None)
    logging.basicConfig(level=logging.WARNING)
    try:  # out of reach of the terminal's Ctrl-C: it is stopped below, once the demo's threads are
        server = RedisServer(own_session=True).start()
    except (FileNotFoundError, RuntimeError) as exc:  # no redis-server binary, or it would not start
        fail("redis-server", str(exc), code=1)
    try:
        with clear_errors():
            run_demo(dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, url=server.url)), seconds)
    except KeyboardInterrupt as exc:
        stopped(exc, "stopped the demo's worker and its redis-server")
        raise
    finally:
        server.close()
