"""Readers of the job systems the exporter can watch, by ``watch.system`` (see base.py).

A system is one module here that names its reader ``SOURCE``: the reader's ``kind`` is the
``watch.system`` value, and its ``has_priorities`` and ``tenant_roots`` are what the ``watch``
section (watching.py) checks a config against. Nothing else lists the systems.
"""

from __future__ import annotations

import functools
import pkgutil
from collections.abc import Mapping
from importlib import import_module
from types import MappingProxyType

from .base import Source
from .watching import QueueRef, WatchConfig, watched

__all__ = ["QueueRef", "Source", "WatchConfig", "reader_of", "source_for", "supplied", "systems", "watched"]


@functools.cache
def systems() -> Mapping[str, type[Source]]:
    """Every system's reader, by ``watch.system`` value in name order: the modules of this
    package that declare a ``SOURCE``, imported now."""
    found: dict[str, type[Source]] = {}
    for info in pkgutil.iter_modules(__path__):
        reader = getattr(import_module(f"{__name__}.{info.name}"), "SOURCE", None)
        if reader is not None:
            if reader.kind in found:
                raise TypeError(f"two readers of watch.system {reader.kind}: {found[reader.kind]} and {reader}")
            found[reader.kind] = reader
    return MappingProxyType(dict(sorted(found.items())))


def reader_of(system: str) -> type[Source]:
    """The reader class of ``system`` (a ``watch.system`` value)."""
    return systems()[system]


def source_for(watch: WatchConfig) -> Source:
    """The reader of ``watch.system``, built for its classes."""
    return reader_of(watch.system)(watch)


def supplied(system: str) -> frozenset[str]:
    """Names of the contract's metrics ``system``'s reader serves."""
    return reader_of(system).supplies
