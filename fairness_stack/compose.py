"""The ``compose`` output set of ``fairctl generate``: the Prometheus and Alertmanager configs that
``compose/docker-compose.yml`` mounts, rendered by ``fairness_stack.configs`` from the services' names and
preferred ports, so the compose stack and the native ``fairctl stack`` cannot drift apart.

The rules file is not copied here: compose mounts ``alerts/generated/`` itself.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from alerts.config import alert_settings
from fairness_core.config import Config
from fairness_core.generated import RenderedSet, header, yaml_text

from . import configs as s
from .containers import SCRAPE_INTERVAL_S

GENERATED_DIR = PurePosixPath("compose/generated")
PROMETHEUS_FILE = PurePosixPath("prometheus.yml")
ALERTMANAGER_FILE = PurePosixPath("alertmanager.yml")
# Prometheus resolves rule_files against its config file's directory (/etc/prometheus in the
# container); docker-compose.yml mounts the generated rules file there.
RULES_PATH = PurePosixPath("rules") / s.RULES_FILE
# Alertmanager's own defaults (30s, 5m, 4h), shortened so a demo's alerts arrive while you watch.
GROUP_WAIT_S, GROUP_INTERVAL_S, REPEAT_INTERVAL_S = 10.0, 60.0, 3600.0


def address(service: str) -> str:
    """``service:port`` as the other containers reach it on the compose network."""
    return f"{service}:{s.PORTS[service]}"


def render(config: Config) -> dict[PurePosixPath, str]:
    """Every file of the set, by path relative to the set's directory."""
    prometheus = s.prometheus_config(
        exporters=[address(e) for e in s.EXPORTERS], alertmanager=address(s.ALERTMANAGER),
        rule_files=[str(RULES_PATH)], exporter_job=alert_settings(config).exporter_job, interval=SCRAPE_INTERVAL_S)
    alertmanager = s.alertmanager_config(
        f"http://{address(s.WEBHOOK)}{s.WEBHOOK_PATH}", group_wait=GROUP_WAIT_S,
        group_interval=GROUP_INTERVAL_S, repeat_interval=REPEAT_INTERVAL_S)
    return {PROMETHEUS_FILE: yaml_text(prometheus, header(config)), ALERTMANAGER_FILE: yaml_text(alertmanager, header(config))}


COMPOSE_OUTPUT = RenderedSet("compose", GENERATED_DIR, render)
