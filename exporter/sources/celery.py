"""Celery 5 on kombu's Redis transport, read from kombu's own keys: one list per queue and priority
step (``q``, ``q\\x06\\x163``, ``q\\x06\\x166``, ``q\\x06\\x169`` for kombu's default steps 0, 3, 6,
9; ``watch.prefix`` is kombu's ``global_keyprefix``). Producers LPUSH and workers RPOP, so index -1
is the next and oldest message. Each element is a JSON message whose base64 body is protocol 2's
``[args, kwargs, embed]``.

Age: a Celery message carries no enqueue time, so the reader remembers, per list, the head
message's id and the ``now`` of the first read that saw it at the head, and (with a tenant path)
the ``now`` of the first read that found each sampled message among the list's next ones; a list's
oldest is the earliest of those, and ``oldest_enqueued`` the earliest among the class's non-empty
lists. No message was enqueued after it was first seen, and none ahead of it after it was, so the
age is a lower bound. It is the true age to within one scrape interval only for a message sent to
a list while watched with no more than the sample ahead of it. A message that queued behind others
counts from when it came within the sample of the head (or reached it), and the head of a list
already long at the exporter's first scrape counts from that scrape. So a long queue that keeps
moving shows a small age, and one that stops moving shows a growing age: the starvation the metric
is there to catch. The tenants' oldest jobs and the quiet tenants' (``tenant_figures``) are timed
the same way, from when each sampled message was first seen.

In-flight is not served. kombu's ``unacked`` hash holds messages delivered and not yet acked. Under
Celery's default early ack a task leaves it when it starts, so it holds the prefetched messages not
yet started and the ETA/countdown messages a worker holds until their time, which are unbounded. It
holds running tasks only under ``acks_late`` or a solo pool. In a run with two threads each running a
4 s task and three countdown=60 messages held, it held exactly those 3 and neither running task.
Depth counts the lists only, which those messages have left. Completions are not served either: the
broker keeps no record of them.

Cost: one pipelined round trip of LLEN and LINDEX per list. With a tenant path there is a second
one: an LRANGE per non-empty list, at most ``watch.sample`` messages per class. kombu's
``priority_steps`` transport option is not read: the steps are kombu's defaults.
"""

from __future__ import annotations

import base64
import json
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any, ClassVar

import redis

from exporter import metrics as m

from .base import ClassReading, Readings, tenant_of, top_tenants
from .watching import QueueRef, WatchConfig

PRIORITY_STEPS = (0, 3, 6, 9)  # kombu.transport.redis.PRIORITY_STEPS
SEP = "\x06\x16"  # kombu's separator between a queue's name and its priority step


def step_of(priority: int) -> int:
    """The step a message of Celery priority ``priority`` is stored under: the highest step at or below it."""
    return PRIORITY_STEPS[bisect_right(PRIORITY_STEPS, priority) - 1]


def list_keys(ref: QueueRef, prefix: str = "") -> tuple[tuple[int, str], ...]:
    """(step, list key) of each of kombu's lists a class's queue reference covers, steps ascending."""
    steps = sorted({step_of(p) for p in ref.priorities}) if ref.priorities else PRIORITY_STEPS
    return tuple((s, f"{prefix}{ref.queue}{SEP}{s}" if s else f"{prefix}{ref.queue}") for s in steps)


