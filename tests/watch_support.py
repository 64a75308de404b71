"""Helpers of the exporter's watch tests (tests/test_watch_*.py): the read-only Redis user the
docs tell teams to give it, the commands one read costs, the exporter with a real Prometheus on
the generated rules, and ``fairctl loadgen`` replaying a small storm into the watched system."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from alerts.output import rules_text
from exporter.server import ExporterServer, server_for
from exporter.sources.base import Source
from fairness_core import Config

from .exporter_support import Prometheus
from .support import run_fairctl

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
