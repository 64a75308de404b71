"""``fairctl config show|diff|apply``: the config a queue group runs, and changing it live.

A group's policy lives in its Redis (:mod:`fairness_core.config_store`), not in each process's
file: every script call checks it, so one ``apply`` changes the policy of a running fleet, and
no process ever runs another one. These commands read it, compare a file with it and apply one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import click
from click.exceptions import Exit

from fairness_core import Config, ConfigError, QueueGroup, load_config
from fairness_core.ages import format_age
from fairness_core.config_store import Applied, ConfigConflict, ConfigRefused, Moves, differences, shared_text
from fairness_core.scheduler import ApplyOutcome
from fairness_core.layout import GroupBusy, PartlyApplied

from .commands import Group, argument
from .common import (
    PATH,
    clear_errors,
    config_option,
    connect,
    fail,
    load,
    redis_url_option,
    with_redis_url,
)

group = Group("config", help="Show, compare and apply the config a queue group runs: it lives in the group's Redis, "
                             "and every process follows the applied one without a restart.", no_args_is_help=True)

file_argument = argument(
    "file", metavar="FILE", type=PATH,
    help="A fairness.yaml; its redis.prefix names the queue group, its redis.url the Redis (unless --redis-url).")


def _load_file(file: Path, redis_url: str | None) -> Config:
    """FILE validated (exit 2 naming the bad field), on ``--redis-url`` when given."""
    try:
        config = load_config(file)
    except ConfigError as exc:
        fail("FILE", str(exc))
    return with_redis_url(config, redis_url)


def _read(group: QueueGroup) -> Applied | None:
    """The group's applied config; Redis down, or a stored config this release cannot read, is
    one line naming the cause instead of a traceback."""
    with clear_errors():
        return group.read_applied()


def _groups(config: Config) -> list[QueueGroup]:
    """The queue groups of ``config``'s queue: its one group, or every shard its layout serves."""
    queue = connect(config)
    with clear_errors():
        return queue.groups()


def _moves(values: Sequence[str] | None, option: str) -> dict[str, str]:
    """``OLD=NEW`` pairs; exit 2 naming the option on anything else or on a repeated OLD."""
    out: dict[str, str] = {}
    for value in values or ():
        old, sep, new = value.partition("=")
        old, new = old.strip(), new.strip()
        if not sep or not old or not new:
            fail(option, f"expected OLD=NEW, got {value!r}")
        if old in out:
            fail(option, f"{old!r} is moved twice ({old}={out[old]} and {value})")
        out[old] = new
    return out


def _moves_text(moves: Moves) -> str:
    """Moves as a person reads them (``show`` and ``apply`` print the same words)."""
    pairs = [f"{o} -> {n}" for o, n in sorted(moves.classes.items())]
    pairs += [f"tier {o} -> {n}" for o, n in sorted(moves.tiers.items())]
    return ", ".join(pairs) or "none"


def _show_diff(applied: Applied | None, new: Config, file: Path) -> bool:
    """Print what applying ``new`` changes against ``applied``; whether it changes anything (a
    first config always does: it starts the group)."""
    prefix = new.redis.prefix
    if applied is None:
        click.echo(f"queue group {prefix} has no applied config: {file} would be its first and start the group")
        return True
    lines = differences(applied.config, new)
    click.echo(f"queue group {prefix}: applied v{applied.version} ({applied.fingerprint}) -> {file}: "
               + (f"{len(lines)} change(s)" if lines else "no changes"))
    for line in lines:
        click.echo(f"  {line}")
    return bool(lines)


@group.command()
@config_option
@redis_url_option
def show(config: Path, redis_url: str | None) -> None:
    """Print the config the queue group of --config's redis.prefix runs: version, fingerprint, when
    it was applied, its moves and how many names its jobs store as codes (as YAML comments), then the
    config itself. redis.url and
    exporter.listen are each process's own and are never stored. Exit 1 when none is applied yet."""
    for queue_group in _groups(load(config, redis_url)):
        _show_one(queue_group)


def _show_one(queue_group: QueueGroup) -> None:
    applied = _read(queue_group)
    prefix = queue_group.keys.prefix
    if applied is None:
        fail("--config", f"queue group {prefix} has no applied config yet: its first process applies its own, "
                         "or start it with: fairctl config apply FILE", code=1)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(applied.applied_at))
    click.echo(f"# queue group: {prefix}\n# version: {applied.version}\n# fingerprint: {applied.fingerprint}\n"
               f"# applied at: {when} ({format_age(max(0.0, time.time() - applied.applied_at))} ago)\n"
               f"# moves: {_moves_text(applied.moves)}\n# names stored as codes: {len(applied.names.names)}")
    click.echo(shared_text(applied.config), nl=False)


