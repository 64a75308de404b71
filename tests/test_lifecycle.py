"""Job lifecycle on a real Redis: leases, retries, dead letters, aging, budgets, reservations,
pause/resume, and errors that leave nothing half-written. Time is driven through ``clock``."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.crc import key_slot

from fairness_core import BudgetRejected, Enqueued, InvalidJob, Popped, Queue, RedisUnavailable, TenantLimitReached
from fairness_core.connection import ClusterClient, server_of
from fairness_core.keys import CLASS_PARTS
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .redis_state import read_state

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


def at(client: redis.Redis, **overrides: Any) -> tuple[Queue, Clock]:
    clock = Clock()
    return Queue(make_config(**overrides), client, clock=clock), clock


def test_classification_reason_travels_with_the_job(client: redis.Redis) -> None:
    s, _ = at(client)
    s.enqueue("password_reset", "acme")
    s.enqueue("export_csv", "bigco", tier="enterprise")
    s.enqueue("export_csv", "smallco", user_waiting=True)
    got = {(lease.tenant, lease.queue, lease.reason) for lease in s.pop(3)}
    assert got == {
        ("acme", "jobs:high", "a human is blocked on this"),
        ("bigco", "jobs:medium", "contractual latency commitment"),
        ("smallco", "jobs:high", "a human is blocked on this"),
    }
    assert s.snapshot().classes["jobs:high"].enqueued == {"a human is blocked on this": 2}


def test_ack_completes_and_a_stale_lease_cannot_ack(client: redis.Redis) -> None:
    s, clock = at(client, leases={"visibility_timeout": "10s"})
    s.enqueue("order", "acme", {"n": 1})
    (lease,) = s.pop()
    clock.advance(11)
    assert s.reap() == 1
    (again,) = s.pop()
    assert again.job_id == lease.job_id and again.attempts == 2 and again.payload == {"n": 1}
    assert s.ack(lease) is False, "the first holder's lease expired; its ack must not count"
    assert s.ack(again) is True
    c = s.snapshot().classes["jobs:medium"]
    assert (c.depth, c.inflight, c.counters["processed"], c.counters["redelivered"]) == (0, 0, 1, 1)


def test_acks_riding_with_a_pop_settle_first_and_say_which_counted(client: redis.Redis) -> None:
    s, clock = at(client, leases={"visibility_timeout": "10s"})  # jobs:high reserves 2 of 3 slots
    s.register_worker("w1", 3, ttl=60)
    for n in range(3):
        s.enqueue("order", "acme", {"n": n})
    (first,) = s.pop(5)
    assert s.pop(5) == [], "the one slot left to jobs:medium is taken"
    done = s.ack_and_pop([first, first], 5)
    assert done.acked == [True, False], "the repeated ack is stale, as a second ack() would be"
    assert [lease.payload for lease in done.leases] == [{"n": 1}], "the ack freed the slot before the pop"
    clock.advance(11)
    assert s.reap() == 1
    late = s.ack_and_pop(done.leases, 5)
    assert late.acked == [False] and [lease.attempts for lease in late.leases] == [2], "an expired lease cannot ack"
    last = s.ack_and_pop(late.leases, 5)
    assert last.acked == [True] and [lease.payload for lease in last.leases] == [{"n": 2}]
    c = s.snapshot().classes["jobs:medium"]
    assert (c.depth, c.inflight, c.counters["processed"], c.counters["redelivered"]) == (0, 1, 2, 1)


def test_a_call_writes_each_counter_it_changes_once_and_none_it_leaves_as_it_was(client: redis.Redis) -> None:
    """A pop+ack of one class takes one job off the in-flight count and puts one on: no write."""
    s, clock = at(client)
    for n in range(3):
        s.enqueue("order", "acme", {"n": n})
    (lease,) = s.pop()
    clock.advance(1)

    # commandstats of the server holding the group: on a cluster, its slot's master
    node = redis.Redis.from_url(f"redis://{server_of(client, s.keys.stats)}") if isinstance(client, ClusterClient) else client

    def state() -> tuple[dict[bytes, bytes], int]:
        return client.hgetall(s.keys.stats), node.info("commandstats").get("cmdstat_hincrby", {"calls": 0})["calls"]

    before, writes = state()
    (lease,) = s.ack_and_pop([lease]).leases
    after, writes_after = state()
    changed = {f for f in before.keys() | after.keys() if before.get(f) != after.get(f)}
    assert changed and writes_after - writes == len(changed), "one HINCRBY for each counter that changed"
    inflight = b"inflight\tjobs:medium"
    assert before[inflight] == after[inflight] == b"1" and inflight not in changed


def test_each_window_bucket_drops_the_one_two_windows_older(client: redis.Redis) -> None:
    """A bucket's first completion unlinks the bucket two windows older, which no snapshot reads:
    Redis frees it off its main thread, where the expiry of a set of every tenant served in a
    window would hold every command. Each bucket keeps three windows' TTL for when jobs stop."""
    s, clock = at(client, exporter={"window": "1m"})
    window = 60_000

    def keys(at: int) -> list[str]:
        return [s.keys.class_key("jobs:medium", CLASS_PARTS[part] + str(at // window))
                for part in ("served", "served_total")]

    first = clock.ms
    for _ in range(3):
        s.enqueue("order", "acme")
        (lease,) = s.pop()
        s.ack(lease)
        assert all(2 * window < client.pttl(key) <= 3 * window for key in keys(clock.ms))
        clock.advance(60)
    assert client.exists(*keys(first)) == 0, "two windows on, the first bucket is gone"
    assert client.exists(*keys(first + window), *keys(first + 2 * window)) == 4
    assert s.snapshot().classes["jobs:medium"].counters["processed"] == 3


def test_heartbeat_keeps_a_long_job_leased(client: redis.Redis) -> None:
    s, clock = at(client, leases={"visibility_timeout": "10s"})
    s.enqueue("order", "acme")
    (lease,) = s.pop()
    for _ in range(5):
        clock.advance(8)
        assert s.extend(lease)
        assert s.reap() == 0
    assert s.ack(lease)


def test_reaped_job_returns_to_the_head_of_its_tenant_queue(client: redis.Redis) -> None:
    s, clock = at(client, leases={"visibility_timeout": "5s"})
    first = s.enqueue("order", "acme")
    s.enqueue("order", "acme")
    s.pop()
    clock.advance(6)
    s.reap()
    assert s.pop()[0].job_id == first


def test_nack_retries_with_backoff_then_dead_letters(client: redis.Redis) -> None:
    s, clock = at(client, leases={"max_attempts": 3, "retry_backoff": "2s", "retry_backoff_max": "1m"})
    job = s.enqueue("order", "acme")
    for attempt, backoff in ((1, 2), (2, 4)):
        (lease,) = s.pop()
        assert lease.attempts == attempt
        assert s.nack(lease, "smtp\ttimeout\nline two") == "retry"
        clock.advance(backoff - 0.5)
        assert s.pop() == [], "retried before its backoff passed"
        clock.advance(0.5)
    (lease,) = s.pop()
    assert s.nack(lease, "still failing") == "dead"
    assert s.pop() == []
    (dead,) = s.dead_letters()
    assert dead["lease"].job_id == job and dead["error"] == "still failing"
    c = s.snapshot().classes["jobs:medium"]
    assert (c.counters["failed"], c.counters["dead"], c.depth, c.inflight, c.delayed) == (3, 1, 0, 0, 0)


def test_an_unhandled_job_goes_back_at_once_with_its_attempt_and_is_never_dead_lettered(client: redis.Redis) -> None:
    s, clock = at(client, leases={"max_attempts": 2, "retry_backoff": "2s", "retry_backoff_max": "30s"})
    job = s.enqueue("order", "acme")
    s.enqueue("order", "acme")
    for _ in range(5):  # more deferrals than max_attempts allows failures
        (lease,) = s.pop()
        assert (lease.job_id, lease.attempts) == (job, 1), "the attempt was given back"
        assert s.defer_unhandled(lease) == "unhandled"
        assert s.defer_unhandled(lease) == "stale", "a lease is given back once"
        c = s.snapshot().classes["jobs:medium"]
        assert (c.depth, c.inflight, c.delayed) == (2, 0, 0), "back in the queue at once, at its tenant's head"
        clock.advance(0.5)
    c = s.snapshot().classes["jobs:medium"]
    assert (c.counters["unhandled"], c.counters["failed"], c.counters["dead"]) == (5, 0, 0)
    assert s.dead_letters() == []
    (lease,) = s.pop()
    assert (lease.job_id, lease.attempts) == (job, 1) and s.ack(lease), "a worker with the handler runs it first"
    c = s.snapshot().classes["jobs:medium"]
    assert (c.wait_count, c.wait_sum) == (1, 0.0), "the wait until its first lease, counted once (not at each lease)"


def test_aging_promotes_overdue_low_jobs_one_class_up(client: redis.Redis) -> None:
    s, clock = at(client)  # jobs:low promote_after: 30m
    old = s.enqueue("newsletter", "acme")
    clock.advance(29 * 60)
    young = s.enqueue("newsletter", "acme")
    clock.advance(2 * 60)
    assert s.promote_overdue() == 1
    snap = s.snapshot().classes
    assert (snap["jobs:low"].depth, snap["jobs:medium"].depth, snap["jobs:low"].counters["promoted"]) == (1, 1, 1)
    assert snap["jobs:medium"].oldest_age == pytest.approx(31 * 60), "a promoted job keeps its age"
    leases = {lease.job_id: lease.queue for lease in s.pop(2)}
    assert leases == {old: "jobs:medium", young: "jobs:low"}


def test_aging_promotes_a_batch_per_tenant_so_a_flood_stays_a_flood(client: redis.Redis) -> None:
    s, clock = at(client, tenants={"batch": 10})
    for _ in range(50):
        s.enqueue("newsletter", "storm")
    s.enqueue("newsletter", "digest")
    clock.advance(31 * 60)
    assert s.promote_overdue() == 11
    snap = s.snapshot().classes
    assert dict(snap["jobs:medium"].top_backlog) == {"storm": 10, "digest": 1}
    assert dict(snap["jobs:low"].top_backlog) == {"storm": 40}


def test_a_large_sweep_runs_in_short_calls_with_one_visit_per_tenant(client: redis.Redis) -> None:
    """Aging 120 tenants, reaping 120 expired leases: each sweep takes several calls of at most
    SWEEP_BATCH jobs (each short in Redis), and visits each overdue tenant once, as one call would."""
    s, clock = at(client, tenants={"batch": 2}, leases={"visibility_timeout": "10s"})
    for t in range(120):
        s.submit_many("newsletter", f"t{t}", [None] * 3)
    clock.advance(31 * 60)
    assert s.promote_overdue(limit=7) == 7, "2 jobs from each of the 3 oldest tenants, 1 from the 4th"
    # A new sweep: the third job of each of the first 3, the 4th's last 2, 2 of each of the other
    # 116 tenants, who keep one each (a second visit in the same sweep would have taken it).
    assert s.promote_overdue() == 3 + 2 + 2 * 116
    snap = s.snapshot().classes
    assert (snap["jobs:medium"].depth, snap["jobs:low"].depth) == (244, 116)
    assert set(dict(snap["jobs:low"].top_backlog).values()) == {1}
    leases = s.pop(120, classes=["jobs:medium"])
    clock.advance(11)
    assert s.reap() == 120 and len(leases) == 120
    assert s.snapshot().classes["jobs:medium"].inflight == 0


def test_priority_budget_demotes_the_excess_with_a_reason(client: redis.Redis) -> None:
    s, _ = at(client, scheduler={"budget_min_arrivals": 10})  # jobs:high arrival_budget 0.20
    for i in range(80):
        s.enqueue("order", f"t{i}")
    outcomes = [s.submit("password_reset", "acme") for _ in range(40)]
    demoted = [o for o in outcomes if o.reason == "over priority budget"]
    assert demoted and all(o.queue == "jobs:medium" for o in demoted)
    high = s.snapshot().classes["jobs:high"]
    assert high.counters["demoted"] == len(demoted)
    assert high.enqueued["a human is blocked on this"] / 120 <= 0.20 + 1 / 120


def test_priority_budget_can_reject_instead(client: redis.Redis) -> None:
    s, _ = at(client, scheduler={"budget_min_arrivals": 1, "budget_action": "reject"})
    s.enqueue("order", "acme")
    with pytest.raises(BudgetRejected, match="jobs:high"):
        for _ in range(5):
            s.enqueue("password_reset", "acme")
    assert s.snapshot().classes["jobs:high"].counters["rejected"] >= 1


def one_at_a_time(s: Queue, task: str, tenant: str, n: int, tier: str | None) -> list[Enqueued | None]:
    """``n`` jobs submitted one call each, None for each a budget rejected or a limit refused."""
    out: list[Enqueued | None] = []
    for i in range(n):
        try:
            out.append(s.submit(task, tenant, {"n": i}, tier=tier))
        except (BudgetRejected, TenantLimitReached):
            out.append(None)
    return out


@pytest.mark.parametrize("action", ["demote", "reject"])
def test_a_batch_decides_each_job_as_its_own_call_would(client: redis.Redis, action: str) -> None:
    """submit_many sends its jobs in calls of many: the answers and the state they leave must be
    those of one call per job, through a budget that starts demoting or rejecting part-way through
    a call, a tenant limit reached in the middle of one, and a tenant's tier changing."""
    overrides = {"scheduler": {"budget_min_arrivals": 10, "budget_action": action}, "tenants": {"max_queued": 30}}
    single, _ = at(client, **overrides)
    batched, _ = at(client, **overrides)
    plan = [("order", "t1", 12, None), ("password_reset", "acme", 40, None),
            ("export_csv", "bigco", 35, "enterprise"), ("password_reset", "acme", 7, "enterprise"),
            ("newsletter", "t1", 30, None)]
    for task, tenant, n, tier in plan:
        expected = one_at_a_time(single, task, tenant, n, tier)
        assert batched.submit_many(task, tenant, [{"n": i} for i in range(n)], tier=tier) == expected
    assert read_state(batched.config, client, T0) == read_state(single.config, client, T0)
    counters = {name: sum(c.counters.get(name, 0) for c in single.snapshot().classes.values())
                for name in ("demoted" if action == "demote" else "rejected", "refused")}
    assert all(counters.values()), f"the plan must reach the budget and the limit: {counters}"


def test_reserved_slots_are_kept_for_their_class(client: redis.Redis) -> None:
    s, _ = at(client)  # jobs:high reserved_slots: 2
    s.register_worker("w1", 4, ttl=60)
    for _ in range(10):
        s.enqueue("order", "acme")
    assert len(s.pop(10)) == 2, "two of four fleet slots stay free for jobs:high"
    s.enqueue("password_reset", "acme")
    assert [lease.queue for lease in s.pop(10)] == ["jobs:high"]
    s.unregister_worker("w1")
    assert len(s.pop(10)) == 8, "with no registered capacity there is nothing to reserve from"


def test_a_pop_says_when_reservations_held_it_back(client: redis.Redis) -> None:
    """Held back (work queued, no slot free of jobs:high's reservation) is told apart from no
    work, so that a worker waits for jobs:high's work instead of popping again at once."""
    s, _ = at(client)  # jobs:high reserved_slots: 2
    s.register_worker("w1", 4, ttl=60)
    assert s.ack_and_pop([], 1) == Popped(acked=[], leases=[], held_back=False), "no work: not held back"
    for _ in range(3):
        s.enqueue("order", "acme")
    first = s.ack_and_pop([], 2)
    assert len(first.leases) == 2 and not first.held_back
    assert s.ack_and_pop([], 1) == Popped(acked=[], leases=[], held_back=True)
    assert s.ack_and_pop([], 1, classes=["jobs:medium"]).leases, "a pool without jobs:high keeps no reservation"
    s.enqueue("password_reset", "acme")
    assert [lease.queue for lease in s.ack_and_pop(first.leases, 1).leases] == ["jobs:high"]


def test_a_pool_holds_no_slot_for_a_reservation_it_cannot_serve(client: redis.Redis) -> None:
    """A pool limited to jobs:low can never run jobs:high, so jobs:high's reserved_slots hold
    none of its slots: its one slot serves jobs:low, while an unlimited worker still keeps them."""
    s, _ = at(client)  # jobs:high reserved_slots: 2
    s.register_worker("low-pool", 1, ttl=60)
    for _ in range(3):
        s.enqueue("newsletter", "acme")
    assert [lease.queue for lease in s.pop(1, classes=["jobs:low"])] == ["jobs:low"]
    assert s.pop(1) == [], "an unlimited worker keeps the reservation: 1 slot, 1 in use"


def test_expired_worker_registration_gives_back_its_slots(client: redis.Redis) -> None:
    s, clock = at(client)
    s.register_worker("w1", 8, ttl=5)
    assert s.snapshot().worker_slots == 8
    clock.advance(6)
    s.reap()
    assert s.snapshot().worker_slots == 0


def test_a_stall_leaves_every_registration_time_to_be_renewed_after_it(client: redis.Redis) -> None:
    """A registration with no margin left when Redis stalled (its worker starved, its renewal due)
    still lapses no sooner than 5 s after the stall: its worker renews on its own backoff, later
    than the first reap after the stall. Before, the stall's gap was all it got, here 0.1 s."""
    s, clock = at(client)
    s.register_worker("w1", 8, ttl=3)
    clock.advance(2.9)
    s.reap()  # the last reap before the stall; w1's registration has 0.1 s left
    clock.advance(5.1)
    s.reap()  # the first after it: no reap ran for 5.1 s
    clock.advance(1.0)  # w1 still backing off after the outage
    s.reap()
    assert s.snapshot().worker_slots == 8
    clock.advance(4.1)  # 5 s after the stall, unrenewed: lapsed
    s.reap()
    assert s.snapshot().worker_slots == 0


def test_pause_holds_a_class_and_resume_releases_it(client: redis.Redis) -> None:
    s, _ = at(client)
    s.enqueue("newsletter", "marketing")
    s.enqueue("password_reset", "acme")
    s.pause("jobs:low")
    assert [lease.queue for lease in s.pop(5)] == ["jobs:high"]
    assert s.snapshot().classes["jobs:low"].paused
    s.resume("jobs:low")
    assert [lease.queue for lease in s.pop(5)] == ["jobs:low"]


def test_a_worker_limited_to_some_classes_takes_only_those(client: redis.Redis) -> None:
    s, _ = at(client)
    s.enqueue("newsletter", "m")
    s.enqueue("order", "o")
    assert [lease.queue for lease in s.pop(5, classes=["jobs:low"])] == ["jobs:low"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.enqueue("order", ""), "tenant"),
        (lambda s: s.enqueue("order", "a\nb"), "tenant"),
        (lambda s: s.enqueue("order", "x" * 300), "tenant"),
        (lambda s: s.enqueue("order", 42), "tenant"),
        (lambda s: s.enqueue("order", "__other__"), "tenant"),
        (lambda s: s.enqueue("bad task", "acme"), "task"),
        (lambda s: s.enqueue("order", "acme", {"when": object()}), "payload"),
        (lambda s: s.enqueue("order", "acme", {"x": float("nan")}), "payload"),
        (lambda s: s.enqueue("order", "acme", "x" * 2_000_000), "payload"),
        (lambda s: s.enqueue("order", "acme", tier="platinum"), "tier"),
        (lambda s: s.enqueue("order", "acme", user_waiting="yes"), "user_waiting"),
    ],
)
def test_bad_job_input_is_refused_by_name_and_writes_nothing(client: redis.Redis, call: Any, field: str) -> None:
    s, _ = at(client)
    s.enqueue("order", "acme")
    before = read_state(s.config, client, T0)
    with pytest.raises(InvalidJob) as err:
        call(s)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")
    assert read_state(s.config, client, T0) == before


