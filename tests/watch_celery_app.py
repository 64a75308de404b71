"""A minimal Celery app for tests/test_watch_celery.py: a real worker consumes from the test's
redis-server (``$WATCH_CELERY_BROKER``), so the reader is checked against kombu's own layout."""

from __future__ import annotations

import os
import time

from celery import Celery

from fairness_sim.watched_jobs import register

BROKER_VARIABLE = "WATCH_CELERY_BROKER"

app = Celery("watch_celery_app", broker=os.environ.get(BROKER_VARIABLE, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
)


@app.task(name="watch.work")
def work(ms: float, tenant_id: str | None = None) -> None:
    """A job of ``ms`` milliseconds for ``tenant_id``."""
    time.sleep(ms / 1000)


register(app)  # fairctl loadgen's sleep job, as docs/watching.md has a team add it
