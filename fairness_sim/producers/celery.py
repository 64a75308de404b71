"""Celery tasks sent with Celery's own client (``send_task`` on one held producer connection),
named ``job`` (a task the team's workers register; ``fairctl.sleep`` by default, see
:mod:`fairness_sim.watched_jobs`), to the class's queue with its priority where it lists one,
so kombu writes them to that priority's list. The tenant is placed in ``args``/``kwargs`` and
``service_s`` passed as a keyword. No result backend is used."""

from __future__ import annotations

from typing import Any

from fairness_core.config import Config

from .base import Target, WatchedProducer, own_client


class CeleryProducer(WatchedProducer):
    system = "celery"
    default_job = "fairctl.sleep"

    def __init__(self, config: Config, job: str | None = None) -> None:
        super().__init__(config, job)
        options = {"global_keyprefix": self.watch.prefix} if self.watch.prefix else {}
        self.unavailable = (own_client(self.system, "kombu.exceptions").OperationalError,)  # after kombu's retries
        self.app = own_client(self.system, "celery").Celery("fairctl-loadgen", broker=self.url, set_as_current=False)
        self.app.conf.update(broker_transport_options=options, task_ignore_result=True,
                             broker_connection_retry_on_startup=True)

    def write(self, where: Target, name: str, tenant: str, service_s: list[float]) -> None:
        options: dict[str, Any] = {"queue": where.queue}
        if where.priority is not None:
            options["priority"] = where.priority
        with self.app.producer_or_acquire() as producer:
            for s in service_s:
                args, kwargs = self.call(tenant, s)
                self.app.send_task(name, args=args, kwargs=kwargs, producer=producer, **options)

    def close(self) -> None:
        self.app.close()
