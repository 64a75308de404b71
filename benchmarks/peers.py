"""End-to-end jobs per second (enqueue -> worker -> ack, no-op jobs, same concurrency) for fairctl,
RQ and BullMQ on the same redis-server.

Each run starts the system's workers, waits until they are ready, then times from the first
enqueue to the last completion. The producer enqueues in chunks of 100 with each system's own
bulk call (fairctl's ``Queue.submit_many``, RQ's ``Queue.enqueue_many``, BullMQ's ``Queue.addBulk``), so the workers,
not the producer, set the pace. The peers are installed by :func:`install` into
``benchmarks/.peers/`` (git-ignored): RQ from PyPI into a virtualenv, BullMQ from npm, run with the
machine's Node.js (installed from Debian's packages when missing and running as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
import yaml

from fairness_core import Queue, redis_client
from fairness_core.jobs import SEP
from fairness_stack.servers import stop_process

from .load import EXAMPLE_CONFIG, TASKS, bench_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = HERE / ".peers"
SCRIPTS = HERE / "peers"
RQ_VENV = PEERS / "rq"
NODE_PREFIX = PEERS / "node"
# npm package -> the version installed. BullMQ 6 needs its Redis client installed beside it;
# ioredis 5, as ioredis 6 needs Node 20 and Debian 12's own Node is 18 (BullMQ takes ioredis >= 5).
NODE_PACKAGES = {"bullmq": "bullmq", "ioredis": "ioredis@5"}
CHUNK = 100
TENANTS = 10
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 300.0


@dataclass
class Peers:
    """Which peers can run here, and why not for the others."""

    rq_python: Path | None = None
    node: str | None = None
    missing: dict[str, str] = field(default_factory=dict)


def _run(command: list[str], **kwargs: object) -> str | None:
    """Run a set-up step; None when it worked, else the last line of its output."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f"`{' '.join(command[:3])}` failed: {lines[-1] if lines else f'exit {done.returncode}'}"


def install(*, allowed: bool) -> Peers:
    """Find the peers, installing what is missing when ``allowed``."""
    peers = Peers()
    rq_python = RQ_VENV / "bin" / "python"
    if not rq_python.exists() and allowed:
        error = _run([sys.executable, "-m", "venv", str(RQ_VENV)]) or _run([str(rq_python), "-m", "pip", "install", "-q", "rq"])
        if error:
            peers.missing["RQ"] = error
    if rq_python.exists() and not peers.missing.get("RQ"):
        peers.rq_python = rq_python
    else:
        peers.missing.setdefault("RQ", "not installed (run `python -m benchmarks --setup-peers`)")
    node = shutil.which("node")
    if node is None and allowed and os.geteuid() == 0:
        error = _run(["apt-get", "update", "-q"]) or _run(["apt-get", "install", "-y", "-q", "nodejs", "npm"])
        node = None if error else shutil.which("node")
        if error:
            peers.missing["BullMQ"] = error
    if node is None:
        peers.missing.setdefault("BullMQ", "Node.js not found (apt-get install -y nodejs npm)")
        return peers
    def installed() -> bool:
        return all((NODE_PREFIX / "node_modules" / package).exists() for package in NODE_PACKAGES)

    if not installed() and allowed:
        error = _run(["npm", "install", "--prefix", str(NODE_PREFIX), "--no-audit", "--no-fund", *NODE_PACKAGES.values()])
        if error:
            peers.missing["BullMQ"] = error
    if installed():
        peers.node = node
    else:
        peers.missing.setdefault("BullMQ", "bullmq not installed (run `python -m benchmarks --setup-peers`)")
    return peers


def find(mode: str) -> Peers:
    """The peers as ``--peers`` asks: ``install`` when missing, only those ``installed``, or ``none``."""
    if mode == "none":
        return Peers(missing={"RQ": "skipped (--peers none)", "BullMQ": "skipped (--peers none)"})
    return install(allowed=mode == "install")


