"""The scheduler on Redis: a thin Python shell around one atomic Lua script.

Every decision and its effect (classify-then-push, choose-class-then-tenant-then-pop-and-lease,
ack, nack, reap, promote) is one script call, so a fleet of workers shares exact weighted shares
and nothing is lost or half-written when a worker or the connection dies between calls.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .classification import classify
from .config import Config
from .connection import redis_errors
from .jobs import (
    SEP, BudgetRejected, DeadLetter, DeadOutcome, Enqueued, InvalidJob, Lease, Popped, Record, check_job_id,
    check_task, check_tenant, check_tier, encode_payload, one_line,
)
from .keys import Keys
from .script import script_source
from .settings import derive
from .snapshot import RawClass, Snapshot, build_snapshot

MAX_POP = 1000
SWEEP_LIMIT = 1000
DEAD_PAGE = 100



class Scheduler:
    """Priority classes with exact weighted shares and weighted fair queuing across tenants.

    ``clock`` (milliseconds) overrides Redis ``TIME``; only tests that compare against the
    reference model need it. Production time always comes from Redis, never worker clocks.
    """

    def __init__(self, config: Config, client: Any, *, clock: Callable[[], int] | None = None) -> None:
        self.config = config
        self.settings = derive(config)
        self.client = client
        self.keys = Keys(config.redis.prefix)
        self._clock = clock
        self._script = client.register_script(script_source(self.settings))
        self._fixed_keys = self.keys.fixed()

    def _argv(self, op: object, *args: object) -> list[object]:
        now = "" if self._clock is None else str(int(self._clock()))
        return [op, self.keys.base, now, *args]

    def _call(self, op: str, *args: object) -> Any:
        with redis_errors(self.client):
            return self._script(keys=self._fixed_keys, args=self._argv(op, *args))

    # ------------------------------------------------------------------ producing

    def enqueue(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
                user_waiting: bool = False) -> str:
        """Classify and queue one job; returns its id. Raises InvalidJob before touching Redis."""
        return self.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting).job_id

    def submit(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False) -> Enqueued:
        """Like :meth:`enqueue`, also telling the class and reason the job was queued under."""
        head, body = self._enqueue_args(task, tenant, tier, user_waiting), encode_payload(payload, self.config)
        reply = self._call(*head, body)
        return self._enqueued(reply, head)

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False) -> list[Enqueued | None]:
        """One job per payload, all for the same task and tenant, in one pipelined round trip: a
        burst (a load generator, a backfill) is not held to one round trip per job. Each job is
        its own atomic script call, exactly as :meth:`submit`'s; None for a job a priority budget
        rejected. Every payload is checked before anything is sent."""
        head = self._enqueue_args(task, tenant, tier, user_waiting)
        bodies = [encode_payload(p, self.config) for p in payloads]
        pipe = self.client.pipeline(transaction=False)
        for body in bodies:
            self._script(keys=self._fixed_keys, args=self._argv(*head, body), client=pipe)
        with redis_errors(self.client):
            replies = pipe.execute()
        return [self._enqueued(reply, head, raise_rejected=False) for reply in replies]

    def _enqueue_args(self, task: str, tenant: str, tier: str | None, user_waiting: bool) -> tuple[object, ...]:
        """The enqueue op's arguments but the payload, after checking each (InvalidJob names it)."""
        task = check_task(task)
        tenant = check_tenant(tenant, self.config)
        tier = check_tier(tier, self.config)
        if not isinstance(user_waiting, bool):
            raise InvalidJob("user_waiting", f"expected true or false, got {user_waiting!r}")
        decision = classify(self.config, task, tier=tier, user_waiting=user_waiting)
        return ("enqueue", self.config.class_index(decision.queue) + 1, tenant, tier, task, decision.reason)

    def _enqueued(self, reply: Any, head: tuple[object, ...], *, raise_rejected: bool = True) -> Enqueued | None:
        job_id, queue, reason = reply
        if job_id:
            return Enqueued(_text(job_id), _text(queue), _text(reason))
        if not raise_rejected:
            return None
        asked = self.settings.classes[int(str(head[1])) - 1]
        raise BudgetRejected(f"{asked} is over its arrival budget; job for tenant {head[2]!r} rejected")

    # ------------------------------------------------------------------ consuming

    def pop(self, max_jobs: int = 1, *, classes: Sequence[str] | None = None) -> list[Lease]:
        """Lease up to ``max_jobs`` jobs, chosen by the configured policy; ``classes`` limits a
        reserved pool to some classes. Returns an empty list when nothing is due."""
        return self.ack_and_pop((), max_jobs, classes=classes).leases

    def ack_and_pop(self, done: Sequence[Lease], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None) -> Popped:
        """Complete ``done`` (each exactly as :meth:`ack` would) and lease the next jobs, in one
        script call: a worker pays one round trip per job instead of two, the way BullMQ's
        move-to-finished hands back the next job. The acks are applied before the pop."""
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= MAX_POP:
            raise ValueError(f"max_jobs: expected 1..{MAX_POP}, got {max_jobs!r}")
        allowed = ""
        if classes is not None:
            allowed = ",".join(str(self._class_index(c, "classes") + 1) for c in classes)
            if not allowed:
                raise ValueError("classes: expected at least one class name, or None for all")
        settle = [arg for lease in done for arg in (lease.job_id, lease.attempts)]
        _now, items, acked = self._call("pop", max_jobs, allowed, *settle)
        return Popped(acked=[bool(a) for a in acked],
                      leases=[Record.from_fields([_text(f) for f in item]).lease() for item in items])

    def ack(self, lease: Lease) -> bool:
        """Complete a job. False when the lease had expired and the job went back to the queue."""
        return bool(self._call("ack", lease.job_id, lease.attempts))

    def nack(self, lease: Lease, error: str | None = None, *, final: bool = False) -> str:
        """Fail a job: ``"retry"`` (after exponential backoff), ``"dead"`` (dead-lettered after
        ``leases.max_attempts``, or at once with ``final``: a failure no retry can mend) or
        ``"stale"`` (the lease had already expired)."""
        return _text(self._call("nack", lease.job_id, lease.attempts, one_line(error or "failed"), "1" if final else "0"))

    def extend(self, lease: Lease) -> bool:
        """Heartbeat for a long job: push the lease deadline a visibility timeout ahead."""
        return bool(self._call("extend", lease.job_id, lease.attempts))

    # ------------------------------------------------------------------ sweeps

    def reap(self, limit: int = SWEEP_LIMIT) -> int:
        """Return expired leases to the head of their tenant's sub-queue; how many expired."""
        return int(self._call("reap", limit))

    def promote_overdue(self, limit: int = SWEEP_LIMIT) -> int:
        """Aging: move jobs older than their class's ``promote_after`` one class up, at most
        ``tenants.batch`` per tenant per sweep (oldest tenants first), so a flood stays a flood."""
        return int(self._call("promote", limit))

    def register_worker(self, worker_id: str, slots: int, ttl: float) -> None:
        """Count a worker's slots towards fleet capacity (reserved slots need it) for ``ttl`` s."""
        self._call("register", worker_id, slots, int(ttl * 1000))

    def unregister_worker(self, worker_id: str) -> None:
        self._call("register", worker_id, 0, 0)

    # ------------------------------------------------------------------ control

    def pause(self, queue: str) -> None:
        self._class_index(queue, "queue")
        with redis_errors(self.client):
            self.client.sadd(self.keys.paused, queue)

    def resume(self, queue: str) -> None:
        self._class_index(queue, "queue")
        with redis_errors(self.client):
            self.client.srem(self.keys.paused, queue)

    def _class_index(self, name: str, argument: str) -> int:
        try:
            return self.config.class_index(name)
        except KeyError as exc:
            raise ValueError(f"{argument}: {exc.args[0]}") from None

    # ------------------------------------------------------------------ observing

    def snapshot(self) -> Snapshot:
        """Counters, depth, in-flight, ages, windowed tenant service and the fairness sample per
        class in one script call: O(classes * (k + sample) * log n), never a scan of jobs or tenants."""
        now, stats, paused, dead, classes = self._call("snapshot")
        raw = {name: _raw_class(reply) for name, reply in zip(self.settings.classes, classes)}
        return build_snapshot(self.config, int(now), _pairs_int(stats), [_text(p) for p in paused], raw, int(dead))

    def dead_letters(self, start: int = 0, end: int = 99) -> list[dict[str, Any]]:
        """Dead-lettered jobs, oldest first, with the error that finished them."""
        with redis_errors(self.client):
            rows = self.client.lrange(self.keys.dead, start, end)
        out = []
        for row in rows:
            dead = DeadLetter.decode(_text(row))
            lease = dead.job.lease(dead.queue, dead.tenant, dead.attempts)
            out.append({"lease": lease, "dead_at": dead.dead_ms / 1000.0, "error": dead.error})
        return out

    def dead_letter(self, job_id: str) -> dict[str, Any] | None:
        """The dead letter of job ``job_id`` (as :meth:`dead_letters` gives them), or None. Reads
        the list in pages: O(dead letters)."""
        wanted = check_job_id(job_id)
        start = 0
        while True:
            page = self.dead_letters(start, start + DEAD_PAGE - 1)
            for item in page:
                if item["lease"].job_id == wanted:
                    return item
            if len(page) < DEAD_PAGE:
                return None
            start += DEAD_PAGE

    def dead_letter_count(self) -> int:
        """Jobs in the dead-letter list."""
        with redis_errors(self.client):
            return int(self.client.llen(self.keys.dead))

    def dead_letter_counts(self) -> dict[str, int]:
        """Jobs of each configured class in the dead-letter list."""
        names = self.settings.classes
        with redis_errors(self.client):
            values = self.client.hmget(self.keys.stats, [f"deadlist{SEP}{name}" for name in names])
        return {name: max(0, int(v or 0)) for name, v in zip(names, values)}

    def requeue_dead(self, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                     limit: int = DEAD_PAGE) -> DeadOutcome:
        """Put dead letters back in their class, atomically: the given jobs (by id), or with no ids
        the oldest ``limit`` of ``queue`` (any class when None). Each keeps its id, tenant, class,
        task, reason and payload; its attempts start again from zero. A dead letter whose class is
        no longer configured stays in the list (``skipped``)."""
        return self._dead("requeue", job_ids, queue, limit)

    def drop_dead(self, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                  limit: int = DEAD_PAGE) -> DeadOutcome:
        """Delete dead letters for good, atomically; the same selection as :meth:`requeue_dead`."""
        return self._dead("drop", job_ids, queue, limit)

    def _dead(self, action: str, job_ids: Sequence[str] | None, queue: str | None, limit: int) -> DeadOutcome:
        ids = [check_job_id(j) for j in job_ids or ()]
        if queue is not None:
            self._class_index(queue, "queue")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_POP:
            raise ValueError(f"limit: expected 1..{MAX_POP}, got {limit!r}")
        done, skipped = self._call("dead", action, queue or "", len(ids) if ids else limit, *ids)
        return DeadOutcome(done=[_text(i) for i in done], skipped=[_text(i) for i in skipped])


def _pairs(flat: list[Any]) -> list[tuple[str, float]]:
    return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]


def _pairs_int(flat: list[Any]) -> dict[str, int]:
    return {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def _raw_class(reply: list[Any]) -> RawClass:
    heads, active, backlog, inflight, now, before, now_total, before_total, rows = reply
    return RawClass(
        heads=_pairs(heads), active_tenants=int(active), top_backlog=_pairs(backlog), top_inflight=_pairs(inflight),
        served_now=_pairs(now), served_before=_pairs(before), served_now_total=int(now_total),
        served_before_total=int(before_total),
        sample=[(_text(rows[i]), int(rows[i + 1]), float(rows[i + 2]), float(rows[i + 3])) for i in range(0, len(rows), 4)],
    )


def _text(value: bytes | str | int) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)

