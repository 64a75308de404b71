"""Names stored as codes: a job's tier, task and reason read back the same whether it was queued
before its group had names (stored as they are), under one config or under a later one that
listed more names; and a queued job of the example config takes fewer bytes for it."""

from __future__ import annotations

import dataclasses

import redis

from fairness_core import Config
from fairness_core.scheduler import Scheduler
from fairness_core.config import Rule
from fairness_core.config_store import NO_MOVES, NO_NAMES
from fairness_core.jobs import CODE_MARK, SEP, DeadLetter, code

from .conftest import make_config


def stored_fields(client: redis.Redis, scheduler: Scheduler, queue: str, tenant: str) -> list[list[str]]:
    """The tier, task and reason fields of the tenant's queued jobs, as Redis holds them."""
    lines = client.lrange(scheduler.keys.tenant_queue(queue, tenant), 0, -1)
    return [line.decode().split(SEP)[3:6] for line in lines]


def with_rule(config: Config, rule: Rule, tier: str) -> Config:
    """``config`` with ``rule`` first and one more tier: two names it does not list yet."""
    tenants = dataclasses.replace(config.tenants, tiers={**config.tenants.tiers, tier: 2})
    return dataclasses.replace(config, classification=(rule, *config.classification), tenants=tenants)


def test_jobs_read_back_the_same_across_a_group_without_names_and_later_applies(client: redis.Redis) -> None:
    config = make_config()
    scheduler = Scheduler(config, client)
    # A group as a release before codes applied it: no names stored, every name stored as it is.
    scheduler._apply_script(config, NO_MOVES, NO_NAMES, expect="", rebase=False, check=False)
    scheduler.sync()
    assert scheduler.settings.names == () and client.hget(scheduler.keys.config, "names") in (None, b"")
    scheduler.enqueue("password_reset", "acme", {"n": 1})
    assert stored_fields(client, scheduler, "jobs:high", "acme") == [["free", "password_reset", "a human is blocked on this"]]

    scheduler.apply(config)  # the next apply lists the names
    coded = {name: code(i) for i, name in enumerate(scheduler.settings.names, start=1)}
    scheduler.enqueue("password_reset", "acme", {"n": 2})
    scheduler.enqueue("resize_image", "acme", {"n": 3}, tier="pro")  # no rule names this task
    assert stored_fields(client, scheduler, "jobs:high", "acme")[1] == [
        coded["free"], coded["password_reset"], coded["a human is blocked on this"]]
    assert stored_fields(client, scheduler, "jobs:medium", "acme") == [[coded["pro"], "resize_image", coded["default"]]]

    # A later config naming a new task and tier: earlier codes keep their places, new names follow.
    later = with_rule(config, Rule(queue="jobs:high", reason="regulatory deadline", tasks=frozenset({"tax_filing"})),
                      tier="partner")
    before = scheduler.settings.names
    scheduler.apply(later)
    assert scheduler.settings.names[:len(before)] == before
    assert set(scheduler.settings.names[len(before):]) == {"partner", "tax_filing", "regulatory deadline"}
    scheduler.enqueue("tax_filing", "acme", {"n": 4}, tier="partner")

    other = Scheduler(later, client)  # another process reads the names from the applied config
    leases = other.pop(10, classes=["jobs:high"]) + other.pop(10, classes=["jobs:medium"])
    assert [(lease.payload["n"], lease.task, lease.reason) for lease in leases] == [
        (1, "password_reset", "a human is blocked on this"), (2, "password_reset", "a human is blocked on this"),
        (4, "tax_filing", "regulatory deadline"), (3, "resize_image", "default")]

    # A dead letter keeps the stored fields, reads back its names, and is requeued as it was.
    for lease in leases:
        other.nack(lease, "gave up", final=True)
    dead = other.dead_letters()
    assert [(d["lease"].task, d["lease"].reason) for d in dead] == [(lease.task, lease.reason) for lease in leases]
    assert DeadLetter.decode(client.lindex(other.keys.dead, 0).decode()).job.task == "password_reset", "kept as stored"
    other.requeue_dead(limit=10)
    assert sorted((lease.payload["n"], lease.task) for lease in other.pop(10)) == [
        (1, "password_reset"), (2, "password_reset"), (3, "resize_image"), (4, "tax_filing")]


def test_the_example_config_stores_its_names_in_a_few_bytes(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(), client)
    scheduler.enqueue("password_reset", "acme", {"n": 1})
    [fields] = stored_fields(client, scheduler, "jobs:high", "acme")
    assert all(field.startswith(CODE_MARK) for field in fields), fields
    assert len(SEP.join(fields)) <= 10 < len(SEP.join(["free", "password_reset", "a human is blocked on this"]))
