"""``fairctl explain``: where a job is and why it waits, each reason named with its figures, read
from a real redis-server; the module directly (on a test clock), and the command through click."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from fairctl.cli import app
from fairness_core import InvalidJob, Queue
from fairness_core.config import parse_config
from fairness_core.config_dump import config_to_data
from fairness_core.explain import JobExplanation, explain_job, explain_tenant
from fairness_stack.servers import RedisServer, free_port

from .conftest import make_config
from .support import write_config

NOW = 1_700_000_000_000
LOW = "jobs:low"  # newsletters go there (the example config's rules)
TASK = "newsletter"
runner = CliRunner()


def _queue(client: redis.Redis, clock: list[int], **sections: Any) -> Queue:
    return Queue(make_config(**sections), client, clock=lambda: clock[0])


def _explain(q: Queue, job_id: str, clock: list[int], **kwargs: Any) -> JobExplanation:
    return explain_job(q, job_id, now_ms=clock[0], **kwargs)


def _codes(found: Any) -> list[str]:
    return [r.code for r in found.reasons]


def _reason(found: Any, code: str) -> Any:
    matches = [r for r in found.reasons if r.code == code]
    assert matches, f"no {code!r} reason among {_codes(found)}: {found}"
    return matches[0]


def _live(q: Queue, slots: int = 8) -> None:
    """A worker registered now, for a minute: no 'no live worker' reason."""
    q.register_worker("w1", slots, 60)


# ------------------------------------------------------------------ states


def test_a_queued_job_says_its_class_tenant_and_place_in_its_sub_queue(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    _live(q)
    ids = [q.enqueue(TASK, "acme", {"n": i}) for i in range(4)]
    found = _explain(q, ids[2], clock)
    assert found.state == "queued"
    assert (found.job["class"], found.job["tenant"], found.job["task"]) == (LOW, "acme", TASK)
    assert found.details["jobs_ahead"] == 2 and found.place is not None and found.place.jobs_ahead == 2
    assert "with 2 jobs of its tenant's before it" in found.summary
    assert found.search is not None and found.search.complete and found.search.subqueues_read >= 1


def test_a_retry_waiting_for_its_backoff_says_until_when(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    _live(q)
    job = q.enqueue(TASK, "acme")
    (lease,) = q.pop(1)
    assert q.nack(lease, "boom") == "retry"
    found = _explain(q, job, clock)
    assert found.state == "delayed" and found.details["due"] == (NOW + 1000) / 1000  # leases.retry_backoff 1s
    backoff = _reason(found, "backoff")
    assert backoff.figures["until"] == (NOW + 1000) / 1000 and "retry backoff until" in backoff.text
    assert "in 1.0s" in backoff.text


def test_a_leased_job_names_its_worker_deadline_and_attempt(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    q.register_worker("worker-7", 4, 60)
    job = q.enqueue(TASK, "acme")
    q.pop(1, owner="worker-7")
    clock[0] += 2000
    found = _explain(q, job, clock)
    assert found.state == "leased"
    assert found.details["worker"] == "worker-7" and found.details["attempt"] == 1
    assert found.details["deadline"] == (NOW + 300_000) / 1000 and found.details["since"] == NOW / 1000
    assert "by worker worker-7" in found.summary and "attempt 1 of 5" in found.summary
    assert "2.0s ago" in found.summary and "in 4m58s" in found.summary


def test_a_dead_job_says_its_error(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    job = q.enqueue(TASK, "acme")
    (lease,) = q.pop(1)
    q.nack(lease, "template missing", final=True)
    found = _explain(q, job, clock)
    assert found.state == "dead" and found.details["error"] == "template missing"
    assert "template missing" in found.summary and f"fairctl dead requeue {job}" in found.summary


def test_an_acked_job_is_done_and_an_id_never_issued_unknown(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    job = q.enqueue(TASK, "acme")
    q.ack(q.pop(1)[0])
    done = _explain(q, job, clock)
    assert done.state == "done" and done.details["issued"] == int(job)
    assert "acked" in done.summary
    unknown = _explain(q, str(int(job) + 1), clock)
    assert unknown.state == "unknown" and "never issued" in unknown.summary and unknown.details["issued"] == int(job)


def test_a_search_that_stops_at_its_bound_says_so(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    first = q.enqueue(TASK, "acme")
    for _ in range(5):
        q.enqueue(TASK, "acme")
    found = _explain(q, first, clock, max_jobs=3)  # the sub-queue's 3 youngest only
    assert found.state == "not_found" and found.search is not None and not found.search.complete
    assert "--max-jobs 3" in found.summary
    narrowed = _explain(q, first, clock, tenant="other")  # not among the sub-queues named: not "done"
    assert narrowed.state == "not_found" and "tenant other" in narrowed.summary
    assert _explain(q, first, clock, tenant="acme").state == "queued"


def test_a_sharded_queue_explains_by_shard_and_id(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, redis={"shards": 2})
    job = q.enqueue(TASK, "acme")
    shard = int(job.partition(":")[0])
    found = _explain(q, job, clock)
    assert found.state == "queued" and found.group == q.shard(shard).keys.prefix
    with pytest.raises(InvalidJob, match="job id"):
        _explain(q, "7", clock)  # no shard named


# ------------------------------------------------------------------ reasons


def test_a_paused_class_is_named(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    _live(q)
    job = q.enqueue(TASK, "acme")
    q.pause(LOW)
    assert "fairctl resume jobs:low" in _reason(_explain(q, job, clock), "paused").text
    q.resume(LOW)
    assert "paused" not in _codes(_explain(q, job, clock))


def test_a_tenant_at_its_cap_says_3_of_3_and_the_field(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"max_in_flight": 3, "batch": 10})
    _live(q)
    ids = [q.enqueue(TASK, "acme") for _ in range(5)]
    before = _explain(q, ids[3], clock)
    assert "cap" not in _codes(before)
    assert len(q.pop(5)) == 3
    cap = _reason(_explain(q, ids[3], clock), "cap")
    assert "3 of 3 running" in cap.text and "tenants.max_in_flight = 3" in cap.text
    assert cap.figures == {"running": 3, "limit": 3, "field": "tenants.max_in_flight", "held": True}
    data = config_to_data(q.config)
    data["tenants"]["max_in_flight"] = 2
    q.apply(parse_config(data))  # the applied config is the one explained, and 3 run over its new cap of 2
    assert "3 of 2 running" in _reason(_explain(q, ids[3], clock), "cap").text


def test_a_tenant_override_cap_names_the_override(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"max_in_flight": 9, "overrides": {"acme": {"max_in_flight": 1}}})
    _live(q)
    ids = [q.enqueue(TASK, "acme") for _ in range(2)]
    q.pop(1)
    cap = _reason(_explain(q, ids[1], clock), "cap")
    assert "1 of 1 running" in cap.text and "tenants.overrides.acme.max_in_flight" in cap.text
    assert "the next pop to reach it holds it" in cap.text  # not parked yet: no pop visited it since


def test_a_tenant_out_of_rate_says_its_next_start(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"dispatch_rate": "2/s", "dispatch_burst": 2})
    _live(q)
    ids = [q.enqueue(TASK, "acme") for _ in range(4)]
    assert len(q.pop(4)) == 2  # the burst, then held until the next token is due, 500 ms on
    rate = _reason(_explain(q, ids[2], clock), "rate")
    assert rate.figures["next_start"] == (NOW + 500) / 1000 and rate.figures["rate"] == 2
    assert "next start at" in rate.text and "in 0.50s" in rate.text
    assert "2/s (tenants.dispatch_rate)" in rate.text and "burst 2 (tenants.dispatch_burst)" in rate.text
    clock[0] += 500
    assert "rate" not in _codes(_explain(q, ids[2], clock))  # its token is due


def test_an_account_at_its_cap_is_named_with_the_account_field(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"account_separator": "/", "account_max_in_flight": 2})
    _live(q)
    for _ in range(2):
        q.enqueue(TASK, "acme/a")
    waiting = q.enqueue(TASK, "acme/b")
    assert len(q.pop(3)) == 2
    cap = _reason(_explain(q, waiting, clock), "account_cap")
    assert "account acme is at its cap: 2 of 2 running" in cap.text
    assert cap.figures["field"] == "tenants.account_max_in_flight"


def test_a_class_held_for_another_class_s_reservation_says_whose(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)  # the example config: jobs:high has reserved_slots 2
    q.register_worker("w1", 2, 60)
    job = q.enqueue(TASK, "acme")
    found = _explain(q, job, clock)
    reservation = _reason(found, "reservation")
    assert "jobs:high (reserved_slots 2, 0 running)" in reservation.text
    assert reservation.figures["kept"] == {"jobs:high": 2} and reservation.figures["slots"] == 2
    assert q.pop(1) == []  # as the script decides for a worker serving every class
    q.register_worker("w1", 3, 60)
    assert "reservation" not in _codes(_explain(q, job, clock))


def test_no_live_worker_is_named_whether_none_came_or_all_lapsed(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    job = q.enqueue(TASK, "acme")
    never = _reason(_explain(q, job, clock), "no_worker")
    assert "no live worker registered" in never.text and "no worker ever registered" in never.text
    q.register_worker("w1", 4, 1)
    assert "no_worker" not in _codes(_explain(q, job, clock))
    clock[0] += 5000
    lapsed = _reason(_explain(q, job, clock), "no_worker")
    assert "the latest lapsed at" in lapsed.text and "4.0s ago" in lapsed.text


def test_a_job_that_waits_its_turn_gets_its_place_and_an_estimate(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"batch": 1})
    _live(q)
    for tenant in ("a", "b", "c"):
        for _ in range(3):
            q.enqueue(TASK, tenant)
    for lease in q.pop(3):  # a, b and c once each: 3 processed in the window
        q.ack(lease)
    mine = [q.enqueue(TASK, "d") for _ in range(2)]
    found = _explain(q, mine[1], clock)
    turn = _reason(found, "turn")
    assert found.place is not None and found.place.parties == 4 and found.place.jobs_ahead == 1
    ahead = found.place.parties_ahead
    assert ahead is not None and ahead == client.zrank(q.shard(0).keys.class_key(LOW, "tags"), "d")
    assert f"d is {ahead + 1} of 4 parties by finish tag ({ahead} ahead)" in turn.text
    estimate = found.estimate
    assert estimate is not None
    assert estimate.jobs_before == ahead + 3 * 1 + 1 + 0  # parties ahead, then a round of the 3 others, then its own
    assert estimate.jobs_per_s == pytest.approx(3 / 600)  # 3 processed over exporter.window, 10m
    assert estimate.seconds == pytest.approx(estimate.jobs_before / (3 / 600))
    assert "jobs/s" in turn.text and "exporter.window" in turn.text and "tenants.batch" in turn.text


def test_an_idle_class_has_no_rate_to_estimate_from(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock)
    _live(q)
    job = q.enqueue(TASK, "acme")
    found = _explain(q, job, clock)
    assert found.estimate is not None and found.estimate.seconds is None
    assert "no rate to estimate its wait from" in _reason(found, "turn").text


def test_a_tenant_s_standing_per_class(client: redis.Redis) -> None:
    clock = [NOW]
    q = _queue(client, clock, tenants={"max_in_flight": 2, "limits": {"free": {"dispatch_rate": "5/s",
                                                                                          "dispatch_burst": 2}}})
    _live(q)
    for _ in range(4):
        q.enqueue(TASK, "acme")
    q.enqueue("password_reset", "acme")
    q.pop(2, classes=[LOW])
    standing = explain_tenant(q, "acme", now_ms=clock[0])
    assert standing.running == 2 and standing.tier == "free"
    limits = {lim.name: lim for lim in standing.limits}
    assert (limits["max_in_flight"].value, limits["max_in_flight"].field) == (2, "tenants.max_in_flight")
    assert (limits["dispatch_rate"].value, limits["dispatch_rate"].field) == (5, "tenants.limits.free.dispatch_rate")
    assert limits["dispatch_burst"].field == "tenants.limits.free.dispatch_burst"
    rows = {row.queue: row for row in standing.classes}
    assert (rows[LOW].queued, rows[LOW].inflight) == (2, 2)
    assert (rows["jobs:high"].queued, rows["jobs:high"].inflight) == (1, 0)
    assert "cap" in _codes(rows["jobs:high"]) and "2 of 2 running" in _reason(rows["jobs:high"], "cap").text
    with pytest.raises(InvalidJob, match="control characters"):
        explain_tenant(q, "a\tb")


# ------------------------------------------------------------------ the command


@pytest.fixture
def config_path(redis_server: RedisServer, tmp_path: Path) -> Path:
    return write_config(tmp_path, redis_server.url)[0]


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def test_the_command_explains_a_job_in_text_and_json(config_path: Path) -> None:
    enqueued = invoke("enqueue", TASK, "--tenant", "acme", "--count", "2", "--config", config_path)
    assert enqueued.exit_code == 0, enqueued.output
    job = enqueued.stdout.split(":")[1].split()[1]  # the second of the two ids
    assert invoke("pause", LOW, "--config", config_path).exit_code == 0
    text = invoke("explain", job, "--config", config_path)
    assert text.exit_code == 0, text.output
    assert f"job {job} is queued in jobs:low, tenant acme" in text.stdout
    assert "why it waits:" in text.stdout and "- paused: class jobs:low is paused" in text.stdout
    assert "- no_worker: no live worker registered" in text.stdout

    shown = invoke("explain", job, "--json", "--config", config_path)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert set(data) == {"job_id", "group", "state", "summary", "job", "details", "reasons", "place", "estimate",
                         "search"}
    assert (data["job_id"], data["state"]) == (job, "queued")
    assert set(data["job"]) == {"class", "tenant", "task", "tier", "reason", "attempts", "enqueued_at"}
    assert [r["reason"] for r in data["reasons"]] == ["paused", "no_worker"]
    assert all(set(r) >= {"reason", "text"} for r in data["reasons"])
    assert data["place"]["jobs_ahead"] == 1 and data["search"]["complete"] is True


def test_the_command_explains_a_tenant(config_path: Path) -> None:
    invoke("enqueue", TASK, "--tenant", "acme", "--count", "3", "--config", config_path)
    text = invoke("explain", "--tenant", "acme", "--config", config_path)
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("tenant acme, tier free: 0 leased, all classes")
    assert "limits:" in text.stdout and "max_in_flight: none (tenants.max_in_flight)" in text.stdout
    assert "jobs:low" in text.stdout and "3 queued, 0 leased" in text.stdout
    data = json.loads(invoke("explain", "--tenant", "acme", "--json", "--config", config_path).stdout)
    assert set(data) == {"tenant", "account", "tier", "running", "limits", "classes"}
    (row,) = data["classes"]
    assert (row["class"], row["queued"], row["inflight"]) == (LOW, 3, 0)
    assert set(row) == {"group", "class", "queued", "inflight", "oldest_enqueued_at", "reasons", "place", "estimate"}
    nobody = invoke("explain", "--tenant", "nobody", "--config", config_path)
    assert nobody.exit_code == 0 and "nothing queued or leased in any class" in nobody.stdout


@pytest.mark.parametrize("args, argument", [
    (("abc",), "JOB_ID: expected a positive whole number"),
    ((), "JOB_ID: give a job id, or --tenant"),
    (("--tenant", "a\tb"), "--tenant: must not contain control characters"),
    (("1", "--tenant", " acme"), "--tenant: must not start or end with whitespace"),
    (("1", "--class", "jobs:nope"), "--class: unknown class 'jobs:nope'"),
])
def test_bad_input_names_the_argument(config_path: Path, args: tuple[str, ...], argument: str) -> None:
    bad = invoke("explain", *args, "--config", config_path)
    assert bad.exit_code == 2, bad.output
    assert f"fairctl: error: {argument}" in bad.stderr


def test_redis_down_names_the_redis_url(config_path: Path) -> None:
    down = invoke("explain", "1", "--config", config_path, "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert down.exit_code == 2, down.output
    assert "fairctl: error: --redis-url: Redis at 127.0.0.1" in down.stderr
