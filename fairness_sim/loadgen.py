"""The live load generator: a scenario's arrivals enqueued through the real scheduler, in real
time, compressed by ``speed`` and thinned by ``volume``.

Time compression: scenario second ``t`` is enqueued at ``t / speed`` real seconds after the start.
Volume: when the machine cannot carry the scenario's jobs at that speed, each live job stands for
``volume`` scenario jobs (every ``volume``-th job of each stream is replayed, its first one
included) and every job's service time is multiplied by it, so the fleet's capacity shrinks
alike: the backlog in jobs over the throughput in jobs per second, i.e. every queue's age, keeps
its shape, and so do the shares. Each job's payload carries its live service time as
``{"service_s": s}``, which :data:`fairctl.handlers.sleep_handlers` sleeps for.

Config changes: at scenario second ``at`` (so at ``at / speed`` real seconds, like an arrival)
the change's config, made live the same way as the first one, is applied with
:meth:`Queue.apply` as ``fairctl config apply`` would, and every process of the group
(workers, exporter, this generator) follows it within its next call.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fairness_core.ages import human
from fairness_core.config import Config, ConfigError
from fairness_core.config_store import ConfigRefused, Moves
from fairness_core.jobs import FairnessError, RedisUnavailable
from fairness_core.queue import Queue

from .arrivals import Arrival, all_arrivals, service_samplers
from .scenario import Backlog, Burst, ConfigChange, Scenario, Service, Stream
from .simulator import AppliedChange, change_config

RETRY_EVERY_S = 0.5
PIPELINE_CHUNK = 500  # jobs per pipelined round trip in a burst (Redis serves other clients between them)


@dataclass(frozen=True)
class Replay:
    """How a scenario is replayed live: ``speed`` scenario seconds per real second, one live job
    per ``volume`` scenario jobs, the first ``until`` scenario seconds."""

    speed: float
    volume: float
    until: float

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"speed: must be > 0, got {self.speed}")
        if not self.volume >= 1:
            raise ValueError(f"volume: must be >= 1, got {self.volume}")
        if not self.until > 0:
            raise ValueError(f"until: must be > 0, got {self.until}")

    def real_seconds(self, scenario_s: float) -> float:
        return scenario_s / self.speed

    def scenario_seconds(self, real_s: float) -> float:
        return real_s * self.speed

    def live_service_s(self, scenario_s: float) -> float:
        """A job's live service time: compressed by speed, stretched by volume."""
        return scenario_s * self.volume / self.speed


def mean_service_s(service: Service) -> float:
    if service.kind == "lognormal":
        return service.a * math.exp(service.b ** 2 / 2)
    return service.a


def quickest_service_s(scenario: Scenario) -> float:
    """The mean service time of the scenario's quickest stream (scenario seconds)."""
    return min(mean_service_s(s.service) for s in scenario.streams)


def volume_for(scenario: Scenario, speed: float, *, max_rate: float, max_burst: int) -> float:
    """The smallest volume at which the live fleet works at most ``max_rate`` jobs per real second
    and no burst enqueues more than ``max_burst`` jobs at once (1: replay every job)."""
    slots = sum(pool.count for pool in scenario.workers)
    needed = slots / quickest_service_s(scenario) * speed / max_rate
    largest_burst = max((s.arrivals.count for s in scenario.streams if isinstance(s.arrivals, Burst)), default=0)
    return max(1.0, needed, largest_burst / max_burst)


def live_changes(scenario: Scenario, policy: str, live: Callable[[Config], Config]) -> tuple[ConfigChange, ...]:
    """The scenario's config changes under ``policy``, each config made live by ``live``: the same
    transform (compression, prefix, Redis URL) that made the first config live, so an apply
    changes only what the scenario's patch changes."""
    return tuple(replace(c, config=live(change_config(c, policy))) for c in scenario.config_changes)


def check_replayable(scenario: Scenario) -> None:
    """Refuse a scenario a live replay cannot reproduce: a ``backlog`` stream's jobs arrive as the
    scheduler starts the earlier ones, which only the simulation knows in advance (raises
    :class:`ConfigError` naming the stream)."""
    for i, stream in enumerate(scenario.streams):
        if isinstance(stream.arrivals, Backlog):
            raise ConfigError(f"streams[{i}].arrivals.backlog", "a backlog stream's jobs arrive as the scheduler "
                              "starts earlier ones: fairctl simulate replays it, a live replay cannot", scenario.source)


class Producer(Protocol):
    """What the generator queues through: fairctl's :class:`Queue`, or a producer writing a
    watched system's own jobs (:mod:`fairness_sim.producers`). None in the reply: a job refused."""

    def submit_many(self, task: str, tenant: str, payloads: Sequence[Any], *, tier: str | None = None,
                    user_waiting: bool = False) -> Sequence[object | None]: ...


class ChangeRefused(FairnessError):
    """A scenario's config change Redis refused: the rest of the replay would rehearse the config
    before it, so the replay stops."""


@dataclass
class LoadStats:
    """What the generator did: live jobs queued and rejected by budgets per stream, how late it
    ran behind the schedule at worst (real s), enqueue attempts retried while Redis was away, and
    the config changes applied (at their scenario time)."""

    started_at: float = 0.0  # wall-clock epoch seconds of scenario time 0
    enqueued: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    max_lag_s: float = 0.0
    retries: int = 0
    config_changes: list[AppliedChange] = field(default_factory=list)


