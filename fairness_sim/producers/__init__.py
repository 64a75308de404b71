"""``fairctl loadgen`` into a job system the exporter watches: one producer per ``watch.system``,
each writing that system's own jobs (see base.py)."""

from __future__ import annotations

from importlib import import_module

from exporter.sources import watched
from fairness_core.config import Config

from .base import ClientMissing, WatchedProducer

__all__ = ["ClientMissing", "WatchedProducer", "producer_for"]

# watch.system -> module:class of its producer; imported only when used (each needs its client).
PRODUCERS = {
    "bullmq": "bullmq:BullmqProducer", "celery": "celery:CeleryProducer", "rq": "rq:RqProducer",
    "sidekiq": "sidekiq:SidekiqProducer",
}


def producer_for(config: Config, job: str | None = None) -> WatchedProducer:
    """The producer of ``config.watch.system`` writing jobs of function ``job`` (None: its default);
    raises :class:`ClientMissing` when the system's client is not installed."""
    watch = watched(config)
    if watch is None:
        raise ValueError("a watched producer needs a config with a watch section")
    module, name = PRODUCERS[watch.system].split(":")
    producer: type[WatchedProducer] = getattr(import_module(f"{__name__}.{module}"), name)
    return producer(config, job)
