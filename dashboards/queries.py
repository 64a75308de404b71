"""PromQL for the panels: every selector carries the dashboard's ``$job`` and ``$group``
variables, so one Prometheus holding several deployments, or several queue groups of one, shows
the one picked, and no job or group is written here.

Raw series are deduplicated across exporters exactly as the rules do (:func:`alerts.promql.dedup`);
recording rules already are, and are used wherever one fits.
"""

from __future__ import annotations

from alerts.promql import dedup, deduped_rate, quote
from exporter import metrics as m
from exporter.metrics import MetricSpec

from .layout import GROUP_VAR

JOB = "job"
JOB_VAR = "job"
TENANT_VAR = "tenant"
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


def gauge(spec: MetricSpec, *matchers: str) -> str:
    """A raw gauge, one value whatever the number of exporters."""
    return dedup(select(spec.name, *matchers))


def rate(series: str, seconds: float, *matchers: str) -> str:
    """A counter's per-second rate, rated per exporter then deduplicated (like the rules)."""
    return deduped_rate(select(series, *matchers), seconds)


def quantile(q: float, bucket_series: str, seconds: float) -> str:
    return f"histogram_quantile({q}, {rate(bucket_series, seconds)})"


def label_values(series: str, label: str, *matchers: str) -> str:
    """A Grafana template variable query listing ``label``'s values."""
    return f"label_values({select(series, *matchers)}, {label})"

