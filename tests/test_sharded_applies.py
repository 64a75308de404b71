"""A sharded queue's config applies are all or nothing: two ``fairctl config apply`` at once, and an
apply during ``fairctl reshard``, end with every shard on one config, and each command's exit code
and words say what happened (the loser names the config that won). An apply stopped part way
leaves a split that the exporter serves (``fairness_group_config_info``) and the next apply heals.

Each race runs the CLI's own command functions from two threads, 50 times, with up to 30 ms
between their starts, on one redis-server. The groups are small (3 shards, grown to 4): an apply
spends some 50 ms of CPU per shard, and the races need no more shards to go either way."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import redis
import yaml

from exporter import metrics as m
from exporter.collector import FairnessCollector
from fairctl import config_commands, queue_commands
from fairness_core import load_config
from fairness_core.scheduler import Scheduler
from fairness_core import layout as sharded_module
from fairness_core.queue import Queue
from fairness_core.layout import GroupConfig, LayoutStore, _LAYOUT_CLAIM, _LAYOUT_RELEASE, group_fingerprint
from fairness_stack.servers import RedisServer

from .conftest import make_config

TRIALS = 50
JITTER_S = 0.03
SHARDS, GROWN = 3, 4
# Three classes, one rule each: small configs make the trials fast. The files differ in one weight.
CLASSES = [{"name": name, "weight": weight, "max_age": "1h"}
           for name, weight in (("jobs:high", 70), ("jobs:medium", 20), ("jobs:low", 10))]
RULES = [{"tasks": [task], "class": name, "reason": task}
         for task, name in (("password_reset", "jobs:high"), ("invoice", "jobs:medium"), ("newsletter", "jobs:low"))]
RULES.append({"class": "jobs:low", "reason": "everything else"})


@dataclass
class Said:
    """What one command said and how it ended."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    code: int = 0


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Said]:
    """A fresh record, for the calling thread, of what the commands it runs next echo (click.echo
    writes to the one process-wide stdout, which two threads would interleave)."""
    local = threading.local()

    def echo(message: Any = None, file: Any = None, nl: bool = True, err: bool = False, color: Any = None) -> None:
        (local.said.err if err else local.said.out).append(str(message))

    monkeypatch.setattr(click, "echo", echo)

    def fresh() -> Said:
        local.said = Said()
        return local.said

    return fresh


def write(path: Path, url: str, prefix: str, high: int, shards: int = SHARDS) -> Path:
    classes = [dict(c, weight=high) if c["name"] == "jobs:high" else c for c in CLASSES]
    path.write_text(yaml.safe_dump({"redis": {"url": url, "prefix": prefix, "shards": shards}, "classes": classes,
                                    "classification": RULES}))
    return path


def run(command: Callable[[], None], said: Callable[[], Said]) -> Said:
    """``command`` as the CLI runs it: its exit code, and what it echoed in this thread."""
    out = said()
    try:
        command()
    except click.exceptions.Exit as exc:
        out.code = exc.exit_code
    return out


