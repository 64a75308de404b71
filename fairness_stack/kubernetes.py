"""The ``kubernetes`` output set of ``fairctl generate``: plain manifests under deploy/kubernetes/
(no Helm) built from the same artifacts as everything else, so ``generate --check`` keeps them
current: the config file as a ConfigMap, a worker Deployment with the exporter as a sidecar, a
Service and ServiceMonitor for it, the generated rules as a PrometheusRule, the generated
dashboards as ConfigMaps for Grafana's dashboard sidecar, and a KEDA ScaledObject that scales the
workers on the age of their jobs (:mod:`fairness_stack.keda`, bounds from the config's
``kubernetes`` section). The workers Deployment leaves ``replicas`` to that autoscaler, as
Kubernetes advises for a scaled Deployment: a ``kubectl apply`` of a manifest that sets it would
scale the fleet back to it until the autoscaler's next sync.

The Redis URL, which may hold a password, is read from a Secret the operator creates
(``REDIS_SECRET``/``REDIS_SECRET_KEY``); no manifest carries it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from alerts.config import alert_settings
from alerts.output import rules_text
from dashboards.output import render as render_dashboards
from exporter.server import DEFAULT_PORT
from exporter.sources import watched
from fairness_core.config import Config, ConfigError
from fairness_core.generated import RenderedSet, header, yaml_text

from . import keda
from .containers import CONFIG_DIR, CONFIG_FILE, SCRAPE_INTERVAL_S, image

GENERATED_DIR = PurePosixPath("deploy/kubernetes")
NAME = "fairctl"
# The exporter's Service and ServiceMonitor share one name, and so does a watched system's
# exporter Deployment (its own workers run elsewhere).
CONFIG_MAP, WORKERS, EXPORTER, RULES = f"{NAME}-config", f"{NAME}-workers", f"{NAME}-exporter", f"{NAME}-rules"
REDIS_SECRET, REDIS_SECRET_KEY = f"{NAME}-redis", "url"
METRICS_PORT_NAME = "metrics"
SCALED_OBJECT_FILE = PurePosixPath("workers-scaledobject.yaml")
# The label a Service carries its Prometheus job name in (ServiceMonitor jobLabel), so `up` has
# job=alerts.exporter_job as FairnessExporterDown expects.
JOB_LABEL = "fairctl-job"
# The Grafana dashboard sidecar's convention (kiwigrid k8s-sidecar, kube-prometheus-stack).
DASHBOARD_LABEL, DASHBOARD_FOLDER_ANNOTATION = "grafana_dashboard", "grafana_folder"
WORKER_CONCURRENCY = 4
# The worker's default --grace of 30 s, plus time to exit.
TERMINATION_GRACE_S = 45
SELECTOR = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "worker"}
EXPORTER_SELECTOR = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "exporter"}


def _metadata(name: str, component: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": component},
            **extra}


def config_map(config: Config) -> dict[str, Any]:
    """The config file as written (comments and all), which is what every container reads."""
    if config.source is None:
        raise ConfigError("", "the Kubernetes ConfigMap embeds the config file: load the config from a file")
    text = Path(config.source).read_text(encoding="utf-8")
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(CONFIG_MAP, "config"),
            "data": {CONFIG_FILE.name: text}}


def _container(name: str, args: list[str]) -> dict[str, Any]:
    """A fairctl container: the config mounted read-only, the Redis URL from the Secret, no privileges."""
    return {
        "name": name, "image": image(), "args": [*args, "--config", str(CONFIG_FILE)],
        "env": [{"name": "FAIRCTL_REDIS_URL",
                 "valueFrom": {"secretKeyRef": {"name": REDIS_SECRET, "key": REDIS_SECRET_KEY}}}],
        "volumeMounts": [{"name": "config", "mountPath": str(CONFIG_DIR), "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }


def _exporter_container() -> dict[str, Any]:
    exporter = _container("exporter", ["exporter", "--listen", f"0.0.0.0:{DEFAULT_PORT}"])
    probe = {"httpGet": {"path": "/", "port": METRICS_PORT_NAME}, "periodSeconds": 10}
    return exporter | {"ports": [{"name": METRICS_PORT_NAME, "containerPort": DEFAULT_PORT}],
                       "readinessProbe": probe, "livenessProbe": probe,
                       "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}}}


def _deployment(name: str, component: str, replicas: int | None, selector: Mapping[str, str],
                containers: list[dict[str, Any]]) -> dict[str, Any]:
    pod = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "containers": containers,
        # The root filesystem is read-only; /tmp is the one writable place.
        "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}}, {"name": "tmp", "emptyDir": {}}],
    }
    spec = {"replicas": replicas} if replicas is not None else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(name, component),
            "spec": {**spec, "selector": {"matchLabels": dict(selector)},
                     "template": {"metadata": {"labels": dict(selector)}, "spec": pod}}}


def deployment() -> dict[str, Any]:
    """Workers with an exporter sidecar in each pod: the generated rules deduplicate the sidecars' series.
    No ``replicas``: the ScaledObject (:func:`scaled_object`) sets them."""
    worker = _container("worker", ["worker", "--handlers", "fairctl.handlers:sleep_handlers",
                                   "--concurrency", str(WORKER_CONCURRENCY)])
    worker["resources"] = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    return _deployment(WORKERS, "worker", None, SELECTOR, [worker, _exporter_container()])


def scaled_object(config: Config) -> dict[str, Any]:
    """KEDA's ScaledObject for the workers Deployment, which serves every class."""
    return keda.scaled_object(config, WORKERS, WORKER_CONCURRENCY, metadata=_metadata(WORKERS, "autoscaling"))


