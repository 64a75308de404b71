"""Where the generated dashboards go and what Grafana knows them by (links point at the uids)."""

from __future__ import annotations

from pathlib import PurePosixPath

from alerts.layout import GROUP_VAR, OVERVIEW_UID, QUEUE_VAR, RUNBOOKS_UID

__all__ = ["GROUP_VAR", "OVERVIEW_UID", "QUEUE_VAR", "RUNBOOKS_UID", "TENANT_UID"]

GENERATED_DIR = PurePosixPath("dashboards/generated")
PROVISIONING_DIR = PurePosixPath("provisioning")
# The directory the dashboard provider reads inside the Grafana container (compose/ mounts the JSON there).
CONTAINER_DASHBOARDS = "/var/lib/grafana/dashboards/fairctl"
TENANT_UID = "fairctl-tenant"


def dashboard_file(uid: str) -> PurePosixPath:
    return PurePosixPath(f"{uid}.json")
