"""The status table: per class, what is waiting, for how long, and the share each class actually
got against its configured weight, and the jobs given up on (dead letters). Shared by ``fairctl status`` and ``fairctl demo``.
``fairctl status`` adds the jobs under classes the config does not name (nothing serves them) and
Redis's memory against its limit and policy; both show the tenants held by dispatch limits, when a
config sets such limits.

The realised share needs two snapshots: it is each class's delta over the interval, because a
lifetime total would hide a storm that started a minute ago. It is counted in the basis the
scheduler shares out (``scheduler.charge``): jobs processed, or under ``runtime`` the worker time
the workers reported, so it reads against the weight in the same unit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from fairness_core import Config, MemoryInfo, Snapshot
from fairness_core.ages import format_age
from fairness_core.config_store import Applied
from fairness_core.memory import SAFE_POLICY
from fairness_core.snapshot import UnconfiguredClass, hold_reasons

from .text_table import text_table

HEADERS = ("class", "depth", "oldest", "in-flight", "delayed", "dead", "paused", "weight", "share")
SHARE_HEADER = {"jobs": "share", "runtime": "time share"}  # by scheduler.charge
UNCONFIGURED_HEADERS = ("class (not configured)", "depth", "oldest", "in-flight", "delayed")


@dataclass(frozen=True)
class AccountStatus:
    """An account of a class: fair queuing's party, however many keys its jobs are spread over."""

    account: str
    queued: int
    keys: int  # its keys with jobs queued in the class's fair order
    share_pct: float  # of the class's service over exporter.window


@dataclass(frozen=True)
class ClassStatus:
    name: str
    depth: int
    oldest_age_s: float
    inflight: int
    delayed: int
    paused: bool
    weight_pct: float
    processed: int  # jobs, over the interval
    worktime_s: float  # worker time reported over the interval (either charge)
    share_pct: float | None  # of the interval's jobs, or worker time under charge: runtime; None: none
    top_tenants: list[tuple[str, int]]
    # With accounts (tenants.account_separator; None without): the accounts with jobs queued, and
    # the most backlogged ones, each with its queued jobs, keys queued and share of the window's service.
    active_accounts: int | None = None
    top_accounts: list[AccountStatus] | None = None
    dead_letters: int | None = None  # of the class, in the dead-letter list (None: not read)
    # Held by a dispatch limit now, by reason (fairness_core.snapshot.HOLD_REASONS): tenants (accounts
    # for the account_ reasons), and their queued jobs. Each reason the config's limits can give, 0
    # included, and any other above 0; empty without such a limit and with none held.
    held_tenants: dict[str, int] = field(default_factory=dict)
    held_jobs: dict[str, int] = field(default_factory=dict)


def class_statuses(config: Config, before: Snapshot | None, after: Snapshot, top: int,
                   dead: Mapping[str, int] | None = None) -> list[ClassStatus]:
    """One row per configured class; ``before=None`` means no interval (share unknown); ``dead``
    the dead letters of each class (Queue.dead_letter_counts). The share is in ``config``'s
    charge: pass the applied config, the one the scheduler follows."""
    def delta(counter: str) -> dict[str, int]:
        return {name: after.classes[name].counters[counter] - before.classes[name].counters[counter] if before else 0
                for name in config.class_names}

    processed, worktime = delta("processed"), delta("worktime")
    basis = worktime if config.scheduler.charge == "runtime" else processed
    total = sum(basis.values())
    limits = hold_reasons(config)
    accounts = config.tenants.account_separator is not None
    rows = []
    for c in config.classes:
        view = after.classes[c.name]
        reasons = dict.fromkeys((*limits, *view.held, *view.held_jobs))
        rows.append(ClassStatus(
            name=c.name,
            depth=view.depth,
            oldest_age_s=view.oldest_age,
            inflight=view.inflight,
            delayed=view.delayed,
            paused=view.paused,
            weight_pct=100.0 * c.weight / config.total_weight,
            processed=processed[c.name],
            worktime_s=worktime[c.name] / 1e6,
            share_pct=100.0 * basis[c.name] / total if total else None,
            top_tenants=list(view.top_backlog[:top]),
            active_accounts=view.active_accounts if accounts else None,
            top_accounts=[AccountStatus(a, n, k, 100.0 * share) for a, n, k, share in view.top_account_backlog[:top]]
            if accounts else None,
            dead_letters=None if dead is None else dead.get(c.name, 0),
            held_tenants={reason: view.held.get(reason, 0) for reason in reasons},
            held_jobs={reason: view.held_jobs.get(reason, 0) for reason in reasons},
        ))
    return rows


