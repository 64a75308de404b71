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
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

SHARD_SEP = "."


def shard_prefix(prefix: str, shard: int, salt: int = 0) -> str:
    """A name (``redis.prefix``, and hash tag) for shard ``shard`` of the sharded group ``prefix``:
    ``P.3``, or with a ``salt`` ``P.3-1`` (see :func:`place`)."""
    return f"{prefix}{SHARD_SEP}{shard}" + (f"-{salt}" if salt else "")


MAX_SALT = 10_000


def place(prefix: str, shards: range, placed: Sequence[str], master_of: Callable[[str], str],
          masters: Sequence[str]) -> list[str]:
    """Names for the new ``shards`` that put each on a master holding the fewest of the group's
    shards (those ``placed`` and the new ones before it), by the slot map ``master_of`` reads.

    A shard's hash tag decides its master, and the plain names ``P.0`` .. ``P.N-1`` land badly:
    CRC16 is linear, so their slots are fixed XORs of one another whatever ``P`` is (with the slots
    split evenly, as ``redis-cli --cluster create`` splits them: 6 of them on 2 masters fall 4-2
    for every prefix, and 8 on 3 masters evenly for 8 % of prefixes). Each new
    shard takes the first of ``P.i``, ``P.i-1``, ``P.i-2``, ... that lands on a least-loaded master
    (a few tries: each lands on a master about as often as that master's share of the slots).
    Shard 0 is always ``P.0``. The names are stored with the layout, since the slot map can change."""
    held = Counter({master: 0 for master in masters})
    held.update(master_of(name) for name in placed)
    names = []
    for shard in shards:
        fewest = min(held.values(), default=0)
        best = shard_prefix(prefix, shard)
        for salt in range(MAX_SALT):  # a master with a sliver of the slots may take long to hit: then the best tried
            candidate = shard_prefix(prefix, shard, salt)
            if held[master_of(candidate)] < held[master_of(best)]:
                best = candidate
            if held[master_of(best)] == fewest:
                break
        held[master_of(best)] += 1
        names.append(best)
    return names


def _score(tenant: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{shard}\x00{tenant}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def key_shard(dealt: Sequence[int], key: str) -> int:
    """The shard of a tenant's hand ``dealt`` that a keyed job goes to: by the key's hash alone,
    not by load, so that every submit of one key (a producer's retries) finds its record there."""
    return dealt[_score(key, 0) % len(dealt)]


@lru_cache(maxsize=65536)
def hand(tenant: str, shards: int, size: int) -> tuple[int, ...]:
    """The ``size`` shards of ``shards`` a tenant's jobs may go to, best first (its home shard)."""
    if not 1 <= size <= shards:
        raise ValueError(f"shard_hand: expected 1..{shards}, got {size}")
    return tuple(sorted(range(shards), key=lambda s: _score(tenant, s), reverse=True)[:size])
