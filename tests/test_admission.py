"""Per-tenant admission limits (tenants.max_queued and per-tier overrides) against a real
redis-server: refused at exactly the limit, other tenants still accepted, room back once jobs are
taken, partial acceptance of a batch, the error naming the limit, the refusal counter, the CLI, and
Redis's memory staying flat while a flooding tenant is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from fairctl.cli import app
from fairness_core import ConfigError, Model, TenantLimitReached
from fairness_core.scheduler import Scheduler
from fairness_core.config import MAX_QUEUED, parse_config
from fairness_core.config_dump import config_to_data
from fairness_core.keys import RATE_SPACE
from fairness_core.settings import derive

from .conftest import make_config
from .support import write_config

LIMIT = 5


def limited(client: redis.Redis, **tenants: Any) -> Scheduler:
    """A scheduler whose tenants may queue ``LIMIT`` jobs each, with ``tenants`` merged in."""
    return Scheduler(make_config(tenants={"max_queued": LIMIT, **tenants}), client)


def queued(s: Scheduler, tenant: str) -> int:
    """The tenant's queued jobs over every class, as the snapshot's backlog lists count them."""
    return sum(int(dict(c.top_backlog).get(tenant, 0)) for c in s.snapshot().classes.values())


def test_no_limit_by_default_and_the_script_reads_nothing_more() -> None:
    settings = derive(make_config())
    assert settings.has_limit is False and set(settings.max_queued.values()) == {0}


def test_a_tenant_is_refused_at_exactly_its_limit_and_others_are_accepted(client: redis.Redis) -> None:
    s = limited(client)
    ids = [s.enqueue("order", "flood") for _ in range(LIMIT - 2)]
    ids += [s.enqueue("newsletter", "flood") for _ in range(2)]  # every class counts together
    assert len(set(ids)) == LIMIT
    with pytest.raises(TenantLimitReached) as refused:
        s.enqueue("order", "flood")
    assert (refused.value.tenant, refused.value.limit, refused.value.value) == ("flood", "tenants.max_queued", LIMIT)
    assert str(refused.value) == "tenant 'flood' is at its limit of 5 queued jobs (tenants.max_queued); job refused"
    assert s.enqueue("order", "quiet")
    snap = s.snapshot()
    assert snap.classes["jobs:medium"].counters["refused"] == 1
    assert snap.classes["jobs:low"].counters["refused"] == 0
    assert queued(s, "flood") == LIMIT


def test_a_pop_and_its_ack_make_room_again(client: redis.Redis) -> None:
    s = limited(client)
    for _ in range(LIMIT):
        s.enqueue("order", "flood")
    with pytest.raises(TenantLimitReached):
        s.enqueue("order", "flood")
    leases = s.pop(2)
    assert [lease.tenant for lease in leases] == ["flood", "flood"]
    for lease in leases:
        s.ack(lease)
    s.enqueue("order", "flood")
    s.enqueue("order", "flood")
    with pytest.raises(TenantLimitReached):
        s.enqueue("order", "flood")


def test_a_tiers_own_limit_replaces_the_group_wide_one_and_is_named(client: redis.Redis) -> None:
    s = limited(client, limits={"free": {"max_queued": 2}})
    s.enqueue("order", "small", tier="free")
    s.enqueue("order", "small", tier="free")
    with pytest.raises(TenantLimitReached, match=r"limit of 2 queued jobs \(tenants\.limits\.free\.max_queued\)"):
        s.enqueue("order", "small", tier="free")
    for _ in range(LIMIT):
        s.enqueue("order", "big", tier="pro")
    with pytest.raises(TenantLimitReached, match=r"\(tenants\.max_queued\)"):
        s.enqueue("order", "big", tier="pro")


def test_a_tier_can_lift_the_group_wide_limits(client: redis.Redis) -> None:
    s = limited(client, max_rate=100, limits={"enterprise": {"max_queued": "unlimited", "max_rate": "unlimited"}})
    assert all(s.submit_many("order", "big", [{}] * (3 * LIMIT), tier="enterprise"))
    assert [d is not None for d in s.submit_many("order", "small", [{}] * (LIMIT + 1), tier="pro")] == [True] * LIMIT + [False]
    assert derive(s.config).max_queued["enterprise"] == 0 and derive(s.config).max_rate["enterprise"] == 0
    data = config_to_data(s.config)
    assert data["tenants"]["limits"] == {"enterprise": {"max_queued": "unlimited", "max_rate": "unlimited"}}
    assert parse_config(data) == s.config


def test_submit_many_queues_up_to_the_limit_and_returns_none_for_the_rest(client: redis.Redis) -> None:
    s = limited(client)
    s.enqueue("order", "flood")
    done = s.submit_many("order", "flood", [{"n": i} for i in range(LIMIT + 3)])
    assert [d is not None for d in done] == [True] * (LIMIT - 1) + [False] * 4
    assert s.snapshot().classes["jobs:medium"].counters["refused"] == 4
    assert queued(s, "flood") == LIMIT
    model = Model(s.config)
    model.submit(0, "order", "flood")
    with pytest.raises(TenantLimitReached):
        model.submit_many(0, "order", "flood", LIMIT + 3)
    assert model.stats["refused\tjobs:medium"] == 4


def test_a_flooding_tenant_stays_at_its_limit_and_redis_memory_stays_flat(client: redis.Redis) -> None:
    s = limited(client)
    payloads = ["x" * 1000] * 500  # 0.5 MB a burst, were it queued
    assert len([d for d in s.submit_many("newsletter", "flood", payloads) if d]) == LIMIT
    s.submit_many("newsletter", "flood", payloads)  # refused: buffers and counters at their working size
    before = int(client.info("memory")["used_memory"])
    for _ in range(4):
        assert not any(s.submit_many("newsletter", "flood", payloads))
    after = int(client.info("memory")["used_memory"])
    assert after - before < 64 * 1024, f"used_memory grew by {after - before} bytes over 2 MB of refused jobs"
    assert all(s.submit_many("newsletter", f"other-{i}", ["y"]) for i in range(3))
    assert queued(s, "flood") == LIMIT
    assert s.snapshot().classes["jobs:low"].counters["refused"] == 6 * len(payloads) - LIMIT


def test_fairctl_enqueue_exits_1_naming_the_limit(redis_server: Any, tmp_path: Path) -> None:
    path, _ = write_config(tmp_path, redis_server.url, tenants={"max_queued": 2})
    result = CliRunner().invoke(app, ["enqueue", "order", "--tenant", "acme", "--count", "3", "--config", str(path)])
    assert result.exit_code == 1
    assert "fairctl: error: --tenant: tenant 'acme' is at its limit of 2 queued jobs (tenants.max_queued)" in result.stderr
    assert "enqueued 2 of 3 jobs before the error" in result.stderr


@pytest.mark.parametrize(("tenants", "message"), [
    ({"max_queued": 0}, "tenants.max_queued: must be between 1 and"),
    ({"max_queued": "many"}, "tenants.max_queued: expected a whole number"),
    ({"limits": {"gold": {"max_queued": 3}}}, "tenants.limits.gold: unknown tier 'gold'"),
    ({"limits": {"free": {"max_q": 3}}}, "tenants.limits.free.max_q: unknown key; did you mean max_queued?"),
    ({"limits": {"free": 3}}, "tenants.limits.free: expected a mapping"),
    ({"limits": [1]}, "tenants.limits: expected a mapping of tier name to limits"),
    ({"limits": {"free": {"max_queued": "none"}}},
     "tenants.limits.free.max_queued: expected a whole number, got 'none'; or unlimited, for no limit on this tier"),
])
def test_bad_limits_are_refused_naming_the_field(tenants: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("?", r"\?")):
        make_config(tenants=tenants)


def test_limits_are_dumped_and_read_back() -> None:
    config = make_config(tenants={"max_queued": MAX_QUEUED, "limits": {"free": {"max_queued": 10}}})
    data = config_to_data(config)
    assert data["tenants"]["max_queued"] == MAX_QUEUED and data["tenants"]["limits"] == {"free": {"max_queued": 10}}
    assert parse_config(data) == config
    assert "max_queued" not in config_to_data(make_config())["tenants"]


# ---------------------------------------------------------------- the arrival-rate limit

T0 = 1_700_000_000_000  # a rate-window bucket boundary (a multiple of 10 s)


def rate_limited(client: redis.Redis, clock: list[int], **tenants: Any) -> Scheduler:
    """A scheduler at ``clock[0]`` whose tenants may have 3 jobs accepted per 10 s window."""
    config = make_config(tenants={"max_rate": "18/m", "rate_window": "10s", **tenants})
    return Scheduler(config, client, clock=lambda: clock[0])


def test_no_rate_limit_by_default() -> None:
    settings = derive(make_config())
    assert settings.has_rate is False and set(settings.max_rate.values()) == {0}
    assert settings.rate_window_ms == 60_000


def test_a_tenant_over_its_rate_is_refused_and_let_in_again_as_the_window_moves(client: redis.Redis) -> None:
    clock = [T0]
    s = rate_limited(client, clock)
    for _ in range(3):
        s.enqueue("order", "flood")
    with pytest.raises(TenantLimitReached) as refused:
        s.enqueue("order", "flood")
    assert (refused.value.limit, refused.value.value) == ("tenants.max_rate", 0.3)
    assert str(refused.value) == "tenant 'flood' is over its arrival rate of 0.3/s (tenants.max_rate); job refused"
    assert s.enqueue("order", "quiet")  # another tenant's rate is its own
    assert s.snapshot().classes["jobs:medium"].counters["refused"] == 1
    clock[0] = T0 + 10_000  # next bucket: all 3 still weigh in at its start
    with pytest.raises(TenantLimitReached):
        s.enqueue("order", "flood")
    clock[0] = T0 + 13_000  # 70% of the previous bucket left: 2.1 < 3 lets one in, 3.1 no more
    s.enqueue("order", "flood")
    with pytest.raises(TenantLimitReached):
        s.enqueue("order", "flood")
    clock[0] = T0 + 20_000  # the previous bucket holds the one job: 2 more
    s.enqueue("order", "flood")
    s.enqueue("order", "flood")
    with pytest.raises(TenantLimitReached):
        s.enqueue("order", "flood")
    assert s.snapshot().classes["jobs:medium"].counters["refused"] == 4


def test_a_rate_bucket_drops_the_one_two_windows_older(client: redis.Redis) -> None:
    """A bucket's first job unlinks the bucket two windows older, which no estimate reads (freed
    off Redis's main thread, not by expiry on it), and gives itself three windows' TTL, once."""
    clock = [T0]
    s = rate_limited(client, clock)

    def key(at: int) -> str:
        return s.keys.base + RATE_SPACE + str(at // 10_000)

    for n in range(3):
        clock[0] = T0 + n * 10_000
        s.enqueue("order", "flood")
        assert 20_000 < client.pttl(key(clock[0])) <= 30_000
        client.pexpire(key(clock[0]), 40_000)
        s.enqueue("order", "quiet")  # a bucket's next tenant leaves its TTL as it was
        assert client.pttl(key(clock[0])) > 30_000
    assert client.exists(key(T0)) == 0
    assert client.exists(key(T0 + 10_000), key(T0 + 20_000)) == 2


def test_refused_jobs_do_not_count_against_the_rate(client: redis.Redis) -> None:
    clock = [T0]
    s = Scheduler(make_config(tenants={"max_rate": "18/m", "rate_window": "10s", "max_queued": 2}), client,
                  clock=lambda: clock[0])
    assert len([d for d in s.submit_many("order", "flood", [1, 2, 3, 4]) if d]) == 2  # two at max_queued
    for lease in s.pop(2):
        s.ack(lease)
    s.enqueue("order", "flood")  # the refusals took none of the rate: the third job of the window
    with pytest.raises(TenantLimitReached, match=r"arrival rate of 0\.3/s"):
        s.enqueue("order", "flood")


def test_a_tiers_own_rate_replaces_the_group_wide_one_and_is_named(client: redis.Redis) -> None:
    clock = [T0]
    s = rate_limited(client, clock, limits={"free": {"max_rate": 0.1}})
    s.enqueue("order", "small", tier="free")
    with pytest.raises(TenantLimitReached, match=r"arrival rate of 0\.1/s \(tenants\.limits\.free\.max_rate\)"):
        s.enqueue("order", "small", tier="free")
    assert [s.enqueue("order", "big", tier="pro") for _ in range(3)]
    with pytest.raises(TenantLimitReached, match=r"\(tenants\.max_rate\)"):
        s.enqueue("order", "big", tier="pro")


def test_the_model_refuses_a_burst_as_the_script_does(client: redis.Redis) -> None:
    clock = [T0 + 2_500]
    s = rate_limited(client, clock)
    model = Model(s.config)
    assert [d is not None for d in s.submit_many("order", "flood", list(range(5)))] == [True] * 3 + [False] * 2
    with pytest.raises(TenantLimitReached, match="arrival rate"):
        model.submit_many(clock[0], "order", "flood", 5)
    assert model.stats["refused\tjobs:medium"] == 2 and model.seq == 3
    assert model.rates == {(T0 + 2_500) // 10_000: {"flood": 3}}


@pytest.mark.parametrize(("tenants", "message"), [
    ({"max_rate": 0}, "tenants.max_rate: must be more than zero"),
    ({"max_rate": "fast"}, "tenants.max_rate: expected jobs per second or a rate such as 500/m"),
    ({"limits": {"free": {"max_rate": "1/y"}}}, "tenants.limits.free.max_rate: expected jobs per second"),
    ({"rate_window": "1500ms"}, "tenants.rate_window: expected whole seconds from 1s to 1d"),
    ({"rate_window": "2d"}, "tenants.rate_window: expected whole seconds from 1s to 1d"),
    ({"rate_window": 60}, "tenants.rate_window: expected a duration"),
])
def test_bad_rates_are_refused_naming_the_field(tenants: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("?", r"\?")):
        make_config(tenants=tenants)


def test_rates_are_dumped_and_read_back() -> None:
    config = make_config(tenants={"max_rate": "6000/m", "rate_window": "5m", "limits": {"free": {"max_rate": "2/s"}}})
    data = config_to_data(config)
    assert data["tenants"]["max_rate"] == 100.0 and data["tenants"]["rate_window"] == "5m"
    assert data["tenants"]["limits"] == {"free": {"max_rate": 2.0}}
    assert parse_config(data) == config
    assert not {"max_rate", "rate_window"} & set(config_to_data(make_config())["tenants"])
