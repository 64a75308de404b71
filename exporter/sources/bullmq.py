"""BullMQ (https://bullmq.io, 4.x to 6.x), read from its own keys under ``<prefix>:<queue>:``
(prefix ``bull`` unless ``watch.prefix`` says otherwise): the ``wait`` list of job ids (producers
LPUSH, workers take from the right, so index -1 is the next and oldest job), the ``paused`` list
5.x and older fill instead while the queue is paused, the ``prioritized`` set scored
``priority * 2**32 + counter`` (lowest first, first come first within a level), the ``active``
list of jobs in flight (a job started is pushed on its left), the ``completed`` and ``failed`` sets
scored by each job's ``finishedOn`` (ms), the ``meta`` hash (``paused`` while the queue is paused,
``queue.pause()``), and each job's hash ``<prefix>:<queue>:<id>`` (``timestamp`` the enqueue time
in ms, ``processedOn`` when its last attempt started, ``ats`` its attempts started, ``priority``,
``data`` its JSON).

A class takes a queue whole (wait, paused and every priority level) or some of its levels
(``priorities``: level 0, no priority, is the wait and paused lists, as in BullMQ's
getCountsPerPriority; any other level is its band of the prioritized set). Depth is exact. Age: each
list's and each level's next job, whose own ``timestamp`` it reads; for a queue taken whole the
prioritized set's next job stands for all its levels, so an older job of a lower level waiting
behind it is not seen: map levels to classes to watch each. BullMQ 4.x pushed marker entries
(``0:...``) into the wait list; they are skipped for the heads and sample and not counted where
read (one elsewhere in a long list would count as a job). A class is paused while every queue it
takes is (a pause holds all of a queue's levels).

In-flight, completions and dead letters are served only for a class that takes its queues whole:
a job's priority is in its hash alone, so the ``active`` list and the ``completed`` and ``failed``
sets cannot be split by level without reading every job. Completions and dead letters (the
``failed`` set: jobs that failed their last attempt) are counted by the reader from those sets
(:class:`~exporter.sources.base.Tally`): the jobs added since the exporter started. BullMQ trims
them when jobs run with ``removeOnComplete`` or ``removeOnFail`` (a count or an age): a job trimmed
before any read saw it is missed, so a counter is exact while that keep count is above the jobs
finished per scrape interval (or the keep age above the interval); ``true`` records none and the
counter stays 0. ``fairness_dead_letters`` is the ``failed`` sets' size over the watched queues.
BullMQ's own ``getJobCounts`` is not used: it runs Lua scripts, which may write.

Waits: the jobs started since the previous read, found among the newest :data:`RECENT` of the
``active`` list and of the ``completed`` and ``failed`` sets, each observed once, by its own
``processedOn`` minus ``timestamp``, for the class taking its queue or its level
(:class:`~exporter.sources.base.Starts`); a retry (``ats`` above 1) is not observed, its
``processedOn`` being a later attempt's.

Cost: two pipelined round trips a read. The first has two commands per list or level band (its
length, and its next ids: at least the head, at most the class's tenant sample) and six a queue
(``HGET`` of its pause, ``LLEN`` and the newest of ``active``, the newest of ``completed`` and of
``failed``, ``ZCARD failed``); the second one ``HMGET`` per head and sampled job and per started
job not read before (at most 3 x ``RECENT`` a queue), and two ``ZCOUNT``s for a set of a queue taken
whole that gained more than ``RECENT`` records since the last read. None of it grows with the jobs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import redis

from exporter import metrics as m

from .base import RECENT, ClassReading, Readings, Starts, Tally, Waits, newest, tenant_of, top_tenants
from .watching import QueueRef, WatchConfig

DEFAULT_PREFIX = "bull"  # BullMQ's QueueKeys default
LEVEL = 2**32  # a prioritized job's score is its priority times this, plus a counter (getPriorityScore.lua)
MARKER = b"0:"  # BullMQ 4.x's marker entries in the wait list; job ids never take this form
PER_QUEUE = 6  # commands of the first round trip per queue, after those of the lists and bands


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
        m.QUEUE_TENANT_SHARE.name, m.QUEUE_ACTIVE_TENANTS.name, m.QUEUE_QUIET_OLDEST_AGE.name,
        m.TENANT_OLDEST_AGE.name, m.QUEUE_PAUSED.name, m.JOBS_DEAD_LETTERED.name, m.DEAD_LETTERS.name,
        m.JOBS_WAIT.name,
        *(spec.name for spec in m.REDIS_MEMORY)})  # Redis's memory: the collector's INFO

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
        self.all_queues = tuple(dict.fromkeys(ref.queue for refs in watch.classes.values() for ref in refs))
        self.every = tuple(dict.fromkeys(p for parts in self.parts.values() for p in parts))
        self._fetch = self._fetch_sizes()
        self._completed = {q: Tally() for q in self.queues}
        self._failed = {q: Tally() for q in self.queues}
        self._starts: Starts[tuple[str, bytes]] = Starts()
        self._waits = {name: Waits() for name in watch.classes}

    def _classes_of(self, queue: str, priority: int) -> list[str]:
        """The classes a job of ``queue`` at ``priority`` is waited for by: a class taking the queue
        whole, or the level."""
        return [name for name, refs in self.watch.classes.items()
                if any(ref.queue == queue and (not ref.priorities or priority in ref.priorities) for ref in refs)]

    def read(self, client: redis.Redis, now: float) -> Readings:
        pipe = client.pipeline(transaction=False)
        for part in self.every:
            if part.band is None:
                pipe.llen(part.key)
                pipe.lrange(part.key, -self._fetch[part], -1)
            else:
                pipe.zcount(part.key, *part.band)
                pipe.zrangebyscore(part.key, *part.band, start=0, num=self._fetch[part])
        for q in self.all_queues:
            base = f"{self.prefix}{q}:"
            pipe.hget(f"{base}meta", "paused")
            pipe.llen(f"{base}active")
            pipe.lrange(f"{base}active", 0, RECENT - 1)
            newest(pipe, f"{base}completed")
            newest(pipe, f"{base}failed")
            pipe.zcard(f"{base}failed")
        replies = pipe.execute()
        waiting: dict[Part, tuple[int, list[bytes]]] = {}
        for i, part in enumerate(self.every):
            count, ids = int(replies[2 * i]), replies[2 * i + 1]
            ids = ids[::-1] if part.band is None else ids  # next to be taken first
            jobs = [job_id for job_id in ids if not job_id.startswith(MARKER)]
            waiting[part] = (max(0, count - (len(ids) - len(jobs))), jobs)
        rest = replies[2 * len(self.every):]
        by_queue = {q: rest[PER_QUEUE * i: PER_QUEUE * (i + 1)] for i, q in enumerate(self.all_queues)}

        wanted: dict[tuple[str, bytes], None] = {}
        sampled: dict[str, list[tuple[str, bytes]]] = {}
        for name, parts in self.parts.items():
            sampled[name] = self._sample(parts, waiting)
            for part in parts:
                if waiting[part][1]:
                    wanted[(part.queue, waiting[part][1][0])] = None
            wanted.update(dict.fromkeys(sampled[name]))
        pipe = client.pipeline(transaction=False)
        # Counted in Redis only when more jobs finished than the window holds.
        counts: list[Tally] = [
            tally for q in self.queues
            for kind, tally, window in (("completed", self._completed[q], by_queue[q][3]),
                                        ("failed", self._failed[q], by_queue[q][4]))
            if tally.ask(pipe, f"{self.prefix}{q}:{kind}", window)]
        for q, job_id in wanted:
            pipe.hmget(f"{self.prefix}{q}:{job_id.decode()}", "timestamp", "data")
        started = self._starts.begin(now, ((q, job_id) for q in self.all_queues for job_id in (
            *by_queue[q][2], *(member for member, _ in by_queue[q][3]), *(member for member, _ in by_queue[q][4]))))
        for q, job_id in started:
            pipe.hmget(f"{self.prefix}{q}:{job_id.decode()}", "timestamp", "processedOn", "priority", "ats")
        replies = pipe.execute() if len(pipe) else []
        for i, tally in enumerate(counts):
            tally.counted(int(replies[2 * i]), int(replies[2 * i + 1]))
        stored = dict(zip(wanted, replies[2 * len(counts): 2 * len(counts) + len(wanted)], strict=True))
        for key, (timestamp, processed_on, priority, attempts) in zip(
                started, replies[2 * len(counts) + len(wanted):], strict=True):
            retried = (_int(attempts) or 0) > 1  # its processedOn is a later attempt's
            wait = self._starts.judge(key, None if retried else _epoch(timestamp), _epoch(processed_on))
            if wait is not None:
                for name in self._classes_of(key[0], _int(priority) or 0):
                    self._waits[name].observe(wait)
        self._starts.end()

        out = Readings()
        path = self.watch.tenant
        for name, parts in self.parts.items():
            heads = [_epoch(stored[(part.queue, waiting[part][1][0])][0]) for part in parts
                     if waiting[part][0] and waiting[part][1]]
            olds = [head for head in heads if head is not None]
            queues = self.whole[name]
            taken = tuple(dict.fromkeys(part.queue for part in parts))
            jobs_sampled = tuple((_tenant(stored[job][1], path), _epoch(stored[job][0])) for job in sampled[name]) \
                if path else ()
            out[name] = ClassReading(
                depth=sum(waiting[part][0] for part in parts),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(int(by_queue[q][1]) for q in queues) if queues else None,
                processed=sum(self._completed[q].count for q in queues) if queues else None,
                tenants=top_tenants([tenant for tenant, _ in jobs_sampled]),
                sample=jobs_sampled,
                paused=all(_int(by_queue[q][0]) for q in taken),
                dead_lettered=sum(self._failed[q].count for q in queues) if queues else None,
                waits=self._waits[name].read(),
            )
        out.dead_letters = sum(int(by_queue[q][5]) for q in self.all_queues)
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
    """A job's ``timestamp`` or ``processedOn`` (epoch ms) as epoch seconds; None if absent (taken
    meanwhile) or odd."""
    ms = _int(timestamp)
    return ms / 1000 if ms is not None else None


def _int(value: bytes | None) -> int | None:
    """A job hash's integer field; None if absent or odd."""
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _tenant(data: bytes | None, path: tuple[str, ...]) -> str | None:
    """The tenant at ``path`` (``data.tenant``) of a job whose ``data`` is ``data``'s JSON."""
    try:
        return tenant_of({"data": json.loads(data)}, path) if data else None
    except (ValueError, RecursionError):
        return None


SOURCE = BullmqSource
