"""What a queued job stores, and what an earlier release stored: envelopes with a base-62 enqueue
time, attempts 0 as nothing and codes as letters, beside envelopes with decimal times, attempts
and codes, which must read back as they were; and cost entries only for parties off the default
tier, beside the default-tier entries an earlier release wrote."""

from __future__ import annotations

import redis
from hypothesis import given
from hypothesis import strategies as st

from fairness_core import Queue
from fairness_core.jobs import CODE_LETTERS, CODE_MARK, SEP, Envelope, code, named, stamp, stamp_ms

from .conftest import make_config

T0 = 1_796_319_925_095  # ms: December 2026


@given(st.integers(0, 10**14))
def test_an_enqueue_time_reads_back_and_never_leads_with_a_digit(ms: int) -> None:
    text = stamp(ms)
    assert stamp_ms(text) == ms
    assert text[0].isalpha(), "a decimal time (an earlier release's) always leads with a digit"
    assert stamp_ms(str(ms)) == ms


def test_an_enqueue_time_takes_seven_characters_in_place_of_thirteen() -> None:
    assert len(str(T0)) == 13 and len(stamp(T0)) == 7
    assert stamp(0) == "A" and stamp(55) == "A3"  # 55 is the digit '3': a zero leads it


def test_codes_are_letters_and_earlier_decimal_codes_read_the_same() -> None:
    names = [f"name{i}" for i in range(1, 61)]
    assert [code(i) for i in (1, 26, 27, 52, 53)] == [f"{CODE_MARK}A", f"{CODE_MARK}Z", f"{CODE_MARK}a",
                                                     f"{CODE_MARK}z", f"{CODE_MARK}53"]
    for place in range(1, 61):
        assert named(code(place), names) == named(f"{CODE_MARK}{place}", names) == names[place - 1]
    assert len(CODE_LETTERS) == 52


def earlier_form(line: str) -> str:
    """``line`` as an earlier release stored the same job: a decimal time, attempts and codes."""
    job = Envelope.decode(line)

    def decimal(field: str) -> str:
        if field[:1] == CODE_MARK and field[1:] in CODE_LETTERS:
            return f"{CODE_MARK}{CODE_LETTERS.index(field[1:]) + 1}"
        return field

    return SEP.join([str(job.id), str(job.enqueued_ms), str(job.attempts), decimal(job.tier), decimal(job.task),
                     decimal(job.reason), job.payload])


def test_jobs_an_earlier_release_queued_read_back_as_they_were(client: redis.Redis) -> None:
    now = [T0]
    scheduler = Queue(make_config(), client, clock=lambda: now[0])
    for n in range(4):
        scheduler.enqueue("password_reset", "acme", {"n": n})
        now[0] += 1000
    key = scheduler.keys.tenant_queue("jobs:high", "acme")
    new = [line.decode() for line in client.lrange(key, 0, -1)]
    assert [line.split(SEP)[1:3] for line in new[:2]] == [[stamp(T0), ""], [stamp(T0 + 1000), ""]]
    for i, line in enumerate(new):  # the same jobs as the release before stored them
        client.lset(key, i, earlier_form(line))
    # That release kept a cost entry for every queued party, the default tier's too.
    client.hset(scheduler.keys.class_key("jobs:high", "cost"), "acme", "free")
    old = [line.decode() for line in client.lrange(key, 0, -1)]
    assert old[0].split(SEP)[1:6] == [str(T0), "0", f"{CODE_MARK}2", f"{CODE_MARK}7", f"{CODE_MARK}13"]

    now[0] = T0 + 10_000
    [first] = scheduler.pop(1)
    assert (first.payload, first.enqueued_at, first.attempts) == ({"n": 0}, T0 / 1000, 1)
    assert (first.task, first.reason) == ("password_reset", "a human is blocked on this")
    # The next head's time, read from its decimal field, orders the tenant for aging and FIFO.
    assert client.zscore(scheduler.keys.class_key("jobs:high", "heads"), "acme") == T0 + 1000

    scheduler.nack(first, "try again")  # retried: the earlier form's attempts are rewritten in place
    now[0] += 2000
    [again] = scheduler.pop(1)
    assert (again.job_id, again.payload, again.enqueued_at, again.attempts) == (first.job_id, {"n": 0}, T0 / 1000, 2)

    scheduler.nack(again, "gave up", final=True)
    [dead] = scheduler.dead_letters()
    assert (dead["lease"].task, dead["lease"].enqueued_at) == ("password_reset", T0 / 1000)
    scheduler.requeue_dead(limit=10)  # queued anew, now, in this release's form
    requeued = client.lindex(key, -1).decode()
    assert requeued.split(SEP)[:3] == [first.job_id, stamp(now[0]), ""]

    leases = scheduler.pop(10)
    assert [(lease.payload["n"], lease.reason) for lease in leases] == [
        (n, "a human is blocked on this") for n in (1, 2, 3, 0)]
    assert [lease.enqueued_at for lease in leases] == [(T0 + n * 1000) / 1000 for n in (1, 2, 3)] + [now[0] / 1000]
    # The party left: its entry went with it, and its tier's count is back to none.
    assert client.hgetall(scheduler.keys.class_key("jobs:high", "cost")) == {}
    assert int(client.hget(scheduler.keys.stats, f"tenants{SEP}jobs:high{SEP}free") or 0) == 0
