"""The sleep job ``fairctl loadgen`` queues into RQ and Celery by default, for a team's own workers
to run: it sleeps for the job's ``service_s``, as a fairctl worker's sleep handler does, whatever
else the job carries (its tenant, where ``watch.tenant`` put it). BullMQ and Sidekiq workers define
theirs in JavaScript and Ruby (docs/watching.md)."""

from __future__ import annotations

import time
from typing import Any

CELERY_TASK = "fairctl.sleep"  # the Celery task name :func:`register` gives it


def sleep(*args: Any, service_s: float = 0.0, **kwargs: Any) -> None:
    """Sleep ``service_s`` seconds (RQ runs it as ``fairness_sim.watched_jobs.sleep``)."""
    time.sleep(max(0.0, float(service_s)))


def register(app: Any) -> Any:
    """Register :func:`sleep` as the Celery task ``fairctl.sleep`` on ``app`` (a ``celery.Celery``),
    so a worker of that app runs what ``fairctl loadgen`` queues; returns the task."""
    return app.task(name=CELERY_TASK)(sleep)
