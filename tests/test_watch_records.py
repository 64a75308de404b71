"""The bookkeeping the watched systems' readers share (exporter/sources/base.py), on the records as
the systems keep them, without a Redis: a count of the records added to a set scored by time
(ties of RQ's whole seconds, bursts past the window, records removed), the records read in the
order they came, the waits of the started jobs each observed once whichever record a read finds
them in, and what the tenant sample tells of the quiet tenants."""

from __future__ import annotations

import math
import random

from exporter import metrics as m
from exporter.sources.base import RECENT, Arrivals, Starts, Tally, TenantFigures, Waits, tenant_figures


class SortedSet:
    """A Redis sorted set's reads as the readers send them: newest first up to a count, counts by
    score, and records from a score on (ties by member, as Redis orders them)."""

    def __init__(self) -> None:
        self.scores: dict[bytes, float] = {}

    def add(self, member: str, score: float) -> None:
        self.scores[member.encode()] = score

    def ordered(self) -> list[tuple[bytes, float]]:
        return sorted(self.scores.items(), key=lambda kv: (kv[1], kv[0]))

    def newest(self, size: int = RECENT) -> list[tuple[bytes, float]]:
        return [kv for kv in reversed(self.ordered()) if kv[1] != math.inf][:size]

    def count(self, low: str, high: str) -> int:
        def bound(text: str) -> tuple[float, bool]:
            exclusive = text.startswith("(")
            return float(text.lstrip("(")), exclusive

        (lo, lo_ex), (hi, hi_ex) = bound(low), bound(high)
        return sum(1 for s in self.scores.values()
                   if (s > lo if lo_ex else s >= lo) and (s < hi if hi_ex else s <= hi))

    def from_score(self, low: float, size: int) -> list[tuple[bytes, float]]:
        return [kv for kv in self.ordered() if kv[1] >= low][:size]


def tally_read(tally: Tally, records: SortedSet) -> int:
    """One read as a reader makes it: the window, then the two ZCOUNTs if the window cannot tell."""
    bounds = tally.plan(records.newest(tally.size))
    if bounds is not None:
        low, top, below_newest = bounds
        tally.counted(records.count(low, top), records.count(low, below_newest))
    return tally.count


def test_a_tally_counts_the_records_added_since_its_first_read_ties_of_a_second_included() -> None:
    records, tally = SortedSet(), Tally()
    records.add("old", 100.0)
    assert tally_read(tally, records) == 0, "what was there at the first read is not counted"
    records.add("same-second", 100.0)  # RQ scores whole seconds: a job finished in the same second
    assert tally_read(tally, records) == 1
    records.add("a", 101.0)
    records.add("b", 101.0)
    assert tally_read(tally, records) == 3
    assert tally_read(tally, records) == 3, "a read that finds nothing new counts nothing"
    records.add("c", 101.0)
    assert tally_read(tally, records) == 4


