"""Which rules a config's exporter can feed: all of them for fairctl's own queues; for a watched
job system (the config's ``watch``), only those whose every series that system supplies.

A rule needs the contract's metrics its expression names, directly or through the recording rules
it reads; the config gauges and the exporter's health series are always served. Rules needing any
other are left out (with the recordings only they read), rather than generated to stay silent, or
to fire on an absent series, forever.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from exporter import metrics as m
from exporter.sources import supplied, watched
from fairness_core.config import Config

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Histogram series carry a suffix on the family's name.
_SUFFIXES = ("_bucket", "_sum", "_count")
_ALWAYS = frozenset(spec.name for spec in (*m.WHERE, *m.FROM_CONFIG, *m.EXPORTER_HEALTH))
_SERIES = {spec.name + suffix: spec.name for spec in m.ALL for suffix in ("", *_SUFFIXES)}


def served_metrics(config: Config) -> frozenset[str] | None:
    """Names of the contract's metrics the config's exporter serves; None: every one."""
    watch = watched(config)
    if watch is None:
        return None
    return supplied(watch.system) | _ALWAYS


def series_metric(name: str) -> str:
    """The contract metric a series name belongs to (a histogram's ``_bucket`` its family's)."""
    return _SERIES.get(name, name)


def needs(expr: str, recordings: Mapping[str, str]) -> frozenset[str]:
    """The contract's metrics ``expr`` reads, through the ``recordings`` (name -> expr) it names."""
    out: set[str] = set()
    for token in set(_NAME.findall(expr)):
        if token in _SERIES:
            out.add(_SERIES[token])
        elif token in recordings:
            out |= needs(recordings[token], recordings)
    return frozenset(out)


def fed(config: Config, exprs: Iterable[str], recordings: Mapping[str, str]) -> bool:
    """Whether every series ``exprs`` read is served under ``config``."""
    served = served_metrics(config)
    return served is None or all(needs(expr, recordings) <= served for expr in exprs)


def paused_served(config: Config) -> bool:
    """Whether the exporter serves whether a class is paused (fairctl's queues) or not at all."""
    served = served_metrics(config)
    return served is None or m.QUEUE_PAUSED.name in served