def test_unknown_class_names_are_refused(client: redis.Redis) -> None:
    s, _ = at(client)
    with pytest.raises(ValueError, match="queue: unknown class 'jobs:urgent'"):
        s.pause("jobs:urgent")
    with pytest.raises(ValueError, match="classes: unknown class"):
        s.pop(1, classes=["nope"])


def test_odd_tenant_ids_stay_in_their_own_namespace(client: redis.Redis) -> None:
    s, _ = at(client)
    odd = ["{fq}", "a}b{c", "x:y:z", "ünïcødé", "🙂", "q/jobs:high/tags", "*", "[a]"]
    for tenant in odd:
        s.enqueue("order", tenant)
    base = s.keys.base.encode()
    ours = [key for key in client.keys("*") if key.startswith(base)]
    assert {key_slot(key) for key in ours} == {key_slot(base)}, "every key of the group shares one hash slot"
    for tenant in odd:
        assert client.llen(s.keys.tenant_queue("jobs:medium", tenant)) == 1
    assert sorted(lease.tenant for lease in s.pop(len(odd) * 2)) == sorted(odd)


@pytest.mark.live  # stops a redis-server of its own
def test_redis_down_is_a_clear_error() -> None:
    server = RedisServer().start()
    conn = redis.Redis.from_url(server.url, socket_connect_timeout=1, retry_on_timeout=False)
    s = Queue(make_config(), conn)
    s.enqueue("order", "acme")
    server.close()
    with pytest.raises(RedisUnavailable, match="127.0.0.1"):
        s.enqueue("order", "acme")
    with pytest.raises(RedisUnavailable):
        s.pop()
