"""Redis memory per queued job, against the same payloads in one plain list.

Measured as ``used_memory`` deltas on a redis-server holding nothing else that changes meanwhile:
the scheduler's figure includes everything a queued job and its tenant cost (envelope header,
tenant sub-queue keys, the per-class sorted sets of tags, heads and backlog, the cost hash of the
tenants off the default tier).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import redis

from .load import payload

CHUNK = 10_000


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def grown_by(client: redis.Redis, action: Callable[[], object]) -> int:
    """Bytes of Redis memory ``action`` added."""
    before = used_memory(client)
    action()
    return used_memory(client) - before


def plain_list(client: redis.Redis, key: str, jobs: int) -> int:
    """Bytes that ``jobs`` payloads take in one plain list (the list is deleted afterwards)."""
    def push() -> None:
        for first in range(0, jobs, CHUNK):
            client.rpush(key, *(json.dumps(payload(n), separators=(",", ":"))
                                for n in range(first, min(jobs, first + CHUNK))))
    try:
        return grown_by(client, push)
    finally:
        client.delete(key)
