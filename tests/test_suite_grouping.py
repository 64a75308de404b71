"""The suite's own parallelism holds: ``--dist loadgroup`` keeps a group on one worker with the
pytest and pytest-xdist installed. The suite's modules share module-scoped servers and the stack
modules share ports, so a pair of versions that splits groups silently (pytest-xdist 3.8 under
pytest 9.2 does) would start servers twice and race stacks; this fails first, naming the cause.

And the tiers hold (docs/testing.md): a test on a server's fixture is ``live`` and a plain one is
not, and a test not marked live that starts a server fails, however it starts it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from .conftest import ROOT

GROUPED = '''
import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    pass
'''


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(GROUPED)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
         str(tmp_path)], check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    workers = set(re.findall(r"\[(gw\d+)\] .*PASSED", result.stdout))
    assert len(workers) == 1, ("tests of one xdist_group ran on several workers: this pytest and pytest-xdist "
                               "do not keep groups together (see the pin in pyproject.toml)\n" + result.stdout[-2000:])


# ------------------------------------------------------------------ the tiers (docs/testing.md)

TIERED = '''
import pytest


@pytest.fixture
def built_on_redis(redis_server):
    return redis_server


def test_plain():
    pass


def test_on_redis(redis_server):
    pass


def test_on_a_fixture_built_on_redis(built_on_redis):
    pass


def test_on_a_cluster(cluster):
    pass


@pytest.mark.live
def test_marked_live():
    pass


@pytest.mark.slow
def test_marked_slow():
    pass
'''

GUARDED = '''
import subprocess
import threading
import time

import pytest

from fairness_stack.servers import RedisServer


def test_starts_a_server():
    RedisServer().start()


def test_swallows_the_refusal():
    try:
        RedisServer().start()
    except Exception:
        pass


def test_a_child_starts_one():
    subprocess.run(["bash", "-c", "redis-server --version"], check=False, capture_output=True)


def test_a_thread_starts_one_while_the_test_waits():
    threading.Thread(target=lambda: RedisServer().start(), daemon=True).start()
    time.sleep(30)


def test_promtool_is_a_logic_test():
    subprocess.run(["promtool", "--version"], check=True, capture_output=True)


@pytest.mark.live
def test_marked_live_starts_one():
    subprocess.run(["redis-server", "--version"], check=True)
'''


def _suite(tmp_path: Path, **modules: str) -> dict[str, str]:
    """``modules`` beside a copy of the suite's conftest and its markers; the environment to run
    them in, where ``redis-server`` is a stand-in that only says it ran (no server starts here)."""
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in markers))
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    (bin_dir / "redis-server").chmod(0o755)
    # This test runs guarded too: its own stand-ins leave the PATH the inner run gets.
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not Path(p).name.startswith("fairctl-tier-guard-")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRCTL_")}
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    return env


def _pytest(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
                          check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_a_test_on_a_live_fixture_is_live_and_a_plain_one_is_not(tmp_path: Path) -> None:
    env = _suite(tmp_path, test_tiered=TIERED)
    tiers = {}
    for tier in ("live", "not live"):
        listed = _pytest(tmp_path, env, "--collect-only", "-q", "-m", tier)
        assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
        tiers[tier] = {line.split("::")[1] for line in listed.stdout.splitlines() if "::" in line}
    assert tiers == {"live": {"test_on_redis", "test_on_a_fixture_built_on_redis", "test_on_a_cluster",
                              "test_marked_live", "test_marked_slow"},
                     "not live": {"test_plain"}}


def test_a_test_not_marked_live_that_starts_a_server_fails(tmp_path: Path) -> None:
    env = _suite(tmp_path, test_guarded=GUARDED)
    started = time.monotonic()
    # Native tracebacks: pytest's own source excerpts re-parse the test file, and Python 3.11.2's
    # ast module sometimes fails that ("SystemError: AST constructor recursion depth mismatch").
    run = _pytest(tmp_path, env, "-rA", "--tb=native", "test_guarded.py")
    outcomes = dict(line.split(" ", 2)[:2][::-1] for line in run.stdout.splitlines()
                    if line.startswith(("PASSED ", "FAILED ", "ERROR ")))
    assert outcomes == {"test_guarded.py::test_starts_a_server": "FAILED",
                        "test_guarded.py::test_swallows_the_refusal": "FAILED",
                        "test_guarded.py::test_a_child_starts_one": "FAILED",
                        "test_guarded.py::test_a_thread_starts_one_while_the_test_waits": "FAILED",
                        "test_guarded.py::test_promtool_is_a_logic_test": "PASSED",
                        "test_guarded.py::test_marked_live_starts_one": "PASSED"}, run.stdout[-4000:]
    assert run.stdout.count("starts redis-server: it belongs to the live tier") >= 4, run.stdout[-4000:]
    assert (tmp_path / "ran").exists()  # the live test's redis-server ran; the others' never did
    assert time.monotonic() - started < 25, "the thread's refusal ended its test's wait"
