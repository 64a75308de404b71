"""Two-level fairness with real ``fairctl worker`` processes: one account floods through 200 keys
beside 20 accounts of one key, all backlogged in one class; the first completions are shared
account by account within the bound docs/scheduler.md states (plus the jobs in flight when they
are counted), on one Redis and on a queue of 6 shards over 3 masters."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exporter import metrics as m
from fairness_core import load_config, open_queue, redis_client
from fairness_core.queue import Queue
from fairness_stack.servers import RedisClusterServers, RedisServer, free_port

from .crash_support import stop_all
from .exporter_support import scrape, scrape_if_serving
from .support import spawn_exporter, spawn_worker, wait_for, write_config

pytestmark = pytest.mark.slow

FLOOD_KEYS = 200
SMALL_ACCOUNTS = 20
ACCOUNTS = SMALL_ACCOUNTS + 1
WORKERS, CONCURRENCY = 2, 4
SLOTS = WORKERS * CONCURRENCY  # jobs in flight at most when a completion is counted (--batch 1)
COUNTED = 40 * ACCOUNTS  # the first completions judged: 40 per account if fair
BATCH = 1  # tenants.batch: V, the most one visit serves, is one job
JOB = {"service_s": 0.002}
QUEUE = "jobs:low"  # where the example config classifies newsletters
RECORD_KEY = "accounts-record"


def account_bound(accounts: int) -> float:
    """|S_a - S/A| for equal weights: 2V(A-1)/A (docs/scheduler.md), V = BATCH jobs."""
    return 2 * BATCH * (accounts - 1) / accounts


def served_by_account(records_url: str, config_path: Path, tmp_path: Path) -> Counter[str]:
    """Queue the flood and the small accounts' backlogs, run the workers (recording in
    ``records_url``) until COUNTED jobs are done, and count those first completions by account."""
    queue = open_queue(load_config(config_path))
    account: dict[str, str] = {}
    per_key = 3 * COUNTED // FLOOD_KEYS + 1  # the flood alone could fill every count three times
    for k in range(FLOOD_KEYS):
        for queued in queue.submit_many("newsletter", f"bigco/key-{k}", [JOB] * per_key):
            assert queued is not None
            account[queued.job_id] = "bigco"
    for a in range(SMALL_ACCOUNTS):
        for queued in queue.submit_many("newsletter", f"shop-{a}", [JOB] * (3 * COUNTED // ACCOUNTS)):
            assert queued is not None
            account[queued.job_id] = f"shop-{a}"
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    workers = [spawn_worker(config_path, log, RECORD_KEY, records_url, "--concurrency", str(CONCURRENCY),
                            "--batch", "1") for log in logs]
    records = redis_client(records_url)
    try:
        wait_for(lambda: records.llen(RECORD_KEY) >= COUNTED, 120, f"{COUNTED} jobs to be done")
    finally:
        stop_all(workers)
    first = [item.decode().rsplit(":", 1)[0] for item in records.lrange(RECORD_KEY, 0, COUNTED - 1)]
    records.delete(RECORD_KEY)
    return Counter(account[job_id] for job_id in first)


def check_shares(served: Counter[str], slack: float) -> None:
    fair = COUNTED / ACCOUNTS
    allowed = account_bound(ACCOUNTS) + slack
    gaps = {name: served[name] - fair for name in ["bigco", *(f"shop-{a}" for a in range(SMALL_ACCOUNTS))]}
    assert all(abs(gap) <= allowed for gap in gaps.values()), (allowed, gaps)


def config_for(tmp_path: Path, url: str, **redis_section: Any) -> Path:
    path, config = write_config(tmp_path, url, tenants={"account_separator": "/", "batch": BATCH},
                                redis={"url": url, **redis_section},
                                exporter={"topk_tenants": ACCOUNTS + 4})  # every account is served a share
    assert config.tenants.account_separator == "/"
    return path


def test_workers_share_a_class_by_account_within_the_bound(redis_server: RedisServer, tmp_path: Path) -> None:
    """And a fairctl exporter on the group then serves the account level: the 21 accounts queued,
    bigco's share of the window at one account's, and its busiest keys."""
    path = config_for(tmp_path, redis_server.url)
    served = served_by_account(redis_server.url, path, tmp_path)
    check_shares(served, SLOTS)
    port = free_port()
    exporter = spawn_exporter(path, tmp_path / "exporter.log", "--listen", f"127.0.0.1:{port}")
    try:
        wait_for(lambda: scrape_if_serving(f"http://127.0.0.1:{port}/metrics") is not None, 60, "the exporter")
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        stop_all([exporter])

    def of(name: str) -> dict[str, float]:
        return {dict(labels).get("account", ""): v for labels, v in metrics.series(name).items()
                if dict(labels)["queue"] == QUEUE}
    shares = of(m.QUEUE_ACCOUNT_SHARE.name)
    assert of(m.QUEUE_ACTIVE_ACCOUNTS.name) == {"": ACCOUNTS}
    assert abs(shares.get("bigco", 0) - 1 / ACCOUNTS) <= (account_bound(ACCOUNTS) + SLOTS) / COUNTED, shares
    keys = [dict(labels)["tenant"] for labels in metrics.series(m.QUEUE_ACCOUNT_TENANT_SHARE.name)
            if dict(labels)["account"] == "bigco"]
    assert len(keys) == 3 and all(key.startswith("bigco/") for key in keys), keys
    print(f"\none Redis, {COUNTED} first completions: bigco (200 keys) {served['bigco']}, one-key accounts "
          f"{min(served[f'shop-{a}'] for a in range(SMALL_ACCOUNTS))}-"
          f"{max(served[f'shop-{a}'] for a in range(SMALL_ACCOUNTS))}; fair {COUNTED / ACCOUNTS:.0f}, "
          f"bound {account_bound(ACCOUNTS):.1f} + {SLOTS} in flight")


def test_a_sharded_queue_shares_by_account_fleet_wide(cluster: RedisClusterServers, tmp_path: Path) -> None:
    """6 shards over 3 masters, hands of 2: an account's keys share its hand, and each shard's turn
    is weighed by the accounts queued there, so the fleet shares by account too. Each shard's own
    turn adds at most one visit per shard to the bound (smooth weighted round-robin over shards)."""
    path = config_for(tmp_path, cluster.url, shards=6, shard_hand=2)
    queue = open_queue(load_config(path))
    assert isinstance(queue, Queue)
    hands = {queue._hand(f"bigco/key-{k}") for k in range(FLOOD_KEYS)}
    assert len(hands) == 1, f"the account's keys were dealt {len(hands)} hands"
    with RedisServer() as records:  # the recording is the test's, outside the queue's cluster
        served = served_by_account(records.url, path, tmp_path)
    check_shares(served, SLOTS + 6 * BATCH)
    print(f"\n6 shards on 3 masters, {COUNTED} first completions: bigco {served['bigco']} (hand {hands.pop()}), "
          f"one-key accounts {min(served[f'shop-{a}'] for a in range(SMALL_ACCOUNTS))}-"
          f"{max(served[f'shop-{a}'] for a in range(SMALL_ACCOUNTS))}; fair {COUNTED / ACCOUNTS:.0f}")


def test_flat_fairness_gives_the_spread_account_most_of_the_class(redis_server: RedisServer, tmp_path: Path) -> None:
    """The same backlogs without accounts: 200 keys are 200 tenants, and the flood takes most."""
    path, _ = write_config(tmp_path, redis_server.url, tenants={"batch": BATCH})
    served = served_by_account(redis_server.url, path, tmp_path)
    assert served["bigco"] >= 0.8 * COUNTED, served  # 200 of 220 tenants
    print(f"\nflat, {COUNTED} first completions: bigco (200 tenants) {served['bigco']}")
