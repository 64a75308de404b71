"""BullMQ jobs added with BullMQ's own Python client (``Queue.addBulk``: BullMQ's own Lua, the
same scripts its Node client runs), named ``job`` (``{task}`` by default: a BullMQ worker runs
every job of its queue, whatever its name), with ``data`` holding ``service_s`` and the tenant
where ``watch.tenant`` says, and ``priority`` where the class's queue entry lists one. The client
is asyncio; this producer runs it on an event loop of its own, one call at a time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from fairness_core.config import Config

from .base import SERVICE_FIELD, Target, WatchedProducer, own_client

DEFAULT_PREFIX = "bull"
CONNECT_RETRIES = 2


class BullmqProducer(WatchedProducer):
    system = "bullmq"
    default_job = "{task}"

    def __init__(self, config: Config, job: str | None = None) -> None:
        super().__init__(config, job)
        self._queue_class = own_client(self.system, "bullmq").Queue
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()  # the load generator calls from two threads; the loop runs one call at a time
        self._queues: dict[str, Any] = {}

    def write(self, where: Target, name: str, tenant: str, service_s: list[float]) -> None:
        opts = {} if where.priority is None else {"priority": where.priority}
        jobs = [{"name": name, "data": self.with_tenant({"data": {SERVICE_FIELD: s}}, tenant)["data"], "opts": opts}
                for s in service_s]
        with self._lock:
            self._loop.run_until_complete(self._queue(where.queue).addBulk(jobs))

    def _queue(self, name: str) -> Any:
        """BullMQ's Queue on a client of this producer's own: the client BullMQ makes from a URL
        retries a refused connection 20 times with backoff capped at 20 s (about 6 minutes, measured),
        where the load generator should hear within a second that Redis is away."""
        if name not in self._queues:
            client = redis.asyncio.from_url(self.url, decode_responses=True,
                                            retry=Retry(ExponentialBackoff(cap=0.5, base=0.1), CONNECT_RETRIES))
            self._queues[name] = self._queue_class(name, {"connection": client,
                                                          "prefix": self.watch.prefix or DEFAULT_PREFIX})
        return self._queues[name]

    def close(self) -> None:
        with self._lock:
            for queue in self._queues.values():
                self._loop.run_until_complete(queue.close())
            self._loop.close()
