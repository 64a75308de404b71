"""Redis memory as part of the scheduler's contract: the eviction policy, and a headroom for enqueues.

Every job lives only in Redis, so two things about its memory decide whether jobs are safe:

- **The eviction policy.** Under any ``maxmemory-policy`` but ``noeviction``, Redis deletes keys
  to make room, the scheduler's own among them: queued jobs, leases and counters vanish with no
  error to anyone. fairctl refuses to enqueue or work jobs against such a Redis
  (:func:`check_eviction_policy`); BullMQ, for comparison, only logs a warning.
- **The limit.** Under ``noeviction``, Redis refuses writes over ``maxmemory``. The scheduler's
  drain scripts (pop, ack, nack, reap, extend, promote) are allowed past it, so workers keep
  draining and free memory; enqueues are refused, first by fairctl at ``redis.memory_headroom`` of
  ``maxmemory`` (:class:`MemoryGuard`), so the last part of memory is left to the drains, and by
  Redis itself at the limit. Both refusals are one error, :class:`RedisMemoryFull`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import OutOfMemoryError

from .connection import ClusterClient, describe, redis_errors
from .jobs import Enqueued, FairnessError

SAFE_POLICY = "noeviction"
REFRESH_S = 0.1  # a producer re-reads INFO at most this often: never one INFO per job


@dataclass(frozen=True)
class MemoryInfo:
    """What INFO says about the Redis the queue group lives on (on a cluster, the master holding it)."""

    used: int  # bytes, used_memory
    maxmemory: int  # bytes; 0: no limit
    policy: str  # maxmemory_policy
    evicted_keys: int  # keys evicted since the server started

    @property
    def fill(self) -> float:
        """used / maxmemory; 0 with no limit."""
        return self.used / self.maxmemory if self.maxmemory else 0.0


class EvictionPolicyError(FairnessError):
    """Redis may evict keys to make room: the scheduler's jobs could vanish with no error."""


class RedisMemoryFull(FairnessError):
    """An enqueue refused because Redis is (nearly) out of memory; pops and acks still run.

    ``accepted``: for a batch (:meth:`Queue.submit_many`), the jobs of it Redis did queue
    before refusing the rest, so the caller knows exactly which were taken."""

    def __init__(self, message: str, accepted: tuple[Enqueued, ...] = ()) -> None:
        super().__init__(message)
        self.accepted = accepted


def memory_from_info(reply: dict[str, Any]) -> MemoryInfo:
    return MemoryInfo(used=int(reply["used_memory"]), maxmemory=int(reply["maxmemory"]),
                      policy=str(reply["maxmemory_policy"]), evicted_keys=int(reply.get("evicted_keys", 0)))


def read_memory(client: Any, key: str | None = None) -> MemoryInfo:
    """INFO memory and stats in one round trip. On a cluster, of the master holding ``key`` (a
    queue group's: a master that is down, or full, then costs only the groups on it); with no
    ``key``, every master answers and the fullest counts (the safe reading for the whole cluster)."""
    with redis_errors(client):
        if isinstance(client, (ClusterClient, RedisCluster)):
            nodes = RedisCluster.PRIMARIES if key is None else client.get_node_from_key(key)
            reply = client.info("memory", "stats", target_nodes=nodes)
        else:
            reply = client.info("memory", "stats")
    if "used_memory" in reply:  # one node answered
        return memory_from_info(reply)
    return riskiest(memory_from_info(node) for node in reply.values())


def riskiest(masters: Iterable[MemoryInfo]) -> MemoryInfo:
    """The reading that counts for several masters: an evicting policy anywhere is what must be
    refused; otherwise the fullest master."""
    return max(masters, key=lambda n: (n.policy != SAFE_POLICY, n.fill, n.used))


