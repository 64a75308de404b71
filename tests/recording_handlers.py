"""Test-only handlers for worker subprocesses: optionally sleep ``payload["service_s"]``, then
record ``job_id:attempts`` in the Redis list ``$RECORD_KEY`` before returning (and being acked),
so a test can tell which deliveries ran to completion. ``timed`` records instead the tenant and
the seconds the sleep took, so a test can tell how the worker time was shared; ``intervals`` the
tenant, job id, worker process and when the job started and ended (``time.monotonic``, one clock
for every process on the machine), so a test can tell how many of a tenant's jobs ran at once and
how many started in each second."""

from __future__ import annotations

import os
import threading
import time

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
# An older build's handlers: they know password_reset and nothing else (newsletter is unhandled).
password_reset_only = HandlerRegistry({"password_reset": record})


_runs: list[str] = []  # ``timed`` and ``intervals`` records not pushed yet
_runs_lock = threading.Lock()
_pusher: threading.Thread | None = None  # started by the first record


def _push_runs() -> None:
    """Push the ``timed`` records every 10 ms from a thread of its own, so the round trip is no
    part of the handler the worker times (it would add the same ~0.3 ms to a 5 ms and a 50 ms job)."""
    global _runs
    while True:
        time.sleep(0.01)
        with _runs_lock:
            runs, _runs = _runs, []
        if runs:
            _client.rpush(_key, *runs)


def _push_later(run: str) -> None:
    """Queue a record for :func:`_push_runs`, started by the first one."""
    global _pusher
    with _runs_lock:
        _runs.append(run)
        if _pusher is None:
            _pusher = threading.Thread(target=_push_runs, name="push-runs", daemon=True)
            _pusher.start()


def record_time(lease: Lease) -> None:
    started = time.monotonic()
    sleep_for_service_time(lease)
    _push_later(f"{lease.tenant}\t{time.monotonic() - started}")


def record_interval(lease: Lease) -> None:
    started = time.monotonic()
    sleep_for_service_time(lease)
    _push_later(f"{lease.tenant}\t{lease.job_id}\t{os.getpid()}\t{started}\t{time.monotonic()}")


timed = HandlerRegistry(fallback=record_time)
intervals = HandlerRegistry(fallback=record_interval)
