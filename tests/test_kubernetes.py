"""deploy/kubernetes/: the committed manifests are objects Kubernetes can take, wired to each other
(the pods mount the ConfigMap that is shipped and read the Secret the README says to create), and
carry exactly the generated rules and dashboards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.config import alert_settings
from alerts.layout import GENERATED_DIR as ALERTS_DIR
from alerts.layout import RULES_FILE
from dashboards.layout import GENERATED_DIR as DASHBOARDS_DIR
from exporter.server import DEFAULT_PORT
from fairness_core import load_config
from fairness_stack import kubernetes as k
from fairness_stack.compose import render as render_compose
from fairness_stack.containers import CONFIG_FILE, image

from .conftest import EXAMPLE_CONFIG, ROOT
from .test_config import with_change

MANIFEST_FILES = sorted((ROOT / k.GENERATED_DIR).glob("*.yaml"))
MANIFESTS: list[dict[str, Any]] = [yaml.safe_load(path.read_text()) for path in MANIFEST_FILES]


def objects(kind: str) -> list[dict[str, Any]]:
    return [m for m in MANIFESTS if m["kind"] == kind]


def the(kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in objects(kind) if m["metadata"]["name"] == name]
    return found


def pod_spec() -> dict[str, Any]:
    return dict(the("Deployment", k.WORKERS)["spec"]["template"]["spec"])


def container(name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec()["containers"] if c["name"] == name]
    return dict(found)


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_every_manifest_is_one_named_kubernetes_object(path: Path) -> None:
    (manifest,) = list(yaml.safe_load_all(path.read_text()))
    assert isinstance(manifest["apiVersion"], str) and isinstance(manifest["kind"], str)
    assert manifest["metadata"]["name"] and manifest["metadata"]["labels"]["app.kubernetes.io/name"] == k.NAME


def test_names_are_unique_per_kind() -> None:
    keys = [(m["kind"], m["metadata"]["name"]) for m in MANIFESTS]
    assert len(keys) == len(set(keys))


def test_the_config_map_holds_the_config_file_as_written() -> None:
    data = the("ConfigMap", k.CONFIG_MAP)["data"]
    assert data == {CONFIG_FILE.name: EXAMPLE_CONFIG.read_text()}


def test_workers_run_with_an_exporter_sidecar_reading_the_shipped_config_map() -> None:
    spec = pod_spec()
    assert [c["name"] for c in spec["containers"]] == ["worker", "exporter"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in spec["containers"]:
        assert c["image"] == image() and c["args"][0] == c["name"]
        args = c["args"]
        mounted = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
        config_dir = str(Path(args[args.index("--config") + 1]).parent)
        assert mounted[config_dir]["configMap"]["name"] == k.CONFIG_MAP
        assert c["securityContext"]["readOnlyRootFilesystem"] and not c["securityContext"]["allowPrivilegeEscalation"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container("exporter")["args"][:3] == ["exporter", "--listen", f"0.0.0.0:{DEFAULT_PORT}"]


def test_the_redis_url_comes_from_the_secret_and_no_manifest_holds_one() -> None:
    for c in pod_spec()["containers"]:
        (env,) = [e for e in c["env"] if e["name"] == "FAIRCTL_REDIS_URL"]
        assert env == {"name": "FAIRCTL_REDIS_URL",
                       "valueFrom": {"secretKeyRef": {"name": k.REDIS_SECRET, "key": k.REDIS_SECRET_KEY}}}
        assert "--redis-url" not in c["args"]
    assert objects("Secret") == []
    readme = (ROOT / "README.md").read_text()
    assert f"kubectl create secret generic {k.REDIS_SECRET} --from-literal={k.REDIS_SECRET_KEY}=" in readme


def test_the_service_monitor_scrapes_the_sidecars_metrics_port_as_the_exporter_job(example_config: Any) -> None:
    deployment = the("Deployment", k.WORKERS)
    service = the("Service", k.EXPORTER)
    monitor = the("ServiceMonitor", k.EXPORTER)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == deployment["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    (container_port,) = container("exporter")["ports"]
    assert port["name"] == port["targetPort"] == container_port["name"] == k.METRICS_PORT_NAME
    assert container_port["containerPort"] == DEFAULT_PORT
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [k.METRICS_PORT_NAME]
    # The operator names the job after this Service label: FairnessExporterDown watches that job.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == alert_settings(example_config).exporter_job


def test_the_prometheus_rule_carries_exactly_the_generated_groups() -> None:
    rule = the("PrometheusRule", k.RULES)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load((ROOT / ALERTS_DIR / RULES_FILE).read_text())["groups"]


def test_a_dashboard_config_map_holds_every_generated_dashboard() -> None:
    shipped: dict[str, str] = {}
    for config_map in objects("ConfigMap"):
        if config_map["metadata"]["labels"].get(k.DASHBOARD_LABEL) == "1":
            assert config_map["metadata"]["annotations"][k.DASHBOARD_FOLDER_ANNOTATION] == k.NAME
            shipped |= config_map["data"]
    generated = {p.name: p.read_text() for p in (ROOT / DASHBOARDS_DIR).glob("*.json")}
    assert generated and shipped == generated
    assert all(json.loads(text)["uid"] for text in shipped.values())


def test_the_manifests_and_the_compose_configs_follow_the_config(tmp_path: Path) -> None:
    changed = tmp_path / "fairness.yaml"
    changed.write_text(yaml.safe_dump(with_change("alerts.exporter_job", "queue-sidecars")))
    config = load_config(changed)
    manifests = {path.name: yaml.safe_load(text) for path, text in k.render(config).items()}
    assert manifests["exporter-service.yaml"]["metadata"]["labels"][k.JOB_LABEL] == "queue-sidecars"
    assert manifests["config.yaml"]["data"][CONFIG_FILE.name] == changed.read_text()
    (prometheus,) = [yaml.safe_load(text) for path, text in render_compose(config).items() if path.stem == "prometheus"]
    assert [job["job_name"] for job in prometheus["scrape_configs"]] == ["queue-sidecars"]