def check_eviction_policy(info: MemoryInfo, where: str) -> None:
    """Refuse any policy but ``noeviction``: under it the scheduler's keys may be evicted."""
    if info.policy != SAFE_POLICY:
        raise EvictionPolicyError(
            f"Redis at {where} has maxmemory-policy {info.policy}: when memory runs short Redis may evict "
            f"the scheduler's own keys, losing queued jobs and leases with no error to anyone; fairctl runs "
            f"only on {SAFE_POLICY}. Fix: redis-cli CONFIG SET maxmemory-policy {SAFE_POLICY} (and "
            f"'maxmemory-policy {SAFE_POLICY}' in redis.conf so a restart keeps it)")


def require_noeviction(client: Any, key: str | None = None) -> MemoryInfo:
    """Read INFO (of the Redis holding ``key``, see :func:`read_memory`) and refuse an evicting
    policy: what a worker does for each queue group it serves at start and at every reap tick."""
    info = read_memory(client, key)
    check_eviction_policy(info, describe(client)[1])
    return info


def _mib(size: int) -> str:
    return f"{size / 1048576:.1f} MiB"


class MemoryGuard:
    """Refuses enqueues at ``headroom`` x maxmemory, reading INFO at most every ``refresh`` s.

    Thread-safe: the slot threads of a worker and a producer's threads share one guard."""

    def __init__(self, client: Any, headroom: float, *, key: str | None = None, refresh: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.key = key  # the queue group's: on a cluster only its master is read
        self.headroom = headroom
        self.refresh = refresh
        self.clock = clock
        self.where = describe(client)[1]
        self._lock = threading.Lock()
        self._info: MemoryInfo | None = None
        self._read_at = 0.0
        self._policy_checked = False

    def read(self, *, fresh: bool = False) -> MemoryInfo:
        """The last reading, re-read when older than ``refresh`` (or ``fresh``)."""
        with self._lock:
            now = self.clock()
            if fresh or self._info is None or now - self._read_at >= self.refresh:
                self._info, self._read_at = read_memory(self.client, self.key), now
            return self._info

    def ensure_policy(self) -> None:
        """The eviction-policy check a process makes before its first change to the queues; free after."""
        if not self._policy_checked:
            check_eviction_policy(self.read(), self.where)
            self._policy_checked = True

    def check(self) -> None:
        """Before an enqueue: raise :class:`EvictionPolicyError` or :class:`RedisMemoryFull`."""
        info = self.read()
        check_eviction_policy(info, self.where)
        if info.maxmemory and info.used >= self.headroom * info.maxmemory:
            raise self.full(info, "refused by fairctl at redis.memory_headroom")

    def full(self, info: MemoryInfo, by: str, accepted: tuple[Enqueued, ...] = ()) -> RedisMemoryFull:
        """The refusal, naming the limit."""
        return RedisMemoryFull(
            f"Redis at {self.where} is out of memory for new jobs ({by}): used {_mib(info.used)} of "
            f"maxmemory {_mib(info.maxmemory)} ({info.fill:.0%}; redis.memory_headroom {self.headroom:.0%}). "
            "Pops and acks continue, so workers drain and free memory; retry the enqueue later, or raise "
            "maxmemory", accepted)

    @contextmanager
    def refusals(self) -> Iterator[None]:
        """Redis's own OOM refusal of an enqueue (producers raced past the headroom between two
        readings) as the same :class:`RedisMemoryFull`."""
        try:
            yield
        except OutOfMemoryError:
            raise self.full(self.read(fresh=True), "refused by Redis at maxmemory") from None

    def batch_refused(self, replies: list[Any], accepted: list[Enqueued | None]) -> None:
        """After a pipelined batch sent with ``raise_on_error=False``: raise :class:`RedisMemoryFull`
        (carrying the jobs Redis did accept) when Redis refused any of it, else any other error."""
        errors = [r for r in replies if isinstance(r, Exception)]
        if any(isinstance(e, OutOfMemoryError) for e in errors):
            raise self.full(self.read(fresh=True), "refused by Redis at maxmemory",
                            tuple(e for e in accepted if e is not None))
        if errors:
            raise errors[0]
