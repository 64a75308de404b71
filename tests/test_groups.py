"""Two queue groups with the same class names, scraped by a real Prometheus under one job: either
each with its own exporter, or both from one ``fairctl exporter --config a --config b``. Every
series carries its group, so neither the raw series nor the generated recordings merge the two:
each group's depth and oldest age are its own, and QueueStarving fires for the starved group
only, naming it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from alerts import recording as rec
from alerts.output import rules_text
from alerts.rules import QUEUE_STARVING
from exporter import metrics as m
from fairctl.cli import app
from fairness_core import Config, Queue, load_config, redis_client
from fairness_stack.servers import RedisServer, free_port, stop_process

from .conftest import EXAMPLE_CONFIG
from .exporter_support import Prometheus, fetch, parse_grouped, running_exporter
from .support import spawn_exporter, wait_for

STARVED, HEALTHY = "shop-a", "shop-b"
JOBS = {STARVED: 300, HEALTHY: 40}  # newsletters queued in jobs:low, no worker for either group


def group_config(tmp_path: Path, url: str, prefix: str) -> Path:
    """The example classes under ``prefix``: jobs:low's SLO is 2 s (1 s for QueueStarving's for:)
    in the starved group, an hour in the healthy one, so only the first starves."""
    data: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {**data["redis"], "url": url, "prefix": prefix}
    low = data["classes"][2]
    low.update({"max_age": "2s", "starving_for": "1s"} if prefix == STARVED else {"max_age": "1h"})
    low.pop("promote_after", None)
    path = tmp_path / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@contextmanager
def one_exporter_per_group(configs: list[Config], paths: list[Path], tmp_path: Path) -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [f"127.0.0.1:{stack.enter_context(running_exporter(c)).port}" for c in configs]


@contextmanager
def one_exporter_for_both(configs: list[Config], paths: list[Path], tmp_path: Path) -> Iterator[list[str]]:
    """``fairctl exporter --config A --config B`` as a user runs it."""
    target = f"127.0.0.1:{free_port()}"
    more = [arg for path in paths[1:] for arg in ("--config", str(path))]
    process = spawn_exporter(paths[0], tmp_path / "exporter.log", *more, "--listen", target)
    try:
        wait_for(lambda: _answers(f"http://{target}/metrics"), 30, "the exporter serving")
        yield [target]
    finally:
        stop_process(process, timeout=20)


def _answers(url: str) -> bool:
    try:
        fetch(url, timeout=2)
    except OSError:
        return False
    return True


def by_group(prometheus: Prometheus, query: str) -> dict[str, float]:
    return {labels[m.GROUP]: value for labels, value in prometheus.query(query)}


@pytest.mark.parametrize("exporters", [one_exporter_per_group, one_exporter_for_both], ids=["apart", "together"])
def test_two_groups_behind_one_job_stay_apart_and_only_the_starved_one_pages(
        redis_server: RedisServer, tmp_path: Path, exporters: Any) -> None:
    redis_client(redis_server.url).flushdb()
    paths = [group_config(tmp_path, redis_server.url, prefix) for prefix in (STARVED, HEALTHY)]
    configs = [load_config(path) for path in paths]
    first_enqueued = {}
    for config in configs:
        first_enqueued[config.redis.prefix] = time.time()
        Queue(config, redis_client(redis_server.url)).submit_many(
            "newsletter", f"{config.redis.prefix}-tenant", [{"n": n} for n in range(JOBS[config.redis.prefix])])
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(configs[0]))  # one rules file serves both: SLOs come from the exporters
    with exporters(configs, paths, tmp_path) as targets, Prometheus(targets, tmp_path, (rules,)) as prometheus:
        firing = f'ALERTS{{alertname="{QUEUE_STARVING}",alertstate="firing"}}'
        wait_for(lambda: prometheus.query(firing) != [], 30, "QueueStarving firing")
        low = f'{{{m.QUEUE}="jobs:low"}}'
        raw_depth = by_group(prometheus, m.QUEUE_DEPTH.name + low)
        recorded_depth = by_group(prometheus, rec.DEPTH + low)
        ages = by_group(prometheus, rec.OLDEST_AGE + low)
        asked_at = time.time()
        alerts = [labels for labels, _ in prometheus.query(firing)]
    assert raw_depth == recorded_depth == JOBS, "each group's own depth, never merged"
    for prefix, enqueued in first_enqueued.items():
        assert 0 <= asked_at - enqueued - ages[prefix] <= 3, (prefix, ages)  # a scrape and an evaluation behind
    assert [(a[m.GROUP], a[m.QUEUE]) for a in alerts] == [(STARVED, "jobs:low")], alerts


def test_one_exporter_for_two_groups_serves_each_metric_once_with_both_groups(
        redis_server: RedisServer, tmp_path: Path) -> None:
    paths = [group_config(tmp_path, redis_server.url, prefix) for prefix in (STARVED, HEALTHY)]
    with one_exporter_for_both([], paths, tmp_path) as (target,):
        text = fetch(f"http://{target}/metrics")
    assert text.count(f"# TYPE {m.QUEUE_DEPTH.name} gauge") == 1, "one family, both groups' samples"
    up = {dict(labels)[m.GROUP]: v for (name, labels), v in parse_grouped(text).items()
          if name == m.EXPORTER_REDIS_UP.name}
    assert up == {STARVED: 1.0, HEALTHY: 1.0}


def test_two_configs_of_one_group_are_refused_naming_the_option(tmp_path: Path) -> None:
    path = group_config(tmp_path, "redis://127.0.0.1:6379/0", STARVED)
    done = CliRunner().invoke(app, ["exporter", "--config", str(path), "--config", str(path)])
    assert done.exit_code == 2 and f"--config: two configs describe queue group {STARVED}" in done.output


def test_status_shows_every_group_given(redis_server: RedisServer, tmp_path: Path) -> None:
    redis_client(redis_server.url).flushdb()
    paths = [group_config(tmp_path, redis_server.url, prefix) for prefix in (STARVED, HEALTHY)]
    for path in paths:
        config = load_config(path)
        Queue(config, redis_client(redis_server.url)).submit_many(
            "newsletter", "t", [{"n": n} for n in range(JOBS[config.redis.prefix])])
    both = ["status", "--interval", "0", "--config", str(paths[0]), "--config", str(paths[1])]
    text = CliRunner().invoke(app, both)
    assert text.exit_code == 0, text.output
    blocks = text.output.split("\n\nqueue group ")  # each group under its name, its own config line last
    assert [b.removeprefix("queue group ").split("\n")[0] for b in blocks] == [STARVED, HEALTHY], text.output
    assert all(f"of queue group {p} " in b for b, p in zip(blocks, (STARVED, HEALTHY))), text.output
    data = json.loads(CliRunner().invoke(app, [*both, "--json"]).output)
    assert [(g["group"], next(c["depth"] for c in g["classes"] if c["name"] == "jobs:low")) for g in data] == [
        (STARVED, JOBS[STARVED]), (HEALTHY, JOBS[HEALTHY])]
