"""What the container deployments (``compose/`` and ``deploy/kubernetes/``) agree on: where the
config is mounted, the image's name, and how often Prometheus scrapes and evaluates.

Kept apart from ``fairness_stack.configs`` because the native stack runs on the host, not in containers.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fairness_core.version import fairctl_version

# The config file inside every fairctl container (a bind mount in compose, a ConfigMap in Kubernetes).
CONFIG_DIR = PurePosixPath("/etc/fairctl")
CONFIG_FILE = CONFIG_DIR / "fairness.yaml"
# Real time, not the drill's compressed time: the rules' rate windows are minutes long.
SCRAPE_INTERVAL_S = 15.0


# The Dockerfile's targets: what each role's image installs.
RUNTIME, OPERATOR = "runtime", "operator"
IMAGE_NAMES = {RUNTIME: "fairctl", OPERATOR: "fairctl-operator"}


def image(target: str = RUNTIME) -> str:
    """The image the repository's Dockerfile builds for ``target``, tagged with the installed
    version: the worker and the exporter run ``runtime``, the operator's tools ``operator``."""
    return f"{IMAGE_NAMES[target]}:{fairctl_version()}"
