"""The sharded queue (``redis.shards`` 6, ``redis.shard_hand`` 2) on loopback Redis Clusters of 1, 2
and 3 masters, driven by the same number of client processes, each with its own Queue.

- **Throughput**, enqueue and pop+ack measured separately: first every client submits its jobs one
  per call (``submit``: the hand's two shards read, then the enqueue script), all of jobs:medium
  over 10 tenants of its own, then every client pops and acks them one per call (``ack_and_pop``,
  the ack riding with the next pop). The three clusters run side by side and are measured in
  turns (1, 2, 3 masters, 1, 2, 3, ...), the median of each reported with its ratio to 1 master. Over each phase,
  the CPU time of the redis-servers and of the clients is read from ``/proc/<pid>/stat`` (utime +
  stime), and the machine's from ``/proc/stat``: the cores each side used, so the limit shows. The
  masters' commands per job (``INFO commandstats``) are reported too: FCALLs, and COMMAND GETKEYS
  as a check that the client finds an FCALL's slot itself (it should be 0).
- **Drift**, on the 3-master cluster, right after the throughput rounds and by the same client
  processes with the same schedulers (their views and class accounts carry over from the
  one-class throughput phases): a backlog in every class (the same number of tenants in each,
  all of the default tier, each with more jobs than it can be served), then the clients pop and ack
  part of it; the realised class shares fleet-wide against the weights, and each tenant's jobs
  against its fair share (its class's jobs over the class's tenants), min and max.

The config is the example one with ``arrival_budget`` and ``reserved_slots`` removed (a budget
demotes a class's jobs past its budget, which a throughput or share measurement must not do).

The clusters are fairness_stack's loopback ones (the slots split evenly over 1, 2 or 3 masters).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml

from fairness_core import parse_config, redis_client
from fairness_core.config import Config
from fairness_core.jobs import Lease
from fairness_core.queue import Queue
from fairness_stack.servers import RedisClusterServers

from .harness import log
from .load import payload

EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "fairness_core" / "examples" / "fairness.yaml"
SHARDS, HAND = 6, 2
PREFIX = "sharded"
MASTERS = (1, 2, 3)
TASKS = {"jobs:high": "password_reset", "jobs:medium": "sync_contacts", "jobs:low": "newsletter"}
# The throughput phases use one class, as benchmarks/throughput.py does.
THROUGHPUT_TASK = "sync_contacts"  # jobs:medium
TENANTS_PER_CLIENT = 10


@dataclass(frozen=True)
class Sizes:
    clients: int  # client processes per cluster (the same for every cluster)
    jobs: int  # jobs each client enqueues, then pops and acks, per round
    repeats: int  # rounds (each cluster measured once per round, in turns)
    tenants: int  # tenants per class in the drift backlog ...
    backlog: int  # ... each with this many jobs queued
    drift_pops: int  # jobs each client pops and acks from that backlog


FULL = Sizes(clients=4, jobs=1_500, repeats=3, tenants=20, backlog=400, drift_pops=2_000)
QUICK = Sizes(clients=4, jobs=1_000, repeats=3, tenants=10, backlog=200, drift_pops=500)
SMOKE = Sizes(clients=2, jobs=40, repeats=1, tenants=3, backlog=30, drift_pops=20)
PRESETS = {"full": FULL, "quick": QUICK, "smoke": SMOKE}


# ---------------------------------------------------------------------- clusters and config


class LoopbackCluster(RedisClusterServers):
    """A loopback Redis Cluster, with what the benchmark reads of it."""

    def command_calls(self) -> Counter[str]:
        """Commands run so far, by name (INFO commandstats), summed over the masters."""
        calls: Counter[str] = Counter()
        for node in self.nodes:
            with redis.Redis(port=node.port) as conn:
                for name, stats in conn.info("commandstats").items():
                    calls[name.removeprefix("cmdstat_")] += int(stats["calls"])
        calls.update(info=-len(self.nodes))  # this read's own INFO
        return calls

    def pids(self) -> list[int]:
        return [node.process.pid for node in self.nodes if node.process is not None]

    def shards_per_master(self) -> list[int]:
        """How many of the benchmark group's shards each master holds, most first (the layout's
        names, placed when the group was first used)."""
        held = Queue(bench_config(self.url), redis_client(self.url)).masters()
        return sorted([len(held.get(f"127.0.0.1:{node.port}", [])) for node in self.nodes], reverse=True)


def bench_config(url: str, prefix: str = PREFIX, shards: int = SHARDS, hand: int = HAND) -> Config:
    """The example config on ``url``, sharded, without arrival budgets or reserved slots."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["redis"].update(url=url, prefix=prefix, shards=shards, shard_hand=hand)
    for cls in data["classes"]:
        cls.pop("arrival_budget", None)
        cls.pop("reserved_slots", None)
    return parse_config(data)


