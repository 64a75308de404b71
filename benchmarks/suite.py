"""The whole benchmark: every measurement in one run, reported as in BENCHMARKS.md.

One redis-server holds the 10-tenant state and the 100,000-tenant / 1,000,000-job state side by
side (SLOWLOG on throughout); a second one, empty, is shared by fairctl, RQ and BullMQ for the
end-to-end comparison. Each figure is the median of several runs, taken in turns with its baseline.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from fairness_core import parse_duration
from fairness_core.config import POLICIES
from fairness_core.keys import Keys
from fairness_sim.scenario import DEFAULT_SCENARIO, load_scenario
from fairness_sim.simulator import simulate
from fairness_stack.servers import RedisServer

from . import (
    accounts, admission, charge, e2e, keyed, limits, memory, peers, pickup, script_latency, sharded, startup,
    throughput,
)
from .exporter_scrape import scrape
from .harness import Row, alternate, log, machine, per_second, server_name, server_us
from .load import PAYLOAD_BYTES, fill, scheduler, work_some
from .report import report_text
from .simulator import baseline as model_rate

SMALL, BIG = "small", "big"
REPORT = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


@dataclass(frozen=True)
class Sizes:
    """How much work each measurement does; ``full`` is what BENCHMARKS.md is written from."""

    repeats: int  # runs per measurement (the median is reported)
    jobs: int  # jobs per throughput run
    big_tenants: int  # the large state: tenants ...
    big_jobs_per_tenant: int  # ... and jobs each
    small_tenants: int  # the small state of the scrape comparison: tenants ...
    small_jobs_per_tenant: int  # ... and jobs each
    scrapes: int
    e2e_jobs: int  # jobs per end-to-end run
    concurrency: int  # worker slots of each system in the end-to-end runs (more than the 2 reserved for jobs:high)
    storm: str | None  # simulated duration of the storm (None: the scenario's own two hours)
    admission_limit: int  # tenants.max_queued of the live storm against a limit (it sends ten times that)
    pickups: int  # jobs each system picks up after an idle spell ...
    pickup_idle: float  # ... of this many seconds
    idle_window: float  # seconds an idle fleet's commands are counted over, sharded and not (row 9c)
    flood_samples: int  # interactive jobs per run under a bulk flood (row 10)


FULL = Sizes(repeats=5, jobs=5_000, big_tenants=100_000, big_jobs_per_tenant=10, small_tenants=10,
             small_jobs_per_tenant=10, scrapes=50, e2e_jobs=20_000, concurrency=4, storm=None,
             admission_limit=100_000, pickups=20, pickup_idle=5.0, idle_window=pickup.IDLE_WINDOW_S,
             flood_samples=100)
QUICK = Sizes(repeats=3, jobs=2_000, big_tenants=10_000, big_jobs_per_tenant=10, small_tenants=10,
              small_jobs_per_tenant=10, scrapes=20, e2e_jobs=5_000, concurrency=4, storm="20m",
              admission_limit=10_000, pickups=5, pickup_idle=5.0, idle_window=pickup.IDLE_WINDOW_S,
              flood_samples=50)
SMOKE = Sizes(repeats=1, jobs=200, big_tenants=200, big_jobs_per_tenant=5, small_tenants=5,
              small_jobs_per_tenant=4, scrapes=3, e2e_jobs=200, concurrency=4, storm="1m",
              admission_limit=200, pickups=2, pickup_idle=0.5, idle_window=1.0, flood_samples=5)
PRESETS = {"full": FULL, "quick": QUICK, "smoke": SMOKE}


def scheduler_rows(server: RedisServer, sizes: Sizes) -> list[Row]:
    """(1) one job per call, (1c) charged by runtime against by jobs, (1d) accounts, (1e, 1f)
    dispatch limits configured and holding 1,000 tenants, (2) batches of 10, (3) 100,000
    tenants against 10, (6) memory, (5) scrapes, (8) the longest script run and (8d) the commands a
    pop+ack runs; all on one redis-server."""
    client = redis.Redis.from_url(server.url)
    big_jobs = sizes.big_tenants * sizes.big_jobs_per_tenant
    log(f"loading {big_jobs:,} jobs for {sizes.big_tenants:,} tenants")
    per_job, per_list = memory.per_job(server.url, BIG, sizes.big_tenants, sizes.big_jobs_per_tenant)
    work_some(server.url, BIG, big_jobs)  # pops of 1,000 jobs, bounded by max_jobs: not part of (8)
    script_latency.start(client)
    small, big = scheduler(server.url, SMALL), scheduler(server.url, BIG)
    n, tenants = sizes.jobs, sizes.small_tenants
    log("pop+ack throughput against raw LPOP")
    raw, one, batched, separate, at_big = alternate(
        sizes.repeats,
        throughput.raw_lpop(client, "raw-list", n),
        throughput.scheduler_run(small, n, lambda s, j: throughput.drain(s, j, 1), tenants),
        throughput.scheduler_run(small, n, lambda s, j: throughput.drain(s, j, 10), tenants),
        throughput.scheduler_run(small, n, throughput.pop_then_ack, tenants),
        throughput.scheduler_run(big, n, lambda s, j: throughput.drain(s, j, 1)),
    )
    one_us, batch_us = (throughput.script_us(client, small, tenants, n, per_call) for per_call in (1, 10))
    lpop_us = server_us(client, "lpop", throughput.raw_lpop(client, "raw-list", n))
    log("pop+ack charged by runtime against by jobs")
    by_runtime = charge.row(server.url, tenants, n, sizes.repeats)
    log("pop+ack with accounts against the same ids without")
    with_accounts = accounts.row(server.url, n, sizes.repeats)
    log("pop+ack with dispatch limits configured, and with 1,000 tenants held, against none")
    with_limits = limits.rows(server.url, n, sizes.repeats)
    log("exporter scrapes")
    small_jobs = sizes.small_tenants * sizes.small_jobs_per_tenant
    fill(server.url, "scrape-small", sizes.small_tenants, sizes.small_jobs_per_tenant)
    work_some(server.url, "scrape-small", small_jobs)
    few = scrape(server, "small", "scrape-small", sizes.small_tenants, sizes.small_jobs_per_tenant, sizes.scrapes)
    many = scrape(server, "large", BIG, sizes.big_tenants, sizes.big_jobs_per_tenant, sizes.scrapes)
    script_latency.sweeps(big, sizes.repeats * 10)
    slow = script_latency.longest(client, Keys(BIG).base, 1000)
    for run in slow.over:
        log(f"over 1 ms: {run}")
    log("pop+acks timed by redis-server's CPU time")
    assert server.process is not None
    cpu = script_latency.on_cpu(client, server.process.pid, big, sizes.jobs)
    log("commands each pop+ack's script runs, at 100,000 tenants and at 10")
    counted = sizes.jobs // 5
    big_commands = script_latency.commands(client, big, counted)
    throughput.refill(small, tenants, counted)
    small_commands = script_latency.commands(client, small, counted)
    log("the machine's own jitter: a fixed work unit on every core")
    machine_jitter = script_latency.jitter(sizes.jobs * 4)
    big_label = f"{sizes.big_tenants:,} tenants"
    slowest = ", ".join(f"{op} {us} µs" for op, us in sorted(slow.by_op.items(), key=lambda kv: -kv[1])[:4])
    return [
        Row("1", "pop+ack, one job per call (the ack rides with the next pop)", per_second(one),
            f"raw LPOP {per_second(raw)}", one / raw, "≥ 0.7", one / raw >= 0.7,
            f"in Redis: {one_us:.0f} µs per call (a pop and an ack), LPOP {lpop_us:.1f} µs"),
        Row("1b", "pop, then a separate ack call (two round trips per job)", per_second(separate),
            f"raw LPOP {per_second(raw)}", separate / raw, "informative", None),
        by_runtime,
        with_accounts,
        *with_limits,
        Row("2", "pop+ack, batches of 10 (max_jobs 10, tenants.batch 10)", per_second(batched),
            f"raw LPOP {per_second(raw)}", batched / raw, "≥ 4", batched / raw >= 4,
            f"in Redis: {batch_us:.0f} µs per call of 10 pops and 10 acks"),
        Row("3", f"pop+ack, one job per call, {big_label} with work", per_second(at_big),
            f"{tenants} tenants {per_second(one)}", at_big / one, "≥ 0.8", at_big / one >= 0.8),
        Row("5", f"exporter scrape, {big_label} / {big_jobs:,} jobs queued",
            f"{many.median_ms:.1f} ms median, {many.commands:.0f} Redis commands",
            f"{few.tenants} tenants / {few.jobs} jobs: {few.median_ms:.1f} ms, {few.commands:.0f} commands",
            many.median_ms / few.median_ms, "< 50 ms; commands ratio 1.0",
            many.median_ms < 50 and many.commands == few.commands,
            f"commands ratio {many.commands / few.commands:.2f}"),
        memory_row("6", f"Redis memory per queued job ({PAYLOAD_BYTES}-byte JSON payload, {big_label})", per_job, per_list),
        Row("8", f"longest scheduler script run, {big_label} (SLOWLOG)", f"{slow.longest_us} µs",
            "1 ms", slow.longest_us / 1000, "no run above 1 ms", slow.over_limit == 0,
            f"{slow.over_limit} runs above 1 ms; slowest: {slowest or 'none above the log threshold'}"),
        on_cpu_row(cpu, big_label),
        Row("8c", "the machine: a fixed work unit of Python CPU (no system calls) on every core at once",
            f"{machine_jitter.longest_us} µs longest", f"median {machine_jitter.median_us} µs",
            machine_jitter.longest_us / machine_jitter.median_us, "informative", None,
            f"{machine_jitter.runs:,} runs, {machine_jitter.over_1ms} above 1 ms, {machine_jitter.not_switched} of "
            "those never switched out"),
        Row("8d", f"Redis commands a pop+ack's script runs, {big_label} (INFO commandstats)",
            f"{big_commands.most} most, {big_commands.median:.0f} median",
            f"{tenants} tenants: {small_commands.most} most, {small_commands.median:.0f} median",
            big_commands.most / small_commands.most, "informative", None,
            f"{counted:,} calls of one job each at each size; the {tenants} tenants queue in one class, the "
            f"{sizes.big_tenants:,} in three that take turns, and a pop acking another class's job writes its "
            "in-flight counts apart (2 commands)"),
    ]


def on_cpu_row(cpu: script_latency.OnCpu | None, big_label: str) -> Row:
    """(8b) what of (8) is the script's work: the most CPU a pop+ack's span took on redis-server."""
    what = f"longest pop+ack on redis-server's CPU, {big_label} (schedstat)"
    if cpu is None:
        return Row("8b", what, "n/a", "1 ms", None, "informative", None, "no /proc schedstat on this system")
    return Row("8b", what, f"{cpu.longest_cpu_us} µs", "1 ms", cpu.longest_cpu_us / 1000, "informative", None,
               f"{cpu.calls:,} calls, {cpu.over_1ms} above 1 ms in SLOWLOG; the longest there {cpu.longest_us} µs: "
               f"{cpu.its_cpu_us} µs on the CPU, {cpu.its_wait_us} µs waiting for one")


def memory_row(number: str, what: str, per_job: float, per_list: float, notes: str = "") -> Row:
    return Row(number, what, f"{per_job:.0f} B", f"plain list {per_list:.0f} B", per_job / per_list, "≤ 2",
               per_job / per_list <= 2, notes)


def memory_row_on(binary: str, sizes: Sizes) -> Row:
    """(6b) row 6's memory on another server (``--memory-server``): on Redis 7.2 and newer, and
    Valkey, a list this short is one listpack, where Redis 7.0 keeps a quicklist and its node."""
    with RedisServer(binary=binary) as server:
        name = server_name(redis.Redis.from_url(server.url))
        log(f"memory per queued job on {name}")
        per_job, per_list = memory.per_job(server.url, BIG, sizes.big_tenants, sizes.big_jobs_per_tenant)
    return memory_row("6b", f"the same on {name}", per_job, per_list, f"`--memory-server {binary}`")


def storm_row(sizes: Sizes) -> Row:
    """(7) the marketing storm under the four policies, one after the other in this process."""
    scenario = load_scenario(DEFAULT_SCENARIO)
    if sizes.storm:
        scenario = replace(scenario, duration=parse_duration(sizes.storm, "storm"), expect={})
    totals, jobs = [], 0
    for i in range(max(1, sizes.repeats // 2)):
        log(f"storm, all four policies, run {i + 1}")
        runs = [simulate(scenario, policy) for policy in POLICIES]
        totals.append(sum(r.wall_s for r in runs))
        jobs = sum(r.jobs_started for r in runs)
    wall = statistics.median(totals)
    bare = statistics.median(model_rate("weighted-fair") for _ in range(sizes.repeats))
    return Row("7", f"simulated storm ({scenario.duration / 3600:.2f} h), four policies, {jobs:,} jobs started",
               f"{jobs / wall:,.0f} jobs/s, {wall:.1f} s for all four", f"bare model loop {per_second(bare)}",
               (jobs / wall) / bare, "well under a minute (< 30 s)", wall < 30)


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks") -> int:
    """The suite's command line (``prog`` names it in the usage lines: ``fairctl bench`` runs it
    too); the report goes to stdout unless ``--write`` or ``--out`` asks for a file, so that a
    trial run leaves the committed BENCHMARKS.md as it is."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full", help="sizes (default full)")
    parser.add_argument("--quick", action="store_const", const="quick", dest="preset", help="same as --preset quick")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--out", type=Path, default=None, help="write the Markdown report to this file (default: stdout)")
    output.add_argument("--write", action="store_true", help="write the report to BENCHMARKS.md at the top of the "
                       "repository (a full run's is committed there)")
    parser.add_argument("--peers", choices=["install", "installed", "none"], default="install",
                        help="install RQ and BullMQ when missing (default), use them only if installed, or skip them")
    parser.add_argument("--setup-peers", action="store_true", help="install the peers and exit")
    parser.add_argument("--sharded", action="store_true",
                        help="only the sharded queue on loopback clusters of 1, 2 and 3 masters (benchmarks/sharded.py): "
                        "its Markdown section to --out if given, else to stdout")
    parser.add_argument("--memory-server", metavar="BINARY", default=None,
                        help="also measure row 6 (memory per queued job) on this server binary, as row 6b: e.g. "
                        "Debian 12's valkey-server 8 from bookworm-backports, which stores a short list as one "
                        "listpack where Redis 7.0 adds a quicklist and its node")
    args = parser.parse_args(argv)
    if args.memory_server and shutil.which(args.memory_server) is None:
        parser.error(f"--memory-server: {args.memory_server} is no executable file (give a path, or a name on PATH)")
    if args.sharded:
        if args.write:
            parser.error("--write: --sharded measures a section of benchmarks/notes.md; print it, or give --out")
        return sharded.main(["--preset", args.preset] + (["--out", str(args.out)] if args.out else []))
    out = REPORT if args.write else args.out
    if args.setup_peers:
        found = peers.install(allowed=True)
        for name, why in found.missing.items():
            print(f"{name}: {why}", file=sys.stderr)
        return 1 if found.missing else 0
    sizes = PRESETS[args.preset]
    started = time.monotonic()
    rows, where = measure(sizes, peers.find(args.peers), args.memory_server)
    text = report_text(rows, where, args.preset, sizes.repeats, time.monotonic() - started)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        log(f"wrote {out} in {time.monotonic() - started:.0f} s")
    return 0