class LoadGenerator:
    """Replays ``scenario`` through ``producer``; :meth:`run` returns when ``until`` is reached or
    ``stop`` is set. Single arrivals keep the scenario's own seed, so the same jobs arrive as in
    ``fairctl simulate``. ``changes`` (see :func:`live_changes`) are applied at their time, each
    one's changes passed to ``say``; they change fairctl's config, so they need a :class:`Queue`."""

    def __init__(self, scenario: Scenario, producer: Producer, replay: Replay, *,
                 changes: Sequence[ConfigChange] = (), say: Callable[[str], None] = lambda _: None,
                 stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        check_replayable(scenario)
        if changes and not isinstance(producer, Queue):
            raise ValueError("config changes are applied to fairctl's queue: the producer must be one")
        self.scenario = scenario
        self.producer = producer
        self.replay = replay
        self.changes = [c for c in changes if c.at < replay.until]
        self.say = say
        self.stop = stop or threading.Event()
        self._clock = clock
        self._seen = [0] * len(scenario.streams)  # scenario jobs per stream so far
        self._kept = [0] * len(scenario.streams)  # of which replayed
        self._service = service_samplers(scenario)
        self.stats = LoadStats()

    def live_jobs(self, stream: int, scenario_jobs: int) -> int:
        """How many live jobs stand for the next ``scenario_jobs`` of ``stream``: its jobs number
        1, 1 + volume, 1 + 2 x volume, ... are replayed, so each stream starts when it does in the
        scenario, however sparse it is once thinned."""
        if not scenario_jobs:
            return 0
        self._seen[stream] += scenario_jobs
        kept = math.floor((self._seen[stream] - 1) / self.replay.volume + 1e-9) + 1
        jobs, self._kept[stream] = kept - self._kept[stream], kept
        return jobs

    def run(self) -> LoadStats:
        """Replay until ``until`` or ``stop``, every arrival after the ones before it, so the queues
        hold the jobs in the scenario's order (under ``fifo`` that order is the schedule). The
        arrivals and config changes at scenario time 0 come first and the clock starts once they
        are queued: a burst at 0 lands ahead of everything after it, as in the scenario, however
        long it takes to write. A later burst holds up what follows it while it is written, which
        ``max_lag_s`` records."""
        arrivals = all_arrivals(self.scenario, self.replay.until)
        changes = iter(self.changes)
        arrival, change = next(arrivals, None), next(changes, None)
        while change is not None and change.at <= 0:
            self._apply(change)
            change = next(changes, None)
        while arrival is not None and arrival.at <= 0 and not self.stop.is_set():
            self._queue(arrival)
            arrival = next(arrivals, None)
        self.stats.started_at = time.time()
        start = self._clock()
        while arrival is not None:
            while change is not None and change.at <= arrival.at:  # a change before an arrival at its time
                if not self._wait(start, change.at):
                    return self.stats
                self._apply(change)
                change = next(changes, None)
            if not self._wait(start, arrival.at):
                return self.stats
            self._queue(arrival)
            arrival = next(arrivals, None)
        while change is not None and self._wait(start, change.at):  # changes after the last arrival
            self._apply(change)
            change = next(changes, None)
        return self.stats

    def _queue(self, arrival: Arrival) -> None:
        """One arrival's live jobs, a burst's in pipelined chunks (Redis serves the workers and the
        exporters between them; a stop ends it after the chunk in flight)."""
        stream = self.scenario.streams[arrival.stream]
        for tenant, n in arrival.tenants:
            payloads = [{"service_s": round(self.replay.live_service_s(self._service[arrival.stream]()), 4)}
                        for _ in range(self.live_jobs(arrival.stream, n))]
            for i in range(0, len(payloads), PIPELINE_CHUNK):
                if self.stop.is_set():
                    return
                self._submit(stream, tenant, payloads[i:i + PIPELINE_CHUNK])

    def _wait(self, start: float, at: float) -> bool:
        """Until scenario second ``at`` is due (False: stopped first); records how late it ran."""
        due = start + self.replay.real_seconds(at)
        delay = due - self._clock()
        if (delay > 0 and self.stop.wait(delay)) or self.stop.is_set():
            return False
        self.stats.max_lag_s = max(self.stats.max_lag_s, self._clock() - due)
        return True

    def _apply(self, change: ConfigChange) -> None:
        """Apply ``change`` as ``fairctl config apply`` does, from a queue of its own: this
        generator's producer follows it on its next enqueue, like every other process."""
        assert isinstance(self.producer, Queue)  # checked at __init__
        applier = Queue(change.config, self.producer.client)
        try:
            done = applier.apply(change.config, moves=Moves(classes=dict(change.moves)))
        except ConfigRefused as exc:
            raise ChangeRefused(f"the config change at {human(change.at)}: {exc}") from exc
        first = next(iter(done.shards.values()))
        applied = AppliedChange(change.at, first.changes)
        self.stats.config_changes.append(applied)
        moved = sum(outcome.moved for outcome in done.shards.values())
        self.say(f"{applied} (v{done.group.version}{f'; {moved:,} job(s) moved' if moved else ''})")

    def _submit(self, stream: Stream, tenant: str, payloads: Sequence[object]) -> None:
        """Queue ``payloads``, retrying while Redis is unavailable (a lost reply may then queue a
        chunk twice: the documented at-least-once enqueue) until it answers or the run stops."""
        while not self.stop.is_set():
            try:
                done = self.producer.submit_many(stream.task, tenant, payloads, tier=stream.tier,
                                                  user_waiting=stream.user_waiting)
            except RedisUnavailable:
                self.stats.retries += 1
                self.stop.wait(RETRY_EVERY_S)
                continue
            queued = sum(1 for d in done if d is not None)
            self.stats.enqueued[stream.name] += queued
            self.stats.rejected[stream.name] += len(done) - queued
            return
