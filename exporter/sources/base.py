"""What the exporter reads from a job system it does not run (Celery, RQ, BullMQ, Sidekiq).

Each system is one small module with one :class:`Source`: it reads the system's own keys in that
system's Redis, read-only, with a bounded number of commands per scrape (they grow with the
classes, their queues and the tenant sample, never with the jobs), and turns them into one
:class:`ClassReading` per class of the config. What a system cannot tell (Celery's broker keeps no
enqueue time and no completions) is ``None`` there, and the system's ``supplies`` says which
metrics of the contract it serves, so the exporter, the rules and the dashboards leave the others
out rather than serve a zero that means "unknown".

Beside the queues, each system keeps records the readers turn into more of the contract, still at a
bounded cost a read: the jobs it gave up (a dead or failed set scored by time, counted by
:class:`Tally` or :class:`Arrivals`), the jobs it started (its running list and its finished and
failed sets, whose newest :data:`RECENT` records give the waits of the jobs started since the last
read, :class:`Starts`), and whether a queue is paused. The tenant sample the readers take for the
shares also gives the tenants' count, the quiet tenants' oldest job and each tenant's oldest job
(:func:`tenant_figures`). Redis's memory is read by the collector, from INFO, for every system.

This module imports nothing of the exporter's beyond the core (the config's ``watch`` section is
parsed with it): the readers name the contract's metrics.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import redis

from fairness_core.snapshot import NOISY_SHARE, WAIT_BUCKETS_S

from .watching import QueueRef, WatchConfig

__all__ = ["RECENT", "Arrivals", "ClassReading", "QueueRef", "Readings", "Source", "Starts", "Tally", "TenantFigures",
           "WaitCounts", "Waits", "newest", "per_queue_sample", "tenant_figures", "tenant_of", "top_tenants"]

# Records a read takes from the newest end of each record of started or given-up jobs (a running
# list, a finished or failed set) for the waits and the counters: what a read costs, whatever the
# jobs. More jobs than this starting between two reads leave the waits a sample of them.
RECENT = 20


@dataclass(frozen=True)
class ClassReading:
    """One class at one scrape: the sum over its queues."""

    depth: int  # jobs waiting, exact at the moment of the read
    oldest_enqueued: float | None  # epoch seconds the oldest waiting job was enqueued (None: none waiting)
    inflight: int | None  # jobs started and not finished (None: the system keeps no record of them)
    processed: int | None  # jobs finished so far, a counter kept by the reader (None: not known)
    tenants: tuple[tuple[str, int], ...]  # (tenant, jobs) among the waiting jobs sampled, most first
    # (tenant, epoch seconds enqueued) of each waiting job sampled for the tenants; None where unknown
    sample: tuple[tuple[str | None, float | None], ...] = ()
    paused: bool | None = None  # whether the class's queues are paused (None: the system keeps no pause)
    dead_lettered: int | None = None  # jobs given up so far, a counter kept by the reader (None: not known)
    waits: WaitCounts | None = None  # waits of the jobs seen starting, a histogram kept by the reader


class Readings(dict[str, ClassReading]):
    """What one read gives: a reading per class, in config order, and the jobs in the system's dead
    or failed sets (``dead_letters``; None where it keeps none)."""

    dead_letters: int | None = None


@dataclass(frozen=True)
class WaitCounts:
    """A histogram of waits at one read: one count per bucket of ``WAIT_BUCKETS_S`` (the contract's
    ``WAIT_BUCKETS``) and +Inf (not cumulative), and the waits' sum in seconds."""

    counts: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def __add__(self, other: WaitCounts) -> WaitCounts:
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return WaitCounts(counts, self.total + other.total)

    @staticmethod
    def summed(parts: Iterable[WaitCounts]) -> WaitCounts:
        """Histograms added up (a class's queues')."""
        out = Waits().read()
        for part in parts:
            out = out + part
        return out


class Waits:
    """The waits a reader observed for one class since it started: a histogram it keeps."""

    def __init__(self) -> None:
        self._counts = [0] * (len(WAIT_BUCKETS_S) + 1)
        self._total = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(WAIT_BUCKETS_S, seconds)] += 1  # a bucket holds the waits up to its bound
        self._total += seconds

    def read(self) -> WaitCounts:
        return WaitCounts(tuple(self._counts), self._total)


def _score(value: float) -> str:
    return "-inf" if value == -math.inf else repr(value)


# The top of a set scored by time, short of the records scored +inf (RQ's jobs kept forever).
TOP = "(+inf"


def newest(pipe: Any, key: str, size: int = RECENT) -> None:
    """Queues the read of a set's newest ``size`` records scored by time, with their scores, newest
    first (``ZREVRANGEBYSCORE key (+inf -inf LIMIT 0 size WITHSCORES``, one command)."""
    pipe.zrevrangebyscore(key, TOP, "-inf", start=0, num=size, withscores=True)


