"""The scheduler's Lua as a Redis function library: loaded on demand, one per config, pruned
once nobody has loaded it for an hour."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import redis

from fairness_core import parse_config
from fairness_core.scheduler import Scheduler
from fairness_core.config_dump import config_to_data
from fairness_core.library import EXPIRE_MS, NAME_PREFIX, REFRESH_S, STAMP, stamps
from fairness_core.queue import Queue

from .conftest import make_config


def libraries(client: redis.Redis) -> set[str]:
    return {entry[1].decode() for entry in client.function_list(library=NAME_PREFIX + "*")}


def reweighted(s: Scheduler, step: int) -> Scheduler:
    """Another group whose config differs from ``s``'s by its weights: another library."""
    config = make_config()
    classes = tuple(dataclasses.replace(c, weight=c.weight + step) for c in config.classes)
    return Scheduler(dataclasses.replace(config, classes=classes), s.client)


def test_one_library_per_config_loaded_by_the_first_call(client: redis.Redis) -> None:
    client.function_flush()
    first = Scheduler(make_config(), client)
    assert libraries(client) == set()
    first.enqueue("newsletter", "a")
    assert libraries(client) == {first._library.name}
    same = Scheduler(dataclasses.replace(first.config), client)
    assert same.pop(1)[0].tenant == "a"
    assert libraries(client) == {first._library.name}, "the same config runs the same library"
    other = reweighted(first, 1)
    other.enqueue("newsletter", "b")
    assert libraries(client) == {first._library.name, other._library.name}


def test_any_number_of_configs_on_one_redis_keep_their_libraries_and_never_reload(client: redis.Redis) -> None:
    """Twelve groups of twelve configs: twelve libraries stay loaded side by side, and once each
    is loaded no call loads one again (no process prunes another's)."""
    client.function_flush()
    first = Scheduler(make_config(), client)
    groups = [first, *(reweighted(first, step) for step in range(1, 12))]
    for s in groups:
        s.enqueue("newsletter", "a")
    assert libraries(client) == {s._library.name for s in groups} and len(libraries(client)) == 12
    client.config_resetstat()
    for _ in range(3):
        for s in groups:
            s.enqueue("newsletter", "b")
            assert s.pop(1)
    stats = client.info("commandstats")
    assert "cmdstat_function|load" not in stats and stats["cmdstat_fcall"]["failed_calls"] == 0


def old_stamp(s: Scheduler, ms: int) -> None:
    """Load ``s``'s library as if last loaded at Redis time ``ms``."""
    s.client.function_load(s._library.code(ms), replace=True)


def test_a_load_prunes_only_the_libraries_nobody_loaded_for_an_hour(client: redis.Redis) -> None:
    client.function_flush()
    first = Scheduler(make_config(), client)
    recent, expired, unstamped = (reweighted(first, step) for step in (1, 2, 3))
    now_ms = int(client.time()[0]) * 1000
    old_stamp(recent, now_ms - EXPIRE_MS + 60_000)
    old_stamp(expired, now_ms - EXPIRE_MS - 1000)
    client.function_load(unstamped._library.code(0).replace(STAMP, "an older release, "), replace=True)
    first.enqueue("newsletter", "a")  # loads its own library, and prunes
    assert libraries(client) == {first._library.name, recent._library.name}
    assert expired.pop(1) == [] and expired._library.name in libraries(client), "a pruned one loads at its next call"


