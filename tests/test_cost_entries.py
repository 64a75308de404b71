"""The cost hash holds the tier of each queued party off the default tier, and only those: a queued
party with no entry is of the default tier, and keeps it when a later config names another; the
per-tier counts of queued tenants (what a sharded queue weighs its shards by) stay right."""

from __future__ import annotations

import dataclasses

import redis

from fairness_core.scheduler import Scheduler
from fairness_core.jobs import SEP

from .conftest import make_config


def test_only_parties_off_the_default_tier_have_a_cost_entry(client: redis.Redis) -> None:
    config = make_config()
    scheduler = Scheduler(config, client)
    scheduler.enqueue("password_reset", "acme", {"n": 1})
    scheduler.enqueue("password_reset", "beta", {"n": 2}, tier="pro")
    cost = scheduler.keys.class_key("jobs:high", "cost")

    def counts() -> dict[str, int]:
        return {tier: int(client.hget(scheduler.keys.stats, f"tenants{SEP}jobs:high{SEP}{tier}") or 0)
                for tier in ("free", "pro")}

    assert client.hgetall(cost) == {b"beta": b"pro"}
    assert counts() == {"free": 1, "pro": 1}
    scheduler.enqueue("password_reset", "beta", {"n": 3})  # its latest job's tier: the default
    assert client.hgetall(cost) == {} and counts() == {"free": 2, "pro": 0}
    scheduler.enqueue("password_reset", "beta", {"n": 4}, tier="pro")

    # A new default tier: the queued parties of the old one keep it, written in.
    scheduler.apply(dataclasses.replace(config, tenants=dataclasses.replace(config.tenants, default_tier="pro")))
    assert client.hgetall(cost) == {b"acme": b"free", b"beta": b"pro"}
    assert counts() == {"free": 1, "pro": 1}
    scheduler.pop(10)
    assert client.hgetall(cost) == {} and counts() == {"free": 0, "pro": 0}