# How the status text names who a reason holds, and at which limit.
HELD_BY = {"cap": ("tenant", "max_in_flight"), "rate": ("tenant", "dispatch_rate"),
           "account_cap": ("account", "account_max_in_flight"), "account_rate": ("account", "account_dispatch_rate")}


def held_lines(rows: Sequence[ClassStatus]) -> list[str]:
    """Who the dispatch limits hold in each class, and their queued jobs; nothing when no class
    counts a reason (no such limit configured, and none held)."""
    if not any(r.held_tenants or r.held_jobs for r in rows):
        return []
    out = []
    for r in rows:
        parts = []
        for reason in dict.fromkeys((*r.held_tenants, *r.held_jobs)):
            members, jobs = r.held_tenants.get(reason, 0), r.held_jobs.get(reason, 0)
            if members or jobs:
                who, limit = HELD_BY[reason]
                parts.append(f"{members} {who}{'' if members == 1 else 's'} at {limit} ({jobs} "
                             f"job{'' if jobs == 1 else 's'} queued)")
        if parts:
            out.append(f"  {r.name}: " + ", ".join(parts))
    if not out:
        return ["held by dispatch limits: none"]
    return ["held by dispatch limits (their jobs wait queued until the hold ends):", *out]


def account_lines(rows: Sequence[ClassStatus]) -> list[str]:
    """With accounts, each class's most backlogged accounts: fair queuing shares a class out by
    account, so a customer spread over many keys shows as the one party it is."""
    shown = [r for r in rows if r.top_accounts]
    if not shown:
        return []
    out = ["most backlogged accounts (queued jobs, keys queued, share of the class's service over exporter.window):"]
    for r in shown:
        accounts = ", ".join(f"{a.account} ({a.queued}, {a.keys} key{'' if a.keys == 1 else 's'}, {a.share_pct:.1f}%)"
                             for a in r.top_accounts or ())
        out.append(f"  {r.name} ({r.active_accounts} account{'' if r.active_accounts == 1 else 's'} queued): {accounts}")
    return out


def _mib(size: int) -> str:
    return f"{size / 1048576:.1f} MiB"


def memory_line(memory: MemoryInfo, headroom: float) -> str:
    """Redis's memory against its limit, and its policy (called out when it may evict jobs)."""
    if memory.maxmemory:
        used = (f"redis memory: {_mib(memory.used)} of maxmemory {_mib(memory.maxmemory)} ({memory.fill:.0%}); "
                f"enqueues refused from {headroom:.0%} (redis.memory_headroom)")
    else:
        used = f"redis memory: {_mib(memory.used)}, no maxmemory limit"
    policy = f"maxmemory-policy {memory.policy}"
    if memory.policy != SAFE_POLICY:
        policy += (f" - UNSAFE: Redis may evict queued jobs; workers and producers refuse to run "
                   f"(CONFIG SET maxmemory-policy {SAFE_POLICY})")
    return f"{used}; {policy}"


def config_line(applied: Applied, now: float) -> str:
    """Which config the group runs: what every process of it follows (see ``fairctl config show``)."""
    return (f"config: v{applied.version} of queue group {applied.config.redis.prefix} (fingerprint "
            f"{applied.fingerprint}), applied {format_age(max(0.0, now - applied.applied_at))} ago")


