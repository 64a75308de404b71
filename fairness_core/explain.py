"""Why a job has not run yet, and where a tenant stands: read from Redis, never written.

An operator asked "where is job 42, and why is it still waiting?" would otherwise read a dozen
structures by hand (the lease hash, the retry set, the tenant's sub-queue, the holds of the
dispatch limits, the fleet's registrations, the class's fair order) and redo the script's
arithmetic. This module does that reading, one queue group at a time (a sharded job id names its
group), and says what it found in words and figures.

Everything here reads: the keys of :mod:`fairness_core.keys` with plain commands, and one
read-only script (``EVAL_RO``, refused by Redis if it tried to write) that looks for a job id in
lists and sorted sets. No scheduler call is made, so explaining a job never moves it.

Finding a job by id: leases are a hash by id; queued jobs, retries and dead letters have no
index by id (one would cost every enqueue and pop a write). A queued job is looked for in the
sub-queues of the tenants its group has queued (each class's backlog set, read with ZSCAN, never
KEYS), each from its tail back, counting places from the tail: a pop (or a retry pushed back) at
the head changes no job's place counted so, and an enqueue at the tail moves every job further
from it, into the part still to read, so a job still queued is never passed over between two
reads. The search stops at ``max_keys`` sub-queues and ``max_jobs`` jobs read, and says so;
naming the tenant (or the class) reads only its sub-queues.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .accounts import account_of
from .ages import human
from .config import Config, TenantsConfig, format_duration
from .connection import redis_errors
from .jobs import SEP, DeadLetter, Envelope, InvalidJob, Record, check_tenant, decoded, named
from .keys import ACCOUNT_MARK, CLASS_PARTS, Keys
from .queue import Queue
from .settings import Settings, derive, paced
from .snapshot import window_weight

# The search's default bounds: sub-queues read, and queued jobs (or retries, or dead letters) read.
MAX_KEYS = 10_000
MAX_JOBS = 1_000_000
# Per script call: jobs read at most (a call stays around a millisecond of Redis time for small
# payloads) and sub-queues named.
CALL_JOBS = 2_000
CALL_KEYS = 100
# Workers read at most, to find which one holds a lease.
MAX_WORKERS = 10_000

# Looks for the line whose envelope starts with ARGV[1] (the job id and a tab) after ARGV[2]
# tab-separated fields, in the lists (ARGV[4] 'list') or sorted sets ('zset') KEYS, each from its
# tail back, from KEYS[ARGV[5]] with ARGV[6] of its lines read already, reading at most ARGV[3]
# lines. Returns {key found (0: none), its place from the head, the line, its score ('' in a list),
# lines read, the key to go on from, lines of it read}.
FIND = """
local prefix, skip, budget, kind = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local k, done, read = tonumber(ARGV[5]), tonumber(ARGV[6]), 0
local function head(line)
  local at = 1
  for _ = 1, skip do
    at = string.find(line, '\\t', at, true)
    if not at then return nil end
    at = at + 1
  end
  return string.sub(line, at, at + #prefix - 1)
end
while k <= #KEYS do
  local size = kind == 'zset' and redis.call('ZCARD', KEYS[k]) or redis.call('LLEN', KEYS[k])
  while done < size do
    if read >= budget then return {0, 0, '', '', read, k, done} end
    local n = math.min(1000, budget - read, size - done)
    local first = -(done + n)
    local lines = redis.call(kind == 'zset' and 'ZRANGE' or 'LRANGE', KEYS[k], first, -(done + 1))
    if #lines == 0 then break end
    read = read + #lines
    for i = #lines, 1, -1 do
      if head(lines[i]) == prefix then
        local score = kind == 'zset' and redis.call('ZSCORE', KEYS[k], lines[i]) or ''
        return {k, size + first + i - 1, lines[i], score, read, k, done}
      end
    end
    done = done + #lines
  end
  k, done = k + 1, 0
end
return {0, 0, '', '', read, k, 0}
"""
# Fields before the envelope in a retry's record (class, tenant, attempts) and a dead letter's
# (class, tenant, attempts, when, error).
RECORD_SKIP = len(Record.names()) - 1
DEAD_SKIP = len(DeadLetter.names()) - 1


@dataclass(frozen=True)
class Reason:
    """One thing that keeps a job (or a tenant's jobs) from running now: ``code`` names it for a
    program (paused, backoff, cap, rate, account_cap, account_rate, reservation, busy, no_worker,
    removed, turn), ``text`` for a person, ``figures`` the numbers the text quotes."""

    code: str
    text: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"reason": self.code, "text": self.text, **self.figures}


@dataclass(frozen=True)
class Place:
    """Where a tenant's party stands in its class's fair order (the tags set: lowest tag first)."""

    party: str
    in_order: bool
    parties_ahead: int | None  # parties with a lower tag (ZRANK), None when out of the order
    parties: int  # parties in the order now
    keys_ahead: int | None  # with accounts: the account's tenants before this one, else None
    jobs_ahead: int | None  # the tenant's own jobs before the job in its sub-queue (None: no job asked)
    queued: int  # the tenant's jobs queued in the class
    text: str


@dataclass(frozen=True)
class Estimate:
    """A rough wait: the class's jobs before the job, over the class's recent service rate."""

    jobs_before: int
    jobs_per_s: float | None
    seconds: float | None
    basis: str
    text: str


@dataclass(frozen=True)
class Search:
    """How far the id search read, and whether it read everything it could hold the job."""

    complete: bool
    subqueues_read: int
    jobs_read: int
    max_keys: int
    max_jobs: int
    narrowed: str = ""  # the tenant or classes the search of queued jobs was narrowed to ('' none)

    @property
    def text(self) -> str:
        read = f"read {self.subqueues_read} tenant sub-queues and {self.jobs_read} queued, retrying and dead jobs"
        if self.narrowed:
            read += f" (the queued ones of {self.narrowed} only)"
        if self.complete:
            return read
        if self.narrowed and self.subqueues_read < self.max_keys and self.jobs_read < self.max_jobs:
            return f"{read}: the job may be queued elsewhere"
        return (f"{read} and stopped at its bound (--max-keys {self.max_keys}, --max-jobs {self.max_jobs}): the job "
                "may be queued where it did not read; name its tenant (--tenant) or class (--class) to read less")


@dataclass(frozen=True)
class JobExplanation:
    """Where job ``job_id`` is (``state``: queued, delayed, leased, dead, done, unknown, or
    not_found when the search stopped at its bound) and, while it waits, why."""

    job_id: str
    group: str
    state: str
    summary: str
    job: Mapping[str, Any]
    details: Mapping[str, Any]
    reasons: tuple[Reason, ...] = ()
    place: Place | None = None
    estimate: Estimate | None = None
    search: Search | None = None

    def as_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "group": self.group, "state": self.state, "summary": self.summary,
                "job": dict(self.job), "details": dict(self.details),
                "reasons": [r.as_json() for r in self.reasons], "place": _fields(self.place),
                "estimate": _fields(self.estimate),
                "search": None if self.search is None else {**_fields(self.search), "text": self.search.text}}


@dataclass(frozen=True)
class Limit:
    """A dispatch or admission limit as it holds for a tenant (or its account), and its field."""

    name: str
    value: float | None  # None: no limit
    field: str
    text: str


@dataclass(frozen=True)
class TenantClass:
    """A tenant in one class of one group: its jobs, holds and place."""

    group: str
    queue: str
    queued: int
    inflight: int
    oldest_enqueued_ms: int | None
    reasons: tuple[Reason, ...]
    place: Place | None
    estimate: Estimate | None

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "class": self.queue, "queued": self.queued, "inflight": self.inflight,
                "oldest_enqueued_at": None if self.oldest_enqueued_ms is None else self.oldest_enqueued_ms / 1000,
                "reasons": [r.as_json() for r in self.reasons], "place": _fields(self.place),
                "estimate": _fields(self.estimate)}


@dataclass(frozen=True)
class TenantExplanation:
    """A tenant's standing: its limits, what it runs, and per class its jobs, holds and place."""

    tenant: str
    account: str | None
    tier: str
    running: int  # its leased jobs, all classes and groups
    limits: tuple[Limit, ...]
    classes: tuple[TenantClass, ...]

    def as_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "account": self.account, "tier": self.tier, "running": self.running,
                "limits": [_fields(lim) for lim in self.limits], "classes": [c.as_json() for c in self.classes]}


def _fields(obj: Any) -> Any:
    return None if obj is None else {name: getattr(obj, name) for name in obj.__dataclass_fields__}


# ------------------------------------------------------------------ one group, as read


@dataclass(frozen=True)
class _Group:
    """One queue group as an explanation reads it: its keys, the client of its Redis, the config
    it runs (its applied one: the script's limits and names are that config's) and the time."""

    index: int
    keys: Keys
    client: Any
    config: Config
    settings: Settings
    sharded: bool
    now_ms: int

    @property
    def name(self) -> str:
        return self.keys.prefix

    def read(self, calls: Mapping[Any, Callable[[Any], Any]]) -> dict[Any, Any]:
        """Each named command, in one pipelined round trip."""
        with redis_errors(self.client):
            pipe = self.client.pipeline(transaction=False)
            for call in calls.values():
                call(pipe)
            return dict(zip(calls, pipe.execute()))

    def class_key(self, queue: str, part: str) -> str:
        return self.keys.class_key(queue, CLASS_PARTS[part])

    def at(self, ms: float) -> str:
        return _at(ms, self.now_ms)


def _command(name: str, *args: Any) -> Callable[[Any], Any]:
    """The Redis command ``name`` with ``args``, for :meth:`_Group.read` to queue on its pipeline."""
    return lambda pipe: getattr(pipe, name)(*args)


def _open(queue: Queue, index: int, now_ms: int | None) -> _Group:
    shard = queue.shard(index)
    client = shard._node()  # the group's own Redis: on a Cluster the master of its slot
    applied = shard.read_applied()
    settings = shard.settings if applied is None else derive(applied.config, applied.moves, applied.names,
                                                             applied.fingerprint)
    if now_ms is None:
        with redis_errors(client):
            seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
    return _Group(index, shard.keys, client, shard.config if applied is None else applied.config, settings,
                  queue.sharded, now_ms)


def _at(ms: float, now_ms: int) -> str:
    """A time for a person: UTC to the millisecond, and how far from now."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{int(ms % 1000):03d} UTC"
    delta = (ms - now_ms) / 1000
    return f"{stamp} ({'now' if abs(delta) < 0.005 else 'in ' + human(delta) if delta > 0 else human(-delta) + ' ago'})"


def _n(count: int, word: str) -> str:
    """``1 job``, ``2 jobs``, ``3 parties``."""
    return f"{count} {word if count == 1 else word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int:
    return int(float(value)) if value is not None else 0


# ------------------------------------------------------------------ a job


def explain_job(queue: Queue, job_id: str, *, tenant: str | None = None, classes: Sequence[str] | None = None,
                now_ms: int | None = None, max_keys: int = MAX_KEYS, max_jobs: int = MAX_JOBS) -> JobExplanation:
    """Where job ``job_id`` is and, while it waits, why. ``tenant`` and ``classes`` narrow the
    search of the queued jobs to those sub-queues; ``now_ms`` stands in for Redis ``TIME`` (a
    queue on a test's clock). InvalidJob naming ``job id``, ``tenant`` or ``class`` for bad ones."""
    index, own = queue.locate(job_id)
    if tenant is not None:
        check_tenant(tenant, queue.config)
    g = _open(queue, index, now_ms)
    wanted = _classes(g, classes)
    issued = _int(g.read({"seq": lambda p: p.get(g.keys.seq)})["seq"])
    if int(own) > issued:
        return JobExplanation(job_id, g.name, "unknown",
                              f"job {job_id} was never issued: queue group {g.name}'s id counter is at {issued} (or "
                              "the group's state was lost since)", {}, {"issued": issued})
    leased = _leased(g, job_id, own)
    if leased is not None:
        return leased
    narrowed = " and ".join(part for part in (f"tenant {tenant}" if tenant else "", ", ".join(wanted) if classes else "")
                            if part)
    search = _Finder(g, own, max_keys, max_jobs, narrowed)
    found = search.delayed(job_id) or search.queued(job_id, tenant, wanted) or search.dead(job_id)
    if found is not None:
        return found
    leased = _leased(g, job_id, own)  # popped while the search read
    if leased is not None:
        return leased
    if not search.result.complete:
        return JobExplanation(job_id, g.name, "not_found", f"job {job_id} was not found: {search.result.text}", {},
                              {"issued": issued}, search=search.result)
    return JobExplanation(
        job_id, g.name, "done",
        f"job {job_id} is done: it was issued (queue group {g.name}'s id counter is at {issued}) and is nowhere now, "
        "neither queued, waiting to retry, leased nor dead-lettered: it was acked, or its dead letter dropped",
        {}, {"issued": issued}, search=search.result)


def _classes(g: _Group, classes: Sequence[str] | None) -> list[str]:
    """The classes to read: those given (each checked), else every configured one and every one
    the applied config removed whose jobs may still wait to be moved."""
    if classes is None:
        return [*g.settings.classes, *(old for old, _ in g.settings.moves)]
    for name in classes:
        if name not in g.settings.classes:
            raise InvalidJob("class", f"unknown class {name!r}; configured: {', '.join(g.settings.classes)}")
    return list(classes)


def _job_fields(g: _Group, queue: str, tenant: str, attempts: int, env: Envelope) -> dict[str, Any]:
    names = g.settings.names
    return {"class": queue, "tenant": tenant, "task": named(env.task, names), "tier": named(env.tier, names),
            "reason": named(env.reason, names), "attempts": attempts, "enqueued_at": env.enqueued_ms / 1000}


def _leased(g: _Group, job_id: str, own: str) -> JobExplanation | None:
    got = g.read({"record": lambda p: p.hget(g.keys.leased, own), "deadline": lambda p: p.zscore(g.keys.leases, own),
                  "workers": lambda p: p.zrange(g.keys.workers, 0, MAX_WORKERS - 1, withscores=True)})
    if got["record"] is None:
        return None
    record = Record.decode(decoded(got["record"]))
    workers = [(decoded(w), float(until)) for w, until in got["workers"]]
    owners = g.read({w: _command("zscore", g.keys.owned(w), own) for w, _ in workers})
    owner = next(((w, until) for w, until in workers if owners[w] is not None), None)
    deadline = _num(got["deadline"])
    details: dict[str, Any] = {"worker": owner and owner[0], "deadline": deadline and deadline / 1000,
                               "since": deadline and (deadline - g.settings.visibility_ms) / 1000,
                               "attempt": record.attempts, "max_attempts": g.settings.max_attempts}
    if owner is None:
        by = "by no registered worker (popped without a worker id, or its worker's record is gone): it comes back at " \
             "its deadline"
    else:
        by = f"by worker {owner[0]} (registered until {g.at(owner[1])})"
    lines = [f"job {job_id} is leased {by}, attempt {record.attempts} of {g.settings.max_attempts} "
             f"(leases.max_attempts), class {record.queue}, tenant {record.tenant}"]
    if deadline is not None:
        lines.append(f"leased (or last extended) at {g.at(deadline - g.settings.visibility_ms)}, deadline "
                     f"{g.at(deadline)}" + ("; past it, the next reap gives the job back" if deadline < g.now_ms else ""))
    return JobExplanation(job_id, g.name, "leased", "; ".join(lines),
                          _job_fields(g, record.queue, record.tenant, record.attempts, record.job), details)


class _Finder:
    """The bounded search for one job id in a group's retries, sub-queues and dead letters."""

    def __init__(self, g: _Group, own: str, max_keys: int, max_jobs: int, narrowed: str) -> None:
        self.g, self.prefix = g, own + SEP
        self.max_keys, self.max_jobs, self.narrowed = max_keys, max_jobs, narrowed
        self.subqueues = self.jobs = 0
        self.stopped = False

    @property
    def result(self) -> Search:
        return Search(not (self.stopped or self.narrowed), self.subqueues, self.jobs, self.max_keys, self.max_jobs,
                      self.narrowed)

    def _find(self, keys: Sequence[str], skip: int, kind: str) -> tuple[int, int, str, str] | None:
        """(which key, place from its head, the line, its score) of the line holding the job."""
        k, done = 1, 0
        while k <= len(keys):
            budget = min(CALL_JOBS, self.max_jobs - self.jobs)
            if budget <= 0:
                self.stopped = True
                return None
            with redis_errors(self.g.client):
                found, place, line, score, read, k, done = self.g.client.eval_ro(
                    FIND, len(keys), *keys, self.prefix, skip, budget, kind, k, done)
            self.jobs += int(read)
            if int(found):
                return int(found) - 1, int(place), decoded(line), decoded(score)
        return None

    def delayed(self, job_id: str) -> JobExplanation | None:
        hit = self._find([self.g.keys.delayed], RECORD_SKIP, "zset")
        if hit is None:
            return None
        g, record, due = self.g, Record.decode(hit[2]), float(hit[3])
        job = _job_fields(g, record.queue, record.tenant, record.attempts, record.job)
        reasons = [Reason("backoff", f"it waits for its retry backoff until {g.at(due)}: attempt {record.attempts} of "
                                     f"{g.settings.max_attempts} failed (leases.retry_backoff, doubled per attempt, "
                                     "at most leases.retry_backoff_max); then it goes to the head of its tenant's "
                                     "sub-queue", {"until": due / 1000, "attempts": record.attempts})]
        more, place, estimate = _standing(g, record.queue, record.tenant, 0)
        return JobExplanation(job_id, g.name, "delayed",
                              f"job {job_id} waits to retry until {g.at(due)}, class {record.queue}, tenant "
                              f"{record.tenant}", job, {"due": due / 1000}, tuple(reasons + more), place, estimate,
                              self.result)

    def queued(self, job_id: str, tenant: str | None, classes: Sequence[str]) -> JobExplanation | None:
        for queue in classes:
            batch: list[tuple[str, str]] = []
            for t in self._tenants(queue, tenant):
                if self.stopped or self.subqueues >= self.max_keys:
                    self.stopped = True
                    break
                self.subqueues += 1
                batch.append((queue, t))
                if len(batch) == CALL_KEYS:
                    if (found := self._in(job_id, batch)) is not None:
                        return found
                    batch = []
            if batch and (found := self._in(job_id, batch)) is not None:
                return found
            if self.stopped:
                return None
        return None

    def _tenants(self, queue: str, tenant: str | None) -> Iterator[str]:
        """The tenants with jobs queued in ``queue`` (ZSCAN of its backlog set), or ``tenant``."""
        if tenant is not None:
            yield tenant
            return
        with redis_errors(self.g.client):
            for member, _ in self.g.client.zscan_iter(self.g.class_key(queue, "backlog"), count=500):
                yield decoded(member)

    def _in(self, job_id: str, batch: Sequence[tuple[str, str]]) -> JobExplanation | None:
        g = self.g
        hit = self._find([g.keys.tenant_queue(q, t) for q, t in batch], 0, "list")
        if hit is None:
            return None
        (queue, tenant), ahead, env = batch[hit[0]], hit[1], Envelope.decode(hit[2])
        back = g.read({"returned": lambda p: p.zscore(g.keys.returned, str(env.id))})["returned"]
        details: dict[str, Any] = {"jobs_ahead": ahead}
        summary = f"job {job_id} is queued in {queue}, tenant {tenant}, with {_n(ahead, 'job')} of its tenant's before it"
        if back is not None:
            details["lease_taken_back_at"] = float(back) / 1000
            summary += f"; its last lease was taken back at {g.at(float(back))} (it expired, or its worker was lost)"
        reasons, place, estimate = _standing(g, queue, tenant, ahead)
        return JobExplanation(job_id, g.name, "queued", summary, _job_fields(g, queue, tenant, env.attempts, env),
                              details, tuple(reasons), place, estimate, self.result)

    def dead(self, job_id: str) -> JobExplanation | None:
        hit = self._find([self.g.keys.dead], DEAD_SKIP, "list")
        if hit is None:
            return None
        g, dead = self.g, DeadLetter.decode(hit[2])
        return JobExplanation(job_id, g.name, "dead",
                              f"job {job_id} is dead-lettered since {g.at(dead.dead_ms)} after {dead.attempts} "
                              f"attempts: {dead.error}; `fairctl dead requeue {job_id}` runs it again",
                              _job_fields(g, dead.queue, dead.tenant, dead.attempts, dead.job),
                              {"dead_at": dead.dead_ms / 1000, "error": dead.error}, search=self.result)


# ------------------------------------------------------------------ why a tenant's jobs wait


def _field(tenants: TenantsConfig, tier: str, name: str, tenant: str) -> str:
    """The config field that sets the limit ``name`` of ``tenant`` as ``tier``."""
    own = tenants.overrides.get(tenant)
    if own is not None and getattr(own, name) is not None:
        return f"tenants.overrides.{tenant}.{name}"
    return tenants.limit_field(tier, name)


@dataclass(frozen=True)
class _Member:
    """What holds a tenant, or its account, to its dispatch limits (0: none)."""

    who: str
    prefix: str  # '' for a tenant, 'account_' for an account (the reason codes' and stats' prefix)
    cap: int
    cap_field: str
    pace_us: int
    burst: int
    rate_field: str
    burst_field: str


def _members(g: _Group, tenant: str, tier: str) -> list[tuple[str, _Member]]:
    """The tenant's and its account's dispatch limits, by the member Redis counts them under."""
    s, tenants = g.settings, g.config.tenants
    tier = tier if tier in s.cap else s.default_tier
    out = []
    if s.has_cap or s.has_pace:
        out.append((tenant, _Member(
            f"tenant {tenant}", "", s.limit_of(s.tenant_cap, s.cap, tenant, tier),
            _field(tenants, tier, "max_in_flight", tenant),
            s.limit_of(s.tenant_pace_us, s.pace_us, tenant, tier),
            s.limit_of(s.tenant_burst, s.burst, tenant, tier),
            _field(tenants, tier, "dispatch_rate", tenant), _field(tenants, tier, "dispatch_burst", tenant))))
    if s.account_sep and (s.account_cap or s.account_pace_us):
        account = account_of(tenant, s.account_sep)
        out.append((ACCOUNT_MARK + account, _Member(
            f"account {account}", "account_", s.account_cap, "tenants.account_max_in_flight", s.account_pace_us,
            s.account_burst, "tenants.account_dispatch_rate", "tenants.dispatch_burst")))
    return out


def _held(g: _Group, queue: str, m: _Member, running: int, tat_us: float | None, due: float | None) -> Reason | None:
    """Why ``m`` may start no job of ``queue`` now (its cap, then its rate), as the script's
    ``headroom`` decides at its next visit, and whether it is held out of the order already."""
    if m.cap > 0 and (running >= m.cap or due == math.inf):
        parked = "it is held out of" if due == math.inf else "the next pop to reach it holds it out of"
        return Reason(m.prefix + "cap", f"{m.who} is at its cap: {running} of {m.cap} running, all classes together "
                                        f"({m.cap_field} = {m.cap}); {parked} {queue}'s fair order until one of its "
                                        "jobs settles",
                      {"running": running, "limit": m.cap, "field": m.cap_field, "held": due == math.inf})
    if m.pace_us > 0:
        tokens, _, next_ms = paced(g.now_ms, tat_us, m.pace_us, m.burst)
        if tokens < 1:
            start = max(next_ms, due if due is not None and due != math.inf else 0)
            rate = 1_000_000 / m.pace_us
            parked = "it is held out of" if due is not None else "the next pop to reach it holds it out of"
            return Reason(m.prefix + "rate", f"{m.who} is out of its dispatch rate: next start at {g.at(start)}; rate "
                                             f"{rate:g}/s ({m.rate_field}), burst {m.burst} ({m.burst_field}); {parked} "
                                             f"{queue}'s fair order until then",
                          {"next_start": start / 1000, "rate": rate, "burst": m.burst, "field": m.rate_field,
                           "burst_field": m.burst_field, "held": due is not None})
    return None


def _standing(g: _Group, queue: str, tenant: str, ahead: int | None) -> tuple[list[Reason], Place | None,
                                                                               Estimate | None]:
    """Why the jobs of ``tenant`` in ``queue`` wait (the reasons that hold them first, then their
    turn), its party's place in the fair order, and, for a job with ``ahead`` of its tenant's jobs
    before it, an estimate of its wait."""
    s, k = g.settings, g.keys
    party = account_of(tenant, s.account_sep or None)
    account = ACCOUNT_MARK + party if s.account_sep else None
    bucket = g.now_ms // s.window_ms
    stats = [f"depth{SEP}{queue}", f"processed{SEP}{queue}", f"worktime{SEP}{queue}", "slots",
             *(f"inflight{SEP}{c}" for c in s.classes)]
    members = [m for m in (tenant, account) if m is not None]
    got = g.read({
        "paused": lambda p: p.sismember(k.paused, queue),
        "stats": lambda p: p.hmget(k.stats, stats),
        "tier": lambda p: p.hget(g.class_key(queue, "cost"), party),
        "live": lambda p: p.zcount(k.workers, f"({g.now_ms}", "+inf"),
        "registered": lambda p: p.zrevrange(k.workers, 0, 0, withscores=True),
        "held": lambda p: p.zmscore(k.held, [queue + SEP + m for m in members]),
        "running": lambda p: p.zmscore(k.running, members),
        "pace": lambda p: p.zmscore(k.pace, members),
        "rank": lambda p: p.zrank(g.class_key(queue, "tags"), party),
        "parties": lambda p: p.zcard(g.class_key(queue, "tags")),
        "queued": lambda p: p.zscore(g.class_key(queue, "backlog"), tenant),
        "now": lambda p: p.get(g.class_key(queue, "served_total") + str(bucket)),
        "before": lambda p: p.get(g.class_key(queue, "served_total") + str(bucket - 1)),
    } | ({"inner": _command("zrank", k.class_key(queue, CLASS_PARTS["account"] + party), tenant)}
         if s.account_sep else {}))
    stat = dict(zip(stats, (_int(v) for v in got["stats"])))
    reasons: list[Reason] = []
    if queue not in s.classes:
        reasons.append(Reason("removed", f"class {queue} is no longer configured: its jobs wait to be moved to "
                                         f"{s.moved.get(queue, 'the class a config apply names (--move)')}",
                              {"moved_to": s.moved.get(queue)}))
    if got["paused"]:
        reasons.append(Reason("paused", f"class {queue} is paused: no worker takes its jobs until `fairctl resume "
                                        f"{queue}`", {"class": queue}))
    tier = decoded(got["tier"]) if got["tier"] is not None else s.default_tier
    by_member = {m: (_int(run), _num(tat), _num(due))
                 for m, run, tat, due in zip(members, got["running"], got["pace"], got["held"])}
    for member, limits in _members(g, tenant, tier):
        if (held := _held(g, queue, limits, *by_member[member])) is not None:
            reasons.append(held)
    reasons += _fleet(g, queue, stat, int(got["live"]), got["registered"])
    queued = _int(got["queued"])
    place = _place(g, queue, party, tenant, got["rank"], int(got["parties"]), got.get("inner"), ahead, queued)
    estimate = None
    if place.in_order and place.parties_ahead is not None:
        estimate = _estimate(g, queue, place, ahead or 0, stat, _int(got["now"]), _int(got["before"]))
    if not reasons and place.in_order:
        reasons.append(Reason("turn", f"it waits its turn in {queue}'s fair order: {place.text}"
                                      + (f"; {estimate.text}" if estimate else ""),
                              {"parties_ahead": place.parties_ahead, "jobs_ahead": ahead}))
    return reasons, place, estimate


def _fleet(g: _Group, queue: str, stat: Mapping[str, int], live: int, last: Sequence[Any]) -> list[Reason]:
    """The fleet's part: no live worker, a reservation of another class, or every slot busy."""
    s = g.settings
    out = []
    if live == 0:
        if last:
            lapsed = f"{g.name} has registrations, the latest lapsed at {g.at(float(last[0][1]))}"
        else:
            lapsed = f"no worker ever registered with {g.name} (or its registration was removed)"
        if g.sharded and g.index != 0:
            lapsed += "; a worker registers on a shard at its first pop there and while the shard holds jobs"
        out.append(Reason("no_worker", f"no live worker registered: {lapsed}. Workers record their slots and when "
                                       "their registration lapses, not the classes they serve: start `fairctl "
                                       f"worker` with {queue} among its classes", {"live_workers": 0}))
    slots = stat["slots"]
    if slots <= 0 or queue not in s.classes:
        return out
    i = s.classes.index(queue)
    inflight = [stat[f"inflight{SEP}{c}"] for c in s.classes]
    free = slots - sum(inflight)
    kept = {c: (s.reserved[j], inflight[j]) for j, c in enumerate(s.classes) if j != i and s.reserved[j] > inflight[j]}
    held = sum(reserved - running for reserved, running in kept.values())
    if s.has_reserved and free >= 1 and free - held < 1:
        which = ", ".join(f"{c} (reserved_slots {reserved}, {running} running)" for c, (reserved, running) in kept.items())
        out.append(Reason("reservation", f"{queue} is held back for reservations: of the fleet's {slots} registered "
                                         f"slots {sum(inflight)} hold jobs, and the {free} free are kept for {which}. "
                                         f"A worker serving those classes too holds them back; one serving only "
                                         f"{queue} does not",
                          {"slots": slots, "inflight": sum(inflight), "free": free,
                           "kept": {c: r - n for c, (r, n) in kept.items()}}))
    elif free < 1:
        out.append(Reason("busy", f"every one of the fleet's {slots} registered worker slots holds a job "
                                  f"({sum(inflight)} in flight in all classes): it waits for a slot to free",
                          {"slots": slots, "inflight": sum(inflight)}))
    return out


def _place(g: _Group, queue: str, party: str, tenant: str, rank: Any, parties: int, inner: Any, ahead: int | None,
           queued: int) -> Place:
    keys_ahead = None if not g.settings.account_sep or inner is None else int(inner)
    if rank is None:
        text = (f"{party} is not in {queue}'s fair order now" if queued == 0 and ahead is None else
                f"{party} is out of {queue}'s fair order while held ({_n(parties, 'party')} in it)")
        return Place(party, False, None, parties, keys_ahead, ahead, queued, text)
    text = f"{party} is {int(rank) + 1} of {_n(parties, 'party')} by finish tag ({int(rank)} ahead)"
    if keys_ahead:
        text += f", and tenant {tenant} has {keys_ahead} of its account's tenants before it"
    if ahead is not None:
        text += (f"; the job is the head of its tenant's {_n(queued, 'queued job')}" if ahead == 0 else
                 f"; the job has {_n(ahead, 'job')} of its tenant's {queued} queued before it")
    return Place(party, True, int(rank), parties, keys_ahead, ahead, queued, text)


def _estimate(g: _Group, queue: str, place: Place, ahead: int, stat: Mapping[str, int], now_total: int,
              before_total: int) -> Estimate:
    """The class's jobs before the job, if each party takes a full batch a visit (tiers and a
    party's own jobs running out make it fewer), over the class's service in the last
    ``exporter.window`` (the counters a worker's ack writes): a rough figure, stated as one."""
    s = g.settings
    batch, others = s.batch, max(0, place.parties - 1)
    rounds = (place.keys_ahead or 0) + ahead // batch  # its party's visits before the job's
    before = (place.parties_ahead or 0) * batch + rounds * others * batch + rounds * batch + ahead % batch
    before = max(0, min(before, stat[f"depth{SEP}{queue}"]))  # no more than the class has queued
    basis = (f"{_n(place.parties_ahead or 0, 'party')} ahead x batch {batch} (tenants.batch), {_n(ahead, 'job')} of "
             "its tenant's own before it, each visit a full batch")
    window_s = s.window_ms / 1000
    served = (now_total + before_total * window_weight(g.now_ms, s.window_ms)) / window_s
    over = f"over the last {format_duration(window_s)}, exporter.window"
    if s.runtime:
        processed, worktime = stat[f"processed{SEP}{queue}"], stat[f"worktime{SEP}{queue}"]
        mean_us = worktime / processed if processed and worktime else None
        rate = served / mean_us if mean_us else None
        how = (f"the class's work served {over}, at its mean job's {human(mean_us / 1e6)} (worktime / processed)"
               if mean_us else "")
    else:
        rate, how = served, f"the class's jobs processed {over}"
    if not rate:
        return Estimate(before, None, None, basis, f"about {before} jobs of {queue} go before it ({basis}); no job of "
                                                   f"{queue} was processed {over}: no rate to estimate its wait from")
    seconds = before / rate
    return Estimate(before, rate, seconds, basis,
                    f"about {before} jobs of {queue} go before it ({basis}); at {rate:.3g} jobs/s ({how}) it waits "
                    f"about {human(seconds)}")


# ------------------------------------------------------------------ a tenant


def explain_tenant(queue: Queue, tenant: str, *, classes: Sequence[str] | None = None,
                   now_ms: int | None = None) -> TenantExplanation:
    """Where ``tenant`` stands in every group and class (those given): its queued and leased jobs,
    what holds them and its place in the fair order, with its limits and the fields that set them.
    InvalidJob naming ``tenant`` (or ``class``) for a bad one."""
    check_tenant(tenant, queue.config)
    rows: list[TenantClass] = []
    running, tier, first = 0, None, None
    for index in range(len(queue.groups())):
        g = _open(queue, index, now_ms)
        first = g if first is None else first
        wanted = _classes(g, classes)
        party = account_of(tenant, g.settings.account_sep or None)
        got = g.read({(part, c): _command("zscore", g.class_key(c, part), tenant)
                      for c in wanted for part in ("backlog", "inflight", "heads")}
                     | {("cost", c): _command("hget", g.class_key(c, "cost"), party) for c in wanted})
        for c in wanted:
            queued, inflight, head = _int(got["backlog", c]), _int(got["inflight", c]), got["heads", c]
            running += inflight
            if tier is None and got["cost", c] is not None:
                tier = decoded(got["cost", c])
            if not queued and not inflight:
                continue
            if not queued:
                rows.append(TenantClass(g.name, c, 0, inflight, None, (), None, None))
                continue
            reasons, place, estimate = _standing(g, c, tenant, 0)
            rows.append(TenantClass(g.name, c, queued, inflight, None if head is None else int(float(head)),
                                    tuple(reasons), place, estimate))
    assert first is not None  # a queue has at least one group
    tier = tier or first.settings.default_tier
    sep = first.settings.account_sep or None
    return TenantExplanation(tenant, account_of(tenant, sep) if sep else None, tier, running,
                             tuple(_limits(first, tenant, tier)), tuple(rows))


def _limits(g: _Group, tenant: str, tier: str) -> Iterator[Limit]:
    """The tenant's limits as its tier and overrides set them (admission ones too), each with the
    config field that sets it."""
    t = g.config.tenants
    lookup = tier if tier in t.tiers else t.default_tier
    for name, unit in (("max_in_flight", "{} running at once, all classes"), ("dispatch_rate", "{} started a second"),
                       ("dispatch_burst", "{} started at once"), ("max_queued", "{} queued"),
                       ("max_rate", "{} accepted a second")):
        value = t.limit_for(lookup, name, tenant)
        where = _field(t, lookup, name, tenant) if name in ("max_in_flight", "dispatch_rate", "dispatch_burst") \
            else t.limit_field(lookup, name)
        yield Limit(name, value, where, _limit_text(value, unit))
    if g.settings.account_sep:
        for name, unit in (("account_max_in_flight", "{} running at once"), ("account_dispatch_rate", "{} started a second"),
                           ("account_max_queued", "{} queued"), ("account_max_rate", "{} accepted a second")):
            value = t.limit_for(lookup, name)
            yield Limit(name, value, f"tenants.{name}", _limit_text(value or None, unit + " for its account"))


def _limit_text(value: float | None, unit: str) -> str:
    """``2 jobs running at once``, ``1 job started a second``; ``none`` for no limit."""
    return "none" if value is None else f"{value:g} " + unit.format("job" if value == 1 else "jobs")
