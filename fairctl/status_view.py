"""The status table: per class, what is waiting, for how long, and the share each class actually
got against its configured weight, and the jobs given up on (dead letters). Shared by ``fairctl status`` and ``fairctl demo``.
``fairctl status`` adds the jobs under classes the config does not name (nothing serves them) and
Redis's memory against its limit and policy.

The realised share needs two snapshots: it is each class's processed delta over the interval,
because a lifetime total would hide a storm that started a minute ago.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from fairness_core import Config, MemoryInfo, Snapshot
from fairness_core.ages import format_age
from fairness_core.config_store import Applied
from fairness_core.memory import SAFE_POLICY
from fairness_core.snapshot import UnconfiguredClass

from .text_table import text_table

HEADERS = ("class", "depth", "oldest", "in-flight", "delayed", "dead", "paused", "weight", "share")
UNCONFIGURED_HEADERS = ("class (not configured)", "depth", "oldest", "in-flight", "delayed")


@dataclass(frozen=True)
class ClassStatus:
    name: str
    depth: int
    oldest_age_s: float
    inflight: int
    delayed: int
    paused: bool
    weight_pct: float
    processed: int  # over the interval
    share_pct: float | None  # None when nothing was processed in the interval
    top_tenants: list[tuple[str, int]]
    dead_letters: int | None = None  # of the class, in the dead-letter list (None: not read)


def class_statuses(config: Config, before: Snapshot | None, after: Snapshot, top: int,
                   dead: Mapping[str, int] | None = None) -> list[ClassStatus]:
    """One row per configured class; ``before=None`` means no interval (share unknown); ``dead``
    the dead letters of each class (Scheduler.dead_letter_counts)."""
    def done(snapshot: Snapshot, name: str) -> int:
        return snapshot.classes[name].counters["processed"]

    processed = {name: done(after, name) - done(before, name) if before else 0 for name in config.class_names}
    total = sum(processed.values())
    rows = []
    for c in config.classes:
        view = after.classes[c.name]
        rows.append(ClassStatus(
            name=c.name,
            depth=view.depth,
            oldest_age_s=view.oldest_age,
            inflight=view.inflight,
            delayed=view.delayed,
            paused=view.paused,
            weight_pct=100.0 * c.weight / config.total_weight,
            processed=processed[c.name],
            share_pct=100.0 * processed[c.name] / total if total else None,
            top_tenants=list(view.top_backlog[:top]),
            dead_letters=None if dead is None else dead.get(c.name, 0),
        ))
    return rows


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


def render(rows: list[ClassStatus], interval: float | None, *, unconfigured: Sequence[UnconfiguredClass] = (),
           memory: str | None = None, config: str | None = None) -> str:
    """A plain-text table (no colours: it goes into logs and tickets as often as terminals);
    ``unconfigured`` classes get a table of their own, ``memory`` is :func:`memory_line`'s and
    ``config`` :func:`config_line`'s."""
    cells = [HEADERS] + [
        (r.name, str(r.depth), format_age(r.oldest_age_s), str(r.inflight), str(r.delayed),
         "-" if r.dead_letters is None else str(r.dead_letters), "yes" if r.paused else "no", f"{r.weight_pct:.0f}%", "-" if r.share_pct is None else f"{r.share_pct:.1f}%")
        for r in rows
    ]
    lines = text_table(cells, numbers_right=True)
    if interval:
        lines.append(f"share = processed per class over the last {interval:g}s "
                     f"({sum(r.processed for r in rows)} jobs)")
    dead = sum(r.dead_letters or 0 for r in rows)
    if dead:
        lines.append(f"dead letters: {dead} (failed for good, or no handler for their task): "
                     "fairctl dead list, then fairctl dead requeue or drop")
    tenants = [f"  {r.name}: " + ", ".join(f"{t} ({n})" for t, n in r.top_tenants) for r in rows if r.top_tenants]
    if tenants:
        lines.append("most backlogged tenants:")
        lines.extend(tenants)
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


def as_json(rows: list[ClassStatus], interval: float | None, *, unconfigured: Sequence[UnconfiguredClass] = (),
            memory: MemoryInfo | None = None, headroom: float | None = None,
            applied: Applied | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "interval_s": interval, "dead_letters": sum(r.dead_letters or 0 for r in rows),
        "classes": [asdict(r) for r in rows], "unconfigured_classes": [asdict(u) for u in unconfigured]}
    if applied is not None:
        out["applied_config"] = {"version": applied.version, "fingerprint": applied.fingerprint,
                                 "applied_at": applied.applied_at}
    if memory is not None:
        out["redis_memory"] = {**asdict(memory), "memory_headroom": headroom}
    return out