# ---------------------------------------------------------------------- CPU accounting


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine, all cores."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class CpuSpan:
    """CPU used by the redis-servers, the clients and the whole machine over a span of wall time."""

    servers: list[int]
    clients: list[int]
    _start: tuple[float, int, int, tuple[int, int]] = field(default=(0.0, 0, 0, (0, 0)))
    cores: dict[str, float] = field(default_factory=dict)

    def begin(self) -> None:
        self._start = (time.monotonic(), sum(map(cpu_ticks, self.servers)), sum(map(cpu_ticks, self.clients)),
                       machine_ticks())

    def end(self) -> dict[str, float]:
        wall0, servers0, clients0, (busy0, _) = self._start
        wall = time.monotonic() - wall0
        hz = os.sysconf("SC_CLK_TCK")
        busy1, _ = machine_ticks()
        servers = (sum(map(cpu_ticks, self.servers)) - servers0) / hz / wall
        clients = (sum(map(cpu_ticks, self.clients)) - clients0) / hz / wall
        machine = (busy1 - busy0) / hz / wall
        self.cores = {"servers": servers, "clients": clients, "machine": machine,
                      "other": max(0.0, machine - servers - clients)}
        return self.cores


# ---------------------------------------------------------------------- client processes


def _client(url: str, index: int, conn: Any, barrier: Any) -> None:
    """One client process: its own Queue, running the phases the parent sends."""
    sched = Queue(bench_config(url), redis_client(url), seed=index)
    serial = 0
    while True:
        command, arg = conn.recv()
        if command == "stop":
            return
        if command == "enqueue":  # ``arg`` jobs of jobs:medium, one per call, over this client's tenants
            jobs = [(THROUGHPUT_TASK, f"c{index}-t{n % TENANTS_PER_CLIENT}") for n in range(arg)]
            barrier.wait()
            started = time.perf_counter()
            for task, tenant in jobs:
                sched.submit(task, tenant, payload(serial))
                serial += 1
            conn.send((started, time.perf_counter(), len(jobs), None))
        elif command == "drain":  # pop and ack up to ``arg`` jobs, one per call
            barrier.wait()
            started = time.perf_counter()
            done = _pop_ack(sched, arg)
            conn.send((started, time.perf_counter(), sum(done.values()), None))
        elif command == "backlog":  # ``arg``: (tenants this client loads, jobs each), submit_many by tenant
            tenants, per = arg
            for queue, tenant in tenants:
                sched.submit_many(TASKS[queue], tenant, [payload(n) for n in range(per)])
            conn.send((0.0, 0.0, len(tenants) * per, None))
        elif command == "shares":  # pop and ack ``arg`` jobs; report them by (class, tenant)
            barrier.wait()
            started = time.perf_counter()
            done = _pop_ack(sched, arg)
            conn.send((started, time.perf_counter(), sum(done.values()), dict(done)))


def _pop_ack(sched: Queue, jobs: int) -> Counter[tuple[str, str]]:
    """Pop and ack up to ``jobs`` jobs one per call, each ack riding with the next pop; stops early
    only when a pop finds nothing twice with a fresh view of the shards."""
    done: Counter[tuple[str, str]] = Counter()
    leases: list[Lease] = []
    empty = count = 0
    while count < jobs:
        leases = sched.ack_and_pop(leases, 1).leases
        if not leases:
            empty += 1
            if empty >= 2:
                break
            sched.loads(fresh=True)
            continue
        empty = 0
        count += len(leases)
        for lease in leases:
            done[(lease.queue, lease.tenant)] += 1
    for lease in leases:
        sched.ack(lease)
    return done


class Fleet:
    """``clients`` client processes on one cluster, started once and driven phase by phase."""

    def __init__(self, cluster: LoopbackCluster, clients: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.cluster = cluster
        self.barrier = ctx.Barrier(clients + 1)
        self.pipes, self.processes = [], []
        for i in range(clients):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_client, args=(cluster.url, i, child, self.barrier), daemon=True)
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def run(self, command: str, args: list[Any], *, timed: bool = True) -> tuple[list[Any], Phase]:
        """Send each client its phase, start them together, and return their replies, the cores each
        side used over the phase and the commands the masters ran."""
        for pipe, arg in zip(self.pipes, args):
            pipe.send((command, arg))
        span = CpuSpan(self.cluster.pids(), [p.pid for p in self.processes if p.pid is not None])
        calls = self.cluster.command_calls()
        if timed:
            self.barrier.wait()
        span.begin()
        replies = [pipe.recv() for pipe in self.pipes]
        cores = span.end()
        after = self.cluster.command_calls()
        jobs = sum(r[2] for r in replies)
        commands = {name: (after[name] - calls.get(name, 0)) / max(1, jobs) for name in after}
        return replies, Phase(jobs, aggregate_rate(replies) if timed and jobs else 0.0, cores, commands)

    def close(self) -> None:
        for pipe, process in zip(self.pipes, self.processes):
            try:
                pipe.send(("stop", None))
            except OSError:
                pass
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()


