"""The applied config live, on one real redis-server: processes follow a config applied while they
run (4 ``fairctl worker`` processes move to new weights within 1,000 pops, no restart); the first
process of a group applies its own, a process with the same file says nothing, one with another
file follows the applied config and warns naming the difference, one that cannot read the applied
config refuses to start; jobs left under a class no config names (an upgraded group) are served by
the exporter and alerted by a real Prometheus until moved; removing a class that holds jobs is
refused, and a move keeps every job and its age."""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from alerts.output import rules_text
from alerts.rules import JOBS_UNDER_UNCONFIGURED_CLASS
from exporter import metrics as m
from fairness_core import Config, Snapshot, load_config, redis_client
from fairness_core.queue import Queue
from fairness_core.scheduler import Scheduler
from fairness_core import worker as worker_module
from fairness_core.config_store import ConfigRefused, Moves, shared_text
from fairness_core.settings import derive
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import EXAMPLE_CONFIG, make_config
from .exporter_support import Prometheus, running_exporter, scrape
from .support import spawn_worker, wait_for
from .test_reliability_concurrency import completions
from .crash_support import stop_all

HIGH, MEDIUM, LOW = "jobs:high", "jobs:medium", "jobs:low"
ALL = (HIGH, MEDIUM, LOW)
TASK = {HIGH: "t-high", MEDIUM: "t-medium", LOW: "t-low"}
CONFIG_LOG = "fairctl.config"


