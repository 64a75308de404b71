"""A config with its durations compressed for a drill, so the live rules and the scheduler run
``speed`` times faster than production and an alert's timeline maps back to scenario time.

What scales by ``volume``: the thresholds that count a class's queued or arriving jobs
(``inversion_max_depth``, ``budget_min_arrivals``), since one live job stands for ``volume``
scenario jobs. Not the per-tenant ``noisy_min_queued``: thinning leaves a sparse class a few jobs
of one tenant each, and a scaled threshold would call every one of them noisy (in-flight counts
are slots, which are not thinned at all). What scales by ``speed``: every SLO, window, ``for:``, aging delay and budget window (they are
about wall-clock time). What scales by ``speed / volume``: the lease durations, which are about
how long one job runs, and a live job runs ``volume / speed`` times its scenario service time
(see :mod:`fairness_sim.loadgen`). The expected-load hints of the weights lint are dropped: they
describe production traffic, not the drill's.
"""

from __future__ import annotations

import dataclasses

from alerts.config import alert_settings
from alerts.rules import starving_for
from fairness_core.config import Config, format_duration
from fairness_sim.loadgen import Replay

# A rate over fewer scrapes than this is noise: the compressed rate window must cover them.
MIN_SCRAPES_PER_WINDOW = 4


class SpeedTooHigh(ValueError):
    """The compressed windows would be too short for Prometheus to rate over."""


def _ms(seconds: float) -> float:
    """Millisecond resolution, as config files and Prometheus durations carry them."""
    return max(0.001, round(seconds * 1000) / 1000)


def _jobs(count: int, volume: float, least: int) -> int:
    """A job-count threshold in live jobs (rounded down: "at most 5" stays a strict bound)."""
    return max(least, int(count / volume))


def compress(config: Config, replay: Replay, *, scrape_interval: float) -> Config:
    """``config`` running ``replay.speed`` times faster; raises :class:`SpeedTooHigh` when
    ``alerts.rate_window`` would span fewer than four scrapes."""
    speed, volume, job_scale = replay.speed, replay.volume, replay.speed / replay.volume
    a = alert_settings(config)
    window = _ms(a.rate_window / speed)
    if window < MIN_SCRAPES_PER_WINDOW * scrape_interval:
        most = a.rate_window / (MIN_SCRAPES_PER_WINDOW * scrape_interval)
        raise SpeedTooHigh(
            f"at speed {speed:g} alerts.rate_window ({format_duration(a.rate_window)}) becomes {format_duration(window)}, "
            f"under {MIN_SCRAPES_PER_WINDOW} scrapes of {format_duration(scrape_interval)}; use a speed of at most {most:g}")
    classes = tuple(
        dataclasses.replace(
            c, max_age=_ms(c.max_age / speed), starving_for=_ms(starving_for(config, c) / speed),
            promote_after=None if c.promote_after is None else _ms(c.promote_after / speed),
            arrival_rate=None, service_time=None)
        for c in config.classes)
    leases = config.leases
    return dataclasses.replace(
        config,
        classes=classes,
        scheduler=dataclasses.replace(config.scheduler, budget_window=_ms(config.scheduler.budget_window / speed),
                                      budget_min_arrivals=_jobs(config.scheduler.budget_min_arrivals, volume, 1)),
        leases=dataclasses.replace(
            leases, visibility_timeout=_ms(leases.visibility_timeout / job_scale),
            retry_backoff=_ms(leases.retry_backoff / job_scale),
            retry_backoff_max=_ms(leases.retry_backoff_max / job_scale)),
        exporter=dataclasses.replace(config.exporter, window=_ms(config.exporter.window / speed)),
    ).with_section("alerts", dataclasses.replace(
        a, rate_window=window, reason_baseline=_ms(a.reason_baseline / speed),
        stall_after=_ms(a.stall_after / speed), worker_slots=None,
        inversion_max_depth=_jobs(a.inversion_max_depth, volume, 0),
        tenant_min_jobs=_jobs(a.tenant_min_jobs, volume, 1),
        for_durations={k: None if v is None else _ms(v / speed) for k, v in a.for_durations.items()}))
