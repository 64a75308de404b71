"""Pop+ack with accounts (``tenants.account_separator``) against the same jobs without, in turns.

Both loops are row 1's (one job per call, the ack riding with the next pop) over the same tenant
ids, ``acct-<a>/key-<k>``: 10 accounts of 10 keys each, all in one class. Without a separator they
are 100 tenants of one level; with ``/`` they are 10 accounts, each sharing its turn among its 10
keys, so each pop also reads the account's lowest key and writes its tag, and each push and take
keeps the account's queued count. The notes give a third rate: the 10 accounts' ids alone, as 10
tenants of one level (the same number of parties, no second level).
"""

from __future__ import annotations

import sys

import redis


from . import throughput
from .harness import Row, alternate, per_second
from .load import scheduler
from .report import run_alone

ACCOUNTS, KEYS = 10, 10
IDS = [f"acct-{a}/key-{k}" for a in range(ACCOUNTS) for k in range(KEYS)]
TARGET = 0.85  # within 15% of the flat case


def row(url: str, jobs: int, repeats: int) -> Row:
    """Row 1d: jobs per second with accounts against the same ids without, and the script's µs
    per call in Redis (each the median of ``repeats`` runs, taking turns)."""
    client = redis.Redis.from_url(url)
    accounts, flat = scheduler(url, "accounts", account_separator="/"), scheduler(url, "accounts-flat")
    parties = [f"acct-{a}" for a in range(ACCOUNTS)]  # as many parties as the accounts, one level
    ours, baseline, few = alternate(
        repeats,
        throughput.scheduler_run(accounts, jobs, lambda s, j: throughput.drain(s, j, 1), IDS),
        throughput.scheduler_run(flat, jobs, lambda s, j: throughput.drain(s, j, 1), IDS),
        throughput.scheduler_run(flat, jobs, lambda s, j: throughput.drain(s, j, 1), parties),
    )
    accounts_us, flat_us = alternate(
        repeats,
        lambda: throughput.script_us(client, accounts, IDS, jobs, 1),
        lambda: throughput.script_us(client, flat, IDS, jobs, 1),
    )
    ratio = ours / baseline
    return Row("1d", f"pop+ack, one job per call, {ACCOUNTS} accounts of {KEYS} keys (`tenants.account_separator`)",
               per_second(ours), f"the same {len(IDS)} ids without accounts {per_second(baseline)}", ratio,
               f"≥ {TARGET}", ratio >= TARGET,
               f"in Redis: {accounts_us:.0f} µs per call with accounts, {flat_us:.0f} µs without; "
               f"{ACCOUNTS} tenants of one key without accounts: {per_second(few)}")


def main(argv: list[str] | None = None) -> int:
    return run_alone(row, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
