"""The worker's summary lines: every --log-every, jobs done, failed, retried, dead-lettered and
given back unhandled per class since the last line, and one line for the whole run when it stops."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from fairness_core import Lease, Queue
from fairness_core.worker import HandlerRegistry, Tally, Worker
from fairness_stack.servers import RedisServer

from .conftest import ROOT, GivenRedis, make_config
from .support import running, totals, wait_for, write_config

ENV = {k: v for k, v in os.environ.items() if not k.startswith("FAIRCTL_")}
SUMMARY = re.compile(r"worker \S+: (last \d+s|in all \d+s): (.*)")


def summaries(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [m.groups() for r in caplog.records if (m := SUMMARY.fullmatch(r.getMessage()))]


def test_tally_counts_from_many_threads_and_takes_them_afresh() -> None:
    tally = Tally()
    threads = [threading.Thread(target=lambda: [tally.count("jobs:low", "done") for _ in range(1000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally.count("jobs:high", "failed", "retried")
    first = tally.take()
    assert first[("jobs:low", "done")] == 8000
    assert Tally.line(first) == ("jobs:high: done 0, failed 1, retried 1, dead-lettered 0, unhandled 0; "
                                 "jobs:low: done 8000, failed 0, retried 0, dead-lettered 0, unhandled 0")
    assert Tally.line(tally.take()) == "no jobs settled"
    assert tally.total[("jobs:low", "done")] == 8000


def test_summary_lines_per_class_and_a_final_one(client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    scheduler = Queue(make_config(leases={"max_attempts": 2, "retry_backoff": "100ms"}), client)
    registry = HandlerRegistry()

    @registry.handler("password_reset")
    def ok(lease: Lease) -> None:
        pass

    @registry.handler("newsletter")
    def broken(lease: Lease) -> None:
        raise RuntimeError("smtp said no")

    for _ in range(3):
        scheduler.enqueue("password_reset", "t")
    scheduler.enqueue("newsletter", "t")
    expected = {("jobs:high", "done"): 3, ("jobs:low", "failed"): 2, ("jobs:low", "retried"): 1,
                ("jobs:low", "dead-lettered"): 1}
    caplog.set_level(logging.INFO, logger="fairness_core.worker")
    with running(Worker(scheduler, registry, concurrency=4, log_every=0.3)):  # more slots than reserved_slots
        wait_for(lambda: totals(scheduler)["dead"] == 1 and totals(scheduler)["processed"] == 3, 20, "4 settled jobs")
        # A job is in Redis's counters a moment before the worker counts it: the periodic lines
        # added up reach every settled job once, a line or two later.
        wait_for(lambda: counted(caplog) == expected, 10, "the periodic lines to count every settled job")
        time.sleep(1.0)  # more periodic lines: none counts a job twice
    assert counted(caplog) == expected
    kind, final = summaries(caplog)[-1]
    assert kind.startswith("in all") and final == ("jobs:high: done 3, failed 0, retried 0, dead-lettered 0, unhandled 0; "
                                                    "jobs:low: done 0, failed 2, retried 1, dead-lettered 1, unhandled 0")


def counted(caplog: pytest.LogCaptureFixture) -> dict[tuple[str, str], int]:
    """The periodic summary lines added up: (class, outcome) -> jobs, zeros left out."""
    out: dict[tuple[str, str], int] = {}
    for kind, text in summaries(caplog):
        if not kind.startswith("last"):
            continue
        for part in text.split("; "):
            if part == "no jobs settled":
                continue
            queue, _, figures = part.partition(": ")
            for figure in figures.split(", "):
                name, _, n = figure.rpartition(" ")
                out[queue, name] = out.get((queue, name), 0) + int(n)
    return {k: v for k, v in out.items() if v}


def test_log_every_zero_leaves_only_the_final_line(client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    scheduler = Queue(make_config(), client)
    scheduler.enqueue("password_reset", "t")
    caplog.set_level(logging.INFO, logger="fairness_core.worker")
    with running(Worker(scheduler, HandlerRegistry(fallback=lambda lease: None), log_every=0)):
        wait_for(lambda: totals(scheduler)["processed"] == 1, 20, "the job")
        time.sleep(0.5)
    assert [kind.split()[0] + " " + kind.split()[1] for kind, _ in summaries(caplog)] == ["in all"]


def test_fairctl_worker_logs_its_summary(tmp_path: Path, redis_server: RedisServer | GivenRedis) -> None:
    """``fairctl worker --log-every 1s`` on stderr, and its final line on SIGTERM."""
    path, config = write_config(tmp_path, redis_server.url)
    Queue(config, redis.Redis.from_url(config.redis.url)).enqueue("password_reset", "t", {"service_s": 0})
    worker = subprocess.Popen([sys.executable, "-m", "fairctl", "worker", "--config", str(path), "--log-every", "1s"],
                              cwd=ROOT, stderr=subprocess.PIPE, text=True, env=ENV)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_for(lambda: totals(Queue(config, redis.Redis.from_url(config.redis.url)))["processed"] == 1, 30, "the job")
        time.sleep(2.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    reader.join(timeout=10)
    text = "".join(lines)
    assert re.search(r"worker \S+: last [12]s: jobs:high: done 1, failed 0, retried 0, dead-lettered 0, unhandled 0\n", text), text
    assert re.search(r"worker \S+: in all \d+s: jobs:high: done 1, failed 0, retried 0, dead-lettered 0, unhandled 0\n", text), text
    bad = subprocess.run([sys.executable, "-m", "fairctl", "worker", "--log-every", "soon"], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=ENV)
    assert bad.returncode == 2 and bad.stderr.startswith("fairctl: error: --log-every: "), bad.stderr
