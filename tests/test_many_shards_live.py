"""Many shards on one Redis: a queue of 32 shards, worked by 4 ``fairctl worker`` processes and
served by one exporter, runs one function library and never fails a call. (Each shard used to
load a library of its own, and each load pruned the others past 8: 9 shards made 1,364 loads and
1,462 failed calls in 36 s.)"""

from __future__ import annotations

import threading
import time
import urllib.error
from pathlib import Path

import pytest

from fairness_core import redis_client
from fairness_core.library import NAME_PREFIX
from fairness_core.queue import Queue
from fairness_stack.servers import RedisServer, free_port

from .conftest import make_config
from .crash_support import TASKS, stop_all
from .exporter_support import fetch
from .support import spawn_exporter, spawn_worker, wait_for, write_config

pytestmark = pytest.mark.slow

SHARDS = 32
WORKERS = 4
RUN_S = 20.0  # after warm-up; the 60 s run gave the same figures (the notes of this change)


def serving(url: str) -> bool:
    """The exporter answers with its metrics; not yet listening is not yet serving (it starts
    beside four workers, and may bind its port after they have logged)."""
    try:
        return "fairness_exporter_redis_up" in fetch(url)
    except urllib.error.URLError:
        return False


def test_32_shards_on_one_redis_share_one_library_and_fail_no_call(tmp_path: Path) -> None:
    with RedisServer() as server:
        port = free_port()
        path, config = write_config(tmp_path, server.url, redis={"url": server.url, "prefix": make_config().redis.prefix,
                                                                   "shards": SHARDS, "shard_hand": 2})
        queue = Queue(config, redis_client(server.url))
        logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
        processes = [spawn_worker(path, log, "record", server.url, "--concurrency", "2") for log in logs]
        processes.append(spawn_exporter(path, tmp_path / "exporter.log", "--listen", f"127.0.0.1:{port}"))
        stop = threading.Event()
        queued = [0]

        def produce() -> None:
            n = 0
            while not stop.is_set():
                queue.submit_many(TASKS[n % len(TASKS)], f"tenant-{n % 200}", [{"service_s": 0.001}] * 5)
                queued[0] += 5
                n += 1
                stop.wait(0.02)

        producer = threading.Thread(target=produce, daemon=True)
        try:
            wait_for(lambda: all("slots" in log.read_text() for log in logs), 60, "the workers to start")
            wait_for(lambda: serving(f"http://127.0.0.1:{port}/metrics"), 60, "the exporter to serve")
            producer.start()
            time.sleep(3.0)  # warm-up: every process has loaded the library and stamped it
            client = redis_client(server.url)
            client.config_resetstat()
            started = time.monotonic()
            while time.monotonic() - started < RUN_S:
                assert "fairness_exporter_redis_up" in fetch(f"http://127.0.0.1:{port}/metrics")
                time.sleep(1.0)
            stats = client.info("commandstats")
            libraries = [entry[1] for entry in client.function_list(library=NAME_PREFIX + "*")]
        finally:
            stop.set()
            stop_all(processes)
    fcall = {name: stats.get(f"cmdstat_{name}", {}) for name in ("fcall", "fcall_ro")}
    calls = sum(stat.get("calls", 0) for stat in fcall.values())
    failed = sum(stat.get("failed_calls", 0) + stat.get("rejected_calls", 0) for stat in fcall.values())
    assert calls > 1000 and failed == 0, stats
    assert "cmdstat_function|load" not in stats, stats["cmdstat_function|load"]
    assert len(libraries) == 1, libraries
    for log in logs:
        assert "Traceback" not in log.read_text(), log.read_text()[-2000:]
    print(f"\n{SHARDS} shards, {WORKERS} workers and an exporter, {RUN_S:.0f}s: {calls} function calls, "
          f"{failed} failed, no library load, {len(libraries)} library; {queued[0]} jobs queued in all")
