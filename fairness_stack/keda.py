"""KEDA ScaledObjects for worker Deployments: autoscaling on the age of the jobs, not only on how
many there are (KEDA's own Redis scalers read a list's length and nothing else).

One ScaledObject per worker Deployment, with two ``prometheus`` triggers that read the generated
recording rules (each raw series deduplicated over the exporter sidecars, then folded over the
queue's shards: one value per class), aggregated to the one number KEDA's scaler takes:

- **age**, ``metricType: Value``: the worst class's oldest age as a fraction of its ``max_age``,
  ``max(age / max_age)`` over the classes the Deployment serves, held to ``kubernetes.age_target``.
  For fairctl's own queues the age is the *quiet tenants'* (``queue_quiet_oldest_message_age_seconds``:
  the oldest due job of a tenant that is neither flooding the class nor held by its own dispatch
  limit), so one flooding tenant, whose backlog weighted-fair queuing leaves that tenant to wait
  for while the others are served, does not scale the fleet; a watched system's trigger reads the
  class's oldest age, as its FIFO queues make every tenant wait behind a flood (:func:`age_series`).
  The HPA's arithmetic for a Value target is ``desired = ceil(current replicas x value / target)``:
  a fleet twice too slow has jobs about twice as old, and doubles. ``AverageValue`` would be wrong here: it divides the
  value by the replica count, so ``desired = ceil(value / target)`` whatever the fleet is now (an
  SLO missed by half on 10 pods would ask for 2).
- **depth**, ``metricType: AverageValue``: the due jobs of those classes, with the target per pod
  ``depth_per_slot x concurrency``. The HPA divides the value by the replicas for AverageValue, so
  it compares depth / (replicas x concurrency), the backlog per worker slot, with
  ``depth_per_slot``: ``desired = ceil(depth / (concurrency x depth_per_slot))``.

The HPA takes the larger of the two. Paused classes are left out of both (their jobs wait by
design; more workers would not run them). ``ignoreNullValues: "false"``: an empty answer (no
exporter scraped, the sidecars gone with their pods) is an error, not a 0, so the HPA holds its
size rather than scaling a fleet it cannot see down to its minimum.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alerts import recording as rec
from alerts.config import alert_settings
from alerts.promql import number, quote
from alerts.supplied import paused_served
from exporter import metrics as m
from exporter.sources import watched
from fairness_core.config import Config, ConfigError

from .kubernetes_config import kubernetes_settings

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
TRIGGER_TYPE = "prometheus"
AGE_TRIGGER, DEPTH_TRIGGER = "age", "depth-per-slot"


@dataclass(frozen=True)
class Trigger:
    """One ``prometheus`` trigger: its name, the PromQL KEDA runs, what the HPA holds it to and how."""

    name: str
    query: str
    threshold: float
    metric_type: str  # "Value" or "AverageValue"

    def manifest(self, server: str) -> dict[str, Any]:
        return {"type": TRIGGER_TYPE, "name": self.name, "metricType": self.metric_type,
                "metadata": {"serverAddress": server, "query": self.query, "threshold": number(self.threshold),
                             "ignoreNullValues": "false"}}


def _matchers(config: Config, classes: Sequence[str]) -> str:
    """The label matchers of the Deployment's queue: the exporters' job, the logical queue
    (``group``) and the classes it serves."""
    names = list(dict.fromkeys(classes))
    queue = (f"{m.QUEUE}={quote(names[0])}" if len(names) == 1
             else f"{m.QUEUE}=~{quote('|'.join(re.escape(name) for name in names))}")
    return f'{{job={quote(alert_settings(config).exporter_job)},{m.GROUP}={quote(config.redis.prefix)},{queue}}}'


def age_series(config: Config) -> str:
    """The recorded age the age trigger reads: the quiet tenants' for fairctl's own queues, else
    the class's oldest. A watched system takes each queue's jobs first in, first out, so a flood's
    backlog is what every tenant behind it waits for (docs/deployment.md), whatever its exporter
    serves of the quiet tenants."""
    served = {x.name for x in rec.recording_rules(config)}
    return rec.QUIET_AGE if rec.QUIET_AGE in served and watched(config) is None else rec.OLDEST_AGE


def _unless_paused(config: Config, expr: str) -> str:
    """``expr`` per class times 1, or 0 while the class is paused (where the exporter can tell)."""
    if not paused_served(config):
        return expr
    return f"{expr}\n  * ({rec.PAUSED} == bool 0)"


def age_query(config: Config, classes: Sequence[str]) -> str:
    """The worst of ``classes``' ages as a fraction of their max_age: one number."""
    ratio = f"(\n    {age_series(config)}{_matchers(config, classes)}\n    / {rec.MAX_AGE}\n  )"
    return f"max(\n  {_unless_paused(config, ratio)}\n)"


def depth_query(config: Config, classes: Sequence[str]) -> str:
    """The due jobs of ``classes`` over every shard: one number."""
    return f"sum(\n  {_unless_paused(config, f'{rec.DEPTH}{_matchers(config, classes)}')}\n)"


def triggers(config: Config, concurrency: int, classes: Sequence[str]) -> tuple[Trigger, ...]:
    settings = kubernetes_settings(config)
    age = Trigger(AGE_TRIGGER, age_query(config, classes), settings.age_target, "Value")
    if not settings.depth_per_slot:
        return (age,)
    return (age, Trigger(DEPTH_TRIGGER, depth_query(config, classes), settings.depth_per_slot * concurrency,
                         "AverageValue"))


def scaled_object(config: Config, deployment: str, concurrency: int, classes: Sequence[str] | None = None,
                  metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ScaledObject of the Deployment ``deployment``, whose pods run ``concurrency`` worker slots
    each and serve ``classes`` (every class of the config by default)."""
    known = [c.name for c in config.classes]
    served = list(classes) if classes is not None else known
    unknown = sorted(set(served) - set(known))
    if unknown or not served:
        raise ConfigError("kubernetes", f"a Deployment serves classes the config names, got {unknown or 'none'}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    settings = kubernetes_settings(config)
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": dict(metadata) if metadata is not None else {"name": deployment},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "minReplicaCount": settings.min_replicas,
            "maxReplicaCount": settings.max_replicas,
            "triggers": [t.manifest(settings.prometheus_url) for t in triggers(config, concurrency, served)],
        },
    }


def explanation(config: Config, concurrency: int) -> str:
    """The comment heading a generated ScaledObject: what each trigger holds the fleet to."""
    s = kubernetes_settings(config)
    age = "quiet tenants' oldest age" if age_series(config) == rec.QUIET_AGE else "oldest age"
    lines = [
        f"KEDA scales the workers between {s.min_replicas} and {s.max_replicas} pods (docs/deployment.md, "
        "\"Autoscaling on age\"):",
        f"- age (Value): the {age} / max_age of the worst class, held to {number(s.age_target)};",
        "  desired pods = ceil(pods now x value / target).",
    ]
    if s.depth_per_slot:
        lines += [f"- depth-per-slot (AverageValue): due jobs, {number(s.depth_per_slot)} per worker slot "
                  f"x {concurrency} slots a pod = {number(s.depth_per_slot * concurrency)} a pod;",
                  "  desired pods = ceil(due jobs / that). The HPA takes the larger."]
    return "\n".join(lines)