class Tally:
    """How many records were added to a system's sorted set scored by time (a finished or failed
    set) since the reader's first read, counted from the set itself without reading the records.

    Each read takes the set's newest :data:`RECENT` records (:func:`newest`, one command). The tally
    keeps a cursor, the newest score of the read before, and the records at or after it it has
    counted. The records counted from the window are exact, the same second's included (RQ scores
    whole seconds); only when more records than the window holds came since the last read does
    :meth:`plan` ask for two ``ZCOUNT``s, of the records at or after the cursor and of those before
    the newest score read. It counts a record once, whenever it was added, as long as records are
    added at or after the newest score already there (the time they were finished at, on clocks
    that agree) and none is removed before a read saw it; records scored before the cursor (a job
    kept for a shorter time than the others, on RQ) are not counted, and removed ones (trimmed,
    requeued) leave the count where it was. The count starts at 0: the records there at the first read are not counted."""

    def __init__(self, size: int = RECENT) -> None:
        self.size = size
        self.cursor: float | None = None  # the newest score of the last read; None before the first
        self._settled = 0  # records counted scored before the cursor
        self._pending = 0  # records counted at or after the cursor
        self._start = 0  # records there at the first read
        self._from = -math.inf  # this read's cursor
        self._latest: float | None = None  # this read's newest score

    @property
    def count(self) -> int:
        return self._settled + self._pending - self._start

    def window(self, pipe: Any, key: str) -> None:
        """Queues the read of the set's newest records (:func:`newest`)."""
        newest(pipe, key, self.size)

    def plan(self, window: Sequence[tuple[bytes, float]]) -> tuple[str, str, str] | None:
        """Takes the newest records a read found (newest first); None when they tell the count,
        else the bounds of two ``ZCOUNT``s to send, ``(cursor, +inf)`` and ``(cursor, (newest)``,
        whose replies :meth:`counted` takes."""
        self._latest = window[0][1] if window else None
        if self.cursor is not None:
            self._from = self.cursor
        else:
            self._from = self._latest if self._latest is not None else -math.inf
        if len(window) < self.size or window[-1][1] < self._from:  # the window holds all from the cursor on
            latest = self._latest if self._latest is not None else -math.inf
            at_or_after = sum(1 for _, score in window if score >= self._from)
            before_latest = sum(1 for _, score in window if self._from <= score < latest)
            self.counted(at_or_after, before_latest)
            return None
        return _score(self._from), TOP, f"({self._latest!r}"

    def ask(self, pipe: Any, key: str, window: Sequence[tuple[bytes, float]]) -> bool:
        """:meth:`plan`, queueing its two ``ZCOUNT``s of ``key`` when the window does not tell the
        count; True when it did, so the caller hands this tally their replies."""
        bounds = self.plan(window)
        if bounds is None:
            return False
        low, top, below_newest = bounds
        pipe.zcount(key, low, top)
        pipe.zcount(key, low, below_newest)
        return True

    def counted(self, at_or_after: int, before_latest: int) -> None:
        """Takes the records at or after the cursor and those among them before the newest score."""
        if self.cursor is None:
            self._start = at_or_after
            counted = at_or_after
        else:  # fewer than counted: some were removed, and what came meanwhile cannot be told
            counted = max(at_or_after, self._pending)
        if self._latest is not None and self._latest > self._from:
            self._settled += before_latest
            self._pending = counted - before_latest
            self.cursor = self._latest
        else:
            self._pending = counted
            self.cursor = self._from