def group_config(tmp_path: Path, url: str, weights: dict[str, int], *, prefix: str | None = None,
                 policy: str = "weighted-fair", name: str = "fairness.yaml",
                 **sections: dict[str, Any]) -> tuple[Path, Config]:
    """A config file of the classes ``weights`` names (in that order, one task each, no reserved
    slots, budgets or aging, so nothing but the policy decides what is popped), with ``sections``
    merged in, written for subprocesses and loaded back. A fresh prefix unless ``prefix`` joins an
    existing group."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for key, value in sections.items():
        data[key] = {**data[key], **value}
    data["redis"] = {**data["redis"], "url": url, "prefix": prefix or make_config().redis.prefix}
    data["scheduler"] = {**data["scheduler"], "policy": policy, "budget_min_arrivals": 10**9}
    data["classes"] = [{"name": c, "weight": w, "max_age": "1h"} for c, w in weights.items()]
    data["classification"] = [{"tasks": [TASK[c]], "class": c, "reason": "test"} for c in weights]
    data["classification"].append({"class": next(iter(weights)), "reason": "default"})
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path, load_config(path)


def leased(snapshot: Snapshot) -> dict[str, int]:
    """Jobs each class has had popped so far: processed + in flight, read in one atomic snapshot
    (no job fails or expires here), so the count is exact at that point of the pop sequence;
    processed alone would lag the pops by the jobs the workers hold."""
    return {c: v.counters["processed"] + v.inflight for c, v in snapshot.classes.items()}


def window(start: dict[str, int], end: dict[str, int]) -> dict[str, int]:
    return {c: end[c] - start[c] for c in end}


def assert_shares(pops: dict[str, int], weights: dict[str, int], bound: int, what: str) -> None:
    total, weight = sum(pops.values()), sum(weights.values())
    for c, w in weights.items():
        expected = total * w / weight
        assert abs(pops[c] - expected) <= bound, f"{what}: {c} had {pops[c]} of {total} pops, its weight gives {expected:.0f}"


def registered_workers(scheduler: Scheduler) -> list[str]:
    """Ids of the workers whose slots count (each id ends in its process id and a random tag)."""
    return sorted(w.decode() for w in scheduler.client.hkeys(scheduler.keys.worker_slots))


def log_lines(path: Path, needle: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if needle in line]


# ---------------------------------------------------------------- 4 workers follow new weights

OLD = {HIGH: 60, MEDIUM: 30, LOW: 10}
NEW = {HIGH: 20, MEDIUM: 30, LOW: 50}
WORKERS, SLOTS, BATCH = 4, 4, 4
BEFORE, AFTER = 600, 1000  # pops measured under the old weights, then under the new ones
PER_CLASS = 1500  # every class stays backlogged through both windows (checked at the end)
SERVICE = {"service_s": 0.02}  # paces the fleet to ~800 jobs/s so the polls see the windows' ends


def test_four_worker_processes_follow_new_weights_within_a_thousand_pops_without_restart(
        redis_server: RedisServer, tmp_path: Path) -> None:
    path, config = group_config(tmp_path, redis_server.url, OLD)
    scheduler = Scheduler(config, redis_client(redis_server.url))
    for c in ALL:
        for t in range(3):
            scheduler.submit_many(TASK[c], f"{c}-tenant-{t}", [SERVICE] * (PER_CLASS // 3))
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    workers = [spawn_worker(path, log, f"{config.redis.prefix}:record", redis_server.url,
                            "--concurrency", str(SLOTS), "--batch", str(BATCH), "--log-every", "0")
               for log in logs]
    try:
        # 20 ms jobs, past the default prefetch: each slot leases one at a time and registers one
        wait_for(lambda: scheduler.snapshot().worker_slots == WORKERS * SLOTS, 60, "every worker registered")
        registered = registered_workers(scheduler)
        assert sorted(w.split("-")[-2] for w in registered) == sorted(str(w.pid) for w in workers)
        start = leased(scheduler.snapshot())
        wait_for(lambda: sum(window(start, leased(scheduler.snapshot())).values()) >= BEFORE, 60,
                 f"{BEFORE} pops under the old weights")
        at_apply = leased(scheduler.snapshot())
        outcome = scheduler.apply(dataclasses.replace(config, classes=tuple(
            dataclasses.replace(c, weight=NEW[c.name]) for c in config.classes)))
        after_apply = leased(scheduler.snapshot())
        end: dict[str, int] = {}

        def thousand_more() -> bool:
            end.update(leased(scheduler.snapshot()))
            return sum(window(after_apply, end).values()) >= AFTER
        wait_for(thousand_more, 60, f"{AFTER} pops under the new weights")
        last = scheduler.snapshot()
        wait_for(lambda: all(log_lines(log, "config v2") for log in logs), 30, "every worker to log the new config")
        assert [w.poll() for w in workers] == [None] * WORKERS, "every worker still runs"
        assert registered_workers(scheduler) == registered, "the same processes, none restarted or re-registered"
    finally:
        stop_all(workers)

    assert outcome.version == 2
    assert set(outcome.changes) == {f"classes.{c}.weight: {OLD[c]} -> {NEW[c]}" for c in (HIGH, LOW)}
    assert all(v.depth > 0 for v in last.classes.values()), "every class stayed backlogged: all were eligible"
    # Every pop is one visit of BATCH jobs of one tenant (each tenant holds hundreds), charged as
    # BATCH rounds of smooth weighted round-robin: over any run of consecutive pops under one set
    # of weights a class is then within BATCH jobs of its weight's share (a replay of the Lua
    # algorithm over every window of up to 1,300 jobs of both weight sets finds exactly BATCH).
    # Concurrent workers add nothing: Redis runs their pops one at a time. Twice that is allowed.
    bound = 2 * BATCH
    old, new = window(start, at_apply), window(after_apply, end)
    assert sum(old.values()) >= BEFORE and AFTER <= sum(new.values()) < AFTER + 400, (old, new)
    assert_shares(old, OLD, bound, "before the apply")
    assert_shares(new, NEW, bound, "after the apply")
    print(f"\nshares of {sum(old.values())} pops before: {old}; of {sum(new.values())} after: {new}")
    # Each worker says it runs v2 and what changed. (At which level is the next tests' business.
    # Not yet checked: that it says so once; threads refused at the same time each sync and log.)
    for log in logs:
        assert len(log_lines(log, " slots, batch ")) == 1, "the worker started once"
        change = log_lines(log, "config v2")
        named = f"classes.{HIGH}.weight: {OLD[HIGH]} -> {NEW[HIGH]}; classes.{LOW}.weight: {OLD[LOW]} -> {NEW[LOW]}"
        assert any(line.endswith(named) for line in change), change


# ---------------------------------------------------------------- which config a process runs

def test_the_first_process_of_a_group_applies_its_own_and_one_with_the_same_file_says_nothing(
        client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config()
    first = Scheduler(config, client)
    assert first.read_applied() is None
    with caplog.at_level(logging.INFO, logger=CONFIG_LOG):
        first.enqueue("newsletter", "acme")
        applied = first.read_applied()
        assert applied is not None and (applied.version, applied.fingerprint) == (1, derive(config).fingerprint)
        assert [r.levelno for r in caplog.records if r.name == CONFIG_LOG] == [logging.INFO]
        caplog.clear()
        second = Scheduler(make_config(redis={"prefix": config.redis.prefix}), client)
        assert [lease.task for lease in second.pop()] == ["newsletter"]
        second.snapshot()
    assert not [r for r in caplog.records if r.name == CONFIG_LOG], "same file: nothing to say"
    assert first.read_applied() == applied, "and nothing applied again"


def test_a_change_applied_under_a_running_process_is_logged_at_info(
        client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config()
    applier, running = Scheduler(config, client), Scheduler(config, client)
    applier.enqueue("newsletter", "acme")
    running.snapshot()  # ran under the applied config, its own file's
    heavier = dataclasses.replace(config.classes[2], weight=50)
    applier.apply(dataclasses.replace(config, classes=(*config.classes[:2], heavier)))
    with caplog.at_level(logging.INFO, logger=CONFIG_LOG):
        running.pop()
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == CONFIG_LOG]
    assert [level for level, _ in records] == [logging.INFO], records
    assert "config v2 applied: classes.jobs:low.weight: 10 -> 50" in records[0][1]


def test_a_worker_with_another_file_follows_the_applied_config_and_warns_naming_the_difference(
        redis_server: RedisServer, tmp_path: Path) -> None:
    weights = {HIGH: 70, MEDIUM: 20, LOW: 10}
    _, applied = group_config(tmp_path, redis_server.url, weights, policy="strict", name="applied.yaml")
    path, _ = group_config(tmp_path, redis_server.url, weights, prefix=applied.redis.prefix, name="mine.yaml")
    scheduler = Scheduler(applied, redis_client(redis_server.url))
    queue_of = {scheduler.enqueue(TASK[c], "acme"): c for _ in range(20) for c in (LOW, MEDIUM, HIGH)}
    key = f"{applied.redis.prefix}:record"
    log = tmp_path / "worker.log"
    worker = spawn_worker(path, log, key, redis_server.url, "--concurrency", "1", "--batch", "1")
    try:
        wait_for(lambda: len(completions(scheduler.client, key)) == len(queue_of), 60, "every job processed")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    # Its file says weighted-fair; the applied config says strict, and strict is what it ran:
    # one slot, one job per pop, so completions are in pop order.
    order = [queue_of[job_id] for job_id, _ in completions(scheduler.client, key)]
    assert order == [HIGH] * 20 + [MEDIUM] * 20 + [LOW] * 20
    warnings = log_lines(log, f"WARNING {CONFIG_LOG}: following the applied config v1 of queue group "
                              f"{applied.redis.prefix}, which differs from {path}: ")
    assert len(warnings) == 1 and warnings[0].endswith("scheduler.policy: weighted-fair -> strict"), log.read_text()


def test_a_worker_that_cannot_read_the_applied_config_refuses_to_start_naming_its_version(
        redis_server: RedisServer, tmp_path: Path) -> None:
    path, config = group_config(tmp_path, redis_server.url, {HIGH: 70, MEDIUM: 20, LOW: 10})
    newer = yaml.safe_load(shared_text(config))
    newer["scheduler"]["preemption"] = True  # as a newer release might write it
    client = redis_client(redis_server.url)
    scheduler = Scheduler(config, client)
    client.hset(scheduler.keys.config, mapping={"yaml": yaml.safe_dump(newer), "moves": "", "version": 7,
                                                "fingerprint": "0123456789abcdef", "applied_ms": 1})
    log = tmp_path / "worker.log"
    worker = spawn_worker(path, log, "unused", redis_server.url)
    try:
        code = worker.wait(timeout=60)
    finally:
        stop_all([worker])
    text = log.read_text()
    assert code == 2, text
    assert f"fairctl: error: applied config v7 of {config.redis.prefix}: scheduler.preemption" in text, text
    assert "upgrade this process" in text, text
    assert "Traceback" not in text
    assert client.hget(scheduler.keys.config, "version") == b"7", "left as it was"


# ---------------------------------------------------------------- classes no config names

def enqueue_each(scheduler: Scheduler, counts: dict[str, int]) -> dict[str, list[str]]:
    """``counts[c]`` jobs in class ``c``, over two tenants; their ids per class."""
    return {c: [scheduler.enqueue(TASK[c], f"tenant-{i % 2}") for i in range(n)] for c, n in counts.items()}


def test_jobs_an_upgraded_group_left_under_an_unnamed_class_are_served_and_alerted_until_moved(
        redis_server: RedisServer, tmp_path: Path) -> None:
    url = redis_server.url
    _, before = group_config(tmp_path, url, {HIGH: 70, MEDIUM: 20, LOW: 10}, name="a.yaml")
    # Prometheus scrapes and evaluates every second; the alert's for: is 1 s.
    _, after = group_config(tmp_path, url, {HIGH: 70, MEDIUM: 30}, prefix=before.redis.prefix, name="b.yaml",
                            alerts={"for": {JOBS_UNDER_UNCONFIGURED_CLASS: "1s"}})
    old = Scheduler(before, redis_client(url))
    ids = enqueue_each(old, {LOW: 1})
    first_enqueued = time.time()
    ids[LOW] += enqueue_each(old, {LOW: 36})[LOW]
    enqueue_each(old, {HIGH: 5, MEDIUM: 5})
    client = redis_client(url)
    client.delete(old.keys.config)  # as an older release, which kept no config in Redis, left it
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(after))
    firing = f'ALERTS{{alertname="{JOBS_UNDER_UNCONFIGURED_CLASS}",alertstate="firing"}}'
    with ExitStack() as stack:
        exporter = stack.enter_context(running_exporter(after))
        scraped_at = time.time()
        served = scrape(exporter.url)
        applied = Scheduler(after, client).read_applied()
        assert applied is not None and (applied.version, applied.fingerprint) == (1, derive(after).fingerprint), \
            "adopted unchecked, though jobs:low holds jobs"
        assert served.series(m.UNCONFIGURED_JOBS.name) == {
            ((m.QUEUE, LOW), (m.STATE, state)): n for state, n in (("queued", 37), ("inflight", 0), ("delayed", 0))}
        age = served.value(m.UNCONFIGURED_OLDEST_AGE.name, queue=LOW)
        assert age >= scraped_at - first_enqueued - 0.001, (age, scraped_at - first_enqueued)  # ms precision
        prometheus = stack.enter_context(Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)))
        wait_for(lambda: [labels["queue"] for labels, _ in prometheus.query(firing)] == [LOW], 60,
                 f"{JOBS_UNDER_UNCONFIGURED_CLASS} firing for {LOW}")
        moved = Scheduler(after, client).apply(after, moves=Moves(classes={LOW: MEDIUM}))
        assert moved.moved == 37
        later = scrape(exporter.url)
        assert not later.series(m.UNCONFIGURED_JOBS.name), "nothing left unconfigured"
        assert served.series(m.CONFIG_VERSION.name) == {((m.FINGERPRINT, applied.fingerprint),): 1}
        assert later.series(m.CONFIG_VERSION.name) == {((m.FINGERPRINT, moved.fingerprint),): 2}, "followed the apply"
        wait_for(lambda: not prometheus.query(firing), 60, f"{JOBS_UNDER_UNCONFIGURED_CLASS} resolved")


def test_removing_a_class_that_holds_jobs_is_refused_and_a_move_keeps_every_job_and_its_age(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    url = redis_server.url
    _, before = group_config(tmp_path, url, {HIGH: 70, MEDIUM: 20, LOW: 10}, name="a.yaml")
    _, after = group_config(tmp_path, url, {HIGH: 70, MEDIUM: 30}, prefix=before.redis.prefix, name="b.yaml")
    scheduler = Scheduler(before, client)
    ids = enqueue_each(scheduler, {LOW: 25})
    ids.update(enqueue_each(scheduler, {MEDIUM: 10}))
    was = scheduler.snapshot()
    with pytest.raises(ConfigRefused, match=f"class '{LOW}' still holds 25 job"):
        scheduler.apply(after)
    applied = scheduler.read_applied()
    assert applied is not None and applied.version == 1 and applied.config.class_names == ALL, "nothing applied"
    now = scheduler.snapshot()
    assert [(v.depth, v.oldest_age >= was.classes[c].oldest_age) for c, v in now.classes.items()] == \
        [(0, True), (10, True), (25, True)], "nothing moved"

    outcome = scheduler.apply(after, moves=Moves(classes={LOW: MEDIUM}))
    moved = scheduler.snapshot()
    assert (outcome.version, outcome.moved, set(moved.classes), moved.unconfigured) == (2, 25, {HIGH, MEDIUM}, {})
    assert moved.classes[MEDIUM].depth == 35
    assert moved.classes[MEDIUM].oldest_age >= was.classes[LOW].oldest_age, "the moved jobs keep their age"
    popped = scheduler.pop(100)
    assert Counter(lease.queue for lease in popped) == {MEDIUM: 35}
    assert sorted(lease.job_id for lease in popped) == sorted(ids[LOW] + ids[MEDIUM]), "no job lost, none invented"


def test_moves_finish_without_the_process_that_applied_them(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An applier that dies after the apply, before its moves: a worker's sweep moves the rest."""
    _, before = group_config(tmp_path, redis_server.url, {HIGH: 70, MEDIUM: 20, LOW: 10}, name="a.yaml")
    _, after = group_config(tmp_path, redis_server.url, {HIGH: 70, MEDIUM: 30}, prefix=before.redis.prefix,
                            name="b.yaml")
    scheduler = Scheduler(before, client)
    ids = enqueue_each(scheduler, {LOW: 12})[LOW]
    moves = Moves(classes={LOW: MEDIUM})
    # What apply does first, alone: the config applied, its moves recorded, nothing moved yet.
    applied = scheduler.read_applied()
    scheduler._apply_script(after, moves, applied.names.covering(after), expect=applied.fingerprint, rebase=False,
                            check=True)
    left = Scheduler(before, client).snapshot()
    assert left.unconfigured[LOW].depth == 12 and LOW not in left.classes, (left.unconfigured, set(left.classes))

    monkeypatch.setattr(worker_module, "PROMOTE_EVERY_S", 0.1)
    done: list[str] = []
    worker = Worker(Queue(before, client), HandlerRegistry(fallback=lambda lease: done.append(lease.job_id)),
                    concurrency=1, grace=5.0)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_for(lambda: sorted(done) == sorted(ids), 30, "the moved jobs served under jobs:medium")
    finally:
        worker.stop()
        runner.join(timeout=30)
    assert not Scheduler(after, client).snapshot().unconfigured, "nothing left under the removed class"


