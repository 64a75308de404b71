"""Producer and operator commands: ``enqueue``, ``pause``, ``resume``, ``reshard``."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from fairness_core import Config, Enqueued
from fairness_core.config import MAX_SHARDS
from fairness_core.jobs import PAYLOAD_TOO_DEEP
from fairness_core.layout import LAYOUT_TTL_S, GroupBusy, Layout, LayoutConflict
from fairness_core.queue import NotSharded, Queue

from .commands import Command, argument
from .common import check_classes, clear_errors, config_option, connect, fail, load, redis_url_option
from .interrupts import stopped

LIST_IDS_UP_TO = 10


def parse_payload(text: str | None) -> Any:
    """``--payload``: JSON on the command line, ``@FILE`` for JSON in a file, ``-`` for JSON on
    stdin (a payload up to max_payload_bytes does not fit in an argument list)."""
    if text is None:
        return None
    where = ""
    if text == "-":
        text, where = sys.stdin.read(), " (stdin)"
    elif text.startswith("@"):
        name = text[1:]
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            fail("--payload", f"cannot read {name}: {exc.strerror}")
        except UnicodeDecodeError:
            fail("--payload", f"{name} is not UTF-8 text")
        where = f" ({name})"
    try:
        return json.loads(text, object_pairs_hook=_without_duplicate_keys)
    except DuplicateKey as exc:
        fail("--payload", f"{exc}{where}: only its last value would be kept")
    except json.JSONDecodeError as exc:
        fail("--payload", f"not valid JSON{where}: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:  # nested far deeper than enqueue would take anyway
        fail("--payload", PAYLOAD_TOO_DEEP)


class DuplicateKey(ValueError):
    """A JSON object with a key twice: json.loads would keep the last value and drop the others."""


def _without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"an object has the key {key!r} more than once")
            seen.add(key)
    return obj


@click.command(cls=Command)
@argument("task", metavar="TASK", help="Task name, e.g. password_reset; the classification rules pick its class.")
@click.option("--tenant", required=True, help="Tenant id the job belongs to (fair queuing is per tenant).")
@click.option("--tier", help="Tenant tier (tenants.tiers); default tenants.default_tier.")
@click.option("--user-waiting", is_flag=True, help="A human is waiting on this job.")
@click.option("--count", metavar="N", type=click.IntRange(1, 1_000_000), default=1,
              help="How many identical jobs to enqueue.")
@click.option("--payload", metavar="JSON|@FILE|-", show_default=False,
              help='Job payload as JSON, e.g. \'{"service_s": 0.5}\'; @FILE reads it from a file, - from stdin.')
@click.option("--key", metavar="KEY",
              help="Idempotency key: run again with the same key within scheduler.dedup_window, it queues nothing "
                   "and prints the job first queued with it. One job only (not with --count).")
@config_option
@redis_url_option
def enqueue(task: str, tenant: str, tier: str | None, user_waiting: bool, count: int, payload: str | None,
            key: str | None, config: Path, redis_url: str | None) -> None:
    """Enqueue jobs; prints their ids and the class and reason the classification rules chose."""
    if key is not None and count > 1:
        fail("--key", "names one job: it cannot go with --count")
    body = parse_payload(payload)
    scheduler = connect(load(config, redis_url))
    done: list[Enqueued] = []
    with clear_errors(task="TASK"):
        try:
            for _ in range(count):
                done.append(scheduler.submit(task, tenant, body, tier=tier, user_waiting=user_waiting, key=key))
        except KeyboardInterrupt as exc:  # Ctrl-C is no error: its one line says how far it got
            if count > 1:
                stopped(exc, f"enqueued {len(done)} of {count} jobs{_last_id(done)}")
            raise
        except Exception:
            if done:
                click.echo(f"enqueued {len(done)} of {count} jobs before the error{_last_id(done)}", err=True)
            raise
    ids = [e.job_id for e in done]
    if count <= LIST_IDS_UP_TO:
        click.echo(f"enqueued {count} job{'s' if count > 1 else ''}: {' '.join(ids)}")
    else:
        click.echo(f"enqueued {count} jobs: ids {ids[0]} .. {ids[-1]}")
    for (queue, reason), n in Counter((e.queue, e.reason) for e in done).items():
        click.echo(f"class {queue}: {reason}" + (f" ({n} jobs)" if n != count else ""))
    if done and only_catch_all(scheduler.config, task, tier, user_waiting):
        rule = scheduler.config.classification[-1]
        click.echo(f"fairctl: warning: TASK: no classification rule names {task!r}, so only the catch-all "
                   f"rule matched (class {rule.queue}: {rule.reason}). A typo? Workers leave a task they "
                   "have no handler for queued (counted in jobs_unhandled_total); name the task in a rule to "
                   "silence this.",
                   err=True)


def _last_id(done: list[Enqueued]) -> str:
    return f" (last id {done[-1].job_id})" if done else ""


def only_catch_all(config: Config, task: str, tier: str | None, user_waiting: bool) -> bool:
    """True when no rule names ``task`` and the job fell through to the last, unconditional rule:
    a mistyped task name lands there silently, so enqueue warns (it still queues the job: the
    catch-all exists so that every job gets a class)."""
    rules = config.classification
    if any(rule.tasks and task in rule.tasks for rule in rules):
        return False
    tier = tier or config.tenants.default_tier
    first = next(rule for rule in rules if rule.matches(task, tier, user_waiting))
    return first is rules[-1]


def _set_paused(queue: str, config: Path, redis_url: str | None, paused: bool) -> None:
    cfg = load(config, redis_url)
    check_classes(cfg, [queue], "QUEUE")
    scheduler = connect(cfg)
    with clear_errors():
        (scheduler.pause if paused else scheduler.resume)(queue)
    click.echo(f"{queue} {'paused' if paused else 'resumed'}")


queue_argument = argument("queue", metavar="QUEUE", help="Class name, e.g. jobs:low.")


@click.command()
@click.option("--to", metavar="N", type=click.IntRange(1, MAX_SHARDS), help="Shards new jobs go to from now on.")
@click.option("--settle", is_flag=True, help="Stop serving the shards beyond the layout's count once they hold no job.")
@config_option
@redis_url_option
def reshard(to: int | None, settle: bool, config: Path, redis_url: str | None) -> None:
    """Change how many shards a sharded queue group (redis.shards) spreads over, under load.

    New jobs go to the new count's shards at once (each tenant to its new hand); the jobs already
    queued stay where they are and are served there, since workers serve every shard that may hold
    jobs: nothing is moved, lost or run twice. After shrinking, --settle stops serving the shards
    left behind once they are empty; until then it says how many jobs wait on each, and is run
    again once they are done. Without --to or --settle, prints the layout. Set redis.shards
    in the config file to the new count too, for the processes started from it later.

    A re-shard and the group's config applies take turns: one under way is waited for (briefly,
    then exit 1 naming it), and the shards added get the config last applied."""
    cfg = load(config, redis_url)
    queue = connect(cfg)
    if not queue.sharded:
        fail("--config", f"queue group {cfg.redis.prefix} is not sharded (redis.shards is 1); a sharded group is "
                         "a new one (its shards are the queue groups PREFIX.0, PREFIX.1, ...)")
    try:
        with clear_errors():
            before = queue.layout(fresh=True)
            layout = queue.reshard(to) if to is not None else before
            layout = queue.settle() if settle else layout
            masters = queue.masters()
    except (GroupBusy, LayoutConflict, NotSharded) as exc:
        fail("--to" if to is not None else "--settle", str(exc), code=1)
    left = f" (shards {layout.shards}..{layout.serve - 1} until they are empty)" if layout.serve > layout.shards else ""
    change = f"; was {before.shards} and {before.serve}" if layout != before else ""
    click.echo(f"queue group {cfg.redis.prefix}: new jobs go to {layout.shards} shards, workers serve "
               f"{layout.serve}{left}{change}; layout v{layout.version}")
    if settle and layout.serve > layout.shards:
        with clear_errors():
            click.echo(_unsettled(queue, layout))
    for master, shards in sorted(masters.items()):
        click.echo(f"  master {master}: shard{'s' if len(shards) > 1 else ''} {', '.join(map(str, shards))}")
    counts = [len(shards) for shards in masters.values()]
    if masters and max(counts) - min(counts) > 1:
        click.echo(f"fairctl: warning: the shards are uneven over the masters ({max(counts)} against {min(counts)}): "
                   "slots moved since they were placed; move a shard's slot (CLUSTER SETSLOT) to a master with fewer",
                   err=True)


def _unsettled(queue: Queue, layout: Layout) -> str:
    """Why a settle left the shards beyond ``layout.shards`` served, and when to run it again."""
    held = {i: queue.held_jobs(i) for i in range(layout.shards, layout.serve)}
    if not any(held.values()):
        return (f"not settled yet: every process must first see the new layout ({2 * LAYOUT_TTL_S:g}s after its "
                "change); run fairctl reshard --settle again then")
    each = ", ".join(f"shard {i}: {n:,}" for i, n in held.items())
    return (f"not settled yet: {sum(held.values()):,} job(s) (queued, leased or waiting to retry) are on shards "
            f"{layout.shards}..{layout.serve - 1} ({each}) and are served there; run fairctl reshard --settle again "
            "once they are done (fairctl status shows each shard's jobs)")


@click.command(cls=Command)
@queue_argument
@config_option
@redis_url_option
def pause(queue: str, config: Path, redis_url: str | None) -> None:
    """Stop workers from taking jobs of a class; jobs still queue up (fleet-wide, takes effect at once)."""
    _set_paused(queue, config, redis_url, True)


@click.command(cls=Command)
@queue_argument
@config_option
@redis_url_option
def resume(queue: str, config: Path, redis_url: str | None) -> None:
    """Let workers take jobs of a paused class again."""
    _set_paused(queue, config, redis_url, False)
