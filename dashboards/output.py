"""The dashboards output set of ``fairctl generate``: the dashboards' JSON and the Grafana
provisioning files that load them (a datasource and a dashboard provider) for ``compose/``."""

from __future__ import annotations

from pathlib import PurePosixPath

from fairness_core.config import Config
from fairness_core.generated import RenderedSet, header, yaml_text

from .build import DASHBOARDS, TAG, to_json
from .layout import (
    CONTAINER_DASHBOARDS,
    GENERATED_DIR,
    PROVISIONING_DIR,
    dashboard_file,
)

# Where compose/ runs Prometheus; change the URL in the generated file's copy for another stack.
PROMETHEUS_URL = "http://prometheus:9090"




def provisioning(config: Config) -> dict[PurePosixPath, str]:
    """A default Prometheus datasource (the dashboards' ``$datasource`` falls back to the default
    one when provisioned) and a provider reading the dashboards' JSON into a fairctl folder."""
    datasource = {"apiVersion": 1, "datasources": [
        {"name": "Prometheus", "type": "prometheus", "access": "proxy", "url": PROMETHEUS_URL, "isDefault": True}]}
    provider = {"apiVersion": 1, "providers": [
        {"name": TAG, "folder": TAG, "type": "file", "disableDeletion": False, "allowUiUpdates": False,
         "updateIntervalSeconds": 60, "options": {"path": CONTAINER_DASHBOARDS}}]}
    return {PROVISIONING_DIR / "datasources" / f"{TAG}.yml": yaml_text(datasource, header(config)),
            PROVISIONING_DIR / "dashboards" / f"{TAG}.yml": yaml_text(provider, header(config))}


def render(config: Config) -> dict[PurePosixPath, str]:
    """Every file of the set, by path relative to the set's directory."""
    boards = (build(config) for build in DASHBOARDS)
    return {**{dashboard_file(b.uid): to_json(b) for b in boards}, **provisioning(config)}


# The dashboards output set of ``fairctl generate`` (see fairctl/generate_command.py).
DASHBOARDS_OUTPUT = RenderedSet("dashboards", GENERATED_DIR, render)
