"""Dead letters: atomic requeue and drop, `fairctl dead`, the count in `fairctl status`, the
worker's handling of tasks without a handler and enqueue's warning for tasks no rule names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from fairctl.cli import app
from fairness_core import Lease, Queue, load_config
from fairness_core.jobs import InvalidJob
from fairness_core.worker import HandlerRegistry, Worker
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .support import write_config

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def config_path(redis_server: RedisServer, tmp_path: Path) -> Path:
    return write_config(tmp_path, redis_server.url)[0]


def kill(scheduler: Queue, lease: Lease, error: str = "boom") -> None:
    assert scheduler.nack(lease, error, final=True) == "dead"


def dead_jobs(scheduler: Queue, *tasks: str, tenant: str = "acme") -> list[Lease]:
    """One job per task, leased and dead-lettered at once; their leases, in order."""
    for task in tasks:
        scheduler.submit(task, tenant, {"task": task})
    leases = scheduler.pop(len(tasks))
    for lease in sorted(leases, key=lambda x: int(x.job_id)):
        kill(scheduler, lease, f"{lease.task} failed")
    return sorted(leases, key=lambda x: int(x.job_id))


def test_requeue_keeps_the_job_and_resets_attempts(client: redis.Redis) -> None:
    scheduler = Queue(make_config(), client)
    job = scheduler.submit("newsletter", "acme", {"n": 1}, tier="pro")
    lease = scheduler.pop(1)[0]
    kill(scheduler, lease)
    assert scheduler.dead_letter_counts()["jobs:low"] == 1 and scheduler.pop(1) == []
    outcome = scheduler.requeue_dead([job.job_id])
    assert (outcome.done, outcome.skipped) == ([job.job_id], [])
    again = scheduler.pop(1)[0]
    assert (again.job_id, again.queue, again.tenant, again.task, again.reason, again.payload, again.attempts) == (
        job.job_id, "jobs:low", "acme", "newsletter", job.reason, {"n": 1}, 1)
    assert scheduler.dead_letter_count() == 0 and scheduler.dead_letter_counts()["jobs:low"] == 0
    assert scheduler.snapshot().classes["jobs:low"].counters["dead"] == 1  # the lifetime counter stays


def test_requeue_and_drop_select_by_id_and_by_class(client: redis.Redis) -> None:
    scheduler = Queue(make_config(), client)
    high, low1, low2 = dead_jobs(scheduler, "password_reset", "newsletter", "backfill")
    assert scheduler.drop_dead(["999", low1.job_id]).done == [low1.job_id]
    assert scheduler.requeue_dead(queue="jobs:high").done == [high.job_id]
    assert [d["lease"].job_id for d in scheduler.dead_letters()] == [low2.job_id]
    assert scheduler.drop_dead(queue="jobs:low").done == [low2.job_id]
    assert scheduler.dead_letter_count() == 0


def test_bad_ids_and_classes_are_named(client: redis.Redis) -> None:
    scheduler = Queue(make_config(), client)
    with pytest.raises(InvalidJob, match="job id: expected a positive whole number"):
        scheduler.requeue_dead(["x1"])
    with pytest.raises(ValueError, match="queue: unknown class 'jobs:nope'"):
        scheduler.drop_dead(queue="jobs:nope")


def test_a_dead_letter_of_a_class_no_longer_configured_stays(client: redis.Redis) -> None:
    old = Queue(make_config(), client)
    (lease,) = dead_jobs(old, "newsletter")
    prefix = old.config.redis.prefix
    two = make_config(classes=[{"name": "jobs:high", "weight": 3, "max_age": "60s"},
                               {"name": "jobs:medium", "weight": 1, "max_age": "15m"}],
                      classification=[{"class": "jobs:medium", "reason": "default"}],
                      redis={"prefix": prefix})
    old.apply(two)  # dead letters hold no class's place: the apply is not refused for them
    outcome = Queue(two, client).requeue_dead()
    assert (outcome.done, outcome.skipped) == ([], [lease.job_id])
    assert old.dead_letter_count() == 1


def test_a_worker_asked_to_dead_letters_a_task_without_handler_at_once(client: redis.Redis) -> None:
    scheduler = Queue(make_config(leases={"max_attempts": 5}), client)
    scheduler.enqueue("no_such_task", "acme")
    worker = Worker(scheduler, HandlerRegistry(), concurrency=1, unhandled="dead-letter")
    lease = scheduler.pop(1)[0]
    assert worker._work(lease, worker.handlers.resolve(lease.task)) is None
    (dead,) = scheduler.dead_letters()
    assert dead["error"] == "no handler for task no_such_task" and dead["lease"].attempts == 1


def test_cli_list_show_requeue_drop(config_path: Path, client: redis.Redis) -> None:
    scheduler = Queue(load_config(config_path), client)
    a, b, c = dead_jobs(scheduler, "password_reset", "newsletter", "backfill")
    listed = invoke("dead", "list", "--config", config_path)
    assert listed.exit_code == 0, listed.output
    assert "3 shown of 3 dead letters" in listed.stdout and "newsletter failed" in listed.stdout
    data = json.loads(invoke("dead", "list", "--json", "--limit", "1", "--queue", "jobs:low",
                             "--config", config_path).stdout)
    assert data["total"] == 3 and [d["id"] for d in data["dead_letters"]] == [b.job_id]

    shown = invoke("dead", "show", a.job_id, "--config", config_path)
    assert shown.exit_code == 0 and "password_reset failed" in shown.stdout and '"task": "password_reset"' in shown.stdout

    status = invoke("status", "--interval", "0", "--config", config_path)
    low = next(line for line in status.stdout.splitlines() if line.startswith("jobs:low"))
    assert low.split()[5] == "2" and "dead letters: 3" in status.stdout

    requeued = invoke("dead", "requeue", a.job_id, "--config", config_path)
    assert requeued.exit_code == 0 and f"requeued 1 dead letter: {a.job_id}" in requeued.stdout
    assert scheduler.pop(1, classes=["jobs:high"])[0].job_id == a.job_id

    refused = invoke("dead", "drop", "--all", "--config", config_path)
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    dropped = invoke("dead", "drop", "--all", "--queue", "jobs:low", "--yes", "--config", config_path)
    assert dropped.exit_code == 0 and "dropped 2 dead letters" in dropped.stdout
    assert scheduler.dead_letter_count() == 0
    assert c.job_id in dropped.stdout


@pytest.mark.parametrize("args, message", [
    (["requeue"], "fairctl: error: ID: give at least one job id, or --all"),
    (["requeue", "7", "--all"], "fairctl: error: --all: give job ids or --all, not both"),
    (["drop", "abc"], "fairctl: error: ID: expected a positive whole number such as 42, got 'abc'"),
    (["show", "-"], "ID"),
    (["requeue", "--all", "--queue", "jobs:nope"], "fairctl: error: --queue: unknown class 'jobs:nope'"),
])
def test_cli_bad_arguments_are_named(config_path: Path, args: list[str], message: str) -> None:
    result = invoke("dead", *args, "--config", config_path)
    assert result.exit_code == 2 and message in result.stderr, result.output


def test_cli_unknown_id_fails_naming_it(config_path: Path, client: redis.Redis) -> None:
    scheduler = Queue(load_config(config_path), client)
    (lease,) = dead_jobs(scheduler, "newsletter")
    result = invoke("dead", "requeue", lease.job_id, "424242", "--config", config_path)
    assert result.exit_code == 1 and "ID: no dead letter with id 424242" in result.stderr
    assert f"requeued 1 dead letter: {lease.job_id}" in result.stdout
    assert invoke("dead", "show", "424242", "--config", config_path).exit_code == 1


def test_enqueue_warns_when_only_the_catch_all_matched(config_path: Path) -> None:
    typo = invoke("enqueue", "no_such_task", "--tenant", "acme", "--config", config_path)
    assert typo.exit_code == 0 and "class jobs:medium: default" in typo.stdout
    assert "no classification rule names 'no_such_task'" in typo.stderr
    named = invoke("enqueue", "newsletter", "--tenant", "acme", "--config", config_path)
    assert named.exit_code == 0 and "warning" not in named.stderr
