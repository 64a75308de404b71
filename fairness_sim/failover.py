"""The failover drill (``fairctl drill --failover``): a real Sentinel group on loopback, a producer
and a ``fairctl worker`` running against its ``redis+sentinel://`` URL, then two faults.

1. **The master killed** (SIGKILL, under load): the sentinels promote the replica. The drill
   measures when, how soon the worker completes jobs again (with no restart), which errors the
   producer saw and for how long, and what became of every job accepted: each should run once.
   A job whose run was in flight at the kill may run again (its lease or ack may not have reached
   the replica): those are counted as redelivered. Jobs accepted in the last seconds before the
   kill may be lost with the writes the replica had not received: those are counted apart.
2. **The sentinels stopped** while the master lives, and every client connection to the master
   cut (``CLIENT KILL TYPE normal``, as a network blip does): no client can find the master again
   until the sentinels come back. The worker must resume by itself, as soon as they do.

A replica promoted with the group's state is the same queue: a worker that said the state was
lost (the message a wiped Redis earns) fails the drill.

Every run of a job is recorded by the worker's handler (:data:`handlers`) in a file named by
``FAIRCTL_FAILOVER_RUNS``, outside Redis, so the record survives what Redis loses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml

from fairness_core import Queue, RedisUnavailable, redis_client
from fairness_core.config import EXAMPLE_CONFIG, load_config, parse_duration
from fairness_core.jobs import Lease, ReplyLost
from fairness_core.worker import HandlerRegistry
from fairness_stack.sentinel import SentinelGroup
from fairness_stack.servers import stop_process, wait_until

RUNS_ENV = "FAIRCTL_FAILOVER_RUNS"
SERVICE_S = 0.02  # each job's run: short, so thousands pass in seconds on two cores
CONCURRENCY = 8
PRODUCER_RATE = 50.0  # jobs per second while the faults happen
# Leases of the old master that the new one still counts (a settle it never received) come back
# after this: short, so the drill sees them redelivered within its run.
VISIBILITY_TIMEOUT = "10s"
# A job accepted this close to the kill may be in writes the replica never received.
RECENT_S = 2.0
TENANTS = 10
RESUME_WITHIN_S = 30.0  # the worker runs jobs again within this of the promotion
STATE_LOST_LINE = "lost its state"  # what a worker logs when its queue group's state is gone


def _record(lease: Lease) -> None:
    started = time.time()
    time.sleep(SERVICE_S)
    _runs_file().write(f"{lease.job_id} {started:.3f} {time.time():.3f}\n")


_runs_lock = threading.Lock()
_runs_handle: Any = None


def _runs_file() -> Any:
    """The runs file, opened once per worker process, line-buffered: one write() per run."""
    global _runs_handle
    with _runs_lock:
        if _runs_handle is None:
            _runs_handle = open(os.environ[RUNS_ENV], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        return _runs_handle


handlers = HandlerRegistry(fallback=_record)


@dataclass
class Run:
    job_id: str
    start: float
    end: float


def read_runs(path: Path) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    if not path.exists():
        return out
    text = path.read_text(encoding="utf-8")
    for line in text[:text.rfind("\n") + 1].splitlines():  # a last line being written is left for later
        job_id, start, end = line.split()
        out.setdefault(job_id, []).append(Run(job_id, float(start), float(end)))
    return out


@dataclass
class Producer:
    """Submits jobs at a steady rate with an idempotency key each, and sends a job again after a
    lost reply (the key makes that safe), as a careful producer does. Records what it accepted,
    when, and every error it saw."""

    queue: Queue
    rate: float
    accepted: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            key = f"drill-{os.getpid()}-{n}"
            try:
                job = self.queue.submit("failover_drill", f"t{n % TENANTS}", key=key)
            except RedisUnavailable as exc:
                self.errors.append((time.time(), f"{type(exc).__name__}: {exc}"))
                self.stop.wait(0.1 if isinstance(exc, ReplyLost) else 0.2)
                continue
            self.accepted[job.job_id] = time.time()
            n += 1
            self.stop.wait(1 / self.rate)


@dataclass
class Outcome:
    """What became of the jobs accepted in one phase, by their runs."""

    accepted: int
    ran_once: int
    redelivered: list[str]  # run more than once: in flight at the fault
    lost: list[str]  # never run, though accepted more than RECENT_S before the fault, or after it
    lost_recent: list[str]  # never run, accepted within RECENT_S of the fault
    runs_beyond_once_not_in_flight: list[str]  # run twice, though no run of theirs spanned the fault

    @property
    def ok(self) -> bool:
        return not self.lost and not self.runs_beyond_once_not_in_flight


def outcome(accepted: dict[str, float], runs: dict[str, list[Run]], fault_at: float) -> Outcome:
    twice = sorted(j for j in accepted if len(runs.get(j, [])) > 1)
    never = [j for j in accepted if not runs.get(j)]
    # A run spanning the fault (started before, its settle not yet replicated) is the one case
    # a second run is Sentinel's cost; allow for the settle riding a slot's next pop.
    spanned = {j for j in twice if any(r.start <= fault_at <= r.end + 1.0 for r in runs[j])}

    def recent(job_id: str) -> bool:
        return fault_at - RECENT_S <= accepted[job_id] <= fault_at

    return Outcome(
        accepted=len(accepted), ran_once=sum(1 for j in accepted if len(runs.get(j, [])) == 1),
        redelivered=sorted(spanned), lost=sorted(j for j in never if not recent(j)),
        lost_recent=sorted(j for j in never if recent(j)),
        runs_beyond_once_not_in_flight=sorted(set(twice) - spanned))


@dataclass
class Errors:
    """The producer's errors around a fault: how many, from when to when (seconds after the
    fault), and the distinct messages (the first few)."""

    count: int
    first_s: float | None
    last_s: float | None
    messages: list[str]


def errors_since(errors: list[tuple[float, str]], fault_at: float) -> Errors:
    seen = [(t, m) for t, m in errors if t >= fault_at - 1]
    distinct = list(dict.fromkeys(m for _, m in seen))
    return Errors(len(seen), round(seen[0][0] - fault_at, 2) if seen else None,
                  round(seen[-1][0] - fault_at, 2) if seen else None, distinct[:3])


@dataclass
class KillPhase:
    queued: int
    in_flight_at_kill: int
    promoted_after_s: float | None
    resumed_after_promotion_s: float | None  # the worker's first run of a job popped after the kill
    producer: Errors
    jobs: Outcome


@dataclass
class OutagePhase:
    outage_s: float
    in_flight_at_cut: int  # jobs leased when the connections were cut: their settles may be lost
    runs_during: int
    resumed_after_return_s: float | None  # the first run started after the sentinels returned
    producer: Errors
    jobs: Outcome


@dataclass
class FailoverReport:
    kill: KillPhase
    outage: OutagePhase
    queue_left: int  # jobs still queued, leased or delayed at the end
    state_lost_said: int  # worker log lines saying the group's state was lost
    violations: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def drill_config(directory: Path, url: str) -> Path:
    """The example config on the group's URL, with the drill's short visibility timeout."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["redis"]["url"] = url
    data.setdefault("leases", {})["visibility_timeout"] = VISIBILITY_TIMEOUT
    path = directory / "fairness.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@contextmanager
