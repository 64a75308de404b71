"""The driver of one queue group on Redis: its Lua script, the connections its calls go on, and
its applied config. :class:`fairness_core.queue.Queue` is what everything else uses; it runs one
driver per group.

The driver is more than a shell around the script: it checks every argument before sending
anything, sends each call on a connection of its thread's own and tells a lost reply from a call
never sent (a keyed submit is sent once more, an unkeyed one is not), follows the group's applied
config (syncing when the script finds it stale, reloading the library after a restart), refuses
enqueues near maxmemory, and notices when the group's state was lost under it. Every decision and
its effect (classify-then-push, choose-class-then-tenant-then-pop-and-lease,
ack, nack, reap, promote) is one script call, so a fleet of workers shares exact weighted shares
and nothing is lost or half-written when a worker or the connection dies between calls.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import hiredis
import redis

from .admission import NOWHERE, Elsewhere
from .classification import classify
from .config import Config, ConfigError
from .config_store import (
    CREATED_MS, FINGERPRINT, NO_MOVES, NO_NAMES, VERSION, Applied, ConfigConflict, ConfigRefused, GroupState, Moves,
    Names, differences, fingerprint, from_stored, shared_text,
)
from .connection import ClusterClient, describe, redis_errors
from .jobs import (
    SEP, BudgetRejected, DeadLetter, DeadOutcome, Enqueued, Finished, InvalidJob, Lease, Popped, RedisUnavailable,
    ReplyLost, StateDamaged, TenantLimitReached, check_job_id, check_key, check_task, check_tenant, check_tier,
    encode_payload, one_line, popped_lease, runtime_us, settled,
)
from .keys import WAKE_MEMBER, Keys
from .library import Library, missing
from .memory import MemoryGuard
from .script import script_source
from .sentinel_client import FollowingSentinelPool
from .settings import SWEEP_BATCH, default_tier_left, derive, rebases_tags, recharges, regroups
from .snapshot import RawClass, Snapshot, build_snapshot

MAX_POP = 1000
# Jobs one enqueue_many call queues at most: a batch's call pays the config check and the clock
# once, and stays short (no call of a burst holds Redis long).
ENQUEUE_BATCH = 25
SWEEP_LIMIT = 1000  # jobs one sweep (reap, aging, moves) handles at most, in calls of SWEEP_BATCH
DEAD_PAGE = 100
# Replies of the script that are not a command's error (see lua/scheduler.lua).
STALE, DAMAGED = "FAIRCTL_STALE_CONFIG", "FAIRCTL_DAMAGED"
# Syncs one call may need: more means the applied config changes faster than it can be read.
SYNC_TRIES = 5
T = TypeVar("T")

log = logging.getLogger("fairctl.config")


@dataclass(frozen=True)
class ApplyOutcome:
    """What :meth:`Scheduler.apply` did."""

    version: int
    fingerprint: str
    changes: tuple[str, ...]  # as :func:`fairness_core.config_store.differences` words them
    moved: int  # jobs moved out of removed classes



class Scheduler:
    """Priority classes with exact weighted shares and weighted fair queuing across tenants.

    ``clock`` (milliseconds) overrides Redis ``TIME``; only tests that compare against the
    reference model need it. Production time always comes from Redis, never worker clocks.
    """

    def __init__(self, config: Config, client: Any, *, clock: Callable[[], int] | None = None) -> None:
        if config.redis.shards > 1:  # it would queue into a group no worker of the sharded queue serves
            raise ConfigError("redis.shards", f"queue group {config.redis.prefix} is sharded {config.redis.shards} ways "
                                              "and a Scheduler serves one queue group: open the queue with "
                                              "fairness_core.open_queue(config), which serves every shard")
        self.file_config = config
        self.client = client
        self.keys = Keys(config.redis.prefix)
        self._clock = clock
        self._declared = self.keys.declared()
        self.applied: Applied | None = None
        self.resets = 0  # times this process found the group's state reset under it
        self._state: GroupState | None = None  # the group's state as last seen (None: gone)
        self._looked = False  # whether this process has looked at the group's state yet
        self._lost: GroupState | None = None  # the state last lost, while the group has none
        self._state_lock = threading.Lock()
        self._ran = False  # a script call has run: a sync from now on follows a change, not a start
        self._sync_lock = threading.Lock()
        self._own = threading.local()  # each thread's own connection (_send)
        self._compile(config, NO_MOVES)
        # Enqueues refused near maxmemory; every process that changes the queues refuses an evicting Redis.
        self.memory = MemoryGuard(client, config.redis.memory_headroom, key=self.keys.config)

    def _compile(self, config: Config, moves: Moves, names: Names | None = None, stored: str | None = None) -> None:
        """Run ``config`` with ``moves`` and ``names`` (None: a new group's) from now on, under the
        fingerprint ``stored`` with it (None: its own). Enqueues go through a function Redis
        refuses at maxmemory; everything that drains the queue through one it runs all the same."""
        self.config, self.moves = config, moves
        self.settings = derive(config, moves, names, stored)
        self._library = Library(script_source(self.settings))

    def _argv(self, op: object, *args: object) -> list[object]:
        now = "" if self._clock is None else str(int(self._clock()))
        return [op, self.keys.base, now, *args]

    def _call(self, op: str, *args: object) -> Any:
        self.memory.ensure_policy()  # observers' snapshots do not come here: they show an evicting policy instead
        return self._synced(lambda: (op, *args))

    def _synced(self, build: Callable[[], Sequence[object]], *, enqueue: bool = False) -> Any:
        """One script call with the op and arguments ``build`` gives under the applied config. When
        Redis says this process's config is not the applied one, sync and build again (arguments
        such as class indices are the config's)."""
        for _ in range(SYNC_TRIES):
            library = self._library
            try:
                with redis_errors(self.client):
                    reply = library.call(self._send, self._node, library.enqueue if enqueue else library.drain,
                                         self._declared, self._argv(*build()))
                self._ran = True
                return reply
            except redis.ResponseError as exc:
                if not str(exc).startswith(STALE):
                    raise _script_error(exc) from None
            self.sync()
        raise self._changing_too_fast()

    # ------------------------------------------------------------------ the applied config

    def sync(self) -> Applied:
        """Run the group's applied config from now on; a group with none applies this process's
        own (the first process of a new group sets its policy; every later one follows it). One
        thread at a time: the slots of a worker refused together switch, and say so, once."""
        with self._sync_lock:
            return self._sync()

    def _sync(self) -> Applied:
        stored = self._stored()
        self._saw(GroupState.of(stored))
        if not stored:
            try:
                self._apply_script(self.file_config, NO_MOVES, NO_NAMES.covering(self.file_config), expect="",
                                   rebase=False, check=False)
                self._applied_own()
            except ConfigConflict:
                pass  # another process applied one first: follow it
            stored = self._stored()
            self._saw(GroupState.of(stored))
        applied = from_stored(stored, self.file_config)
        if applied.fingerprint != self.settings.fingerprint:
            changes = differences(self.config, applied.config)
            self._compile(applied.config, applied.moves, applied.names, applied.fingerprint)
            if not self._ran and self.applied is None:
                # Only what the file says differently: the moves and names a group records, and a
                # fingerprint an earlier release stored, are no difference a user made.
                if changes:
                    log.warning("following the applied config v%d of queue group %s, which differs from %s: %s",
                                applied.version, self.keys.prefix, self._file(), "; ".join(changes))
            else:
                log.info("queue group %s: config v%d applied: %s", self.keys.prefix, applied.version,
                         "; ".join(changes) or f"moves: {applied.moves.text() or 'none'}")
        self.applied = applied
        return applied

    def check_state(self) -> bool:
        """Whether the group's state was reset since this process last looked (one HMGET; workers
        and exporters look every few seconds): see :meth:`_saw`."""
        with redis_errors(self.client):
            fields = self.client.hmget(self.keys.config, CREATED_MS, VERSION, FINGERPRINT)
        return self._saw(GroupState.of(dict(zip((CREATED_MS, VERSION, FINGERPRINT), map(_maybe_text, fields)))))

    def _saw(self, state: GroupState | None) -> bool:
        """Note what the group's state is now; True, said once at ERROR and counted (:attr:`resets`),
        when it is gone, or was created anew, since this process last saw it: a Redis restarted
        without persistence, a failover to an empty replica or a FLUSHALL took every job and
        lease of the group with it."""
        with self._state_lock:
            before, looked = self._state, self._looked
            self._state, self._looked = state, True
            if not looked or before is None or (state is not None and state.created == before.created):
                return False  # a first look, a loss already told, or the same state
            self.resets += 1
            self._lost = before
        log.error("queue group %s lost its state: its applied config v%d is gone, and with it every job queued or "
                  "leased in the group (Redis restarted without persistence, failed over to an empty replica, or "
                  "was flushed); producers must send the lost jobs again (see the QueueStateLost runbook)%s",
                  self.keys.prefix, before.version,
                  "" if state is None else f"; the group was created anew with config v{state.version}")
        return True

    def _applied_own(self) -> None:
        """Say that this process applied its own config to a group that had none: quietly to a new
        group, loudly over one whose state was lost (the file may be older than what ran before)."""
        lost = self._lost
        if lost is None:
            log.info("queue group %s had no applied config: applied %s", self.keys.prefix, self._file())
            return
        same = fingerprint(self.file_config, NO_MOVES, NO_NAMES.covering(self.file_config)) == lost.fingerprint
        log.error("queue group %s had lost its state: this process applied %s to it%s", self.keys.prefix, self._file(),
                  ", the same config it ran before" if same else
                  f", which is not the config v{lost.version} it ran before (fingerprint {lost.fingerprint}): apply "
                  "the right one with fairctl config apply")

    def _file(self) -> str:
        return self.file_config.source or "this process's config"

    def _stored(self) -> dict[str, str]:
        with redis_errors(self.client):
            return {_text(k): _text(v) for k, v in self.client.hgetall(self.keys.config).items()}

    def read_applied(self) -> Applied | None:
        """The group's applied config as stored now, or None when none is applied yet."""
        stored = self._stored()
        return from_stored(stored, self.file_config) if stored else None

    def apply(self, config: Config, *, moves: Moves = NO_MOVES, expect: str | None = None) -> ApplyOutcome:
        """Make ``config`` the group's applied config, atomically, then move the jobs of removed
        classes where ``moves`` says. Earlier moves whose source is still removed are kept.
        ``expect``: the fingerprint the caller saw (ConfigConflict if another apply came between).
        ConfigRefused, changing nothing, when a removed class still holds jobs or a removed tier is
        still a queued tenant's and no move says where they go."""
        if config.redis.prefix != self.keys.prefix:
            raise ValueError(f"redis.prefix: {config.redis.prefix!r} is another queue group than {self.keys.prefix!r}")
        previous = self.read_applied()
        every = (previous.moves.carried(config) if previous else NO_MOVES).merged(moves)
        every.check(config)
        with redis_errors(self.client):
            moves.check_paused({_text(p) for p in self.client.smembers(self.keys.paused)})
        # A group's first apply lists this process's names too, as the reference model does.
        names = (previous.names if previous else Names(self.settings.names)).covering(config)
        before = previous.config if previous else self.config
        was, will = derive(before), derive(config)
        rebase = previous is not None and rebases_tags(was, will)
        regroup = previous is not None and regroups(was, will)
        seen = previous.fingerprint if previous else ""
        implied = default_tier_left(was, will) if previous else ""
        version = self._apply_script(config, every, names, expect=seen if expect is None else expect, rebase=rebase,
                                     regroup=regroup, check=True, implied=implied,
                                     recharge=previous is not None and recharges(was, will))
        self._compile(config, every, names)
        moved = 0
        while (n := self.move_pending()) > 0:
            moved += n
        self.sync()
        return ApplyOutcome(version=version, fingerprint=self.settings.fingerprint,
                            changes=tuple(differences(before, config)), moved=moved)

    def move_pending(self, limit: int = SWEEP_LIMIT) -> int:
        """Move up to ``limit`` queued and retrying jobs of classes the applied config moved, in calls of
        :data:`SWEEP_BATCH` (a move of millions never holds Redis for long); how many moved.
        ``apply`` moves them all; workers call this on their sweeps too, so the moves finish even
        if the process that applied dies half way."""
        def one(asked: int) -> tuple[int, bool]:
            moved = int(self._call("move", asked))
            return moved, moved == asked

        return _in_calls(limit, one)

    def _apply_script(self, config: Config, moves: Moves, names: Names, *, expect: str, rebase: bool,
                      check: bool, regroup: bool = False, implied: str = "", recharge: bool = False) -> int:
        """The ``apply`` op, run by the script compiled from ``config``; the version applied.
        ``check``: refuse to strand jobs (a group's first config, adopted, is not checked).
        ``regroup``: the parties of fair queuing changed (:func:`~fairness_core.settings.regroups`).
        ``implied``: the default tier applied until now, when ``config`` has another: the queued
        parties of it have no cost entry, and are written one to keep it. ``recharge``: the tiers'
        costs changed (:func:`~fairness_core.settings.recharges`)."""
        library = Library(script_source(derive(config, moves, names)))
        args = self._argv("apply", expect, shared_text(config), moves.text(), "1" if rebase else "0",
                          "1" if check else "0", names.text(), "1" if regroup else "0", implied,
                          "1" if recharge else "0")
        with redis_errors(self.client):
            reply = library.call(self._send, self._node, library.drain, self._declared, args)
        kind = _text(reply[0])
        if kind == "conflict":
            raise ConfigConflict(f"the applied config of {self.keys.prefix} changed since it was read (now "
                                 f"{_text(reply[1]) or 'none'}); read it again and retry")
        if kind == "refused":
            flat, tiers = reply[1], reply[2]
            raise ConfigRefused({_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)},
                                tuple(_text(t) for t in tiers))
        return int(reply[1])

    # ------------------------------------------------------------------ producing

    def enqueue(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
                user_waiting: bool = False) -> str:
        """Classify and queue one job; returns its id. Raises InvalidJob before touching Redis,
        TenantLimitReached when the tenant is at a ``tenants`` limit (queued jobs or arrival rate),
        BudgetRejected when the class is over its arrival budget and rejects (nothing is queued then)."""
        return self.submit(task, tenant, payload, tier=tier, user_waiting=user_waiting).job_id

    def submit(self, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False, key: str | None = None, elsewhere: Elsewhere = NOWHERE) -> Enqueued:
        """Like :meth:`enqueue`, also telling the class and reason the job was queued under.

        ``key`` makes the submit safe to retry, as an idempotency key: while a job accepted with
        that key is younger than ``scheduler.dedup_window``, a submit with it queues nothing and
        returns that job (queued, running or done), counted as ``deduplicated``. Decided in the
        enqueue's own script call, so two producers racing with one key make one job; and a keyed
        submit whose reply was lost (:class:`ReplyLost`) is sent once more, returning the job the
        first send made. An unkeyed one raises it: sent again, it would queue a second job.
        ``elsewhere``: what the tenant's limits count on a sharded queue's other shards."""
        body = encode_payload(payload, self.config)
        keyed = () if key is None else (check_key(key),)
        heads: list[tuple[object, ...]] = []

        def build() -> tuple[object, ...]:
            heads.append(self._enqueue_args(task, tenant, tier, user_waiting, elsewhere))
            return (*heads[-1], body, *keyed)

        self.memory.check()
        with self.memory.refusals():
            reply = _once_more(lambda: self._synced(build, enqueue=True), keyed=key is not None)
        return self._enqueued(reply, heads[-1])

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False, keys: Sequence[str] | None = None,
                    elsewhere: Elsewhere = NOWHERE) -> list[Enqueued | None]:
        """One job per payload, all for the same task and tenant, in one pipelined round trip: a
        burst (a load generator, a backfill) is not held to one round trip per job. The jobs go in
        script calls of up to :data:`ENQUEUE_BATCH`, each job decided in turn exactly as by
        :meth:`submit`; None for a job a priority budget rejected or a tenant limit refused (the
        jobs before and after it are queued or refused on their own). Every payload is checked
        before anything is sent. ``keys``: one per payload, each as :meth:`submit`'s ``key``; a
        keyed batch whose connection fails is sent once more, as the keys make that safe (the jobs
        the first send queued come back as they were)."""
        self._enqueue_args(task, tenant, tier, user_waiting, elsewhere)  # InvalidJob before anything is sent
        bodies = [encode_payload(p, self.config) for p in payloads]
        if keys is not None:
            if len(keys) != len(bodies):
                raise InvalidJob("key", f"expected one key per payload, got {len(keys)} for {len(bodies)} payloads")
            bodies = [arg for k, body in zip(keys, bodies) for arg in (check_key(k), body)]
        op, per_job = ("enqueue_many", 1) if keys is None else ("enqueue_keyed_many", 2)
        self.memory.check()
        results: list[Enqueued | None] = [None] * (len(bodies) // per_job)
        todo = list(range(0, len(results), ENQUEUE_BATCH))  # the first job of each call
        for _ in range(SYNC_TRIES):
            head = self._enqueue_args(task, tenant, tier, user_waiting, elsewhere)

            def send() -> list[Any]:
                with redis_errors(self.client):
                    library, pipe = self._library, self._pipeline()
                    for first in todo:
                        batch = bodies[first * per_job:(first + ENQUEUE_BATCH) * per_job]
                        library.queue(pipe, library.enqueue, self._declared, self._argv(op, *head[1:], *batch))
                    sent: list[Any] = pipe.execute(raise_on_error=False)
                    return sent

            replies = _once_more(send, keyed=keys is not None)
            again: list[int] = []
            errors: list[Exception] = []
            for first, reply in zip(todo, replies):
                if not isinstance(reply, Exception):
                    for i, job in enumerate(reply, first):
                        results[i] = _accepted(job)
                elif str(reply).startswith(STALE) or missing(reply):
                    again.append(first)
                else:
                    errors.append(reply)
            self.memory.batch_refused(errors, results)
            if not again:
                return results
            todo = again
            self._recover([r for r in replies if isinstance(r, Exception)])
        raise self._changing_too_fast()

    def _send(self, *command: object) -> Any:
        """One command and its reply. With a plain Redis client, on a connection of this thread's
        own, held across calls: redis-py's client wrapper and pool cost 25-35 µs of CPU a call
        (65-77 µs against 37-42 µs, measured), as much as the worker's own work on a no-op job.

        A command is sent again only when it cannot have run: a connection that Redis closed
        while it was idle (a Redis restart) is seen before the send and replaced, and a send that
        fails on a connection that broke is sent once more on a new one. A connection that fails
        after the send, before the reply, raises :class:`ReplyLost`: the call may have run, and
        sending it again could run it twice. Under Sentinel, a connection to a server the sentinels
        no longer name as the master is dropped first. A thread's connection closes with the
        thread. On a Cluster, redis-py's cluster client (which follows slot moves)."""
        if not isinstance(self.client, redis.Redis):
            return self.client.execute_command(*command)
        pool = self.client.connection_pool
        conn = getattr(self._own, "conn", None)
        if conn is None:
            conn = self._own.conn = pool.connection_class(**pool.connection_kwargs)
        packed = [hiredis.pack_command(command)]  # type: ignore[arg-type]  # its stub types one element; 0.9 µs; redis-py's pack_command wrapping it: 3.4 µs
        _drop_if_closed(conn)
        if isinstance(pool, FollowingSentinelPool) and pool.moved(conn):  # a failover: to the new master
            conn.disconnect()
        try:
            _connected(conn).send_packed_command(packed, check_health=False)
        except redis.ConnectionError:  # nothing was read of it: the connection was already broken
            conn.disconnect()
            _connected(conn).send_packed_command(packed, check_health=False)
        try:
            return conn.read_response()
        except redis.BusyLoadingError:  # Redis's reply (it is loading its data): the call did not run
            raise
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            conn.disconnect()
            kind, place = describe(self.client)
            raise ReplyLost(f"{kind} at {place}: the connection failed after the call was sent, before its reply "
                            f"({type(exc).__name__}): it may have been applied") from None

    def _changing_too_fast(self) -> ConfigConflict:
        """A call that found a new applied config on each of its :data:`SYNC_TRIES` tries."""
        return ConfigConflict(f"the applied config of {self.keys.prefix} changed {SYNC_TRIES} times during one call")

    def _node(self) -> Any:
        """The client of the Redis serving the group's slot: on a Cluster, its node's."""
        if isinstance(self.client, ClusterClient):
            return self.client.cluster().get_node_from_key(self.keys.config).redis_connection
        return self.client

    def _pipeline(self) -> Any:
        """A pipeline (no transaction) to the group's Redis; on a Cluster, to the node that serves
        the group's slot, as redis-py's cluster pipelines refuse function calls."""
        return self._node().pipeline(transaction=False)

    def _recover(self, errors: Sequence[Exception]) -> None:
        """After pipelined calls were refused: load the library where it was missing, and follow
        the applied config where it was stale; the caller sends those calls again."""
        if any(missing(e) for e in errors):
            self._library.load(self._node())
        if any(str(e).startswith(STALE) for e in errors):
            self.sync()

    def _enqueue_args(self, task: str, tenant: str, tier: str | None, user_waiting: bool,
                      elsewhere: Elsewhere) -> tuple[object, ...]:
        """The enqueue op's arguments but the payload, after checking each (InvalidJob names it)."""
        task = check_task(task)
        tenant = check_tenant(tenant, self.config)
        tier = check_tier(tier, self.config)
        if not isinstance(user_waiting, bool):
            raise InvalidJob("user_waiting", f"expected true or false, got {user_waiting!r}")
        decision = classify(self.config, task, tier=tier, user_waiting=user_waiting)
        return ("enqueue", self.config.class_index(decision.queue) + 1, tenant, tier, task, decision.reason,
                elsewhere.argument())

    def _enqueued(self, reply: Any, head: tuple[object, ...]) -> Enqueued:
        """The script's reply as the job queued; for a job refused at a tenant limit or rejected by a
        budget, the error."""
        job = _accepted(reply)
        if job is not None:
            return job
        if reply[3:]:  # a tenant limit's name and value after the reason
            raise TenantLimitReached.at(self.config, str(head[2]), str(head[3]), _text(reply[3]))
        asked = self.settings.classes[int(str(head[1])) - 1]
        raise BudgetRejected(f"{asked} is over its arrival budget; job for tenant {head[2]!r} rejected")

    # ------------------------------------------------------------------ consuming

    def pop(self, max_jobs: int = 1, *, classes: Sequence[str] | None = None, owner: str = "") -> list[Lease]:
        """Lease up to ``max_jobs`` jobs, chosen by the configured policy; ``classes`` limits a
        reserved pool to some classes. Returns an empty list when nothing is due. ``owner``: the
        registered worker the leases are for (see :meth:`ack_and_pop`)."""
        return self.ack_and_pop((), max_jobs, classes=classes, owner=owner).leases

    def ack_and_pop(self, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None, owner: str = "") -> Popped:
        """Complete ``done`` (each exactly as :meth:`ack` would: a :class:`Finished` with its
        runtime) and lease the next jobs, in one script call: a worker pays one round trip per job
        instead of two, the way BullMQ's move-to-finished hands back the next job. The acks are
        applied before the pop. A class of ``classes`` that the applied config moved stands for the
        class its jobs went to. With ``owner``, a worker id given to :meth:`register_worker`, the
        leases are that worker's: they go back to the queue as soon as it unregisters or its
        registration lapses, instead of when their visibility timeout runs out."""
        check_pop(max_jobs, classes)
        settle = [arg for item in done for arg in _settled(item)]

        def build() -> tuple[object, ...]:
            # A pool of a class the applied config moved serves where its jobs went.
            allowed = "" if classes is None else ",".join(
                str(self._class_index(self.moves.classes.get(c, c), "classes") + 1) for c in classes)
            return ("pop", max_jobs, allowed, owner, *settle)

        self.memory.ensure_policy()
        _now, items, acked, held, incarnation = self._synced(build)
        return Popped(acked=[bool(a) for a in acked],
                      leases=[popped_lease(self.settings.names, queue, tenant, attempts, envelope, owner, incarnation)
                              for queue, tenant, attempts, envelope in items],
                      held_back=held == 1)

    def ack(self, lease: Lease, *, runtime: float | None = None) -> bool:
        """Complete a job. False when the lease was no longer held: taken back (expired, or its
        worker gone) and the job given to the queue again (:meth:`lease_taken_back` tells), or
        settled already. ``runtime``: the seconds its handler ran, charged under
        ``scheduler.charge: runtime`` and counted as worker time under either basis (None: the job
        keeps its estimated charge)."""
        return bool(self._call("ack", lease.job_id, lease.attempts, runtime_us(runtime), lease.incarnation,
                               lease.owner))

    def nack(self, lease: Lease, error: str | None = None, *, final: bool = False,
             runtime: float | None = None) -> str:
        """Fail a job: ``"retry"`` (after exponential backoff), ``"dead"`` (dead-lettered after
        ``leases.max_attempts``, or at once with ``final``: a failure no retry can mend) or
        ``"stale"`` (the lease had already expired). ``runtime`` as for :meth:`ack`: a failure
        is charged the worker time it took."""
        return self._nack(lease, one_line(error or "failed"), "1" if final else "0", runtime)

    def defer_unhandled(self, lease: Lease) -> str:
        """Give back a job this worker has no handler for (a task only a newer build knows, as in
        a rolling deploy): not a failure, so its attempt is given back and it is never
        dead-lettered for it; it goes back to the head of its tenant's sub-queue at once, for a
        worker that has the handler, and is counted in the class's ``unhandled`` counter (the
        caller waits before popping again, as :class:`~fairness_core.worker.Worker` does, or it
        takes the job again at once). ``"unhandled"``, or ``"stale"`` when the lease was no longer
        held."""
        return self._nack(lease, "", "2", None)

    def _nack(self, lease: Lease, error: str, mode: str, runtime: float | None) -> str:
        """The script's nack; ``mode`` "0" a failure, "1" final, "2" unhandled."""
        return _text(self._call("nack", lease.job_id, lease.attempts, error, mode, runtime_us(runtime), lease.owner,
                                lease.incarnation))

    def give_back(self, leases: Sequence[Lease]) -> int:
        """Return leases their worker never started (a stopping worker's prefetched jobs) to the
        head of their tenants' sub-queues at once, each attempt given back: they cost the job
        nothing. How many were still held."""
        by_owner: dict[str, list[object]] = {}
        for lease in leases:
            by_owner.setdefault(lease.owner, []).extend((lease.job_id, lease.attempts, lease.incarnation))
        return sum(int(self._call("give_back", owner, *held)) for owner, held in by_owner.items())

    def reclaim(self, owner: str, held: Sequence[Lease]) -> int:
        """Give back every lease popped for worker ``owner`` but ``held`` (the leases it holds): the
        leases of a pop whose reply was lost, which that worker never received. Each goes back at
        once with its attempt given back. The caller must have no pop of ``owner`` in flight. How many."""
        return int(self._call("reclaim", owner, *(arg for lease in held for arg in (lease.job_id, lease.incarnation))))

    def lease_taken_back(self, job_id: str) -> bool:
        """Whether the job's lease was taken back from its worker within the last hour (it
        expired, or its worker stopped or lapsed holding it), so that the job may run again: what
        tells a late ack's "it may run again" from "it was settled already", such as by an earlier
        call whose reply was lost."""
        with redis_errors(self.client):
            return self.client.zscore(self.keys.returned, job_id) is not None

    def lost_with_state(self, lease: Lease) -> bool:
        """Whether ``lease`` was made in a state of the group since lost (Redis came back empty):
        then its ack, nack and heartbeat are refused, and the job runs again only if its producer
        sends it again. Looks at the group's record now (:meth:`check_state`, one HMGET), so that a
        refusal is told right even before the periodic look has seen the reset."""
        if not lease.incarnation:
            return False
        self.check_state()
        state = self._state
        return not (isinstance(state, GroupState) and state.created == lease.incarnation)

    def extend(self, lease: Lease) -> bool:
        """Heartbeat for a long job: push the lease deadline a visibility timeout ahead."""
        return bool(self._call("extend", lease.job_id, lease.attempts, lease.incarnation))

    # ------------------------------------------------------------------ sweeps

    def reap(self, limit: int = SWEEP_LIMIT) -> int:
        """Return up to ``limit`` expired leases to the head of their tenant's sub-queue, release
        retries that came due and drop lapsed worker registrations with every lease each held, in
        calls of :data:`SWEEP_BATCH` of each; how many leases were taken back."""
        def one(asked: int) -> tuple[int, bool]:
            leases, retries, workers = (int(n) for n in self._call("reap", asked))
            return leases, max(leases, retries, workers) == asked

        return _in_calls(limit, one)

    def promote_overdue(self, limit: int = SWEEP_LIMIT) -> int:
        """Aging: move up to ``limit`` jobs older than their class's ``promote_after`` one class
        up, at most ``tenants.batch`` per tenant per sweep (oldest tenants first), so a flood stays
        a flood. Each aged class's overdue tenants are read once, then visited a few per call
        (at most :data:`SWEEP_BATCH` jobs each)."""
        moved = 0
        per_call = max(1, SWEEP_BATCH // self.settings.batch)
        aged = [name for name, after in zip(self.settings.classes[1:], self.settings.promote_ms[1:]) if after > 0]
        for name in aged:
            if moved >= limit:
                break
            tenants = [_text(t) for t in self._call("overdue", name, limit - moved)]
            for first in range(0, len(tenants), per_call):
                moved += int(self._call("promote", name, limit - moved, *tenants[first:first + per_call]))
                if moved >= limit:
                    break
        return moved

    def register_worker(self, worker_id: str, slots: int, ttl: float) -> None:
        """Count a worker's slots towards fleet capacity (reserved slots need it) for ``ttl`` s."""
        self._call("register", worker_id, slots, int(ttl * 1000))

    def unregister_worker(self, worker_id: str) -> int:
        """Stop counting the worker's slots, and return every lease popped for it that it still
        holds (jobs it abandoned) to the queue at once, as redeliveries; how many."""
        return int(self._call("register", worker_id, 0, 0))

    def fleet_slots(self) -> int:
        """The worker slots registered now."""
        return self.snapshot().worker_slots

    # ------------------------------------------------------------------ control

    def pause(self, queue: str) -> None:
        self._class_index(queue, "queue")
        with redis_errors(self.client):
            self.client.sadd(self.keys.paused, queue)

    def resume(self, queue: str) -> None:
        """Release a paused class, and wake an idle worker blocked on it (its work was there all along)."""
        self._class_index(queue, "queue")
        with redis_errors(self.client):
            self.client.srem(self.keys.paused, queue)
            self.client.zadd(self.keys.wake(queue), {WAKE_MEMBER: 0}, lt=True)

    def wait_for_work(self, timeout: float, classes: Sequence[str] | None = None) -> float | None:
        """Block up to ``timeout`` seconds until one of ``classes`` (all when None) may have work
        for an idle worker, as BullMQ's marker key does: every enqueue (and every pop that leaves
        work behind, every retry released, every resume) arms the class's wake key, and this takes
        the arming off it (one waiter woken per arming, not a herd). Returns 0.0 when work may be
        there now, the seconds until a retry of the class comes due, or None when ``timeout``
        passed. A wake-up is a hint: the pop that follows decides what is really due."""
        served = self.settings.classes if classes is None else [self.moves.classes.get(c, c) for c in classes]
        keys = [self.keys.wake(c) for c in served]
        with redis_errors(self.client):
            got = self.client.bzpopmin(keys, timeout=timeout)
            if got is None:
                return None
            due_ms = float(got[2])
            if due_ms <= 0:
                return 0.0
            now_ms = self._clock() if self._clock is not None else _ms(self.client.time())
        return max(0.0, (due_ms - now_ms) / 1000)

    def _class_index(self, name: str, argument: str) -> int:
        try:
            return self.config.class_index(name)
        except KeyError as exc:
            raise ValueError(f"{argument}: {exc.args[0]}") from None

    # ------------------------------------------------------------------ observing

    def snapshot(self) -> Snapshot:
        """Counters, depth, in-flight, ages, windowed tenant service and the fairness sample per
        class in one pipelined round trip: a script call per class, then one for the counters (last,
        so no age is read after the time the snapshot is stamped with). Each call is
        O((k + sample) * log n), never a scan of jobs or tenants, and short at any number of
        tenants; the calls are not one atomic reading (a scrape never needed one)."""
        def calls() -> list[tuple[object, ...]]:  # the applied config's classes: a sync may change them
            return [("snapshot_class", i + 1) for i in range(len(self.settings.classes))] + [("snapshot",)]

        *classes, (now, stats, paused, dead, unconfigured) = self._pipelined(calls)
        raw = {name: _raw_class(reply) for name, reply in zip(self.settings.classes, classes)}
        heads = {_text(unconfigured[i]): _optional_float(unconfigured[i + 1]) for i in range(0, len(unconfigured), 2)}
        return build_snapshot(self.config, int(now), _pairs_int(stats), [_text(p) for p in paused], raw, int(dead),
                              heads)

    def _pipelined(self, calls: Callable[[], Sequence[Sequence[object]]]) -> list[Any]:
        """The calls (op and arguments each) ``calls`` gives under the applied config, in one round
        trip: when Redis refuses any as stale, or finds the library missing (a restarted Redis),
        sync or load it and send them all again."""
        for _ in range(SYNC_TRIES):
            with redis_errors(self.client):
                library, pipe = self._library, self._pipeline()
                for op in calls():
                    library.queue(pipe, library.drain, self._declared, self._argv(*op))
                replies: list[Any] = pipe.execute(raise_on_error=False)
            errors = [r for r in replies if isinstance(r, Exception)]
            if not errors:
                self._ran = True
                return replies
            unexpected = [e for e in errors if not (str(e).startswith(STALE) or missing(e))]
            if unexpected:
                raise _script_error(unexpected[0])
            self._recover(errors)
        raise self._changing_too_fast()

    def dead_letters(self, start: int = 0, end: int = 99) -> list[dict[str, Any]]:
        """Dead-lettered jobs, oldest first, with the error that finished them."""
        with redis_errors(self.client):
            rows = self.client.lrange(self.keys.dead, start, end)
        out = []
        for row in rows:
            dead = DeadLetter.decode(_text(row))
            lease = dead.job.lease(dead.queue, dead.tenant, dead.attempts, self.settings.names)
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


def _connected(conn: Any) -> Any:
    """``conn``, connected by its own ``connect``: a Sentinel-managed connection asks the sentinels
    for the master there, which a send on an unconnected one would skip (it connects to its
    default host)."""
    if getattr(conn, "_sock", None) is None:
        conn.connect()
    return conn


def _drop_if_closed(conn: Any) -> None:
    """Close a connection Redis has closed (or that holds a reply nobody read), so that the
    command goes on a new one: what reads as ready before anything is sent is the end of the
    stream (a Redis restart) or out of step. One poll of the socket, no round trip."""
    if getattr(conn, "_sock", None) is None:
        return
    try:
        ready = conn.can_read(timeout=0)
    except (redis.ConnectionError, OSError):
        ready = True
    if ready:
        conn.disconnect()


def _once_more(send: Callable[[], T], *, keyed: bool) -> T:
    """``send()``; when ``keyed``, sent once more if its connection failed (:class:`ReplyLost`,
    or on a Cluster, whose client does not tell a lost reply apart, any RedisUnavailable): the
    keys make a second send return the jobs a first one that ran queued, not new ones."""
    if not keyed:
        return send()
    try:
        return send()
    except RedisUnavailable:
        return send()


def _accepted(reply: Any) -> Enqueued | None:
    """The script's reply to one job as the job queued; None for a job refused or rejected."""
    job_id, queue, reason = reply[:3]
    return Enqueued(_text(job_id), _text(queue), _text(reason)) if job_id else None


def check_pop(max_jobs: int, classes: Sequence[str] | None) -> None:
    """A pop's arguments, checked before anything is sent (ValueError naming the argument)."""
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= MAX_POP:
        raise ValueError(f"max_jobs: expected 1..{MAX_POP}, got {max_jobs!r}")
    if classes is not None and not classes:
        raise ValueError("classes: expected at least one class name, or None for all")


def _pairs(flat: list[Any]) -> list[tuple[str, float]]:
    return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]


def _pairs_int(flat: list[Any]) -> dict[str, int]:
    return {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def _raw_class(reply: list[Any]) -> RawClass:
    heads, active, backlog, inflight, now, before, now_total, before_total, rows, accounts, held = reply
    by_account: dict[str, Any] = {}
    if accounts:  # with accounts: the parties queued, their service in both buckets, their backlog
        keys = accounts[4]
        by_account = {"active_accounts": int(accounts[0]), "accounts_now": _pairs(accounts[1]),
                      "accounts_before": _pairs(accounts[2]), "accounts_backlog": _pairs(accounts[3]),
                      "accounts_keys": tuple(int(n) for n in accounts[5]),
                      "account_keys": [(_text(keys[i]), _text(keys[i + 1]), float(keys[i + 2]), float(keys[i + 3]))
                                       for i in range(0, len(keys), 4)]}
    return RawClass(
        **by_account,
        heads=_pairs(heads), active_tenants=int(active), top_backlog=_pairs(backlog), top_inflight=_pairs(inflight),
        served_now=_pairs(now), served_before=_pairs(before), served_now_total=int(now_total),
        served_before_total=int(before_total),
        sample=[(_text(rows[i]), int(rows[i + 1]), float(rows[i + 2]), float(rows[i + 3])) for i in range(0, len(rows), 4)],
        held_heads=frozenset(_text(t) for t in held),
    )


def _optional_float(value: bytes | str) -> float | None:
    text = _text(value)
    return float(text) if text else None


def _script_error(exc: Exception) -> Exception:
    """The script's own refusal as fairctl's error; any other error as it is."""
    text = str(exc)
    if text.startswith(DAMAGED):
        return StateDamaged(f"queue group state is damaged: {text[len(DAMAGED):].strip()}")
    return exc


def _in_calls(limit: int, call: Callable[[int], tuple[int, bool]]) -> int:
    """A sweep of up to ``limit`` in calls of at most :data:`SWEEP_BATCH`: ``call(asked)`` gives
    what it counted and whether it did a whole call's work (then more may be waiting)."""
    done = 0
    while done < limit:
        counted, full = call(min(SWEEP_BATCH, limit - done))
        done += counted
        if not full:
            break
    return done


def _ms(time_reply: tuple[int, int]) -> float:
    """Redis ``TIME`` (seconds, microseconds) in milliseconds."""
    return time_reply[0] * 1000 + time_reply[1] / 1000


def _settled(done: Lease | Finished) -> tuple[str, int, str, str]:
    """A lease done as the script's ack arguments: job id, attempts, runtime in µs ('' none), and
    the token of the group's state it was leased in."""
    lease, runtime = settled(done)
    return lease.job_id, lease.attempts, runtime_us(runtime), lease.incarnation


def _text(value: bytes | str | int) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def _maybe_text(value: bytes | str | int | None) -> str | None:
    return None if value is None else _text(value)

