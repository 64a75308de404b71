"""Helpers shared by the worker, CLI and exporter tests: config files for subprocesses, polling,
workers in threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from alerts import promtool
from fairness_core import Config, Queue, load_config
from fairness_core.worker import Worker

from .alert_mutation import pruned_copies
from .conftest import EXAMPLE_CONFIG, ROOT, make_config


def write_config(tmp_path: Path, redis_url: str, **sections: Any) -> tuple[Path, Config]:
    """The example config with ``sections`` merged in (a section that is no mapping, such as
    ``classes``, replaced) and a fresh key prefix, written to a file (subprocesses and CLI commands
    read files), and loaded back."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    fresh = {"redis": {"url": redis_url, "prefix": make_config().redis.prefix}}
    for key, value in {**fresh, **sections}.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    path = tmp_path / "fairness.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, load_config(path)


def run_fairctl(*args: str | Path, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``fairctl ARGS`` as a user runs it, with no ``FAIRCTL_*`` variable of the test run's leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRCTL_")}
    return subprocess.run([sys.executable, "-m", "fairctl", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False, env=env)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll until ``condition()``; the timeout only bounds a hung test, it is not a speed target."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def totals(scheduler: Queue) -> dict[str, int]:
    """depth, inflight, delayed and every lifecycle counter, summed over classes."""
    out: dict[str, int] = {}
    for view in scheduler.snapshot().classes.values():
        for name, value in {"depth": view.depth, "inflight": view.inflight, "delayed": view.delayed,
                            **view.counters}.items():
            out[name] = out.get(name, 0) + value
    return out


def spawn_worker(config_path: Path, log_path: Path, record_key: str, redis_url: str, *args: str,
                 handlers: str = "tests.recording_handlers:handlers",
                 start_new_session: bool = False) -> subprocess.Popen[bytes]:
    """``fairctl worker`` in its own process, working ``handlers`` (by default those of
    tests/recording_handlers.py, recording in ``record_key``); with ``start_new_session``, in a
    process group of its own that a test can signal as a terminal does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RECORD_KEY": record_key, "RECORD_REDIS_URL": redis_url}
    env.pop("FAIRCTL_REDIS_URL", None)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fairctl", "worker", "--config", str(config_path), "--handlers", handlers, *args],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=start_new_session,
        )


@contextmanager
def fleet(config_path: Path, tmp_path: Path, redis_url: str, record_key: str, processes: int, slots: int,
          handlers: str = "tests.recording_handlers:handlers") -> Iterator[list[Path]]:
    """``processes`` ``fairctl worker`` processes of ``slots`` slots each (:func:`spawn_worker`),
    logging to ``worker-<n>.log`` in ``tmp_path`` (yielded); stopped by SIGTERM, and each must
    exit 0 (it finished its running jobs and gave back the rest)."""
    logs = [tmp_path / f"worker-{i}.log" for i in range(processes)]
    procs = [spawn_worker(config_path, log, record_key, redis_url, "--concurrency", str(slots), "--log-every", "0",
                          handlers=handlers) for log in logs]
    try:
        yield logs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        try:
            for proc, log in zip(procs, logs):
                assert proc.wait(timeout=60) == 0, log.read_text()
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def spawn_exporter(config_path: Path, log_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``fairctl exporter`` in its own process, logging to ``log_path``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FAIRCTL_REDIS_URL", None)
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "fairctl", "exporter", "--config", str(config_path), *args],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


@contextmanager
def running(worker: Worker) -> Iterator[threading.Thread]:
    """Run ``worker`` in a thread (no signal handlers there); stop it and expect a clean exit."""
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(worker.run()), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert outcome == [True], "the worker settled every job before returning"


def promtool_passes_generated_tests(generated: Path, scratch: Path) -> str:
    """promtool on every test file of a generated alerts set, each against only the rules it reads
    (alert_mutation.pruned_copies: the same verdicts at a quarter of the CPU). The committed set runs
    whole in tests/test_alerts.py, as a user runs it; a set generated for another config runs pruned
    here."""
    return promtool.test_rules(*pruned_copies(generated, scratch))
