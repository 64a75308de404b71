"""Two queue groups with the same class names, each with its exporter, scraped by a real Prometheus
under one job. Every series carries its group, so neither the raw series nor the generated
recordings merge the two: each group's depth and oldest age are its own, and QueueStarving fires
for the starved group only, naming it."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from alerts import recording as rec
from alerts.output import rules_text
from alerts.rules import QUEUE_STARVING
from exporter import metrics as m
from fairness_core import Config, Scheduler, parse_config, redis_client
from fairness_stack.servers import RedisServer

from .conftest import EXAMPLE_CONFIG
from .exporter_support import Prometheus, running_exporter
from .support import wait_for

STARVED, HEALTHY = "shop-a", "shop-b"
JOBS = {STARVED: 300, HEALTHY: 40}  # newsletters queued in jobs:low, no worker for either group


def group_config(url: str, prefix: str) -> Config:
    """The example classes, jobs:low's SLO 2 s (1 s for QueueStarving's for:), under ``prefix``;
    the healthy group's SLO is an hour, so its waiting jobs are within it."""
    data: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {**data["redis"], "url": url, "prefix": prefix}
    low = data["classes"][2]
    low.update({"max_age": "2s", "starving_for": "1s"} if prefix == STARVED else {"max_age": "1h"})
    low.pop("promote_after", None)
    return parse_config(data)


def by_group(prometheus: Prometheus, query: str) -> dict[str, float]:
    return {labels[m.GROUP]: value for labels, value in prometheus.query(query)}


def test_two_groups_behind_one_job_stay_apart_and_only_the_starved_one_pages(
        redis_server: RedisServer, tmp_path: Path) -> None:
    configs = {prefix: group_config(redis_server.url, prefix) for prefix in (STARVED, HEALTHY)}
    first_enqueued = {}
    for prefix, config in configs.items():
        scheduler = Scheduler(config, redis_client(redis_server.url))
        first_enqueued[prefix] = time.time()
        scheduler.submit_many("newsletter", f"{prefix}-tenant", [{"n": n} for n in range(JOBS[prefix])])
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(configs[STARVED]))  # one rules file serves both: SLOs come from the exporters
    with ExitStack() as stack:
        exporters = [stack.enter_context(running_exporter(c)) for c in configs.values()]
        prometheus = stack.enter_context(
            Prometheus([f"127.0.0.1:{e.port}" for e in exporters], tmp_path, (rules,)))
        firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
        wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
        low = f'{{{m.QUEUE}="jobs:low"}}'
        raw_depth = by_group(prometheus, m.QUEUE_DEPTH.name + low)
        recorded_depth = by_group(prometheus, rec.DEPTH + low)
        ages = by_group(prometheus, rec.OLDEST_AGE + low)
        asked_at = time.time()
        alerts = [labels for labels, _ in prometheus.query(firing)]
    assert raw_depth == recorded_depth == {STARVED: 300, HEALTHY: 40}, "each group's own depth, never merged"
    for prefix in configs:
        assert 0 <= asked_at - first_enqueued[prefix] - ages[prefix] <= 3, (prefix, ages)  # a scrape and an evaluation
    assert [(a[m.GROUP], a[m.QUEUE]) for a in alerts] == [(STARVED, "jobs:low")], alerts