@dataclass(frozen=True)
class Phase:
    """One timed phase on one cluster: jobs, the fleet's rate, the cores used (servers, clients,
    the machine and the rest of it) and the masters' commands per job, by name."""

    jobs: int
    rate: float
    cores: dict[str, float]
    commands: dict[str, float]

    def cpu_us(self, side: str) -> float:
        """Microseconds of CPU per job spent by one side (``servers`` or ``clients``)."""
        return self.cores[side] / self.rate * 1e6 if self.rate else 0.0


def aggregate_rate(replies: list[Any]) -> float:
    """Jobs per second of the whole fleet: every client's jobs over the span from the first start
    to the last finish."""
    started = min(r[0] for r in replies)
    finished = max(r[1] for r in replies)
    return sum(r[2] for r in replies) / (finished - started)


# ---------------------------------------------------------------------- the measurements


@dataclass
class Throughput:
    masters: int
    shards_per_master: list[int]
    phases: dict[str, list[Phase]] = field(default_factory=lambda: {"enqueue": [], "drain": []})

    def rate(self, phase: str) -> float:
        return statistics.median(p.rate for p in self.phases[phase])

    def median(self, phase: str, value: Callable[[Phase], float]) -> float:
        return statistics.median(value(p) for p in self.phases[phase])


@dataclass
class Drift:
    weights: dict[str, float]  # normalised
    shares: dict[str, float]  # realised, fleet-wide
    tenant_min: float  # a tenant's jobs / its fair share, lowest ...
    tenant_max: float  # ... and highest, over every tenant of every class
    per_class: dict[str, tuple[float, float]]  # the same, per class
    jobs: int
    still_backlogged: bool  # every tenant still had jobs queued at the end


