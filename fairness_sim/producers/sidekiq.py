"""Sidekiq jobs written as Sidekiq's client writes them (Sidekiq has no Python client; its wiki
documents this JSON for producers in other languages): ``LPUSH queue:<q>`` of the job JSON and
``SADD queues <q>``, pipelined. ``class`` is ``job`` (a Sidekiq job class the team's process
loads), ``args`` hold the tenant where ``watch.tenant`` says and then the service time in seconds,
last. ``created_at`` and ``enqueued_at`` are epoch seconds as floats, which every Sidekiq from 6.x
to 8.x reads (8.x writes integer milliseconds itself and tells the two apart by type)."""

from __future__ import annotations

import json
import secrets
import time

import redis

from fairness_core.config import Config

from .base import Target, WatchedProducer


class SidekiqProducer(WatchedProducer):
    system = "sidekiq"
    default_job = "FairctlSleep"

    def __init__(self, config: Config, job: str | None = None) -> None:
        super().__init__(config, job)
        self.prefix = f"{self.watch.prefix}:" if self.watch.prefix else ""
        self.client = redis.Redis.from_url(self.url)

    def write(self, where: Target, name: str, tenant: str, service_s: list[float]) -> None:
        now = time.time()
        jobs = []
        for s in service_s:
            args = self.with_tenant({"args": []}, tenant)["args"]
            jobs.append(json.dumps({"class": name, "args": [*args, s], "queue": where.queue, "retry": True,
                                    "jid": secrets.token_hex(12), "created_at": now, "enqueued_at": now}))
        pipe = self.client.pipeline(transaction=False)
        pipe.sadd(f"{self.prefix}queues", where.queue)
        pipe.lpush(f"{self.prefix}queue:{where.queue}", *jobs)
        pipe.execute()

    def close(self) -> None:
        self.client.close()
