"""fairctl on a real 3-master Redis Cluster (``redis-server --cluster-enabled`` joined by
``redis-cli --cluster create``), through redis-py's cluster client: the scheduler and exporter
suites run unchanged against it, and several queue groups spread over the masters, each whole on
the master that owns its slot."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from redis.crc import key_slot

from alerts.output import rules_text
from alerts.promql import selector
from alerts.rules import FAIRNESS_EXPORTER_REDIS_DOWN
from exporter import metrics as m
from exporter.server import server_for
from fairctl.cli import app
from fairctl.common import groups_of
from fairness_core import RedisUnavailable, redis_client
from fairness_core.keys import Keys
from fairness_core.queue import Queue
from fairness_core.worker import require_noeviction_of
from fairness_stack.servers import RedisClusterServers, RedisServer, free_port

from .conftest import PREFIX_STEM_VARIABLE, REDIS_URL_VARIABLE, ROOT, make_config
from .exporter_support import Prometheus, fetch, parse_grouped, running_exporter, scrape
from .support import totals, wait_for, write_config

pytestmark = pytest.mark.slow

# The suites run again on the cluster: the scheduler's (lifecycle, snapshot, worker), the exporter's and
# the bad-input properties (tenant ids stay in their group's slot, checked with SCAN over every master).
SUITES = ("tests/test_lifecycle.py", "tests/test_snapshot.py", "tests/test_worker.py", "tests/test_exporter.py",
          "tests/test_bad_input.py")
NOT_ON_A_CLUSTER = (
    # Lists keys with KEYS, which a cluster client sends to one node; test_bad_input.py checks the same
    # (every key of a group in its slot) with SCAN, which visits every master, and runs here too.
    "tests/test_lifecycle.py::test_odd_tenant_ids_stay_in_their_own_namespace",
    # CLIENT PAUSE goes to a node the cluster client picks, not necessarily the group's master.
    "tests/test_exporter.py::test_a_stalled_redis_still_gets_an_answer_within_the_budget",
)


def node_client(node: RedisServer) -> redis.Redis:
    return redis.Redis(port=node.port)


def groups_on(node: RedisServer) -> set[str]:
    """Hash tags (queue group prefixes) of the keys stored on one node."""
    with node_client(node) as conn:
        return {key.decode()[1:key.decode().index("}")] for key in conn.scan_iter(match="{*}:*", count=1000)}


def owner(cluster: RedisClusterServers, key: str) -> int:
    """Port of the master that owns ``key``'s slot."""
    with node_client(cluster.nodes[0]) as conn:
        for start, end, master, *_ in conn.execute_command("CLUSTER", "SLOTS"):
            if start <= key_slot(key.encode()) <= end:
                return int(master[1])
    raise AssertionError(f"no master owns the slot of {key}")


def prefixes_one_per_master(cluster: RedisClusterServers) -> list[str]:
    """Queue-group prefixes (unlike the suites' ``t<n>``) whose slots belong to different masters."""
    chosen: dict[int, str] = {}
    for prefix in (f"group-{n}" for n in itertools.count()):
        chosen.setdefault(owner(cluster, Keys(prefix).base), prefix)
        if len(chosen) == len(cluster.nodes):
            return list(chosen.values())
    raise AssertionError("unreachable")


def test_scheduler_and_exporter_suites_pass_on_the_cluster(cluster: RedisClusterServers) -> None:
    # Prefixes of their own: this module's later tests make t-prefixed groups on the same cluster.
    env = {**os.environ, REDIS_URL_VARIABLE: cluster.url, PREFIX_STEM_VARIABLE: "s", "PYTHONPATH": str(ROOT)}
    deselect = [arg for test in NOT_ON_A_CLUSTER for arg in ("--deselect", test)]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *SUITES, *deselect],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " skipped" not in run.stdout, run.stdout[-500:]
    spread = [groups_on(node) for node in cluster.nodes]
    assert all(spread), f"the suites' queue groups landed on every master: {[len(g) for g in spread]}"
    for i, groups in enumerate(spread):
        for other in spread[i + 1:]:
            assert not groups & other, "a queue group lives whole on one master"


