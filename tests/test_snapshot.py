"""What snapshot() derives for the exporter, checked against figures worked out by hand."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from fairness_core import ClassSnapshot, Lease
from fairness_core.scheduler import Scheduler
from fairness_core.jobs import SEP
from fairness_core.model import Model
from fairness_core.snapshot import MAX_NOISY, RawClass, build_snapshot, heads_to_read, jain_index

from .conftest import make_config
from .test_lifecycle import T0, Clock


def scheduler(client: redis.Redis, **exporter: object) -> tuple[Scheduler, Clock]:
    clock = Clock()
    config = make_config(exporter={"window": "10m", "noisy_min_inflight": 3, **exporter},
                         tenants={"batch": 1})
    return Scheduler(config, client, clock=clock), clock


def work(s: Scheduler, n: int) -> list[Lease]:
    leases = []
    for _ in range(n):
        leases += s.pop(1)
    return leases


def test_jain_index() -> None:
    assert jain_index([5, 5, 5]) == 1
    assert jain_index([10, 0]) == 0.5
    assert jain_index([]) == 1, "nobody waits: nothing unfair"
    assert jain_index([0, 0]) == 0, "tenants wait and none is served: starved, not fair"


def test_noisy_tenant_and_quiet_tenants_oldest_age(client: redis.Redis) -> None:
    s, clock = scheduler(client)
    s.enqueue("newsletter", "quiet")
    for _ in range(20):
        s.enqueue("newsletter", "storm")
    clock.advance(30)
    s.enqueue("newsletter", "late")
    s.pop(8, classes=["jobs:low"])  # batch 1: round-robin quiet, storm, late, storm, storm ...
    low = s.snapshot().classes["jobs:low"]
    assert dict(low.top_inflight)["storm"] == 6
    assert low.noisy_tenants == ("storm",)
    assert low.oldest_age == pytest.approx(30), "storm's next job has waited since t=0"
    assert low.quiet_oldest_age == 0, "quiet and late have nothing left waiting"


def serve_two_backlogged_tenants(s: Scheduler, jobs: int) -> ClassSnapshot:
    """Tenants a and b queue 10 jobs each in jobs:low; ``jobs`` of them are worked and acked."""
    for tenant in ("a", "b"):
        for _ in range(10):
            s.enqueue("newsletter", tenant)
    for lease in work(s, jobs):
        s.ack(lease)
    return s.snapshot().classes["jobs:low"]


def test_fairness_index_over_backlogged_tenants(client: redis.Redis) -> None:
    s, _ = scheduler(client)
    low = serve_two_backlogged_tenants(s, 6)
    assert low.fairness_index == pytest.approx(1.0), "weighted-fair served a and b alike"
    assert low.processed_window == 6 and dict(low.top_processed) == {"a": 3.0, "b": 3.0}


def test_fairness_index_sees_an_unfair_policy(client: redis.Redis) -> None:
    s = Scheduler(make_config(scheduler={"policy": "weighted"}), client)
    low = serve_two_backlogged_tenants(s, 8)
    assert low.fairness_index == pytest.approx(0.5), "FIFO inside the class served only a"
    assert low.top_processed[0] == ("a", 8.0)
    assert s.snapshot().tenant_shares[0] == ("a", 1.0)


def test_the_busiest_tenant_is_named_whenever_it_first_came(client: redis.Redis) -> None:
    """Hundreds of tenants complete a job each; then one more floods: it heads the class's top-k
    with its share of the window, and once it stops, it leaves the list within a window."""
    s, clock = scheduler(client, topk_tenants=3)
    for i in range(300):
        s.enqueue("newsletter", f"early-{i:03d}")
    for lease in work(s, 300):
        s.ack(lease)
    clock.advance(60)
    for _ in range(400):
        s.enqueue("newsletter", "late")
    for lease in work(s, 400):
        s.ack(lease)
    low = s.snapshot().classes["jobs:low"]
    assert len(low.tenant_shares) == 3
    assert low.tenant_shares[0] == ("late", pytest.approx(400 / 700))
    assert low.counters["processed"] == 700
    clock.advance(20 * 60)  # two windows: the flood's buckets have left the window
    s.enqueue("newsletter", "early-000")
    s.ack(work(s, 1)[0])
    assert s.snapshot().classes["jobs:low"].tenant_shares == (("early-000", 1.0),)


def test_quiet_age_found_behind_the_most_noisy_tenants_there_can_be() -> None:
    """18 noisy tenants (9 by in-flight jobs, 9 by queued ones) hold the oldest heads: the
    snapshot reads enough heads to reach the quiet tenant behind them."""
    config = make_config(exporter={"noisy_min_inflight": 1, "noisy_min_queued": 1})
    assert heads_to_read(config.exporter.topk_tenants) > MAX_NOISY
    by_inflight = [(f"busy-{i}", 2.0) for i in range(9)]
    by_backlog = [(f"deep-{i}", 11.0) for i in range(9)]
    heads = [(t, float(i)) for i, (t, _) in enumerate(by_inflight + by_backlog)] + [("quiet", 100.0)]
    raw = RawClass(heads=heads[: heads_to_read(config.exporter.topk_tenants)], active_tenants=19,
                   top_backlog=by_backlog + [("quiet", 1.0)], top_inflight=by_inflight, served_now=[],
                   served_before=[], served_now_total=0, served_before_total=0, sample=[])
    stats = {f"inflight{SEP}jobs:low": 18, f"depth{SEP}jobs:low": 100}
    empty = RawClass(heads=[], active_tenants=0, top_backlog=[], top_inflight=[], served_now=[], served_before=[],
                     served_now_total=0, served_before_total=0, sample=[])
    raws = {name: (raw if name == "jobs:low" else empty) for name in config.class_names}
    low = build_snapshot(config, 1_000_000.0, stats, [], raws, 0, {}).classes["jobs:low"]
    assert len(low.noisy_tenants) == 18
    assert low.quiet_oldest_age == pytest.approx((1_000_000 - 100) / 1000)


def test_window_buckets_age_out(client: redis.Redis) -> None:
    s, clock = scheduler(client)
    s.enqueue("newsletter", "a")
    (lease,) = s.pop()
    s.ack(lease)
    assert s.snapshot().classes["jobs:low"].processed_window == 1
    clock.advance(25 * 60)
    assert s.snapshot().classes["jobs:low"].processed_window == 0
    assert s.snapshot().tenant_shares == ()


def test_a_flood_kept_to_few_slots_is_still_noisy_by_its_backlog(client: redis.Redis) -> None:
    s, clock = scheduler(client, noisy_min_queued=100)
    for _ in range(300):
        s.enqueue("newsletter", "storm")
    s.pop(1)  # one storm job in flight: below noisy_min_inflight
    clock.advance(60)
    s.enqueue("newsletter", "digest")
    clock.advance(5)
    low = s.snapshot().classes["jobs:low"]
    assert low.noisy_tenants == ("storm",)
    assert low.oldest_age == pytest.approx(65) and low.quiet_oldest_age == pytest.approx(5)


def test_a_snapshot_survives_a_redis_that_forgot_its_functions(client: redis.Redis) -> None:
    """The snapshot's calls go out as one pipeline; after FUNCTION FLUSH (as after a Redis restart
    without persistence) it loads the library and reads the same figures."""
    s, _ = scheduler(client)
    s.enqueue("newsletter", "a")
    before = s.snapshot().classes["jobs:low"]
    client.function_flush()
    after = s.snapshot().classes["jobs:low"]
    assert (after.depth, after.top_backlog) == (before.depth, before.top_backlog) == (1, (("a", 1),))


def test_a_snapshot_follows_a_config_applied_by_another_process(client: redis.Redis) -> None:
    """Every call of the pipelined snapshot is refused under a stale config; the reader syncs and
    reads all classes again under the applied one."""
    s, clock = scheduler(client)
    other = Scheduler(s.file_config, client, clock=clock)
    s.enqueue("newsletter", "a")
    s.snapshot()
    classes = tuple(dataclasses.replace(c, weight=c.weight + 1) for c in other.config.classes)
    other.apply(dataclasses.replace(other.config, classes=classes))
    snap = s.snapshot()
    assert s.settings.fingerprint == other.settings.fingerprint
    assert snap.classes["jobs:low"].depth == 1


def test_the_fairness_index_reads_0_while_tenants_wait_and_nobody_is_served(client: redis.Redis) -> None:
    """250 jobs queued for 5 tenants, none processed: a starved class, not a fair one. The exporter
    serves 0 (below any served class's 1/n), never the 1 that says "fair"; an idle class reads 1."""
    from exporter import metrics as m

    from .test_exporter_collector import FakeScheduler, collect

    s, _ = scheduler(client)
    for i in range(250):
        s.enqueue("newsletter", f"tenant-{i % 5}")
    low = s.snapshot().classes["jobs:low"]
    assert low.active_tenants == 5 and low.processed_window == 0
    assert low.fairness_index == 0
    scrape = collect(s.config, FakeScheduler(s.snapshot))
    assert scrape.value(m.QUEUE_FAIRNESS_INDEX.name, queue="jobs:low") == 0
    assert scrape.value(m.QUEUE_FAIRNESS_INDEX.name, queue="jobs:high") == 1, "nobody waits in an idle class"


def test_every_windowed_figure_reads_the_same_window_just_before_and_after_a_bucket_edge(client: redis.Redis) -> None:
    """Snapshots 2 ms apart across a bucket edge, with nothing served between, read the same window
    (the previous bucket counts all but 1/600,000 of itself just after the edge), so every windowed
    figure is the same, from the script as from the reference model: the tenants' and accounts'
    shares, the fairness index, and each account's key breakdown, which was read from the current
    bucket alone and vanished at every edge."""
    config = make_config(exporter={"window": "10m"}, tenants={"batch": 1, "account_separator": "/"})
    edge = (T0 // 600_000 + 1) * 600_000
    clock = Clock()
    clock.ms = edge - 60_000
    lua, model = Scheduler(config, client, clock=clock), Model(config)
    for tenant, jobs in [*((f"big/k{k}", 4) for k in range(5)), ("shop-1", 10), ("shop-2", 10)]:
        lua.submit_many("newsletter", tenant, [None] * jobs)
        model.submit_many(clock.ms, "newsletter", tenant, jobs)
    for _ in range(12):
        for lease in lua.pop(1):
            lua.ack(lease)
        for lease in model.pop(clock.ms, 1):
            model.ack(clock.ms, lease)
    views = []
    for clock.ms in (edge - 1, edge + 1):
        snapshot = lua.snapshot()
        assert snapshot == model.snapshot(clock.ms)
        views.append(snapshot.classes["jobs:low"])
    before, after = views
    keys = [(a, t) for a, t, _ in before.account_tenants]
    assert len(keys) == 5 and {a for a, _ in keys} == {"big", "shop-1", "shop-2"}, keys  # big's busiest 3
    for figure in ("account_tenants", "account_shares", "tenant_shares"):
        rows = [{row[:-1]: row[-1] for row in getattr(view, figure)} for view in views]
        assert rows[1] == pytest.approx(rows[0]), figure
    assert after.fairness_index == pytest.approx(before.fairness_index)


def test_held_tenants_and_accounts_are_read_from_the_stats_as_the_model_keeps_them(client: redis.Redis) -> None:
    """An account at its cap holds its keys' jobs (account_cap), a key at its own cap its own (cap):
    the snapshot reads both from the stats, the same from the Lua and the model."""
    config = make_config(tenants={"account_separator": "/", "account_max_in_flight": 2,
                                  "overrides": {"big/k0": {"max_in_flight": 1}, "solo": {"max_in_flight": 1}}})
    clock = Clock()
    lua, model = Scheduler(config, client, clock=clock), Model(config)
    for tenant, jobs in (("big/k0", 3), ("big/k1", 3), ("solo", 4)):
        lua.submit_many("newsletter", tenant, [None] * jobs)
        model.submit_many(clock.ms, "newsletter", tenant, jobs)
    popped = sorted(lease.tenant for lease in lua.pop(10))
    assert popped == sorted(lease.tenant for lease in model.pop(clock.ms, 10)) == ["big/k0", "big/k1", "solo"]
    snapshot = lua.snapshot()
    assert snapshot == model.snapshot(clock.ms)
    low = snapshot.classes["jobs:low"]
    # big (2 running) with its keys' 4 jobs queued; solo at its cap of 1 with 3.
    assert (low.held, low.held_jobs) == ({"cap": 1, "account_cap": 1}, {"cap": 3, "account_cap": 4})
    assert all(not view.held and not view.held_jobs for name, view in snapshot.classes.items() if name != "jobs:low")