class Arrivals:
    """The records added to a sorted set scored by time since the reader's first read, read in the
    order they came, at most ``size`` a read: for a set whose records must each be looked at
    (Sidekiq's dead set holds every queue's jobs, so each is attributed by the queue it names). A
    read takes the records at or after its cursor (``ZRANGEBYSCORE key cursor +inf WITHSCORES LIMIT
    0 n``), skipping those at the cursor's own score it took before; more than ``size`` records
    added between two reads are taken over the next reads. The first read only finds the newest
    record, where the counting starts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cursor: float | None = None
        self._at_cursor: set[bytes] = set()  # records scored at the cursor already taken

    def read(self, pipe: Any, key: str) -> None:
        if self.cursor is None:
            pipe.zrevrange(key, 0, 0, withscores=True)
        else:
            pipe.zrangebyscore(key, _score(self.cursor), "+inf", start=0, num=self.size + len(self._at_cursor),
                               withscores=True)

    def take(self, reply: Sequence[tuple[bytes, float]]) -> list[bytes]:
        """The records the read found that were not taken before (none on the first read)."""
        if self.cursor is None:
            self.cursor = reply[0][1] if reply else -math.inf
            self._at_cursor = {reply[0][0]} if reply else set()
            return []
        new = [(member, score) for member, score in reply if not (score == self.cursor and member in self._at_cursor)]
        if new:
            last = new[-1][1]
            taken = {member for member, score in new if score == last}
            self._at_cursor = taken | (self._at_cursor if last == self.cursor else set())
            self.cursor = last
        return [member for member, _ in new]


Key = TypeVar("Key", bound=Hashable)


class Starts(Generic[Key]):
    """Whose waits a read observes among the started jobs it read (a running list's newest, the
    newest finished and failed): each job's, once. A job is observed by the first read after the
    time it started (by the system's own ``started`` time: after the previous read's, up to this
    one's), whatever list or set it is in by then; so a job read again, still running or since
    finished, is never observed twice, and one read first after a later read's time is not
    observed. A job's times are read once: the jobs a read judged are remembered while they stay in
    what the reads take (at most the records read, never more). The first read observes none (those
    jobs started before the exporter)."""

    def __init__(self) -> None:
        self.since: float | None = None  # the previous read's time
        self._judged: set[Key] = set()
        self._now = 0.0
        self._decided: set[Key] = set()

    def begin(self, now: float, keys: Iterable[Key]) -> list[Key]:
        """The jobs read now (``keys``) whose enqueue and start times the read must fetch."""
        self._now, read = now, list(dict.fromkeys(keys))
        if self.since is None:
            self._decided = set(read)
            return []
        self._decided = {key for key in read if key in self._judged}
        return [key for key in read if key not in self._judged]

    def judge(self, key: Key, enqueued: float | None, started: float | None) -> float | None:
        """The wait to observe of a job fetched for :meth:`begin`, from its own times (epoch
        seconds; None where absent); None for none."""
        if started is None:
            if enqueued is None:  # its record is gone: there is nothing to observe
                self._decided.add(key)
            return None
        if started > self._now:  # started after this read's time: the next read's to observe
            return None
        self._decided.add(key)
        if enqueued is None or self.since is None or started <= self.since:
            return None
        return max(0.0, started - enqueued)

    def end(self) -> None:
        self._judged, self.since = self._decided, self._now


@dataclass(frozen=True)
class TenantFigures:
    """What a class's tenant sample tells beside the shares."""

    active: int  # tenants among the sampled jobs
    quiet_oldest: float | None  # epoch seconds the oldest sampled job of a tenant that is not noisy was enqueued
    oldest: tuple[tuple[str, float], ...]  # (tenant, epoch seconds its oldest sampled job was enqueued), oldest first


def tenant_figures(sample: Sequence[tuple[str | None, float | None]], depth: int,
                   noisy_min_queued: int) -> TenantFigures:
    """The tenants of a class's sampled waiting jobs counted, the oldest job of the quiet ones, and
    each one's oldest. A tenant is noisy, as for fairctl's own queues, when it holds more than 10%
    of the class's waiting jobs and at least ``noisy_min_queued`` (exporter.noisy_min_queued) of
    them, both judged from the sample: its share of the sampled jobs, and that share of ``depth``.
    Jobs with no tenant count for none."""
    counts: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for tenant, enqueued in sample:
        if tenant is None:
            continue
        counts[tenant] = counts.get(tenant, 0) + 1
        if enqueued is not None and enqueued < oldest.get(tenant, math.inf):
            oldest[tenant] = enqueued
    sampled = sum(counts.values())
    noisy = {t for t, n in counts.items() if n > NOISY_SHARE * sampled and n / sampled * depth >= noisy_min_queued}
    quiet = [at for t, at in oldest.items() if t not in noisy]
    return TenantFigures(len(counts), min(quiet) if quiet else None,
                         tuple(sorted(oldest.items(), key=lambda kv: (kv[1], kv[0]))))


class Source(Protocol):
    """A job system's reader for the classes of one config's ``watch`` section (built from it)."""

    kind: ClassVar[str]  # the ``watch.system`` value naming it
    has_priorities: ClassVar[bool]  # whether a class may take some of a queue's priorities (watch.classes)
    tenant_roots: ClassVar[tuple[str, ...]]  # where its jobs keep their arguments: a watch.tenant path's first step
    supplies: ClassVar[frozenset[str]]  # names of the contract's metrics (exporter.metrics) it serves

    def __init__(self, watch: WatchConfig) -> None: ...

    def read(self, client: redis.Redis, now: float) -> Readings:
        """One reading per class, in config order. Never writes; commands bounded as above."""
        ...


def tenant_of(arguments: Any, path: tuple[str, ...]) -> str | None:
    """The tenant a job's decoded arguments hold at ``path`` (``("kwargs", "tenant_id")``,
    ``("args", "0")``): mapping keys and list indices in turn; None where the path leads nowhere
    or to a mapping or list. Numbers and other scalars read as their text."""
    value = arguments
    for step in path:
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    if value is None or isinstance(value, (dict, list)):
        return None
    return value if isinstance(value, str) else str(value)


def top_tenants(tenants: list[str | None]) -> tuple[tuple[str, int], ...]:
    """The sampled jobs' tenants counted, most first (ties by name); jobs with none left out."""
    counts: dict[str, int] = {}
    for tenant in tenants:
        if tenant is not None:
            counts[tenant] = counts.get(tenant, 0) + 1
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def per_queue_sample(queues: Mapping[str, tuple[str, ...]], watch: WatchConfig) -> dict[str, int]:
    """Jobs read per queue for the tenant sample: each class's ``watch.sample`` split among its
    queues (``queues``: a class's queue names), 0 without a tenant path (then only the job an age
    is read from)."""
    return {q: -(-watch.sample // len(names)) if watch.tenant is not None else 0
            for names in queues.values() for q in names}