def versions(peers: Peers) -> dict[str, str]:
    """Installed versions of the peers, for the table."""
    out = {}
    if peers.rq_python:
        out["RQ"] = subprocess.run([str(peers.rq_python), "-c", "import rq; print(rq.__version__)"],
                                   capture_output=True, text=True, check=False).stdout.strip()
    if peers.node:
        script = f"console.log(require('{NODE_PREFIX}/node_modules/bullmq/package.json').version)"
        out["BullMQ"] = subprocess.run([peers.node, "-e", script], capture_output=True, text=True,
                                       check=False).stdout.strip()
        out["Node.js"] = subprocess.run([peers.node, "--version"], capture_output=True, text=True,
                                        check=False).stdout.strip()
    return out


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        stop_process(process, timeout=10)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def fairctl(url: str, run: str, jobs: int, concurrency: int, batch: int | None = None, processes: int = 1,
            handlers: str = "fairctl.handlers:sleep_handlers") -> float:
    """Seconds for ``jobs`` jobs through one ``fairctl worker --concurrency N`` with its default
    lease-ahead, or ``--batch B`` (``--processes P``: P processes of ``concurrency`` slots each),
    no-op jobs unless ``handlers`` (a module:attribute the worker imports from the repository's
    root) do something."""
    config = bench_config(url, f"e2e-{run}")
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {"url": url, "prefix": config.redis.prefix}
    data["scheduler"]["budget_min_arrivals"] = config.scheduler.budget_min_arrivals
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        yaml.safe_dump(data, file)
    sched = Queue(config, redis_client(url))
    worker = subprocess.Popen(
        [sys.executable, "-m", "fairctl", "worker", "--config", file.name, "--handlers",
         handlers, "--concurrency", str(concurrency), *(["--batch", str(batch)] if batch else []),
         "--processes", str(processes)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: sched.snapshot().worker_slots >= processes * concurrency, "fairctl worker to register")
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            n = min(CHUNK, jobs - first)
            sched.submit_many(TASKS[(first // CHUNK) % len(TASKS)], f"tenant-{(first // CHUNK) % TENANTS}", [None] * n)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while processed(sched) < jobs:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("fairctl worker did not finish the jobs")
            time.sleep(0.01)
        return time.perf_counter() - started
    finally:
        _stop([worker])
        os.unlink(file.name)


def processed(sched: Queue) -> int:
    """Jobs the queue group has processed: its classes' counters, read with one HMGET, as cheap a
    check as the peers' (RQ's finished-registry count, BullMQ's completed count). A snapshot, ten
    script calls' worth of work, would take a few per cent of the machine from the run it times."""
    fields = [f"processed{SEP}{queue}" for queue in sched.config.class_names]
    return sum(int(n or 0) for n in sched.client.hmget(sched.keys.stats, fields))


def rq(peers: Peers, url: str, run: str, jobs: int, concurrency: int) -> float:
    """Seconds for ``jobs`` no-op jobs through ``concurrency`` RQ SimpleWorker processes."""
    assert peers.rq_python is not None
    queue = f"bench-{run}"
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS)}
    rq_bin = str(peers.rq_python.parent / "rq")
    workers = [subprocess.Popen([rq_bin, "worker", "--url", url, "--worker-class", "rq.worker.SimpleWorker",
                                 "--quiet", queue], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(concurrency)]
    try:
        done = subprocess.run([str(peers.rq_python), str(SCRIPTS / "rq_bench.py"), "run", url, queue, str(jobs),
                               str(concurrency)], env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              check=True)
        return float(done.stdout.strip().splitlines()[-1])
    finally:
        _stop(workers)


@contextmanager
def bullmq_worker(peers: Peers, script: str, url: str, queue: str, concurrency: int) -> Iterator[Callable[..., str]]:
    """A Node process running ``benchmarks/peers/<script>``'s ``worker`` mode (a BullMQ Worker of
    ``concurrency`` on ``queue``) until it printed "ready"; yields how to run another mode of the
    same script on the queue (its stdout), and stops the worker afterwards."""
    assert peers.node is not None
    node = peers.node
    env = {**os.environ, "NODE_PATH": str(NODE_PREFIX / "node_modules")}
    path = str(SCRIPTS / script)
    worker = subprocess.Popen([node, path, "worker", url, queue, str(concurrency)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != b"ready":
            raise RuntimeError("the BullMQ worker did not start")
        yield lambda mode, *args: subprocess.run([node, path, mode, url, queue, *args], env=env, capture_output=True,
                                                 text=True, timeout=RUN_TIMEOUT_S, check=True).stdout
    finally:
        _stop([worker])


def bullmq(peers: Peers, url: str, run: str, jobs: int, concurrency: int) -> float:
    """Seconds for ``jobs`` prioritized no-op jobs through one BullMQ worker of ``concurrency``."""
    with bullmq_worker(peers, "bullmq_bench.mjs", url, f"bench-{run}", concurrency) as run_mode:
        return float(run_mode("run", str(jobs)).strip().splitlines()[-1])


def flush(url: str) -> None:
    """Empty the shared redis-server between runs, so no system works next to another's leftovers."""
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
