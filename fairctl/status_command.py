"""``fairctl status``: each queue's classes, backlog and realised share, for one queue group or a
sharded one. A sharded queue is one queue to the people who run it, so it is shown as one: the
class table over all its shards, then a line per shard (where it lives, what it holds, which
config it runs), instead of a full table per shard that grows with the shard count."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import click

from exporter.metrics import group_of
from fairness_core import Config, MemoryInfo, QueueGroup, RedisUnavailable
from fairness_core.ages import format_age
from fairness_core.config_store import Applied
from fairness_core.connection import server_of
from fairness_core.memory import read_memory, riskiest
from fairness_core.merged_snapshot import merged_snapshot, summed_counts
from fairness_core.snapshot import Snapshot

from .common import clear_errors, configs_option, connect, load_queues, redis_url_option
from .status_view import applied_json, as_json, class_statuses, config_line, memory_line, render
from .text_table import text_table

T = TypeVar("T")
SHARD_HEADERS = ("shard", "group", "master", "depth", "oldest", "in-flight", "delayed", "dead", "paused", "config")


@click.command()
@click.option("--interval", metavar="SECONDS", type=click.FloatRange(0, 3600), default=1.0,
              help="Seconds between the two snapshots the realised share is measured over (0: one snapshot, no share).")
@click.option("--top", metavar="N", type=click.IntRange(1, 100), default=3, help=(
    "Most backlogged tenants to list per class (at most the larger of the applied exporter.topk_tenants "
    "and 10: the snapshot reads no more)."))
@click.option("--json", "as_json_output", is_flag=True, help="Print JSON instead of a table.")
@configs_option
@redis_url_option
def status(interval: float, top: int, as_json_output: bool, configs: tuple[Path, ...], redis_url: str | None) -> None:
    """Show each class's backlog and the share of work it really gets.

    Per class: depth, oldest job's age, in-flight, delayed retries, dead letters, paused, configured weight and
    realised share (the class's part of the jobs processed during --interval; under scheduler.charge:
    runtime, of the worker time the workers reported, the time share), then the most
    backlogged tenants of each class, the tenants (and accounts) held by their dispatch limits
    with their queued jobs (when the config sets such limits, or some are held), the jobs under
    classes the config does not name (nothing serves them), and Redis's memory against maxmemory
    with its eviction policy. A sharded queue
    (redis.shards) is shown as one queue, its classes over every shard, then a line per shard:
    its queue group, the master holding it, its backlog and the config version it runs; shards
    whose master does not answer are named, and the figures are the other shards'. With several
    --config, every queue in turn (with --json, a list of them), measured over the same
    interval."""
    queues = [_Queue(config) for config, _ in load_queues(configs, redis_url)]
    with clear_errors():
        before = [q.snapshots() if interval else None for q in queues]
        time.sleep(interval)
        reports = [q.report(then, interval, top) for q, then in zip(queues, before)]
    if as_json_output:
        click.echo(json.dumps(reports[0][0] if len(reports) == 1 else [data for data, _ in reports], indent=2))
    else:
        several = len(reports) > 1
        click.echo("\n\n".join(f"queue group {data['group']}{_shards_title(data)}\n{text}"
                               if several or "shards" in data else text for data, text in reports))


def _shards_title(data: dict[str, Any]) -> str:
    layout = data.get("layout")
    if layout is None:
        return ""
    left = f", {layout['serve']} served until the re-shard settles" if layout["serve"] > layout["shards"] else ""
    return f": one queue sharded {layout['shards']} ways{left} (layout v{layout['version']})"


@dataclass(frozen=True)
class _Reading:
    """What status shows of one queue group (one shard of a sharded queue), read at the end of the
    interval."""

    snapshot: Snapshot
    dead: dict[str, int]  # dead letters per class
    applied: Applied
    memory: MemoryInfo  # of its own master on a sharded queue; else of its Redis (a Cluster's fullest master)


class _Queue:
    """One --config's queue: its group's scheduler, or a sharded queue's shards."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.queue = connect(config)
        self.sharded = self.queue if self.queue.sharded else None

    def shards(self) -> list[QueueGroup]:
        return self.queue.groups()

    def snapshots(self) -> list[Snapshot | None]:
        return [self._answer(s.snapshot) for s in self.shards()]

    def _answer(self, read: Callable[[], T]) -> T | None:
        """``read()``; on a sharded queue, None when the shard does not answer: the others are shown."""
        try:
            return read()
        except RedisUnavailable:
            if self.sharded is None:
                raise
            return None

    def _read(self, shard: QueueGroup) -> _Reading:
        return _Reading(shard.snapshot(), shard.dead_letter_counts(), shard.applied or shard.sync(),
                        read_memory(shard.client, None if self.sharded is None else shard.keys.config))

    def merged(self, snapshots: list[Snapshot]) -> Snapshot:
        """The queue's snapshot: its group's, or a sharded queue's shards' as one queue's."""
        return snapshots[0] if self.sharded is None else merged_snapshot(snapshots)

    def report(self, before: list[Snapshot | None] | None, interval: float, top: int) -> tuple[dict[str, Any], str]:
        """The queue's status now, its shares since ``before``: as JSON data and as text. A sharded
        queue's figures are those of the shards that answered both times; the others are named."""
        shards = self.shards()
        read = [self._answer(partial(self._read, s)) for s in shards]
        got = {i: r for i, r in enumerate(read) if r is not None and (before is None or before[i] is not None)}
        if not got:
            raise RedisUnavailable(f"no shard of queue group {self.config.redis.prefix} answers: "
                                   f"{self._named(range(len(shards)))}")
        config = next(iter(got.values())).applied.config  # the classes and weights the queue runs (its first shard's)
        merged = self.merged([r.snapshot for r in got.values()])
        earlier = None if before is None else self.merged([b for i in got if (b := before[i]) is not None])
        rows = class_statuses(config, earlier, merged, top,
                              summed_counts(r.dead for r in got.values()))
        unconfigured = sorted(merged.unconfigured.values(), key=lambda u: u.name)
        headroom, charge = config.redis.memory_headroom, config.scheduler.charge
        memory = riskiest(r.memory for r in got.values())
        if self.sharded is None:
            applied = got[0].applied
            data = {"group": group_of(self.config), **as_json(
                rows, interval, charge=charge, unconfigured=unconfigured, memory=memory, headroom=headroom,
                applied=applied)}
            return data, render(rows, interval, charge=charge, unconfigured=unconfigured,
                                memory=memory_line(memory, headroom), config=config_line(applied, merged.time))
        layout = self.sharded.layout()
        master = {index: name for name, held in self.sharded.masters().items() for index in held}
        lines = [_ShardLine(i, s.keys.prefix, master.get(i, "-"), got.get(i)) for i, s in enumerate(shards)]
        data = {"group": self.config.redis.prefix,
                "layout": {"shards": layout.shards, "serve": layout.serve, "version": layout.version},
                **as_json(rows, interval, charge=charge, unconfigured=unconfigured, memory=memory, headroom=headroom),
                "shards": [line.as_json() for line in lines]}
        text = render(rows, interval, charge=charge, unconfigured=unconfigured)
        columns = [i for i, name in enumerate(SHARD_HEADERS) if master or name != "master"]  # off a Cluster, one Redis
        table = text_table([[row[i] for i in columns] for row in [SHARD_HEADERS, *(line.cells() for line in lines)]],
                           numbers_right=True, indent="  ")
        notes = []
        if self.sharded.layout_copy is not None:
            data["layout"]["copy_on"] = self.sharded.layout_copy
            notes.append(f"layout: its master {server_of(self.sharded.client, self.sharded.keys.layout)} does not "
                         f"answer; read from its copy on {self.sharded.layout_copy} (fairctl reshard and config apply "
                         "need that master)")
        silent = [i for i in range(len(shards)) if i not in got]
        if silent:
            notes.append(f"shard{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} "
                         f"{'do' if len(silent) > 1 else 'does'} not answer ({self._named(silent)}): "
                         "left out of the figures above")
        return data, "\n".join([text, "shards:", *table, *notes, memory_line(memory, headroom),
                                _shards_config_line({i: r.applied for i, r in got.items()}, merged.time)])

    def _named(self, indices: Sequence[int]) -> str:
        """The shards ``indices`` by name, with the master holding them: ``P.0, P.3 on host:port``."""
        shards = self.shards()
        held: dict[str, list[str]] = {}
        for index in indices:
            held.setdefault(server_of(shards[index].client, shards[index].keys.config), []).append(
                shards[index].keys.prefix)
        return "; ".join(f"{', '.join(names)} on {where}" for where, names in held.items())


