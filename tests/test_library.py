"""The scheduler's Lua as a Redis function library: loaded on demand, one per config, pruned."""

from __future__ import annotations

import dataclasses

import redis

from fairness_core import Scheduler
from fairness_core.library import KEEP, NAME_PREFIX

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


def test_past_the_limit_loading_prunes_the_others_and_a_pruned_one_loads_again(client: redis.Redis) -> None:
    client.function_flush()
    first = Scheduler(make_config(), client)
    first.enqueue("newsletter", "a")
    others = [reweighted(first, step) for step in range(1, KEEP + 2)]
    for s in others:
        s.enqueue("newsletter", "b")
        assert len(libraries(client)) <= KEEP
    assert first._library.name not in libraries(client)
    assert [lease.tenant for lease in first.pop(1)] == ["a"], "its next call loads it again"
    assert first._library.name in libraries(client)


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
    others = [reweighted(first, step) for step in range(1, KEEP + 1)]
    for s in others:
        s.enqueue("newsletter", "b")
    # Read with this process's own library loaded (one past KEEP), before the other's prune came.
    listed = [[b"library_name", name.encode()] for name in sorted(libraries(client) | {first._library.name})]
    client.function_delete(others[0]._library.name)
    first._library.load(_StaleList(client, listed))
    assert first._library.name in libraries(client) and len(libraries(client)) == 1


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
