"""Where a sharded queue group's tenants live: the shard prefixes and each tenant's hand.

A sharded group ``P`` of N shards is N queue groups, ``P.0`` .. ``P.N-1``, each its own hash tag,
so a Redis Cluster spreads them over its masters while every script still runs on one shard.

A tenant's hand is the ``size`` shards that score highest for it under rendezvous (highest random
weight) hashing: stable (it depends on the tenant and N only, not on any state), and when N grows
to M a tenant's hand changes only where one of the new shards outscores an old one, so growing
6 to 12 re-homes about half of the tenants, the least any mapping can. Hands of two or more are
shuffle sharding (as in Kubernetes API Priority and Fairness): two tenants share a whole hand only
with probability 1 / C(N, size), so a flooding tenant shares its fate with few of the others.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

SHARD_SEP = "."


def shard_prefix(prefix: str, shard: int) -> str:
    """The queue group (``redis.prefix``) of shard ``shard`` of the sharded group ``prefix``."""
    return f"{prefix}{SHARD_SEP}{shard}"


def _score(tenant: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{shard}\x00{tenant}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@lru_cache(maxsize=65536)
def hand(tenant: str, shards: int, size: int) -> tuple[int, ...]:
    """The ``size`` shards of ``shards`` a tenant's jobs may go to, best first (its home shard)."""
    if not 1 <= size <= shards:
        raise ValueError(f"shard_hand: expected 1..{shards}, got {size}")
    return tuple(sorted(range(shards), key=lambda s: _score(tenant, s), reverse=True)[:size])
