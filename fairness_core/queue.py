"""One way to open a queue from Python, whatever the config: a queue group of its own, or one
logical queue sharded over several (``redis.shards``). Producers and workers use :class:`Queue`,
which both serve, so code written against one config keeps working when the queue is sharded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .config import Config
from .connection import redis_client
from .jobs import Enqueued, Finished, Lease, Popped
from .scheduler import Scheduler
from .sharded import ShardedScheduler


class Queue(Protocol):
    """What a producer and a worker use, on one queue group and on a sharded queue alike."""

    @property
    def config(self) -> Config: ...

    def enqueue(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
                user_waiting: bool = False) -> str: ...

    def submit(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False, key: str | None = None) -> Enqueued: ...

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False, keys: Sequence[str] | None = None) -> list[Enqueued | None]: ...

    def pop(self, max_jobs: int = 1, *, classes: Sequence[str] | None = None, owner: str = "") -> list[Lease]: ...

    def ack_and_pop(self, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None, owner: str = "") -> Popped: ...

    def ack(self, lease: Lease, *, runtime: float | None = None) -> bool: ...

    def nack(self, lease: Lease, error: str | None = None, *, final: bool = False,
             runtime: float | None = None) -> str: ...

    def defer_unhandled(self, lease: Lease) -> str: ...

    def give_back(self, leases: Sequence[Lease]) -> int: ...

    def reclaim(self, owner: str, held: Sequence[Lease]) -> int: ...

    def lease_taken_back(self, job_id: str) -> bool: ...

    def lost_with_state(self, lease: Lease) -> bool: ...

    def extend(self, lease: Lease) -> bool: ...

    def pause(self, queue: str) -> None: ...

    def groups(self) -> list[Scheduler]: ...

    def check_state(self) -> bool: ...

    def locate(self, job_id: str) -> tuple[int, str]: ...

    def job_id_in(self, group: int, job_id: str) -> str: ...

    def resume(self, queue: str) -> None: ...


def open_queue(config: Config, client: Any = None) -> Scheduler | ShardedScheduler:
    """The queue ``config`` describes, on ``client`` (default: a client of ``config.redis.url``):
    a :class:`Scheduler` for a queue group of its own, a :class:`ShardedScheduler` for a sharded
    one. Both are a :class:`Queue`."""
    client = redis_client(config.redis.url) if client is None else client
    return Scheduler(config, client) if config.redis.shards == 1 else ShardedScheduler(config, client)
