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

from .load import fill, payload

CHUNK = 10_000


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def grown_by(client: redis.Redis, action: Callable[[], object]) -> int:
    """Bytes of Redis memory ``action`` added."""
    before = used_memory(client)
    action()
    return used_memory(client) - before


def per_job(url: str, prefix: str, tenants: int, jobs_per_tenant: int) -> tuple[float, float]:
    """Bytes per job that ``tenants`` tenants of ``jobs_per_tenant`` queued jobs take under
    ``prefix`` on the redis-server at ``url`` (left queued), and the same payloads in a plain list."""
    client = redis.Redis.from_url(url)
    jobs = tenants * jobs_per_tenant
    ours = grown_by(client, lambda: fill(url, prefix, tenants, jobs_per_tenant))
    return ours / jobs, plain_list(client, "plain-list", jobs) / jobs


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
