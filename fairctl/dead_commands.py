"""``fairctl dead list|show|requeue|drop``: the jobs given up on, and what to do with them.

A job is dead-lettered after ``leases.max_attempts`` failed deliveries, or at once when no worker
handler exists for its task. Requeue and drop are each one atomic script call per batch of jobs
(:meth:`fairness_core.Queue.requeue_dead`), so a job is never both requeued and still dead.
A sharded queue keeps a dead-letter list per shard; the queue's own methods work on all of them,
with the sharded job ids (``shard:id``) that enqueue printed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from fairness_core import Queue
from fairness_core.ages import format_age
from fairness_core.jobs import DeadOutcome
from fairness_core.scheduler import DEAD_PAGE

from .commands import Group, argument
from .common import check_classes, clear_errors, config_option, connect, fail, load, redis_url_option
from .text_table import text_table

group = Group("dead", help="List, inspect, requeue and drop dead-lettered jobs.", no_args_is_help=True)

ids_argument = argument("ids", metavar="ID...", nargs=-1, required=False,
                        help="Job ids, as `fairctl dead list` shows them (on a sharded queue, shard:id).")
all_option = click.option("--all", "every", is_flag=True, help="Every dead letter (of --queue, if given) instead of IDs.")
queue_option = click.option("--queue", metavar="QUEUE", show_default=False,
                            help="Only dead letters of this class, e.g. jobs:low.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
ERROR_WIDTH = 60


def _open(config: Any, redis_url: str | None, queue: str | None) -> Queue:
    cfg = load(config, redis_url)
    if queue is not None:
        check_classes(cfg, [queue], "--queue")
    return connect(cfg)


def _ids(dead: Queue, ids: Sequence[str] | None, every: bool) -> list[str]:
    """The job ids given, each checked (exit 2 naming ID), or [] for --all; exactly one of the two."""
    if ids and every:
        fail("--all", "give job ids or --all, not both")
    if not ids and not every:
        fail("ID", "give at least one job id, or --all")
    with clear_errors(**{"job id": "ID"}):
        for raw in ids or ():
            dead.locate(raw)
    return list(ids or ())


def _record(item: dict[str, Any], now: float) -> dict[str, Any]:
    lease = item["lease"]
    return {"id": lease.job_id, "class": lease.queue, "tenant": lease.tenant, "task": lease.task,
            "reason": lease.reason, "attempts": lease.attempts, "enqueued_at": lease.enqueued_at,
            "dead_at": item["dead_at"], "dead_for_s": max(0.0, now - item["dead_at"]), "error": item["error"],
            "payload": lease.payload}


@group.command("list")
@click.option("--limit", metavar="N", type=click.IntRange(1, 10_000), default=20,
              help="Show at most this many, oldest first.")
@queue_option
@json_option
@config_option
@redis_url_option
def list_(limit: int, queue: str | None, as_json: bool, config: Path, redis_url: str | None) -> None:
    """List dead letters, oldest first: id, class, tenant, task, attempts, how long ago, error."""
    dead = _open(config, redis_url, queue)
    with clear_errors():
        total = dead.dead_letter_count()
        now = time.time()
        rows = [_record(item, now) for item in dead.dead_letters(0, limit - 1, queue=queue)]
    if as_json:
        click.echo(json.dumps({"total": total, "dead_letters": rows}, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo(f"no dead letters{f' in {queue}' if queue else ''} ({total} in all)")
        return
    head = ("id", "class", "tenant", "task", "attempts", "dead for", "error")
    cells = [head] + [(r["id"], r["class"], r["tenant"], r["task"], str(r["attempts"]), format_age(r["dead_for_s"]),
                       _short(r["error"])) for r in rows]
    click.echo("\n".join(text_table(cells)))
    click.echo(f"{len(rows)} shown of {total} dead letters; fairctl dead show ID for one, "
               "fairctl dead requeue ID... or drop ID... to act")


def _short(text: str) -> str:
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."


@group.command()
@argument("job_id", metavar="ID", help="Job id, as `fairctl dead list` shows it.")
@json_option
@config_option
@redis_url_option
def show(job_id: str, as_json: bool, config: Path, redis_url: str | None) -> None:
    """Everything stored with one dead letter: class, tenant, task, reason, attempts, error, payload."""
    dead = _open(config, redis_url, None)
    (wanted,) = _ids(dead, [job_id], False)
    with clear_errors():
        item = dead.dead_letter(wanted)
    if item is None:
        fail("ID", f"no dead letter with id {job_id}", code=1)
    record = _record(item, time.time())
    if as_json:
        click.echo(json.dumps(record, indent=2, ensure_ascii=False))
        return
    for key in ("id", "class", "tenant", "task", "reason", "attempts", "error"):
        click.echo(f"{key + ':':<10} {record[key]}")
    click.echo(f"{'dead:':<10} {format_age(record['dead_for_s'])} ago")
    click.echo(f"{'payload:':<10} {json.dumps(record['payload'], ensure_ascii=False)}")


def _act(action: str, ids: Sequence[str] | None, every: bool, queue: str | None, config: Any,
         redis_url: str | None) -> None:
    dead = _open(config, redis_url, queue)
    wanted = _ids(dead, ids, every)
    done: list[str] = []
    skipped: list[str] = []
    method = dead.requeue_dead if action == "requeue" else dead.drop_dead
    with clear_errors():
        for outcome in (_by_id(method, wanted, queue) if wanted else _every(method, dead.dead_letter_count(), queue)):
            done += outcome.done
            skipped += outcome.skipped
    verb = "requeued" if action == "requeue" else "dropped"
    click.echo(f"{verb} {len(done)} dead letter{'' if len(done) == 1 else 's'}"
               + (f": {' '.join(done)}" if 0 < len(done) <= 20 else ""))
    if skipped:
        click.echo(f"fairctl: warning: left {len(skipped)} in the list whose class is no longer configured: "
                   f"{' '.join(skipped[:20])}", err=True)
    missing = [i for i in dict.fromkeys(wanted) if i not in set(done) | set(skipped)]
    if missing:
        where = f" in {queue}" if queue else ""
        fail("ID", f"no dead letter{where} with id {', '.join(missing)}", code=1)


def _by_id(method: Callable[..., DeadOutcome], ids: list[str], queue: str | None) -> Iterator[DeadOutcome]:
    for i in range(0, len(ids), DEAD_PAGE):
        yield method(ids[i:i + DEAD_PAGE], queue=queue)


def _every(method: Callable[..., DeadOutcome], count: int, queue: str | None) -> Iterator[DeadOutcome]:
    """At most the ``count`` dead letters there are now: jobs that die again meanwhile (a handler
    still missing) are not taken round and round."""
    left = count
    while left > 0:
        outcome = method(None, queue=queue, limit=min(left, DEAD_PAGE))
        yield outcome
        left -= len(outcome.done) + len(outcome.skipped)
        if not outcome.done:
            break


@group.command()
@ids_argument
@all_option
@queue_option
@config_option
@redis_url_option
def requeue(ids: tuple[str, ...], every: bool, queue: str | None, config: Path, redis_url: str | None) -> None:
    """Put dead letters back in their class, to run again.

    Each keeps its id, tenant, class, task, classification reason and payload; its attempts start
    again from zero and it queues behind its tenant's other jobs. Fix the cause first (the error
    `fairctl dead show ID` prints), or the job dies again."""
    _act("requeue", ids, every, queue, config, redis_url)


@group.command()
@ids_argument
@all_option
@queue_option
@click.option("--yes", is_flag=True, help="Confirm --all: the jobs are deleted for good.")
@config_option
@redis_url_option
def drop(ids: tuple[str, ...], every: bool, queue: str | None, yes: bool, config: Path, redis_url: str | None) -> None:
    """Delete dead letters for good (the job and its payload)."""
    if every and not yes:
        fail("--yes", "drop --all deletes every dead letter" + (f" of {queue}" if queue else "")
             + " for good; add --yes to confirm")
    _act("drop", ids, every, queue, config, redis_url)
