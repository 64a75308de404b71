"""BullMQ (https://bullmq.io, 4.x to 6.x), read from its own keys under ``<prefix>:<queue>:``
(prefix ``bull`` unless ``watch.prefix`` says otherwise): the ``wait`` list of job ids (producers
LPUSH, workers take from the right, so index -1 is the next and oldest job), the ``paused`` list
5.x and older fill instead while the queue is paused, the ``prioritized`` set scored
``priority * 2**32 + counter`` (lowest first, first come first within a level), the ``active``
list of jobs in flight, the ``completed`` set scored by each job's ``finishedOn`` (ms), and each
job's hash ``<prefix>:<queue>:<id>`` (``timestamp`` the enqueue time in ms, ``data`` its JSON).

A class takes a queue whole (wait, paused and every priority level) or some of its levels
(``priorities``: level 0, no priority, is the wait and paused lists, as in BullMQ's
getCountsPerPriority; any other level is its band of the prioritized set). Depth is exact. Age: each
list's and each level's next job, whose own ``timestamp`` it reads; for a queue taken whole the
prioritized set's next job stands for all its levels, so an older job of a lower level waiting
behind it is not seen: map levels to classes to watch each. BullMQ 4.x pushed marker entries
(``0:...``) into the wait list; they are skipped for the heads and sample and not counted where
read (one elsewhere in a long list would count as a job).

In-flight and completions are served only for a class that takes its queues whole: a job's priority
is in its hash alone, so the ``active`` list and the ``completed`` set cannot be split by level
without reading every job. Completions are counted by the reader: each read counts the completed
jobs scored after the latest it saw, up to the latest there now (read one round trip earlier, so a
job finishing in between is counted by the next read). BullMQ trims the set when jobs run with
``removeOnComplete`` (a count or an age): a job trimmed before any read saw it is missed, so the
counter is exact while that keep count is above the jobs completed per scrape interval (or the keep
age above the interval); ``removeOnComplete: true`` records none and the counter stays 0.
BullMQ's own ``getJobCounts`` is not used: it runs Lua scripts, which may write.

Cost: two pipelined round trips a read. The first has two commands per list or level band (its
length, and its next ids: at least the head, at most the class's tenant sample) and two per queue
taken whole (LLEN active, the latest completion); the second one HMGET per head and sampled job and
one ZCOUNT per queue with completions. None of it grows with the jobs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import redis

from exporter import metrics as m

from .base import ClassReading, tenant_of, top_tenants
from .watching import QueueRef, WatchConfig

DEFAULT_PREFIX = "bull"  # BullMQ's QueueKeys default
LEVEL = 2**32  # a prioritized job's score is its priority times this, plus a counter (getPriorityScore.lua)
MARKER = b"0:"  # BullMQ 4.x's marker entries in the wait list; job ids never take this form


@dataclass(frozen=True)
class Part:
    """Waiting jobs of one queue served in one order: a list (``band`` None) or scores ``band`` of
    the prioritized set."""

    queue: str
    key: str
    band: tuple[int | str, int | str] | None = None

    def order(self) -> tuple[int, float]:
        """Where a worker takes it: the lists before any prioritized job, then the lower levels."""
        return (0, 0.0) if self.band is None else (1, float(self.band[0]))


def parts_of(ref: QueueRef, prefix: str) -> tuple[Part, ...]:
    """The lists and bands of the prioritized set a class's queue reference covers."""
    base = f"{prefix}{ref.queue}:"
    lists = (Part(ref.queue, f"{base}wait"), Part(ref.queue, f"{base}paused"))
    if not ref.priorities:
        return (*lists, Part(ref.queue, f"{base}prioritized", ("-inf", "+inf")))
    out: list[Part] = []
    for p in sorted(set(ref.priorities)):
        out.extend(lists if p == 0 else (Part(ref.queue, f"{base}prioritized", (p * LEVEL, (p + 1) * LEVEL - 1)),))
    return tuple(out)


