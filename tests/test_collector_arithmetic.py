"""The metric arithmetic of the snapshot builder and the collector, on hand-built readings with
figures worked out by hand: the sliding window's weight, windowed counts and shares, the noisy
rule on both sides of its edges, ages, the wait histogram's fields, the top-k bounds, counters a
reading lacks, and the exporter's own error counters and log lines. No Redis: each test is a
function call or one scrape of a stand-in scheduler (docs/testing.md, "Mutation run of the
collector", tells which mutants these were written against)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import redis
from prometheus_client.core import GaugeMetricFamily

from exporter import metrics as m
from exporter.collector import LIFECYCLE, Families, FairnessCollector, make_registry, scrape_client
from fairness_core import AppliedConfigUnreadable, ClassSnapshot, RedisUnavailable, Snapshot
from fairness_core.jobs import SEP
from fairness_core.snapshot import (
    MAX_NOISY,
    WAIT_BUCKETS_S,
    RawClass,
    UnconfiguredClass,
    _windowed,
    build_snapshot,
    heads_to_read,
    jain_index,
    window_weight,
)

from .conftest import make_config
from .test_exporter_collector import FakeScheduler, class_snapshot, collect, idle_snapshot

WINDOW_MS = 600_000
# A quarter into the current bucket: three quarters of the previous one are still in the window.
NOW_MS = 10 * WINDOW_MS + 150_000
WEIGHT = 0.75


def raw(**values: object) -> RawClass:
    """A class with nothing read; ``values`` override fields."""
    empty: dict[str, object] = dict(heads=[], active_tenants=0, top_backlog=[], top_inflight=[], served_now=[],
                                    served_before=[], served_now_total=0, served_before_total=0, sample=[])
    return RawClass(**{**empty, **values})  # type: ignore[arg-type]


def stat(counter: str, name: str, *more: object) -> str:
    return SEP.join([counter, name, *map(str, more)])


def test_the_previous_bucket_weighs_what_is_left_of_it_in_the_window() -> None:
    assert window_weight(NOW_MS, WINDOW_MS) == WEIGHT
    assert window_weight(3 * WINDOW_MS, WINDOW_MS) == 1.0, "a bucket just begun: the previous one is whole"
    assert window_weight(4 * WINDOW_MS - 60_000, WINDOW_MS) == pytest.approx(0.1)


def test_windowed_counts_add_the_current_bucket_to_the_weighted_previous_one() -> None:
    assert _windowed([("a", 2), ("c", 1)], [("a", 4), ("b", 2)], 0.25) == {"a": 3.0, "b": 0.5, "c": 1.0}


def test_jain_index_of_fractional_service() -> None:
    """Service is weighted by the window, so a served class can add up to less than one job."""
    assert jain_index([0.25, 0.25]) == 1
    assert jain_index([0.5]) == 1
    assert jain_index([3.0, 1.0]) == pytest.approx(16 / 20)


def test_heads_read_are_the_top_k_or_one_more_than_the_noisy_there_can_be() -> None:
    assert heads_to_read(1) == MAX_NOISY + 1 == 19
    assert heads_to_read(40) == 40


def test_every_derived_figure_of_a_busy_reading() -> None:
    """jobs:high sits on the noisy rule's edges from below (exactly 10 %: not noisy), jobs:medium on
    its minimums from above (at the minimum and over 10 %: noisy); ties in the top-k go by name."""
    config = make_config(exporter={"window": "10m", "topk_tenants": 3, "noisy_min_inflight": 3, "noisy_min_queued": 5})
    missing_bucket = 5
    stats = {
        stat("inflight", "jobs:high"): 30, stat("depth", "jobs:high"): 50, stat("delayed", "jobs:high"): 7,
        stat("processed", "jobs:high"): 11, stat("failed", "jobs:high"): 2,
        stat("enq", "jobs:high", "default"): 4, stat("enq", "jobs:high", "over priority budget"): 1,
        stat("ws", "jobs:high"): 12_345,
        **{stat("wb", "jobs:high", i): i for i in range(1, len(WAIT_BUCKETS_S) + 2) if i != missing_bucket},
        stat("inflight", "jobs:medium"): 20, stat("depth", "jobs:medium"): 40,
        stat("depth", "old:a"): 3, stat("inflight", "old:a"): 2, stat("delayed", "old:a"): 1,
        "slots": 8,
    }
    heads = [("x", NOW_MS - 90_500), ("p", NOW_MS - 500), ("ahead", NOW_MS + 2_000), ("later", NOW_MS + 3_000)]
    high = raw(heads=heads, active_tenants=4, top_backlog=[("p", 5), ("x", 4), ("z", 1), ("o", 1)],
               top_inflight=[("x", 3)],
               served_now=[("n", 3), ("m", 3)], served_before=[("w", 8)], served_now_total=6, served_before_total=12,
               sample=[("a", 2, 1, 4), ("b", 1, 3, 0)])
    medium = raw(heads=[("y", NOW_MS - 4_000), ("q", NOW_MS - 3_000), ("r", NOW_MS - 1_500)], active_tenants=3,
                 top_backlog=[("q", 5)], top_inflight=[("y", 3)], served_now=[("m", 1)], served_now_total=1)
    low = raw(served_now=[("d", 4)], served_now_total=4)
    raws = {"jobs:high": high, "jobs:medium": medium, "jobs:low": low}
    unconfigured_heads = {"old:a": NOW_MS - 500, "old:b": None, "old:c": NOW_MS + 1_000}
    snap = build_snapshot(config, NOW_MS, stats, ["jobs:high"], raws, 6, unconfigured_heads)
    buckets = tuple(0 if i == missing_bucket else i for i in range(1, len(WAIT_BUCKETS_S) + 2))
    assert snap.classes["jobs:high"] == ClassSnapshot(
        name="jobs:high", depth=50, inflight=30, delayed=7, paused=True, oldest_age=90.5, active_tenants=4,
        counters={"processed": 11, "failed": 2, "redelivered": 0, "unhandled": 0, "dead": 0, "promoted": 0,
                  "demoted": 0, "rejected": 0, "refused": 0, "deduplicated": 0, "worktime": 0},
        enqueued={"default": 4, "over priority budget": 1}, wait_buckets=buckets, wait_sum=12.345,
        wait_count=sum(buckets),
        top_backlog=(("p", 5), ("x", 4), ("z", 1)), top_inflight=(("x", 3),), noisy_tenants=(), quiet_oldest_age=90.5,
        oldest_tenants=(("x", 90.5), ("p", 0.5), ("ahead", 0.0)),
        processed_window=6 + 12 * WEIGHT, top_processed=(("w", 8 * WEIGHT), ("m", 3.0), ("n", 3.0)),
        tenant_shares=(("w", 6 / 15), ("m", 3 / 15), ("n", 3 / 15)),
        # service (now + before * weight) * cost: a (1 + 3) * 2 = 8, b 3 * 1 = 3
        fairness_index=pytest.approx(11 * 11 / (2 * (8 * 8 + 3 * 3))),
    )
    mid = snap.classes["jobs:medium"]
    assert (mid.paused, mid.noisy_tenants, mid.oldest_age, mid.quiet_oldest_age) == (False, ("y", "q"), 4.0, 1.5)
    assert (mid.processed_window, mid.tenant_shares) == (1.0, (("m", 1.0),))
    # All classes: w 6, m 3 + 1, d 4, n 3 of 15 + 1 + 4; most first, d before m by name, and k = 3.
    assert snap.tenant_shares == (("w", 6 / 20), ("d", 4 / 20), ("m", 4 / 20))
    assert (snap.time, snap.worker_slots, snap.dead_letters) == (NOW_MS / 1000, 8, 6)
    assert snap.unconfigured == {
        "old:a": UnconfiguredClass("old:a", depth=3, inflight=2, delayed=1, oldest_age=0.5),
        "old:b": UnconfiguredClass("old:b", depth=0, inflight=0, delayed=0, oldest_age=0.0),
        "old:c": UnconfiguredClass("old:c", depth=0, inflight=0, delayed=0, oldest_age=0.0),
    }


def test_shares_are_at_most_1_and_none_come_from_an_empty_window() -> None:
    """A tenant's windowed count ahead of its class's total is served as the whole (1), and
    counts next to a zero total give no share at all rather than a division by zero."""
    config = make_config()
    ahead = {"jobs:high": raw(served_now=[("a", 5)], served_now_total=4), "jobs:medium": raw(), "jobs:low": raw()}
    assert build_snapshot(config, NOW_MS, {}, [], ahead, 0, {}).classes["jobs:high"].tenant_shares == (("a", 1.0),)
    nothing = {name: raw(served_now=[("a", 1)]) for name in config.class_names}
    snap = build_snapshot(config, NOW_MS, {}, [], nothing, 0, {})
    assert snap.tenant_shares == () and snap.classes["jobs:high"].tenant_shares == ()
    assert snap.worker_slots == 0


def test_counters_a_reading_lacks_are_served_as_0() -> None:
    config = make_config()
    view = class_snapshot("jobs:high", counters={})
    scrape = collect(config, FakeScheduler(lambda: idle_snapshot(config, jobs_high=view)))
    for spec in (m.JOBS_PROCESSED, m.QUEUE_WORKER_SECONDS, *(spec for spec, _ in LIFECYCLE)):
        assert scrape.value(spec.name, queue="jobs:high") == 0, spec.name


def test_a_class_the_config_dropped_since_the_read_is_still_served() -> None:
    config = make_config()
    snapshot = idle_snapshot(config)
    gone = replace(snapshot, classes={**snapshot.classes, "jobs:gone": class_snapshot("jobs:gone", depth=4)})
    scrape = collect(config, FakeScheduler(lambda: gone))
    assert scrape.value(m.QUEUE_DEPTH.name, queue="jobs:gone") == 4
    assert not [labels for labels in scrape.series(m.JOBS_ENQUEUED.name) if (m.QUEUE, "jobs:gone") in labels]


def test_the_fullest_unconfigured_classes_count_all_three_states() -> None:
    config = make_config()
    filler = {f"old:{i:02d}": UnconfiguredClass(f"old:{i:02d}", depth=10, inflight=0, delayed=0, oldest_age=1.0)
              for i in range(m.MAX_UNCONFIGURED)}
    leased = UnconfiguredClass("old:leased", depth=0, inflight=11, delayed=0, oldest_age=0.0)
    retrying = UnconfiguredClass("old:retrying", depth=0, inflight=0, delayed=11, oldest_age=0.0)
    snapshot = replace(idle_snapshot(config), unconfigured={**filler, leased.name: leased, retrying.name: retrying})
    scrape = collect(config, FakeScheduler(lambda: snapshot))
    served = {dict(labels)[m.QUEUE] for labels in scrape.series(m.UNCONFIGURED_OLDEST_AGE.name)}
    assert served == {"old:leased", "old:retrying", *(f"old:{i:02d}" for i in range(m.MAX_UNCONFIGURED - 2))}
    assert scrape.value(m.UNCONFIGURED_JOBS.name, queue="old:leased", state="inflight") == 11
    assert scrape.value(m.UNCONFIGURED_JOBS.name, queue="old:retrying", state="delayed") == 11


def test_a_stand_in_scrape_serves_its_own_duration_and_no_master() -> None:
    config = make_config()
    scrape = collect(config, FakeScheduler(lambda: idle_snapshot(config)))
    assert 0 <= scrape.value(m.EXPORTER_SCRAPE_DURATION.name) <= scrape.seconds, "part of the scrape, not a clock"
    assert not scrape.series(m.REDIS_MASTER.name), "no Redis was read"


def test_families_refuse_what_the_contract_does_not_say() -> None:
    families = Families("g", "s")
    with pytest.raises(ValueError, match=r"jobs_processed_total: labels \['tenant'\], contract says \['queue'\]"):
        families.add(m.JOBS_PROCESSED, 1, tenant="a")
    with pytest.raises(TypeError, match="jobs_wait_seconds is a histogram, not a gauge or counter"):
        families.add(m.JOBS_WAIT, 1, queue="q")
    with pytest.raises(TypeError, match="queue_depth is a gauge, not a histogram"):
        families.add_histogram(m.QUEUE_DEPTH, [0], 0.0, queue="q")
    with pytest.raises(ValueError, match="zip"):
        families.add_histogram(m.JOBS_WAIT, [1] * len(WAIT_BUCKETS_S), 1.0, queue="q")  # the +Inf count missing
    families.add(m.QUEUE_DEPTH, 2, queue="q")
    depth = next(f for f in families if f.name == m.QUEUE_DEPTH.name)
    assert isinstance(depth, GaugeMetricFamily) and [s.value for s in depth.samples] == [2.0]


@pytest.mark.parametrize("error, logged", [
    (RedisUnavailable("Redis at 127.0.0.1:1 is unavailable"), "Redis at 127.0.0.1:1 is unavailable"),
    (redis.ResponseError("NOSCRIPT gone"), "ResponseError: NOSCRIPT gone"),
    (AppliedConfigUnreadable("applied by a newer release"), "applied by a newer release"),
])
def test_errors_are_counted_by_reason_and_logged_once_per_change(
        error: Exception, logged: str, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config()
    failing = [False]

    def read() -> Snapshot:
        if failing[0]:
            raise error
        return idle_snapshot(config)

    scheduler = FakeScheduler(read)
    collector = FairnessCollector(config, scheduler, version="test")  # type: ignore[arg-type]
    reason = "unavailable" if isinstance(error, RedisUnavailable) else "error"
    down = f"cannot read the scheduler's bookkeeping: {logged}; serving fairness_exporter_redis_up 0"
    again = "Redis readable again; serving queue metrics"
    caplog.set_level(logging.WARNING, logger="exporter.collector")

    def scrape(fails: bool, up: float, logged_so_far: list[str]) -> float:
        failing[0] = fails
        result = collect(config, scheduler, collector)
        assert result.value(m.EXPORTER_REDIS_UP.name) == up
        assert [r.getMessage() for r in caplog.records] == logged_so_far
        return result.value(m.EXPORTER_SCRAPE_ERRORS.name, reason=reason)

    assert scrape(False, 1, []) == 0, "the first scrape that reads Redis logs nothing"
    assert scrape(True, 0, [down]) == 1
    assert scrape(True, 0, [down]) == 2, "counted at every scrape, logged once"
    assert scrape(False, 1, [down, again]) == 2
    assert scrape(False, 1, [down, again]) == 2
    assert scrape(True, 0, [down, again, down]) == 3


def test_a_bug_is_logged_with_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    config = make_config()

    def broken() -> Snapshot:
        raise KeyError("a bug")

    collector = FairnessCollector(config, FakeScheduler(broken), version="test")  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, logger="exporter.collector")
    collect(config, collector.scheduler, collector)  # type: ignore[arg-type]
    (record,) = caplog.records
    assert record.getMessage() == "reading the scheduler's bookkeeping failed" and record.exc_info


def test_the_scrape_client_times_out_within_the_scrape_budget() -> None:
    config = make_config(exporter={"scrape_timeout": "1500ms"})
    options = scrape_client(config).connection_pool.connection_kwargs
    assert (options["socket_connect_timeout"], options["socket_timeout"]) == (1.5, 1.5)
    assert options["port"] == int(config.redis.url.rsplit(":", 1)[1].split("/")[0])
    assert scrape_client(config, "redis://127.0.0.1:1/0").connection_pool.connection_kwargs["port"] == 1


def test_make_registry_serves_the_collector_alone() -> None:
    config = make_config()
    registry = make_registry(config, FakeScheduler(lambda: idle_snapshot(config)))  # type: ignore[arg-type]
    assert registry.get_sample_value(m.QUEUE_DEPTH.name, {m.GROUP: config.redis.prefix, m.SHARD: config.redis.prefix,
                                                          m.QUEUE: "jobs:high"}) == 0
