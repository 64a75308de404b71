"""The KEDA ScaledObjects fairctl writes (deploy/kubernetes/) and documents (docs/deployment.md) are
objects the Kubernetes API server and KEDA take: validated against KEDA's own CRD schema, vendored
in tests/schemas/keda/, as strictly as the API server validates (kubectl's default strict field
validation refuses unknown fields wherever the schema does not preserve them), and their trigger
metadata against the keys KEDA's prometheus scaler reads. The config's ``kubernetes`` section is
checked like ``alerts``."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

from alerts import recording as rec
from alerts.output import rules_text
from fairness_core import load_config
from fairness_core.config import Config, ConfigError, parse_config
from fairness_core.config_dump import config_to_data
from fairness_core.config_store import fingerprint
from fairness_stack import keda
from fairness_stack import kubernetes as k
from fairness_stack.kubernetes_config import DEFAULT_PROMETHEUS_URL, KubernetesConfig, kubernetes_settings

from .conftest import EXAMPLE_CONFIG, ROOT
from .test_config import with_change

SCHEMAS = Path(__file__).resolve().parent / "schemas" / "keda"
CRD: dict[str, Any] = yaml.safe_load((SCHEMAS / "keda.sh_scaledobjects.yaml").read_text())
SCALER_SOURCE = (SCHEMAS / "prometheus_scaler.go").read_text()

# The CEL rules (x-kubernetes-validations) of the CRD, which jsonschema does not evaluate, each
# written out in Python. A rule the vendored CRD gains fails the validation until it is added here.
CEL_RULES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : 100)":
        lambda s: "minReplicaCount" not in s or s["minReplicaCount"] <= s.get("maxReplicaCount", 100),
}
# The part of ObjectMeta a generated manifest may set, as the API server checks it (the CRD's
# schema leaves ``metadata`` to it).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
OBJECT_META = {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
# strconv.ParseBool, which KEDA reads a bool parameter with.
GO_BOOLS = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the API server applies it: an object that lists its ``properties`` takes no
    other field unless it says so (``additionalProperties``, ``x-kubernetes-preserve-unknown-fields``)."""
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {name: strict(sub) for name, sub in out["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("additionalProperties", "items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [strict(sub) for sub in out[key]]
    return out


def cel_rules(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every CEL rule of ``schema`` with the property path of the object it judges (none sits under
    an array in this CRD; one that does is refused rather than skipped)."""
    for rule in schema.get("x-kubernetes-validations", ()):
        yield path, rule["rule"]
    for name, sub in schema.get("properties", {}).items():
        yield from cel_rules(sub, (*path, name))
    items = schema.get("items", {})
    assert "x-kubernetes-validations" not in yaml.safe_dump(items), f"a CEL rule under the array {path}: judge it"


def version_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of the CRD version ``api_version`` names, after checking the group, the
    version (served) and the kind against the CRD."""
    group, _, version = api_version.rpartition("/")
    spec = CRD["spec"]
    assert group == spec["group"], f"apiVersion {api_version}: the CRD's group is {spec['group']}"
    assert kind == spec["names"]["kind"], f"kind {kind}: the CRD defines {spec['names']['kind']}"
    served = {v["name"]: v for v in spec["versions"] if v["served"]}
    assert version in served, f"apiVersion {api_version}: the CRD serves {sorted(served)}"
    return served[version]["schema"]["openAPIV3Schema"]


def scaler_parameters() -> dict[str, dict[str, Any]]:
    """KEDA's prometheus scaler's trigger metadata, from the ``keda:`` tags of ``prometheusMetadata``
    in its source: name -> {type, required}."""
    struct = re.search(r"type prometheusMetadata struct \{(.*?)\n\}", SCALER_SOURCE, re.DOTALL)
    assert struct, "prometheusMetadata not found in the vendored scaler"
    out = {}
    for go_type, tag in re.findall(r"^\s*\w+\s+(\S+)\s+`keda:\"([^\"]*)\"`", struct.group(1), re.MULTILINE):
        parts = dict((p.split("=", 1) + [""])[:2] for p in (x.strip() for x in tag.split(",")))
        if "name" in parts and "triggerMetadata" in parts.get("order", "").split(";"):
            out[parts["name"]] = {"type": go_type, "required": "optional" not in parts and "default" not in parts}
    return out


def _trigger_problems(index: int, trigger: dict[str, Any], metric_types: list[str]) -> list[str]:
    """What KEDA would refuse in one trigger that the CRD lets through: its type (only prometheus is
    generated), its metricType, and its metadata's keys and values against the scaler's tags."""
    where = f"spec.triggers[{index}]"
    if trigger.get("type") != keda.TRIGGER_TYPE:
        return [f"{where}.type: {trigger.get('type')!r}, expected {keda.TRIGGER_TYPE}"]
    problems = []
    if trigger.get("metricType", "AverageValue") not in metric_types:
        problems.append(f"{where}.metricType: {trigger['metricType']!r}, KEDA's scalers take {metric_types}")
    params, metadata = scaler_parameters(), trigger.get("metadata", {})
    for name in sorted(set(metadata) - set(params)):
        problems.append(f"{where}.metadata.{name}: not a parameter of the prometheus scaler ({', '.join(params)})")
    for name, param in params.items():
        value = metadata.get(name)
        if value is None:
            if param["required"]:
                problems.append(f"{where}.metadata.{name}: required by the prometheus scaler")
            continue
        if param["type"] == "float64":
            try:
                float(value)
            except ValueError:
                problems.append(f"{where}.metadata.{name}: {value!r} is not a number")
        elif param["type"] == "bool" and value not in GO_BOOLS:
            problems.append(f"{where}.metadata.{name}: {value!r} is not a Go bool")
    return problems


def problems(manifest: dict[str, Any]) -> list[str]:
    """Everything the API server (with KEDA's CRD installed) or KEDA would refuse in ``manifest``;
    empty when it would take it."""
    try:
        schema = version_schema(manifest.get("apiVersion", ""), manifest.get("kind", ""))
    except AssertionError as exc:
        return [str(exc)]
    schema = strict(copy.deepcopy(schema))
    schema["properties"]["metadata"] = OBJECT_META
    validator = jsonschema.Draft4Validator(schema, format_checker=FORMATS)
    out = [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
           for e in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))]
    for path, rule in cel_rules(schema):
        assert rule in CEL_RULES, f"the CRD has a CEL rule the tests cannot judge yet: {rule}"
        node: Any = manifest
        for name in path:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and not CEL_RULES[rule](node):
            out.append(f"{'.'.join(path)}: fails the CRD's rule {rule}")
    if not out:
        metric_types = schema["properties"]["spec"]["properties"]["advanced"]["properties"]["scalingModifiers"][
            "properties"]["metricType"]["enum"]
        for index, trigger in enumerate(manifest["spec"]["triggers"]):
            out += _trigger_problems(index, trigger, metric_types)
    return out


# ------------------------------------------------------------------ the validator itself

GENERATED = ROOT / k.GENERATED_DIR / k.SCALED_OBJECT_FILE


def generated() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(GENERATED.read_text())
    return manifest


def broken(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    manifest = copy.deepcopy(generated())
    change(manifest)
    return manifest


def test_the_vendored_crd_is_kedas_scaled_object() -> None:
    assert CRD["kind"] == "CustomResourceDefinition" and CRD["metadata"]["name"] == "scaledobjects.keda.sh"
    assert (SCHEMAS / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "v2.20.2" in (SCHEMAS / "README.md").read_text()
    params = scaler_parameters()
    assert {name for name, p in params.items() if p["required"]} == {"serverAddress", "query", "threshold"}
    assert params["ignoreNullValues"] == {"type": "bool", "required": False}


@pytest.mark.parametrize("change, expected", [
    (lambda o: o["spec"].update(minReplicasCount=o["spec"].pop("minReplicaCount")),
     "Additional properties are not allowed ('minReplicasCount' was unexpected)"),
    (lambda o: o["spec"]["triggers"][0].pop("metadata"), "'metadata' is a required property"),
    (lambda o: o["spec"]["scaleTargetRef"].update(nme="x"), "('nme' was unexpected)"),
    (lambda o: o["spec"].pop("scaleTargetRef"), "'scaleTargetRef' is a required property"),
    (lambda o: o["spec"].update(triggers=[]), "[] should be non-empty"),
    (lambda o: o["spec"]["triggers"][0]["metadata"].update(threshold=0.5), "0.5 is not of type 'string'"),
    (lambda o: o["spec"].update(maxReplicaCount=0), "0 is less than the minimum of 1"),
    (lambda o: o["spec"].update(maxReplicaCount=2**31), "is not a 'int32'"),
    (lambda o: o["spec"].update(minReplicaCount=5, maxReplicaCount=3), "fails the CRD's rule"),
    (lambda o: o.update(apiVersion="keda.sh/v1"), "the CRD serves ['v1alpha1']"),
    (lambda o: o.update(apiVersion="keda.k8s.io/v1alpha1"), "the CRD's group is keda.sh"),
    (lambda o: o.update(kind="ScaledJob"), "the CRD defines ScaledObject"),
    (lambda o: o["metadata"].update(name="Fairctl_Workers"), "does not match"),
    (lambda o: o["metadata"].update(uid="x"), "('uid' was unexpected)"),
    (lambda o: o["spec"]["triggers"][0]["metadata"].update(serverAdress="http://p:9090"),
     "metadata.serverAdress: not a parameter of the prometheus scaler"),
    (lambda o: o["spec"]["triggers"][0]["metadata"].pop("query"), "metadata.query: required by the prometheus scaler"),
    (lambda o: o["spec"]["triggers"][0]["metadata"].update(threshold="half"), "'half' is not a number"),
    (lambda o: o["spec"]["triggers"][0]["metadata"].update(ignoreNullValues="no"), "'no' is not a Go bool"),
    (lambda o: o["spec"]["triggers"][1].update(metricType="Utilization"), "KEDA's scalers take"),
], ids=["misspelt-field", "trigger-without-metadata", "misspelt-target-field", "no-target", "no-trigger",
        "metadata-value-not-a-string", "max-zero", "max-past-int32", "min-over-max", "unserved-version",
        "wrong-group", "wrong-kind", "bad-name", "unknown-metadata-field", "misspelt-scaler-parameter",
        "no-query", "threshold-not-a-number", "bool-not-a-bool", "utilization"])
def test_a_broken_scaled_object_is_refused(change: Callable[[dict[str, Any]], None], expected: str) -> None:
    found = problems(broken(change))
    assert any(expected in p for p in found), found


def test_the_strict_schema_keeps_what_the_crd_leaves_open() -> None:
    """Trigger metadata is a map of strings (any key), and the status is the controller's."""
    schema = strict(version_schema(keda.API_VERSION, keda.KIND))
    spec = schema["properties"]["spec"]
    assert spec["additionalProperties"] is False
    metadata = spec["properties"]["triggers"]["items"]["properties"]["metadata"]
    assert metadata["additionalProperties"] == {"type": "string"}


# ------------------------------------------------------------------ what fairctl generate writes


def test_the_generated_scaled_object_passes_kedas_schema() -> None:
    assert problems(generated()) == []


def test_every_worker_deployment_has_a_scaled_object_targeting_it() -> None:
    manifests = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / k.GENERATED_DIR).glob("*.yaml"))]
    deployments = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Deployment"}
    scaled = [m for m in manifests if m["kind"] == keda.KIND]
    assert deployments.keys() == {k.WORKERS}
    assert [(s["spec"]["scaleTargetRef"]["kind"], s["spec"]["scaleTargetRef"]["name"]) for s in scaled] == [
        ("Deployment", k.WORKERS)]
    assert all(problems(s) == [] for s in scaled)
    # The autoscaler owns the replica count: a manifest that set it would reset the fleet at each apply.
    assert "replicas" not in deployments[k.WORKERS]["spec"]


