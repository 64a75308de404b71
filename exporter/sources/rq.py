"""RQ (https://python-rq.org), read from its own keys: ``rq:queue:<q>`` lists of job ids (RQ pushes
on the right and workers pop from the left, so index 0 is the next and oldest job), ``rq:job:<id>``
hashes (``enqueued_at`` and ``started_at`` ISO times in UTC, ``description`` the call as RQ wrote
it), the ``rq:wip:<q>`` started registry (scored by each job's heartbeat deadline; its members are
``<job id>:<execution id>`` from RQ 2), the ``rq:finished:<q>`` and ``rq:failed:<q>`` registries
(scored, in whole seconds, by when their record expires: the finish time plus ``result_ttl``, or
plus ``failure_ttl``, a year by default) and the ``rq:suspended`` key ``rq suspend`` sets.

Completions and dead letters are counted by the reader from the finished and failed registries
(:class:`~exporter.sources.base.Tally`): the jobs added to each since the exporter started, exact
while every job of a queue keeps its record for the same time (RQ's defaults: 500 s for a result, a
year for a failure), that record outlives the scrape interval, and the workers' clocks agree to a
second; jobs run with ``result_ttl=0`` leave no record and are not counted, nor are those kept for
ever (``-1``). The failed registry holds the jobs RQ gave up on (failed past their ``Retry``, or
abandoned by a worker that died), so it is the dead-letter set: its size across the watched queues
is ``fairness_dead_letters``. A worker suspended (``rq suspend``) takes no job from any queue, so
every class is paused while ``rq:suspended`` exists.

Waits: the jobs started since the previous read, found among the newest :data:`RECENT` of the
started registry and of each of the finished and failed registries, each observed once, by its own
``started_at`` minus ``enqueued_at`` (:class:`~exporter.sources.base.Starts`; a job retried counts
the wait of each run from its requeue). More than that many starting between two reads leave the
histogram a sample of them.

The tenant is read from ``description``: RQ's default serializer is pickle, which an exporter must
never load, and the description holds the call's arguments as Python literals, parsed with
``ast.literal_eval`` (a job whose arguments are not literals has none).

Two pipelined round trips a read: 7 commands a queue and one ``EXISTS``, then one ``HMGET`` per
queue head and sampled job and one per started job not read before (at most 3 x ``RECENT`` a queue),
and two ``ZCOUNT``s for a registry that gained more than ``RECENT`` records since the last read.
"""

from __future__ import annotations

import ast
import os
from datetime import UTC, datetime
from typing import Any, ClassVar

import redis

from exporter import metrics as m

from .base import (
    RECENT,
    ClassReading,
    Readings,
    Starts,
    Tally,
    WaitCounts,
    Waits,
    per_queue_sample,
    tenant_of,
    top_tenants,
)
from .watching import WatchConfig

DEFAULT_PREFIX = "rq"  # RQ 3 reads RQ_KEY_PREFIX from its environment; watch.prefix says the same here
PER_QUEUE = 7  # commands of the first round trip per queue