def test_queue_groups_on_three_masters_schedule_and_scrape_independently(cluster: RedisClusterServers) -> None:
    prefixes = prefixes_one_per_master(cluster)
    groups = []
    for n, prefix in enumerate(prefixes):
        config = make_config(redis={"url": cluster.url, "prefix": prefix}, scheduler={"budget_min_arrivals": 10**9},
                             leases={"visibility_timeout": "1s", "retry_backoff": "10m"})
        scheduler = Queue(config, redis_client(cluster.url))
        for i in range(10 * (n + 1)):
            scheduler.enqueue(("password_reset", "newsletter")[i % 2], f"tenant-{i % 3}")
        groups.append(scheduler)
    for n, scheduler in enumerate(groups):
        size = 10 * (n + 1)
        leases = scheduler.pop(4)
        assert scheduler.ack(leases[0]) and scheduler.nack(leases[1], "boom") == "retry"
        scheduler.pause("jobs:low")
        assert {lease.queue for lease in scheduler.pop(50)} == {"jobs:high"}
        assert scheduler.promote_overdue() == 0
        t = totals(scheduler)
        assert (t["processed"], t["failed"], t["delayed"]) == (1, 1, 1)
        assert t["depth"] + t["inflight"] + t["delayed"] + t["processed"] == size
        assert scheduler.snapshot().classes["jobs:low"].paused
    time.sleep(1.2)  # past the 1s visibility timeout: the reaper on each master returns the leases
    for scheduler in groups:
        inflight = totals(scheduler)["inflight"]
        assert inflight > 0 and scheduler.reap() == inflight
        assert totals(scheduler)["redelivered"] == inflight
    for prefix in prefixes:
        holders = [node.port for node in cluster.nodes if prefix in groups_on(node)]
        assert holders == [owner(cluster, Keys(prefix).base)], "every key of a group on the master owning its tag"
    for n, scheduler in enumerate(groups):
        with running_exporter(scheduler.config) as exporter:
            got = scrape(exporter.url)
        assert got.value(m.EXPORTER_REDIS_UP.name) == 1
        depth = sum(got.value(m.QUEUE_DEPTH.name, queue=q) for q in scheduler.config.class_names)
        inflight = sum(got.value(m.QUEUE_INFLIGHT.name, queue=q) for q in scheduler.config.class_names)
        assert depth + inflight + 2 == 10 * (n + 1), "each scrape sees its own group only"
        assert got.value(m.QUEUE_PAUSED.name, queue="jobs:low") == 1


def test_fairctl_commands_take_a_cluster_url(cluster: RedisClusterServers, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, cluster.url)
    result = CliRunner().invoke(app, ["enqueue", "newsletter", "--tenant", "acme", "--count", "3",
                                      "--config", str(path)])
    assert result.exit_code == 0, result.output
    status = CliRunner().invoke(app, ["status", "--interval", "0", "--json", "--config", str(path)])
    assert status.exit_code == 0, status.output
    assert Queue(config, redis_client(cluster.url)).snapshot().classes["jobs:low"].depth == 3


