"""Run registered handlers on leased jobs: the loop every worker process needs, written once.

A :class:`Worker` owns ``concurrency`` slot threads (pop -> handle -> ack/nack) and four small
periodic threads: the lease heartbeat (long jobs keep their lease), the fleet registration (its
slots count towards ``reserved_slots``, and it is the worker's heartbeat: its leases are popped
for it, and go back to the queue as soon as it unregisters or its registration lapses), the
reaper (the leases of lost workers and expired leases go back to the queue) and aging
(``promote_after``). Every Redis call survives an outage: the worker logs one line, backs off and
carries on, because a job is only settled by ``ack``/``nack`` and anything not settled comes back
through the reaper. Delivery is therefore at least once, never lost.

Each handler call is timed with a monotonic clock and the seconds it ran go with its ack or nack:
the worker time the class is counted (and, under ``scheduler.charge: runtime``, charged) for.

A worker refuses to start against a Redis whose ``maxmemory-policy`` may evict keys (it would lose
jobs silently), and re-reads the policy at every reap tick: if it changes under a running worker,
the worker logs the error, stops taking jobs, settles the running ones and :meth:`Worker.run`
raises :class:`EvictionPolicyError` (``fairctl worker`` exits 2 with the fix).
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from functools import partial
from types import FrameType
from typing import TypeVar

from .connection import redis_errors, server_of
from .jobs import Finished, Lease, Popped, RedisUnavailable
from .memory import EvictionPolicyError, require_noeviction
from .queue import Queue

log = logging.getLogger(__name__)

Handler = Callable[[Lease], None]
T = TypeVar("T")

BATCH = 10  # the most jobs a slot leases per pop (--batch), within the prefetch bound
PREFETCH_S = 0.01  # a slot leases ahead no more than it expects to finish within this (--prefetch)
REREGISTER_MIN_S = 1.0  # a slot that starts or stops leasing ahead registers again at most this often
PACE_SMOOTHING = 0.2  # weight of a job's runtime in the worker's moving average
IDLE_WAIT_S = 5.0  # an idle worker's longest blocking wait for work: its one periodic look when nothing comes
# Slots held back by reservations wait this long at most for a reserved class's work before they
# look again: how soon they take capacity the fleet frees (a slot stopping, more slots registering).
HELD_LOOK_S = 0.1
OUTAGE_MIN_S, OUTAGE_MAX_S = 0.1, 5.0  # Redis unreachable: capped exponential backoff
REAP_EVERY_S = 1.0
PROMOTE_EVERY_S = 10.0
TICK_S = 0.1  # how often the main thread looks at signals and slot threads
LOG_EVERY_S = 60.0  # the periodic summary line
OUTCOMES = ("done", "failed", "retried", "dead-lettered", "unhandled")
# What a worker does with a job whose task it has no handler for (``--unhandled``): give it back
# to wait for a worker that has one, or dead-letter it at once.
UNHANDLED_WAIT, UNHANDLED_DEAD_LETTER = "wait", "dead-letter"
UNHANDLED = (UNHANDLED_WAIT, UNHANDLED_DEAD_LETTER)
UNHANDLED_LOG_EVERY_S = 60.0  # one warning per task without a handler per this many seconds
# A slot that gave back jobs it has no handler for waits this long before it pops again, doubling
# to the most while it keeps meeting them: the jobs went back at once, for a worker that has the
# handler, and this worker must not take them again at once, over and over.
UNHANDLED_PAUSE_MIN_S, UNHANDLED_PAUSE_MAX_S = 0.1, 5.0


class HandlerRegistry(MutableMapping[str, Handler]):
    """Task name -> handler. A handler returning normally is a success (``ack``); raising is a
    failure (``nack`` with the exception text, so it is retried with backoff, then dead-lettered).
    ``fallback`` handles tasks with no handler of their own (load generators, demos)."""

    def __init__(self, handlers: dict[str, Handler] | None = None, *, fallback: Handler | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self.fallback = fallback
        self.update(handlers or {})

    def handler(self, task: str) -> Callable[[Handler], Handler]:
        """Decorator: ``@registry.handler("password_reset")``."""
        def register(func: Handler) -> Handler:
            self[task] = func
            return func
        return register

    def resolve(self, task: str) -> Handler | None:
        return self._handlers.get(task, self.fallback)

    def __getitem__(self, task: str) -> Handler:
        return self._handlers[task]

    def __setitem__(self, task: str, func: Handler) -> None:
        if not callable(func):
            raise TypeError(f"handler for {task!r} must be callable, got {type(func).__name__}")
        self._handlers[task] = func

    def __delitem__(self, task: str) -> None:
        del self._handlers[task]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


class Doorbell:
    """Where a worker's idle slots wait for work, instead of each polling Redis. One listener
    thread blocks on the wake keys of the worker's classes (``Queue.wait_for_work``) for all of
    them and lets one slot go per wake-up: an idle worker sends Redis one blocking call every
    ``IDLE_WAIT_S`` however many slots it has, and a job enqueued into an idle fleet starts within
    a round trip or two of its enqueue. A retry's due time, which a wake-up may carry, shortens the
    next wait so the retry is taken when it comes due.

    Slots whose pop was held back (other classes' ``reserved_slots`` keep the free slots) wait for
    the reserved classes' work only, and look again every ``HELD_LOOK_S``: the wake keys of the
    classes they could not take are armed by the busy slots' every pop, and listening to them
    would have the held slots pop again at once, over and over, for nothing."""

    def __init__(self, slots: int) -> None:
        self._cond = threading.Condition()
        self._waiting = 0  # slots waiting for a ring
        self._held = 0  # of those, slots whose pop was held back by reservations
        self._rings = 0  # rings not yet taken (at most one per slot)
        self._slots = slots

    def wait(self, stopping: threading.Event, *, held: bool = False) -> None:
        """Block an idle slot until it is rung or ``stopping`` is set; ``held``: its pop was held
        back by reservations."""
        with self._cond:
            self._waiting += 1
            self._held += held
            self._cond.notify_all()  # the listener starts listening
            while self._rings == 0 and not stopping.is_set():
                self._cond.wait(TICK_S)
            self._rings = max(0, self._rings - 1)
            self._waiting -= 1
            self._held -= held

    def ring(self) -> None:
        """Let one waiting slot go (or the next one that comes to wait) and pop."""
        with self._cond:
            self._rings = min(self._rings + 1, self._slots)
            self._cond.notify_all()

    def listen(self, wait_for_work: Callable[[float, bool], float | None], stopping: threading.Event) -> None:
        """The listener thread: while some slot waits, block on the wake keys (``wait_for_work``
        with a timeout, and whether only the reserved classes') and ring a slot on each wake-up, on
        a retry coming due, and every ``IDLE_WAIT_S`` (the periodic look that bounds what a lost
        wake-up can cost), or ``HELD_LOOK_S`` when every waiting slot was held back."""
        due: float | None = None  # monotonic time a retry comes due
        while not stopping.is_set():
            with self._cond:
                while self._waiting == 0 and not stopping.is_set():
                    self._cond.wait(TICK_S)
                held = self._held == self._waiting
            if stopping.is_set():
                return
            if held:
                wait_for_work(HELD_LOOK_S, True)
                self.ring()
                continue
            timeout = IDLE_WAIT_S if due is None else min(IDLE_WAIT_S, max(0.001, due - time.monotonic()))
            got = wait_for_work(timeout, False)
            if got is None or got == 0.0:  # the time passed (a due retry among it), or work came
                due = None if got is None else due
                self.ring()
            else:
                due = min(due or math.inf, time.monotonic() + got)


def require_noeviction_of(queue: Queue) -> None:
    """Refuse an evicting policy on the Redis of each queue group ``queue`` serves (on a cluster,
    each group's own master, once however many of its shards it holds: one master down stops the
    check only for the groups on it)."""
    by_master = {server_of(group.client, group.keys.config): group for group in queue.groups()}
    unreachable: list[RedisUnavailable] = []
    for group in by_master.values():
        try:
            require_noeviction(group.client, group.keys.config)
        except RedisUnavailable as exc:  # a master that does not answer has nothing to evict now
            unreachable.append(exc)
    if len(unreachable) == len(by_master):
        raise unreachable[0]


def jittered(delay: float) -> float:
    """Spread retries of many threads and processes so they do not hit Redis in lockstep."""
    return delay * random.uniform(0.5, 1.0)


class _Link:
    """Whether Redis answered last time: turns a storm of failures into one log line per outage,
    and says it is back only once Redis has answered (a call that needed no Redis proves nothing:
    a heartbeat with no lease to extend returns while Redis is still away)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down_since: float | None = None

    def lost(self, exc: RedisUnavailable, since: float) -> None:
        """A call that started at ``since`` (time.monotonic()) failed: the outage runs from the
        start of the first failed call, not from when a client timeout gave up on it."""
        with self._lock:
            if self._down_since is None:
                self._down_since = since
                log.warning("%s; backing off and retrying (running jobs continue)", exc)
            else:
                self._down_since = min(self._down_since, since)

    def restored(self, confirm: Callable[[], object]) -> None:
        """After a call returned: during an outage, ``confirm`` (a Redis command) first."""
        if self._down_since is None:  # the common case, without taking the lock
            return
        try:
            confirm()
        except RedisUnavailable:
            return
        with self._lock:
            if self._down_since is not None:
                log.warning("Redis reachable again after %.1fs", time.monotonic() - self._down_since)
                self._down_since = None


class PopGate:
    """Slots' pops share it; a worker that lists the leases it holds, to give back those of a pop
    whose reply was lost, takes it alone. A pop and the holding of what it leased happen inside
    it, so that no lease is in Redis's list of the worker's and not yet in the worker's own."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pops = 0
        self._closed = False

    @contextmanager
    def pop(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._pops += 1
        try:
            yield
        finally:
            with self._cond:
                self._pops -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._closed = True
            while self._pops:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


class Tally:
    """Settled jobs per class and outcome (one of OUTCOMES), counted by every slot thread:
    one lock per settled job, and :meth:`take` swaps the counts out for the summary line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self.total: Counter[tuple[str, str]] = Counter()

    def count(self, queue: str, *outcomes: str) -> None:
        with self._lock:
            for outcome in outcomes:
                self._counts[queue, outcome] += 1

    def take(self) -> Counter[tuple[str, str]]:
        """The counts since the last take (added to :attr:`total`), starting afresh."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
            self.total.update(counts)
        return counts

    @staticmethod
    def line(counts: Counter[tuple[str, str]]) -> str:
        """``jobs:high: done 12, failed 2, retried 1, dead-lettered 1, unhandled 0; jobs:low: ...`` (classes
        with no settled job left out)."""
        queues = sorted({queue for queue, _ in counts})
        return "; ".join(f"{q}: " + ", ".join(f"{o} {counts[q, o]}" for o in OUTCOMES) for q in queues) or "no jobs settled"


class Throttle:
    """Says when something seen again and again (a task without a handler, once per job) is due
    to be logged: at most once per key per ``every`` seconds, with how many times it was seen
    since, so that a backlog of 82 such jobs makes one line a minute, not 82."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._seen: Counter[str] = Counter()

    def seen(self, key: str) -> int:
        """Count one more ``key``: the times it was seen since it was last due, when it is due
        now, else 0."""
        now = time.monotonic()
        with self._lock:
            self._seen[key] += 1
            last = self._last.get(key)
            if last is not None and now - last < self.every:
                return 0
            self._last[key] = now
            return self._seen.pop(key)


class Worker:
    """Work leased jobs with ``concurrency`` threads until :meth:`stop` or SIGTERM/SIGINT.

    ``classes`` limits the worker to some classes (a reserved pool). A slot leases up to ``batch``
    jobs per pop and works them in turn, but no more than it expects to finish within
    ``prefetch`` seconds (:meth:`_lease_ahead`): short jobs go ten a round trip by default, long
    ones one at a time, so that a more urgent job waits at most about ``prefetch`` for a slot. On
    stop it stops popping, gives back at once every leased job it has not started (attempt
    returned), lets running jobs finish for at most ``grace`` seconds, settles them and
    unregisters; a second signal abandons them at once. Unregistering returns the jobs it
    abandoned to the queue (redelivered, counted) at once; a worker killed outright loses its
    leases when its registration lapses (``registration_ttl``, 15 s), to the next reap of any
    worker.

    ``unhandled`` is what it does with a job whose task it has no handler for: ``"wait"`` (give
    it back at once, :meth:`Queue.defer_unhandled`, for a worker that has one: in a rolling
    deploy or from an older build, a worker must not throw away the jobs only newer workers know;
    the slot then pauses before it pops again) or ``"dead-letter"`` (at once, where ``fairctl
    dead`` shows it).
    """

    def __init__(self, scheduler: Queue, handlers: HandlerRegistry, *, concurrency: int = 4,
                 classes: Sequence[str] | None = None, batch: int = BATCH, worker_id: str | None = None,
                 grace: float = 30.0, registration_ttl: float = 15.0, log_every: float = LOG_EVERY_S,
                 prefetch: float = PREFETCH_S, unhandled: str = UNHANDLED_WAIT) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency: expected at least 1, got {concurrency}")
        if batch < 1:
            raise ValueError(f"batch: expected at least 1, got {batch}")
        if not prefetch >= 0:
            raise ValueError(f"prefetch: expected seconds >= 0, got {prefetch}")
        if unhandled not in UNHANDLED:
            raise ValueError(f"unhandled: expected one of {', '.join(UNHANDLED)}, got {unhandled!r}")
        for name in classes or ():
            try:
                scheduler.config.class_index(name)
            except KeyError as exc:
                raise ValueError(f"classes: {exc.args[0]}") from None
        self.scheduler = scheduler
        self.handlers = handlers
        self.concurrency = concurrency
        self.classes = list(classes) if classes else None
        self.batch = batch
        self.prefetch = prefetch
        self.unhandled = unhandled
        self._unhandled_seen = Throttle(UNHANDLED_LOG_EVERY_S)
        self._pace: float | None = None  # moving average of this worker's job runtimes (s)
        self._registered = 0  # the slots last registered
        self._registered_at = -math.inf  # when (time.monotonic())
        self._registered_paced = False  # whether a job had been measured when it registered
        self._registration_lock = threading.Lock()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.grace = grace
        self.registration_ttl = registration_ttl
        self._stopping = threading.Event()  # stop popping; running jobs finish
        self._halt = threading.Event()  # abandon everything now
        self._signals = 0
        self._link = _Link()
        self._held: dict[str, Lease] = {}  # leases this worker must heartbeat
        self._started: set[str] = set()  # held jobs whose handler was called (a stop gives back the others)
        self._gate = PopGate()
        self._held_lock = threading.Lock()
        self._slots: list[threading.Thread] = []
        self._doorbell = Doorbell(concurrency)
        self.log_every = log_every  # seconds between summary lines; 0: none but the final one
        self.tally = Tally()
        self._refused: EvictionPolicyError | None = None  # the policy changed under the running worker

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Graceful stop (thread-safe): no new pops; :meth:`run` returns once running jobs settle."""
        self._stopping.set()

    def run(self) -> bool:
        """Register, work until stopped, unregister. True when every leased job was settled,
        False when the grace period or a second signal cut running jobs short.

        Raises :class:`RedisUnavailable` if Redis cannot be reached at start (a wrong URL should
        fail loudly); outages after that are ridden out. Raises :class:`EvictionPolicyError` at
        start, or after stopping, when Redis may evict keys (see the module docstring).
        """
        require_noeviction_of(self.scheduler)
        with self._signal_handlers():
            self._register()
            self.scheduler.check_state()  # what the group's state is, so that losing it later is told
            log.info("worker %s: %d slots, batch %d, classes %s", self.worker_id, self.concurrency, self.batch,
                     ",".join(self.classes) if self.classes else "all")
            self._warn_if_all_reserved()
            reap = self._counted(self._policy_then_reap, "leases of lost workers or past their deadline queued again")
            promote = self._counted(self.scheduler.promote_overdue, "overdue jobs promoted one class up")
            move = self._counted(self.scheduler.move_pending, "queued jobs of removed classes moved where the "
                                                             "applied config says")
            self._start_periodic("heartbeat", self.scheduler.config.leases.visibility_timeout / 3,
                                 self._heartbeat, self._halt)
            self._start_periodic("registration", self.registration_ttl / 3, self._register, self._halt)
            self._start_periodic("reaper", REAP_EVERY_S, reap, self._stopping)
            self._start_periodic("aging", PROMOTE_EVERY_S, promote, self._stopping)
            self._start_periodic("moves", PROMOTE_EVERY_S, move, self._stopping)
            started = last = time.monotonic()
            if self.log_every > 0:
                def summary() -> None:
                    nonlocal last
                    now = time.monotonic()
                    log.info("worker %s: last %.0fs: %s", self.worker_id, now - last, Tally.line(self.tally.take()))
                    last = now
                self._start_periodic("summary", self.log_every, summary, self._stopping)
            self._thread("doorbell", lambda: self._doorbell.listen(self._wait_for_work, self._stopping))
            self._slots = [self._thread(f"slot-{i}", self._slot_loop) for i in range(self.concurrency)]
            while not self._stopping.is_set() and self._signals == 0:
                time.sleep(TICK_S)
            self.stop()
            self._give_back_unstarted()
            clean = self._drain()
            self._halt.set()
            with self._held_lock:
                running = len(self._held)
            returned = self._call(lambda: self.scheduler.unregister_worker(self.worker_id), self._give_up_after(5.0))
            self._say_returned(running, returned)
        self.tally.take()
        log.info("worker %s: in all %.0fs: %s", self.worker_id, time.monotonic() - started, Tally.line(self.tally.total))
        log.info("worker %s stopped", self.worker_id)
        if self._refused is not None:
            raise self._refused
        return clean

    def _policy_then_reap(self) -> int:
        """The reap tick, after re-reading the eviction policy: a policy changed to an evicting one
        stops the worker (loudly) instead of letting Redis drop the jobs it is working on."""
        try:
            require_noeviction_of(self.scheduler)
        except EvictionPolicyError as exc:
            if self._refused is None:
                log.error("%s; stopping this worker", exc)
                self._refused = exc
            self.stop()
            return 0
        self.scheduler.check_state()  # a reset group is said at ERROR once, and leases it took told apart
        return self.scheduler.reap()

    def _warn_if_all_reserved(self) -> None:
        """A fleet with no more slots than the ``reserved_slots`` of the classes this worker
        serves gives its unreserved classes nothing: say so, since the shipped config reserves 2
        and a small worker looks hung. (Reservations of classes it does not serve hold none of
        its slots.)"""
        served = [c for c in self.scheduler.config.classes if self.classes is None or c.name in self.classes]
        reserved = sum(c.reserved_slots for c in served)
        fleet = self.scheduler.fleet_slots()
        if reserved and fleet <= reserved and any(not c.reserved_slots for c in served):
            log.warning("the fleet has %d worker slots and reserved_slots add up to %d in the classes this worker "
                        "serves: those without a reservation get no work until more slots register", fleet, reserved)

    @staticmethod
    def _say_returned(running: int, returned: int | None) -> None:
        """What unregistering sent back to the queue: the jobs cut short (or finished with their
        acks unsent), and any leases of a pop whose reply was lost, which this worker never saw."""
        if not returned:
            return
        cut = min(running, returned)
        if cut:
            log.warning("%d job(s) this worker was running or had not settled queued again (redelivered: they may "
                        "have run, in part or whole)", cut)
        if returned > cut:
            log.warning("%d job(s) leased to this worker by a pop whose reply was lost queued again", returned - cut)

    def _give_back_unstarted(self) -> None:
        """A stopping worker's leased jobs that no slot has started go back to the queue now,
        their attempts given back, instead of waiting out the grace behind the running ones."""
        with self._held_lock:
            unstarted = [lease for job_id, lease in self._held.items() if job_id not in self._started]
            for lease in unstarted:
                self._held.pop(lease.job_id)
        if unstarted:
            given = self._call(partial(self.scheduler.give_back, unstarted), self._give_up_after(5.0))
            if given is None:  # Redis did not answer: unregistering (or the registration lapsing) returns them
                log.warning("stopping: could not give back %d leased job(s) not started", len(unstarted))
            else:
                log.info("stopping: gave back %d leased job(s) not started", given)

    def _drain(self) -> bool:
        with self._held_lock:
            running = len(self._held)
        log.info("stopping: no new jobs; waiting up to %.0fs for %d leased jobs", self.grace, running)
        deadline = time.monotonic() + self.grace
        while any(t.is_alive() for t in self._slots):
            if self._signals >= 2 or time.monotonic() >= deadline:
                self._halt.set()
                log.warning("stopping now: %s", "second signal" if self._signals >= 2 else "grace period over")
                return False
            time.sleep(TICK_S)
        return True

    def _give_up_after(self, seconds: float) -> threading.Event:
        """An event that is set after ``seconds``: bounds the final unregister during an outage."""
        event = threading.Event()
        timer = threading.Timer(seconds, event.set)
        timer.daemon = True
        timer.start()
        return event

    @contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        """SIGTERM/SIGINT count towards stopping (only possible from the main thread). The handler
        just counts: taking a lock inside a signal handler can deadlock the thread it interrupted."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            self._signals += 1

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        # Daemon threads: a hard stop must not wait for a handler that never returns.
        thread = threading.Thread(target=target, name=f"{self.worker_id}/{name}", daemon=True)
        thread.start()
        return thread

    def _start_periodic(self, name: str, every: float, action: Callable[[], object], until: threading.Event) -> None:
        def loop() -> None:
            while not until.wait(every):
                try:
                    self._call(action, until)
                except Exception:  # a bug or a Redis error reply: log it, try again next time
                    log.exception("%s failed", name)
        self._thread(name, loop)

    @staticmethod
    def _counted(sweep: Callable[[], int], what: str) -> Callable[[], None]:
        def run() -> None:
            count = sweep()
            if count:
                log.info("%d %s", count, what)
        return run

    # ------------------------------------------------------------------ Redis calls

    def _call(self, action: Callable[[], T], until: threading.Event) -> T | None:
        """Run one scheduler call, retrying through outages until it succeeds or ``until`` is set
        (then None). Each call is one atomic script, so an outage never half-applies one; a call
        whose reply was lost may have been applied (a lost pop leaves a lease the reaper returns)."""
        delay = OUTAGE_MIN_S
        while not until.is_set():
            started = time.monotonic()
            try:
                result = action()
            except RedisUnavailable as exc:
                self._link.lost(exc, started)
                until.wait(jittered(delay))
                delay = min(delay * 2, OUTAGE_MAX_S)
                continue
            self._link.restored(self._ping)
            return result
        return None

    def _ping(self) -> None:
        with redis_errors(self.scheduler.client):
            self.scheduler.client.ping()

    def _slots_held(self, ahead: int) -> int:
        """The fleet counts leases, not threads, against ``reserved_slots``. A slot that leases
        one job at a time holds one, so a reservation keeps whole threads free for its class, as
        long jobs need; a slot that leases ahead may hold ``batch``, and a reserved class then waits
        at most about ``prefetch`` for a slot, as its jobs are that short."""
        return self.concurrency * (self.batch if ahead > 1 else 1)

    def _register(self, *, if_due: int | None = None) -> None:
        """Register the slots this worker holds; with ``if_due`` (what a slot leases per pop now),
        only when that changes them and :meth:`_due` says so, checked under the lock, so that
        slots seeing the same change register once."""
        with self._registration_lock:
            if if_due is not None and not self._due(if_due):
                return
            paced = self._pace is not None
            slots = self._slots_held(self._lease_ahead())
            self.scheduler.register_worker(self.worker_id, slots, self.registration_ttl)
            self._registered, self._registered_at, self._registered_paced = slots, time.monotonic(), paced

    def _due(self, ahead: int) -> bool:
        """The slots held have changed and the fleet should hear it now: at once after the first
        job measured (a worker starts registered for one job a slot, and a short run of short
        jobs would otherwise lease them one at a time for its first second), else at most once a
        second, so that jobs near the prefetch bound do not register on every pop."""
        return self._slots_held(ahead) != self._registered and (
            not self._registered_paced or time.monotonic() - self._registered_at >= REREGISTER_MIN_S)

    def _keep_registered(self, ahead: int) -> None:
        """Register again when the slots start or stop leasing ahead (the periodic registration
        would tell the fleet only within a third of its TTL). A failure skips it, never the slot:
        the periodic registration rides out outages and logs errors."""
        if not self._due(ahead):
            return
        try:
            self._register(if_due=ahead)
        except RedisUnavailable:
            pass
        except Exception:  # a bug or a Redis error reply: the slot carries on popping
            log.exception("registration failed")

    def _holds(self, lease: Lease) -> bool:
        """Still held: a lease the heartbeat copied may have been acked since (its extend then
        fails too, and saying it expired would be false)."""
        with self._held_lock:
            return self._held.get(lease.job_id) == lease

    def _heartbeat(self) -> None:
        """Extend every held lease; one whose Redis (a shard of a sharded queue) does not answer
        is skipped, and the others extended all the same. A lease no longer held was settled
        meanwhile (its ack raced the copy taken here), or taken back: only the second is told."""
        with self._held_lock:
            leases = list(self._held.values())
        for lease in leases:
            try:
                held = self.scheduler.extend(lease)
            except RedisUnavailable:
                continue
            if not held and self._holds(lease):
                line = self._lost_line(lease)
                if line is not None:
                    log.warning("job %s is still running, but %s", lease.job_id, line)
                    self._release(lease)

    def _lost_line(self, lease: Lease) -> str | None:
        """Why a lease this worker held is no longer held, when that matters to the job: lost
        with its group's state, or taken back and queued again. None when it was settled already
        (by a racing ack, or an earlier call whose reply was lost), which needs no word. A lease
        of a state since lost is told so before anything else: the new state's job that took
        its id may well have been taken back, and that is not this job."""
        try:
            lost = self.scheduler.lost_with_state(lease)
            taken = not lost and self.scheduler.lease_taken_back(lease.job_id)
        except RedisUnavailable:
            lost, taken = False, True  # cannot tell: say what may happen
        if lost:
            return ("its lease was lost with its queue group's state (reset while it ran): "
                    "it runs again only if its producer sends it again")
        if not taken:
            return None
        return ("its lease was taken back (it expired, or this worker's registration lapsed) and the job "
                "queued again: it may run again")

    # ------------------------------------------------------------------ slots

    def _slot_loop(self) -> None:
        """Pop, work, repeat. A finished job's ack, with its runtime, rides with the slot's next
        pop (one round trip per job); the lease stays held, and heartbeated, until that call
        settles it. When the slot stops, acks still pending are sent on their own. A worker killed
        in between loses no job: the unacked lease expires and the job runs again (at least once)."""
        done: list[Finished] = []
        pause = UNHANDLED_PAUSE_MIN_S
        while not self._stopping.is_set():
            ahead = self._lease_ahead()
            self._keep_registered(ahead)
            tries = 0

            def pop(settle: list[Finished] = done, ahead: int = ahead) -> Popped:
                nonlocal tries
                tries += 1
                with self._gate.pop():
                    popped = self.scheduler.ack_and_pop(settle, ahead, classes=self.classes, owner=self.worker_id)
                    self._hold(popped.leases)
                    return popped

            try:
                popped = self._call(pop, self._stopping)
            except Exception:  # a bug or a Redis error reply: keep the slot alive, do not spin
                log.exception("pop failed")
                self._stopping.wait(jittered(OUTAGE_MAX_S))
                continue
            if popped is None:
                break
            if tries > 1:  # a try before may have leased jobs whose reply never came
                self._reclaim()
            self._settled(done, popped.acked)
            done = [finished for finished, ok in zip(done, popped.acked) if ok is None]  # sent again next pop
            leases = popped.leases
            if not leases:
                self._doorbell.wait(self._stopping, held=popped.held_back)
                continue
            # Jobs this worker has no handler for go back first, not after the others ran.
            handlers = [(lease, self.handlers.resolve(lease.task)) for lease in leases]
            unhandled = [lease for lease, handler in handlers if handler is None]
            for lease in unhandled:
                self._work(lease, None)
                self._release_settled(lease)
            for lease, handler in handlers:
                if handler is None or self._halt.is_set() or not self._start(lease):
                    continue  # given back, or abandoned: unregistering queues it again
                finished = self._work(lease, handler)
                if finished is not None:
                    done.append(finished)
                else:
                    self._release_settled(lease)
            if unhandled and self.unhandled == UNHANDLED_WAIT:
                self._stopping.wait(jittered(pause))
                pause = min(pause * 2, UNHANDLED_PAUSE_MAX_S)
            else:
                pause = UNHANDLED_PAUSE_MIN_S
        for finished in done:  # an ack not sent (halted) keeps its lease held: unregistering queues it again
            ack = partial(self.scheduler.ack, finished.lease, runtime=finished.runtime)
            self._settled([finished], [self._call(ack, self._halt)])

    def _hold(self, leases: Sequence[Lease]) -> None:
        """Heartbeat ``leases`` from now on."""
        with self._held_lock:
            self._held.update((lease.job_id, lease) for lease in leases)

    def _reclaim(self) -> None:
        """Give back the leases of a pop whose reply was lost: Redis lists them as this worker's,
        and no slot of it has them. Taken alone, so that no other slot's pop is half way."""
        with self._gate.alone():
            with self._held_lock:
                held = list(self._held.values())
            count = self._call(partial(self.scheduler.reclaim, self.worker_id, held), self._stopping)
        if count:
            log.warning("%d job(s) leased to this worker by a pop whose reply was lost given back", count)

    def _start(self, lease: Lease) -> bool:
        """Mark a held lease started, so that a stop lets it finish; False when the stop has
        given it back already."""
        with self._held_lock:
            if lease.job_id not in self._held:
                return False
            self._started.add(lease.job_id)
            return True

    def _lease_ahead(self) -> int:
        """Jobs a slot leases per pop: ``batch``, but no more than it expects to finish within
        ``prefetch`` seconds by the moving average of this worker's runtimes (one until it has
        measured a job). Leased jobs wait for their slot, and so does a more urgent job enqueued
        meanwhile: ten prefetched 0.5 s bulk jobs would keep a password reset waiting up to 5 s
        for that slot. With the bound a batch of short jobs stays a batch (the throughput it is
        for) and a batch of long ones shrinks to what fits. ``prefetch`` 0: always ``batch``."""
        if self.batch == 1 or self.prefetch == 0:
            return self.batch
        pace = self._pace
        if pace is None:
            return 1
        return self.batch if pace <= 0 else max(1, min(self.batch, int(self.prefetch / pace)))

    def _wait_for_work(self, timeout: float, held: bool) -> float | None:
        """The doorbell's blocking wait, for work of the classes this worker serves (``held``:
        of those that reserve slots). On a failure it rings (returns None): the slot's pop then
        meets the outage, and reports and rides it out once, as every call does."""
        classes = self.classes
        if held:
            classes = [c.name for c in self.scheduler.config.classes
                       if c.reserved_slots and (self.classes is None or c.name in self.classes)]
            if not classes:
                self._stopping.wait(timeout)
                return None
        try:
            return self.scheduler.wait_for_work(timeout, classes)
        except RedisUnavailable:
            self._stopping.wait(jittered(OUTAGE_MIN_S))
        except Exception:  # a bug or a Redis error reply: the slots' pops will show it too
            log.exception("waiting for work failed")
            self._stopping.wait(jittered(OUTAGE_MAX_S))
        return None

    def _work(self, lease: Lease, handler: Handler | None) -> Finished | None:
        """Run the job with its ``handler``; its :class:`Finished` (lease and runtime) when it
        succeeded and awaits its ack, else None. A failure is nacked here, with the time it took;
        a job with no handler (None) is settled as :attr:`unhandled` says."""
        try:
            if handler is None:
                self._settle_unhandled(lease)
                return None
            error, runtime = self._run_handler(handler, lease)
            self._pace = runtime if self._pace is None else self._pace + PACE_SMOOTHING * (runtime - self._pace)
            if error is None:
                return Finished(lease, runtime)
            self._settle_nack(lease, error, runtime=runtime)
        except Exception:
            log.exception("settling job %s failed; its lease will expire and it will be delivered again", lease.job_id)
        return None

    @staticmethod
    def _run_handler(handler: Handler, lease: Lease) -> tuple[str | None, float]:
        """(None on success, else the error stored with the job; the seconds the handler ran,
        by a monotonic clock so that no clock step or skew enters the charge)."""
        started = time.monotonic()
        try:
            handler(lease)
        except Exception as exc:  # the handler's failure is the job's failure, not the worker's
            return str(exc) or type(exc).__name__, time.monotonic() - started
        return None, time.monotonic() - started

    def _settled(self, done: Sequence[Finished], acked: Sequence[bool | None]) -> None:
        """Stop heartbeating settled leases; say so when an ack came too late. An ack not sent
        (None: its shard did not answer) keeps its lease held, for the next call to send."""
        for lease, ok in zip((f.lease for f in done), acked):
            if ok is None:
                continue
            if ok:
                self.tally.count(lease.queue, "done")
            elif (line := self._lost_line(lease)) is not None:
                log.warning("job %s finished, but %s", lease.job_id, line)
            else:  # acked already, by a call whose reply was lost and which was sent again
                self.tally.count(lease.queue, "done")
            self._release(lease)

    def _settle_nack(self, lease: Lease, error: str, *, final: bool = False, runtime: float | None = None) -> None:
        outcome = self._call(lambda: self.scheduler.nack(lease, error, final=final, runtime=runtime), self._halt)
        self.tally.count(lease.queue, "failed", *{"retry": ("retried",), "dead": ("dead-lettered",)}.get(outcome or "", ()))
        log.warning("job %s (%s, tenant %s, attempt %d) failed: %s -> %s", lease.job_id, lease.task,
                    lease.tenant, lease.attempts, error, outcome or "unsettled")

    def _settle_unhandled(self, lease: Lease) -> None:
        """A job whose task this worker has no handler for. Dead-lettered at once when asked (no
        retry on this worker can mend it); by default given back to wait for a worker that has
        the handler, and said at WARNING once per task per UNHANDLED_LOG_EVERY_S."""
        if self.unhandled == UNHANDLED_DEAD_LETTER:
            self._settle_nack(lease, f"no handler for task {lease.task}", final=True)
            return
        outcome = self._call(lambda: self.scheduler.defer_unhandled(lease), self._halt)
        if outcome != "unhandled":
            return
        self.tally.count(lease.queue, "unhandled")
        jobs = self._unhandled_seen.seen(lease.task)
        if jobs:
            log.warning("no handler for task %s: %d job(s) of it given back since the last such line, each back in "
                        "the queue at once for a worker that has one (jobs_unhandled_total); deploy its handler "
                        "to this worker, or run with --unhandled dead-letter to dead-letter such jobs",
                        lease.task, jobs)

    def _release_settled(self, lease: Lease) -> None:
        """Release a lease its nack settled. Once halted the nack may not have been sent: the
        lease then stays held, for unregistering to queue it again (and to count it as cut short)."""
        if not self._halt.is_set():
            self._release(lease)

    def _release(self, lease: Lease) -> None:
        with self._held_lock:
            self._held.pop(lease.job_id, None)
            self._started.discard(lease.job_id)
