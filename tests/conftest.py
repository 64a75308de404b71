"""Shared fixtures: a real redis-server per test module, a fresh queue group per test; the tiers.

With ``FAIRCTL_TEST_REDIS_URL`` set (tests/test_cluster.py sets a ``redis+cluster://`` URL), the
``redis_server`` and ``client`` fixtures use that Redis instead, so the same suites run on a
Redis Cluster; each test's fresh key prefix then lands on whichever master owns its slot.

Tiers (docs/testing.md): a test is ``live`` when it uses a fixture that starts a server
(LIVE_FIXTURES, and every fixture built on one), or is marked ``live`` or ``slow``; every other
test is a logic test, and ``pytest -m "not live"`` runs those alone in about a minute. A test not
marked live that starts a redis-server, Prometheus or Alertmanager anyway (itself, or a command
it runs) fails, in every run, naming what it started: the tier guard below.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
from hypothesis import HealthCheck, settings

from fairness_core import Config, Queue, load_config, parse_config, redis_client
from fairness_stack.servers import RedisClusterServers, RedisServer

# The suite runs on shared, noisy machines, in three workers on two cores: an example that takes
# long there is the machine's doing, not the code's (speed targets live in benchmarks/). Tests
# that set their own settings keep every other field of this profile.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
# promtool and Prometheus are Go: by default each runs as many threads as there are cores, and in
# three workers on two cores those threads only queue for the same cores. One each spends 15-30%
# less CPU on a promtool run of the committed tests (a caller's own GOMAXPROCS is kept).
os.environ.setdefault("GOMAXPROCS", "1")

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
# replay's clock; the sharded alert runs each take a minute, and a second cluster starts in 3 s;
# the mutation run of the alert rules is split in three; the live dispatch limits' rate test
# watches a minute of starts, beside two tests of 6 to 20 s, each on a redis-server of its worker).
SPREAD_MODULES = frozenset({"test_drill_live", "test_sharded_alerts_live", "test_alert_mutation", "test_limits_live"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers, then the groups for pytest-xdist's ``--dist loadgroup``: a module's live tests
    run in one worker, as they share its module-scoped servers (and a ``GivenRedis``'s key
    prefixes count per process); the stack-starting modules share one group, so no two stacks
    start at once on the usual ports; the tests of SPREAD_MODULES are a group each. A logic test
    has no group (any worker takes it): it shares nothing with its module's other tests, unless a
    fixture of wider scope than the test (then it stays with its module, which computes it once).
    First of the hooks: ``-m`` deselects by the ``live`` marks in a later one, and xdist's own reads
    the groups in the same hook, and one that ran before these marks were set saw none, so modules
    were split over the workers (two set-ups of one module-scoped fixture at once, two stacks racing
    for the compose ports)."""
    for item in items:
        live = is_live(item)
        if live:
            item.add_marker(pytest.mark.live)
        module = getattr(item, "module", None)
        name = module.__name__.rsplit(".", 1)[-1] if module is not None else item.nodeid
        if name in SPREAD_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.nodeid))
        elif live or _shares_wider_fixtures(item):
            item.add_marker(pytest.mark.xdist_group("stacks" if name in STACK_MODULES else name))
        # else no group: xdist hands the test to any worker


