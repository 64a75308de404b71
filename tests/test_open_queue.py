"""One way to open a queue from Python: ``open_queue`` gives one class, :class:`Queue`, for one
group or a sharded queue alike, and the driver of one group refuses a sharded config instead of
queueing where no worker looks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairness_core import ConfigError, Queue, open_queue, redis_client
from fairness_core.scheduler import Scheduler
from fairness_stack.servers import RedisServer
from fairness_stack.supervisor import StackError, apply_config

from .conftest import EXAMPLE_CONFIG, ROOT, GivenRedis, make_config
from .support import run_fairctl, wait_for

# The first lines of the README's Python example, as a producer runs them.
README_PRODUCER = '''from fairness_core import Finished, load_config, open_queue

config = load_config("fairness.yaml")
scheduler = open_queue(config)      # one queue group, or every shard of a sharded one (redis.shards)
done = scheduler.submit("newsletter", tenant="acme-marketing", tier="pro", payload={"campaign": 7})
print(done.job_id, done.queue, done.reason)        # ... jobs:low deferred batch work
'''


def test_a_scheduler_refuses_a_sharded_config_and_open_queue_serves_it(redis_server: RedisServer | GivenRedis) -> None:
    sharded = make_config(redis={"url": redis_server.url, "shards": 3})
    with pytest.raises(ConfigError) as refused:
        Scheduler(sharded, redis_client(redis_server.url))
    assert str(refused.value) == (f"redis.shards: queue group {sharded.redis.prefix} is sharded 3 ways and a Scheduler "
                                  "serves one queue group: open the queue with fairness_core.open_queue(config), "
                                  "which serves every shard")
    many, one = open_queue(sharded), open_queue(make_config(redis={"url": redis_server.url}))
    assert isinstance(many, Queue) and isinstance(one, Queue)
    assert (many.sharded, one.sharded) == (True, False)
    assert [g.keys.prefix for g in one.groups()] == [one.keys.prefix]  # a queue of one group keeps its plain name
    assert [g.keys.prefix for g in many.groups()] == [f"{sharded.redis.prefix}.{i}" for i in range(3)]
    assert one.submit("newsletter", "acme").job_id.isdigit()  # its own ids
    assert many.submit("newsletter", "acme").job_id.split(":")[0] in {"0", "1", "2"}  # shard:id


def _status(config: Path) -> dict[str, Any]:
    shown = run_fairctl("status", "--interval", "0", "--json", "--config", config)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def test_the_readme_producer_on_a_sharded_config_is_served_by_fairctl_worker_and_shown_by_status(
        redis_server: RedisServer | GivenRedis, tmp_path: Path) -> None:
    """The README's example, run beside a fairness.yaml that shards the queue 3 ways: its job is
    shown by ``fairctl status`` and served by ``fairctl worker`` reading the same file."""
    assert README_PRODUCER in (ROOT / "README.md").read_text()
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"] = {**data["redis"], "url": redis_server.url, "prefix": make_config().redis.prefix, "shards": 3}
    config = tmp_path / "fairness.yaml"
    config.write_text(yaml.safe_dump(data))
    produced = subprocess.run([sys.executable, "-c", README_PRODUCER], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, check=False)
    assert produced.returncode == 0, produced.stderr
    job_id, queue, *reason = produced.stdout.split()
    assert job_id.partition(":")[1] == ":" and (queue, " ".join(reason)) == ("jobs:low", "deferred batch work")
    status = _status(config)
    assert status["group"] == data["redis"]["prefix"] and len(status["shards"]) == 3
    assert sum(c["depth"] for c in status["classes"]) == 1
    worker = subprocess.Popen([sys.executable, "-m", "fairctl", "worker", "--config", str(config)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: sum(c["depth"] + c["inflight"] for c in _status(config)["classes"]) == 0, 60,
                 "fairctl worker to serve the job")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "jobs:low: done 1, failed 0" in err, err


def test_the_native_stack_refuses_a_sharded_config_naming_the_field() -> None:
    """fairctl stack applies its config to its one queue group: a sharded one would leave the shards
    the workers serve without it."""
    with pytest.raises(StackError, match=r"redis.shards is 3, and fairctl stack runs one queue group: drop redis.shards"):
        apply_config(make_config(redis={"shards": 3}))