def test_an_unreachable_cluster_is_a_clear_error_and_the_exporter_still_answers(tmp_path: Path) -> None:
    url = f"redis+cluster://app:hunter2@127.0.0.1:{free_port()}"
    config = make_config(redis={"url": url}, exporter={"scrape_timeout": "1s"})
    scheduler = Queue(config, redis_client(url, connect_timeout=1))  # nothing contacted yet
    with pytest.raises(RedisUnavailable, match=r"^Redis Cluster at 127\.0\.0\.1:\d+ is unavailable") as err:
        scheduler.enqueue("newsletter", "acme")
    assert "hunter2" not in str(err.value)
    with running_exporter(config) as exporter:
        got = scrape(exporter.url)
    assert got.value(m.EXPORTER_REDIS_UP.name) == 0 and got.seconds < 1.0 + 1.0
    assert "hunter2" not in got.text
    path, _ = write_config(tmp_path, url)
    result = CliRunner().invoke(app, ["enqueue", "newsletter", "--tenant", "a", "--config", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"fairctl: error: {path}: redis.url: Redis Cluster at ")
    assert "hunter2" not in result.output


@pytest.mark.parametrize("url, message", [
    ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
    ("redis+clusterx://127.0.0.1:7000", "expected a redis://"),
])
def test_bad_cluster_urls_are_refused_without_quoting_them(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        redis_client(url)
    assert "7000" not in str(err.value)


def partial_coverage(cluster: RedisClusterServers) -> RedisClusterServers:
    """``cluster-require-full-coverage no`` on every node: the live masters keep serving their
    slots when one dies (by default the whole cluster refuses every command then)."""
    for node in cluster.nodes:
        with node_client(node) as conn:
            conn.config_set("cluster-require-full-coverage", "no")
    return cluster


def kill(cluster: RedisClusterServers, port: int) -> None:
    """SIGKILL the master on ``port``, and wait until the others have marked it failed."""
    next(node for node in cluster.nodes if node.port == port).stop(kill=True)
    time.sleep(RedisClusterServers.NODE_TIMEOUT_MS / 1000 * 1.5)


def test_a_dead_master_refuses_enqueues_only_to_the_groups_on_it() -> None:
    """fairctl's memory and eviction checks read each group's own master, so when one master dies
    the groups on the live masters keep taking jobs and only the dead master's group is refused."""
    with RedisClusterServers(3) as cluster:
        partial_coverage(cluster)
        groups = [Queue(make_config(redis={"url": cluster.url, "prefix": p}), redis_client(cluster.url))
                  for p in prefixes_one_per_master(cluster)]
        for group in groups:
            group.enqueue("newsletter", "before")
        kill(cluster, owner(cluster, groups[-1].keys.base))
        for group in groups[:-1]:
            group.shard(0).memory.read(fresh=True)
            group.enqueue("newsletter", "after")
            require_noeviction_of(group)
            assert totals(group)["depth"] == 2
        with pytest.raises(RedisUnavailable):
            groups[-1].shard(0).memory.read(fresh=True)


def test_a_dead_master_costs_only_its_shards_to_producers_workers_and_the_exporter(tmp_path: Path) -> None:
    """A 6-shard queue on 3 masters, one of which dies (the one holding the layout too):
    - a worker's pops go on serving the 4 live shards, each of their jobs once; a finished lease
      of a dead shard is not acked (None, sent again later) and does not stop the pop;
    - a tenant with a live shard in its hand is queued there; one whose whole hand is dead is
      refused, naming its shards and their master;
    - one exporter serves the 4 live shards' series (read up, depths), the dead master's 2
      shards answer redis_up 0 within the scrape, and every shard still names its master; a real
      Prometheus fires FairnessExporterRedisDown for each dead shard, naming the master."""
    with RedisClusterServers(3) as cluster:
        partial_coverage(cluster)
        _, config = write_config(tmp_path, cluster.url, redis={"url": cluster.url, "shards": 6},
                                 exporter={"scrape_timeout": "800ms"},
                                 alerts={"for": {FAIRNESS_EXPORTER_REDIS_DOWN: "2s"}})
        queue = Queue(config, redis_client(cluster.url))
        for tenant in range(60):
            queue.submit("newsletter", f"shop-{tenant}")
        masters = queue.masters()
        victim = owner(cluster, queue.keys.layout)
        dead = masters[f"127.0.0.1:{victim}"]
        names = queue.layout().prefixes
        # A lease of a dead shard, finished when its master dies (pops before it: the live shards' jobs
        # they took are not counted below, as the depths are read after).
        held = next(lease for lease in iter(lambda: queue.pop(1)[0], None) if queue.locate(lease.job_id)[0] in dead)
        depths = {names[i]: load.depth["jobs:low"] for i, load in enumerate(queue.loads(fresh=True))}
        rules = tmp_path / "rules.yml"
        rules.write_text(rules_text(config))
        with server_for([(config, groups_of(config))], "127.0.0.1", 0) as exporter, \
                Prometheus([f"127.0.0.1:{exporter.port}"], tmp_path, (rules,)) as prometheus:
            up = selector(m.EXPORTER_REDIS_UP.name, **{m.GROUP: config.redis.prefix})
            wait_for(lambda: len(prometheus.query(up)) == 6, 30, "Prometheus to scrape every shard")
            kill(cluster, victim)
            scraped = parse_grouped(fetch(exporter.url))
            firing = selector("ALERTS", alertname=FAIRNESS_EXPORTER_REDIS_DOWN, alertstate="firing")
            wait_for(lambda: len(prometheus.query(firing)) == len(dead), 30, "the alert for each dead shard")
            paged = {alert["labels"][m.SHARD]: alert["annotations"]["description"]
                     for alert in prometheus.api("alerts", {})["alerts"]
                     if alert["labels"]["alertname"] == FAIRNESS_EXPORTER_REDIS_DOWN and alert["state"] == "firing"}
        assert set(paged) == {names[i] for i in dead}, paged
        assert all(f"from its Redis, 127.0.0.1:{victim} " in text for text in paged.values()), paged
        live_jobs = sum(depths[names[i]] for i in range(6) if i not in dead)
        first = queue.ack_and_pop([held], 1)
        assert first.acked == [None] and len(first.leases) == 1
        served = first.leases + [lease for _ in range(live_jobs + 5) for lease in queue.pop(1)]
        assert len(served) == len({lease.job_id for lease in served}) == live_jobs
        assert not {queue.locate(lease.job_id)[0] for lease in served} & set(dead)
        spared = next(f"t{n}" for n in itertools.count() if not set(queue._hand(f"t{n}")) <= set(dead)
                      and set(queue._hand(f"t{n}")) & set(dead))
        assert queue.locate(queue.enqueue("newsletter", spared))[0] not in dead
        doomed = next(f"t{n}" for n in itertools.count() if set(queue._hand(f"t{n}")) == set(dead))
        with pytest.raises(RedisUnavailable) as refused:
            queue.enqueue("newsletter", doomed)
        assert all(f"{names[i]} on 127.0.0.1:{victim}" in str(refused.value) for i in dead), refused.value

    def by_shard(name: str, **labels: str) -> dict[str, float]:
        return {dict(got)[m.SHARD]: value for (series, got), value in scraped.items()
                if series == name and all(dict(got).get(k) == v for k, v in labels.items())}

    live = {names[i] for i in range(6)} - {names[i] for i in dead}
    assert by_shard(m.EXPORTER_REDIS_UP.name) == {names[i]: 0.0 if i in dead else 1.0 for i in range(6)}
    assert by_shard(m.QUEUE_DEPTH.name, queue="jobs:low") == {name: depths[name] for name in live}
    assert {dict(got)[m.MASTER] for (series, got) in scraped if series == m.REDIS_MASTER.name} == set(masters)
