"""How much a scrape costs as the queues grow: 10 tenants / 100 jobs, 10,000 / 100,000 and
100,000 tenants / 1,000,000 jobs, on a redis-server of its own.

For each size it loads the jobs (benchmarks.load: tenants spread over the classes; some jobs
processed, some in flight, so every structure the snapshot reads is populated), then scrapes the exporter over HTTP
and reports the median and p95 scrape time, the series served and the Redis commands per scrape
(``INFO commandstats`` deltas: the script call and every command the script runs inside Redis).
The ratios are the point: a scrape must stay O(classes + k log n), whatever the tenant count.

    python -m benchmarks.exporter_scrape [--tenants 10,10000,100000] [--jobs-per-tenant 10] [--scrapes 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass

import redis
from prometheus_client.parser import text_string_to_metric_families

from exporter import metrics as m
from exporter.collector import scrape_client
from exporter.server import exporter_server
from fairness_core import open_queue
from fairness_stack.servers import RedisServer

from .load import bench_config, populate

NOT_COMMANDS = {"info", "config", "slowlog"}  # the benchmark's own bookkeeping calls


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.removeprefix("cmdstat_").split("|")[0] not in NOT_COMMANDS)


@dataclass(frozen=True)
class Result:
    label: str
    tenants: int
    jobs: int
    load_s: float
    series: int
    median_ms: float
    p95_ms: float
    commands: float


def measure(server: RedisServer, label: str, tenants: int, jobs_per_tenant: int, scrapes: int) -> Result:
    prefix = f"bench-{tenants}"
    started = time.monotonic()
    populate(server.url, prefix, tenants, jobs_per_tenant)
    load_s = time.monotonic() - started
    return scrape(server, label, prefix, tenants, jobs_per_tenant, scrapes, load_s)


def scrape(server: RedisServer, label: str, prefix: str, tenants: int, jobs_per_tenant: int, scrapes: int,
           load_s: float = 0.0) -> Result:
    """Scrape the exporter of an already loaded queue group ``scrapes`` times over HTTP."""
    config = bench_config(server.url, prefix)
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    with exporter_server(config, open_queue(config, scrape_client(config)).groups()[0], "127.0.0.1", 0) as exporter:
        for _ in range(3):  # warm up: script cache, connection, code paths
            body = fetch(exporter.url)
        before = commands(admin)
        times = []
        for _ in range(scrapes):
            started = time.perf_counter()
            body = fetch(exporter.url)
            times.append((time.perf_counter() - started) * 1000)
        used = commands(admin) - before
    up = [s.value for f in text_string_to_metric_families(body) if f.name == m.EXPORTER_REDIS_UP.name for s in f.samples]
    if up != [1.0]:
        raise RuntimeError(f"{label}: the exporter could not read Redis")
    series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    return Result(label, tenants, tenants * jobs_per_tenant, load_s, series, statistics.median(times),
                  statistics.quantiles(times, n=20)[-1], used / scrapes)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def table(results: list[Result]) -> str:
    """One row per size, then each larger size as a ratio to the smallest."""
    rows = [
        "| size | tenants | queued jobs | series | median scrape (ms) | p95 scrape (ms) | Redis commands / scrape |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rows.append(f"| {r.label} | {r.tenants:,} | {r.jobs:,} | {r.series} | {r.median_ms:.2f} | {r.p95_ms:.2f} "
                    f"| {r.commands:.1f} |")
    base = results[0]
    for r in results[1:]:
        rows.append(f"| ratio {r.label}/{base.label} | {r.tenants / base.tenants:,.0f}x "
                    f"| {r.jobs / base.jobs:,.0f}x | {r.series / base.series:.2f}x "
                    f"| {r.median_ms / base.median_ms:.2f}x | {r.p95_ms / base.p95_ms:.2f}x "
                    f"| {r.commands / base.commands:.2f}x |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="10,10000,100000",
                        help="comma-separated tenant counts, smallest first (default 10,10000,100000)")
    parser.add_argument("--jobs-per-tenant", type=int, default=10, help="queued jobs per tenant (default 10)")
    parser.add_argument("--scrapes", type=int, default=50, help="scrapes measured per size (default 50)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(n) for n in args.tenants.split(",")]
    except ValueError:
        parser.error(f"--tenants: expected comma-separated whole numbers, got {args.tenants!r}")
    results = []
    with RedisServer() as server:
        for tenants in sizes:
            result = measure(server, f"{tenants:,} tenants", tenants, args.jobs_per_tenant, args.scrapes)
            print(f"{result.label}: loaded {result.jobs:,} jobs in {result.load_s:.1f}s", file=sys.stderr, flush=True)
            results.append(result)
        memory = redis.Redis.from_url(server.url).info("memory")["used_memory_human"]
    print(table(results))
    print(f"\nredis-server used {memory} with every size loaded; {args.scrapes} scrapes per size over HTTP.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
