"""Handlers of the pickup measurements (``fairctl worker --handlers
benchmarks.pickup_handlers:handlers``): a job stamped with its enqueue time pushes how long after
it it started, in ms, to the list ``$PICKUP_KEY`` on ``$PICKUP_REDIS_URL``; a job with
``service_s`` sleeps that long."""

from __future__ import annotations

import os
import time
from functools import cache

import redis

from fairness_core import Lease
from fairness_core.worker import HandlerRegistry


@cache
def _results() -> redis.Redis:
    return redis.Redis.from_url(os.environ["PICKUP_REDIS_URL"])


def _record(lease: Lease) -> None:
    """Push the pickup of a job stamped ``t`` (ms); sleep ``service_s`` (a stand-in for work)."""
    payload = lease.payload or {}
    if "t" in payload:
        _results().rpush(os.environ["PICKUP_KEY"], time.time() * 1000 - payload["t"])
    time.sleep(payload.get("service_s", 0))


handlers = HandlerRegistry(fallback=_record)
