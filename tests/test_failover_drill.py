"""``fairctl drill --failover``: the drill's judgement of what became of each job (logic, from
recorded runs), and the drill itself, live: a Sentinel group of its own, the master killed under
load, then the sentinels stopped with every client cut off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fairness_sim.failover import RECENT_S, RESUME_WITHIN_S, Run, errors_since, outcome

KILL = 1000.0


def runs(*spans: tuple[str, float, float]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for job_id, start, end in spans:
        out.setdefault(job_id, []).append(Run(job_id, start, end))
    return out


def test_a_job_run_once_is_counted_once_and_one_never_run_is_lost() -> None:
    accepted = {"a": KILL - 10, "b": KILL - 10, "c": KILL + 5}
    judged = outcome(accepted, runs(("a", KILL - 9, KILL - 8.9)), KILL)
    assert (judged.ran_once, judged.lost, judged.lost_recent) == (1, ["b", "c"], [])
    assert not judged.ok


def test_a_job_accepted_just_before_the_kill_and_never_run_is_the_replication_gap() -> None:
    judged = outcome({"late": KILL - RECENT_S / 2}, {}, KILL)
    assert (judged.lost, judged.lost_recent, judged.ok) == ([], ["late"], True)


def test_a_second_run_is_a_redelivery_only_when_a_run_spanned_the_kill() -> None:
    spanned = runs(("x", KILL - 0.5, KILL + 0.2), ("x", KILL + 12, KILL + 12.1))
    before = runs(("y", KILL - 30, KILL - 29.9), ("y", KILL + 12, KILL + 12.1))
    judged = outcome({"x": KILL - 20, "y": KILL - 40}, {**spanned, **before}, KILL)
    assert (judged.redelivered, judged.runs_beyond_once_not_in_flight, judged.ok) == (["x"], ["y"], False)


def test_the_producers_errors_are_told_from_the_fault_on() -> None:
    told = errors_since([(KILL - 60, "old"), (KILL + 0.5, "e1"), (KILL + 2.0, "e2"), (KILL + 2.1, "e1")], KILL)
    assert (told.count, told.first_s, told.last_s, told.messages) == (3, 0.5, 2.1, ["e1", "e2"])


@pytest.mark.live
def test_the_failover_drill_loses_no_job_and_the_worker_never_stops(tmp_path: Path) -> None:
    """The master SIGKILLed under load with 3,000 jobs queued: the replica is promoted, the same
    worker runs jobs again within 30 s, every job accepted more than 2 s before the kill runs once
    (a lease in flight at the kill may run again, and is counted), and the producer's errors end
    by themselves. Then the sentinels stopped for 20 s and every connection cut: the worker
    resumes once they are back, and nothing is lost (a lease in flight at the cut, past the drill's
    10 s visibility timeout by the end, may run again, counted)."""
    out = tmp_path / "drill.json"
    done = subprocess.run([sys.executable, "-m", "fairctl", "drill", "--failover", "--dir", str(tmp_path / "run"),
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "as expected" in done.stdout
    report = json.loads(out.read_text())
    kill, outage = report["kill"], report["outage"]
    assert kill["queued"] == 3000 and kill["promoted_after_s"] is not None
    assert kill["resumed_after_promotion_s"] <= RESUME_WITHIN_S
    assert kill["jobs"]["accepted"] > 3000 and not kill["jobs"]["lost"]
    assert not kill["jobs"]["runs_beyond_once_not_in_flight"]
    assert len(kill["jobs"]["redelivered"]) <= kill["in_flight_at_kill"]
    # The producer's errors are clear (they name the service and its sentinels) and end.
    assert kill["producer"]["count"] > 0 and kill["producer"]["last_s"] < kill["promoted_after_s"] + RESUME_WITHIN_S
    assert all("via sentinel 127.0.0.1:" in m for m in kill["producer"]["messages"])
    assert outage["outage_s"] == 20 and outage["resumed_after_return_s"] <= RESUME_WITHIN_S
    assert outage["jobs"]["accepted"] > 0 and not outage["jobs"]["lost"]
    assert not outage["jobs"]["runs_beyond_once_not_in_flight"]
    assert len(outage["jobs"]["redelivered"]) <= outage["in_flight_at_cut"]
    assert outage["producer"]["count"] > 0 and outage["producer"]["last_s"] < outage["outage_s"] + RESUME_WITHIN_S
    assert report["queue_left"] == 0 and report["state_lost_said"] == 0 and report["violations"] == []


def test_the_failover_options_refuse_what_does_not_go_with_them() -> None:
    for args, named in ((["--failover", "--policy", "fifo"], "--policy"), (["--failover", "marketing-storm"], "SCENARIO"),
                        (["--jobs", "40"], "--jobs"), (["--failover", "--sentinel-outage", "2x"], "--sentinel-outage")):
        done = subprocess.run([sys.executable, "-m", "fairctl", "drill", *args], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and f"error: {named}:" in done.stderr, (args, done.stderr)
