"""``fairctl worker --processes N``: N worker processes under one parent that register N x
concurrency slots (times the batch while they lease ahead), work jobs, pass each signal on once
and fail when a child fails; the children drain when the parent dies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from fairness_core import Queue
from fairness_stack.servers import RedisServer

from .support import spawn_worker, totals, wait_for, write_config

PROCESSES, CONCURRENCY, BATCH = 2, 2, 3


def _children(log: Path) -> list[int]:
    """The pids of the worker processes, from the parent's start line."""
    wait_for(lambda: "worker processes:" in log.read_text(), 60, "the parent to start its children")
    return [int(pid) for pid in re.search(r"started \d+ worker processes: ([\d ]+)", log.read_text())[1].split()]


def _one_slot_processes(redis_server: RedisServer, client: redis.Redis, tmp_path: Path, *,
                        start_new_session: bool = False) -> tuple[Queue, str, Path, subprocess.Popen[bytes]]:
    """PROCESSES worker processes of one slot each, once every one has registered: the scheduler,
    the key the handlers record to, the parent's log and the parent."""
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    key, log = f"{config.redis.prefix}:ran", tmp_path / "worker.log"
    proc = spawn_worker(path, log, key, redis_server.url, "--processes", str(PROCESSES), "--concurrency", "1",
                        start_new_session=start_new_session)
    try:
        wait_for(lambda: scheduler.snapshot().worker_slots == PROCESSES, 60, "every process to register")
    except BaseException:
        proc.kill()
        raise
    return scheduler, key, log, proc


def test_processes_register_their_slots_work_jobs_and_drain_on_sigterm(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    key, log = f"{config.redis.prefix}:ran", tmp_path / "worker.log"
    proc = spawn_worker(path, log, key, redis_server.url, "--processes", str(PROCESSES),
                        "--concurrency", str(CONCURRENCY), "--batch", str(BATCH))
    try:
        # no job has run yet: each slot leases one at a time, and registers one
        wait_for(lambda: scheduler.snapshot().worker_slots == PROCESSES * CONCURRENCY, 60,
                 "every process to register")
        assert len(_children(log)) == PROCESSES
        for i in range(40):
            scheduler.enqueue("sync_contacts", f"t{i % 4}", {"service_s": 0.01})
        wait_for(lambda: totals(scheduler)["processed"] == 40, 60, "the 40 jobs")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    assert scheduler.snapshot().worker_slots == 0, "every process unregistered"
    assert sorted(client.lrange(key, 0, -1)) == sorted(f"{n}:1".encode() for n in range(1, 41))
    assert log.read_text().count(" stopped") == PROCESSES


def test_the_children_dead_letter_unhandled_tasks_when_asked(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """``--unhandled dead-letter`` reaches the children: newsletters, which these handlers do not
    know, are dead-lettered at once by whichever process leased them, and none is given back."""
    path, config = write_config(tmp_path, redis_server.url)
    scheduler = Queue(config, client)
    key, log = f"{config.redis.prefix}:ran", tmp_path / "worker.log"
    proc = spawn_worker(path, log, key, redis_server.url, "--processes", str(PROCESSES), "--concurrency", "2",
                        "--unhandled", "dead-letter", handlers="tests.recording_handlers:password_reset_only")
    try:
        wait_for(lambda: scheduler.snapshot().worker_slots == PROCESSES * 2, 60, "every process to register")
        for i in range(12):
            scheduler.enqueue("newsletter", f"t{i % 4}")
        wait_for(lambda: totals(scheduler)["dead"] == 12, 60, "the 12 newsletters dead-lettered")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    assert {d["error"] for d in scheduler.dead_letters()} == {"no handler for task newsletter"}
    assert totals(scheduler)["unhandled"] == 0 and client.llen(key) == 0


def test_a_ctrl_c_reaches_each_process_once_so_running_jobs_finish(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    """A terminal sends SIGINT to the parent's whole process group; the children, in groups of
    their own, get it once from the parent: they drain (a second signal would abandon the job)."""
    scheduler, key, log, proc = _one_slot_processes(redis_server, client, tmp_path, start_new_session=True)
    try:
        scheduler.enqueue("password_reset", "t", {"service_s": 1.0})  # jobs:high: 2 slots are all reserved for it
        wait_for(lambda: totals(scheduler)["inflight"] == 1, 60, "the job to be leased")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log.read_text()
    assert client.lrange(key, 0, -1) == [b"1:1"]
    assert totals(scheduler)["processed"] == 1 and "second signal" not in log.read_text()


def test_a_child_that_dies_stops_the_others_and_fails_the_parent(
        redis_server: RedisServer, client: redis.Redis, tmp_path: Path) -> None:
    _, _, log, proc = _one_slot_processes(redis_server, client, tmp_path)
    try:
        os.kill(_children(log)[0], signal.SIGKILL)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert code == 1, text
    assert "exited with code -9; stopping the others" in text and text.count(" stopped") == PROCESSES - 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a parent's death is signalled by Linux only")
def test_children_drain_when_the_parent_is_killed(redis_server: RedisServer, client: redis.Redis,
                                                  tmp_path: Path) -> None:
    """The parent killed hard (no signal to pass on): Linux sends each child SIGTERM, and they
    drain and unregister instead of working on unsupervised."""
    scheduler, _, log, proc = _one_slot_processes(redis_server, client, tmp_path)
    try:
        children = _children(log)
        proc.kill()
        proc.wait(timeout=60)
        wait_for(lambda: scheduler.snapshot().worker_slots == 0, 60, "the children to unregister")
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for(lambda: log.read_text().count(" stopped") == PROCESSES, 60, "the children to stop")
    for pid in children:
        wait_for(lambda pid=pid: _gone(pid), 60, f"worker process {pid} to exit")


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie that nobody reaped yet (an orphan's new parent may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2, 0.5])
def test_a_ctrl_c_while_the_children_start_ends_like_any_command(
        redis_server: RedisServer, tmp_path: Path, delay: float) -> None:
    """Ctrl-C once the parent has started its children, while they are still importing: the
    children stop quietly, the parent says so in one line and exits 130, as every command does
    on Ctrl-C (a worker that had started, as above, drains and exits 0)."""
    path, config = write_config(tmp_path, redis_server.url)
    log = tmp_path / "worker.log"
    proc = spawn_worker(path, log, f"{config.redis.prefix}:ran", redis_server.url, "--processes", str(PROCESSES),
                        "--concurrency", "1", start_new_session=True)
    try:
        _children(log)  # the parent's first line: the children were just spawned
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text and "failed" not in text, text
    started = len(re.findall(r"INFO fairness_core\.worker: worker \S+: \d+ slots", text))
    if started == PROCESSES:  # every child was working already: each drained
        assert code == 0, text
    else:
        assert code == 130, text
        assert re.findall(r"^fairctl: .*$", text, re.M) == [
            f"fairctl: interrupted; stopped {PROCESSES} worker processes before they were all working"], text
