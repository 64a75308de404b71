"""RQ jobs written with RQ's own client (``Queue.enqueue_many``: one pipelined round trip a
batch), calling ``job`` (a dotted function path the team's ``rq worker`` imports) with the tenant
placed in ``args``/``kwargs`` and ``service_s`` as a keyword."""

from __future__ import annotations

import redis

from fairness_core.config import Config, ConfigError

from .base import Target, WatchedProducer, own_client


class RqProducer(WatchedProducer):
    system = "rq"
    default_job = "fairness_sim.watched_jobs.sleep"

    def __init__(self, config: Config, job: str | None = None) -> None:
        super().__init__(config, job)
        self._queue_class = own_client(self.system, "rq").Queue
        prefix = getattr(own_client(self.system, "rq.defaults"), "RQ_KEY_PREFIX", "rq")  # RQ 3 reads it from the environment
        if self.watch.prefix not in (None, prefix):
            raise ConfigError("watch.prefix", f"{self.watch.prefix!r}, but RQ here writes under {prefix!r}: set "
                                              f"RQ_KEY_PREFIX={self.watch.prefix} in fairctl loadgen's environment")
        self.client = redis.Redis.from_url(self.url)

    def write(self, where: Target, name: str, tenant: str, service_s: list[float]) -> None:
        queue = self._queue_class(where.queue, connection=self.client)
        calls = [self.call(tenant, s) for s in service_s]
        queue.enqueue_many([self._queue_class.prepare_data(name, args=tuple(args), kwargs=kwargs)
                            for args, kwargs in calls])

    def close(self) -> None:
        self.client.close()
