"""Sidekiq (https://sidekiq.org, 6.x to 8.x), read from its own keys: ``queue:<q>`` lists of whole
job JSON (the client LPUSHes, fetchers BRPOP from the right, so the oldest job is the last
element; its ``enqueued_at`` is epoch seconds as a float up to 7.x and epoch milliseconds from
8.0), the ``processes`` set of live process identities and each process's busy jobs, the hash
``<identity>:workers`` (up to 6.4) or ``<identity>:work`` (6.5 on), whose values name the queue
each running job came from, the job (``payload``) and when it started (``run_at``, whole epoch
seconds). Both names are read: a fleet mid-upgrade has both. The ``dead`` set holds the jobs
Sidekiq gave up on (their retries exhausted, or ``retry: 0``), every queue's, as job JSON scored by
when they died.

In-flight counts come from Sidekiq's heartbeat (every 5 s in 6.x, 10 s from 7.0), so they are as
stale as that. Completions are not served: Sidekiq counts them only globally (``stat:processed``,
failures included) or per job class (7.0's ``j|...`` metrics), never per queue, so ``processed``
is None, the processed counter is not in ``supplies`` and ``fairctl generate`` leaves out the
rules that need it (the realised shares). A class takes whole queues: Sidekiq has no priorities
inside one, and its weights (``-q critical,3``) are between queues, as a class's weight is.
``watch.prefix`` is a redis-namespace prefix (``<prefix>:queue:<q>``); none by default.

Dead letters: ``fairness_dead_letters`` is the dead set's size (every queue's: Sidekiq keeps one);
each class's counter is of the jobs that joined it since the exporter started, by the queue each
names (:class:`~exporter.sources.base.Arrivals`, at most :data:`DEAD_READ` a read: more dying
between two reads are counted over the next ones). Jobs with ``retry: false`` or ``dead: false``
leave no record and are not counted. The ``retry`` set is not served: it holds every queue's jobs
scored by when each retries next, not when it failed, so neither the failures since the last read
nor a class's part of it can be told without reading every job in it.

Waits: the busy jobs of each read not busy at the one before, each observed once, by its
``run_at`` minus its ``enqueued_at`` (so to within a second; a retried job's ``enqueued_at`` is
its requeue). Only jobs still running at a heartbeat are in the busy data, so the waits are of a
sample of the jobs: those running longer than a heartbeat's interval all, shorter ones by chance.

Two pipelined round trips a read: 2 commands a queue, the process set and 2 for the dead set, then
2 a process; nothing grows with the jobs queued or dead.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import redis

from exporter import metrics as m

from .base import Arrivals, ClassReading, Readings, Waits, per_queue_sample, tenant_of, top_tenants
from .watching import WatchConfig

MS_EPOCH_ABOVE = 1e11  # an enqueued_at above this is milliseconds (Sidekiq 8), else seconds (year 5138)
DEAD_READ = 100  # dead jobs a read takes at most


class SidekiqSource:
    kind: ClassVar[str] = "sidekiq"
    # Sidekiq's queues are taken whole: its weights are between queues, as a class's weight is.
    has_priorities: ClassVar[bool] = False
    tenant_roots: ClassVar[tuple[str, ...]] = ("args",)
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_INFLIGHT.name, m.QUEUE_TENANT_SHARE.name,
        m.QUEUE_ACTIVE_TENANTS.name, m.QUEUE_QUIET_OLDEST_AGE.name, m.TENANT_OLDEST_AGE.name,
        m.JOBS_DEAD_LETTERED.name, m.DEAD_LETTERS.name, m.JOBS_WAIT.name,
        *(spec.name for spec in m.REDIS_MEMORY)})  # Redis's memory: the collector's INFO

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        self.prefix = f"{watch.prefix}:" if watch.prefix else ""
        self.queues = {name: tuple(ref.queue for ref in refs) for name, refs in watch.classes.items()}
        self._dead = Arrivals(DEAD_READ)
        self._dead_lettered = {name: 0 for name in watch.classes}
        self._busy: set[tuple[str, str]] | None = None  # the busy jobs of the last read (None: not read yet)
        self._waits = {name: Waits() for name in watch.classes}

    def _classes_of(self, queue: Any) -> list[str]:
        return [name for name, queues in self.queues.items() if queue in queues]

    def read(self, client: redis.Redis, now: float) -> Readings:
        every = [q for queues in self.queues.values() for q in queues]
        sample = per_queue_sample(self.queues, self.watch)
        pipe = client.pipeline(transaction=False)
        for q in every:
            pipe.llen(f"{self.prefix}queue:{q}")
            pipe.lrange(f"{self.prefix}queue:{q}", -max(1, sample[q]), -1)  # the oldest last
        pipe.smembers(f"{self.prefix}processes")
        pipe.zcard(f"{self.prefix}dead")
        self._dead.read(pipe, f"{self.prefix}dead")
        *replies, processes, dead, died = pipe.execute()
        by_queue = {q: replies[2 * i: 2 * i + 2] for i, q in enumerate(every)}
        for raw in self._dead.take(died):
            for name in self._classes_of(_job(raw).get("queue")):
                self._dead_lettered[name] += 1

        busy: dict[str, int] = {}
        running: set[tuple[str, str]] = set()
        if processes:
            pipe = client.pipeline(transaction=False)
            for identity in sorted(p.decode() for p in processes):
                pipe.hvals(f"{self.prefix}{identity}:workers")
                pipe.hvals(f"{self.prefix}{identity}:work")
            for values in pipe.execute():
                for value in values:
                    work = _job(value)
                    fetched_from = work.get("queue")
                    if not isinstance(fetched_from, str):
                        continue
                    busy[fetched_from] = busy.get(fetched_from, 0) + 1
                    self._observe(work, fetched_from, running)
        self._busy = running

        heads: dict[str, float | None] = {}
        sampled: dict[str, list[tuple[str | None, float | None]]] = {q: [] for q in every}
        for q in every:
            decoded = [_job(raw) for raw in by_queue[q][1]]
            if decoded:
                heads[q] = _epoch(decoded[-1].get("enqueued_at"))
            if self.watch.tenant is not None:  # the oldest first
                sampled[q] = [(tenant_of({"args": job.get("args")}, self.watch.tenant), _epoch(job.get("enqueued_at")))
                              for job in reversed(decoded)]
        out = Readings()
        for name, queues in self.queues.items():
            olds = [at for q in queues if (at := heads.get(q)) is not None]
            jobs = tuple(job for q in queues for job in sampled[q])
            out[name] = ClassReading(
                depth=sum(int(by_queue[q][0]) for q in queues),
                oldest_enqueued=min(olds) if olds else None,
                inflight=sum(busy.get(q, 0) for q in queues),
                processed=None,
                tenants=top_tenants([tenant for tenant, _ in jobs]),
                sample=jobs,
                dead_lettered=self._dead_lettered[name],
                waits=self._waits[name].read(),
            )
        out.dead_letters = int(dead)
        return out

    def _observe(self, work: dict[str, Any], queue: str, running: set[tuple[str, str]]) -> None:
        """Observes the wait of a busy job (``work``: its busy entry) the last read did not find busy."""
        payload = work.get("payload")
        job = _job(payload.encode()) if isinstance(payload, str) else payload if isinstance(payload, dict) else {}
        run_at, enqueued_at = _epoch(work.get("run_at")), _epoch(job.get("enqueued_at"))
        key = (str(job.get("jid")), str(work.get("run_at")))  # a job's run: a retry runs again, at another time
        running.add(key)
        if self._busy is None or key in self._busy or run_at is None or enqueued_at is None:
            return  # the first read's were busy before the exporter started
        for name in self._classes_of(queue):
            self._waits[name].observe(max(0.0, run_at - enqueued_at))


def _job(raw: bytes) -> dict[str, Any]:
    """A job's JSON as Sidekiq wrote it; empty where it is not a JSON object."""
    try:
        job = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return job if isinstance(job, dict) else {}


def _epoch(value: Any) -> float | None:
    """``enqueued_at`` or ``run_at`` as epoch seconds: seconds (6.x, 7.x) or integer ms (8.x); None if odd."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000 if value > MS_EPOCH_ABOVE else float(value)


SOURCE = SidekiqSource