@group.command()
@file_argument
@redis_url_option
def diff(file: Path, redis_url: str | None) -> None:
    """What applying FILE would change in its queue group, one line per field (path: applied ->
    FILE). Exit 0 when FILE is what the group runs, 1 when it differs or none is applied yet, as
    diff(1) does."""
    changed = [_show_diff(_read(g), g.file_config, file) for g in _groups(_load_file(file, redis_url))]
    if any(changed):
        raise Exit(1)


@group.command()
@file_argument
@click.option("--move", metavar="OLD=NEW", multiple=True, show_default=False,
              help="Move the jobs of class OLD, which FILE no longer names, to class NEW (repeatable).")
@click.option("--move-tier", metavar="OLD=NEW", multiple=True, show_default=False,
              help="Charge the queued tenants of tier OLD, which FILE no longer names, as tier NEW (repeatable).")
@click.option("--dry-run", is_flag=True, help="Validate FILE and the moves and print the changes; apply nothing.")
@redis_url_option
def apply(file: Path, move: Sequence[str] | None, move_tier: Sequence[str] | None, dry_run: bool,
          redis_url: str | None) -> None:
    """Make FILE the config its queue group runs, atomically, and print what changed.

    Running workers, producers and exporters of the group follow it within their next call to
    Redis, without a restart: every call checks the applied config's fingerprint and a process
    still on the old one reloads it first, so no call runs any other policy. The group is named
    by FILE's redis.prefix: a FILE with another prefix is another group (a group with no applied
    config is started by this). Moving a group to a new prefix is not an apply: start the new
    group and drain the old one (their keys sit in different hash slots, so no atomic move
    exists). redis.url and exporter.listen are each process's own.

    A class FILE no longer names may still hold jobs (queued, leased or waiting to retry): then
    the apply is refused, changing nothing (exit 1), until --move OLD=NEW says where they go.
    Queued ones move keeping their ids and ages, retries waiting for their backoff keeping their
    due time; leased ones go to NEW when they come back.
    Likewise a tier FILE drops that is still some queued tenant's needs --move-tier OLD=NEW.
    If someone else applies between the diff printed here and the apply, nothing is applied
    (exit 1, naming the config that won): read the diff again and retry.

    A sharded group (redis.shards) is applied to every shard it serves, each atomically, one
    apply or re-shard of the group at a time: one under way is waited for (briefly, then exit 1
    naming it), and the shards a re-shard adds get the config too. Show and diff list every
    shard. An apply stopped part way (its process died, or a shard refused it) leaves the shards
    on two configs (exit 1 naming them; the QueueConfigSplit alert): apply again to make them one."""
    moves = Moves(classes=_moves(move, "--move"), tiers=_moves(move_tier, "--move-tier"))
    new = _load_file(file, redis_url)
    try:
        moves.check(new)  # the moves apply carries over from earlier applies are valid by construction
    except ValueError as exc:  # "--move OLD=NEW: why"
        option, _, why = str(exc).partition(": ")
        fail(option, why)
    queue = connect(new)
    with clear_errors():
        seen = queue.applied_group()  # before the groups: an apply that ends after this read wins
        changed = [_show_diff(_read(g), g.file_config, file) for g in queue.groups()]
    if not _worth_applying(changed, moves, dry_run):
        return
    try:
        with clear_errors():
            done = queue.apply(new, moves=moves, expect=seen.fingerprint if seen else "")
    except (ConfigRefused, ConfigConflict, GroupBusy, PartlyApplied) as exc:
        fail("FILE", str(exc), code=1)
    for prefix, outcome in done.shards.items():
        _say_applied(prefix, outcome, moves)
    if queue.sharded:
        click.echo(f"queue group {new.redis.prefix}: all {len(done.shards)} shards run config v{done.group.version} "
                   f"(group fingerprint {done.group.fingerprint}); running processes follow it within their next call")
    else:
        click.echo("running processes of the group follow it within their next call")


def _worth_applying(changed: list[bool], moves: Moves, dry_run: bool) -> bool:
    """Whether to go on to the apply once the diffs are printed (``changed``: whether each
    differs); a dry run, or a config applied already with no moves, says why not."""
    if dry_run:
        click.echo("dry run: nothing applied (a refusal is only known at apply, which changes nothing if refused)")
        return False
    if not any(changed) and not moves.classes and not moves.tiers:
        click.echo("nothing to apply")
        return False
    return True


def _say_applied(prefix: str, outcome: ApplyOutcome, moves: Moves) -> None:
    click.echo(f"applied v{outcome.version} to queue group {prefix} (fingerprint {outcome.fingerprint}); "
               f"moved {outcome.moved} job(s)" + (f" ({_moves_text(moves)})" if moves.classes or moves.tiers else ""))
