"""A tenant's admission limits on a sharded queue: what its jobs on the other shards count.

``tenants.max_queued``, ``max_rate`` and their account forms are the logical queue's, but each
shard's script sees only its own keys, and a tenant's (or an account's) classes may sit on
different shards of its hand. So the queue reads, on the other shards of the hand, what the limits
count there (the tenant's and account's queued jobs in every class, and their accepted jobs in the
two rate-window buckets the estimate reads), in the same pipelined round trip that chooses the
shard, and the enqueue's script adds them to its own counts (:class:`Elsewhere`).

The bound: jobs other producers have admitted on the other shards between that read and the
script (one round trip) are not counted, nor are jobs on shards outside the hand (a re-shard's
old shards, until they drain) or on a shard that does not answer; the rate buckets are chosen by
the producer's clock, so a skew between it and Redis moves the estimate's weighting by that much.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .keys import ACCOUNT_MARK, CLASS_PARTS, Keys
from .settings import Settings


@dataclass(frozen=True)
class Elsewhere:
    """What a tenant's admission limits count on the shards an enqueue does not go to: queued jobs
    (the tenant's, its account's) and the rate estimates' accepted jobs (the tenant's, its account's)."""

    queued: int = 0
    account_queued: int = 0
    rate: float = 0.0
    account_rate: float = 0.0

    def argument(self) -> str:
        """As the enqueue script reads it: '' for nothing elsewhere, else the four counts."""
        if not (self.queued or self.account_queued or self.rate or self.account_rate):
            return ""
        return f"{self.queued},{self.account_queued},{self.rate!r},{self.account_rate!r}"

    def __add__(self, other: Elsewhere) -> Elsewhere:
        return Elsewhere(self.queued + other.queued, self.account_queued + other.account_queued,
                         self.rate + other.rate, self.account_rate + other.account_rate)


NOWHERE = Elsewhere()


def counts_limits(settings: Settings) -> bool:
    """Whether an enqueue under ``settings`` counts anything a shard elsewhere holds."""
    return settings.has_limit or settings.has_rate


@dataclass(frozen=True)
class LimitReads:
    """The reads of one shard's admission counts for ``tenant`` (of ``account``), added to a
    pipeline (:meth:`queue`, :data:`per_shard` commands) and summed from their replies
    (:meth:`counted`)."""

    settings: Settings
    tenant: str
    account: str
    now_ms: float

    @classmethod
    def of(cls, settings: Settings, tenant: str, account: str) -> LimitReads:
        return cls(settings, tenant, account, time.time() * 1000)

    @property
    def per_shard(self) -> int:
        return 2 * len(self.settings.classes) + 2

    def _bucket(self) -> int:
        return int(self.now_ms // self.settings.rate_window_ms)

    def queue(self, pipe: Any, keys: Keys) -> None:
        """Add this shard's reads to ``pipe``: per class the tenant's and the account's queued jobs,
        then the tenant's and account's accepted jobs in the previous and current rate buckets."""
        for c in self.settings.classes:
            pipe.zscore(keys.class_key(c, CLASS_PARTS["backlog"]), self.tenant)
            pipe.zscore(keys.class_key(c, CLASS_PARTS["account_backlog"]), self.account)
        bucket = self._bucket()
        for b in (bucket - 1, bucket):
            pipe.hmget(keys.rate_bucket(b), [self.tenant, ACCOUNT_MARK + self.account])

    def counted(self, replies: Sequence[Any]) -> Elsewhere:
        """The counts from one shard's replies to :meth:`queue`, as the script estimates them: the
        previous bucket weighted by the part of it still in the window, plus the current one."""
        n = len(self.settings.classes)
        queued = sum(int(float(replies[2 * i] or 0)) for i in range(n))
        account_queued = sum(int(float(replies[2 * i + 1] or 0)) for i in range(n))
        (prev_t, prev_a), (cur_t, cur_a) = replies[2 * n], replies[2 * n + 1]
        window = self.settings.rate_window_ms
        left = (window - (self.now_ms - self._bucket() * window)) / window
        return Elsewhere(queued, account_queued, int(prev_t or 0) * left + int(cur_t or 0),
                         int(prev_a or 0) * left + int(cur_a or 0))


def summed(reads: LimitReads, replies: Mapping[int, Sequence[Any]], skip: int) -> Elsewhere:
    """The counts of every shard that answered but ``skip`` (the one the job goes to)."""
    total = NOWHERE
    for index, shard_replies in replies.items():
        if index != skip:
            total = total + reads.counted(shard_replies)
    return total
