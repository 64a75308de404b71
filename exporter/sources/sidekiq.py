"""Sidekiq (https://sidekiq.org, 6.x to 8.x), read from its own keys: ``queue:<q>`` lists of whole
job JSON (the client LPUSHes, fetchers BRPOP from the right, so the oldest job is the last
element; its ``enqueued_at`` is epoch seconds as a float up to 7.x and epoch milliseconds from
8.0), the ``processes`` set of live process identities and each process's busy jobs, the hash
``<identity>:workers`` (up to 6.4) or ``<identity>:work`` (6.5 on), whose values name the queue
each running job came from. Both names are read: a fleet mid-upgrade has both.

In-flight counts come from Sidekiq's heartbeat (every 5 s in 6.x, 10 s from 7.0), so they are as
stale as that. Completions are not served: Sidekiq counts them only globally (``stat:processed``,
failures included) or per job class (7.0's ``j|...`` metrics), never per queue, so ``processed``
is None, the processed counter is not in ``supplies`` and ``fairctl generate`` leaves out the
rules that need it (the realised shares). A class takes whole queues: Sidekiq has no priorities
inside one, and its weights (``-q critical,3``) are between queues, as a class's ``weight`` is.
``watch.prefix`` is a redis-namespace prefix (``<prefix>:queue:<q>``); none by default.

Two pipelined round trips a read: 2 commands a queue and the process set, then 2 a process;
nothing grows with the jobs queued.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import redis

from exporter import metrics as m

from .base import ClassReading, per_queue_sample, tenant_of, top_tenants
from .watching import WatchConfig

MS_EPOCH_ABOVE = 1e11  # an enqueued_at above this is milliseconds (Sidekiq 8), else seconds (year 5138)


class SidekiqSource:
    kind: ClassVar[str] = "sidekiq"
    # Sidekiq's queues are taken whole: its weights are between queues, as a class's weight is.
    has_priorities: ClassVar[bool] = False
    tenant_roots: ClassVar[tuple[str, ...]] = ("args",)
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_INFLIGHT.name, m.QUEUE_TENANT_SHARE.name})

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        self.prefix = f"{watch.prefix}:" if watch.prefix else ""
        self.queues = {name: tuple(ref.queue for ref in refs) for name, refs in watch.classes.items()}

    def read(self, client: redis.Redis, now: float) -> Mapping[str, ClassReading]:
        every = [q for queues in self.queues.values() for q in queues]
        sample = per_queue_sample(self.queues, self.watch)
        pipe = client.pipeline(transaction=False)
        for q in every:
            pipe.llen(f"{self.prefix}queue:{q}")
            pipe.lrange(f"{self.prefix}queue:{q}", -max(1, sample[q]), -1)  # the oldest last
        pipe.smembers(f"{self.prefix}processes")
        *replies, processes = pipe.execute()
        by_queue = {q: replies[2 * i: 2 * i + 2] for i, q in enumerate(every)}

        busy: dict[str, int] = {}
        if processes:
            pipe = client.pipeline(transaction=False)
            for identity in sorted(p.decode() for p in processes):
                pipe.hvals(f"{self.prefix}{identity}:workers")
                pipe.hvals(f"{self.prefix}{identity}:work")
            for values in pipe.execute():
                for value in values:
                    fetched_from = _busy_queue(value)
                    if fetched_from is not None:
                        busy[fetched_from] = busy.get(fetched_from, 0) + 1

        heads: dict[str, float | None] = {}
        tenants: dict[str, list[str | None]] = {q: [] for q in every}
        for q in every:
            decoded = [_job(raw) for raw in by_queue[q][1]]
            if decoded:
                heads[q] = _epoch(decoded[-1].get("enqueued_at"))
            if self.watch.tenant is not None:
                tenants[q] = [tenant_of({"args": job.get("args")}, self.watch.tenant) for job in decoded]
        out = {}
        for name, queues in self.queues.items():
            olds = [at for q in queues if (at := heads.get(q)) is not None]
            out[name] = ClassReading(
                depth=sum(int(by_queue[q][0]) for q in queues),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(busy.get(q, 0) for q in queues),
                processed=None,
                tenants=top_tenants([t for q in queues for t in tenants[q]]),
            )
        return out


def _job(raw: bytes) -> dict[str, Any]:
    """A job's JSON as Sidekiq wrote it; empty where it is not a JSON object."""
    try:
        job = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return job if isinstance(job, dict) else {}


def _busy_queue(raw: bytes) -> str | None:
    """The queue a busy entry (``{"queue": ..., "payload": ..., "run_at": ...}``) was fetched from."""
    queue = _job(raw).get("queue")
    return queue if isinstance(queue, str) else None


def _epoch(value: Any) -> float | None:
    """``enqueued_at`` as epoch seconds: float seconds (6.x, 7.x) or integer ms (8.x); None if odd."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000 if value > MS_EPOCH_ABOVE else float(value)


SOURCE = SidekiqSource
