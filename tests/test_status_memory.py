"""``fairctl status``: jobs under classes the config does not name, clearly marked, and Redis's
memory against its limit and policy (live through the CLI, and rendered from hand-built values)."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from fairctl.status_view import class_statuses, memory_line, render
from fairness_core import MemoryInfo
from fairness_core.snapshot import UnconfiguredClass
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .support import run_fairctl, write_config
from .test_exporter_collector import idle_snapshot

MIB = 1048576


def test_unconfigured_classes_get_their_own_marked_table_with_what_to_do() -> None:
    config = make_config()
    rows = class_statuses(config, None, idle_snapshot(config), 3)
    old = UnconfiguredClass("jobs:bulk", depth=40, inflight=3, delayed=2, oldest_age=7260.0)
    text = render(rows, None, unconfigured=[old])
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split() == ["class", "(not", "configured)", "depth", "oldest", "in-flight", "delayed"]
    assert table[1].split() == ["jobs:bulk", "40", "2h1m", "3", "2"]
    assert "no worker takes these classes' queued jobs; move them with fairctl config apply FILE --move OLD=NEW" in text
    assert "not configured" not in render(rows, None), "nothing said when every class is configured"


def test_the_memory_line_names_the_limit_the_headroom_and_an_unsafe_policy() -> None:
    assert memory_line(MemoryInfo(50 * MIB, 100 * MIB, "noeviction", 0), 0.9) == (
        "redis memory: 50.0 MiB of maxmemory 100.0 MiB (50%); enqueues refused from 90% (redis.memory_headroom); "
        "maxmemory-policy noeviction")
    unlimited = memory_line(MemoryInfo(3 * MIB, 0, "allkeys-lru", 7), 0.9)
    assert unlimited.startswith("redis memory: 3.0 MiB, no maxmemory limit; maxmemory-policy allkeys-lru - UNSAFE")
    assert "CONFIG SET maxmemory-policy noeviction" in unlimited


def test_fairctl_status_shows_redis_memory(redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, _ = write_config(tmp_path, redis_server.url)
    client.config_set("maxmemory", 256 * MIB)
    try:
        table = run_fairctl("status", "--interval", "0", "--config", path)
        data = json.loads(run_fairctl("status", "--interval", "0", "--json", "--config", path).stdout)
    finally:
        client.config_set("maxmemory", 0)
    assert table.returncode == 0, table.stderr
    assert "of maxmemory 256.0 MiB" in table.stdout and "maxmemory-policy noeviction" in table.stdout
    assert data["redis_memory"]["maxmemory"] == 256 * MIB and data["redis_memory"]["memory_headroom"] == 0.9
    assert data["unconfigured_classes"] == []