def race(first: Callable[[], None], second: Callable[[], None], said: Callable[[], Said],
         rng: random.Random) -> tuple[Said, Said]:
    """Both commands from two threads, each after its own random delay (up to JITTER_S)."""
    results: list[Said | None] = [None, None]
    start = threading.Barrier(2)

    def one(index: int, command: Callable[[], None], delay: float) -> None:
        start.wait()
        time.sleep(delay)
        results[index] = run(command, said)

    threads = [threading.Thread(target=one, args=(i, command, rng.uniform(0, JITTER_S)))
               for i, command in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results[0] is not None and results[1] is not None, "a command hung"
    return results[0], results[1]


def shard_weights(queue: Queue) -> list[int]:
    """The jobs:high weight each served shard runs, as Redis holds it (one group fingerprint, too)."""
    queue.layout(fresh=True)
    applied = [shard.read_applied() for shard in queue.groups()]
    assert all(a is not None for a in applied)
    assert len({group_fingerprint(a, queue.keys.prefix) for a in applied if a is not None}) == 1, "shards split"
    return [a.config.classes[0].weight for a in applied if a is not None]


def group(client: redis.Redis, url: str, tmp_path: Path) -> tuple[Path, Queue]:
    """A fresh sharded group with its first config applied (jobs:high weighs 70)."""
    path = write(tmp_path / "base.yaml", url, make_config().redis.prefix, 70)
    queue = Queue(load_config(path), client)
    queue.apply(load_config(path))
    return path, queue


def apply_of(path: Path) -> Callable[[], None]:
    return lambda: config_commands.apply.callback(path, move=None, move_tier=None, dry_run=False, redis_url=None)


def claimed(said: Said) -> tuple[int, str]:
    """The group's version and fingerprint a successful apply says every shard runs."""
    found = re.search(r"all \d+ shards run config v(\d+) \(group fingerprint (\w+)\)", "\n".join(said.out))
    assert found, said
    return int(found[1]), found[2]


def shards_applied(said: Said) -> int:
    return sum(line.startswith("applied v") for line in said.out)


def test_two_applies_at_once_end_on_one_config_and_the_loser_names_the_winner(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, said: Callable[[], Said]) -> None:
    rng = random.Random(20240611)
    outcomes = {"both applied": 0, "one lost": 0}
    _, queue = group(client, redis_server.url, tmp_path)
    prefix = queue.keys.prefix
    for trial in range(TRIALS):
        theirs, ours = 100 + 2 * trial, 101 + 2 * trial  # jobs:high weights no trial applied before
        a = write(tmp_path / "a.yaml", redis_server.url, prefix, theirs)
        b = write(tmp_path / "b.yaml", redis_server.url, prefix, ours)
        said_a, said_b = race(apply_of(a), apply_of(b), said, rng)
        weights = shard_weights(queue)
        record = queue.applied_group()
        assert record is not None
        assert sorted([said_a.code, said_b.code]) in ([0, 0], [0, 1]), (trial, said_a, said_b)
        if said_a.code == said_b.code == 0:  # the second read the config the first applied: it applied over it
            outcomes["both applied"] += 1
            last, weight = max((claimed(said_a), theirs), (claimed(said_b), ours))
        else:
            outcomes["one lost"] += 1
            winner, loser, weight = (said_a, said_b, theirs) if said_a.code == 0 else (said_b, said_a, ours)
            last = claimed(winner)
            assert (f"another apply won: config v{last[0]} (fingerprint {last[1]}) is applied to queue group {prefix}; "
                    "run `fairctl config diff` and apply again") in "\n".join(loser.err), (trial, loser)
            assert shards_applied(loser) == 0
        assert weights == [weight] * SHARDS, (trial, said_a, said_b)
        assert (record.version, record.fingerprint) == last
    assert outcomes["one lost"] > 0, outcomes  # the race is real: the two overlap
    print(f"apply against apply, {TRIALS} trials: {outcomes}")


def test_an_apply_during_a_reshard_reaches_the_new_shards(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, said: Callable[[], Said]) -> None:
    rng = random.Random(20240612)
    waited = 0
    for trial in range(TRIALS):
        base, queue = group(client, redis_server.url, tmp_path)
        a = write(tmp_path / "a.yaml", redis_server.url, queue.keys.prefix, 60)

        def grow(path: Path = base) -> None:
            queue_commands.reshard.callback(to=GROWN, settle=False, config=path, redis_url=None)

        applied, grown = race(apply_of(a), grow, said, rng)
        assert (applied.code, grown.code) == (0, 0), (trial, applied, grown)
        assert f"new jobs go to {GROWN} shards, workers serve {GROWN}; was {SHARDS} and {SHARDS}" in "\n".join(grown.out)
        waited += shards_applied(applied) == GROWN  # the apply came second: it reached the shard added
        assert queue.layout(fresh=True).serve == GROWN
        assert shard_weights(queue) == [60] * GROWN, (trial, applied, grown)
        assert queue.applied_group() == GroupConfig(*claimed(applied))
    print(f"apply against re-shard, {TRIALS} trials: the apply came second {waited} times")


def test_a_reshard_during_an_apply_waits_and_gives_the_new_shards_its_config(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, said: Callable[[], Said],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-shard that comes while an apply is half way (the races above give that order only when
    the apply claims the group first, which the machine's speed decides) waits for it, and the
    shard it adds gets the config the apply applied."""
    base, queue = group(client, redis_server.url, tmp_path)
    a = write(tmp_path / "a.yaml", redis_server.url, queue.keys.prefix, 60)
    grown: list[Said] = []
    resharding = threading.Thread(target=lambda: grown.append(
        run(lambda: queue_commands.reshard.callback(to=GROWN, settle=False, config=base, redis_url=None), said)))
    renew = LayoutStore.renew

    def renew_once_the_reshard_waits(self: LayoutStore, token: str) -> bool:
        if not resharding.is_alive() and not grown:  # after shard 0, before shard 1
            resharding.start()
            time.sleep(0.2)
        return renew(self, token)

    monkeypatch.setattr(LayoutStore, "renew", renew_once_the_reshard_waits)
    applied = run(apply_of(a), said)
    resharding.join(timeout=30)
    assert applied.code == 0 and grown and grown[0].code == 0, (applied, grown)
    assert shards_applied(applied) == SHARDS  # the layout when it claimed the group
    assert shard_weights(queue) == [60] * GROWN  # the added shard got the config the apply applied


def test_a_claim_held_too_long_fails_naming_its_holder_and_a_dead_ones_lapses(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, said: Callable[[], Said],
        monkeypatch: pytest.MonkeyPatch) -> None:
    base, queue = group(client, redis_server.url, tmp_path)
    a = write(tmp_path / "a.yaml", redis_server.url, queue.keys.prefix, 60)
    monkeypatch.setattr(sharded_module, "CLAIM_WAIT_S", 0.2)
    holder = "an apply from elsewhere pid 1 (dead)"
    client.eval(_LAYOUT_CLAIM, 1, queue.keys.layout, holder, 60_000, "")
    busy = run(apply_of(a), said)
    assert busy.code == 1 and "is being changed by an apply from elsewhere pid 1 (dead)" in busy.err[-1], busy
    grown = run(lambda: queue_commands.reshard.callback(to=GROWN, settle=False, config=base, redis_url=None), said)
    assert grown.code == 1 and "--to: queue group" in grown.err[-1], grown
    assert shard_weights(queue) == [70] * SHARDS and queue.layout(fresh=True).serve == SHARDS

    assert client.eval(_LAYOUT_RELEASE, 1, queue.keys.layout, holder, "", "") == 1
    monkeypatch.setattr(sharded_module, "CLAIM_WAIT_S", 5.0)
    client.eval(_LAYOUT_CLAIM, 1, queue.keys.layout, "an apply that died", 300, "")  # lapses in 0.3 s
    started = time.monotonic()
    assert run(apply_of(a), said).code == 0
    assert time.monotonic() - started >= 0.2
    assert shard_weights(queue) == [60] * SHARDS


def group_fingerprints(queue: Queue) -> list[str]:
    """``fairness_group_config_info`` as an exporter of each served shard serves it."""
    out = []
    for shard in queue.groups():
        collector = FairnessCollector(shard.file_config, Queue(shard.file_config, queue.client).groups()[0],
                                      group=queue.keys.prefix)
        served = [s.labels for family in collector.collect() for s in family.samples if s.name == m.GROUP_CONFIG.name]
        assert len(served) == 1 and served[0][m.SHARD] == shard.keys.prefix and served[0][m.GROUP] == queue.keys.prefix
        out.append(served[0][m.FINGERPRINT])
    return out


def test_an_apply_a_shard_refuses_part_way_is_said_served_as_a_split_and_healed(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, said: Callable[[], Said]) -> None:
    base, queue = group(client, redis_server.url, tmp_path)
    prefix = queue.keys.prefix
    assert len(set(group_fingerprints(queue))) == 1
    queue.shard(2).enqueue("newsletter", "acme")  # jobs:low holds a job on shard 2 alone
    data = yaml.safe_load(base.read_text())
    data["classes"] = [c for c in data["classes"] if c["name"] != "jobs:low"]
    data["classification"] = [dict(r, **{"class": "jobs:medium"}) if r["class"] == "jobs:low" else r
                              for r in data["classification"]]
    without_low = tmp_path / "without-low.yaml"
    without_low.write_text(yaml.safe_dump(data))

    stopped = run(apply_of(without_low), said)
    assert stopped.code == 1, stopped
    assert ("the apply stopped part way: shard 2 refused it (config not applied: class 'jobs:low' still holds "
            "1 job(s)") in stopped.err[-1]
    assert f"Shards {prefix}.0, {prefix}.1 of queue group {prefix} run the new config" in stopped.err[-1]
    served = group_fingerprints(queue)  # what the QueueConfigSplit alert reads
    assert served[0] == served[1] != served[2]

    healed = run(lambda: config_commands.apply.callback(without_low, move=["jobs:low=jobs:medium"], move_tier=None,
                                                        dry_run=False, redis_url=None), said)
    assert healed.code == 0, healed
    assert "moved 1 job(s) (jobs:low -> jobs:medium)" in "\n".join(healed.out)
    assert len(set(group_fingerprints(queue))) == 1
    assert queue.applied_group() == GroupConfig(*claimed(healed))

