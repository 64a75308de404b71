"""Helpers of the exporter's watch tests (tests/test_watch_*.py): the read-only Redis user the
docs tell teams to give it, the commands one read costs, and the exporter with a real Prometheus
on the generated rules."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from alerts.output import rules_text
from exporter.server import ExporterServer, watch_server
from exporter.sources.base import Source
from exporter.watch import watch_client
from fairness_core import Config

from .exporter_support import Prometheus

# What docs/watching.md tells a team to grant the exporter.
READ_ONLY = ("-@all", "+@read", "-@dangerous", "+ping")


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
    with watch_server(config, watch_client(config), "127.0.0.1", 0) as server, \
            Prometheus([server.url.split("/")[2]], tmp_path, (rules,)) as prometheus:
        yield server, prometheus
