"""Ready-made handlers: ``sleep_handlers`` stands in for real work in demos and load drills."""

from __future__ import annotations

import time

from fairness_core.jobs import Lease
from fairness_core.worker import HandlerRegistry


def sleep_for_service_time(lease: Lease) -> None:
    """Pretend to work for ``payload["service_s"]`` seconds (no sleep without that key), so a
    load generator decides each job's service time in the payload it enqueues."""
    payload = lease.payload
    if isinstance(payload, dict) and "service_s" in payload:
        time.sleep(max(0.0, float(payload["service_s"])))


sleep_handlers = HandlerRegistry(fallback=sleep_for_service_time)
