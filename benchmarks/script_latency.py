"""The longest scheduler script run, from Redis's own ``SLOWLOG`` (microseconds, server side).

Every script call above ``THRESHOLD_US`` is logged while the other measurements run against the
100,000-tenant state (pops of 1 and of a batch, acks, scrapes), and :func:`sweeps` adds the
operations they do not: enqueue, nack, extend, reap, aging, worker registration.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import redis

from fairness_core import Scheduler

from .load import TASKS, payload

THRESHOLD_US = 100  # log every command slower than this
LOG_LENGTH = 1_000_000  # keep them all
FLEET_SLOTS = 1_000_000
OP_ARG = 3  # FCALL function numkeys KEYS... ARGV[1]: the op is the first argument after the keys


def start(client: redis.Redis) -> None:
    client.config_set("slowlog-log-slower-than", THRESHOLD_US)
    client.config_set("slowlog-max-len", LOG_LENGTH)
    client.slowlog_reset()


def sweeps(sched: Scheduler, rounds: int) -> None:
    """The operations the throughput and scrape runs do not exercise, ``rounds`` times each."""
    for n in range(rounds):
        sched.submit(TASKS[n % len(TASKS)], f"tenant-{n}", payload(n))
        first, second = sched.pop(2)
        sched.extend(first)
        sched.nack(second, "benchmark")
        sched.reap()
        sched.promote_overdue()
        sched.register_worker("bench", FLEET_SLOTS, 60)  # enough slots that no reservation holds pops back
        sched.ack(first)
    sched.unregister_worker("bench")


@dataclass(frozen=True)
class Longest:
    """The longest logged script run per operation, and how many runs went over ``limit_us``."""

    by_op: dict[str, int]
    over_limit: int

    @property
    def longest_us(self) -> int:
        return max(self.by_op.values(), default=0)


def longest(client: redis.Redis, base: str, limit_us: int) -> Longest:
    """Script runs on the queue group whose keys start with ``base`` (e.g. ``{big}:``)."""
    by_op: dict[str, int] = defaultdict(int)
    over = 0
    for entry in client.slowlog_get(LOG_LENGTH):
        args = entry["command"].split(b" ")
        if args[0].upper() != b"FCALL" or not args[OP_ARG].decode().startswith(base):
            continue
        op = args[OP_ARG + int(args[2])].decode()
        by_op[op] = max(by_op[op], int(entry["duration"]))
        over += int(entry["duration"]) > limit_us
    return Longest(dict(by_op), over)