def test_the_triggers_read_the_recordings_of_every_class(example_config: Config) -> None:
    spec = generated()["spec"]
    settings = kubernetes_settings(example_config)
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (settings.min_replicas, settings.max_replicas)
    age, depth = spec["triggers"]
    assert (age["name"], age["metricType"], depth["name"], depth["metricType"]) == (
        keda.AGE_TRIGGER, "Value", keda.DEPTH_TRIGGER, "AverageValue")
    assert float(age["metadata"]["threshold"]) == settings.age_target
    assert float(depth["metadata"]["threshold"]) == settings.depth_per_slot * k.WORKER_CONCURRENCY
    # The recordings the queries read are among those of the rules generated beside them.
    recorded = {rule["record"] for group in yaml.safe_load(rules_text(example_config))["groups"]
                for rule in group["rules"] if "record" in rule}
    classes = "|".join(c.name for c in example_config.classes)
    for trigger in (age, depth):
        query = trigger["metadata"]["query"]
        assert trigger["metadata"]["serverAddress"] == settings.prometheus_url
        assert trigger["metadata"]["ignoreNullValues"] == "false"
        assert f'group="{example_config.redis.prefix}"' in query and f'queue=~"{classes}"' in query
        assert f'job="{example_config.section("alerts").exporter_job}"' in query
        names = set(re.findall(r"fairctl:[a-z_]+:[a-z_]+", query))
        assert names and names <= recorded, names - recorded
        assert rec.PAUSED in names
    assert rec.QUIET_AGE in age["metadata"]["query"] and rec.OLDEST_AGE not in age["metadata"]["query"]
    assert rec.DEPTH in depth["metadata"]["query"]


