"""The stack's services, their ports and the Prometheus and Alertmanager configs that wire them.

One description serves the native ``fairctl stack`` (loopback addresses, picked free ports when
the preferred ones are taken, or ports from a chosen base) and the ``compose/`` files (service names, the preferred ports), so
the two stacks cannot drift apart: a test compares them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from alerts.promql import duration
from exporter.server import DEFAULT_PORT

# Service name -> the port it serves on (None: no port). The exporters are two on purpose: the
# generated rules deduplicate series across exporters, and the stack proves it.
REDIS, EXPORTER, EXPORTER_2, WORKERS, WEBHOOK, PROMETHEUS, ALERTMANAGER, GRAFANA, LOADGEN = (
    "redis", "exporter", "exporter-2", "workers", "webhook", "prometheus", "alertmanager", "grafana", "loadgen")
PORTS: Mapping[str, int | None] = {
    REDIS: 6379,
    EXPORTER: DEFAULT_PORT,
    EXPORTER_2: DEFAULT_PORT + 1,
    WORKERS: None,
    WEBHOOK: DEFAULT_PORT + 10,
    PROMETHEUS: 9090,
    ALERTMANAGER: 9093,
}
# Only the compose stack runs these: Grafana (not packaged for Debian) and a standing load
# generator (the native stack's load comes from `fairctl drill` or `fairctl loadgen`).
COMPOSE_ONLY: Mapping[str, int | None] = {GRAFANA: 3000, LOADGEN: None}
EXPORTERS = (EXPORTER, EXPORTER_2)


def listening_ports(base: int | None = None) -> dict[str, int]:
    """The port each service of the native stack listens on: its usual one (:data:`PORTS`), or
    with ``base`` the services in :data:`PORTS` order on ``base``, ``base`` + 1, ... (``fairctl
    stack up --port-base``, for a machine whose own Redis or Prometheus holds the usual ones)."""
    usual = {name: port for name, port in PORTS.items() if port is not None}
    return usual if base is None else {name: base + i for i, name in enumerate(usual)}

WEBHOOK_PATH = "/alerts"
WEBHOOK_RECEIVER = "fairctl-webhook"
RULES_FILE = "fairctl-rules.yml"


def prometheus_config(*, exporters: Sequence[str], alertmanager: str, rule_files: Sequence[str],
                      exporter_job: str, interval: float) -> dict[str, Any]:
    """Scrape the exporters as one job (``alerts.exporter_job``), evaluate ``rule_files`` and send
    alerts to ``alertmanager`` (``host:port``), scraping and evaluating every ``interval`` s."""
    every = duration(interval)
    return {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
        "rule_files": list(rule_files),
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{"job_name": exporter_job, "static_configs": [{"targets": list(exporters)}]}],
    }


def alertmanager_config(webhook_url: str, *, group_wait: float, group_interval: float,
                        repeat_interval: float) -> dict[str, Any]:
    """Route every alert, one notification per alert (grouped by name and labels), to ``webhook_url``."""
    return {
        "route": {
            "receiver": WEBHOOK_RECEIVER,
            "group_by": ["..."],
            "group_wait": duration(group_wait),
            "group_interval": duration(group_interval),
            "repeat_interval": duration(repeat_interval),
        },
        "receivers": [{"name": WEBHOOK_RECEIVER,
                       "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }
