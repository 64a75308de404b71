"""The load generator and the drill's time compression, on a real redis-server."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from click.testing import CliRunner

from alerts.config import alert_settings
from alerts.rules import starving_for
from fairness_core import Queue
from fairctl.cli import app
from fairness_core.jobs import InvalidJob
from fairness_sim.arrivals import all_arrivals
from fairness_sim.loadgen import LoadGenerator, Replay, live_changes, volume_for
from fairness_sim.scenario import (
    DEFAULT_SCENARIO,
    Scenario,
    load_scenario,
    parse_scenario,
)
from fairness_sim.simulator import scenario_config
from fairness_sim.timescale import SpeedTooHigh, compress

from .conftest import EXAMPLE_CONFIG, GivenRedis, make_config
from .support import totals


def scenario_data(name: str, duration: str, prefix: str, streams: list[dict[str, Any]],
                  **more: Any) -> dict[str, Any]:
    """A scenario on the example config under the queue group ``prefix``."""
    return {"name": name, "duration": duration, "seed": 7, "config": str(EXAMPLE_CONFIG),
            "config_patch": {"redis.prefix": prefix}, "workers": [{"name": "w", "count": 2}], "streams": streams,
            **more}


def small_scenario(config_prefix: str) -> Scenario:
    return parse_scenario(scenario_data("small", "10m", config_prefix, [
        {"name": "burst", "task": "newsletter", "tenant": "acme", "arrivals": {"burst": {"at": "0s", "count": 1000}},
         "service_s": {"constant": 2}},
        {"name": "resets", "task": "password_reset", "tenant": {"pool": 5, "prefix": "shop-"},
         "arrivals": {"constant": {"rate_per_s": 1}}, "service_s": {"constant": 1}},
    ]), source="small.yaml")


def test_submit_many_queues_each_job_as_submit_does(client: redis.Redis) -> None:
    scheduler = Queue(make_config(), client)
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
    scheduler = Queue(config, client)
    stats = LoadGenerator(scenario, scheduler, replay).run()
    resets = sum(1 for a in all_arrivals(scenario, 60) if a.stream == 1)
    assert stats.enqueued == {"burst": 100, "resets": -(-resets // 10)}  # the first reset is always kept
    assert stats.rejected == {"burst": 0, "resets": 0}
    jobs = scheduler.pop(50)
    # Live service time: scenario time x volume / speed.
    assert {lease.payload["service_s"] for lease in jobs if lease.task == "newsletter"} == {round(2 * 10 / 600, 4)}


def test_what_arrives_after_a_burst_is_queued_behind_all_of_it(client: redis.Redis) -> None:
    """Under fifo the order of arrival is the schedule. The burst at 0s is written before the
    clock starts, so the resets that follow it (the second 1.7 ms later, at speed 600) are served
    after all of it, however long it takes to write: written beside them instead, the burst let
    the first reset overtake it, and the storm's drill then paged for the next one, minutes late.
    The reset at 0s is written right after the burst and may share its last millisecond; fifo
    compares enqueue times to the millisecond and gives a tie to the more urgent class, so it
    may overtake the burst jobs of that one millisecond, and only those."""
    config = make_config(scheduler={"policy": "fifo"})
    scheduler = Queue(config, client)
    stats = LoadGenerator(small_scenario(config.redis.prefix), scheduler, Replay(speed=600, volume=1, until=10)).run()
    assert stats.enqueued == {"burst": 1000, "resets": 11}  # one a second from 0s, the first after the burst
    leases = [lease for _ in range(11) for lease in scheduler.pop(100)]
    tasks = [lease.task for lease in leases]
    assert tasks[1001:] == ["password_reset"] * 10 and tasks.count("newsletter") == 1000
    first = tasks.index("password_reset")
    overtaken = leases[first + 1:1001]
    assert all(lease.enqueued_at == leases[first].enqueued_at for lease in overtaken), "a reset overtook older jobs"
    assert all(lease.enqueued_at <= leases[first].enqueued_at for lease in leases[:first])


FLIP = {"classes[1].weight": 10, "classes[2].weight": 20}  # jobs:medium 20 -> 10, jobs:low 10 -> 20
WITHOUT_LOW = {"classes": yaml.safe_load(EXAMPLE_CONFIG.read_text())["classes"][:2],
               "classification[2].class": "jobs:medium"}


def changing(prefix: str, change: dict[str, Any]) -> dict[str, Any]:
    """A minute with jobs:medium and jobs:low backlogged from 0s and one config change at 30s."""
    backlogs = [{"name": name, **job, "tenant": name, "arrivals": {"burst": {"at": "0s", "count": 100}},
                 "service_s": {"constant": 1}}
                for name, job in (("medium", {"class": "jobs:medium"}), ("low", {"task": "newsletter"}))]
    return scenario_data("changing", "1m", prefix, backlogs, config_changes=[{"at": "30s", **change}])


@pytest.mark.parametrize("until", [29, 60])
def test_a_config_change_is_applied_live_at_its_time_and_every_process_follows(client: redis.Redis,
                                                                                until: float) -> None:
    """Weights flipped at 30s (0.5 real s at speed 60): a replay stopping before it leaves v1 and
    the old shares; one running past it applies v2 then, which a process started on the old
    config follows on its next pop."""
    scenario = parse_scenario(changing(make_config().redis.prefix, {"patch": FLIP}), source="changing.yaml")
    first = scenario_config(scenario, "weighted-fair")
    replay = Replay(speed=60, volume=1, until=until)
    said: list[str] = []
    stats = LoadGenerator(scenario, Queue(first, client), replay,
                          changes=live_changes(scenario, "weighted-fair", lambda c: c), say=said.append).run()
    worker = Queue(first, client)
    popped = Counter(lease.queue for lease in worker.pop(30))
    applied = worker.groups()[0].read_applied()
    assert applied is not None and worker.shard(0).settings.fingerprint == applied.fingerprint  # the worker follows it
    weights = {c.name: c.weight for c in applied.config.classes}
    if until < 30:
        assert (applied.version, said, weights["jobs:low"], popped) == (1, [], 10, {"jobs:medium": 20, "jobs:low": 10})
        return
    assert said == ["30s: config applied: classes.jobs:medium.weight: 20 -> 10; classes.jobs:low.weight: 10 -> 20 (v2)"]
    assert [str(c) for c in stats.config_changes] == [said[0].removesuffix(" (v2)")]
    assert (applied.version, weights["jobs:medium"], weights["jobs:low"]) == (2, 10, 20)
    assert applied.applied_at - stats.started_at == pytest.approx(replay.real_seconds(30), abs=0.25)
    assert popped == {"jobs:medium": 10, "jobs:low": 20}


@pytest.mark.parametrize(("moves", "code", "says"), [
    ({"jobs:low": "jobs:medium"}, 0, "loadgen: 30s: config applied: classes.jobs:low: removed"),
    ({}, 1, ("fairctl: error: SCENARIO: the config change at 30s: config not applied: class 'jobs:low' still "
             "holds 100 job(s)")),
])
def test_fairctl_loadgen_applies_a_change_or_fails_with_its_refusal(tmp_path: Path, redis_server: Any,
                                                                     moves: dict[str, str], code: int,
                                                                     says: str) -> None:
    """jobs:low removed at 30s while it holds the burst: applied with a move (the jobs moved), else
    refused, which stops the replay there with Redis's reason."""
    if isinstance(redis_server, GivenRedis):
        pytest.skip("fairctl loadgen on the test's own redis-server")
    scenario = tmp_path / "changing.yaml"
    scenario.write_text(yaml.safe_dump(changing(make_config().redis.prefix, {"patch": WITHOUT_LOW, "moves": moves})))
    result = CliRunner().invoke(app, ["loadgen", str(scenario), "--redis-url", redis_server.url, "--speed", "60"])
    assert result.exit_code == code, result.output
    assert says in result.output
    assert ("100 job(s) moved" in result.output) == (code == 0)
    assert "enqueued 200 jobs" in result.output


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
    assert alert_settings(fast).rate_window == pytest.approx(6.0)
    assert alert_settings(fast).for_durations["QueueStalled"] == pytest.approx(3.0)
    assert fast.scheduler.budget_window == pytest.approx(6.0)
    assert fast.leases.visibility_timeout == pytest.approx(config.leases.visibility_timeout / 10)  # job time
    assert alert_settings(fast).inversion_max_depth == 0 and fast.scheduler.budget_min_arrivals == 10
    assert alert_settings(fast).tenant_min_jobs == 2  # 20 jobs of evidence, one live job in 10
    assert fast.exporter.noisy_min_queued == config.exporter.noisy_min_queued
    assert dataclasses.replace(fast, classes=config.classes, scheduler=config.scheduler, leases=config.leases,
                               exporter=config.exporter, sections=config.sections) == config


def test_compress_refuses_a_rate_window_too_short_to_rate_over() -> None:
    with pytest.raises(SpeedTooHigh, match="at most 150"):
        compress(make_config(), Replay(speed=300, volume=1, until=60), scrape_interval=1.0)