def write_config(tmp_path: Path, **section: Any) -> Path:
    data = with_change("redis.prefix", "fq")
    data["kubernetes"] = section
    path = tmp_path / "fairness.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_scaled_object_follows_the_kubernetes_section(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, min_replicas=1, max_replicas=40, age_target=0.8, depth_per_slot=10,
                                      prometheus_url="https://prometheus.example.com/prom/"))
    manifest = yaml.safe_load(k.render(config)[k.SCALED_OBJECT_FILE])
    assert problems(manifest) == []
    spec = manifest["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 40)
    assert [t["metadata"]["threshold"] for t in spec["triggers"]] == ["0.8", "40"]
    assert {t["metadata"]["serverAddress"] for t in spec["triggers"]} == {"https://prometheus.example.com/prom"}
    # depth_per_slot 0: age alone.
    config = load_config(write_config(tmp_path, depth_per_slot=0))
    manifest = yaml.safe_load(k.render(config)[k.SCALED_OBJECT_FILE])
    assert problems(manifest) == [] and [t["name"] for t in manifest["spec"]["triggers"]] == [keda.AGE_TRIGGER]


def test_a_deployment_serving_some_classes_is_scaled_on_those(example_config: Config) -> None:
    manifest = keda.scaled_object(example_config, "bulk-workers", 16, ["jobs:low"])
    assert problems(manifest) == []
    for trigger in manifest["spec"]["triggers"]:
        assert 'queue="jobs:low"' in trigger["metadata"]["query"]
    assert manifest["spec"]["triggers"][1]["metadata"]["threshold"] == "800"
    with pytest.raises(ConfigError, match="jobs:nope"):
        keda.scaled_object(example_config, "x", 4, ["jobs:nope"])


def test_a_class_name_with_regex_characters_is_matched_literally(tmp_path: Path) -> None:
    data = with_change("classes", [{"name": "jobs.high", "weight": 1, "max_age": "1m"},
                                   {"name": "jobs", "weight": 1, "max_age": "1h"}])
    data["classification"] = [{"class": "jobs", "reason": "default"}]
    config = parse_config(data)
    query = keda.age_query(config, ["jobs.high", "jobs"])
    assert r'queue=~"jobs\\.high|jobs"' in query  # a dot is a dot: jobs.high, not jobsXhigh


def test_a_watched_system_gets_no_scaled_object(tmp_path: Path) -> None:
    """fairctl deploys no worker for a watched system: the exporter alone, no ScaledObject (the
    team's own workers' is in docs/deployment.md)."""
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(WATCH_CONFIG))
    rendered = k.render(load_config(path))
    kinds = [yaml.safe_load(text)["kind"] for text in rendered.values()]
    assert keda.KIND not in kinds and k.SCALED_OBJECT_FILE not in rendered
    # Its exporter's Deployment keeps its one replica: nothing scales it.
    assert yaml.safe_load(rendered[PurePosixPath("exporter.yaml")])["spec"]["replicas"] == 1