class RqSource:
    kind: ClassVar[str] = "rq"
    # RQ's queues are taken whole: it has no priorities inside a queue.
    has_priorities: ClassVar[bool] = False
    tenant_roots: ClassVar[tuple[str, ...]] = ("args", "kwargs")
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_INFLIGHT.name, m.JOBS_PROCESSED.name,
        m.QUEUE_TENANT_SHARE.name, m.QUEUE_ACTIVE_TENANTS.name, m.QUEUE_QUIET_OLDEST_AGE.name,
        m.TENANT_OLDEST_AGE.name, m.QUEUE_PAUSED.name, m.JOBS_DEAD_LETTERED.name, m.DEAD_LETTERS.name,
        m.JOBS_WAIT.name,
        *(spec.name for spec in m.REDIS_MEMORY)})  # Redis's memory: the collector's INFO

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        self.prefix = (watch.prefix or os.environ.get("RQ_KEY_PREFIX") or DEFAULT_PREFIX) + ":"
        self.queues = {name: tuple(q.queue for q in refs) for name, refs in watch.classes.items()}
        self.every = tuple(dict.fromkeys(q for queues in self.queues.values() for q in queues))
        self._finished = {q: Tally() for q in self.every}
        self._failed = {q: Tally() for q in self.every}
        self._starts: Starts[tuple[str, bytes]] = Starts()
        self._waits = {q: Waits() for q in self.every}

    def read(self, client: redis.Redis, now: float) -> Readings:
        sample = per_queue_sample(self.queues, self.watch)
        pipe = client.pipeline(transaction=False)
        for q in self.every:
            pipe.llen(f"{self.prefix}queue:{q}")
            pipe.lrange(f"{self.prefix}queue:{q}", 0, max(0, sample[q] - 1))
            pipe.zcount(f"{self.prefix}wip:{q}", now, "+inf")
            pipe.zrevrange(f"{self.prefix}wip:{q}", 0, RECENT - 1)
            self._finished[q].window(pipe, f"{self.prefix}finished:{q}")
            self._failed[q].window(pipe, f"{self.prefix}failed:{q}")
            pipe.zcard(f"{self.prefix}failed:{q}")
        pipe.exists(f"{self.prefix}suspended")
        *replies, suspended = pipe.execute()
        by_queue = {q: replies[PER_QUEUE * i: PER_QUEUE * (i + 1)] for i, q in enumerate(self.every)}

        pipe = client.pipeline(transaction=False)
        # Counted in Redis only when more records came than the window holds.
        counts: list[Tally] = [
            tally for q in self.every
            for registry, tally, window in (("finished", self._finished[q], by_queue[q][4]),
                                            ("failed", self._failed[q], by_queue[q][5]))
            if tally.ask(pipe, f"{self.prefix}{registry}:{q}", window)]
        wanted: list[tuple[str, bytes]] = []
        for q in self.every:
            for job_id in by_queue[q][1][: max(1, sample[q])]:
                wanted.append((q, job_id))
                pipe.hmget(f"{self.prefix}job:{job_id.decode()}", "enqueued_at", "description")
        started = self._starts.begin(now, ((q, job_id) for q in self.every for job_id in (
            *(member.split(b":", 1)[0] for member in by_queue[q][3]),
            *(member for member, _ in by_queue[q][4]), *(member for member, _ in by_queue[q][5]))))
        for key in started:
            pipe.hmget(f"{self.prefix}job:{key[1].decode()}", "enqueued_at", "started_at")
        replies = pipe.execute() if len(pipe) else []
        for i, tally in enumerate(counts):
            tally.counted(int(replies[2 * i]), int(replies[2 * i + 1]))
        jobs = replies[2 * len(counts): 2 * len(counts) + len(wanted)]
        for key, (enqueued_at, started_at) in zip(started, replies[2 * len(counts) + len(wanted):], strict=True):
            wait = self._starts.judge(key, _epoch(enqueued_at), _epoch(started_at))
            if wait is not None:
                self._waits[key[0]].observe(wait)
        self._starts.end()

        heads: dict[str, float | None] = {}
        sampled: dict[str, list[tuple[str | None, float | None]]] = {q: [] for q in self.every}
        for (q, _), (enqueued_at, description) in zip(wanted, jobs, strict=True):
            if q not in heads:
                heads[q] = _epoch(enqueued_at)
            if self.watch.tenant is not None and len(sampled[q]) < sample[q]:
                sampled[q].append((tenant_of(_arguments(description), self.watch.tenant), _epoch(enqueued_at)))
        out = Readings()
        for name, queues in self.queues.items():
            olds = [at for q in queues if by_queue[q][0] and (at := heads.get(q)) is not None]
            jobs_sampled = tuple(job for q in queues for job in sampled[q])
            out[name] = ClassReading(
                depth=sum(int(by_queue[q][0]) for q in queues),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(int(by_queue[q][2]) for q in queues),
                processed=sum(self._finished[q].count for q in queues),
                tenants=top_tenants([tenant for tenant, _ in jobs_sampled]),
                sample=jobs_sampled,
                paused=bool(suspended),
                dead_lettered=sum(self._failed[q].count for q in queues),
                waits=WaitCounts.summed(self._waits[q].read() for q in queues),
            )
        out.dead_letters = sum(int(by_queue[q][6]) for q in self.every)
        return out


def _epoch(value: bytes | None) -> float | None:
    """RQ's UTC time text (``2026-11-30T21:07:54.123456Z``) as epoch seconds; None if absent or odd."""
    if not value:
        return None
    try:
        return datetime.strptime(value.decode(), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except (UnicodeDecodeError, ValueError):
        return None


def _arguments(description: bytes | None) -> dict[str, Any]:
    """``{"args": [...], "kwargs": {...}}`` from a description such as ``tasks.send('acme', n=1)``;
    empty where it is not a call of literals."""
    try:
        call = ast.parse(description.decode() if description else "", mode="eval").body
        if not isinstance(call, ast.Call):
            return {}
        return {"args": [ast.literal_eval(a) for a in call.args],
                "kwargs": {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}}
    except (SyntaxError, ValueError, TypeError, UnicodeDecodeError, RecursionError, MemoryError):
        return {}


SOURCE = RqSource
