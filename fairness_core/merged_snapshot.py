"""One queue's snapshot from its shards' snapshots: what a sharded queue group looks like as one
queue, the way ``fairctl status`` shows it and the simulator reports it. Counts add up, ages take
the oldest, and tenant lists are merged by tenant (a tenant's queued jobs of a class are on one
shard, but for a while after a re-shard, so a merged top list is the fleet's)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .snapshot import ClassSnapshot, Snapshot, UnconfiguredClass


def summed_counts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Counts by name added up over ``parts``, a count of 0 kept (adding Counters would drop it)."""
    out: Counter[str] = Counter()
    for part in parts:
        out.update(part)
    return dict(out)


def _summed(pairs: Iterable[Iterable[tuple[str, float]]], keep: int) -> tuple[tuple[str, Any], ...]:
    total: dict[str, float] = {}
    for part in pairs:
        for tenant, n in part:
            total[tenant] = total.get(tenant, 0) + n
    return tuple(sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:keep])


def _merged_class(parts: Sequence[ClassSnapshot]) -> ClassSnapshot:
    """One class over the shards: counts summed, ages the oldest, tenant lists merged; the
    fairness index is the shards' mean weighted by the parties waiting on each (each shard's is
    exact for it). Weighted by service instead, a shard whose tenants wait and get nothing (index
    0) would weigh nothing, and a flood served alone on its shard would read as a fair fleet."""
    served = sum(p.processed_window for p in parts)
    waiting = [p.active_accounts or p.active_tenants for p in parts]
    top = _summed((p.top_processed for p in parts), max(len(p.top_processed) for p in parts))
    keep = max(len(p.oldest_tenants) for p in parts)

    def total(field: str) -> Any:
        return sum(getattr(p, field) for p in parts)

    def counts(field: str) -> dict[str, int]:
        return summed_counts(getattr(p, field) for p in parts)

    return dataclasses.replace(
        parts[0], depth=total("depth"), inflight=total("inflight"), delayed=total("delayed"),
        paused=any(p.paused for p in parts), oldest_age=max(p.oldest_age for p in parts),
        active_tenants=total("active_tenants"), counters=counts("counters"), enqueued=counts("enqueued"),
        wait_buckets=tuple(map(sum, zip(*(p.wait_buckets for p in parts)))), wait_sum=total("wait_sum"),
        wait_count=total("wait_count"),
        # every tenant the shards list (a shard lists fewer than k when it holds fewer tenants)
        top_backlog=_summed((p.top_backlog for p in parts), sum(len(p.top_backlog) for p in parts)),
        top_inflight=_summed((p.top_inflight for p in parts), sum(len(p.top_inflight) for p in parts)),
        noisy_tenants=tuple(dict.fromkeys(t for p in parts for t in p.noisy_tenants)),
        quiet_oldest_age=max(p.quiet_oldest_age for p in parts),
        oldest_tenants=tuple(sorted((t for p in parts for t in p.oldest_tenants), key=lambda ta: -ta[1])[:keep]),
        processed_window=served, top_processed=top,
        tenant_shares=tuple((t, min(1.0, n / served)) for t, n in top) if served > 0 else (),
        fairness_index=(sum(p.fairness_index * n for p, n in zip(parts, waiting)) / sum(waiting) if any(waiting)
                        else min(p.fairness_index for p in parts)),
        # each shard counts the members it holds and their jobs queued there: added up
        held=counts("held"), held_jobs=counts("held_jobs"),
    )


def merged_snapshot(snapshots: Sequence[Snapshot]) -> Snapshot:
    """The shards' snapshots as one queue's, as a scrape of the whole fleet would see it (every
    shard counts the fleet's worker slots, so those are one shard's)."""
    first = snapshots[0]
    # A class one shard lacks (a config applied shard by shard, caught midway) merges over the others.
    classes = {name: _merged_class([s.classes[name] for s in snapshots if name in s.classes]) for name in first.classes}
    served = sum(c.processed_window for c in classes.values())
    shares = _summed((((t, n / served) for t, n in c.top_processed) for c in classes.values()),
                     len(first.tenant_shares) or 1) if served else ()
    unconfigured: dict[str, UnconfiguredClass] = {}
    for s in snapshots:
        for name, u in s.unconfigured.items():
            seen = unconfigured.get(name)
            unconfigured[name] = u if seen is None else UnconfiguredClass(
                name, seen.depth + u.depth, seen.inflight + u.inflight, seen.delayed + u.delayed,
                max(seen.oldest_age, u.oldest_age))
    return Snapshot(time=first.time, classes=classes, dead_letters=sum(s.dead_letters for s in snapshots),
                    worker_slots=first.worker_slots, tenant_shares=shares, unconfigured=unconfigured)
