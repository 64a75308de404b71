"""The load generator and the drill's time compression, on a real redis-server."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from alerts.rules import starving_for
from fairness_core import Scheduler
from fairness_core.jobs import InvalidJob
from fairness_sim.arrivals import all_arrivals
from fairness_sim.loadgen import LoadGenerator, Replay, volume_for
from fairness_sim.scenario import (
    DEFAULT_SCENARIO,
    Scenario,
    load_scenario,
    parse_scenario,
)
from fairness_sim.timescale import SpeedTooHigh, compress

from .conftest import EXAMPLE_CONFIG, make_config
from .support import totals


def small_scenario(config_prefix: str) -> Scenario:
    return parse_scenario({
        "name": "small", "duration": "10m", "seed": 7, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"redis.prefix": config_prefix},
        "workers": [{"name": "w", "count": 2}],
        "streams": [
            {"name": "burst", "task": "newsletter", "tenant": "acme", "arrivals": {"burst": {"at": "0s", "count": 1000}},
             "service_s": {"constant": 2}},
            {"name": "resets", "task": "password_reset", "tenant": {"pool": 5, "prefix": "shop-"},
             "arrivals": {"constant": {"rate_per_s": 1}}, "service_s": {"constant": 1}},
        ],
    }, source="small.yaml")


def test_submit_many_queues_each_job_as_submit_does(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(), client)
    done = scheduler.submit_many("newsletter", "acme", [{"n": i} for i in range(5)])
    assert [d.queue for d in done if d] == ["jobs:low"] * 5 and len({d.job_id for d in done if d}) == 5
    assert [lease.payload for lease in scheduler.pop(5)] == [{"n": i} for i in range(5)]
    with pytest.raises(InvalidJob, match="payload"):
        scheduler.submit_many("newsletter", "acme", [{"ok": 1}, {"bad": float("nan")}])
    assert totals(scheduler)["depth"] == 0  # the bad payload stopped the whole batch before Redis


def test_replay_keeps_every_volume_th_job_and_each_stream_first(client: redis.Redis) -> None:
    config = make_config()
    scenario = small_scenario(config.redis.prefix)
    replay = Replay(speed=600, volume=10, until=60)
    scheduler = Scheduler(config, client)
    stats = LoadGenerator(scenario, scheduler, replay).run()
    resets = sum(1 for a in all_arrivals(scenario, 60) if a.stream == 1)
    assert stats.enqueued == {"burst": 100, "resets": -(-resets // 10)}  # the first reset is always kept
    assert stats.rejected == {"burst": 0, "resets": 0}
    jobs = scheduler.pop(50)
    # Live service time: scenario time x volume / speed.
    assert {lease.payload["service_s"] for lease in jobs if lease.task == "newsletter"} == {round(2 * 10 / 600, 4)}


def test_volume_is_set_by_the_largest_burst_and_the_fleet_rate() -> None:
    storm = load_scenario(DEFAULT_SCENARIO)
    assert volume_for(storm, 120, max_rate=150, max_burst=20_000) == 115  # 2.3M newsletters at once
    small = small_scenario("v")
    assert volume_for(small, 1, max_rate=150, max_burst=20_000) == 1
    assert volume_for(small, 600, max_rate=150, max_burst=20_000) == pytest.approx(2 / 1 * 600 / 150)
    with pytest.raises(ValueError, match="volume"):
        Replay(speed=1, volume=0.5, until=1)


def test_compress_divides_every_duration_and_scales_job_counts() -> None:
    config = make_config()
    replay = Replay(speed=100, volume=10, until=60)
    fast = compress(config, replay, scrape_interval=1.0)
    for slow, quick in zip(config.classes, fast.classes):
        assert quick.max_age == pytest.approx(slow.max_age / 100)
        assert quick.starving_for == pytest.approx(starving_for(config, slow) / 100)
    assert fast.alerts.rate_window == pytest.approx(6.0)
    assert fast.alerts.for_durations["QueueStalled"] == pytest.approx(3.0)
    assert fast.scheduler.budget_window == pytest.approx(6.0)
    assert fast.leases.visibility_timeout == pytest.approx(config.leases.visibility_timeout / 10)  # job time
    assert fast.alerts.inversion_max_depth == 0 and fast.scheduler.budget_min_arrivals == 10
    assert fast.exporter.noisy_min_queued == config.exporter.noisy_min_queued
    assert dataclasses.replace(fast, classes=config.classes, scheduler=config.scheduler, leases=config.leases,
                               exporter=config.exporter, alerts=config.alerts) == config


def test_compress_refuses_a_rate_window_too_short_to_rate_over() -> None:
    with pytest.raises(SpeedTooHigh, match="at most 150"):
        compress(make_config(), Replay(speed=300, volume=1, until=60), scrape_interval=1.0)
