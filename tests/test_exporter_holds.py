"""Tenants held by their dispatch limits, seen against a real redis-server: the snapshot counts
them and their queued jobs per class and reason, the exporter serves those counts (a sharded
queue's shards each their own, which add up to the merged snapshot's), and ``fairctl status``
shows them, in text and JSON, only where a config sets such limits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from exporter import metrics as m
from exporter.groups import QueueCollector
from fairctl.cli import app
from fairness_core import Lease, Queue, redis_client
from fairness_core.config import Config
from fairness_core.snapshot import hold_reasons
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .exporter_support import Scrape, parse_grouped, running_exporter, scrape
from .support import write_config

NO_BUDGET = {"budget_min_arrivals": 10**9}
# Every tenant may run 2 jobs at once; "paced" may also start one an hour (a bucket of one token).
HOLDS = {"max_in_flight": 2, "overrides": {"paced": {"dispatch_rate": "1/h"}}}
QUEUED = {"capped": 5, "paced": 3, "free": 1}  # newsletters: jobs:low


def fill(queue: Queue) -> list[Lease]:
    """QUEUED's jobs, then one pop that takes what the limits let start: capped's 2, paced's 1 and
    free's 1. It leaves capped held at its cap with 3 jobs queued, paced out of tokens with 2.
    Returns capped's leases."""
    for tenant, jobs in QUEUED.items():
        for _ in range(jobs):
            queue.submit("newsletter", tenant)
    leases = queue.pop(10)
    assert Counter(lease.tenant for lease in leases) == {"capped": 2, "paced": 1, "free": 1}
    return [lease for lease in leases if lease.tenant == "capped"]


def held(got: Scrape, spec: m.MetricSpec) -> dict[tuple[str, str], float]:
    """``spec``'s samples by (class, reason), every group and shard added up."""
    out: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in got.samples.items():
        if name == spec.name:
            out[(dict(labels)[m.QUEUE], dict(labels)[m.REASON])] += value
    return dict(out)


def expected(config: Config, low: dict[str, int]) -> dict[tuple[str, str], float]:
    """Every class at 0 for each reason the config gives (cap and rate here), jobs:low at ``low``."""
    return {(name, reason): float(low.get(reason, 0)) if name == "jobs:low" else 0.0
            for name in config.class_names for reason in hold_reasons(config)}


def test_a_capped_and_a_paced_tenant_are_served_held_with_their_jobs(redis_server: RedisServer) -> None:
    config = make_config(redis={"url": redis_server.url}, scheduler=NO_BUDGET, tenants=HOLDS)
    assert hold_reasons(config) == ("cap", "rate")
    queue = Queue(config, redis_client(redis_server.url))
    capped = fill(queue)
    low = queue.snapshot().classes["jobs:low"]
    assert (low.held, low.held_jobs) == ({"cap": 1, "rate": 1}, {"cap": 3, "rate": 2})
    assert low.depth == 5  # held jobs stay queued
    with running_exporter(config) as exporter:
        got = scrape(exporter.url)
        assert held(got, m.QUEUE_HELD_TENANTS) == expected(config, {"cap": 1, "rate": 1})
        assert held(got, m.QUEUE_HELD_JOBS) == expected(config, {"cap": 3, "rate": 2})
        # One of capped's jobs settles: it is back in the fair order, held no more.
        assert queue.ack(capped[0])
        again = scrape(exporter.url)
    assert held(again, m.QUEUE_HELD_TENANTS) == expected(config, {"rate": 1})
    assert held(again, m.QUEUE_HELD_JOBS) == expected(config, {"rate": 2})


def test_status_shows_the_held_tenants_only_where_limits_are_set(redis_server: RedisServer, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url, scheduler=NO_BUDGET, tenants=HOLDS)
    queue = Queue(config, redis_client(redis_server.url))
    fill(queue)
    runner = CliRunner()
    text = runner.invoke(app, ["status", "--interval", "0", "--config", str(path)])
    assert text.exit_code == 0, text.output
    assert ("held by dispatch limits (their jobs wait queued until the hold ends):\n"
            "  jobs:low: 1 tenant at max_in_flight (3 jobs queued), 1 tenant at dispatch_rate (2 jobs queued)"
            in text.stdout)
    data = json.loads(runner.invoke(app, ["status", "--interval", "0", "--json", "--config", str(path)]).stdout)
    by_class = {c["name"]: c for c in data["classes"]}
    assert by_class["jobs:low"]["held_tenants"] == {"cap": 1, "rate": 1}
    assert by_class["jobs:low"]["held_jobs"] == {"cap": 3, "rate": 2}
    assert by_class["jobs:high"]["held_tenants"] == {"cap": 0, "rate": 0}  # limits set: shown at 0 too

    (tmp_path / "plain").mkdir()
    plain_path, plain = write_config(tmp_path / "plain", redis_server.url, scheduler=NO_BUDGET)
    Queue(plain, redis_client(redis_server.url)).submit("newsletter", "anyone")
    text = runner.invoke(app, ["status", "--interval", "0", "--config", str(plain_path)])
    assert text.exit_code == 0 and "held" not in text.stdout
    data = json.loads(runner.invoke(app, ["status", "--interval", "0", "--json", "--config", str(plain_path)]).stdout)
    assert all("held_tenants" not in c and "held_jobs" not in c for c in data["classes"])


def test_a_sharded_queue_serves_each_shards_holds_and_they_add_up(redis_server: RedisServer) -> None:
    """Twelve capped tenants over three shards (each routed to the first shard of its hand): each
    shard serves the holds it keeps, and they add up to the merged snapshot's, as the rules sum them."""
    config = make_config(redis={"url": redis_server.url, "shards": 3, "shard_hand": 1}, scheduler=NO_BUDGET,
                         tenants={"max_in_flight": 1})
    queue = Queue(config, redis_client(redis_server.url))
    tenants = [f"tenant-{i}" for i in range(12)]
    for tenant in tenants:
        for _ in range(3):
            queue.submit("newsletter", tenant)
    leased: list[str] = []
    for _ in range(6):  # every shard's tenants visited: one job each, then held at the cap
        leased += [lease.tenant for lease in queue.pop(12)]
    assert sorted(leased) == sorted(tenants)
    low = queue.snapshot().classes["jobs:low"]
    assert (low.held, low.held_jobs) == ({"cap": 12}, {"cap": 24})
    registry = CollectorRegistry()
    registry.register(QueueCollector(config, [group.config for group in queue.groups()]))
    text = generate_latest(registry).decode()
    got = Scrape(text, parse_grouped(text), 0.0, 0.0)
    per_shard = {dict(labels)[m.SHARD]: value for (name, labels), value in got.samples.items()
                 if name == m.QUEUE_HELD_JOBS.name and dict(labels)[m.QUEUE] == "jobs:low"}
    assert sorted(per_shard) == [group.keys.prefix for group in queue.groups()]
    assert sum(per_shard.values()) == 24
    assert held(got, m.QUEUE_HELD_TENANTS) == expected(config, {"cap": 12})