# ------------------------------------------------------------------ the documented example

# The config of docs/watching.md's walk-through (Celery), which the documented example is for.
WATCH_CONFIG = {
    "redis": {"url": "redis://127.0.0.1:6379/0"},
    "classes": [{"name": "interactive", "weight": 80, "max_age": "30s"}, {"name": "bulk", "weight": 20, "max_age": "1h"}],
    "watch": {"system": "celery", "classes": {"interactive": ["interactive"], "bulk": ["bulk"]},
              "tenant": "kwargs.tenant_id"},
}
DOC_TARGET, DOC_CONCURRENCY, DOC_CLASSES = "celery-interactive", 8, ["interactive"]


def documented_scaled_objects() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    found = [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]
    return [b for b in found if isinstance(b, dict) and b.get("kind") == keda.KIND]


def test_the_documented_scaled_object_passes_the_schema_and_is_what_fairctl_would_write() -> None:
    (documented,) = documented_scaled_objects()
    assert problems(documented) == []
    expected = keda.scaled_object(parse_config(WATCH_CONFIG), DOC_TARGET, DOC_CONCURRENCY, DOC_CLASSES)
    assert documented == expected
    # A watched system has no quiet tenants' age: the class's oldest.
    assert rec.OLDEST_AGE in documented["spec"]["triggers"][0]["metadata"]["query"]