class BullmqSource:
    kind: ClassVar[str] = "bullmq"
    # BullMQ's job priorities are levels a class may take some of; a job's arguments are its data.
    has_priorities: ClassVar[bool] = True
    tenant_roots: ClassVar[tuple[str, ...]] = ("data",)
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_INFLIGHT.name, m.JOBS_PROCESSED.name,
        m.QUEUE_TENANT_SHARE.name})

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        self.prefix = (watch.prefix or DEFAULT_PREFIX) + ":"
        self.parts = {name: tuple(sorted(dict.fromkeys(p for ref in refs for p in parts_of(ref, self.prefix)),
                                         key=Part.order))
                      for name, refs in watch.classes.items()}
        # The queues of a class taking all of each (None: some levels only; see the docstring).
        self.whole = {name: None if any(ref.priorities for ref in refs) else tuple(dict.fromkeys(r.queue for r in refs))
                      for name, refs in watch.classes.items()}
        self.queues = tuple(dict.fromkeys(q for queues in self.whole.values() if queues for q in queues))
        self.every = tuple(dict.fromkeys(p for parts in self.parts.values() for p in parts))
        self._fetch = self._fetch_sizes()
        self._completed_seen: dict[str, float] = {}  # queue -> latest completed-set score counted
        self._processed: dict[str, int] = {name: 0 for name in watch.classes}

    def read(self, client: redis.Redis, now: float) -> Mapping[str, ClassReading]:
        pipe = client.pipeline(transaction=False)
        for part in self.every:
            if part.band is None:
                pipe.llen(part.key)
                pipe.lrange(part.key, -self._fetch[part], -1)
            else:
                pipe.zcount(part.key, *part.band)
                pipe.zrangebyscore(part.key, *part.band, start=0, num=self._fetch[part])
        for q in self.queues:
            pipe.llen(f"{self.prefix}{q}:active")
            pipe.zrange(f"{self.prefix}{q}:completed", -1, -1, withscores=True)
        replies = pipe.execute()
        waiting: dict[Part, tuple[int, list[bytes]]] = {}
        for i, part in enumerate(self.every):
            count, ids = int(replies[2 * i]), replies[2 * i + 1]
            ids = ids[::-1] if part.band is None else ids  # next to be taken first
            jobs = [job_id for job_id in ids if not job_id.startswith(MARKER)]
            waiting[part] = (max(0, count - (len(ids) - len(jobs))), jobs)
        rest = replies[2 * len(self.every):]
        active = {q: int(rest[2 * i]) for i, q in enumerate(self.queues)}
        latest = {q: float(rest[2 * i + 1][0][1]) for i, q in enumerate(self.queues) if rest[2 * i + 1]}

        wanted: dict[tuple[str, bytes], None] = {}
        sampled: dict[str, list[tuple[str, bytes]]] = {}
        for name, parts in self.parts.items():
            sampled[name] = self._sample(parts, waiting)
            for part in parts:
                if waiting[part][1]:
                    wanted[(part.queue, waiting[part][1][0])] = None
            wanted.update(dict.fromkeys(sampled[name]))
        counted = [q for q in self.queues if latest.get(q, float("-inf")) > self._completed_seen.get(q, float("-inf"))]
        pipe = client.pipeline(transaction=False)
        for q, job_id in wanted:
            pipe.hmget(f"{self.prefix}{q}:{job_id.decode()}", "timestamp", "data")
        for q in counted:
            seen = self._completed_seen.get(q)
            pipe.zcount(f"{self.prefix}{q}:completed", "-inf" if seen is None else f"({seen!r}", latest[q])
        replies = pipe.execute() if wanted or counted else []
        stored = dict(zip(wanted, replies[: len(wanted)], strict=True))  # (timestamp, data) of each job read
        for q, new in zip(counted, replies[len(wanted):], strict=True):
            self._completed_seen[q] = latest[q]
            for name, queues in self.whole.items():
                if queues and q in queues:
                    self._processed[name] += int(new)

        out = {}
        for name, parts in self.parts.items():
            heads = [_epoch(stored[(part.queue, waiting[part][1][0])][0]) for part in parts
                     if waiting[part][0] and waiting[part][1]]
            olds = [head for head in heads if head is not None]
            queues = self.whole[name]
            path = self.watch.tenant
            out[name] = ClassReading(
                depth=sum(waiting[part][0] for part in parts),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(active[q] for q in queues) if queues else None,
                processed=self._processed[name] if queues else None,
                tenants=top_tenants([_tenant(stored[job][1], path) for job in sampled[name]]) if path else (),
            )
        return out

    def _sample(self, parts: tuple[Part, ...], waiting: Mapping[Part, tuple[int, list[bytes]]]) -> list[tuple[str, bytes]]:
        """The jobs a class's tenant sample reads: for each of its queues, the next ones a worker
        would take (its lists, then its levels in order), a share of ``watch.sample`` each."""
        if self.watch.tenant is None:
            return []
        queues = list(dict.fromkeys(part.queue for part in parts))
        share = -(-self.watch.sample // len(queues))
        out: list[tuple[str, bytes]] = []
        for q in queues:
            ids = [job_id for part in parts if part.queue == q for job_id in waiting[part][1]]
            out.extend((q, job_id) for job_id in ids[:share])
        return out

    def _fetch_sizes(self) -> dict[Part, int]:
        """Ids read from each list's or band's consume end: the largest share of a tenant sample
        it may fill, at least its head (two of a list, which may end in a 4.x marker)."""
        out: dict[Part, int] = {}
        for parts in self.parts.values():
            share = -(-self.watch.sample // len({p.queue for p in parts})) if self.watch.tenant is not None else 0
            for part in parts:
                out[part] = max(out.get(part, 0), share, 2 if part.band is None else 1)
        return out


def _epoch(timestamp: bytes | None) -> float | None:
    """A job's ``timestamp`` (epoch ms) as epoch seconds; None if absent (taken meanwhile) or odd."""
    try:
        return int(timestamp) / 1000 if timestamp else None
    except ValueError:
        return None


def _tenant(data: bytes | None, path: tuple[str, ...]) -> str | None:
    """The tenant at ``path`` (``data.tenant``) of a job whose ``data`` is ``data``'s JSON."""
    try:
        return tenant_of({"data": json.loads(data)}, path) if data else None
    except (ValueError, RecursionError):
        return None


SOURCE = BullmqSource
