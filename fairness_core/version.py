"""The installed fairctl's version, as the exporter's build info and the container image tag show it."""

from __future__ import annotations

from importlib import metadata


def fairctl_version() -> str:
    try:
        return metadata.version("fairctl")
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"
