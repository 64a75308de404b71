"""RQ (https://python-rq.org), read from its own keys: ``rq:queue:<q>`` lists of job ids (RQ pushes
on the right and workers pop from the left, so index 0 is the next and oldest job), ``rq:job:<id>``
hashes (``enqueued_at`` an ISO time in UTC, ``description`` the call as RQ wrote it), the
``rq:wip:<q>`` started registry (scored by each job's heartbeat deadline) and the ``rq:finished:<q>``
registry (scored by when its result expires: the finish time plus ``result_ttl``).

Completions are counted by the reader: each read adds the finished jobs scored past the latest one
it saw, so the counter is exact while every job of a queue keeps its result for the same time (RQ's
default is 500 s) and scrapes come more often than that; jobs run with ``result_ttl=0`` leave no
record and are not counted. The tenant is read from ``description``: RQ's default serializer is
pickle, which an exporter must never load, and the description holds the call's arguments as
Python literals, parsed with ``ast.literal_eval`` (a job whose arguments are not literals has none).
Two pipelined round trips a read: 4 commands a queue, then one per queue head and sampled job.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import redis

from exporter import metrics as m

from .base import ClassReading, per_queue_sample, tenant_of, top_tenants
from .watching import WatchConfig

DEFAULT_PREFIX = "rq"  # RQ 3 reads RQ_KEY_PREFIX from its environment; watch.prefix says the same here


class RqSource:
    kind: ClassVar[str] = "rq"
    # RQ's queues are taken whole: it has no priorities inside a queue.
    has_priorities: ClassVar[bool] = False
    tenant_roots: ClassVar[tuple[str, ...]] = ("args", "kwargs")
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_INFLIGHT.name, m.JOBS_PROCESSED.name,
        m.QUEUE_TENANT_SHARE.name})

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        self.prefix = (watch.prefix or os.environ.get("RQ_KEY_PREFIX") or DEFAULT_PREFIX) + ":"
        self.queues = {name: tuple(q.queue for q in refs) for name, refs in watch.classes.items()}
        self._finished_seen: dict[str, float] = {}  # queue -> latest finished-registry score read
        self._processed: dict[str, int] = {name: 0 for name in watch.classes}

    def read(self, client: redis.Redis, now: float) -> Mapping[str, ClassReading]:
        every = [q for queues in self.queues.values() for q in queues]
        sample = per_queue_sample(self.queues, self.watch)
        pipe = client.pipeline(transaction=False)
        for q in every:
            pipe.llen(f"{self.prefix}queue:{q}")
            pipe.lrange(f"{self.prefix}queue:{q}", 0, max(0, sample[q] - 1))
            pipe.zcount(f"{self.prefix}wip:{q}", now, "+inf")
            seen = self._finished_seen.get(q)
            pipe.zrange(f"{self.prefix}finished:{q}", -1, -1, withscores=True)
            pipe.zcount(f"{self.prefix}finished:{q}", "-inf" if seen is None else f"({seen!r}", "+inf")
        replies = pipe.execute()
        by_queue = {q: replies[5 * i: 5 * i + 5] for i, q in enumerate(every)}

        pipe = client.pipeline(transaction=False)
        wanted: list[tuple[str, bytes]] = []
        for q in every:
            ids = by_queue[q][1]
            for job_id in ids[: max(1, sample[q])]:
                wanted.append((q, job_id))
                pipe.hmget(f"{self.prefix}job:{job_id.decode()}", "enqueued_at", "description")
        jobs = pipe.execute() if wanted else []

        heads: dict[str, float | None] = {}
        tenants: dict[str, list[str | None]] = {q: [] for q in every}
        for (q, job_id), (enqueued_at, description) in zip(wanted, jobs, strict=True):
            if q not in heads:
                heads[q] = _epoch(enqueued_at)
            if self.watch.tenant is not None and len(tenants[q]) < sample[q]:
                tenants[q].append(tenant_of(_arguments(description), self.watch.tenant))
        out = {}
        for name, queues in self.queues.items():
            for q in queues:
                _, _, _, latest, new = by_queue[q]
                if latest:
                    self._finished_seen[q] = float(latest[0][1])
                self._processed[name] += int(new)
            olds = [at for q in queues if by_queue[q][0] and (at := heads.get(q)) is not None]
            out[name] = ClassReading(
                depth=sum(int(by_queue[q][0]) for q in queues),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(int(by_queue[q][2]) for q in queues),
                processed=self._processed[name],
                tenants=top_tenants([t for q in queues for t in tenants[q]]),
            )
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
