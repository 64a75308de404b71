"""Dispatch limits through the queue: caps and rates hold a tenant while every other goes on,
their config is checked where it is written, an apply changes them live, and a limited tenant of
a sharded queue routes to one shard of its hand."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fairness_core import ConfigError, Queue
from fairness_core.config_dump import config_to_data
from fairness_core.config import parse_config
from fairness_core.routing import Router, pinned
from fairness_core.settings import derive

from .conftest import make_config


def _limited(**tenants: Any) -> Any:
    return make_config(tenants=tenants)


def _queue(client: redis.Redis, clock: list[int], **tenants: Any) -> Queue:
    return Queue(_limited(**tenants), client, clock=lambda: clock[0])


def _tenants(leases: list[Any]) -> list[str]:
    return [lease.tenant for lease in leases]


@pytest.mark.parametrize("tenants, path, says", [
    ({"max_in_flight": 0}, "tenants.max_in_flight", "must be between 1"),
    ({"dispatch_rate": "fast"}, "tenants.dispatch_rate", "500/m"),
    ({"dispatch_burst": 0}, "tenants.dispatch_burst", "must be between 1"),
    ({"overrides": {"acme": {"max_queued": 3}}}, "tenants.overrides.acme.max_queued", "admission limits hold per tier"),
    ({"overrides": {"acme": {"max_in_flght": 3}}}, "tenants.overrides.acme.max_in_flght", "admission limits hold per tier"),
    ({"overrides": {"a\tb": {"max_in_flight": 3}}}, "tenants.overrides.a\tb", "control characters"),
    ({"overrides": ["acme"]}, "tenants.overrides", "mapping of tenant id"),
    ({"account_max_in_flight": 2}, "tenants.account_max_in_flight", "needs tenants.account_separator"),
    ({"limits": {"gold": {"max_in_flight": 2}}}, "tenants.limits.gold", "unknown tier"),
])
def test_bad_limits_name_their_field(tenants: dict[str, Any], path: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _limited(**tenants)
    assert err.value.path == path
    assert says in str(err.value)


def test_limits_need_weighted_fair_queuing() -> None:
    with pytest.raises(ConfigError) as err:
        make_config(tenants={"max_in_flight": 3}, scheduler={"policy": "fifo"})
    assert err.value.path == "scheduler.policy"
    assert "weighted-fair" in str(err.value)


def test_a_tenant_override_beats_its_tier_and_the_group() -> None:
    config = _limited(max_in_flight=10, dispatch_rate="5/s", limits={"free": {"max_in_flight": 2}},
                      overrides={"acme": {"max_in_flight": "unlimited", "dispatch_rate": "1/m"}})
    t = config.tenants
    assert t.limit_for("free", "max_in_flight", "b") == 2
    assert t.limit_for("pro", "max_in_flight", "b") == 10
    assert t.limit_for("free", "max_in_flight", "acme") is None  # unlimited
    assert t.limit_for("pro", "dispatch_rate", "acme") == pytest.approx(1 / 60)
    settings = derive(config)
    assert settings.tenant_pace_us["acme"] == 60_000_000 and settings.pace_us["pro"] == 200_000
    # The dump reads back the same config, overrides and all.
    assert parse_config(config_to_data(config)).tenants == t


def test_a_capped_tenant_is_held_while_the_others_go_on(client: redis.Redis) -> None:
    clock = [1_700_000_000_000]
    q = _queue(client, clock, batch=1, overrides={"acme": {"max_in_flight": 2}})
    q.submit_many("send_newsletter", "acme", [{}] * 4)
    for tenant in ("b", "c"):
        q.submit_many("send_newsletter", tenant, [{}] * 3)
    first = q.pop(8)
    assert _tenants(first).count("acme") == 2
    assert len(first) == 8  # b and c fill the rest
    counts = {k.decode(): int(v) for k, v in client.hgetall(q.shard(0).keys.stats).items()}
    assert counts["held\tjobs:medium\tcap"] == 1 and counts["heldjobs\tjobs:medium\tcap"] == 2
    assert q.pop(4) == []  # only acme's jobs are left, and acme is at its cap
    acme = [lease for lease in first if lease.tenant == "acme"]
    q.ack(acme[0])  # a settle rejoins it: one more may start
    again = q.pop(4)
    assert _tenants(again) == ["acme"]


def test_a_rate_starts_a_tenant_at_its_pace(client: redis.Redis) -> None:
    clock = [1_700_000_000_000]
    q = _queue(client, clock, batch=4, overrides={"acme": {"dispatch_rate": "2/s", "dispatch_burst": 2}})
    q.submit_many("send_newsletter", "acme", [{}] * 10)
    assert len(q.pop(10)) == 2  # the burst
    assert q.pop(10) == []
    clock[0] += 499
    assert q.pop(10) == []  # the next token is due 500 ms after the burst
    clock[0] += 1
    assert len(q.pop(10)) == 1
    clock[0] += 5000  # idle long enough for a full bucket: the burst again, no more
    assert len(q.pop(10)) == 2


def test_an_apply_changes_the_limits_live(client: redis.Redis) -> None:
    clock = [1_700_000_000_000]
    q = _queue(client, clock, batch=1, max_in_flight=1)
    q.submit_many("send_newsletter", "acme", [{}] * 5)
    assert len(q.pop(5)) == 1
    data = config_to_data(q.config)
    data["tenants"]["max_in_flight"] = 3
    q.apply(parse_config(data))
    assert len(q.pop(5)) == 2  # held at 1, rejoined at the apply, held again at 3
    data["tenants"].pop("max_in_flight")
    q.apply(parse_config(data))
    assert len(q.pop(5)) == 2  # no limit: the rest


def test_a_limited_tenant_routes_to_one_shard_of_its_hand() -> None:
    config = make_config(redis={"shards": 6, "shard_hand": 3}, tenants={"overrides": {"acme": {"max_in_flight": 3}}})
    router, settings = Router(config), derive(config)
    assert pinned(settings, "acme") and not pinned(settings, "b")
    full = router.hand("acme", 6)
    assert len(full) == 3
    assert router.hand("acme", 6, settings) == full[:1]
    assert router.hand("b", 6, settings) == router.hand("b", 6)
    everyone = derive(make_config(redis={"shards": 6, "shard_hand": 3}, tenants={"dispatch_rate": "5/s"}))
    assert pinned(everyone, "b")


def test_the_quiet_tenants_age_passes_a_held_tenant_by(client: redis.Redis) -> None:
    clock = [1_700_000_000_000]
    q = _queue(client, clock, batch=1, overrides={"acme": {"max_in_flight": 1}})
    q.submit_many("send_newsletter", "acme", [{}] * 3)  # acme's are the oldest jobs
    clock[0] += 20_000
    q.submit("send_newsletter", "b")
    q.pop(1)  # acme's first: acme is at its cap
    clock[0] += 10_000
    assert q.pop(2)[0].tenant == "b"  # acme held on the way
    q.submit("send_newsletter", "c")
    clock[0] += 5_000
    low = q.snapshot().classes["jobs:medium"]
    assert low.oldest_age == pytest.approx(35.0)  # acme's jobs do wait: the class's oldest is theirs
    assert low.quiet_oldest_age == pytest.approx(5.0)  # but on their own limit: c is the quiet one