def test_a_tally_counts_a_burst_larger_than_its_window_from_the_set() -> None:
    records, tally = SortedSet(), Tally(size=5)
    assert tally_read(tally, records) == 0
    for n in range(23):
        records.add(f"burst-{n}", 200.0 + n // 4)  # ties among them, and more than the window
    assert tally_read(tally, records) == 23
    for n in range(7):
        records.add(f"same-{n}", 205.0)  # more at the newest score than the window holds
    assert tally_read(tally, records) == 30
    assert tally_read(tally, records) == 30


def test_a_tally_never_falls_and_misses_only_what_comes_below_its_cursor() -> None:
    records, tally = SortedSet(), Tally()
    for n in range(3):
        records.add(f"j{n}", 10.0 + n)
    tally_read(tally, records)
    records.add("new", 20.0)
    assert tally_read(tally, records) == 1
    del records.scores[b"new"]  # requeued, or trimmed: the count stays
    assert tally_read(tally, records) == 1
    records.add("late-clock", 15.0)  # a worker whose clock is behind: scored before the cursor
    assert tally_read(tally, records) == 1
    records.add("kept-forever", math.inf)  # RQ's result_ttl=-1: scored +inf, never counted
    assert tally_read(tally, records) == 1


def test_a_tally_is_exact_on_random_arrivals_with_ties_and_bursts() -> None:
    rng = random.Random(7)
    records, tally = SortedSet(), Tally(size=8)
    clock, added = 1_000.0, 0
    tally_read(tally, records)
    for _ in range(300):
        for _ in range(rng.choice((0, 0, 1, 3, 12))):
            records.add(f"r{len(records.scores)}", clock)  # whole seconds: many ties
            added += 1
        clock += rng.choice((0.0, 1.0))
        assert tally_read(tally, records) == added


def test_arrivals_take_each_record_once_in_the_order_they_came_a_bounded_number_a_read() -> None:
    records, arrivals = SortedSet(), Arrivals(size=3)

    def read() -> list[bytes]:
        reply = records.newest(1) if arrivals.cursor is None else records.from_score(
            arrivals.cursor, arrivals.size + len(arrivals._at_cursor))
        return arrivals.take(reply)

    records.add("before", 5.0)
    assert read() == []
    records.add("tie", 5.0)  # the same score as the first read's newest
    for n in range(5):
        records.add(f"d{n}", 6.0 + n)
    assert read() == [b"tie", b"d0", b"d1"]
    assert read() == [b"d2", b"d3", b"d4"], "a burst is taken over the next reads"
    assert read() == []
    records.add("d5", 10.0)  # the same score as the last one taken
    assert read() == [b"d5"]
    assert read() == []


def test_each_started_job_is_observed_once_by_the_first_read_after_it_started() -> None:
    starts = Starts()
    # times: (enqueued, started); None: not started yet
    jobs: dict[str, tuple[float, float | None]] = {"before": (0.0, 5.0)}

    def read(now: float, *seen: str) -> dict[str, float]:
        out = {}
        for key in starts.begin(now, seen):
            wait = starts.judge(key, *jobs[str(key)])
            if wait is not None:
                out[str(key)] = wait
        starts.end()
        return out

    assert read(10.0, "before") == {}, "the first read observes none"
    jobs |= {"a": (11.0, 12.5), "b": (11.0, 13.0), "late": (12.0, 21.0)}
    assert read(20.0, "a", "b", "late") == {"a": 1.5, "b": 2.0}, "late: started after this read's time"
    assert read(30.0, "a", "late") == {"late": 9.0}, "a read again (running, then finished) is not observed again"
    assert read(40.0, "b") == {}, "b left the records read and came back: judged by its time, not again"
    jobs["queued"] = (35.0, None)
    assert read(50.0, "queued") == {}
    jobs["queued"] = (35.0, 45.0)
    assert read(60.0, "queued") == {}, "started before the previous read, which could not see it: not observed"


def test_waits_fall_in_the_bucket_up_to_their_bound() -> None:
    waits = Waits()
    for seconds in (0.0, m.WAIT_BUCKETS[0], m.WAIT_BUCKETS[0] + 1e-9, 10 * m.WAIT_BUCKETS[-1]):
        waits.observe(seconds)
    counts = waits.read()
    assert counts.counts[:2] == (2, 1) and counts.counts[-1] == 1 and counts.count == 4
    assert counts.total == m.WAIT_BUCKETS[0] * 2 + 1e-9 + 10 * m.WAIT_BUCKETS[-1]


def test_the_tenant_sample_tells_the_quiet_tenants_oldest_job() -> None:
    flood = [("flooder", 100.0 + n) for n in range(90)]
    quiet = [("shop-1", 150.0), ("shop-2", 120.0), ("shop-1", 130.0), (None, 10.0)]
    figures = tenant_figures(flood + quiet, depth=10_000, noisy_min_queued=100)
    assert figures.active == 3
    assert figures.quiet_oldest == 120.0, "the flooder is noisy; a job with no tenant is nobody's"
    assert figures.oldest == (("flooder", 100.0), ("shop-2", 120.0), ("shop-1", 130.0))
    small = tenant_figures(flood + quiet, depth=94, noisy_min_queued=100)
    assert small.quiet_oldest == 100.0, "under exporter.noisy_min_queued jobs, even the flooder is quiet"
    assert tenant_figures([], depth=0, noisy_min_queued=100) == TenantFigures(0, None, ())