def exporter_deployment() -> dict[str, Any]:
    """A watched system's exporter alone: that system's own workers run its jobs, so no fairctl
    worker is deployed beside it."""
    return _deployment(EXPORTER, "exporter", 1, EXPORTER_SELECTOR, [_exporter_container()])


def service(config: Config) -> dict[str, Any]:
    meta = _metadata(EXPORTER, "exporter")
    meta["labels"][JOB_LABEL] = alert_settings(config).exporter_job
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"selector": dict(SELECTOR if watched(config) is None else EXPORTER_SELECTOR), "ports": [
                {"name": METRICS_PORT_NAME, "port": DEFAULT_PORT, "targetPort": METRICS_PORT_NAME}]}}


def service_monitor() -> dict[str, Any]:
    every = f"{SCRAPE_INTERVAL_S:g}s"
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": _metadata(EXPORTER, "exporter"),
            "spec": {"jobLabel": JOB_LABEL,
                     "selector": {"matchLabels": {"app.kubernetes.io/name": NAME,
                                                  "app.kubernetes.io/component": "exporter"}},
                     "endpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": every}]}}


def prometheus_rule(config: Config) -> dict[str, Any]:
    """Exactly the groups of alerts/generated/fairctl-rules.yml."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": _metadata(RULES, "rules"),
            "spec": {"groups": yaml.safe_load(rules_text(config))["groups"]}}


def dashboard_config_maps(config: Config) -> dict[PurePosixPath, dict[str, Any]]:
    """One ConfigMap per generated dashboard (a ConfigMap holds at most 1 MiB)."""
    out = {}
    for path, text in render_dashboards(config).items():
        if path.suffix == ".json":
            meta = _metadata(f"{NAME}-dashboard-{path.stem.removeprefix(f'{NAME}-')}", "dashboards")
            meta["labels"][DASHBOARD_LABEL] = "1"
            meta["annotations"] = {DASHBOARD_FOLDER_ANNOTATION: NAME}
            out[PurePosixPath(f"dashboard-{path.stem}.yaml")] = {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {path.name: text}}
    return out


def render(config: Config) -> dict[PurePosixPath, str]:
    """Every manifest, one object per file, by path relative to the set's directory."""
    manifests: Mapping[PurePosixPath, dict[str, Any]] = {
        PurePosixPath("config.yaml"): config_map(config),
        **({PurePosixPath("workers.yaml"): deployment()} if watched(config) is None
           else {PurePosixPath("exporter.yaml"): exporter_deployment()}),
        PurePosixPath("exporter-service.yaml"): service(config),
        PurePosixPath("exporter-servicemonitor.yaml"): service_monitor(),
        PurePosixPath("prometheusrule.yaml"): prometheus_rule(config),
        **dashboard_config_maps(config),
    }
    out = {path: yaml_text(manifest, header(config)) for path, manifest in manifests.items()}
    if watched(config) is None:
        # A watched system's workers are the team's own: docs/deployment.md shows their ScaledObject.
        out[SCALED_OBJECT_FILE] = yaml_text(scaled_object(config),
                                            header(config) + "\n" + keda.explanation(config, WORKER_CONCURRENCY))
    return out


KUBERNETES_OUTPUT = RenderedSet("kubernetes", GENERATED_DIR, render)