class CelerySource:
    kind: ClassVar[str] = "celery"
    # Celery's message priorities (kombu's steps) are a class's to take some of.
    has_priorities: ClassVar[bool] = True
    tenant_roots: ClassVar[tuple[str, ...]] = ("args", "kwargs")
    supplies: ClassVar[frozenset[str]] = frozenset({
        m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name, m.QUEUE_TENANT_SHARE.name, m.QUEUE_ACTIVE_TENANTS.name,
        m.QUEUE_QUIET_OLDEST_AGE.name, m.TENANT_OLDEST_AGE.name,
        *(spec.name for spec in m.REDIS_MEMORY)})  # Redis's memory: the collector's INFO

    def __init__(self, watch: WatchConfig) -> None:
        self.watch = watch
        prefix = watch.prefix or ""
        # Each class's lists in kombu's consume order: steps ascending, then its queues in config
        # order (a list two references of the class cover is counted once).
        self.lists: dict[str, tuple[tuple[int, str], ...]] = {
            name: tuple(sorted(dict.fromkeys(k for ref in refs for k in list_keys(ref, prefix)), key=lambda sk: sk[0]))
            for name, refs in watch.classes.items()}
        self.keys = tuple(dict.fromkeys(key for lists in self.lists.values() for _, key in lists))
        self._heads: dict[str, tuple[str | int | None, float]] = {}  # list -> (head id, first seen at the head)
        # list -> {message id: first seen among the sampled}, for the messages of the last sample
        self._sampled: dict[str, dict[str | int | None, float]] = {}

    def read(self, client: redis.Redis, now: float) -> Readings:
        pipe = client.pipeline(transaction=False)
        for key in self.keys:
            pipe.llen(key)
            pipe.lindex(key, -1)
        replies = pipe.execute()
        lengths = {key: int(replies[2 * i]) for i, key in enumerate(self.keys)}
        for i, key in enumerate(self.keys):
            self._see_head(key, lengths[key], replies[2 * i + 1], now)

        sampled = self._sample(client, lengths, self.watch.tenant, now) if self.watch.tenant is not None else {}
        out = Readings()
        for name, lists in self.lists.items():
            seen = [self._heads[key][1] for _, key in lists if key in self._heads]
            seen += [min(self._sampled[key].values()) for _, key in lists if lengths[key] and self._sampled.get(key)]
            jobs = tuple(sampled.get(name, ()))
            out[name] = ClassReading(
                depth=sum(lengths[key] for _, key in lists),
                oldest_enqueued=min(seen) if seen else None,
                inflight=None,
                processed=None,
                tenants=top_tenants([tenant for tenant, _ in jobs]),
                sample=jobs,
            )
        return out

    def _see_head(self, key: str, length: int, head: bytes | None, now: float) -> None:
        """Remember when the list's head message was first seen there (forgotten when it empties)."""
        if length == 0:
            self._heads.pop(key, None)
            return
        ident = _identity(head)
        known = self._heads.get(key)
        # The head can be popped between LLEN and LINDEX (head None): keep what is known.
        if known is None or (ident is not None and ident != known[0]):
            self._heads[key] = (ident, now)

    def _sample(self, client: redis.Redis, lengths: Mapping[str, int], path: tuple[str, ...],
                now: float) -> dict[str, list[tuple[str | None, float]]]:
        """The tenants at ``path`` of up to ``watch.sample`` messages per class, from the consume
        end, each with when a read first found it there (remembered for the next read)."""
        wanted = [(name, key, n) for name, lists in self.lists.items()
                  for key, n in _apportion(lists, lengths, self.watch.sample).items() if n]
        pipe = client.pipeline(transaction=False)
        for _, key, n in wanted:
            pipe.lrange(key, -n, -1)
        out: dict[str, list[tuple[str | None, float]]] = {}
        seen: dict[str, dict[str | int | None, float]] = {}
        for (name, key, _), messages in zip(wanted, pipe.execute(), strict=True):
            known, now_known = self._sampled.get(key, {}), seen.setdefault(key, {})
            for raw in reversed(messages):  # the next one first
                ident = _identity(raw)
                first = now_known[ident] = min(known.get(ident, now), now_known.get(ident, now))
                out.setdefault(name, []).append((tenant_of(_arguments(raw), path), first))
        self._sampled = seen
        return out


def _apportion(lists: tuple[tuple[int, str], ...], lengths: Mapping[str, int], sample: int) -> dict[str, int]:
    """Messages to read from each list: the next ``sample`` a worker would take. kombu serves the
    lower steps first and the queues of one step in turn, so the sample fills step by step, split
    evenly among a step's lists (a short list's unused share goes to the others)."""
    take = {key: 0 for _, key in lists}
    left = sample
    for step in sorted({s for s, _ in lists}):
        keys = [key for s, key in lists if s == step]
        while left:
            open_keys = [key for key in keys if take[key] < lengths[key]]
            if not open_keys:
                break
            share = max(1, left // len(open_keys))
            for key in open_keys:
                extra = min(share, lengths[key] - take[key], left)
                take[key] += extra
                left -= extra
    return take


def _message(raw: bytes | None) -> dict[str, Any] | None:
    """A list element as kombu's message mapping; None when it is not one."""
    if raw is None:
        return None
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def _identity(raw: bytes | None) -> str | int | None:
    """What tells one head message from the next: its task id (``headers.id``, else
    ``properties.correlation_id``), or a hash of the element when it has neither."""
    if raw is None:
        return None
    message = _message(raw) or {}
    for part, field in (("headers", "id"), ("properties", "correlation_id")):
        section = message.get(part)
        found = section.get(field) if isinstance(section, dict) else None
        if isinstance(found, str):
            return found
    return hash(raw)


def _arguments(raw: bytes) -> Any:
    """``{"args": .., "kwargs": ..}`` of a JSON task message (protocol 2's body
    ``[args, kwargs, embed]``; protocol 1's body is already such a mapping); None for anything
    else, including pickled bodies, which must never be loaded."""
    message = _message(raw)
    if message is None or message.get("content-type") != "application/json":
        return None
    body = message.get("body")
    if not isinstance(body, (str, bytes)):  # JSON text, or its base64; anything else is no task message
        return None
    properties = message.get("properties")
    try:
        if isinstance(properties, dict) and properties.get("body_encoding") == "base64":
            body = base64.b64decode(body, validate=True)
        decoded = json.loads(body)
    except (ValueError, TypeError, RecursionError):  # binascii.Error is a ValueError
        return None
    if isinstance(decoded, list) and len(decoded) >= 2:
        return {"args": decoded[0], "kwargs": decoded[1]}
    return decoded if isinstance(decoded, dict) else None


SOURCE = CelerySource