def _shares_wider_fixtures(item: pytest.Item) -> bool:
    """The test uses a fixture of the suite's own (not a plugin's) scoped wider than one test."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.baseid and d.scope != "function"
                                    for defs in info.name2fixturedefs.values() for d in defs)


# The fixtures that start servers, wherever a module defines one: a fixture that requests one
# (``client``, ``scheduler``, a module's ``config_path``...) is in a test's closure with it, so
# its tests are live too. A new fixture that starts a server goes here (the tier guard says so).
LIVE_FIXTURES = frozenset({
    "redis_server", "cluster",  # above (tests/test_sharded_faults.py has a cluster of its own)
    "server",  # a module's own redis-server: tests/test_doc_examples.py, tests/test_sharded.py
    "own_redis", "debuggable_redis", "secure_redis",  # test_exporter, test_reliability, test_security
    "alertmanager",  # tests/test_compose.py: the real Alertmanager on the compose config
    "sentinel_group",  # tests/test_sentinel_live.py: a master, a replica and three sentinels
})


def is_live(item: pytest.Item) -> bool:
    """The live tier: the test uses a server-starting fixture, or is marked ``live`` (it starts
    something no fixture of LIVE_FIXTURES does) or ``slow`` (too slow for the fast tier though it
    starts no server: long simulations, the wheel's build)."""
    return (item.get_closest_marker("live") is not None or item.get_closest_marker("slow") is not None
            or not LIVE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


# The tier guard: the servers a test not marked live may not start. Promtool, amtool, git, a
# fairctl command that starts none of these (a worker refusing its arguments, ``simulate``) may.
LIVE_PROGRAMS = ("redis-server", "prometheus", "alertmanager", "prometheus-alertmanager")
# The stand-ins a guarded test's children find first on PATH (a ``fairctl demo`` or a script
# starting a RedisServer, or a bash line): each records what it was, and refuses.
SHIM = """#!/bin/sh
echo "$(basename "$0")" >> "$(dirname "$0")/started"
echo "$(basename "$0"): not started: a test not marked live may start no server (docs/testing.md)" >&2
exit 70
"""
_SHIMS = pytest.StashKey[Path]()
_STARTED = pytest.StashKey[list[str]]()


class LiveTierError(RuntimeError):
    """A test not marked live started a server."""


def refusal(item: pytest.Item, what: str) -> str:
    return (f"{item.nodeid} starts {what}: it belongs to the live tier. Mark it @pytest.mark.live, or "
            f"name the fixture that starts it in LIVE_FIXTURES (tests/conftest.py); see docs/testing.md")


def _shims(config: pytest.Config) -> Path:
    """This process's directory of stand-ins, made once and removed at exit."""
    if _SHIMS not in config.stash:
        directory = config.stash[_SHIMS] = Path(tempfile.mkdtemp(prefix="fairctl-tier-guard-"))
        config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
        for name in LIVE_PROGRAMS:
            (directory / name).write_text(SHIM)
            (directory / name).chmod(0o755)
    return config.stash[_SHIMS]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """A test not marked live runs guarded, set-up and teardown included, in every run: Popen
    refuses a server (in the main thread by raising, in another by interrupting the main one, so
    that no test waits forever on a server that never comes), and children find the stand-ins.
    Whatever was started fails the test (``pytest_runtest_makereport``), even if it caught the error."""
    if item.get_closest_marker("live") is not None:
        return (yield)
    shims = _shims(item.config)
    started = item.stash[_STARTED] = []
    real_init = subprocess.Popen.__init__
    in_main_thread = threading.current_thread() is threading.main_thread()  # as pytest-xdist runs tests

    def guarded_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        first = os.fsdecode(args if isinstance(args, (str, bytes, os.PathLike)) else args[0])
        program = os.path.basename(first.split()[0] if kwargs.get("shell") and first.split() else first)
        if program in LIVE_PROGRAMS:
            started.append(program)
            if in_main_thread and threading.current_thread() is not threading.main_thread():
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)  # wakes a sleep too
            raise LiveTierError(refusal(item, program))
        real_init(self, args, *rest, **kwargs)

    def interrupted(signum: int, frame: Any) -> None:
        raise LiveTierError(refusal(item, ", ".join(started)))

    previous = signal.signal(signal.SIGUSR1, interrupted) if in_main_thread else None
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{shims}{os.pathsep}{path}"
    subprocess.Popen.__init__ = guarded_init  # type: ignore[method-assign]
    try:
        return (yield)
    finally:
        subprocess.Popen.__init__ = real_init  # type: ignore[method-assign]
        os.environ["PATH"] = path
        if in_main_thread:
            signal.signal(signal.SIGUSR1, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fails the set-up, call or teardown of a guarded test in which a server was started."""
    report = yield
    started = item.stash.get(_STARTED, None)
    if started is None:
        return report
    log = _shims(item.config) / "started"
    if log.exists():
        started.extend(log.read_text().split())
        log.unlink()
    if started:
        report.outcome = "failed"
        report.longrepr = f"{refusal(item, ', '.join(dict.fromkeys(started)))}\n\n{report.longrepr or ''}".rstrip()
        started.clear()
    return report


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
def scheduler(client: redis.Redis) -> Queue:
    return Queue(make_config(), client)
