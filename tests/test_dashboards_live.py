"""Every panel query of the generated dashboards, its template variables resolved the way Grafana
resolves them, returns series from a real Prometheus scraping a live workload every second and
evaluating the generated recording rules, on a queue of its own and on a sharded one: the logical
panels one series per class (no ``shard`` label), the per-shard panels one series per shard."""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from alerts.config import alert_settings
from alerts.output import rules_text
from dashboards import queries as q
from dashboards.build import DASHBOARDS, to_json
from dashboards.layout import GROUP_VAR
from exporter import metrics as m
from exporter.server import server_for
from fairctl.common import groups_of
from fairctl.handlers import sleep_handlers
from fairness_core import Config, open_queue, redis_client
from fairness_core.worker import Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .exporter_support import JOB, Prometheus
from .support import running, wait_for
from .test_dashboards import (
    annotation_queries,
    panel_queries,
    variable_queries,
    variable_series,
)

ALL = "$__all"  # a variable's current value when "All" is picked
SERVICE_S = 0.1  # 4 slots -> at most 40 jobs/s: every tenant stays backlogged through the test
# Per class: (task, tier, tenants, jobs each); the enterprise tier gives jobs:medium a second reason.
WORKLOAD = (
    ("password_reset", "free", [f"h-{i}" for i in range(4)], 400),
    ("sync_contacts", "free", [f"m-{i}" for i in range(2)], 200),
    ("sync_contacts", "enterprise", ["bigcorp"], 200),
    ("newsletter", "free", [f"l-{i}" for i in range(3)], 200),
)


def enqueue_workload(config: Config, url: str) -> None:
    scheduler = open_queue(config, redis_client(url))
    for task, tier, tenants, jobs in WORKLOAD:
        for tenant in tenants:
            for _ in range(jobs):
                scheduler.enqueue(task, tenant, {"service_s": SERVICE_S}, tier=tier)


def label_values(prometheus: Prometheus, query: str, values: dict[str, str]) -> list[str]:
    """What Grafana lists for a ``label_values(selector, label)`` variable."""
    label = re.fullmatch(r"label_values\(.+,\s*(\w+)\)", query).group(1)  # type: ignore[union-attr]
    series = prometheus.api("series", {"match[]": substituted(variable_series(query), values)})
    return sorted({s[label] for s in series if label in s})


def substituted(expr: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        expr = expr.replace(q.var(name), value)
    assert "$" not in expr, expr
    return expr


def picked(board: dict[str, Any], name: str, listed: list[str]) -> str:
    """What Grafana puts for variable ``name`` by default: its "All" value when that is its
    default, else the first value listed."""
    (variable,) = (v for v in board["templating"]["list"] if v["name"] == name)
    return variable["allValue"] if variable["current"]["value"] == ALL else listed[0]


@pytest.mark.parametrize("shards", [1, 2])
def test_every_panel_query_returns_series_from_a_live_workload(redis_server: RedisServer, tmp_path: Path,
                                                               shards: int) -> None:
    config = make_config(redis={"url": redis_server.url, "prefix": f"dash{shards}", "shards": shards},
                         alerts={"exporter_job": JOB}, scheduler={"budget_min_arrivals": 10**9})
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    enqueue_workload(config, redis_server.url)
    boards = [json.loads(to_json(build(config))) for build in DASHBOARDS]
    groups = groups_of(config)
    with ExitStack() as stack:
        exporter = stack.enter_context(server_for([(config, groups)], "127.0.0.1", 0))
        prometheus = stack.enter_context(Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)))
        queue = open_queue(config, redis_client(redis_server.url))
        stack.enter_context(running(Worker(queue, sleep_handlers, concurrency=4)))
        values = {q.JOB_VAR: alert_settings(config).exporter_job, GROUP_VAR: m.group_of(config)}
        wait_for(lambda: bool(prometheus.query(substituted(panel_queries(boards[0])[0][1], values))), 30,
                 "the first scrape and rule evaluation")
        for board in boards:
            for name, query in variable_queries(board).items():
                listed = label_values(prometheus, query, values)
                assert listed and values.get(name, listed[0]) in listed, (name, query, listed)
                values.setdefault(name, picked(board, name, listed))
        shard_names = label_values(prometheus, variable_queries(boards[0])[q.SHARD_VAR], values)
        assert shard_names == sorted(g.redis.prefix for g in groups), shard_names
        missing = [(board["title"], title, substituted(expr, values))
                   for board in boards for title, expr in panel_queries(board)]

        def all_answered() -> bool:
            nonlocal missing
            missing = [query for query in missing if not prometheus.query(query[2])]
            return not missing

        # Rates need two scrapes of a counter that moved, the p50 needs completed leases: poll.
        try:
            wait_for(all_answered, 40, "a series from every panel query")
        except AssertionError:
            pytest.fail(f"panel queries without series: {missing}")
        for board in boards:
            for title, expr in panel_queries(board):
                shown = sorted(labels.get(m.SHARD, "") for labels, _ in prometheus.query(substituted(expr, values)))
                # A per-shard panel: every shard once; any other: the logical queue, no shard.
                assert shown == (shard_names if q.var(q.SHARD_VAR) in expr else [""] * len(shown)), (title, shown)
            for expr in annotation_queries(board):
                prometheus.query(substituted(expr, values))  # valid PromQL; nothing fires in a healthy run
        snapshots = [group.snapshot() for group in queue.groups()]
        assert all(any(s.classes[c].depth for s in snapshots) for c in config.class_names), "stayed backlogged"
