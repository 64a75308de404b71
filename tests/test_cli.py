"""The fairctl CLI against a real redis-server: commands, the status table, bad input -> exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import redis
import yaml
from click.testing import CliRunner, Result

from fairctl.cli import app
from fairctl.status_view import class_statuses, render
from fairness_core import Finished, Queue, load_config
from fairness_core.ages import format_age
from fairness_stack.servers import RedisServer, free_port

from .conftest import EXAMPLE_CONFIG
from .support import write_config

runner = CliRunner()


@pytest.fixture
def config_path(redis_server: RedisServer, tmp_path: Path) -> Path:
    return write_config(tmp_path, redis_server.url)[0]


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def scheduler_for(config_path: Path, client: redis.Redis) -> Queue:
    return Queue(load_config(config_path), client)


def test_enqueue_prints_ids_class_and_reason(config_path: Path, client: redis.Redis) -> None:
    one = invoke("enqueue", "password_reset", "--tenant", "acme", "--config", config_path)
    assert one.exit_code == 0, one.output
    assert re.search(r"enqueued 1 job: \d+", one.stdout)
    assert "class jobs:high: a human is blocked on this" in one.stdout

    many = invoke("enqueue", "newsletter", "--tenant", "acme", "--count", "40", "--payload", '{"service_s": 0}',
                  "--config", config_path)
    assert many.exit_code == 0, many.output
    ids = re.search(r"enqueued 40 jobs: ids (\d+) \.\. (\d+)", many.stdout)
    assert ids, many.stdout
    first, last = map(int, ids.groups())
    assert last - first == 39 and "class jobs:low: deferred batch work" in many.stdout

    waiting = invoke("enqueue", "report_export", "--tenant", "big", "--tier", "enterprise", "--user-waiting",
                     "--config", config_path)
    assert "class jobs:high" in waiting.stdout
    lease = scheduler_for(config_path, client).pop(1, classes=["jobs:low"])[0]
    assert (lease.task, lease.tenant, lease.payload) == ("newsletter", "acme", {"service_s": 0})


def test_enqueue_with_a_key_run_twice_queues_one_job(config_path: Path, client: redis.Redis) -> None:
    runs = [invoke("enqueue", "password_reset", "--tenant", "acme", "--key", "acme:reset-9", "--config", config_path)
            for _ in range(2)]
    assert [r.exit_code for r in runs] == [0, 0], runs[1].output
    assert runs[0].stdout == runs[1].stdout and "class jobs:high: a human is blocked on this" in runs[1].stdout
    assert scheduler_for(config_path, client).snapshot().classes["jobs:high"].depth == 1
    for args, problem in ((("--key", "a\nb"), "--key: must not contain control characters"),
                          (("--key", "k", "--count", "2"), "--key: names one job: it cannot go with --count")):
        bad = invoke("enqueue", "order", "--tenant", "acme", *args, "--config", config_path)
        assert (bad.exit_code, problem in bad.stderr) == (2, True), bad.output


def test_pause_resume_and_status(config_path: Path, client: redis.Redis) -> None:
    invoke("enqueue", "newsletter", "--tenant", "acme", "--count", "3", "--config", config_path)
    assert invoke("pause", "jobs:low", "--config", config_path).exit_code == 0
    scheduler = scheduler_for(config_path, client)
    assert scheduler.snapshot().classes["jobs:low"].paused and scheduler.pop(1) == []

    table = invoke("status", "--interval", "0", "--config", config_path)
    assert table.exit_code == 0, table.output
    low = next(line for line in table.stdout.splitlines() if line.startswith("jobs:low"))
    assert low.split()[1] == "3" and " yes " in low and low.endswith("-")
    assert "jobs:low: acme (3)" in table.stdout
    applied = scheduler.groups()[0].read_applied()
    assert applied is not None
    assert (f"config: v1 of queue group {applied.config.redis.prefix} (fingerprint {applied.fingerprint}), "
            "applied ") in table.stdout

    assert invoke("resume", "jobs:low", "--config", config_path).exit_code == 0
    data = json.loads(invoke("status", "--json", "--interval", "0.1", "--config", config_path).stdout)
    low_json = next(c for c in data["classes"] if c["name"] == "jobs:low")
    assert low_json["paused"] is False and low_json["depth"] == 3 and low_json["weight_pct"] == 10.0
    assert data["applied_config"]["version"] == 1 and data["applied_config"]["fingerprint"] == applied.fingerprint


def test_realised_share_is_the_processed_delta_between_snapshots(config_path: Path, client: redis.Redis) -> None:
    scheduler = scheduler_for(config_path, client)
    for task in ["password_reset"] * 7 + ["newsletter"] * 3 + ["order_confirmation"] * 2:
        scheduler.enqueue(task, "t")
    for lease in scheduler.pop(2, classes=["jobs:medium"]):
        scheduler.ack(lease)  # before the interval: not part of the share
    before = scheduler.snapshot()
    for lease in scheduler.pop(7, classes=["jobs:high"]) + scheduler.pop(3, classes=["jobs:low"]):
        scheduler.ack(lease)
    rows = class_statuses(scheduler.config, before, scheduler.snapshot(), top=3)
    assert [(r.name, r.processed, r.share_pct) for r in rows] == [
        ("jobs:high", 7, 70.0), ("jobs:medium", 0, 0.0), ("jobs:low", 3, 30.0)]
    assert render(rows, 1.0).splitlines()[0].endswith(" share") and (
        "share = processed per class over the last 1s (10 jobs; scheduler.charge: jobs)" in render(rows, 1.0))
    assert all(r.share_pct is None for r in class_statuses(scheduler.config, None, before, top=3))


def test_under_charge_runtime_status_shows_shares_of_worker_time(redis_server: RedisServer, client: redis.Redis,
                                                                tmp_path: Path) -> None:
    path, _ = write_config(tmp_path, redis_server.url, scheduler={"charge": "runtime"})
    scheduler = scheduler_for(path, client)
    for task in ["password_reset"] + ["newsletter"] * 3:
        scheduler.enqueue(task, "t")
    before = scheduler.snapshot()
    (high,) = scheduler.pop(1, classes=["jobs:high"])
    *low, last = scheduler.pop(3, classes=["jobs:low"])
    assert scheduler.ack_and_pop([Finished(high, 0.6)] + [Finished(lease, 0.1) for lease in low]).acked == [True] * 3
    assert scheduler.nack(last, "boom", runtime=0.1) == "retry"  # a failure's time is worker time too
    rows = class_statuses(scheduler.config, before, scheduler.snapshot(), top=3)
    assert [(r.name, r.processed) for r in rows] == [("jobs:high", 1), ("jobs:medium", 0), ("jobs:low", 2)]
    assert [r.worktime_s for r in rows] == pytest.approx([0.6, 0.0, 0.3])
    assert [r.share_pct for r in rows] == pytest.approx([200 / 3, 0.0, 100 / 3])  # by jobs: 33% and 67%
    text = render(rows, 1.0, charge="runtime")
    assert text.splitlines()[0].split()[-2:] == ["time", "share"]
    assert next(line for line in text.splitlines() if line.startswith("jobs:high")).endswith(" 66.7%")
    assert ("time share = worker time per class over the last 1s (0.9s reported, 3 jobs; scheduler.charge: runtime)"
            in text)

    data = json.loads(invoke("status", "--json", "--interval", "0.1", "--config", path).stdout)
    assert data["charge"] == "runtime" and {"processed", "worktime_s", "share_pct"} <= set(data["classes"][0])
    table = invoke("status", "--interval", "0.1", "--config", path)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].endswith("time share")
    assert "(0.0s reported, 0 jobs; scheduler.charge: runtime)" in table.stdout


@pytest.mark.parametrize("seconds, text", [
    (0.04, "0.0s"), (3.25, "3.2s"), (42.9, "42s"), (252, "4m12s"), (7380, "2h3m"), (190000, "2d4h"),
])
def test_format_age(seconds: float, text: str) -> None:
    assert format_age(seconds) == text


def bad_config(tmp_path: Path, redis_url: str) -> Path:
    path, _ = write_config(tmp_path, redis_url)
    data = yaml.safe_load(path.read_text())
    data["classes"][1]["weight"] = 0
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("args, argument", [
    (["pause", "jobs:nope"], "QUEUE: unknown class 'jobs:nope'"),
    (["resume", "jobs:nope"], "QUEUE: unknown class 'jobs:nope'"),
    (["worker", "--classes", "jobs:high,jobs:nope"], "--classes: unknown class 'jobs:nope'"),
    (["enqueue", "newsletter", "--tenant", "a", "--payload", "{not json"], "--payload: not valid JSON"),
    (["enqueue", "newsletter", "--tenant", ""], "--tenant: must not be empty"),
    (["enqueue", "newsletter", "--tenant", "a", "--tier", "gold"], "--tier: unknown tier 'gold'"),
    (["enqueue", "no spaces", "--tenant", "a"], "TASK: expected 1-64 characters"),
    (["worker", "--handlers", "no_such_module:handlers"], "--handlers: cannot import 'no_such_module'"),
    (["worker", "--unhandled", "drop"], "--unhandled: 'drop' is not one of 'wait', 'dead-letter'"),
    (["worker", "--handlers", "fairctl.handlers:nothere"],
     "--handlers: fairctl.handlers has no attribute 'nothere'; its HandlerRegistry objects: sleep_handlers\n"),
    (["worker", "--handlers", "fairctl.interrupts:nothere"],
     "--handlers: fairctl.interrupts has no attribute 'nothere'; it holds no HandlerRegistry\n"),
    (["worker", "--handlers", "fairctl.handlers:sleep_for_service_time"],
     "--handlers: fairctl.handlers:sleep_for_service_time is function"),
    (["status", "--redis-url", "http://example.com"], "--redis-url: expected a redis://"),
])
def test_bad_arguments_exit_2_with_one_line_naming_the_argument(
        config_path: Path, args: list[str], argument: str) -> None:
    result = invoke(*args, "--config", config_path)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0], "one line"
    assert result.stderr.startswith(f"fairctl: error: {argument}"), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["status"], ["enqueue", "x", "--tenant", "a"], ["pause", "jobs:low"], ["worker"],
                                     ["worker", "--processes", "2"]])
def test_config_errors_and_redis_down_exit_2(tmp_path: Path, command: list[str]) -> None:
    config = invoke(*command, "--config", bad_config(tmp_path, "redis://127.0.0.1:1/0"))
    assert config.exit_code == 2
    assert re.match(r"fairctl: error: --config: .*classes\[1\]\.weight: must be > 0", config.stderr), config.stderr

    missing = invoke(*command, "--config", tmp_path / "absent.yaml")
    assert missing.exit_code == 2 and "cannot read config file" in missing.stderr

    down_url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    down = invoke(*command, "--config", write_config(tmp_path, "redis://127.0.0.1:1/0")[0], "--redis-url", down_url)
    assert down.exit_code == 2
    assert down.stderr.startswith("fairctl: error: --redis-url: Redis at 127.0.0.1:") and "unavailable" in down.stderr
    assert "hunter2" not in down.output


@pytest.mark.parametrize("given", ["config", "option", "variable"])
def test_redis_down_names_where_its_url_came_from(tmp_path: Path, given: str) -> None:
    """The option, the variable, or the config file's redis.url: the one to fix."""
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    path, _ = write_config(tmp_path, url if given == "config" else "redis://127.0.0.1:1/0")
    flag = ["--redis-url", url] if given == "option" else []
    args = ["enqueue", "x", "--tenant", "a", "--config", str(path), *flag]
    down = runner.invoke(app, args, env={"FAIRCTL_REDIS_URL": url if given == "variable" else None})
    origin = {"config": f"{path}: redis.url", "option": "--redis-url", "variable": "FAIRCTL_REDIS_URL"}[given]
    assert down.exit_code == 2, down.output
    assert down.stderr.startswith(f"fairctl: error: {origin}: Redis at 127.0.0.1:"), down.stderr
    assert "hunter2" not in down.output


@pytest.mark.parametrize("command", sorted(app.list_commands(click.Context(app))))
def test_every_command_explains_itself(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0 and len(result.stdout) > 300
    # Plain help, paragraphs rewrapped to the terminal: no boxes, no type placeholders for flags
    # and numbers (a metavar names what to give), no defaults cut short.
    assert [t for t in ("╭", "<bool>", "range>") if t in result.stdout] == []


@pytest.mark.live  # the demo starts its own redis-server
def test_demo_runs_the_storm_and_prints_both_tables() -> None:
    result = invoke("demo", "--seconds", "3", "--config", EXAMPLE_CONFIG)
    assert result.exit_code == 0, result.output
    assert "Before:" in result.stdout and "After 3s:" in result.stdout
    assert result.stdout.count("jobs:high ") >= 2 and "acme-marketing" in result.stdout
    assert "password_reset (jobs:high) at most" in result.stdout