def share_line(rows: Sequence[ClassStatus], interval: float, charge: str) -> str:
    """What the share column counts, over how long, and how much of it there was."""
    jobs = sum(r.processed for r in rows)
    if charge == "runtime":
        worked = format_age(sum(r.worktime_s for r in rows))
        return (f"time share = worker time per class over the last {interval:g}s ({worked} reported, {jobs} jobs; "
                "scheduler.charge: runtime)")
    return f"share = processed per class over the last {interval:g}s ({jobs} jobs; scheduler.charge: jobs)"


def render(rows: list[ClassStatus], interval: float | None, *, charge: str = "jobs",
           unconfigured: Sequence[UnconfiguredClass] = (), memory: str | None = None, config: str | None = None) -> str:
    """A plain-text table (no colours: it goes into logs and tickets as often as terminals);
    ``charge`` the applied scheduler.charge the shares are counted in, ``unconfigured`` classes
    get a table of their own, ``memory`` is :func:`memory_line`'s and ``config`` :func:`config_line`'s."""
    cells = [(*HEADERS[:-1], SHARE_HEADER[charge])] + [
        (r.name, str(r.depth), format_age(r.oldest_age_s), str(r.inflight), str(r.delayed),
         "-" if r.dead_letters is None else str(r.dead_letters), "yes" if r.paused else "no", f"{r.weight_pct:.0f}%", "-" if r.share_pct is None else f"{r.share_pct:.1f}%")
        for r in rows
    ]
    lines = text_table(cells, numbers_right=True)
    if interval:
        lines.append(share_line(rows, interval, charge))
    dead = sum(r.dead_letters or 0 for r in rows)
    if dead:
        lines.append(f"dead letters: {dead} (failed for good, or no handler for their task): "
                     "fairctl dead list, then fairctl dead requeue or drop")
    lines.extend(account_lines(rows))
    tenants = [f"  {r.name}: " + ", ".join(f"{t} ({n})" for t, n in r.top_tenants) for r in rows if r.top_tenants]
    if tenants:
        lines.append("most backlogged tenants:")
        lines.extend(tenants)
    lines.extend(held_lines(rows))
    if unconfigured:
        lines.append("")
        lines.extend(text_table([UNCONFIGURED_HEADERS] + [
            (u.name, str(u.depth), format_age(u.oldest_age), str(u.inflight), str(u.delayed)) for u in unconfigured
        ], numbers_right=True))
        lines.append("not configured: no worker takes these classes' queued jobs; move them with fairctl config "
                     "apply FILE --move OLD=NEW, or put the class back in the config")
    if memory:
        lines.append(memory)
    if config:
        lines.append(config)
    return "\n".join(lines)


def applied_json(applied: Applied) -> dict[str, Any]:
    """The applied config a group runs, as ``--json`` gives it."""
    return {"version": applied.version, "fingerprint": applied.fingerprint, "applied_at": applied.applied_at}


def as_json(rows: list[ClassStatus], interval: float | None, *, charge: str = "jobs",
            unconfigured: Sequence[UnconfiguredClass] = (), memory: MemoryInfo | None = None,
            headroom: float | None = None, applied: Applied | None = None) -> dict[str, Any]:
    """``charge``: the basis of each class's share_pct (jobs, or worker time under runtime)."""
    out: dict[str, Any] = {
        "interval_s": interval, "charge": charge, "dead_letters": sum(r.dead_letters or 0 for r in rows),
        "classes": [_class_json(r) for r in rows], "unconfigured_classes": [asdict(u) for u in unconfigured]}
    if applied is not None:
        out["applied_config"] = applied_json(applied)
    if memory is not None:
        out["redis_memory"] = {**asdict(memory), "memory_headroom": headroom}
    return out


def _class_json(row: ClassStatus) -> dict[str, Any]:
    """A class as ``--json`` gives it: the held counts only where :func:`held_lines` would show them."""
    out = asdict(row)
    if not (row.held_tenants or row.held_jobs):
        del out["held_tenants"], out["held_jobs"]
    if row.top_accounts is None:  # no accounts configured
        del out["active_accounts"], out["top_accounts"]
    return out