def test_a_routine_apply_makes_no_pass_over_the_queued_tenants(client: redis.Redis) -> None:
    """An apply that changes a class's weight and a tier's weight (so every tier's cost), the charge
    basis as it was, runs as many commands with 300 tenants queued as with 10: at 100,000 tenants a
    pass over them (rebasing every tag, dropping runtime estimates a group charged by jobs does not
    have) held Redis for a third of a second."""
    config = make_config()
    scheduler = Scheduler(config, client)

    def commands_of_an_apply(more_tenants: int, weight: int) -> int:
        for n in range(more_tenants):
            scheduler.enqueue("order", f"tenant-{weight}-{n}", tier=("enterprise", "pro", "free")[n % 3])
        client.config_resetstat()
        first = dataclasses.replace(config.classes[0], weight=weight)
        tenants = dataclasses.replace(config.tenants, tiers={**config.tenants.tiers, "enterprise": weight})
        scheduler.apply(dataclasses.replace(config, classes=[first, *config.classes[1:]], tenants=tenants))
        return sum(int(v["calls"]) for k, v in client.info("commandstats").items() if k != "cmdstat_info")

    with_10 = commands_of_an_apply(10, 5)
    assert commands_of_an_apply(290, 6) == with_10, "the apply with 300 tenants queued ran more commands"


def test_new_tier_costs_keep_each_tenants_place_in_its_class(client: redis.Redis) -> None:
    """Re-weighting the tiers keeps the tags: the tenant served just before the apply does not go
    first again (restarting every tag at zero handed out a round in tenant-name order)."""
    config = make_config(tenants={"batch": 1})
    scheduler = Scheduler(config, client)
    for tenant in ("tenant-a", "tenant-b", "tenant-a", "tenant-b"):
        scheduler.enqueue("order", tenant, tier="pro")
    assert [lease.tenant for lease in scheduler.pop(1)] == ["tenant-a"], "equal tags: the name breaks the tie"
    scheduler.apply(dataclasses.replace(config, tenants=dataclasses.replace(config.tenants, tiers={
        "enterprise": 12, "pro": 3, "free": 1})))
    assert [lease.tenant for lease in scheduler.pop(3)] == ["tenant-b", "tenant-a", "tenant-b"]
