"""Shared fixtures: a real redis-server per test module, a fresh queue group per test.

With ``FAIRCTL_TEST_REDIS_URL`` set (tests/test_cluster.py sets a ``redis+cluster://`` URL), the
``redis_server`` and ``client`` fixtures use that Redis instead, so the same suites run on a
Redis Cluster; each test's fresh key prefix then lands on whichever master owns its slot.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from fairness_core import Config, Scheduler, load_config, parse_config, redis_client
from fairness_stack.servers import RedisClusterServers, RedisServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "fairness.yaml"
REDIS_URL_VARIABLE = "FAIRCTL_TEST_REDIS_URL"
# The stem of the tests' key prefixes: a run pointed at a Redis another run also writes to (the
# cluster tests run suites in a subprocess on their module's cluster) takes a stem of its own.
PREFIX_STEM_VARIABLE = "FAIRCTL_TEST_PREFIX_STEM"
_prefixes = itertools.count()
# Modules whose tests start a whole stack (tests/test_drill.py, tests/test_interrupts.py): a stack
# prefers the compose ports (6379, 9090, ...), so two at once on one machine would race for them.
# The worker-crash test kills and respawns worker processes on a clock; it runs in the same group
# so that no stack starts beside it. The live charge test runs fairctl worker processes through
# some 20,000 timed jobs; it runs there too, so that neither slows the other.
STACK_MODULES = frozenset({"test_drill", "test_interrupts", "test_worker_crash", "test_charge_live"})
# Modules whose long tests may run beside anything and apart from each other: each test is a
# group of its own, so the workers share them out (the live drills mostly wait on their
# replay's clock; the sharded alert runs each take a minute, and a second cluster starts in 3 s).
SPREAD_MODULES = frozenset({"test_drill_live", "test_sharded_alerts_live"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup``: a module's tests run in one worker, as they
    share its module-scoped servers (and a ``GivenRedis``'s key prefixes count per process); the
    stack-starting modules share one group, so no two stacks start at once on the usual ports;
    the tests of SPREAD_MODULES are a group each. First of the hooks:
    xdist's own reads the groups in the same hook, and one that ran before these marks were set
    saw none, so modules were split over the workers (two set-ups of one module-scoped fixture
    at once, two stacks racing for the compose ports)."""
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__.rsplit(".", 1)[-1] if module is not None else item.nodeid
        group = "stacks" if name in STACK_MODULES else item.nodeid if name in SPREAD_MODULES else name
        item.add_marker(pytest.mark.xdist_group(group))


@dataclass(frozen=True)
class GivenRedis:
    """A Redis the test run was pointed at (``$FAIRCTL_TEST_REDIS_URL``), not started here."""

    url: str


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer | GivenRedis]:
    given = os.environ.get(REDIS_URL_VARIABLE)
    if given:
        yield GivenRedis(given)
        return
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    """A loopback 3-master Redis Cluster per test module."""
    with RedisClusterServers(3) as servers:
        yield servers


@pytest.fixture
def client(redis_server: RedisServer | GivenRedis) -> Iterator[redis.Redis]:
    conn = redis_client(redis_server.url)
    yield conn  # type: ignore[misc]
    conn.close()


@pytest.fixture
def example_config() -> Config:
    return load_config(EXAMPLE_CONFIG)


def make_config(**overrides: Any) -> Config:
    """The example config as a dict, with top-level sections replaced, and a fresh key prefix
    so tests sharing a redis-server never see each other's keys."""
    import yaml

    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"]["prefix"] = f"{os.environ.get(PREFIX_STEM_VARIABLE, 't')}{next(_prefixes)}"
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_config(data)


@pytest.fixture
def scheduler(client: redis.Redis) -> Scheduler:
    return Scheduler(make_config(), client)
