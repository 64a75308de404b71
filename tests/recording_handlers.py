"""Test-only handlers for worker subprocesses: optionally sleep ``payload["service_s"]``, then
record ``job_id:attempts`` in the Redis list ``$RECORD_KEY`` before returning (and being acked),
so a test can tell which deliveries ran to completion."""

from __future__ import annotations

import os

from fairctl.handlers import sleep_for_service_time
from fairness_core import redis_client
from fairness_core.jobs import Lease
from fairness_core.worker import HandlerRegistry

_client = redis_client(os.environ["RECORD_REDIS_URL"])
_key = os.environ["RECORD_KEY"]


def record(lease: Lease) -> None:
    sleep_for_service_time(lease)
    _client.rpush(_key, f"{lease.job_id}:{lease.attempts}")


handlers = HandlerRegistry(fallback=record)
