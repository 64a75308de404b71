"""Handlers of the idle-pickup measurement (``fairctl worker --handlers
benchmarks.pickup_handlers:handlers``): each job pushes how long after its enqueue it started, in
ms, to the list ``$PICKUP_KEY`` on ``$PICKUP_REDIS_URL``."""

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
    _results().rpush(os.environ["PICKUP_KEY"], time.time() * 1000 - lease.payload["t"])


handlers = HandlerRegistry(fallback=_record)
