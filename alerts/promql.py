"""Small PromQL builders: quoting, selectors, and deduplication across exporters.

Several exporters may watch the same Redis (one sidecar per worker pod), so every raw series is
deduplicated with ``max without(instance, pod)`` before anything sums it, and counters are rated
per exporter first (a rate across two exporters' interleaved samples would be nonsense). Every
aggregation keeps unknown labels (``without``, never ``by``) so that one rules file serves several
deployments told apart by job or cluster labels.

A logical queue is judged as one: its shards' series (told apart by ``shard``) are deduplicated
each, then folded with :func:`logical` (depths and rates summed, ages the oldest).
"""

from __future__ import annotations

import json

from exporter.metrics import SHARD, MetricSpec
from fairness_core.config import format_duration

EXPORTER_LABELS = ("instance", "pod")


def quote(text: str) -> str:
    """A PromQL string literal (JSON escapes are valid PromQL escapes)."""
    return json.dumps(text, ensure_ascii=False)


def number(value: float) -> str:
    """A threshold as PromQL reads it, without float noise (0.05, not 0.05000000000000001)."""
    return f"{value:.12g}"


def duration(seconds: float) -> str:
    return format_duration(seconds)


def selector(name: str, **equal: str) -> str:
    """``name{label="value",...}`` with every value quoted."""
    if not equal:
        return name
    return name + "{" + ",".join(f"{label}={quote(value)}" for label, value in equal.items()) + "}"


def excluding(spec: MetricSpec, label: str, value: str) -> str:
    return f"{spec.name}{{{label}!={quote(value)}}}"


def dedup(expr: str) -> str:
    """One value per series whatever the number of exporters serving it."""
    return f"max without ({', '.join(EXPORTER_LABELS)}) ({expr})"


def logical(aggregation: str, expr: str) -> str:
    """``expr`` deduplicated, then folded over the shards of each logical queue with ``aggregation``
    (``sum`` for counts and rates, ``max`` for ages, flags and the config's gauges)."""
    return f"{aggregation} without ({SHARD}) ({dedup(expr)})"


def over_time(function: str, series: str, seconds: float, offset: float | None = None) -> str:
    """``function(series[window])``, optionally ``offset``: the range is per exporter, as it must be."""
    shifted = f" offset {duration(offset)}" if offset else ""
    return f"{function}({series}[{duration(seconds)}]{shifted})"


def deduped_rate(series: str, seconds: float, offset: float | None = None) -> str:
    return dedup(over_time("rate", series, seconds, offset))


def logical_rate(series: str, seconds: float, offset: float | None = None) -> str:
    """The logical queue's rate of a counter: rated per exporter, deduplicated, summed over shards."""
    return logical("sum", over_time("rate", series, seconds, offset))


def over_shards(share: str, served: str, label: str) -> str:
    """A share of the logical queue from each shard's ``share`` by ``label`` (a tenant's part of
    the shard's service), which do not add up: each weighted by what its shard ``served``, summed,
    over what every shard served. A ``label`` value a shard does not list counts 0 there."""
    return (f"sum without ({SHARD}) (\n  {share}\n  * ignoring ({label}) group_left\n  {served}\n)\n"
            f"  / ignoring ({label}) group_left\nsum without ({SHARD}) ({served} > 0)")


def share(part: str, label: str) -> str:
    """``part`` divided by its own total over ``label``: the share of each value of ``label``."""
    return f"({part})\n  / ignoring ({label}) group_left\nsum without ({label}) ({part})"
