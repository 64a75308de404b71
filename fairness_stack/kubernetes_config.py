"""The config's ``kubernetes`` section: how the workers Deployment that ``fairctl generate`` writes
is autoscaled by KEDA (:mod:`fairness_stack.keda`), parsed and checked here and read with
:func:`kubernetes_settings` (fairness_core.config_sections declares it to the core).

Like ``alerts.config``, nothing here imports more than the core: a producer loading a config with
this section loads this module and nothing heavier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairness_core.config import Config
from fairness_core.config_sections import Section
from fairness_core.yaml_reader import ConfigError, Reader, base_url, int_between

# Where kube-prometheus-stack's Prometheus answers inside the cluster: the Prometheus Operator's
# governing Service ``prometheus-operated``, in the namespace the stack usually lives in.
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
MAX_REPLICAS_LIMIT = 10_000


@dataclass(frozen=True)
class KubernetesConfig:
    """The ScaledObject of the workers Deployment (see docs/deployment.md, "Autoscaling on age").

    ``min_replicas`` is at least 1: each worker pod carries the exporter as a sidecar, so a fleet
    scaled to zero would take the metrics it is scaled on with it and never come back.
    ``age_target``: the quiet tenants' oldest age, as a fraction of its class's max_age, that the
    age trigger holds the worst class to. ``depth_per_slot``: due jobs per worker slot the depth
    trigger holds the fleet to; 0 leaves the depth trigger out (scale on age alone).
    """

    min_replicas: int = 2
    max_replicas: int = 10
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    age_target: float = 0.5
    depth_per_slot: float = 50.0


def _age_target(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(path, f"expected a fraction of max_age in (0, 1] (0.5: scale up when the quiet tenants' "
                                f"oldest job is half its class's max_age), got {value!r}")
    return float(value)


def _depth_per_slot(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10**9:
        raise ConfigError(path, f"expected due jobs per worker slot, a number >= 0 (0: no depth trigger), got {value!r}")
    return float(value)


def _parse(r: Reader | None, core: Config) -> KubernetesConfig:
    if r is None:
        return KubernetesConfig()
    d = KubernetesConfig
    out = KubernetesConfig(
        min_replicas=r.get("min_replicas", d.min_replicas, int_between(1, MAX_REPLICAS_LIMIT)),
        max_replicas=r.get("max_replicas", d.max_replicas, int_between(1, MAX_REPLICAS_LIMIT)),
        prometheus_url=r.get("prometheus_url", d.prometheus_url, base_url(DEFAULT_PROMETHEUS_URL)),
        age_target=r.get("age_target", d.age_target, _age_target),
        depth_per_slot=r.get("depth_per_slot", d.depth_per_slot, _depth_per_slot),
    )
    if out.min_replicas > out.max_replicas:
        key = "min_replicas" if "min_replicas" in r.data else "max_replicas"
        raise r.error(key, f"kubernetes.min_replicas ({out.min_replicas}) must be at most kubernetes.max_replicas "
                           f"({out.max_replicas})")
    return out


def _dump(k: KubernetesConfig) -> dict[str, Any]:
    """Only what differs from the defaults: a config without the section stores (and fingerprints)
    as it did before the section existed."""
    default = KubernetesConfig()
    return {name: getattr(k, name) for name in ("min_replicas", "max_replicas", "prometheus_url", "age_target",
                                                 "depth_per_slot") if getattr(k, name) != getattr(default, name)}


SECTION = Section(name="kubernetes", default=KubernetesConfig(), parse=_parse, dump=_dump)


def kubernetes_settings(config: Config) -> KubernetesConfig:
    """The config's ``kubernetes`` section (its defaults where the file leaves it out)."""
    settings = config.section(SECTION.name)
    assert isinstance(settings, KubernetesConfig)
    return settings
