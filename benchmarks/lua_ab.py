"""Row 1's loop (pop+ack, one job per call) for two checkouts of fairctl, in turns on one redis-server.

What a change to the scheduler's Lua is worth, measured as BENCHMARKS.md's row 1 measures it: each
checkout runs in a process of its own (so each imports its own ``fairness_core`` and loads its own
library), on a prefix of its own, and the rounds take turns (old, new, raw ``LPOP``, old, new, ...),
so a burst of load from elsewhere hits all three. Each round queues ``--jobs`` jobs over
``--tenants`` tenants of one class, then drains them one per call, each call acking the job of the
call before; it reports jobs per second, the microseconds Redis spent per ``FCALL`` (``INFO
commandstats``, wall time) and the CPU its main thread spent per ``FCALL`` (``INFO cpu``: the socket
reads and writes included, the time it waited for a core left out, so the steadier figure on a
loaded machine). Make the old checkout with ``git worktree add --detach DIR COMMIT``::

    python -m benchmarks.lua_ab --old /tmp/ab-old --rounds 7

On a shared machine the times move by more than most changes to the Lua are worth. With
``--callgrind`` it counts instead the instructions redis-server runs inside ``FCALL`` per pop+ack
(valgrind's callgrind, collecting only in ``fcallCommand``), the same from run to run: redis-server
runs under valgrind, each checkout in turn drains ``--jobs`` jobs (300 is plenty) after a warm-up.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from fairness_stack.servers import RedisServer, free_port

# Run in each checkout (its directory first on sys.path): one line "run JOBS" in, one JSON line out.
CHILD = r"""
import json, sys
import redis
from benchmarks.harness import rate
from benchmarks.load import scheduler
from benchmarks.throughput import drain, raw_lpop, refill
url, prefix, tenants = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = redis.Redis.from_url(url)
def totals():
    stats = client.info("commandstats").get("cmdstat_fcall", {"usec": 0, "calls": 0})
    cpu = client.info("cpu")
    used = cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"]
    return int(stats["usec"]), int(stats["calls"]), used
sched = scheduler(url, prefix) if prefix != "raw" else None
for line in sys.stdin:
    jobs = int(line.split()[1])
    if sched is None:
        out = {"rate": raw_lpop(client, "ab-raw-list", jobs)(), "us": 0.0, "cpu": 0.0}
    else:
        refill(sched, tenants, jobs)
        before = totals()
        took = rate(jobs, lambda: drain(sched, jobs, 1))
        after = totals()
        calls = max(1, after[1] - before[1])
        out = {"rate": took, "us": (after[0] - before[0]) / calls, "cpu": (after[2] - before[2]) * 1e6 / calls}
    print(json.dumps(out), flush=True)
"""


# Run in each checkout under --callgrind: warm up, zero the counts, drain, dump the counts as TAG.
CALLGRIND_CHILD = r"""
import subprocess, sys
from benchmarks.load import scheduler
from benchmarks.throughput import drain, refill
url, prefix, tenants, pid, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
sched = scheduler(url, prefix)
refill(sched, tenants, 100 + jobs)
drain(sched, 100, 1)
subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
drain(sched, jobs, 1)
subprocess.run(["callgrind_control", "-d", prefix, pid], check=True, capture_output=True)
"""


def instructions(trees: dict[str, Path], jobs: int, tenants: int) -> dict[str, float]:
    """Instructions redis-server ran inside FCALL per call of row 1's loop, for each checkout."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="lua-ab-callgrind-") as directory:
        port = free_port()
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--toggle-collect=fcallCommand",
             f"--callgrind-out-file={directory}/callgrind.%p", shutil.which("redis-server") or "redis-server",
             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory)
        try:
            client = redis.Redis(port=port)
            for _ in range(600):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            for name, tree in trees.items():
                subprocess.run([sys.executable, "-c", CALLGRIND_CHILD, f"redis://127.0.0.1:{port}/0", f"ab-{name}",
                                str(tenants), str(server.pid), str(jobs)],
                               cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)), check=True)
                dump = max(glob.glob(f"{directory}/callgrind.{server.pid}.*"), key=os.path.getmtime)
                with open(dump, encoding="utf-8") as lines:
                    total = next(int(line.split()[1]) for line in lines if line.startswith(("summary:", "totals:")))
                out[name] = total / (jobs + 1)  # the drain's last call acks alone
        finally:
            server.terminate()
            server.wait(timeout=60)
    return out


def child(tree: Path, url: str, prefix: str, tenants: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.Popen([sys.executable, "-c", CHILD, url, prefix, str(tenants)], cwd=tree, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def ask(process: subprocess.Popen[str], jobs: int) -> dict[str, float]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(f"run {jobs}\n")
    process.stdin.flush()
    line = process.stdout.readline()
    if not line:
        raise RuntimeError("a benchmark process exited")
    return json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout measured (default: this one)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per round and side")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--callgrind", action="store_true",
                        help="count redis-server's instructions per pop+ack instead of timing (needs valgrind)")
    args = parser.parse_args()
    if args.callgrind:
        counted = instructions({"old": args.old.resolve(), "new": args.new.resolve()}, args.jobs, args.tenants)
        for name, count in counted.items():
            print(f"{name}: {count:,.0f} instructions in Redis per pop+ack (FCALL, {args.jobs} calls)")
        print(f"new/old: {counted['new'] / counted['old']:.3f}")
        return
    with RedisServer() as server:
        sides = {"old": child(args.old.resolve(), server.url, "ab-old", args.tenants),
                 "new": child(args.new.resolve(), server.url, "ab-new", args.tenants),
                 "lpop": child(args.new.resolve(), server.url, "raw", args.tenants)}
        try:
            for process in sides.values():  # a warm-up round each: libraries loaded, code paths hot
                ask(process, min(args.jobs, 200))
            results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
            for n in range(args.rounds):
                for name, process in sides.items():
                    results[name].append(ask(process, args.jobs))
                print(f"round {n + 1}: " + ", ".join(
                    f"{name} {r[-1]['rate']:,.0f} jobs/s {r[-1]['us']:.1f} µs {r[-1]['cpu']:.1f} µs CPU"
                    for name, r in results.items()), file=sys.stderr, flush=True)
        finally:
            for process in sides.values():
                if process.stdin:
                    process.stdin.close()
                process.wait(timeout=30)
    med = {name: tuple(statistics.median(r[key] for r in rs) for key in ("rate", "us", "cpu"))
           for name, rs in results.items()}
    lpop = med["lpop"][0]
    print(f"{args.rounds} rounds of {args.jobs} jobs over {args.tenants} tenants, medians; load "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    for name in ("old", "new"):
        rate, us, cpu = med[name]
        best = min(r["us"] for r in results[name])
        print(f"{name}: {rate:,.0f} jobs/s, {us:.1f} µs in Redis per pop+ack (least {best:.1f}; {cpu:.1f} µs of "
              f"its main thread's CPU), {rate / lpop:.2f} of raw LPOP")
    print(f"raw LPOP: {lpop:,.0f} jobs/s; new/old: {med['new'][0] / med['old'][0]:.3f} jobs/s, "
          f"{med['new'][1] / med['old'][1]:.3f} µs, {med['new'][2] / med['old'][2]:.3f} CPU")


if __name__ == "__main__":
    main()