def running_worker(config: Path, url: str, runs: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``fairctl worker`` as a user runs it, recording each run in ``runs``; stopped with SIGTERM."""
    env = {**os.environ, RUNS_ENV: str(runs)}
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fairctl", "worker", "--handlers", f"{__name__}:handlers",
             "--concurrency", str(CONCURRENCY), "--config", str(config), "--redis-url", url, "--log-every", "1s"],
            env=env, stdout=out, stderr=out)
    try:
        yield process
    finally:
        stop_process(process, timeout=30)


@contextmanager
def producing(queue: Queue, rate: float) -> Iterator[Producer]:
    producer = Producer(queue, rate)
    thread = threading.Thread(target=producer.run, name="failover-producer", daemon=True)
    thread.start()
    try:
        yield producer
    finally:
        producer.stop.set()
        thread.join(timeout=30)


def _watch_master(group: SentinelGroup, old: int, timeout: float) -> float | None:
    """When a sentinel first names another master than ``old`` (time.time()), or None."""
    found: list[float] = []

    def moved() -> bool:
        port = group.master_port()
        if port is not None and port != old:
            found.append(time.time())
            return True
        return False

    wait_until(moved, timeout, every=0.05)
    return found[0] if found else None


def _first_start_after(runs: dict[str, list[Run]], after: float) -> float | None:
    starts = [r.start for rs in runs.values() for r in rs if r.start > after]
    return min(starts) if starts else None


def _all_ran(accepted: dict[str, float], runs_path: Path, but: Callable[[float], bool]) -> Callable[[], bool]:
    """Every job of ``accepted`` (accepted at a time ``but`` does not exempt) has run."""
    def check() -> bool:
        runs = read_runs(runs_path)
        return all(j in runs for j, t in list(accepted.items()) if not but(t))
    return check


def _in_flight(queue: Queue) -> int:
    return sum(view.inflight for view in queue.snapshot().classes.values())


def _kill_phase(group: SentinelGroup, queue: Queue, producer: Producer, queued: dict[str, float],
                runs_path: Path, say: Callable[[str], None]) -> tuple[KillPhase, float]:
    """Kill the master a third of the way through the queued jobs; the phase and when it ended."""
    wait_until(lambda: len(read_runs(runs_path)) >= len(queued) // 3, 120, every=0.1)
    wait_until(lambda: group.replica_in_sync(group.servers[1].port), 10)
    in_flight = _in_flight(queue)
    old = group.kill_master()
    killed_at = time.time()
    say(f"killed the master (port {old}) with SIGKILL, {in_flight} job(s) leased")
    promoted = _watch_master(group, old, 60)
    say("the replica was promoted" if promoted else "no promotion within 60 s")
    # Settles the new master never received come back after the visibility timeout.
    time.sleep(parse_duration(VISIBILITY_TIMEOUT, "leases.visibility_timeout") + 2)
    ended = time.time()
    accepted = {j: t for j, t in {**queued, **producer.accepted}.items() if t < ended}
    wait_until(_all_ran(accepted, runs_path, lambda t: killed_at - RECENT_S <= t <= killed_at), 90, every=0.2)
    runs = read_runs(runs_path)
    phase = KillPhase(
        queued=len(queued), in_flight_at_kill=in_flight,
        promoted_after_s=_gap(promoted, killed_at),
        resumed_after_promotion_s=None if promoted is None else _gap(_first_start_after(runs, killed_at), promoted),
        producer=errors_since(producer.errors, killed_at), jobs=outcome(accepted, runs, killed_at))
    say(f"after the kill: {phase.jobs.ran_once:,} of {phase.jobs.accepted:,} jobs ran once")
    return phase, ended


def _outage_phase(group: SentinelGroup, queue: Queue, producer: Producer, since: float, outage_s: float,
                  runs_path: Path, say: Callable[[str], None]) -> OutagePhase:
    """Stop every sentinel for ``outage_s`` while the master lives, then start them again. A
    lease in flight when the connections are cut cannot be settled or renewed until the sentinels
    return; one whose deadline (the drill's short visibility timeout) passes meanwhile is taken
    back and runs again, counted, as after any outage longer than the visibility timeout."""
    in_flight = _in_flight(queue)
    say(f"stopping the {len(group.sentinels)} sentinels for {outage_s:g}s and cutting every client's connection; "
        "the master lives")
    for sentinel in group.sentinels:
        sentinel.stop()
    stopped_at = time.time()
    master = group.master_port_of_servers()
    redis.Redis(port=master).client_kill_filter(_type="normal")
    cut_at = time.time()
    time.sleep(outage_s)
    for sentinel in group.sentinels:
        sentinel.start()
    returned_at = time.time()
    say("the sentinels are back")
    wait_until(lambda: _first_start_after(read_runs(runs_path), returned_at) is not None, 60, every=0.2)
    producer.stop.set()
    accepted = {j: t for j, t in producer.accepted.items() if t >= since}
    wait_until(_all_ran(accepted, runs_path, lambda t: False), 60, every=0.2)
    runs = read_runs(runs_path)
    return OutagePhase(
        outage_s=outage_s, in_flight_at_cut=in_flight,
        runs_during=sum(1 for rs in runs.values() for r in rs if stopped_at <= r.start < returned_at),
        resumed_after_return_s=_gap(_first_start_after(runs, returned_at), returned_at),
        producer=errors_since(producer.errors, stopped_at), jobs=outcome(accepted, runs, cut_at))


def run_failover_drill(directory: Path, *, jobs: int = 3000, outage_s: float = 20.0,
                       say: Callable[[str], None] = lambda line: None) -> FailoverReport:
    """Both phases on a fresh group under ``directory``; see the module docstring."""
    runs_path, log = directory / "runs.txt", directory / "worker.log"
    with SentinelGroup() as group:
        config_path = drill_config(directory, group.url)
        queue = Queue(load_config(config_path), redis_client(group.url))
        queued = {queue.submit("failover_drill", f"t{i % TENANTS}").job_id: time.time() for i in range(jobs)}
        say(f"queued {jobs:,} jobs on {group.url}; a worker and a producer at {PRODUCER_RATE:g}/s start")
        with running_worker(config_path, group.url, runs_path, log), \
                producing(queue, PRODUCER_RATE) as producer:
            kill, ended = _kill_phase(group, queue, producer, queued, runs_path, say)
            outage = _outage_phase(group, queue, producer, ended, outage_s, runs_path, say)
        left = sum(v.depth + v.inflight + v.delayed for v in queue.snapshot().classes.values())
    said = sum(1 for line in log.read_text(encoding="utf-8").splitlines() if STATE_LOST_LINE in line)
    report = FailoverReport(kill, outage, left, said, [])
    report.violations.extend(violations(report))
    return report


def _gap(at: float | None, since: float) -> float | None:
    return None if at is None else round(at - since, 2)


def violations(report: FailoverReport) -> list[str]:
    """What the drill promises and this run broke, in words."""
    out = []
    kill, outage = report.kill, report.outage
    if kill.promoted_after_s is None:
        out.append("the sentinels promoted no replica")
    if kill.resumed_after_promotion_s is None or kill.resumed_after_promotion_s > RESUME_WITHIN_S:
        out.append(f"the worker did not complete a job within {RESUME_WITHIN_S:g}s of the promotion")
    for name, jobs in (("kill", kill.jobs), ("sentinel outage", outage.jobs)):
        if jobs.lost:
            out.append(f"{name}: {len(jobs.lost)} job(s) accepted more than {RECENT_S:g}s before the fault never ran")
        if jobs.runs_beyond_once_not_in_flight:
            out.append(f"{name}: {len(jobs.runs_beyond_once_not_in_flight)} job(s) ran twice without a run in "
                       "flight at the fault")
    if outage.resumed_after_return_s is None:
        out.append("the worker ran no job after the sentinels came back")
    if report.state_lost_said:
        out.append(f"the worker said {report.state_lost_said} time(s) that the group's state was lost")
    if report.queue_left:
        out.append(f"{report.queue_left} job(s) left in the queue at the end")
    return out


def render(report: FailoverReport) -> str:
    kill, outage = report.kill, report.outage

    def errors(e: Errors) -> str:
        if not e.count:
            return "none"
        return f"{e.count} from {e.first_s:+.1f}s to {e.last_s:+.1f}s, e.g. {e.messages[0]}"

    def jobs(o: Outcome) -> str:
        return (f"{o.accepted:,} accepted: {o.ran_once:,} ran once, {len(o.redelivered)} redelivered (in flight "
                f"at the fault), {len(o.lost)} lost, {len(o.lost_recent)} accepted within {RECENT_S:g}s of it "
                "and never run")

    lines = [
        "master killed (SIGKILL) under load:",
        f"  promoted after {_s(kill.promoted_after_s)}; the worker ran jobs again "
        f"{_s(_at_least_0(kill.resumed_after_promotion_s))} after the promotion, with no restart",
        f"  producer errors: {errors(kill.producer)}",
        f"  jobs: {jobs(kill.jobs)}",
        f"sentinels stopped for {outage.outage_s:g}s, the master alive:",
        f"  {outage.in_flight_at_cut} job(s) leased at the cut; {outage.runs_during:,} jobs ran during the outage; "
        f"the first after it {_s(outage.resumed_after_return_s)} after the sentinels returned",
        f"  producer errors: {errors(outage.producer)}",
        f"  jobs: {jobs(outage.jobs)}",
        f"jobs left in the queue: {report.queue_left}",
    ]
    lines += [f"EXPECTATION FAILED: {v}" for v in report.violations] or ["as expected"]
    return "\n".join(lines) + "\n"


def _at_least_0(value: float | None) -> float | None:
    """A worker may find the new master a poll of the drill's before the drill does."""
    return None if value is None else max(0.0, value)


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"
