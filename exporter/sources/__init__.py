"""Readers of the job systems the exporter can watch, by ``watch.system`` (see base.py)."""

from __future__ import annotations

from importlib import import_module

from fairness_core.config import WatchConfig

from .base import Source

# watch.system -> module:class of its reader; imported only when configured.
READERS = {
    "bullmq": "bullmq:BullmqSource", "celery": "celery:CelerySource", "rq": "rq:RqSource",
    "sidekiq": "sidekiq:SidekiqSource",
}


def reader_of(system: str) -> type[Source]:
    """The reader class of ``system`` (a ``watch.system`` value), its module imported now."""
    module, name = READERS[system].split(":")
    reader: type[Source] = getattr(import_module(f"{__name__}.{module}"), name)
    return reader


def source_for(watch: WatchConfig) -> Source:
    """The reader of ``watch.system``, built for its classes."""
    return reader_of(watch.system)(watch)


def supplied(system: str) -> frozenset[str]:
    """Names of the contract's metrics ``system``'s reader serves."""
    return reader_of(system).supplies
