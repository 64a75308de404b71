"""What ``fairctl loadgen`` writes into a job system it does not run: a scenario's jobs as that
system's own jobs, in the queues the config's ``watch`` section maps each class to.

A job goes where a team's own producer would put it. The config's classification rules give the
class (from the scenario stream's task, tier and ``user_waiting``), and the class's first queue in
``watch.classes`` gives the queue, with that entry's first priority where it lists some. The job
runs a function of ``job`` (a template of the task's name), and carries its tenant where
``watch.tenant`` says (so the exporter reads it back) and its service time as ``service_s``, which
the sleep jobs of docs/watching.md sleep for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any

import redis

from exporter.sources import QueueRef, WatchConfig, watched
from fairness_core.classification import classify
from fairness_core.config import Config, ConfigError
from fairness_core.jobs import FairnessError, RedisUnavailable

SERVICE_FIELD = "service_s"  # the job's live service time in seconds, as fairctl's own jobs carry it


class ClientMissing(FairnessError):
    """The system's own Python client, which writes its jobs, is not installed beside fairctl."""


def own_client(system: str, module: str) -> ModuleType:
    """``module`` of ``system``'s own Python client, imported now (each producer needs only its own);
    :class:`ClientMissing` names the extra that installs it."""
    try:
        return import_module(module)
    except ImportError as exc:
        raise ClientMissing(f"watch.system {system}: fairctl loadgen writes its jobs with {system}'s own client, "
                            f"{module}; install it beside fairctl (pip install 'fairctl[{system}]')") from exc


@dataclass(frozen=True)
class Target:
    """Where a class's jobs are written: the queue, and the priority to give them (None: none)."""

    queue: str
    priority: int | None


def target_of(ref: QueueRef) -> Target:
    return Target(ref.queue, ref.priorities[0] if ref.priorities else None)


def placed(arguments: dict[str, Any], path: tuple[str, ...] | None, tenant: str, field: str) -> dict[str, Any]:
    """``arguments`` with ``tenant`` set at ``path`` (a ``watch.tenant`` path: mapping keys, and
    list indices where the step is a number, lists padded with None), creating the mappings and
    lists on the way. Raises :class:`ConfigError` naming ``field`` where the path runs through a
    value that is not a mapping or list, or would overwrite one."""
    if path is None:
        return arguments
    node: dict[str, Any] | list[Any] = arguments
    for step, following in zip(path, (*path[1:], None)):
        current = _slot(node, step, path, arguments, field)
        if following is None:
            if isinstance(current, (dict, list)):
                raise ConfigError(field, f"{'.'.join(path)} holds {current!r} in {arguments!r}: no place for a tenant")
            _put(node, step, tenant)
        elif current is None:
            fresh: dict[str, Any] | list[Any] = [] if following.isdigit() else {}
            _put(node, step, fresh)
            node = fresh
        elif isinstance(current, (dict, list)):
            node = current
        else:
            raise ConfigError(field, f"{'.'.join(path)} runs through {current!r} in {arguments!r}")
    return arguments


def _slot(node: dict[str, Any] | list[Any], step: str, path: tuple[str, ...], arguments: object, field: str) -> Any:
    """What ``node`` holds at ``step`` (None: nothing yet); a list is padded up to a numeric step."""
    if isinstance(node, dict):
        return node.get(step)
    if not step.isdigit():
        raise ConfigError(field, f"{'.'.join(path)}: {step!r} indexes a list in {arguments!r}; use a number")
    node.extend([None] * (int(step) + 1 - len(node)))
    return node[int(step)]


def _put(node: dict[str, Any] | list[Any], step: str, value: Any) -> None:
    if isinstance(node, dict):
        node[step] = value
    else:
        node[int(step)] = value


class WatchedProducer:
    """The base of each system's producer: resolves a stream's class and queue, then hands the
    jobs to :meth:`write`. Its ``submit_many`` matches :meth:`fairness_core.Queue.submit_many`, so the load
    generator drives either."""

    system: str  # the ``watch.system`` value it writes for
    default_job: str  # the ``job`` template when none is given: the sleep job docs/watching.md defines
    # What the client raises when the system's Redis cannot be reached in time (then RedisUnavailable).
    unavailable: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)

    def __init__(self, config: Config, job: str | None = None) -> None:
        watch = watched(config)
        if watch is None:
            raise ValueError("a watched producer needs a config with a watch section")
        self.config = config
        self.watch: WatchConfig = watch
        self.url = self.watch.url or config.redis.url  # as the exporter reads it
        self.job = job or self.default_job

    def target(self, task: str, tier: str, user_waiting: bool) -> tuple[str, Target]:
        """The class a job of ``task`` is classified into, and where its jobs go."""
        name = classify(self.config, task, tier=tier, user_waiting=user_waiting).queue
        return name, target_of(self.watch.classes[name][0])

    def job_name(self, task: str) -> str:
        return self.job.replace("{task}", task)

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False) -> list[object | None]:
        """Write one job per payload (``{"service_s": s}`` from the load generator) for ``tenant``,
        in one round trip where the client allows; every job is reported queued."""
        _, where = self.target(task, tier or self.config.tenants.default_tier, user_waiting)
        service = [p.get(SERVICE_FIELD, 0.0) if isinstance(p, dict) else 0.0 for p in payloads]
        try:
            self.write(where, self.job_name(task), tenant, service)
        except self.unavailable as exc:  # the load generator waits and sends the chunk again
            raise RedisUnavailable(f"{self.system}'s Redis: {exc}") from exc
        return [where] * len(payloads)

    def with_tenant(self, arguments: dict[str, Any], tenant: str) -> dict[str, Any]:
        """A job's ``arguments`` (rooted as the exporter reads them) with ``tenant`` where
        ``watch.tenant`` says."""
        return placed(arguments, self.watch.tenant, tenant, "watch.tenant")

    def call(self, tenant: str, service_s: float) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments of a Python job call (RQ, Celery): the tenant where
        ``watch.tenant`` says, the service time as the keyword ``service_s``."""
        arguments = self.with_tenant({"args": [], "kwargs": {SERVICE_FIELD: service_s}}, tenant)
        return arguments["args"], arguments["kwargs"]

    def write(self, where: Target, name: str, tenant: str, service_s: list[float]) -> None:
        """Queue one job of function ``name`` per service time, for ``tenant``, at ``where``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the client's connections."""
