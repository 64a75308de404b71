"""Which shards of a sharded queue answer: one that fails is skipped, then tried again.

Sharding spreads a queue over masters for load one master cannot carry; it should also shrink
what one failure costs. A shard whose Redis does not answer (its master died, or is cut off) is
marked down for :data:`RETRY_S`: views, pops, sweeps and producers leave it out meanwhile and try
it again when the time is up, so a dead master costs the shards on it, not the fleet, and no
process waits on it once per call. Reads that span shards go one pipeline per master, so one
master that fails fails only the reads of its own shards. Only when no shard asked answers is the
caller's Redis unavailable (:class:`~fairness_core.jobs.RedisUnavailable`), as for one group.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .connection import redis_errors, server_of
from .jobs import RedisUnavailable

RETRY_S = 1.0  # a shard that failed is left out this long, then tried again
T = TypeVar("T")

log = logging.getLogger("fairctl.shards")


class ShardHealth:
    """The down marks of one process's shards (by index), shared by its threads. ``shard(i)``
    gives shard ``i``'s scheduler (its ``keys``, ``client`` and ``_pipeline()``)."""

    def __init__(self, shard: Callable[[int], Any]) -> None:
        self._shard = shard
        self._lock = threading.Lock()
        self._down: dict[int, tuple[float, float]] = {}  # index -> (down since, retry at), monotonic

    def usable(self, index: int) -> bool:
        """Not marked down, or due to be tried again."""
        marked = self._down.get(index)
        return marked is None or time.monotonic() >= marked[1]

    def down(self) -> list[int]:
        """The shards marked down now (whether or not due to be tried again)."""
        return sorted(self._down)

    def failed(self, index: int, error: RedisUnavailable) -> None:
        """Shard ``index`` did not answer: leave it out for :data:`RETRY_S` (said once an outage)."""
        now = time.monotonic()
        with self._lock:
            since = self._down.get(index, (now, now))[0]
            first = index not in self._down
            self._down[index] = (since, now + RETRY_S)
        if first:
            log.warning("shard %s (on %s) does not answer: %s; serving the other shards, trying it again every %.0fs",
                        self.name(index), self.master(index), error, RETRY_S)

    def answered(self, index: int) -> None:
        """Shard ``index`` answered a call: it is back (said once), if it was down."""
        if index not in self._down:  # the common case, without taking the lock
            return
        with self._lock:
            marked = self._down.pop(index, None)
        if marked is not None:
            log.warning("shard %s answers again after %.1fs", self.name(index), time.monotonic() - marked[0])

    def name(self, index: int) -> str:
        return str(self._shard(index).keys.prefix)

    def master(self, index: int) -> str:
        """The Redis holding shard ``index``'s keys, by the client's slot map (no command sent)."""
        shard = self._shard(index)
        return server_of(shard.client, shard.keys.config)

    def call(self, index: int, action: Callable[[], T]) -> T:
        """``action()`` on shard ``index``, marking it down when it raises RedisUnavailable (which
        goes on to the caller) and up when it answers."""
        try:
            result = action()
        except RedisUnavailable as exc:
            self.failed(index, exc)
            raise
        self.answered(index)
        return result

    def each(self, indices: Sequence[int], action: Callable[[int], T], *, even_down: bool = False) -> list[T]:
        """``action(i)`` on each usable shard of ``indices`` (``even_down``: each, those marked
        down too), skipping those that do not answer; RedisUnavailable when none of them answered
        (naming each shard and its master)."""
        results: list[T] = []
        errors: list[tuple[int, RedisUnavailable]] = []
        for index in indices:
            if not (even_down or self.usable(index)):
                continue
            try:
                results.append(self.call(index, lambda: action(index)))
            except RedisUnavailable as exc:
                errors.append((index, exc))
        if not results and indices:
            raise self.unavailable(indices, errors)
        return results

    def first(self, indices: Sequence[int], action: Callable[[int], T]) -> T:
        """``action(i)`` on the first usable shard of ``indices`` that answers (a read any shard
        can answer); RedisUnavailable when none does (naming each shard and its master)."""
        errors: list[tuple[int, RedisUnavailable]] = []
        for index in indices:
            if self.usable(index):
                try:
                    return self.call(index, lambda: action(index))
                except RedisUnavailable as exc:
                    errors.append((index, exc))
        raise self.unavailable(indices, errors)

    def read(self, indices: Sequence[int], queue: Callable[[Any, Any], object], per_shard: int) -> dict[int, list[Any]]:
        """Each usable shard's replies to the ``per_shard`` commands ``queue(pipe, shard)`` adds,
        one pipeline per master: a master that fails leaves out only its own shards.
        RedisUnavailable when no shard of ``indices`` answered."""
        by_node: dict[int, tuple[Any, list[int]]] = {}
        for index in indices:
            if self.usable(index):
                node = self._shard(index)._node()
                by_node.setdefault(id(node), (node, []))[1].append(index)
        replies: dict[int, list[Any]] = {}
        errors: list[tuple[int, RedisUnavailable]] = []
        for node, held in by_node.values():
            try:
                with redis_errors(node):
                    pipe = node.pipeline(transaction=False)
                    for index in held:
                        queue(pipe, self._shard(index))
                    flat = pipe.execute()
            except RedisUnavailable as exc:
                for index in held:
                    self.failed(index, exc)
                    errors.append((index, exc))
                continue
            for n, index in enumerate(held):
                self.answered(index)
                replies[index] = flat[n * per_shard:(n + 1) * per_shard]
        if not replies and indices:
            raise self.unavailable(indices, errors)
        return replies

    def unavailable(self, indices: Sequence[int], errors: Sequence[tuple[int, RedisUnavailable]]) -> RedisUnavailable:
        """The error for a call that no shard of ``indices`` could take."""
        named = ", ".join(f"{self.name(i)} on {self.master(i)}" for i in indices)
        cause = f": {errors[-1][1]}" if errors else f" (each failed within the last {RETRY_S:g}s)"
        return RedisUnavailable(f"no shard answers of {named}{cause}")
