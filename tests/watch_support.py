"""Helpers of the exporter's watch tests (tests/test_watch_*.py): the read-only Redis user the
docs tell teams to give it, the commands one read costs, the exporter with a real Prometheus on
the generated rules, what it serves checked against the system's own records (waits, Redis's
memory), and ``fairctl loadgen`` replaying a small storm into the watched system."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client import generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from alerts.output import rules_text
from alerts.rules import JOBS_DEAD_LETTERED
from exporter import metrics as m
from exporter.collector import own_registry
from exporter.server import ExporterServer, server_for
from exporter.sources.base import Source
from fairness_core import Config

from .exporter_support import Prometheus, Scrape, scrape
from .support import run_fairctl, wait_for

# What docs/watching.md tells a team to grant the exporter (INFO for the master's run_id).
READ_ONLY = ("-@all", "+@read", "-@dangerous", "+ping", "+info")


def read_only_user(admin: redis.Redis, url: str) -> redis.Redis:
    """A client of ``url`` as a user allowed only read commands (made by ``admin``), after
    checking that it cannot write."""
    admin.execute_command("ACL", "SETUSER", "watcher", "reset", "on", ">watch-pw", "~*", "&*", *READ_ONLY)
    host, port = url.split("//")[1].split("/")[0].split(":")
    watcher = redis.Redis(host=host, port=int(port), username="watcher", password="watch-pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        watcher.set("x", "1")
    return watcher


def read_cost(source: Source, client: redis.Redis, admin: redis.Redis) -> Callable[[], int]:
    """A counter of the Redis commands one ``source.read`` through ``client`` sends, from the
    server's own counts (read by ``admin``)."""
    def count() -> int:
        before = _calls(admin)
        source.read(client, time.time())
        return _calls(admin) - before - 1  # the INFO that measured it

    return count


def steady_cost(source: Source, client: redis.Redis, admin: redis.Redis) -> int:
    """The commands of a read once the reader has read what is there: a read first, so that the
    one measured finds nothing new (no started job whose times it has not read, no record added
    to a dead or finished set since), as a read in a steady queue does."""
    source.read(client, time.time())
    return read_cost(source, client, admin)()


def _calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


@contextmanager
def alerting(config: Config, tmp_path: Path) -> Iterator[tuple[ExporterServer, Prometheus]]:
    """The exporter watching what ``config`` names and a real Prometheus scraping it every second,
    evaluating the rules ``fairctl generate`` writes for that config."""
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    with server_for([(config, [config])], "127.0.0.1", 0) as server, \
            Prometheus([server.url.split("/")[2]], tmp_path, (rules,)) as prometheus:
        yield server, prometheus


# A small storm for fairctl loadgen: 200 newsletters from one tenant at once, and password resets
# from four shops, 2 a second for 20 s; at speed 20 it all lands within about a second.
STORM_BULK, STORM_INTERACTIVE, STORM_SPEED = 200, 41, "20"  # resets at 0 s, 0.5 s, ..., 20 s


def storm_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "storm.yaml"
    path.write_text(yaml.safe_dump({
        "name": "watched-storm", "duration": "20s", "seed": 3, "workers": [{"name": "theirs", "count": 2}],
        "streams": [
            {"name": "campaign", "task": "newsletter", "tenant": "flooder",
             "arrivals": {"burst": {"at": "0s", "count": STORM_BULK}}, "service_s": {"constant": 0.2}},
            {"name": "resets", "task": "password_reset", "tenant": {"pool": 4, "prefix": "shop-"},
             "arrivals": {"constant": {"rate_per_s": 2}}, "service_s": {"constant": 0.2}}]}))
    return path


def with_storm_rules(data: dict[str, Any], bulk: str, interactive: str) -> None:
    """Classification rules for the storm's tasks on a watch config's raw ``data``: newsletters to
    ``bulk``, everything else to ``interactive``."""
    data["classification"] = [{"tasks": ["newsletter"], "class": bulk, "reason": "campaign"},
                              {"class": interactive, "reason": "default"}]