class _ShardLine:
    """One shard of a sharded queue: where it lives and what it holds (``reading`` None: it did
    not answer)."""

    def __init__(self, index: int, group: str, master: str, reading: _Reading | None) -> None:
        self.index, self.group, self.master, self.reading = index, group, master, reading
        if reading is None:
            return
        views = reading.snapshot.classes.values()
        self.depth = sum(v.depth for v in views)
        self.oldest = max((v.oldest_age for v in views), default=0.0)
        self.inflight = sum(v.inflight for v in views)
        self.delayed = sum(v.delayed for v in views)
        self.dead = sum(reading.dead.values())
        self.paused = sorted(name for name, v in reading.snapshot.classes.items() if v.paused)

    def cells(self) -> tuple[str, ...]:
        if self.reading is None:
            return (str(self.index), self.group, self.master, *["-"] * 6, "no answer")
        return (str(self.index), self.group, self.master, str(self.depth), format_age(self.oldest), str(self.inflight),
                str(self.delayed), str(self.dead), ", ".join(self.paused) or "-", f"v{self.reading.applied.version}")

    def as_json(self) -> dict[str, Any]:
        where = {"shard": self.index, "group": self.group, "master": self.master}
        if self.reading is None:
            return {**where, "answers": False}
        return {**where, "answers": True, "depth": self.depth, "oldest_age_s": self.oldest, "inflight": self.inflight,
                "delayed": self.delayed, "dead_letters": self.dead, "paused": self.paused,
                "applied_config": applied_json(self.reading.applied)}


def _shards_config_line(applied: Mapping[int, Applied], now: float) -> str:
    """Which config the shards (those that answered, by index) run: one version on every shard, or
    which shards run which (an apply goes shard by shard, and a shard a re-shard added gets shard 0's)."""
    versions: dict[int, list[str]] = {}
    for index, a in applied.items():
        versions.setdefault(a.version, []).append(str(index))
    if len(versions) == 1:
        latest = max(a.applied_at for a in applied.values())
        return (f"config: v{next(iter(versions))} on every shard, applied {format_age(max(0.0, now - latest))} ago "
                "(fairctl config show lists each)")
    each = "; ".join(f"v{v} on shard{'s' if len(held) > 1 else ''} {', '.join(held)}"
                     for v, held in sorted(versions.items(), reverse=True))
    return f"config: the shards run different versions: {each} (fairctl config apply FILE applies one to every shard)"
