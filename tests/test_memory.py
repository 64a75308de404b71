"""The memory guard without a server: when it refuses, how often it reads INFO, what its errors say,
the cluster reading, and the config fields it reads."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import OutOfMemoryError

from alerts.config import alert_settings
from fairness_core import ConfigError, Enqueued, EvictionPolicyError, RedisMemoryFull, parse_config
from fairness_core.memory import MemoryGuard, MemoryInfo, check_eviction_policy, read_memory

from .test_config import with_change

MIB = 1048576


class FakeInfo:
    """A client whose INFO answers what the test sets, counting the calls."""

    def __init__(self, used: int, maxmemory: int = 100 * MIB, policy: str = "noeviction") -> None:
        self.reply: dict[str, Any] = {"used_memory": used, "maxmemory": maxmemory, "maxmemory_policy": policy,
                                      "evicted_keys": 0}
        self.calls = 0

    def info(self, *sections: str, **_: Any) -> dict[str, Any]:
        assert sections == ("memory", "stats")
        self.calls += 1
        return dict(self.reply)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def guard(client: FakeInfo, headroom: float = 0.9) -> tuple[MemoryGuard, Clock]:
    clock = Clock()
    return MemoryGuard(client, headroom, refresh=0.1, clock=clock), clock


def test_enqueues_are_refused_from_the_headroom_on_and_the_message_names_the_limit() -> None:
    client = FakeInfo(used=89 * MIB)
    g, clock = guard(client)
    g.check()
    client.reply["used_memory"] = 90 * MIB
    clock.now += 0.1
    with pytest.raises(RedisMemoryFull) as refused:
        g.check()
    text = str(refused.value)
    assert "used 90.0 MiB of maxmemory 100.0 MiB (90%; redis.memory_headroom 90%)" in text
    assert "Pops and acks continue, so workers drain" in text and "refused by fairctl" in text


def test_no_maxmemory_never_refuses() -> None:
    g, _ = guard(FakeInfo(used=10**12, maxmemory=0))
    g.check()
    assert g.read().fill == 0.0


def test_info_is_read_at_most_once_per_refresh_however_many_jobs() -> None:
    client = FakeInfo(used=10 * MIB)
    g, clock = guard(client)
    for _ in range(1000):
        g.check()
    assert client.calls == 1
    clock.now += 0.099
    g.check()
    assert client.calls == 1
    clock.now += 0.001
    g.check()
    assert client.calls == 2
    g.read(fresh=True)
    assert client.calls == 3


def test_redis_refusing_an_enqueue_becomes_the_same_error_with_a_fresh_reading() -> None:
    client = FakeInfo(used=80 * MIB)
    g, _ = guard(client)
    g.check()
    client.reply["used_memory"] = 100 * MIB
    with pytest.raises(RedisMemoryFull, match=r"refused by Redis at maxmemory\): used 100.0 MiB of maxmemory 100.0 MiB"):
        with g.refusals():
            raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'")


def test_a_batch_refused_half_way_names_the_jobs_redis_took() -> None:
    g, _ = guard(FakeInfo(used=100 * MIB))
    taken = Enqueued("1", "jobs:low", "batch")
    g.batch_refused([["1", "jobs:low", "batch"]], [taken])  # nothing refused: no error
    with pytest.raises(RedisMemoryFull) as refused:
        g.batch_refused([["1", "jobs:low", "batch"], OutOfMemoryError("OOM")], [taken, None])
    assert refused.value.accepted == (taken,)
    with pytest.raises(ValueError, match="other"):
        g.batch_refused([ValueError("other")], [None])


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-ttl", "allkeys-random"])
def test_every_evicting_policy_is_refused_with_why_and_the_fix(policy: str) -> None:
    with pytest.raises(EvictionPolicyError) as refused:
        check_eviction_policy(MemoryInfo(1, 2, policy, 0), "127.0.0.1:6379")
    text = str(refused.value)
    assert f"Redis at 127.0.0.1:6379 has maxmemory-policy {policy}" in text
    assert "evict the scheduler's own keys, losing queued jobs and leases with no error" in text
    assert "CONFIG SET maxmemory-policy noeviction" in text and "redis.conf" in text


def test_the_guard_refuses_an_evicting_policy_before_any_enqueue_and_checks_it_once_for_drains() -> None:
    client = FakeInfo(used=0, policy="allkeys-lru")
    g, _ = guard(client)
    with pytest.raises(EvictionPolicyError):
        g.check()
    with pytest.raises(EvictionPolicyError):
        g.ensure_policy()
    client.reply["maxmemory_policy"] = "noeviction"
    g.read(fresh=True)
    g.ensure_policy()
    calls = client.calls
    for _ in range(100):
        g.ensure_policy()
    assert client.calls == calls


def test_a_cluster_reading_takes_an_evicting_master_first_then_the_fullest() -> None:
    class Nodes(FakeInfo):
        def info(self, *sections: str, **kw: Any) -> dict[str, Any]:
            return self.reply

    def node(used: int, maxmemory: int, policy: str = "noeviction") -> dict[str, Any]:
        return {"used_memory": used, "maxmemory": maxmemory, "maxmemory_policy": policy, "evicted_keys": 3}

    client = Nodes(0)
    client.reply = {"a:1": node(50, 100), "b:2": node(900, 1000), "c:3": node(10, 100)}
    assert read_memory(client) == MemoryInfo(900, 1000, "noeviction", 3)
    client.reply["c:3"] = node(10, 100, "allkeys-lru")
    assert read_memory(client).policy == "allkeys-lru"


# ------------------------------------------------------------------ config

def test_the_headroom_and_the_warning_are_read_and_default_sensibly() -> None:
    config = parse_config(with_change("redis.memory_headroom", 0.95))
    assert config.redis.memory_headroom == 0.95 and alert_settings(config).memory_warning == 0.8
    assert parse_config(with_change("redis.memory_headroom", "~")).redis.memory_headroom == 0.9


@pytest.mark.parametrize(("path", "value", "where", "what"), [
    ("redis.memory_headroom", 1.2, "redis.memory_headroom", "expected a fraction in (0, 1)"),
    ("redis.memory_headroom", "90%", "redis.memory_headroom", "expected a fraction in (0, 1)"),
    ("alerts.memory_warning", 0, "alerts.memory_warning", "expected a fraction in (0, 1)"),
    ("alerts.memory_warning", 0.95, "alerts.memory_warning", "must be below redis.memory_headroom (0.9)"),
])
def test_bad_memory_fields_are_named(path: str, value: Any, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(with_change(path, value), source="fairness.yaml")
    assert err.value.path == where and what in err.value.message