def measure(sizes: Sizes, found: peers.Peers, memory_server: str | None) -> tuple[list[Row], str]:
    """Every row, in the report's order, and the machine they were measured on."""
    with RedisServer() as server:
        where = machine(redis.Redis.from_url(server.url))
        rows = scheduler_rows(server, sizes)
    with RedisServer() as server:
        log("a storm against a queued-jobs limit")
        rows.append(admission.row(server.url, sizes.admission_limit, 10 * sizes.admission_limit))
        log("keyed submits against unkeyed ones")
        rows.append(keyed.row(server.url, sizes.jobs, sizes.repeats))
    rows += e2e.rows(sizes.e2e_jobs, sizes.concurrency, sizes.repeats, found)
    with RedisServer() as server:
        log("idle pickup and an idle fleet's commands, fairctl and BullMQ")
        rows += pickup.rows(server.url, found, slots=sizes.concurrency, samples=sizes.pickups, idle=sizes.pickup_idle)
        log(f"an idle fleet's commands on {pickup.SHARDS} shards and on one queue group")
        rows.append(pickup.sharded_idle_row(server.url, sizes.idle_window))
        log("an interactive job's wait under a bulk flood, default flags and --batch 1")
        rows.append(pickup.prefetch_row(server.url, sizes.concurrency, sizes.flood_samples, min(3, sizes.repeats)))
    if memory_server:
        rows.append(memory_row_on(memory_server, sizes))
    rows.append(storm_row(sizes))
    rows += startup.rows(sizes.repeats)
    rows.sort(key=lambda row: (int(row.number.rstrip("abcdefghijklmnopqrstuvwxyz")), row.number))  # 9b before 10
    return rows, where
