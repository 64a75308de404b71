"""What ``fairctl generate`` keeps for each watched system: the alerts docs/watching.md lists, each
with only the series that system supplies, and promtool passing on them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alerts import rules as r
from alerts.output import rules_text
from alerts.recording import expressions
from alerts.supplied import needs, served_metrics
from exporter.sources import QueueRef, WatchConfig, systems
from fairness_core import Config

from .conftest import EXAMPLE_CONFIG, make_config

# RQ and BullMQ: completions, pauses (rq suspend, queue.pause()), dead letters and waits; Sidekiq:
# dead letters and waits, no completions or pauses; Celery: the broker's lists alone. Every one:
# Redis's memory and the quiet tenants' age from the tenant sample.
QUEUES_KEEP_ALL = (r.QUEUE_STARVING, r.QUEUE_SHARE_BELOW_WEIGHT, r.TENANT_DOMINATING_QUEUE, r.QUIET_TENANTS_STARVING,
                   r.QUEUE_STALLED, r.PRIORITY_INVERSION, r.JOBS_DEAD_LETTERED, r.QUEUE_PAUSED, r.REDIS_MEMORY_HIGH,
                   r.REDIS_MAY_EVICT_JOBS, r.FAIRNESS_EXPORTER_DOWN, r.FAIRNESS_EXPORTER_REDIS_DOWN,
                   r.REDIS_MASTER_CHANGED)
KEPT = {
    "bullmq": QUEUES_KEEP_ALL,
    "celery": (r.QUEUE_STARVING, r.QUIET_TENANTS_STARVING, r.REDIS_MEMORY_HIGH, r.REDIS_MAY_EVICT_JOBS,
               r.FAIRNESS_EXPORTER_DOWN, r.FAIRNESS_EXPORTER_REDIS_DOWN, r.REDIS_MASTER_CHANGED),
    "rq": QUEUES_KEEP_ALL,
    "sidekiq": (r.QUEUE_STARVING, r.QUIET_TENANTS_STARVING, r.JOBS_DEAD_LETTERED, r.REDIS_MEMORY_HIGH,
                r.REDIS_MAY_EVICT_JOBS, r.FAIRNESS_EXPORTER_DOWN, r.FAIRNESS_EXPORTER_REDIS_DOWN,
                r.REDIS_MASTER_CHANGED),
}
# What each system's alerts must come to at least (docs/watching.md).
AT_LEAST = {"bullmq": 8, "celery": 6, "rq": 8, "sidekiq": 8}


def watching(system: str) -> Config:
    config = make_config()
    return config.with_section("watch", WatchConfig(system=system, classes={
        name: (QueueRef(name.replace(":", "-")),) for name in config.class_names}))


def test_every_system_is_listed() -> None:
    assert set(KEPT) == set(systems())


@pytest.mark.parametrize("system", list(systems()))
def test_each_system_keeps_the_alerts_its_series_feed(system: str) -> None:
    config = watching(system)
    assert tuple(a.name for a in r.build_alerts(config)) == KEPT[system]
    assert len(KEPT[system]) >= AT_LEAST[system]
    assert set(r.left_out(config)) | set(KEPT[system]) == {a.name for a in r.every_alert(make_config())}
    served = served_metrics(config)
    assert served is not None
    assert needs(rules_text(config), expressions(config)) <= served, "no rule reads a series the exporter does not serve"


def test_fairctls_own_queues_keep_every_alert() -> None:
    config = make_config()
    assert served_metrics(config) is None and r.left_out(config) == ()
    assert [a.name for a in r.build_alerts(config)] == [a.name for a in r.every_alert(config)]


def test_generate_for_a_watched_system_deploys_no_fairctl_worker_and_names_its_file(tmp_path: Path) -> None:
    """A Celery team's watch.yaml: the Kubernetes set deploys the exporter alone (their own workers
    run the jobs; a fairctl worker there would take nothing, or worse), its Service selects that
    exporter's pods, and every generated file says to change watch.yaml."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["watch"] = {"system": "celery", "classes": {c["name"]: [c["name"].replace(":", "-")] for c in data["classes"]}}
    source = tmp_path / "watch.yaml"
    source.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "fairctl", "generate", "--config", str(source), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    kubernetes = out / "deploy" / "kubernetes"
    assert not (kubernetes / "workers.yaml").exists()
    exporter = yaml.safe_load((kubernetes / "exporter.yaml").read_text())
    pod = exporter["spec"]["template"]
    assert [c["args"][0] for c in pod["spec"]["containers"]] == ["exporter"]
    service = yaml.safe_load((kubernetes / "exporter-service.yaml").read_text())
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    texts = [p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml")]
    assert texts and all("change watch.yaml and regenerate" in t and "fairness.yaml and" not in t for t in texts)
