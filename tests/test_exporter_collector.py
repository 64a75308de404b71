"""The collector and the metric contract on hand-built snapshots (no Redis): zero-filled classes,
histogram buckets, the scrape budget, error counting and recovery, listen addresses."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from exporter import metrics as m
from exporter.collector import FairnessCollector, snapshot_deadline
from exporter.server import DEFAULT_PORT, listen_address, parse_listen
from fairness_core import ClassSnapshot, Config, RedisUnavailable, Snapshot
from fairness_core.snapshot import COUNTERS, WAIT_BUCKETS_S

from .conftest import make_config
from .exporter_support import Scrape, parse, promtool_check_metrics


def class_snapshot(name: str, **values: Any) -> ClassSnapshot:
    """An idle class; ``values`` override fields."""
    empty: dict[str, Any] = dict(
        name=name, depth=0, inflight=0, delayed=0, paused=False, oldest_age=0.0, active_tenants=0,
        counters={c: 0 for c in COUNTERS}, enqueued={}, wait_buckets=(0,) * (len(WAIT_BUCKETS_S) + 1),
        wait_sum=0.0, wait_count=0, top_backlog=(), top_inflight=(), noisy_tenants=(), quiet_oldest_age=0.0,
        oldest_tenants=(), processed_window=0.0, top_processed=(), tenant_shares=(),
        fairness_index=1.0,
    )
    return ClassSnapshot(**{**empty, **values})


def idle_snapshot(config: Config, **classes: ClassSnapshot) -> Snapshot:
    views = {name: classes.get(name.replace(":", "_"), class_snapshot(name)) for name in config.class_names}
    return Snapshot(time=time.time(), classes=views, dead_letters=0, worker_slots=0, tenant_shares=())


class FakeScheduler:
    """Stands in for Scheduler: ``snapshot()`` runs ``read`` and counts calls."""

    def __init__(self, read: Callable[[], Snapshot]) -> None:
        self.read = read
        self.calls = 0

    def snapshot(self) -> Snapshot:
        self.calls += 1
        return self.read()


def collect(config: Config, scheduler: FakeScheduler, collector: FairnessCollector | None = None) -> Scrape:
    collector = collector or FairnessCollector(config, scheduler, version="test")  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(collector)
    started = time.monotonic()
    text = generate_latest(registry).decode()
    return Scrape(text, parse(text), time.monotonic() - started, time.time())


def quick(budget: float = 0.5) -> Config:
    return make_config(exporter={"scrape_timeout": f"{int(budget * 1000)}ms"})


def test_contract_names_are_unique_and_counters_end_in_total() -> None:
    names = [spec.name for spec in m.ALL]
    assert len(names) == len(set(names))
    assert {s.name for s in m.ALL if s.kind is m.Kind.COUNTER} == {n for n in names if n.endswith("_total")}
    assert m.JOBS_PROCESSED.family_name == "jobs_processed" and m.JOBS_WAIT.series("_bucket") == "jobs_wait_seconds_bucket"
    with pytest.raises(ValueError, match="_total"):
        m.MetricSpec("jobs_things", m.Kind.COUNTER, (), "no suffix")
    with pytest.raises(ValueError, match="no series"):
        m.QUEUE_DEPTH.series("_bucket")


@pytest.mark.parametrize("separator", [None, "/"])
def test_idle_classes_report_zero_for_every_series_and_the_config_gauges(separator: str | None) -> None:
    """Every per-class series from the start; the account ones only with accounts, the held ones
    (queue_held_*) only with dispatch limits."""
    config = make_config(tenants={"account_separator": separator} if separator else {})
    scrape = collect(config, FakeScheduler(lambda: idle_snapshot(config)))
    served = [s for s in m.ALL if separator or s not in m.ACCOUNTS]
    per_queue = [s for s in served if s.labels == (m.QUEUE,) and s.kind is not m.Kind.HISTOGRAM and s not in m.UNCONFIGURED]
    assert separator or not [s for s in m.ACCOUNTS if f"\n{s.name}" in scrape.text], "account series without accounts"
    assert not [s for s in m.HOLDS if f"\n{s.name}" in scrape.text], "held series without dispatch limits"
    for name in config.class_names:
        for spec in per_queue:
            assert scrape.get(spec.name, queue=name) is not None, (spec.name, name)
        for spec in m.FROM_REDIS:
            if spec in per_queue and spec is not m.QUEUE_FAIRNESS_INDEX and spec.kind is m.Kind.GAUGE:
                assert scrape.value(spec.name, queue=name) == 0, spec.name
        assert scrape.value(m.JOBS_PROCESSED.name, queue=name) == 0
        assert scrape.value(m.JOBS_WAIT.series("_count"), queue=name) == 0
    # The rules' reasons exist from the start, so increase() sees the first arrival.
    assert scrape.value(m.JOBS_ENQUEUED.name, queue="jobs:medium", reason="default") == 0
    assert scrape.value(m.QUEUE_WEIGHT_RATIO.name, queue="jobs:high") == pytest.approx(0.7)
    assert scrape.value(m.QUEUE_MAX_AGE.name, queue="jobs:low") == 3600
    assert scrape.value(m.QUEUE_ARRIVAL_BUDGET.name, queue="jobs:high") == pytest.approx(0.2)
    assert scrape.value(m.QUEUE_ARRIVAL_BUDGET.name, queue="jobs:low") == 1
    assert scrape.value(m.EXPORTER_REDIS_UP.name) == 1
    assert scrape.value(m.EXPORTER_BUILD_INFO.name, version="test", charge="jobs") == 1
    assert {scrape.value(m.EXPORTER_SCRAPE_ERRORS.name, reason=r) for r in m.SCRAPE_ERROR_REASONS} == {0}


def test_every_family_of_a_busy_scrape_is_in_the_contract_and_promtool_accepts_odd_tenants() -> None:
    # With accounts and dispatch limits: every family is served.
    config = make_config(tenants={"account_separator": "/", "max_in_flight": 5, "account_dispatch_rate": "10/s"})
    odd = ['quote"d', "back\\slash", "ünïcødé 租户", "{braces}:and/slashes"]
    busy = class_snapshot(
        "jobs:high", depth=5, inflight=12, delayed=1, paused=True, oldest_age=42.5, active_tenants=4,
        counters={**{c: 3 for c in COUNTERS}}, enqueued={"a human is blocked on this": 9, "over priority budget": 2},
        wait_buckets=(1,) + (0,) * (len(WAIT_BUCKETS_S) - 1) + (2,), wait_sum=7300.5, wait_count=3,
        noisy_tenants=(odd[0],), quiet_oldest_age=3.0, oldest_tenants=tuple((t, 40.0 - i) for i, t in enumerate(odd)),
        tenant_shares=tuple((t, 0.25) for t in odd), fairness_index=0.5,
        active_accounts=3, account_shares=tuple((t, 0.3) for t in odd[:3]), quiet_accounts_oldest_age=2.5,
        account_tenants=tuple((t, f"{t}/key", 1.0) for t in odd[:3]),
        held={"cap": 2}, held_jobs={"cap": 7, "account_rate": 3},
    )
    snapshot = replace(idle_snapshot(config, jobs_high=busy), tenant_shares=((odd[0], 0.6), (odd[2], 0.4)),
                       worker_slots=8, dead_letters=3)
    scrape = collect(config, FakeScheduler(lambda: snapshot))
    families = {spec.name for spec in m.ALL}
    histogram = {m.JOBS_WAIT.series(s) for s in ("_bucket", "_sum", "_count")}
    assert scrape.names() <= families | histogram
    # Classes the config does not name, Redis's memory and the applied config's version come from a
    # real Scheduler: tests/test_unconfigured_exporter.py, test_memory_live.py, test_applied_config_live.py
    # (and its fingerprint as the group's, test_sharded_applies.py); the Redis holding the group,
    # tests/test_exporter.py.
    unserved = {spec.name for spec in (*m.UNCONFIGURED, *m.REDIS_MEMORY, m.CONFIG_VERSION, m.GROUP_CONFIG,
                                       m.REDIS_MASTER, m.STATE_RESETS)}
    assert scrape.names() >= (families - {m.JOBS_WAIT.name} - unserved) | histogram
    assert scrape.value(m.QUEUE_PAUSED.name, queue="jobs:high") == 1
    assert scrape.value(m.QUEUE_NOISY_TENANTS.name, queue="jobs:high") == 1
    assert scrape.value(m.JOBS_ENQUEUED.name, queue="jobs:high", reason="over priority budget") == 2
    assert scrape.value(m.JOBS_PROCESSED.name, queue="jobs:high") == 3
    assert scrape.value(m.QUEUE_TENANT_SHARE.name, queue="jobs:high", tenant=odd[1]) == 0.25
    assert scrape.value(m.TENANT_OLDEST_AGE.name, queue="jobs:high", tenant=odd[3]) == 37
    assert scrape.value(m.QUEUE_ACCOUNT_SHARE.name, queue="jobs:high", account=odd[2]) == 0.3
    assert scrape.value(m.QUEUE_ACCOUNT_TENANT_SHARE.name, queue="jobs:high", account=odd[0], tenant=f"{odd[0]}/key") == 1
    assert scrape.value(m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name, queue="jobs:high") == 2.5
    # The reasons the config's limits give, 0 included; no other.
    assert {(labels, v) for (name, labels), v in scrape.samples.items() if name == m.QUEUE_HELD_JOBS.name
            and dict(labels)[m.QUEUE] == "jobs:high"} == {
        (((m.QUEUE, "jobs:high"), (m.REASON, "cap")), 7), (((m.QUEUE, "jobs:high"), (m.REASON, "account_rate")), 3)}
    assert scrape.value(m.QUEUE_HELD_TENANTS.name, queue="jobs:high", reason="cap") == 2
    assert scrape.value(m.QUEUE_HELD_TENANTS.name, queue="jobs:high", reason="account_rate") == 0
    assert scrape.value(m.QUEUE_HELD_JOBS.name, queue="jobs:low", reason="cap") == 0
    assert scrape.value(m.TENANT_SHARE.name, tenant=odd[2]) == pytest.approx(0.4)
    assert (scrape.value(m.WORKER_SLOTS.name), scrape.value(m.DEAD_LETTERS.name)) == (8, 3)
    for spec, counter in (
        (m.JOBS_FAILED, "failed"), (m.JOBS_UNHANDLED, "unhandled"), (m.JOBS_DEAD_LETTERED, "dead"),
        (m.JOBS_REJECTED, "rejected"),
        (m.JOBS_REFUSED, "refused"), (m.JOBS_DEDUPLICATED, "deduplicated"),
    ):
        assert scrape.value(spec.name, queue="jobs:high") == busy.counters[counter]
    checked = promtool_check_metrics(scrape.text)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


@pytest.mark.parametrize("charge", ["jobs", "runtime"])
def test_worker_time_is_served_in_seconds_and_the_info_metric_names_the_charge(charge: str) -> None:
    """Redis counts worker time in microseconds under either charge; Prometheus reads seconds, and
    the info metric tells what the served shares are shares of."""
    config = make_config(scheduler={"charge": charge})
    busy = class_snapshot("jobs:high", counters={**{c: 0 for c in COUNTERS}, "worktime": 2_500_001},
                          processed_window=7_000_000.0, top_processed=(("acme", 5_250_000.0),),
                          tenant_shares=(("acme", 0.75),))
    scrape = collect(config, FakeScheduler(lambda: idle_snapshot(config, jobs_high=busy)))
    assert scrape.value(m.QUEUE_WORKER_SECONDS.name, queue="jobs:high") == pytest.approx(2.500001)
    assert scrape.value(m.QUEUE_WORKER_SECONDS.name, queue="jobs:low") == 0
    assert scrape.value(m.QUEUE_TENANT_SHARE.name, queue="jobs:high", tenant="acme") == 0.75  # a ratio either way
    assert scrape.value(m.EXPORTER_BUILD_INFO.name, version="test", charge=charge) == 1
    assert len(scrape.series(m.EXPORTER_BUILD_INFO.name)) == 1


def test_wait_histogram_buckets_are_cumulative_with_the_slos_as_edges() -> None:
    config = make_config()
    counts = [0] * (len(WAIT_BUCKETS_S) + 1)
    counts[0], counts[WAIT_BUCKETS_S.index(60)], counts[-1] = 4, 3, 1  # <=50ms, <=60s, over a day
    view = class_snapshot("jobs:high", wait_buckets=tuple(counts), wait_sum=90000.2, wait_count=8)
    scrape = collect(config, FakeScheduler(lambda: idle_snapshot(config, jobs_high=view)))
    bucket = m.JOBS_WAIT.series("_bucket")
    assert scrape.value(bucket, queue="jobs:high", le="0.05") == 4
    assert scrape.value(bucket, queue="jobs:high", le="30.0") == 4
    assert scrape.value(bucket, queue="jobs:high", le="60.0") == 7
    assert scrape.value(bucket, queue="jobs:high", le="86400.0") == 7
    assert scrape.value(bucket, queue="jobs:high", le="+Inf") == 8
    assert scrape.value(m.JOBS_WAIT.series("_count"), queue="jobs:high") == 8
    assert scrape.value(m.JOBS_WAIT.series("_sum"), queue="jobs:high") == pytest.approx(90000.2)


def test_redis_down_serves_config_and_health_only_counts_and_recovers() -> None:
    config = make_config()
    down = True

    def read() -> Snapshot:
        if down:
            raise RedisUnavailable("Redis at 127.0.0.1:1 is unavailable (ConnectionError)")
        return idle_snapshot(config)

    scheduler = FakeScheduler(read)
    collector = FairnessCollector(config, scheduler, version="test")  # type: ignore[arg-type]
    for expected_errors in (1, 2):
        scrape = collect(config, scheduler, collector)
        assert scrape.value(m.EXPORTER_REDIS_UP.name) == 0
        assert scrape.value(m.EXPORTER_SCRAPE_ERRORS.name, reason="unavailable") == expected_errors
        assert scrape.get(m.QUEUE_DEPTH.name, queue="jobs:high") is None, "absent, not a reassuring 0"
        assert scrape.value(m.QUEUE_MAX_AGE.name, queue="jobs:high") == 60
    down = False
    scrape = collect(config, scheduler, collector)
    assert scrape.value(m.EXPORTER_REDIS_UP.name) == 1 and scrape.value(m.QUEUE_DEPTH.name, queue="jobs:high") == 0
    assert scrape.value(m.EXPORTER_SCRAPE_ERRORS.name, reason="unavailable") == 2


def test_a_stalled_snapshot_costs_the_scrape_its_redis_series_not_its_answer(caplog: pytest.LogCaptureFixture) -> None:
    config = quick(0.5)
    caplog.set_level(logging.WARNING, logger="exporter.collector")
    release = threading.Event()

    def stalled() -> Snapshot:
        release.wait(10)
        return idle_snapshot(config)

    scheduler = FakeScheduler(stalled)
    collector = FairnessCollector(config, scheduler, version="test")  # type: ignore[arg-type]
    scrapes: list[Scrape] = []
    threads = [threading.Thread(target=lambda: scrapes.append(collect(config, scheduler, collector))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(scrapes) == 3
    for scrape in scrapes:
        assert scrape.seconds < 0.5 + 1.0
        assert scrape.value(m.EXPORTER_REDIS_UP.name) == 0
    assert scheduler.calls == 1, "concurrent scrapes wait for the read in flight instead of starting more"
    # Logged by whichever scrape failed first (the three may race to it), with the deadline and the budget.
    assert caplog.records and {r.getMessage() for r in caplog.records} == {
        "cannot read the scheduler's bookkeeping: no snapshot within 0.40s (exporter.scrape_timeout 0.5s); "
        "serving fairness_exporter_redis_up 0"}
    assert collect(config, scheduler, collector).value(m.EXPORTER_SCRAPE_ERRORS.name, reason="timeout") == 4
    release.set()
    time.sleep(0.05)
    assert collect(config, scheduler, collector).value(m.EXPORTER_REDIS_UP.name) == 1
    assert scheduler.calls == 2


def test_unexpected_errors_are_counted_not_raised() -> None:
    config = make_config()

    def broken() -> Snapshot:
        raise KeyError("a bug")

    scrape = collect(config, FakeScheduler(broken))
    assert scrape.value(m.EXPORTER_REDIS_UP.name) == 0
    assert scrape.value(m.EXPORTER_SCRAPE_ERRORS.name, reason="error") == 1


def test_snapshot_deadline_leaves_room_to_answer() -> None:
    assert snapshot_deadline(2.0) == pytest.approx(1.75)
    assert snapshot_deadline(0.5) == pytest.approx(0.4)


@pytest.mark.parametrize("text, expected", [
    ("0.0.0.0:9000", ("0.0.0.0", 9000)), ("[::1]:29100", ("::1", 29100)), (":8080", ("0.0.0.0", 8080)),
    ("localhost:1", ("localhost", 1)),
])
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["nope", "host:", "host:0", "host:65536", "host:http", "[::1]"])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_listen(text)


def test_listen_defaults_to_the_documented_port() -> None:
    assert listen_address(None) == ("0.0.0.0", DEFAULT_PORT)
    assert listen_address("127.0.0.1:9999") == ("127.0.0.1", 9999)
