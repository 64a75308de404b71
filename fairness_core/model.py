"""The reference model: the scheduler's policy in pure Python, step for step the same as the Lua.

The simulator runs on it, so a simulation predicts what production would do. A differential test
drives this model and the Lua scheduler with the same operation sequences and compares every pop
and the whole state; any divergence is a bug in one of them. Time is passed in explicitly (ms).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Container, Mapping, Sequence

from .accounts import account_of
from .admission import NOWHERE, Elsewhere
from .classification import classify
from .config import Config
from .config_store import NO_MOVES, ConfigRefused, Moves, Names
from .jobs import (
    SEP,
    BudgetRejected,
    DeadLetter,
    DeadOutcome,
    Enqueued,
    Envelope,
    Finished,
    InvalidJob,
    Lease,
    Popped,
    Record,
    TenantLimitReached,
    check_job_id,
    check_key,
    check_task,
    check_tenant,
    check_tier,
    encode_payload,
    named,
    one_line,
    runtime_us,
    settled,
)
from .keys import ACCOUNT_MARK
from .settings import (
    REAP_GAP_MS,
    RETURNED_KEEP_MS,
    SWEEP_BATCH,
    default_tier_left,
    derive,
    paced,
    rebases_tags,
    recorded_cost,
    recharges,
    regroups,
)
from .snapshot import RawClass, Snapshot, build_snapshot
from .zset import ZSet


@dataclass
class _Class:
    queues: dict[str, deque[Envelope]] = field(default_factory=dict)
    tags: ZSet = field(default_factory=ZSet)  # party (the tenant, or its account) -> tag
    accounts: dict[str, ZSet] = field(default_factory=dict)  # account -> its queued tenants' tags among them
    heads: ZSet = field(default_factory=ZSet)
    backlog: ZSet = field(default_factory=ZSet)
    account_backlog: ZSet = field(default_factory=ZSet)  # account -> queued jobs (with accounts)
    cost: dict[str, str] = field(default_factory=dict)  # party -> tier
    key_tier: dict[str, str] = field(default_factory=dict)  # queued key off the default tier -> tier (with accounts)
    account_tiers: dict[str, dict[str, int]] = field(default_factory=dict)  # account -> tier -> its queued keys of it
    vt: float = 0
    inflight: ZSet = field(default_factory=ZSet)
    served: dict[int, ZSet] = field(default_factory=dict)
    served_total: dict[int, int] = field(default_factory=dict)
    account_served: dict[int, ZSet] = field(default_factory=dict)  # bucket -> account -> service (with accounts)
    estimates: dict[str, int] = field(default_factory=dict)  # task -> runtime estimate (µs)
    tenant_estimates: dict[str, dict[str, int]] = field(default_factory=dict)  # tenant -> task -> µs


class Model:
    """Same operations as :class:`fairness_core.scheduler.Scheduler` (the driver of one queue group), each taking ``now_ms`` first. Every
    value derived from the config comes from ``settings``, the same object the script is built from.
    ``incarnation``: the token of the group's state its leases carry, as Redis records when the
    group was created ('' none); a lease carrying another is refused, as of a state since lost."""

    def __init__(self, config: Config, *, incarnation: str = "") -> None:
        self.incarnation = incarnation
        self._use(config, NO_MOVES)
        self.stats: dict[str, int] = {}
        self.swrr: dict[str, float] = {}
        self.paused: set[str] = set()
        self.arrivals: dict[str, float] = {}
        self.rates: dict[int, dict[str, int]] = {}  # rate-window bucket -> tenant (or account field) -> accepted jobs
        self.seq = 0
        self.classes: dict[str, _Class] = {name: _Class() for name in self.names}
        self.leases = ZSet()
        self.leased: dict[str, Record] = {}
        self.delayed = ZSet()
        self.delayed_items: dict[str, Record] = {}
        self.dead: list[str] = []
        self.workers = ZSet()
        self.worker_slots: dict[str, int] = {}
        self.owned: dict[str, dict[str, int]] = {}  # worker id -> job id -> attempts of the leases popped for it
        self.returned = ZSet()  # job id -> when its lease was taken back from its worker
        self.reaped: int | None = None  # when a worker last reaped
        self.charged: dict[str, int] = {}  # job id -> µs its pop charged (charge: runtime)
        self.keyed: dict[str, tuple[int, Enqueued]] = {}  # a submit's key -> until when (ms) it names which job
        # Dispatch limits, as the Lua's HK keys: leases per member, rates' arrival times (µs),
        # holds (class SEP member -> until when, inf at a cap), and the classes held at a cap.
        self.running = ZSet()
        self.pace = ZSet()
        self.held = ZSet()
        self.capped: dict[str, str] = {}

    def _use(self, config: Config, moves: Moves, names: Names | None = None) -> None:
        self.config, self.moves = config, moves
        self.settings = derive(config, moves, names)
        self.names = self.settings.classes

    def _cls(self, queue: str) -> _Class:
        """A class's structures; a class no config names any more keeps its own until emptied.
        (Not ``setdefault``: building a spare _Class, five sorted sets, on every call was a
        quarter of a simulation's time.)"""
        cls = self.classes.get(queue)
        if cls is None:
            cls = self.classes[queue] = _Class()
        return cls

    # ------------------------------------------------------------------ the applied config

    def apply(self, now: int, config: Config, *, moves: Moves | Mapping[str, str] = NO_MOVES) -> None:
        """Make ``config`` the applied config, as ``fairctl config apply`` does in Redis: new
        weights, policy, classes, tiers and rules hold from the next operation. Smooth weighted
        round-robin restarts from zero (no catch-up burst); when the charge basis changed, every
        class's tenant tags and virtual time restart from zero (tags change unit); new tier costs
        keep the tags and charge from each party's next visit. ``moves`` maps a removed class to a configured one (or is a whole
        :class:`~fairness_core.config_store.Moves`); ConfigRefused, changing nothing, when a removed
        class still holds jobs or a removed tier is still a queued tenant's with no move. The jobs
        of moved classes move on :meth:`move` calls."""
        given = moves if isinstance(moves, Moves) else Moves(classes=dict(moves))
        every = self.moves.carried(config).merged(given)
        every.check(config)
        given.check_paused(self.paused)
        old = (self.config, self.moves, Names(self.settings.names))
        before = self.settings
        self._use(config, every, Names(before.names).covering(config))
        if self.settings.fingerprint == before.fingerprint:  # applied already: as the Lua, nothing to do
            return
        rebase = rebases_tags(before, self.settings)
        regroup = regroups(before, self.settings)
        implied = default_tier_left(before, self.settings)
        others, held = self._unconfigured()
        refused = {c: held[c] for c in others if held[c] > 0 and c not in every.classes}
        held_tiers = {tier for c in (*self.names, *others) for tier in (*self._cls(c).cost.values(),
                                                                        *self._cls(c).key_tier.values())}
        if implied and any(len(self._cls(c).tags) > len(self._cls(c).cost)
                           or self.settings.account_sep and len(self._cls(c).backlog) > len(self._cls(c).key_tier)
                           for c in (*self.names, *others)):
            held_tiers.add(implied)
        tiers = sorted(tier for tier in held_tiers if tier not in self.settings.costs
                       and tier not in self.settings.tier_moved and recorded_cost(tier) is None)
        if refused or tiers:
            self._use(*old)
            raise ConfigRefused(refused, tuple(tiers))
        if implied:
            for c in (*self.names, *others):
                cls = self._cls(c)
                for party, _ in cls.tags.items():
                    cls.cost.setdefault(party, implied)
                if self.settings.account_sep and not regroup:
                    for tenant, _ in cls.backlog.items():
                        cls.key_tier.setdefault(tenant, implied)
        self.swrr = {}
        self.charged = {}
        if not self.settings.runtime:
            for c in (*self.names, *others):
                self._cls(c).estimates.clear()
                self._cls(c).tenant_estimates.clear()
        # As the Lua: every hold ends and its member rejoins (held again at its next visit if still
        # over), and the leases a cap counts are counted again.
        holds = [(key.split(SEP, 1), due) for key, due in self.held.head(len(self.held))]
        for (queue, member), due in holds:
            self._count_hold(queue, member, due, -1)
        self.held, self.capped, self.running = ZSet(), {}, ZSet()
        for (queue, member), _ in holds:
            self._rejoin(queue, member)
        if not (self.settings.has_pace or self.settings.account_pace_us):
            self.pace = ZSet()
        if self.settings.has_cap or (self.settings.account_sep and self.settings.account_cap):
            for c in (*self.names, *others):
                for tenant, n in self._cls(c).inflight.head(len(self._cls(c).inflight)):
                    self._leases_counted(tenant, int(n))
        if regroup:
            for c in (*self.names, *others):
                self._regroup(c)
        elif rebase:
            for c in (*self.names, *others):
                cls = self._cls(c)
                for party, _ in list(cls.tags.items()):
                    cls.tags.add(party, 0)
                for members in cls.accounts.values():
                    for tenant, _ in list(members.items()):
                        members.add(tenant, 0)
                cls.vt = 0
        if self.settings.account_sep and not regroup and recharges(before, self.settings):
            for c in (*self.names, *others):  # new costs may order the tiers anew
                cls = self._cls(c)
                for account in cls.account_tiers:
                    self._charge_top(c, cls, account)

    def _regroup(self, queue: str) -> None:
        """As the Lua's ``regroup``: the class's parties rebuilt from its queued tenants."""
        cls = self._cls(queue)
        for tier in {*cls.cost.values(), self.settings.default_tier}:
            self.stats[f"tenants{SEP}{queue}{SEP}{tier}"] = 0
        cls.tags, cls.accounts, cls.cost, cls.vt, cls.account_backlog = ZSet(), {}, {}, 0, ZSet()
        cls.key_tier, cls.account_tiers = {}, {}
        for tenant, _ in cls.backlog.head(len(cls.backlog)):
            jobs = cls.queues[tenant]
            self._activate(queue, cls, tenant, self._named(jobs[-1].tier), jobs[0].enqueued_ms)
            self._count_account(cls, tenant, len(jobs))

    def move(self, now: int, limit: int = 1000) -> int:
        """Move up to ``limit`` queued jobs of moved classes into their targets, as the Lua's
        ``move``: oldest tenant first, each tenant's jobs from its tail, each keeping its enqueue
        time. How many moved (0: done)."""
        moved = 0
        for old, new in self.settings.moves:
            cls = self._cls(old)
            while moved < limit and cls.heads.first() is not None:
                tenant = cls.heads.first()[0]  # type: ignore[index]
                items, left = self._take(old, tenant, limit - moved, from_tail=True)
                if left == 0 and self.settings.runtime:
                    self._forget(old, tenant)
                for job in items:
                    self._push_head(new, tenant, [job])
                moved += len(items)
            moved += self._move_delayed(old, new, limit - moved)
        return moved

    def _move_delayed(self, old: str, new: str, limit: int) -> int:
        """As the Lua's ``move_delayed``: up to ``limit`` retries of ``old`` waiting for their
        backoff, soonest due first, become ``new``'s, each keeping its due time."""
        if limit <= 0 or self.stats.get(f"delayed{SEP}{old}", 0) <= 0:
            return 0
        found = [rec for rec in self.delayed.up_to(math.inf, len(self.delayed))
                 if self.delayed_items[rec].queue == old][:limit]
        for rec in found:
            due, entry = self.delayed.score(rec), replace(self.delayed_items.pop(rec), queue=new)
            assert due is not None  # found in the set just now
            self.delayed.remove(rec)
            self.delayed.add(entry.encode(), due)
            self.delayed_items[entry.encode()] = entry
            self._stat("delayed", old, -1)
            self._stat("delayed", new, 1)
        return len(found)

    def _unconfigured(self) -> tuple[list[str], dict[str, int]]:
        """As the Lua's ``unconfigured``: classes the counters know that the config does not name
        (sorted), and the jobs each holds (queued, leased or waiting to retry)."""
        held: dict[str, int] = {}
        for key, value in self.stats.items():
            name, _, queue = key.partition(SEP)
            if name in ("depth", "inflight", "delayed") and queue not in self.names:
                held[queue] = held.get(queue, 0) + value
        return sorted(held), held

    def _pool_index(self, name: str) -> int:
        """The class a pool limited to ``name`` serves, as the Scheduler's: a moved class's target."""
        return self.config.class_index(self.settings.moved.get(name, name))

    def _named(self, field: str) -> str:
        """As the Lua's ``named``: the name a stored envelope field holds."""
        return named(field, self.settings.names)

    # ------------------------------------------------------------------ shared steps

    def _stat(self, name: str, queue: str, delta: int) -> None:
        key = f"{name}{SEP}{queue}"
        self.stats[key] = self.stats.get(key, 0) + delta

    def _count_tier(self, queue: str, tier: str, delta: int) -> None:
        """As the Lua's ``count_tier``: the class's queued tenants of ``tier``, never below 0."""
        key = f"tenants{SEP}{queue}{SEP}{tier}"
        self.stats[key] = max(0, self.stats.get(key, 0) + delta)

    def _party(self, tenant: str) -> str:
        """As the Lua's ``party_of``: whom fair queuing counts ``tenant``'s work for."""
        return account_of(tenant, self.settings.account_sep or None)

    def _count_account(self, cls: _Class, tenant: str, delta: int) -> None:
        """As the Lua's ``count_account``: an account's jobs queued in the class (with accounts)."""
        if self.settings.account_sep:
            account = self._party(tenant)
            if cls.account_backlog.incr(account, delta) <= 0:
                cls.account_backlog.remove(account)

    def _set_tier(self, queue: str, cls: _Class, party: str, tier: str) -> None:
        """As the Lua's ``charge_as``: the party is charged as ``tier``; only the parties off the
        default tier have a cost entry."""
        was = cls.cost.get(party, self.settings.default_tier)
        if tier != was:
            if tier == self.settings.default_tier:
                cls.cost.pop(party, None)
            else:
                cls.cost[party] = tier
            self._count_tier(queue, was, -1)
            self._count_tier(queue, tier, 1)

    def _charge_top(self, queue: str, cls: _Class, account: str) -> None:
        """As the Lua's ``charge_top``: the account is charged at the highest tier of its queued
        keys (kept as it is while none is counted)."""
        counts = cls.account_tiers.get(account)
        if counts:
            top = next(iter(counts))
            for tier in counts:
                if self.settings.outranks(tier, top):
                    top = tier
            self._set_tier(queue, cls, account, top)

    def _count_key(self, cls: _Class, account: str, tier: str, delta: int) -> None:
        """As the Lua's ``count_key``: the account's queued keys of ``tier``, none kept at 0."""
        counts = cls.account_tiers.setdefault(account, {})
        counts[tier] = counts.get(tier, 0) + delta
        if counts[tier] <= 0:
            del counts[tier]

    def _key_tier(self, queue: str, cls: _Class, tenant: str, tier: str) -> None:
        """As the Lua's ``set_tier`` with accounts: a queued key is of its latest job's tier, and
        its account is charged at the highest of its keys'."""
        was = cls.key_tier.get(tenant, self.settings.default_tier)
        if tier != was:
            if tier == self.settings.default_tier:
                del cls.key_tier[tenant]
            else:
                cls.key_tier[tenant] = tier
            account = self._party(tenant)
            self._count_key(cls, account, was, -1)
            self._count_key(cls, account, tier, 1)
            self._charge_top(queue, cls, account)

    def _tier(self, cls: _Class, party: str) -> str:
        """The tier a queued party is charged as: its cost entry, else the default tier."""
        return cls.cost.get(party, self.settings.default_tier)

    # ------------------------------------------------------------------ dispatch limits (holds)

    def _held_in(self, queue: str, member: str) -> float | None:
        """As the Lua's ``held_in``: until when ``member`` is held in ``queue`` (inf at its cap)."""
        return self.held.score(f"{queue}{SEP}{member}")

    def _member_backlog(self, queue: str, member: str) -> int:
        cls = self._cls(queue)
        if member.startswith(ACCOUNT_MARK):
            return int(cls.account_backlog.score(member[1:]) or 0)
        return int(cls.backlog.score(member) or 0)

    def _count_hold(self, queue: str, member: str, due: float, sign: int) -> None:
        why = f"{queue}{SEP}{hold_reason(member, due)}"
        self._stat("held", why, sign)
        self._stat("heldjobs", why, sign * self._member_backlog(queue, member))

    def _held_jobs(self, queue: str, tenant: str, n: int, fresh: bool) -> None:
        """As the Lua's ``held_jobs`` for n jobs pushed one by one (negative: taken): the first
        job of a ``fresh`` tenant cannot be held by the tenant's own hold."""
        s = self.settings
        if (s.has_cap or s.has_pace) and (due := self._held_in(queue, tenant)) is not None:
            self._stat("heldjobs", f"{queue}{SEP}{hold_reason(tenant, due)}", n - (1 if fresh and n > 0 else 0))
        if s.account_sep and (s.account_cap or s.account_pace_us):
            member = ACCOUNT_MARK + self._party(tenant)
            if (due := self._held_in(queue, member)) is not None:
                self._stat("heldjobs", f"{queue}{SEP}{hold_reason(member, due)}", n)

    def _headroom(self, now: int, member: str, cap: int, pace: int, burst: int) -> tuple[float, float | None, float | None]:
        """As the Lua's ``headroom``: jobs ``member`` may start now, else until when it is held;
        and the rate's arrival time read."""
        room: float = math.inf
        if cap > 0:
            room = cap - (self.running.score(member) or 0)
            if room < 1:
                return 0, math.inf, None
        if pace > 0:
            tokens, tat, due = paced(now, self.pace.score(member), pace, burst)
            if tokens < 1:
                return 0, due, None
            return min(room, tokens), None, tat
        return room, None, None

    def _park(self, queue: str, member: str, due: float) -> None:
        """As the Lua's ``park``."""
        key = f"{queue}{SEP}{member}"
        was = self.held.score(key)
        if was is not None:
            self._count_hold(queue, member, was, -1)
        self.held.add(key, due)
        self._count_hold(queue, member, due, 1)
        if due == math.inf:
            classes = self.capped.get(member)
            if classes is None:
                self.capped[member] = queue
            elif queue not in classes.split(SEP):
                self.capped[member] = classes + SEP + queue
        cls = self._cls(queue)
        if member.startswith(ACCOUNT_MARK):
            cls.tags.remove(member[1:])
        elif self.settings.account_sep:
            account = self._party(member)
            self._leave_account(cls, account, member)
            if account not in cls.accounts:
                cls.tags.remove(account)
        else:
            cls.tags.remove(member)

    def _leave_account(self, cls: _Class, account: str, tenant: str) -> None:
        """ZREM of the tenant from its account's set, which goes when empty."""
        members = cls.accounts.get(account)
        if members is not None:
            members.remove(tenant)
            if not members:
                del cls.accounts[account]

    def _rejoin(self, queue: str, member: str) -> None:
        """As the Lua's ``rejoin``: back in the order at the virtual time, if it has jobs queued."""
        cls = self._cls(queue)
        party = member
        if member.startswith(ACCOUNT_MARK):
            party = member[1:]
            if party not in cls.accounts:
                return
        else:
            if member not in cls.backlog:
                return
            if self.settings.account_sep:
                party = self._party(member)
                members = cls.accounts.get(party)
                first = members.first() if members is not None else None
                if members is None:
                    members = cls.accounts[party] = ZSet()
                members.add(member, first[1] if first is not None else 0, only_new=True)
                if self._held_in(queue, ACCOUNT_MARK + party) is not None:
                    return
        cls.tags.add(party, cls.vt, only_new=True)

    def _unhold(self, queue: str, member: str) -> None:
        due = self._held_in(queue, member)
        if due is None:
            return
        self._count_hold(queue, member, due, -1)
        self.held.remove(f"{queue}{SEP}{member}")
        self._rejoin(queue, member)

    def _count_running(self, member: str, n: int) -> None:
        """As the Lua's ``count_running``."""
        if self.running.incr(member, n) <= 0:
            self.running.remove(member)
        if n < 0:
            classes = self.capped.pop(member, None)
            for queue in (classes or "").split(SEP) if classes else ():
                self._unhold(queue, member)

    def _leases_counted(self, tenant: str, n: int) -> None:
        if self.settings.has_cap:
            self._count_running(tenant, n)
        if self.settings.account_sep and self.settings.account_cap:
            self._count_running(ACCOUNT_MARK + self._party(tenant), n)

    def _release_holds(self, now: int, limit: int) -> None:
        for key in self.held.up_to(now, limit):
            queue, member = key.split(SEP, 1)
            self._unhold(queue, member)

    def _ready_head(self, now: int, queue: str) -> tuple[Any, ...] | None:
        """As the Lua's ``ready_head``: (party, tag, tenant, inner, room, the account's arrival
        time, the tenant's, the tenant's pace), parking the held heads on the way; None when every
        queued party is held."""
        s, cls = self.settings, self._cls(queue)
        while True:
            first = cls.tags.first()
            if first is None:
                return None
            party, tag = first
            tenant: str | None = party
            inner: float | None = None
            room: float = math.inf
            account_tat: float | None = None
            if s.account_sep and (s.account_cap or s.account_pace_us):
                room, due, account_tat = self._headroom(now, ACCOUNT_MARK + party, s.account_cap, s.account_pace_us,
                                                        s.account_burst)
                if room < 1:
                    self._park(queue, ACCOUNT_MARK + party, due)  # type: ignore[arg-type]
                    continue
            if s.account_sep:
                members = cls.accounts.get(party)
                head = members.first() if members else None
                tenant, inner = head if head is not None else (None, None)
            if tenant is None or not (s.has_cap or s.has_pace):
                return party, tag, tenant, inner, room, account_tat, None, 0
            tier = self._tier(cls, party)
            pace = s.limit_of(s.tenant_pace_us, s.pace_us, tenant, tier)
            own, due, tenant_tat = self._headroom(
                now, tenant, s.limit_of(s.tenant_cap, s.cap, tenant, tier), pace,
                s.limit_of(s.tenant_burst, s.burst, tenant, tier))
            if own >= 1:
                return party, tag, tenant, inner, min(room, own), account_tat, tenant_tat, pace
            self._park(queue, tenant, due)  # type: ignore[arg-type]

    def _activate(self, queue: str, cls: _Class, tenant: str, tier: str, enq: int) -> None:
        """As the Lua's ``activate``."""
        cls.heads.add(tenant, enq)
        party = self._party(tenant)
        if self.settings.account_sep:
            if tier != self.settings.default_tier:
                cls.key_tier[tenant] = tier
            self._count_key(cls, party, tier, 1)
            members = cls.accounts.get(party)
            if members is not None:
                members.add(tenant, members.first()[1])  # type: ignore[index]
                self._charge_top(queue, cls, party)
                return
            cls.accounts[party] = members = ZSet()
            members.add(tenant, 0)
            if self.settings.holds and party in cls.account_backlog:  # queued, every key held
                self._charge_top(queue, cls, party)
                if self._held_in(queue, ACCOUNT_MARK + party) is None:
                    cls.tags.add(party, cls.vt, only_new=True)
                return
        cls.tags.add(party, cls.vt)
        if tier != self.settings.default_tier:
            cls.cost[party] = tier
        self._count_tier(queue, tier, 1)

    def _push_tail(self, queue: str, tenant: str, jobs: Sequence[Envelope]) -> None:
        """Append ``jobs`` to the tenant's sub-queue: the same state as appending them one by one
        (bulk, so a burst or a promotion sweep updates the sorted sets once, not per job). A
        removed class's jobs go where the applied config moved it."""
        queue = self.settings.moved.get(queue, queue)
        cls = self._cls(queue)
        q = cls.queues.setdefault(tenant, deque())
        fresh = not q
        if fresh:
            self._activate(queue, cls, tenant, self._named(jobs[0].tier), jobs[0].enqueued_ms)
        q.extend(jobs)
        party, last = self._party(tenant), None
        for job in jobs:  # the party (with accounts, the key) is of its latest job's tier
            if job.tier == last:
                continue  # as the job before it: nothing changes
            last = job.tier
            if self.settings.account_sep:
                self._key_tier(queue, cls, tenant, self._named(last))
            else:
                self._set_tier(queue, cls, party, self._named(last))
        if self.settings.holds:
            self._held_jobs(queue, tenant, len(jobs), fresh)
        cls.backlog.incr(tenant, len(jobs))
        self._count_account(cls, tenant, len(jobs))
        self._stat("depth", queue, len(jobs))

    def _push_head(self, queue: str, tenant: str, jobs: Sequence[Envelope]) -> None:
        """Put ``jobs`` in front of the tenant's sub-queue, in their order: the same state as
        pushing them to the head one by one, last first."""
        queue = self.settings.moved.get(queue, queue)
        cls = self._cls(queue)
        q = cls.queues.setdefault(tenant, deque())
        fresh = not q
        if fresh:
            self._activate(queue, cls, tenant, self._named(jobs[-1].tier), jobs[-1].enqueued_ms)
        cls.heads.add(tenant, min(job.enqueued_ms for job in jobs), only_lower=True)
        if self.settings.holds:
            self._held_jobs(queue, tenant, len(jobs), fresh)
        q.extendleft(reversed(jobs))
        cls.backlog.incr(tenant, len(jobs))
        self._count_account(cls, tenant, len(jobs))
        self._stat("depth", queue, len(jobs))

    def _take(self, queue: str, tenant: str, n: int, *, from_tail: bool = False) -> tuple[list[Envelope], int]:
        """The first ``n`` jobs of the tenant's sub-queue (the last ones, youngest first, with
        ``from_tail``)."""
        cls = self._cls(queue)
        q = cls.queues[tenant]
        items = [q.pop() if from_tail else q.popleft() for _ in range(min(n, len(q)))]
        self._count_account(cls, tenant, -len(items))
        if not q:
            del cls.queues[tenant]
            cls.heads.remove(tenant)
            cls.backlog.remove(tenant)
            party = self._party(tenant)
            gone = True  # the party has no tenant queued in the class any more
            if self.settings.account_sep:
                self._leave_account(cls, party, tenant)
                if party in cls.accounts:
                    gone = False  # the account has other tenants queued
                elif self.settings.holds and party in cls.account_backlog:
                    cls.tags.remove(party)  # and every one of them held: out of the order
                    gone = False
                tier = cls.key_tier.pop(tenant, self.settings.default_tier)
                if gone:
                    cls.account_tiers.pop(party, None)
                else:
                    self._count_key(cls, party, tier, -1)
                    self._charge_top(queue, cls, party)
            if gone:
                cls.tags.remove(party)
                self._count_tier(queue, cls.cost.pop(party, self.settings.default_tier), -1)
        else:
            cls.backlog.incr(tenant, -len(items))
            if not from_tail:
                cls.heads.add(tenant, q[0].enqueued_ms)
        self._stat("depth", queue, -len(items))
        return items, len(q)

    def _dead_letter(self, now: int, entry: Record, error: str) -> None:
        self.dead.append(DeadLetter(entry.queue, entry.tenant, entry.attempts, now, error, entry.job).encode())
        self._stat("dead", entry.queue, 1)
        self._stat("deadlist", entry.queue, 1)

    def _release_delayed(self, now: int, limit: int) -> None:
        for rec in self.delayed.up_to(now, limit):
            self.delayed.remove(rec)
            entry = self.delayed_items.pop(rec)
            self._stat("delayed", entry.queue, -1)
            self._push_head(entry.queue, entry.tenant, [entry.job])

    # ------------------------------------------------------------------ charging by runtime

    def _charge(self, ci: int, tenant: str, items: Sequence[Envelope]) -> int:
        """As the Lua's ``estimates`` and ``record_charges``: each job charged its tenant's
        estimate for its task, else its class's, else the class's seed (at least the minimum),
        recorded by id; the total."""
        s = self.settings
        cls = self._cls(self.names[ci])
        own = cls.tenant_estimates.get(tenant, {})
        work = 0
        for job in items:
            task = self._named(job.task)
            est = own.get(task)
            if est is None:
                est = cls.estimates.get(task)
            charge = max(s.seed_us[ci] if est is None else est, s.min_charge_us)
            self.charged[str(job.id)] = charge
            work += charge
        return work

    def _charge_visit(self, swrr: list[float], elig: Sequence[int], ci: int, total: int, work: int) -> None:
        """As the Lua's ``charge_visit``."""
        for i in elig:
            swrr[i] += (work - 1) * self.settings.weights[i]
        swrr[ci] -= (work - 1) * total

    def _forget(self, queue: str, tenant: str) -> None:
        """As the Lua's ``forget``: a tenant with nothing queued or leased loses its estimates."""
        cls = self._cls(queue)
        if cls.backlog.score(tenant) is None and cls.inflight.score(tenant) is None:
            cls.tenant_estimates.pop(tenant, None)

    def _ran(self, entry: Record, ran: int | None, *, learning: bool) -> int:
        """As the Lua's ``ran_for`` and ``finish_work`` for one settled job that ran ``ran`` µs
        (None: not reported): what it counts as served."""
        s = self.settings
        queue, tenant = entry.queue, entry.tenant
        if ran is not None:
            self._stat("worktime", queue, ran)
        if not s.runtime:
            return 1
        charged = self.charged.get(str(entry.job.id))
        if ran is None:
            return s.min_charge_us if charged is None else charged
        cost = max(ran, s.min_charge_us)
        fix = 0 if charged is None else cost - charged
        cls = self._cls(queue)
        if learning:
            own = cls.tenant_estimates.setdefault(tenant, {})
            task = self._named(entry.job.task)
            own[task] = _learned(own.get(task), ran, s.smoothing)
            cls.estimates[task] = _learned(cls.estimates.get(task), ran, s.smoothing)
        party = self._party(tenant)
        if fix and party in cls.tags:
            cls.tags.add(party, cls.tags.score(party) + fix * self.settings.cost_of(self._tier(cls, party)))  # type: ignore[operator]
            members = cls.accounts.get(party)
            if members is not None and tenant in members:
                members.add(tenant, members.score(tenant) + fix)  # type: ignore[operator]
        if s.policy in ("weighted", "weighted-fair"):
            self._correct_classes(queue, fix)
        return cost

    def _correct_classes(self, queue: str, fix: int) -> None:
        """As the Lua's ``correct_classes`` for one class."""
        weights = self.settings.weights
        swrr = [self.swrr.get(n, 0) for n in self.names]
        if queue in self.names and fix != 0:
            ci = self.names.index(queue)
            total = 0
            for i, name in enumerate(self.names):
                if i == ci or (self.stats.get(f"depth{SEP}{name}", 0) > 0 and name not in self.paused):
                    total += weights[i]
                    swrr[i] += weights[i] * fix
            swrr[ci] -= total * fix
        self.swrr = dict(zip(self.names, swrr))

    # ------------------------------------------------------------------ budget

    def _roll_arrivals(self, now: int) -> int:
        window = self.settings.budget_window_ms
        bucket = math.floor(now / window)
        stored = self.arrivals.get("bucket")
        if stored != bucket:
            for name in ("*", *self.names):
                prev = self.arrivals.get(f"cur{SEP}{name}", 0) if stored == bucket - 1 else 0
                self.arrivals[f"prev{SEP}{name}"] = prev
                self.arrivals[f"cur{SEP}{name}"] = 0
            self.arrivals["bucket"] = bucket
        return now - bucket * window

    def _estimate(self, name: str, offset: int) -> float:
        window = self.settings.budget_window_ms
        prev, cur = self.arrivals.get(f"prev{SEP}{name}", 0), self.arrivals.get(f"cur{SEP}{name}", 0)
        return prev * (window - offset) / window + cur

    def _apply_budget(self, now: int, ci: int, reason: str) -> tuple[int | None, str]:
        s = self.settings
        if not s.has_budget:
            return ci, reason
        offset = self._roll_arrivals(now)
        budget = s.budgets[ci]
        if budget > 0:
            total = self._estimate("*", offset) + 1
            mine = self._estimate(self.names[ci], offset) + 1
            if total >= s.budget_min and mine / total > budget:
                if s.budget_action == "reject":
                    self._stat("rejected", self.names[ci], 1)
                    return None, reason
                self._stat("demoted", self.names[ci], 1)
                ci, reason = ci + 1, s.over_budget_reason
        self._count_arrivals(ci, 1)
        return ci, reason

    def _count_arrivals(self, ci: int, n: int) -> None:
        for name in ("*", self.names[ci]):
            self.arrivals[f"cur{SEP}{name}"] = self.arrivals.get(f"cur{SEP}{name}", 0) + n

    # ------------------------------------------------------------------ operations

    def enqueue(self, now: int, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
                user_waiting: bool = False) -> str:
        return self.submit(now, task, tenant, payload, tier=tier, user_waiting=user_waiting).job_id

    def submit(self, now: int, task: str, tenant: str, payload: Any = None, *, tier: str | None = None,
               user_waiting: bool = False, key: str | None = None, elsewhere: Elsewhere = NOWHERE) -> Enqueued:
        """As the Scheduler's: a ``key`` that names a job accepted within ``scheduler.dedup_window``
        returns that job, counted as deduplicated; an accepted job's key names it from now on."""
        if key is not None:
            self._checked(task, tenant, tier, payload, user_waiting)
            until, first = self.keyed.get(check_key(key), (0, None))
            if first is not None and until > now:
                self._stat("deduplicated", first.queue, 1)
                return first
        queue, reason, _ = self.submit_many(now, task, tenant, 1, payload, tier=tier, user_waiting=user_waiting,
                                            elsewhere=elsewhere)[0]
        job = Enqueued(str(self.seq), queue, reason)
        if key is not None:
            self.keyed[key] = (now + self.settings.dedup_window_ms, job)
        return job

    def submit_many(self, now: int, task: str, tenant: str, count: int, payload: Any = None, *,
                    tier: str | None = None, user_waiting: bool = False,
                    elsewhere: Elsewhere = NOWHERE) -> list[tuple[str, str, int]]:
        """``count`` jobs queued exactly as ``count`` calls of :meth:`submit` at ``now`` would queue
        them (ids ``seq+1 ..``, classes, reasons, budget decisions, tenant-limit refusals and the
        whole state), returned as runs of (class, reason, jobs); TenantLimitReached once the tenant
        is at a limit (every job left counted as refused), BudgetRejected at a rejection. Jobs
        for a class without an arrival budget are queued in one step, so the simulator's
        2.3-million-job burst costs about a second, not a minute. ``elsewhere``: what the tenant's
        limits count on a sharded queue's other shards, as the script adds it."""
        task, tenant, tier, body = self._checked(task, tenant, tier, payload, user_waiting)
        decision = classify(self.config, task, tier=tier, user_waiting=user_waiting)
        wanted = self.config.class_index(decision.queue)
        has_budget = self.settings.has_budget
        s = self.settings
        limit = s.max_queued.get(tier, 0)
        room: float = limit - self._queued(tenant) - elsewhere.queued if limit else math.inf
        account = self._party(tenant)
        account_room: float = (s.account_max_queued - self._queued(account, account=True) - elsewhere.account_queued
                               if s.account_max_queued else math.inf)
        rate_room = self._rate_room(now, tenant, s.rate_allowed.get(tier, 0), elsewhere.rate)
        account_field = ACCOUNT_MARK + account
        account_rate_room = self._rate_room(now, account_field, s.account_rate_allowed, elsewhere.account_rate)
        runs: list[tuple[str, str, int]] = []
        left = count
        while left > 0:
            # Every job left is refused alike: nothing between them makes room, time stands still.
            refused = ("max_queued" if room <= 0 else "account_max_queued" if account_room <= 0
                       else "max_rate" if rate_room <= 0 else "account_max_rate" if account_rate_room <= 0 else None)
            if refused is not None:
                self._stat("refused", decision.queue, left)
                raise TenantLimitReached.at(self.config, tenant, tier, refused)
            if has_budget and self.settings.budgets[wanted] > 0:  # each decision depends on the one before
                n = 1
                ci, reason = self._apply_budget(now, wanted, decision.reason)
                if ci is None:
                    raise BudgetRejected(f"{decision.queue} is over its arrival budget; job for tenant {tenant!r} rejected")
            else:
                n, ci, reason = int(min(left, room, account_room, rate_room, account_rate_room)), wanted, decision.reason
                if has_budget:
                    self._roll_arrivals(now)
                    self._count_arrivals(ci, n)
            queue = self.names[ci]
            first = self.seq + 1
            self.seq += n
            codes = self.settings.codes
            stored = codes.get(tier, tier), codes.get(task, task), codes.get(reason, reason)
            jobs = [Envelope(i, now, 0, *stored, body) for i in range(first, first + n)]
            self._push_tail(queue, tenant, jobs)
            key = f"enq{SEP}{queue}{SEP}{reason}"
            self.stats[key] = self.stats.get(key, 0) + n
            if runs and runs[-1][:2] == (queue, reason):
                runs[-1] = (queue, reason, runs[-1][2] + n)
            else:
                runs.append((queue, reason, n))
            if self.settings.has_rate:
                self._count_rate(now, tenant, n)
                if s.account_rate_allowed:
                    self._count_rate(now, account_field, n)
            left -= n
            room -= n
            account_room -= n
            rate_room -= n
            account_rate_room -= n
        return runs

    def _checked(self, task: str, tenant: str, tier: str | None, payload: Any,
                 user_waiting: bool) -> tuple[str, str, str, str]:
        """A job's task, tenant, tier and encoded payload, each checked as the Scheduler checks them
        before sending anything (InvalidJob names the field)."""
        checked = (check_task(task), check_tenant(tenant, self.config), check_tier(tier, self.config),
                   encode_payload(payload, self.config))
        if not isinstance(user_waiting, bool):
            raise InvalidJob("user_waiting", f"expected true or false, got {user_waiting!r}")
        return checked

    def _queued(self, member: str, *, account: bool = False) -> int:
        """As the Lua's ``queued_in_classes``: a tenant's (an ``account``'s) queued jobs in every
        configured class."""
        return int(sum((cls.account_backlog if account else cls.backlog).score(member) or 0
                       for cls in map(self._cls, self.names)))

    def admission_counts(self, now: int, tenant: str) -> Elsewhere:
        """What this group holds of ``tenant``'s admission counts (its and its account's queued
        jobs, and their rate estimates at ``now``): what a sharded queue reads of the shards an
        enqueue does not go to (:class:`fairness_core.admission.LimitReads`)."""
        account = self._party(tenant)
        return Elsewhere(self._queued(tenant), self._queued(account, account=True),
                         self._rate_estimate(now, tenant), self._rate_estimate(now, ACCOUNT_MARK + account))

    def _rate_estimate(self, now: int, field: str) -> float:
        """As the Lua's ``rate_estimate``: the previous bucket's accepted jobs weighted by the part
        of it still in the window, plus the current bucket's."""
        part, cur = self._rate_parts(now, field)
        return part + cur

    def _rate_parts(self, now: int, field: str) -> tuple[float, int]:
        """The two terms of the rate estimate at ``now``: the previous bucket's accepted jobs
        weighted by the part of it still in the window, and the current bucket's."""
        window = self.settings.rate_window_ms
        bucket = math.floor(now / window)
        part = self.rates.get(bucket - 1, {}).get(field, 0) * (window - (now - bucket * window)) / window
        return part, self.rates.get(bucket, {}).get(field, 0)

    def _rate_room(self, now: int, field: str, allowed: float, elsewhere: float = 0.0) -> float:
        """The jobs the rate field ``field`` (a tenant, or an account's) may still have accepted at
        ``now`` under ``allowed`` jobs a window (inf: 0, no rate limit), each decided as the Lua's
        ``rate_estimate`` decides it, float for float: job k is accepted while the estimate with
        the k before it counted (and ``elsewhere``, the other shards' estimate) stays under the
        allowance."""
        if not allowed:
            return math.inf
        part, cur = self._rate_parts(now, field)

        def accepted(k: int) -> bool:
            return part + (cur + k) + elsewhere < allowed

        n = max(0, math.ceil(allowed - part - cur - elsewhere))  # the first refused job, give or take rounding
        while n > 0 and not accepted(n - 1):
            n -= 1
        while accepted(n):
            n += 1
        return n

    def _count_rate(self, now: int, field: str, n: int) -> None:
        """As the Lua's ``count_rate``, ``n`` times; buckets before the previous one go, as the script drops them."""
        bucket = math.floor(now / self.settings.rate_window_ms)
        counts = self.rates.setdefault(bucket, {})
        counts[field] = counts.get(field, 0) + n
        for old in [b for b in self.rates if b < bucket - 1]:
            del self.rates[old]

    def _observe_wait(self, queue: str, wait: int) -> None:
        buckets = self.settings.buckets_ms
        idx = len(buckets) + 1
        for i, le in enumerate(buckets, start=1):
            if wait <= le:
                idx = i
                break
        key = f"wb{SEP}{queue}{SEP}{idx}"
        self.stats[key] = self.stats.get(key, 0) + 1
        self._stat("ws", queue, wait)

    def _lease(self, now: int, queue: str, tenant: str, items: list[Envelope], out: list[Record],
               owner: str = "") -> None:
        deadline = now + self.settings.visibility_ms
        for job in items:
            entry = Record(queue, tenant, job.attempts + 1, job)
            key = str(job.id)
            self.leases.add(key, deadline)
            self.leased[key] = entry
            if owner:
                self.owned.setdefault(owner, {})[key] = entry.attempts
            if entry.attempts == 1 and not job.given_back:
                self._observe_wait(queue, now - job.enqueued_ms)
            out.append(entry)
        self._stat("inflight", queue, len(items))
        self._cls(queue).inflight.incr(tenant, len(items))
        if self.settings.holds:
            self._leases_counted(tenant, len(items))

    def _capacity(self, i: int, inflight: list[int], slots: int, allowed: Container[int]) -> float:
        """Slots left for class ``i`` once the unused reservations of the other classes the
        popping worker serves are held back: its slots can keep no other class's."""
        reserved = self.settings.reserved
        if slots <= 0 or not self.settings.has_reserved:
            return math.inf
        used = sum(inflight)
        held = sum(max(0, reserved[j] - inflight[j]) for j in range(len(inflight)) if j != i and j in allowed)
        return slots - used - held

    def pop(self, now: int, max_jobs: int = 1, *, classes: Sequence[str] | None = None,
            owner: str = "") -> list[Lease]:
        return [e.lease(self.settings.names, owner, self.incarnation)
                for e in self.pop_entries(now, max_jobs, classes=classes, owner=owner)]

    def ack_and_pop(self, now: int, done: Sequence[Lease | Finished], max_jobs: int = 1, *,
                    classes: Sequence[str] | None = None, owner: str = "") -> Popped:
        """The acks, then the pop, in one step, as the Lua's ``pop`` with acks does it (nothing
        done when a class is unknown)."""
        for name in classes or ():
            self._pool_index(name)
        finished = [settled(item) for item in done]
        for _, runtime in finished:
            _runtime(runtime)  # an invalid one refuses the whole call, as the Scheduler's does
        # The acks settle the leases of the pop's own worker, as the Lua's do.
        acked: list[bool | None] = [self.ack(now, replace(lease, owner=owner), runtime=runtime)
                                    for lease, runtime in finished]
        leases = self.pop(now, max_jobs, classes=classes, owner=owner)
        return Popped(acked=acked, leases=leases, held_back=not leases and self._held_back(classes))

    def _held_back(self, classes: Sequence[str] | None) -> bool:
        """After a pop that leased nothing: whether a class the worker serves has work it could
        not take for lack of capacity (the Lua's flag, read from the state the pop left)."""
        depth, inflight, slots = self._pop_counts()
        return any(room < 1 for room in self._rooms(self._allowed(classes), depth, inflight, slots).values())

    def _allowed(self, classes: Sequence[str] | None) -> set[int]:
        """Indexes of the classes a pop may take (all when None); an unknown class refuses it."""
        return set(range(len(self.names))) if classes is None else {self._pool_index(c) for c in classes}

    def _pop_counts(self) -> tuple[list[int], list[int], int]:
        """Queued and in-flight jobs per class and the fleet's slots: what a pop reads first."""
        return ([self.stats.get(f"depth{SEP}{n}", 0) for n in self.names],
                [self.stats.get(f"inflight{SEP}{n}", 0) for n in self.names], self.stats.get("slots", 0))

    def _rooms(self, allowed: Container[int], depth: list[int], inflight: list[int], slots: int) -> dict[int, float]:
        """Capacity left for each allowed, unpaused class with work, in class order: the ones with
        room for a job are a pop's choices, the others are held back."""
        return {i: self._capacity(i, inflight, slots, allowed) for i, name in enumerate(self.names)
                if i in allowed and depth[i] > 0 and name not in self.paused}

    def pop_entries(self, now: int, max_jobs: int = 1, *, classes: Sequence[str] | None = None,
                    owner: str = "") -> list[Record]:
        """Like :meth:`pop`, returning the model's own records (cheaper for the simulator). An
        unknown class refuses the pop before anything changes, as the Scheduler's does."""
        allowed = self._allowed(classes)
        self._release_delayed(now, SWEEP_BATCH)
        s = self.settings
        depth, inflight, slots = self._pop_counts()
        policy = s.policy
        weighted = policy in ("weighted", "weighted-fair")
        swrr: list[float] | None = None  # read when two classes first contend, as the Lua's
        if s.has_pace or s.account_pace_us:
            self._release_holds(now, SWEEP_BATCH)
        unordered: set[int] = set()  # classes whose queued parties were all found held
        out: list[Record] = []
        while len(out) < max_jobs:
            cap = {i: room for i, room in self._rooms(allowed, depth, inflight, slots).items() if i not in unordered}
            elig = [i for i, room in cap.items() if room >= 1]
            if not elig:
                break
            ci, total = elig[0], 0  # total: set when the round-robin chose among two classes or more
            if policy == "fifo":
                ci = min(elig, key=lambda i: (self._cls(self.names[i]).heads.first()[1], i))  # type: ignore[index]
            elif weighted and len(elig) > 1:
                if swrr is None:
                    swrr = [self.swrr.get(n, 0) for n in self.names]
                for i in elig:
                    total += s.weights[i]
                    swrr[i] += s.weights[i]
                    if swrr[i] > swrr[ci]:
                        ci = i
                swrr[ci] -= total
            queue = self.names[ci]
            cls = self._cls(queue)
            if policy == "weighted-fair":
                head = self._ready_head(now, queue)
                if head is None:  # every party queued in the class is held: the turn is given back
                    unordered.add(ci)
                    if swrr is not None and total:
                        for i in elig:
                            swrr[i] -= s.weights[i]
                        swrr[ci] += total
                    continue
                party, tag, tenant, inner, room, account_tat, tenant_tat, pace = head
                cls.vt = tag
                n = int(min(s.batch, max_jobs - len(out), cap[ci], room, len(cls.queues[tenant])))
                cost = self.settings.cost_of(self._tier(cls, party))
                items, left = self._take(queue, tenant, n)
                work = self._charge(ci, tenant, items) if s.runtime else n
                if inner is not None and left > 0:
                    cls.accounts[party].add(tenant, inner + work)
                if left > 0 or party in cls.accounts:
                    cls.tags.add(party, tag + work * cost)
                self._lease(now, queue, tenant, items, out, owner)
                if account_tat is not None:
                    self.pace.add(ACCOUNT_MARK + party, account_tat + n * s.account_pace_us)
                if tenant_tat is not None:
                    self.pace.add(tenant, tenant_tat + n * pace)
                if swrr is not None and total:
                    self._charge_visit(swrr, elig, ci, total, work)
            else:
                tenant = cls.heads.first()[0]  # type: ignore[index]
                n = 1
                items = self._take(queue, tenant, 1)[0]
                if s.runtime and weighted:
                    work = self._charge(ci, tenant, items)
                    if swrr is not None and total:
                        self._charge_visit(swrr, elig, ci, total, work)
                self._lease(now, queue, tenant, items, out, owner)
            depth[ci] -= n
            inflight[ci] += n
        if swrr is not None:
            self.swrr = dict(zip(self.names, swrr))
        return out

    def _held(self, job_id: str, attempts: int) -> Record | None:
        entry = self.leased.get(job_id)
        return entry if entry is not None and entry.attempts == attempts else None

    def _current(self, lease: Lease) -> bool:
        """As the Lua's ``current``: the lease was made in this state of the group ('' checks none)."""
        return lease.incarnation in ("", self.incarnation)

    def _held_lease(self, lease: Lease) -> Record | None:
        """The record ``lease`` still holds: of this state, not reaped nor redelivered since."""
        return self._held(lease.job_id, lease.attempts) if self._current(lease) else None

    def _release_lease(self, job_id: str, entry: Record) -> None:
        del self.leased[job_id]
        self.leases.remove(job_id)
        if self.settings.runtime:
            self.charged.pop(job_id, None)
        self._stat("inflight", entry.queue, -1)
        if self.settings.holds:
            self._leases_counted(entry.tenant, -1)
        inflight = self._cls(entry.queue).inflight
        if inflight.incr(entry.tenant, -1) <= 0:
            inflight.remove(entry.tenant)
            if self.settings.runtime:
                self._forget(entry.queue, entry.tenant)

    def _count_processed(self, now: int, queue: str, tenant: str, units: int) -> None:
        """Served ``units`` (a job, or µs of work under runtime) in the window bucket of ``now``."""
        cls = self._cls(queue)
        bucket = math.floor(now / self.settings.window_ms)
        served = cls.served.get(bucket)
        if served is None:
            served = cls.served[bucket] = ZSet()
        served.incr(tenant, units)
        cls.served_total[bucket] = cls.served_total.get(bucket, 0) + units
        if self.settings.account_sep:
            cls.account_served.setdefault(bucket, ZSet()).incr(self._party(tenant), units)
        for old in [b for b in cls.served if b < bucket - 1]:  # the script drops these
            del cls.served[old]
            del cls.served_total[old]
            cls.account_served.pop(old, None)

    def ack(self, now: int, lease: Lease, *, runtime: float | None = None) -> bool:
        ran = _runtime(runtime)
        entry = self._held_lease(lease)
        if entry is None:
            return False
        units = self._ran(entry, ran, learning=True)
        self._release_lease(lease.job_id, entry)
        self._disown(lease.owner, lease.job_id)
        self._stat("processed", entry.queue, 1)
        self._count_processed(now, entry.queue, entry.tenant, units)
        return True

    def nack(self, now: int, lease: Lease, error: str | None = None, *, final: bool = False,
             runtime: float | None = None) -> str:
        return self._nack(now, lease, one_line(error or "failed"), "final" if final else "retry", runtime)

    def defer_unhandled(self, now: int, lease: Lease) -> str:
        """As the Lua's nack mode '2': back at the head of its sub-queue with its attempt given back."""
        return self._nack(now, lease, "", "unhandled", None)

    def give_back(self, now: int, leases: Sequence[Lease]) -> int:
        """As the Lua's ``give_back``: unstarted leases back at once, their attempts given back."""
        count = 0
        for lease in reversed(leases):  # each to the head of its sub-queue, the last first, as the Lua's
            if not self._current(lease):
                continue  # of a state since lost: it touches nothing, as in the Lua
            entry = self._held(lease.job_id, lease.attempts)
            if entry is not None:
                self._give_back(lease.job_id, entry)
                count += 1
            self._disown(lease.owner, lease.job_id)
        return count

    def _give_back(self, job_id: str, entry: Record) -> None:
        self._release_lease(job_id, entry)
        entry.job.attempts = max(entry.attempts - 1, 0)
        entry.job.given_back = True  # as the Lua stores it: attempts 0 as "0", not nothing
        self._push_head(entry.queue, entry.tenant, [entry.job])

    def _take_back(self, now: int, job_id: str, entry: Record, why: str) -> None:
        """As the Lua's ``take_back``: a lease taken from its worker, the attempt counted."""
        self._release_lease(job_id, entry)
        self.returned.add(job_id, now)
        if entry.attempts >= self.settings.max_attempts:
            self._dead_letter(now, entry, why)
        else:
            entry.job.attempts = entry.attempts
            self._push_head(entry.queue, entry.tenant, [entry.job])
            self._stat("redelivered", entry.queue, 1)

    def _disown(self, owner: str, job_id: str) -> None:
        mine = self.owned.get(owner)
        if mine is not None:
            mine.pop(job_id, None)
            if not mine:
                del self.owned[owner]

    def _drop_worker(self, now: int, worker_id: str, why: str) -> int:
        """As the Lua's ``drop_worker``: its slots and registration go, and every lease it holds."""
        self.stats["slots"] = self.stats.get("slots", 0) - self.worker_slots.pop(worker_id, 0)
        self.workers.remove(worker_id)
        count = 0
        for job_id, attempts in sorted(self.owned.pop(worker_id, {}).items(), key=lambda item: (item[1], item[0])):
            entry = self._held(job_id, attempts)
            if entry is not None:
                self._take_back(now, job_id, entry, why)
                count += 1
        return count

    def reclaim(self, now: int, owner: str, held: Sequence[Lease]) -> int:
        """As the Lua's ``reclaim``: the owner's leases but ``held`` (those of this state) given back."""
        mine = self.owned.get(owner, {})
        keep = {lease.job_id for lease in held if self._current(lease)}
        count = 0
        for job_id, attempts in sorted(mine.items(), key=lambda item: int(item[0]), reverse=True):
            if job_id in keep:
                continue
            self._disown(owner, job_id)
            entry = self._held(job_id, attempts)
            if entry is not None:
                self._give_back(job_id, entry)
                count += 1
        return count

    def lease_taken_back(self, job_id: str) -> bool:
        return job_id in self.returned

    def _nack(self, now: int, lease: Lease, error: str, mode: str, runtime: float | None) -> str:
        """The Lua's nack; ``mode``: "retry", "final" or "unhandled"."""
        ran = _runtime(runtime)
        entry = self._held_lease(lease)
        if entry is None:
            return "stale"
        self._disown(lease.owner, lease.job_id)
        if mode == "unhandled":
            self._stat("unhandled", entry.queue, 1)
            self._give_back(lease.job_id, entry)
            return mode
        self._ran(entry, ran, learning=False)
        self._release_lease(lease.job_id, entry)
        self._stat("failed", entry.queue, 1)
        if entry.attempts >= self.settings.max_attempts or mode == "final":
            self._dead_letter(now, entry, error)
            return "dead"
        delay = min(self.settings.backoff_ms * math.pow(2, entry.attempts - 1), self.settings.backoff_max_ms)
        entry.job.attempts = entry.attempts
        rec = entry.encode()
        self.delayed.add(rec, now + delay)
        self.delayed_items[rec] = entry
        self._stat("delayed", entry.queue, 1)
        return mode

    def extend(self, now: int, lease: Lease) -> bool:
        if self._held_lease(lease) is None:
            return False
        self.leases.add(lease.job_id, now + self.settings.visibility_ms)
        return True

    def reap(self, now: int, limit: int = 1000) -> int:
        if self.reaped is not None and now - self.reaped > REAP_GAP_MS:  # as the Lua's forgive_gap
            for worker, expiry in list(self.workers.items()):
                self.workers.add(worker, max(expiry + now - self.reaped, now + REAP_GAP_MS))
        self.reaped = now
        for job_id in self.returned.up_to(now - RETURNED_KEEP_MS, len(self.returned)):
            self.returned.remove(job_id)
        if self.settings.has_pace or self.settings.account_pace_us:
            for member in self.pace.up_to(now * 1000, len(self.pace)):
                self.pace.remove(member)
        count = 0
        for job_id in self.leases.up_to(now, limit):
            self._take_back(now, job_id, self.leased[job_id], "lease expired")
            count += 1
        for worker in self.workers.up_to(now, limit):
            count += self._drop_worker(now, worker, "worker lost")
        self._release_delayed(now, limit)
        return count

    def promote_overdue(self, now: int, limit: int = 1000) -> int:
        moved = 0
        for i in range(1, len(self.names)):
            after = self.settings.promote_ms[i]
            if after <= 0 or moved >= limit:
                continue
            queue, up = self.names[i], self.names[i - 1]
            cls = self._cls(queue)
            cutoff = now - after
            for tenant in cls.heads.up_to(cutoff, limit - moved):
                q = cls.queues[tenant]
                overdue = 0
                for k in range(min(len(q), self.settings.batch, limit - moved)):
                    if q[k].enqueued_ms > cutoff:
                        break
                    overdue += 1
                if overdue == 0:
                    cls.heads.add(tenant, q[0].enqueued_ms)
                else:
                    items, left = self._take(queue, tenant, overdue)
                    if left == 0 and self.settings.runtime:
                        self._forget(queue, tenant)
                    if self.settings.holds:
                        self._held_jobs(queue, tenant, -len(items), False)
                        due = self._held_in(queue, tenant)
                        if left == 0 and due is not None:  # a held tenant with no job left in the class: no hold
                            self._stat("held", f"{queue}{SEP}{hold_reason(tenant, due)}", -1)
                            self.held.remove(f"{queue}{SEP}{tenant}")
                    self._push_head(up, tenant, items)
                    self._stat("promoted", queue, len(items))
                    moved += len(items)
                if moved >= limit:
                    break
        return moved

    def requeue_dead(self, now: int, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                     limit: int = 100) -> DeadOutcome:
        return self._dead(now, "requeue", job_ids, queue, limit)

    def drop_dead(self, now: int, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                  limit: int = 100) -> DeadOutcome:
        return self._dead(now, "drop", job_ids, queue, limit)

    def _dead(self, now: int, action: str, job_ids: Sequence[str] | None, queue: str | None,
              limit: int) -> DeadOutcome:
        """Requeue or drop dead letters, as the Lua's ``dead`` op: the given ids, or with none the
        oldest ``limit`` of ``queue`` (any class when None)."""
        ids = [check_job_id(j) for j in job_ids or ()]
        if queue is not None:
            self.config.class_index(queue)
        wanted = set(ids) if ids else None
        limit = len(ids) if ids else limit
        done: list[str] = []
        skipped: list[str] = []
        for line in list(self.dead):
            if len(done) + len(skipped) >= limit:
                break
            letter = DeadLetter.decode(line)
            job_id = str(letter.job.id)
            if (queue is not None and letter.queue != queue) or (wanted is not None and job_id not in wanted):
                continue
            if wanted is not None:
                wanted.discard(job_id)
            if action == "requeue" and letter.queue not in self.names and letter.queue not in self.settings.moved:
                skipped.append(job_id)
                continue
            self.dead.remove(line)
            self._stat("deadlist", letter.queue, -1)
            if action == "requeue":
                job = letter.job
                self._push_tail(letter.queue, letter.tenant, [
                    Envelope(job.id, now, 0, job.tier, job.task, job.reason, job.payload)])
            done.append(job_id)
        return DeadOutcome(done, skipped)

    def register_worker(self, now: int, worker_id: str, slots: int, ttl: float) -> None:
        if slots <= 0:
            self.unregister_worker(now, worker_id)
            return
        old = self.worker_slots.get(worker_id, 0)
        self.stats["slots"] = self.stats.get("slots", 0) + slots - old
        self.worker_slots[worker_id] = slots
        self.workers.add(worker_id, now + int(ttl * 1000))

    def unregister_worker(self, now: int, worker_id: str) -> int:
        return self._drop_worker(now, worker_id, "worker stopped")

    def pause(self, queue: str) -> None:
        self.config.class_index(queue)
        self.paused.add(queue)

    def resume(self, queue: str) -> None:
        self.config.class_index(queue)
        self.paused.discard(queue)

    def snapshot(self, now: int) -> Snapshot:
        s = self.settings
        bucket = math.floor(now / s.window_ms)
        empty = ZSet()
        raw = {}
        for name in self.names:
            cls = self._cls(name)
            served_now, served_before = cls.served.get(bucket, empty), cls.served.get(bucket - 1, empty)
            # the fairness sample: the most backlogged parties (with accounts, the accounts)
            queued, by_party = (cls.account_backlog, cls.account_served) if s.account_sep else (cls.backlog, cls.served)
            party_now, party_before = by_party.get(bucket, empty), by_party.get(bucket - 1, empty)
            sample = [
                (p, self.settings.cost_of(self._tier(cls, p)), party_now.score(p) or 0.0, party_before.score(p) or 0.0)
                for p, _ in queued.top(s.sample)
            ]
            by_account: dict[str, Any] = {}
            if s.account_sep:
                accounts_now = cls.account_served.get(bucket, empty).top(s.served_top)
                accounts_before = cls.account_served.get(bucket - 1, empty).top(s.served_top)
                accounts_backlog = cls.account_backlog.top(s.backlog_top)
                by_account = {"active_accounts": len(cls.account_backlog),
                              "accounts_now": accounts_now,
                              "accounts_before": accounts_before,
                              "accounts_backlog": accounts_backlog,
                              "accounts_keys": tuple(len(cls.accounts.get(a, empty)) for a, _ in accounts_backlog),
                              "account_keys": [
                                  (account, key, served_now.score(key) or 0.0, served_before.score(key) or 0.0)
                                  for account in RawClass.key_accounts(accounts_now, accounts_before, now,
                                                                       s.window_ms, s.account_top)
                                  for key, _ in cls.accounts.get(account, empty).top(s.account_keys)]}
            oldest = cls.heads.head(s.heads)
            account_holds = bool(s.account_sep and (s.account_cap or s.account_pace_us))
            raw[name] = RawClass(
                **by_account,
                heads=oldest,
                held_heads=frozenset(t for t, _ in oldest if s.holds and (
                    self._held_in(name, t) is not None
                    or (account_holds and self._held_in(name, ACCOUNT_MARK + self._party(t)) is not None))),
                active_tenants=len(cls.backlog),
                top_backlog=cls.backlog.top(s.backlog_top),
                top_inflight=cls.inflight.top(s.inflight_top),
                served_now=served_now.top(s.served_top),
                served_before=served_before.top(s.served_top),
                served_now_total=cls.served_total.get(bucket, 0),
                served_before_total=cls.served_total.get(bucket - 1, 0),
                sample=sample,
            )
        others, held = self._unconfigured()
        heads = {c: _first_score(self._cls(c)) for c in others if held[c] > 0}
        return build_snapshot(self.config, now, self.stats, sorted(self.paused), raw, len(self.dead), heads)

    def state(self, now: int) -> dict[str, Any]:
        """Everything the Lua scheduler stores, in the canonical form the differential test
        compares (service and rate buckets only while live: older ones expire in Redis)."""
        live = math.floor(now / self.settings.window_ms) - 1
        rates_live = math.floor(now / self.settings.rate_window_ms) - 1
        classes = {}
        for name, cls in self.classes.items():
            entry = {
                "queues": {t: [j.encode() for j in q] for t, q in cls.queues.items()},
                "tags": dict(cls.tags.items()),
                "accounts": {a: dict(m.items()) for a, m in cls.accounts.items()},
                "heads": dict(cls.heads.items()),
                "backlog": dict(cls.backlog.items()),
                "cost": dict(cls.cost),
                "key_tier": dict(cls.key_tier),
                "account_tiers": {a: dict(n) for a, n in cls.account_tiers.items() if n},
                "vt": cls.vt,
                "inflight": dict(cls.inflight.items()),
                "served": {b: dict(z.items()) for b, z in cls.served.items() if b >= live},
                "served_total": {b: n for b, n in cls.served_total.items() if b >= live},
                "account_backlog": dict(cls.account_backlog.items()),
                "account_served": {b: dict(z.items()) for b, z in cls.account_served.items() if b >= live},
                "estimates": dict(cls.estimates),
                "tenant_estimates": {t: dict(e) for t, e in cls.tenant_estimates.items() if e},
            }
            if name in self.names or any(v for k, v in entry.items() if k != "vt"):
                classes[name] = entry  # a removed class with nothing left but its virtual time is not listed
        return {
            "stats": {k: v for k, v in self.stats.items() if v != 0},
            "swrr": {k: v for k, v in self.swrr.items()},
            "paused": set(self.paused),
            "arrivals": {k: v for k, v in self.arrivals.items()},
            "rates": {b: dict(counts) for b, counts in self.rates.items() if b >= rates_live},
            "seq": self.seq,
            "classes": classes,
            "leases": dict(self.leases.items()),
            "leased": {k: e.encode() for k, e in self.leased.items()},
            "delayed": dict(self.delayed.items()),
            "dead": list(self.dead),
            "workers": dict(self.workers.items()),
            "worker_slots": dict(self.worker_slots),
            "owned": {w: dict(mine) for w, mine in self.owned.items() if mine},
            "returned": dict(self.returned.items()),
            "reaped": self.reaped,
            "charged": dict(self.charged),
            "running": dict(self.running.items()),
            "pace": dict(self.pace.items()),
            "held": dict(self.held.items()),
            "capped": dict(self.capped),
            # The keys that name a job at ``now`` (Redis expires the others, or keeps them unread).
            "keyed": {key: SEP.join((str(until), job.job_id, job.queue, job.reason))
                      for key, (until, job) in self.keyed.items() if until > now},
        }



def _runtime(runtime: float | None) -> int | None:
    """A reported runtime in whole µs, as the Scheduler sends it (InvalidJob naming ``runtime``)."""
    text = runtime_us(runtime)
    return int(text) if text else None


def _learned(old: int | None, ran: int, smoothing: float) -> int:
    """As the Lua's ``learn``: an estimate moved towards a measured runtime; the first sets it."""
    return ran if old is None else math.floor(old + (ran - old) * smoothing + 0.5)


def hold_reason(member: str, due: float) -> str:
    """Why a member is held, as the stats name it: cap or rate, ``account_`` first for an account."""
    return ("account_" if member.startswith(ACCOUNT_MARK) else "") + ("cap" if due == math.inf else "rate")


def _first_score(cls: _Class) -> float | None:
    first = cls.heads.first()
    return None if first is None else first[1]