def replay_storm(config: Path, tmp_path: Path, *more: str) -> str:
    """``fairctl loadgen`` of the storm into the system ``config`` watches, one live job per
    scenario job (service times 0.2 s x speed 20 = 0.01 s); its stderr (the routing lines)."""
    done = run_fairctl("loadgen", storm_scenario(tmp_path), "--config", config, "--speed", STORM_SPEED,
                       "--volume", "1", *more, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"enqueued {STORM_BULK + STORM_INTERACTIVE} jobs" in done.stdout, done.stdout
    return done.stderr


def scrape_cost(collector: Collector, admin: redis.Redis) -> int:
    """The Redis commands of a whole scrape of the exporter's ``collector`` once it has read what
    is there (a scrape first): its system's read and the one INFO for the master and the memory."""
    generate_latest(own_registry(collector))
    before = _calls(admin)
    generate_latest(own_registry(collector))
    return _calls(admin) - before - 1  # the INFO that measured it


def dead_lettered_config(data: dict[str, Any]) -> None:
    """JobsDeadLettered with a for: of 1 s on a watch config's raw ``data``, so that a job given up
    pages at once in the live tests."""
    data.setdefault("alerts", {})["for"] = {JOBS_DEAD_LETTERED: "1s"}


def first_read(server: ExporterServer) -> Scrape:
    """A scrape before the test's work: the exporter's first read, where its counters and waits
    start (Prometheus's first scrape may come seconds after it starts)."""
    return scrape(server.url)


def pages(prometheus: Prometheus, alert: str, timeout: float = 60) -> list[dict[str, str]]:
    """The labels of ``alert`` once it fires in ``prometheus``."""
    firing = f'ALERTS{{alertname="{alert}",alertstate="firing"}}'
    wait_for(lambda: prometheus.query(firing) != [], timeout, f"{alert} firing")
    return [labels for labels, _ in prometheus.query(firing)]


def scraped_by(prometheus: Prometheus, name: str, timeout: float = 30) -> None:
    """Waits until ``prometheus`` holds a sample of ``name``: a counter must be seen before it rises
    for its increase to count."""
    wait_for(lambda: prometheus.query(name) != [], timeout, f"Prometheus scraping {name}")


def assert_waits(seen: Scrape, queue: str, truth: list[float], tolerance: float) -> None:
    """The class's wait histogram holds exactly the waits ``truth`` (one per job started, from the
    system's own timestamps), each to within ``tolerance`` seconds, counted in the buckets they fall
    in (a wait that close to a bound may fall either side)."""
    assert seen.value(m.JOBS_WAIT.series("_count"), queue=queue) == len(truth), (seen.value(
        m.JOBS_WAIT.series("_count"), queue=queue), truth)
    assert abs(seen.value(m.JOBS_WAIT.series("_sum"), queue=queue) - sum(truth)) <= tolerance * len(truth), truth
    for bound in m.WAIT_BUCKETS:
        served = seen.value(m.JOBS_WAIT.series("_bucket"), queue=queue, le=floatToGoString(bound))
        surely = sum(1 for wait in truth if wait <= bound - tolerance)
        maybe = sum(1 for wait in truth if wait <= bound + tolerance)
        assert surely <= served <= maybe, (bound, served, truth)


def assert_memory_served(seen: Scrape, admin: redis.Redis) -> None:
    """Redis's memory, limit, policy and evictions as the watched Redis's own INFO tells them."""
    info = admin.info("memory", "stats")
    assert seen.value(m.REDIS_MEMORY_MAX.name) == int(info["maxmemory"])
    assert seen.series(m.REDIS_MEMORY_POLICY.name) == {((m.POLICY, info["maxmemory_policy"]),): 1.0}
    assert seen.value(m.REDIS_EVICTED_KEYS.name) == int(info["evicted_keys"])
    assert 0.5 <= seen.value(m.REDIS_MEMORY_USED.name) / int(info["used_memory"]) <= 2