def measure_throughput(fleets: dict[int, Fleet], sizes: Sizes) -> dict[int, Throughput]:
    results = {m: Throughput(m, fleet.cluster.shards_per_master()) for m, fleet in fleets.items()}
    for masters, fleet in fleets.items():  # warm-up, not counted: the function libraries load, connections open
        log(f"sharded: warm-up, {masters} master(s)")
        warm = max(10, sizes.jobs // 10)
        fleet.run("enqueue", [warm] * sizes.clients)
        fleet.run("drain", [warm] * sizes.clients)
    for round_ in range(sizes.repeats):
        for masters, fleet in fleets.items():
            log(f"sharded: round {round_ + 1}/{sizes.repeats}, {masters} master(s): enqueue, then pop+ack")
            for phase in ("enqueue", "drain"):
                results[masters].phases[phase].append(fleet.run(phase, [sizes.jobs] * sizes.clients)[1])
    return results


def measure_drift(fleet: Fleet, sizes: Sizes) -> Drift:
    config = bench_config(fleet.cluster.url)
    sched = Queue(config, redis_client(fleet.cluster.url))
    tenants = [(queue, f"{queue.split(':')[1]}-{n}") for queue in TASKS for n in range(sizes.tenants)]
    log(f"sharded: drift, loading {len(tenants) * sizes.backlog:,} jobs for {len(tenants)} tenants")
    parts = [tenants[i::sizes.clients] for i in range(sizes.clients)]
    fleet.run("backlog", [(part, sizes.backlog) for part in parts], timed=False)
    log(f"sharded: drift, {sizes.clients} clients pop and ack {sizes.clients * sizes.drift_pops:,} jobs")
    replies, _ = fleet.run("shares", [sizes.drift_pops] * sizes.clients)
    done: Counter[tuple[str, str]] = Counter()
    for reply in replies:
        done.update(reply[3])
    total = sum(done.values())
    weight = {c.name: float(c.weight) for c in config.classes}
    weights = {c: w / sum(weight.values()) for c, w in weight.items()}
    by_class = Counter()
    for (queue, _), n in done.items():
        by_class[queue] += n
    shares = {c: by_class[c] / total for c in weights}
    per_class = {}
    ratios = []
    for queue in TASKS:
        names = [t for q, t in tenants if q == queue]
        fair = by_class[queue] / len(names)
        got = [done[(queue, t)] / fair for t in names] if fair else [0.0]
        per_class[queue] = (min(got), max(got))
        ratios += got
    loads = sched.loads(fresh=True)
    backlogged = True
    for queue, tenant in tenants:
        held = 0
        for i in range(len(loads)):
            held += int(sched.client.zscore(sched.shard(i).keys.class_key(queue, "backlog"), tenant) or 0)
        backlogged &= held > 0
    return Drift(weights, shares, min(ratios), max(ratios), per_class, total, backlogged)


# ---------------------------------------------------------------------- the report


PHASES = {"enqueue": "enqueue, one job per call", "drain": "pop+ack, one job per call"}


def section(preset: str, sizes: Sizes, results: dict[int, Throughput], drift: Drift, elapsed_s: float) -> str:
    lines = [
        (f"Measured by `python -m benchmarks --sharded --preset {preset}` on {time.strftime('%Y-%m-%d %H:%M %Z')} in "
        f"{elapsed_s / 60:.1f} minutes: one logical queue of {SHARDS} shards (shard_hand {HAND}), "
        f"{sizes.clients} client processes on each cluster, each with its own Queue; "
        f"{sizes.clients} x {sizes.jobs:,} jobs per phase, median of {sizes.repeats} rounds taken in turns "
        f"(1, 2, 3 masters, 1, 2, 3, ...). Load average {os.getloadavg()[0]:.2f} at the end."),
        "",
        ("| phase | masters | shards per master | fleet rate | ratio to 1 master | cores used: redis-servers / "
        "clients / rest of the machine | CPU per job: redis-servers / clients | commands per job at the masters: "
        "FCALL / COMMAND GETKEYS |"),
        "| --- | ---: | --- | ---: | ---: | --- | --- | --- |",
    ]
    for phase, what in PHASES.items():
        base = results[1].rate(phase)
        for masters, r in sorted(results.items()):
            cores = {k: r.median(phase, lambda p, k=k: p.cores[k]) for k in ("servers", "clients", "other")}
            cmds = [r.median(phase, lambda p, k=k: p.commands.get(k, 0.0)) for k in ("fcall", "command|getkeys")]
            lines.append(
                f"| {what} | {masters} | {'-'.join(map(str, r.shards_per_master))} | {r.rate(phase):,.0f} jobs/s "
                f"| {r.rate(phase) / base:.2f} | {cores['servers']:.2f} / {cores['clients']:.2f} / "
                f"{cores['other']:.2f} | {r.median(phase, lambda p: p.cpu_us('servers')):.0f} µs / "
                f"{r.median(phase, lambda p: p.cpu_us('clients')):.0f} µs | {cmds[0]:.2f} / {cmds[1]:.2f} |")
    lines += [
        "",
        (f"Drift on the 3-master cluster: {sizes.tenants} tenants per class (default tier), {sizes.backlog} jobs "
        f"each queued, {drift.jobs:,} popped and acked one per call by the {sizes.clients} clients, each keeping the "
        "Queue (view and class account) of the throughput rounds, which served one class; every tenant "
        f"still had jobs queued at the end: {'yes' if drift.still_backlogged else '**no**'}."),
        "",
        "| class | weight share | realised share | realised / weight | tenant share / fair share, min | max |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for queue, w in drift.weights.items():
        low, high = drift.per_class[queue]
        lines.append(f"| {queue} | {w:.3f} | {drift.shares[queue]:.3f} | {drift.shares[queue] / w:.2f} "
                     f"| {low:.2f} | {high:.2f} |")
    lines.append(f"| all tenants | | | | {drift.tenant_min:.2f} | {drift.tenant_max:.2f} |")
    return "\n".join(lines) + "\n"


def run(preset: str) -> str:
    """Start the three clusters and their fleets, measure, and return the Markdown section."""
    sizes = PRESETS[preset]
    started = time.monotonic()
    with ExitStack() as stack:
        fleets: dict[int, Fleet] = {}
        for masters in MASTERS:
            log(f"sharded: starting a loopback cluster of {masters} master(s) and {sizes.clients} clients")
            cluster = stack.enter_context(LoopbackCluster(masters))
            fleet = Fleet(cluster, sizes.clients)
            stack.callback(fleet.close)
            fleets[masters] = fleet
        results = measure_throughput(fleets, sizes)
        drift = measure_drift(fleets[3], sizes)
    return section(preset, sizes, results, drift, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sharded", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--out", type=Path, help="write the Markdown section here (default: stdout)")
    args = parser.parse_args(argv)
    text = run(args.preset)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
