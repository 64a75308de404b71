"""PromQL for the panels: every selector carries the dashboard's ``$job`` and ``$group``
variables, so one Prometheus holding several deployments, or several queue groups of one, shows
the one picked, and no job or group is written here.

A panel shows the logical queue unless it says it is per shard. Raw series are deduplicated across
exporters and folded over the queue's shards exactly as the rules do (:func:`alerts.promql.logical`);
recording rules already are, and are used wherever one fits. The per-shard queries keep ``shard``
(the ``$shard`` variable picks which) and fold the classes instead, one series per shard.
"""

from __future__ import annotations

from alerts.promql import dedup, deduped_rate, logical, logical_rate, over_shards, over_time, quote
from exporter import metrics as m
from exporter.metrics import MetricSpec

from .layout import GROUP_VAR

JOB = "job"
JOB_VAR = "job"
TENANT_VAR = "tenant"
ACCOUNT_VAR = "account"
SHARD_VAR = "shard"
DATASOURCE_VAR = "datasource"
# Prometheus's own series of firing/pending alerts: the only name here not from the contract.
ALERTS = "ALERTS"


def var(name: str) -> str:
    return f"${name}"


def eq(label: str, value: str) -> str:
    return f"{label}={quote(value)}"


def re(label: str, value: str) -> str:
    """A regex matcher: multi-value and "All" template variables expand to regexes."""
    return f"{label}=~{quote(value)}"


def ne(label: str, value: str) -> str:
    return f"{label}!={quote(value)}"


def select(name: str, *matchers: str) -> str:
    """``name{job=~"$job", group=~"$group", matchers...}``: regex matches so that "All" values work."""
    return name + "{" + ",".join((f"{JOB}=~{quote(var(JOB_VAR))}", f"{m.GROUP}=~{quote(var(GROUP_VAR))}",
                                  *matchers)) + "}"


def gauge(aggregation: str, spec: MetricSpec, *matchers: str) -> str:
    """A raw gauge of the logical queue: one value whatever the number of exporters, folded over
    the shards with ``aggregation`` (``sum`` for counts, ``max`` for ages and flags)."""
    return logical(aggregation, select(spec.name, *matchers))


def rate(series: str, seconds: float, *matchers: str) -> str:
    """A counter's per-second rate of the logical queue: rated per exporter, deduplicated and
    summed over the shards (like the rules)."""
    return logical_rate(select(series, *matchers), seconds)


def quantile(q: float, bucket_series: str, seconds: float, *matchers: str) -> str:
    """A histogram's quantile over the logical queue (the shards' buckets add up)."""
    return f"histogram_quantile({q}, {rate(bucket_series, seconds, *matchers)})"


def served(counter: MetricSpec, seconds: float, *matchers: str) -> str:
    """What each shard served of each class: ``counter``'s rate over ``seconds`` (the exporter's
    window), deduplicated, shard and class kept."""
    return deduped_rate(select(counter.name, *matchers), seconds)


def top_share(series: str, label: str, weight: str, *matchers: str) -> str:
    """The logical queue's share of each ``label`` value from ``series``, the top-k shares each
    shard serves of its own service, which do not add up: each weighted by ``weight`` (what that
    shard served of what is shared out), as the recorded per-class tenant shares are."""
    return over_shards(dedup(select(series, *matchers)), weight, label)


def tenant_share(counter: MetricSpec, seconds: float, *matchers: str) -> str:
    """The top tenants' share of the logical queue's service (``counter`` over ``seconds``, the
    exporter's window), weighted by what each shard served of every class."""
    return top_share(m.TENANT_SHARE.name, m.TENANT, f"sum without ({m.QUEUE}) ({served(counter, seconds)})", *matchers)


def account_share(counter: MetricSpec, seconds: float, *matchers: str) -> str:
    """Each class's top accounts' share of its service over every shard (every key of an account
    together), weighted by what each shard served of the class."""
    return top_share(m.QUEUE_ACCOUNT_SHARE.name, m.ACCOUNT, served(counter, seconds), *matchers)


def account_tenant_share(counter: MetricSpec, seconds: float, *matchers: str) -> str:
    """The top accounts' busiest keys' share of their account's service in each class over every
    shard, weighted by what each shard served of the account: its share times the class's, each
    exporter's multiplied, then deduplicated (an aggregation: a bracketed operand right after
    ``group_left`` would parse as its label list)."""
    account_served = dedup(f"{select(m.QUEUE_ACCOUNT_SHARE.name, *matchers)} * ignoring ({m.ACCOUNT}) group_left "
                           f"{over_time('rate', select(counter.name), seconds)}")
    return top_share(m.QUEUE_ACCOUNT_TENANT_SHARE.name, m.TENANT, account_served, *matchers)


def shard_gauge(aggregation: str, spec: MetricSpec, *matchers: str) -> str:
    """A raw gauge of each shard ``$shard`` picks, folded over the classes with ``aggregation``."""
    return per_shard(aggregation, dedup(shard_select(spec.name, *matchers)))


def shard_rate(series: str, seconds: float, *matchers: str) -> str:
    """A counter's per-second rate on each shard ``$shard`` picks, summed over the classes."""
    return per_shard("sum", deduped_rate(shard_select(series, *matchers), seconds))


def shard_select(name: str, *matchers: str) -> str:
    """:func:`select` of the shards ``$shard`` picks."""
    return select(name, re(m.SHARD, var(SHARD_VAR)), *matchers)


def per_shard(aggregation: str, expr: str) -> str:
    """``expr``, which keeps ``shard``, folded over the classes: one series per shard, to lay the
    shards side by side."""
    return f"{aggregation} without ({m.QUEUE}) ({expr})"


def label_values(series: str, label: str, *matchers: str) -> str:
    """A Grafana template variable query listing ``label``'s values."""
    return f"label_values({select(series, *matchers)}, {label})"