def test_the_generated_files_are_listed_in_the_docs() -> None:
    assert k.SCALED_OBJECT_FILE.name in (ROOT / "docs" / "deployment.md").read_text()


# ------------------------------------------------------------------ the kubernetes section


def test_without_the_section_the_defaults_hold_and_the_stored_form_is_unchanged(example_config: Config) -> None:
    assert kubernetes_settings(example_config) == KubernetesConfig()
    assert "kubernetes" not in config_to_data(example_config)
    assert KubernetesConfig().prometheus_url == DEFAULT_PROMETHEUS_URL


def test_a_set_section_is_stored_and_read_back(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, max_replicas=30, prometheus_url="http://thanos-query:9090"))
    data = config_to_data(config)
    assert data["kubernetes"] == {"max_replicas": 30, "prometheus_url": "http://thanos-query:9090"}
    assert kubernetes_settings(parse_config(data)) == kubernetes_settings(config)
    assert fingerprint(config) != fingerprint(load_config(EXAMPLE_CONFIG))


@pytest.mark.parametrize("section, path, message", [
    ({"min_replicas": 5, "max_replicas": 3}, "kubernetes.min_replicas", "must be at most kubernetes.max_replicas (3)"),
    ({"max_replicas": 1}, "kubernetes.max_replicas", "kubernetes.min_replicas (2) must be at most"),
    ({"min_replicas": -1}, "kubernetes.min_replicas", "must be between 1 and"),
    ({"min_replicas": 0}, "kubernetes.min_replicas", "must be between 1 and"),
    ({"max_replicas": "ten"}, "kubernetes.max_replicas", "expected a whole number"),
    ({"prometheus_url": "prometheus:9090"}, "kubernetes.prometheus_url", "absolute http:// or https:// URL"),
    ({"prometheus_url": "ftp://prometheus:9090"}, "kubernetes.prometheus_url", "absolute http:// or https:// URL"),
    ({"prometheus_url": "http://p:9090/?x=1"}, "kubernetes.prometheus_url", "without spaces, ?, #"),
    ({"age_target": 0}, "kubernetes.age_target", "fraction of max_age in (0, 1]"),
    ({"age_target": 1.5}, "kubernetes.age_target", "fraction of max_age in (0, 1]"),
    ({"depth_per_slot": -1}, "kubernetes.depth_per_slot", "a number >= 0"),
    ({"max_replica": 3}, "kubernetes.max_replica", "did you mean max_replicas?"),
])
def test_a_bad_section_names_its_field(tmp_path: Path, section: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, **section))
    assert caught.value.path == path and message in caught.value.message, str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "fairness.yaml"))
