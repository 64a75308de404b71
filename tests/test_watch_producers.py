"""Where fairctl loadgen puts a tenant in a watched system's job: exactly where the exporter reads
it back (``watch.tenant``), beside the job's service time, or a clear error naming the field;
what loadgen refuses for a watched system, naming the option; and a system's Redis away, which
the load generator waits out. (Each system's jobs run by its real
workers: tests/test_watch_<system>.py.)"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.base import tenant_of
from fairctl.cli import app
from fairness_core.config import ConfigError, parse_config
from fairness_core.jobs import RedisUnavailable
from fairness_sim.loadgen import LoadGenerator, Replay
from fairness_sim.producers import producer_for
from fairness_sim.producers.base import placed
from fairness_sim.scenario import parse_scenario
from fairness_stack.servers import RedisServer, free_port

from .conftest import EXAMPLE_CONFIG

STEP = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), st.integers(0, 4).map(str))


@given(root=st.sampled_from(["args", "kwargs", "data"]), steps=st.lists(STEP, min_size=1, max_size=4),
       tenant=st.text(min_size=1, max_size=20))
def test_a_placed_tenant_reads_back_where_the_exporter_looks(root: str, steps: list[str], tenant: str) -> None:
    path = (root, *steps)
    base: dict[str, Any] = {"args": [], "kwargs": {"service_s": 0.5}, "data": {"service_s": 0.5}}
    try:
        arguments = placed(base, path, tenant, "watch.tenant")
    except ConfigError as exc:  # only where the path runs through the service time or indexes a list by name
        assert exc.path == "watch.tenant"
        return
    assert tenant_of(arguments, path) == tenant
    if path[:2] != (root, "service_s"):
        assert arguments[root if root != "args" else "kwargs"]["service_s"] == 0.5


@pytest.mark.parametrize(("base", "path", "expected"), [
    ({"args": []}, ("args", "0"), {"args": ["t"]}),
    ({"args": []}, ("args", "2"), {"args": [None, None, "t"]}),
    ({"args": []}, ("args", "0", "tenant"), {"args": [{"tenant": "t"}]}),
    ({"args": [], "kwargs": {"service_s": 1}}, ("kwargs", "tenant_id"), {"args": [], "kwargs": {"service_s": 1, "tenant_id": "t"}}),
    ({"data": {"service_s": 1}}, ("data", "meta", "0"), {"data": {"service_s": 1, "meta": ["t"]}}),
])
def test_the_tenant_lands_on_its_path_and_nothing_else_moves(base: dict[str, Any], path: tuple[str, ...],
                                                             expected: dict[str, Any]) -> None:
    assert placed(base, path, "t", "watch.tenant") == expected


@pytest.mark.parametrize("path", [("kwargs", "service_s", "x"), ("kwargs",), ("args", "first")])
def test_a_path_that_cannot_hold_a_tenant_names_the_field(path: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as caught:
        placed({"args": [], "kwargs": {"service_s": 1}}, path, "t", "watch.tenant")
    assert caught.value.path == "watch.tenant"


def _rq_watch_config(tmp_path: Path) -> Path:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["watch"] = {"system": "rq", "tenant": "args.0",
                     "classes": {"jobs:high": ["high"], "jobs:medium": ["medium"], "jobs:low": ["low"]}}
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_loadgen_refuses_what_a_watched_system_cannot_take_naming_the_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _rq_watch_config(tmp_path)
    runner = CliRunner()
    policy = runner.invoke(app, ["loadgen", "--config", str(config), "--policy", "fifo"])
    assert policy.exit_code == 2 and "--policy: rq schedules its own jobs" in policy.output
    job = runner.invoke(app, ["loadgen", "--config", str(EXAMPLE_CONFIG), "--job", "x"])
    assert job.exit_code == 2 and "--job: names a watched system's job function" in job.output
    monkeypatch.setitem(sys.modules, "rq", None)  # RQ not installed beside fairctl
    missing = runner.invoke(app, ["loadgen", "--config", str(config)])
    assert missing.exit_code == 2 and "pip install 'fairctl[rq]'" in missing.output, missing.output


@pytest.mark.parametrize("system", ["bullmq", "celery", "rq", "sidekiq"])
def test_a_watched_systems_redis_away_is_redis_unavailable_within_a_second_or_so(system: str) -> None:
    """What the load generator waits on and retries: each client's own error, in short order
    (BullMQ's client would otherwise retry a refused connection for minutes)."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"]["url"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    data["watch"] = {"system": system, "tenant": "data.tenant" if system == "bullmq" else "args.0",
                     "classes": {"jobs:high": ["high"], "jobs:medium": ["medium"], "jobs:low": ["low"]}}
    producer = producer_for(parse_config(data))
    started = time.monotonic()
    with pytest.raises(RedisUnavailable, match=f"{system}'s Redis"):
        producer.submit_many("newsletter", "acme", [{"service_s": 0.1}])
    assert time.monotonic() - started < 10, "bounded, not minutes"  # not a speed target: a hang guard


@pytest.mark.live  # starts its redis-server a second late
def test_loadgen_into_a_watched_system_waits_for_its_redis_and_then_queues_everything(tmp_path: Path) -> None:
    """Redis is down when the replay starts and comes up a second later: the generator retries
    until it answers, and every job of the replay is queued (a chunk whose reply was lost may be
    queued twice: at least once, as for fairctl's own queues)."""
    server = RedisServer()
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"]["url"] = server.url
    data["watch"] = {"system": "sidekiq", "tenant": "args.0",
                     "classes": {"jobs:high": ["high"], "jobs:medium": ["medium"], "jobs:low": ["low"]}}
    config = parse_config(data)
    scenario = parse_scenario({"name": "away", "duration": "4s", "seed": 1, "scrape_interval": "1s",
                               "workers": [{"name": "w", "count": 1}],
                               "streams": [{"name": "resets", "task": "password_reset", "tenant": "shop",
                                            "arrivals": {"constant": {"rate_per_s": 5}}, "service_s": {"constant": 1}}]})
    generator = LoadGenerator(scenario, producer_for(config), Replay(speed=1, volume=1, until=4))
    up = threading.Timer(1.0, server.start)
    up.start()
    try:
        stats = generator.run()
        queued = redis.Redis.from_url(server.url).llen("queue:high")
    finally:
        up.join()
        server.stop()
    assert stats.retries > 0 and stats.enqueued["resets"] == 20  # at 0 s, 0.2 s, ..., 3.8 s
    assert queued >= 20
