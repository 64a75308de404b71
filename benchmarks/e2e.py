"""End to end against RQ and BullMQ (rows 4 and 4b), and one worker's slots as threads or as
processes (rows 4c and 4d), all runs in turns on one redis-server.

Every system gets the same worker slots, and each runs with its defaults: users compare those.
Row 4 is one ``fairctl worker`` whose slots are threads, with its default flags (each slot leases
ahead within the prefetch bound: up to ten no-op jobs a pop), row 4b the same with ``--batch 1``
(one job per pop). Rows 4c and 4d give the same slots as processes of two (``--processes``)
against row 4's threads, which share Python's GIL: with no-op jobs (4c), and with jobs that
compute in Python (4d, :mod:`benchmarks.compute_handlers`), the case ``--processes`` is for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable

from fairness_stack.servers import RedisServer

from . import peers
from .compute_handlers import COMPUTE_S
from .harness import Row, log, per_second
from .report import table

ONE_AT_A_TIME = "fairctl --batch 1"  # row 4b: one job per pop
# Rows 4c and 4d: the slots as processes of this many slots each.
PER_PROCESS = 2
SPLIT = "fairctl --processes"
COMPUTING, COMPUTING_SPLIT = "fairctl, computing", "fairctl --processes, computing"
COMPUTE_HANDLERS = "benchmarks.compute_handlers:handlers"
COMPUTE_SHARE = 5  # the computing runs work a fifth of the jobs: each takes a millisecond of CPU

# Each row's target against each peer: its text, and the least ratio that meets it.
TARGETS = {("4", "RQ"): ("> 1", 1.0), ("4", "BullMQ"): ("≥ 2", 2.0),
           ("4b", "RQ"): ("> 1", 1.0), ("4b", "BullMQ"): ("≥ 0.9", 0.9)}
PEER_SETUP = {
    "RQ": "{c} `rq worker` processes (SimpleWorker: no fork per job); fairctl: one `fairctl worker {how}`",
    "BullMQ": "prioritized jobs (priority 1-3), one Worker of concurrency {c} on Node.js {node}",
}


def rows(jobs: int, concurrency: int, repeats: int, found: peers.Peers) -> list[Row]:
    """Rows 4 to 4d: ``jobs`` jobs through ``concurrency`` slots of each system, each figure the
    median of ``repeats`` runs, the systems and set-ups taking turns in each round."""
    n, c = jobs, concurrency
    processes = max(1, c // PER_PROCESS)
    split = f"--processes {processes} --concurrency {c // processes}"
    computed = max(1, n // COMPUTE_SHARE)
    runs: dict[str, Callable[[str, int], float]] = {
        "fairctl": lambda url, i: peers.fairctl(url, f"f{i}", n, c),
        ONE_AT_A_TIME: lambda url, i: peers.fairctl(url, f"fb{i}", n, c, batch=1),
        SPLIT: lambda url, i: peers.fairctl(url, f"fp{i}", n, c // processes, processes=processes),
        COMPUTING: lambda url, i: peers.fairctl(url, f"fc{i}", computed, c, handlers=COMPUTE_HANDLERS),
        COMPUTING_SPLIT: lambda url, i: peers.fairctl(url, f"fcp{i}", computed, c // processes, processes=processes,
                                                      handlers=COMPUTE_HANDLERS),
    }
    if found.rq_python:
        runs["RQ"] = lambda url, i: peers.rq(found, url, f"r{i}", n, c)
    if found.node:
        runs["BullMQ"] = lambda url, i: peers.bullmq(found, url, f"b{i}", n, c)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    with RedisServer() as server:
        for i in range(repeats):
            for name, run in runs.items():
                log(f"end to end: {name}, run {i + 1}")
                seconds[name].append(run(server.url, i))
                peers.flush(server.url)
    versions = peers.versions(found)
    done = {name: computed if name in (COMPUTING, COMPUTING_SPLIT) else n for name in runs}
    rate = {name: done[name] / statistics.median(s) for name, s in seconds.items()}
    out = []
    for number, worker, how, flags in (("4", "fairctl", "default flags", ""),
                                       ("4b", ONE_AT_A_TIME, "one job per pop, `--batch 1`", " --batch 1")):
        command = f"--concurrency {c}{flags}"
        for name in ("RQ", "BullMQ"):
            target, bar = TARGETS[number, name]
            if name in rate:
                ratio = rate[worker] / rate[name]
                out.append(Row(number, f"end to end, {n:,} no-op jobs, {c} worker slots each ({how}), vs {name} "
                               f"{versions.get(name, '')}", per_second(rate[worker]), f"{name} {per_second(rate[name])}",
                               ratio, target, ratio >= bar,
                               PEER_SETUP[name].format(c=c, node=versions.get("Node.js", ""), how=command)))
            else:
                out.append(Row(number, f"end to end ({how}) vs {name}", per_second(rate[worker]), f"{name}: not run",
                               None, target, None, found.missing.get(name, "")))
    for number, jobs_done, split_run, threads_run in (
            ("4c", f"{n:,} no-op jobs", SPLIT, "fairctl"),
            ("4d", f"{computed:,} jobs of {COMPUTE_S * 1000:g} ms of Python CPU each", COMPUTING_SPLIT, COMPUTING)):
        out.append(Row(number, f"end to end, {jobs_done}, {c} worker slots as `{split}`, vs the same slots as {c} "
                       "threads of one process", per_second(rate[split_run]), f"threads {per_second(rate[threads_run])}",
                       rate[split_run] / rate[threads_run], "informative", None,
                       f"default flags; the threads: `fairctl worker --concurrency {c}`"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e2e", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20000, as --preset full)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each system, in turns (default 5)")
    parser.add_argument("--concurrency", type=int, default=4, help="worker slots of each system (default 4)")
    parser.add_argument("--peers", choices=["install", "installed", "none"], default="install",
                        help="install RQ and BullMQ when missing (default), use them only if installed, or skip them")
    args = parser.parse_args(argv)
    found = peers.find(args.peers)
    start_load = os.getloadavg()[0]
    print(table(rows(args.jobs, args.concurrency, args.repeats, found)))
    print(f"\nload average {start_load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