def test_a_process_stamps_its_library_again_before_it_could_expire(client: redis.Redis,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """At its first call, and every REFRESH_S after, a process whose library's stamp is older than
    REFRESH_S loads it again; a fresh stamp costs no load."""
    client.function_flush()
    s = Scheduler(make_config(), client)
    s.enqueue("newsletter", "a")
    now_ms = int(client.time()[0]) * 1000
    old_stamp(s, now_ms - int(REFRESH_S * 1000) - 1000)
    s.enqueue("newsletter", "a")
    assert stamps(client)[s._library.name] < now_ms, "not due yet: no check"
    monkeypatch.setattr(s._library, "_due", 0.0)
    s.enqueue("newsletter", "a")
    assert stamps(client)[s._library.name] >= now_ms
    client.config_resetstat()
    monkeypatch.setattr(s._library, "_due", 0.0)
    s.enqueue("newsletter", "a")
    assert "cmdstat_function|load" not in client.info("commandstats"), "a fresh stamp is not loaded again"


class _RefusesLoads:
    """A Redis over maxmemory: FUNCTION LOAD is refused (it may allocate), calls still run."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def function_load(self, *_: object, **__: object) -> None:
        raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)


def test_a_refused_stamp_never_fails_the_call_that_was_due_to_check(client: redis.Redis,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    client.function_flush()
    s = Scheduler(make_config(), client)
    s.enqueue("newsletter", "a")
    old_stamp(s, 1)
    s._library._due = 0.0
    reply = s._library.call(client.execute_command, lambda: _RefusesLoads(client), s._library.drain, s._declared,
                            s._argv("snapshot"))
    assert reply is not None
    assert "could not stamp the scheduler's library" in caplog.text and s._library._due > 0


def test_pipelined_enqueues_load_a_missing_library(client: redis.Redis) -> None:
    s = Scheduler(make_config(), client)
    s.enqueue("newsletter", "a")
    client.function_flush()
    queued = s.submit_many("newsletter", "b", [{"n": n} for n in range(5)])
    assert all(job is not None for job in queued)
    assert s.snapshot().classes["jobs:low"].depth == 6


class _StaleList:
    """A Redis whose FUNCTION LIST was read before another process pruned: it lists libraries
    that are gone by the time this process deletes them."""

    def __init__(self, client: redis.Redis, listed: list[object]) -> None:
        self.client, self.listed = client, listed

    def function_list(self, **_: object) -> list[object]:
        return self.listed

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)


def test_two_processes_pruning_at_once_never_fail_a_load(client: redis.Redis) -> None:
    client.function_flush()
    first = Scheduler(make_config(), client)
    others = [reweighted(first, step) for step in range(1, 4)]
    for s in others:
        old_stamp(s, 1)
    # Read before the other process's prune came: it lists libraries that are gone by then.
    listed = [[b"library_name", name.encode()] for name in sorted(libraries(client))]
    client.function_delete(others[0]._library.name)
    first._library.load(_StaleList(client, listed))
    assert libraries(client) == {first._library.name}


def test_a_call_whose_library_is_pruned_under_it_loads_it_again(client: redis.Redis) -> None:
    s = Scheduler(make_config(), client)
    s.enqueue("newsletter", "a")
    calls = []

    def send(*command: object) -> object:  # another process prunes this library before each of two calls
        calls.append(command[0])
        if len(calls) <= 2:
            client.function_delete(s._library.name)
        return client.execute_command(*command)

    reply = s._library.call(send, lambda: client, s._library.drain, s._declared, s._argv("snapshot"))
    assert reply is not None and len(calls) == 3


def test_the_shards_of_a_sharded_queue_share_one_library(client: redis.Redis) -> None:
    """Twelve shards of one config on one Redis run one library: the group's name is not part
    of the code, so a queue of any number of shards loads one."""
    client.function_flush()
    config = make_config()
    data = config_to_data(config)
    data["redis"].update(url=config.redis.url, shards=12, shard_hand=2)
    queue = Queue(parse_config(data), client)
    for n in range(40):
        queue.enqueue("newsletter", f"tenant-{n}")
    popped = [lease for _ in range(40) for lease in queue.pop(1)]
    assert len(popped) == 40 and len({queue.locate(lease.job_id)[0] for lease in popped}) > 6
    names = {shard._library.name for shard in queue.groups()}
    assert len(names) == 1 and libraries(client) == names
    assert len({shard.settings.fingerprint for shard in queue.groups()}) == 1


def test_a_group_an_earlier_release_fingerprinted_runs_on_without_a_warning(
        client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """An earlier release counted the group's name in the fingerprint: a process of this one
    runs the stored fingerprint, says nothing (the config is the same), and the group's next
    apply stores the fingerprint every group of that config shares."""
    first = Scheduler(make_config(), client)
    first.enqueue("newsletter", "a")
    shared = first.settings.fingerprint
    client.hset(first.keys.config, "fingerprint", "0123456789abcdef")  # as the earlier release stored it
    caplog.clear()
    later = Scheduler(first.file_config, client)
    assert [lease.tenant for lease in later.pop(1)] == ["a"]
    assert later.settings.fingerprint == "0123456789abcdef"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert later.apply(first.file_config).fingerprint == shared
    assert later.enqueue("newsletter", "b") and later.settings.fingerprint == shared
