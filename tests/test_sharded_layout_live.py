"""Two transitions of a sharded queue's layout, live. A running ``fairctl exporter`` follows
``fairctl reshard``: its ``shard`` labels are the layout's served shards from the first scrape
after ``--to`` and after ``--settle``. And processes started while the master holding the layout
(and shard 0) is down run: they read the layout's copy on another master, serve and export the
shards on the live masters, and name the ones they cannot reach."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from exporter import metrics as m
from fairctl.cli import app
from fairness_core import RedisUnavailable, open_queue, redis_client
from fairness_core import layout as layout_module
from fairness_core.keys import Keys
from fairness_core.layout import LayoutStore
from fairness_core.queue import Queue
from fairness_stack.servers import RedisClusterServers, RedisServer, free_port

from .conftest import make_config
from .crash_support import stop_all
from .exporter_support import Labels, fetch, parse_grouped
from .support import run_fairctl, spawn_exporter, spawn_worker, totals, wait_for, write_config
from .test_cluster import kill, owner, partial_coverage

SHARDS = 6
Samples = dict[tuple[str, Labels], float]


def scrape(url: str) -> Samples:
    return parse_grouped(fetch(url))


def served(got: Samples) -> dict[str, float]:
    """Each shard the scrape has series of, with its ``fairness_exporter_redis_up``."""
    return {dict(labels)[m.SHARD]: value for (name, labels), value in got.items() if name == m.EXPORTER_REDIS_UP.name}


def depths(got: Samples) -> dict[str, float]:
    """Each shard's queued jobs over its classes, as the scrape says."""
    out: dict[str, float] = {}
    for (name, labels), value in got.items():
        if name == m.QUEUE_DEPTH.name:
            out[dict(labels)[m.SHARD]] = out.get(dict(labels)[m.SHARD], 0.0) + value
    return out


def layout_shards(queue: Queue) -> set[str]:
    layout = queue.layout(fresh=True)
    return set(layout.prefixes[:layout.serve])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The fairctl processes a test starts, stopped after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    stop_all(started)


def serving(path: Path, log: Path, started: list[subprocess.Popen[bytes]]) -> str:
    """``fairctl exporter --config path`` started, once it serves: its metrics URL."""
    port = free_port()
    started.append(spawn_exporter(path, log, "--listen", f"127.0.0.1:{port}"))
    url = f"http://127.0.0.1:{port}/metrics"

    def answers() -> bool:
        try:
            fetch(url)
        except OSError:
            return False
        return True

    wait_for(answers, 60, "the exporter to serve")
    return url


def test_a_running_exporter_follows_reshard_and_settle_within_one_scrape(
        redis_server: RedisServer, tmp_path: Path, processes: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout_module, "LAYOUT_TTL_S", 0.05)  # settling waits two re-reads of the layout
    path, config = write_config(tmp_path, redis_server.url, redis={
        "url": redis_server.url, "prefix": make_config().redis.prefix, "shards": 2})
    queue = Queue(config, redis_client(redis_server.url))
    url = serving(path, tmp_path / "exporter.log", processes)
    assert set(served(scrape(url))) == layout_shards(queue) == {f"{config.redis.prefix}.{i}" for i in range(2)}

    def reshard(*args: str) -> None:
        done = CliRunner().invoke(app, ["reshard", *args, "--config", str(path)])
        assert done.exit_code == 0, done.output

    reshard("--to", "4")
    for n in range(40):
        queue.submit("newsletter", f"shop-{n}")
    got = scrape(url)  # the first scrape after the re-shard
    assert set(served(got)) == layout_shards(queue) and len(served(got)) == 4
    assert sum(depths(got).values()) == 40 and all(depths(got).values()), "each shard's jobs, the new ones' too"
    reshard("--to", "2")
    assert set(served(scrape(url))) == layout_shards(queue) and len(layout_shards(queue)) == 4, "still served"
    while leases := queue.pop(40):
        for lease in leases:
            queue.ack(lease)
    time.sleep(3 * layout_module.LAYOUT_TTL_S)  # settling waits until every process may have seen the change
    reshard("--settle")
    got = scrape(url)  # the first scrape after the settle
    assert set(served(got)) == layout_shards(queue) == {f"{config.redis.prefix}.{i}" for i in range(2)}
    log = (tmp_path / "exporter.log").read_text()
    assert "layout v2, serving 4 shards" in log and "layout v4, serving 2 shards" in log, log


def test_the_layout_has_a_copy_on_every_master_and_no_stale_writer_wins(cluster: RedisClusterServers) -> None:
    """Every process writes the layout it reads to a copy on each master; a copy is never set back
    to an older layout, and a layout made anew (its master lost it) replaces the old one's copies."""
    client = redis_client(cluster.url)
    config = make_config(redis={"url": cluster.url, "shards": SHARDS})
    queue = Queue(config, client)
    first = queue.layout()
    copies = LayoutStore(queue.file_config, queue.client)._copy_keys()
    assert sorted(owner(cluster, key) for key in copies) == sorted(node.port for node in cluster.nodes)

    def copied() -> set[tuple[int, int, int]]:
        return {tuple(int(v) for v in client.hmget(key, ["version", "shards", "changed_ms"])) for key in copies}

    assert copied() == {(1, SHARDS, first.changed_ms)}
    grown = queue.reshard(8)
    assert copied() == {(2, 8, grown.changed_ms)}
    LayoutStore(config, client)._write_copies(first)  # a process that read v1 before the re-shard
    assert copied() == {(2, 8, grown.changed_ms)}
    client.delete(queue.keys.layout)
    anew = Queue(config, client).layout()
    assert anew.version == 1 and copied() == {(1, SHARDS, anew.changed_ms)}


@pytest.mark.live
def test_processes_started_while_the_layouts_master_is_down_serve_and_export_the_live_shards(
        tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """The master holding the layout and shard 0 (not the seed node the URL names) is SIGKILLed
    before a producer, ``fairctl status``, an exporter and a worker start: each runs on the
    layout's copy, the producer queues every tenant with a live shard in its hand and refuses the
    others naming their shards, status and the exporter name the dead shards and the worker
    serves the live ones (it logs the dead ones)."""
    with RedisClusterServers(3) as cluster:
        partial_coverage(cluster)
        stem, seed = make_config().redis.prefix, cluster.nodes[0].port
        # the worst case: the layout's master holds shard 0 too, and the URL names another
        prefix = next(f"{stem}x{n}" for n in range(1000) if seed != owner(cluster, Keys(f"{stem}x{n}").layout)
                      == owner(cluster, Keys(f"{stem}x{n}.0").layout))
        path, config = write_config(tmp_path, cluster.url, redis={
            "url": cluster.url, "prefix": prefix, "shards": SHARDS, "shard_hand": 2})
        queue = Queue(config, redis_client(cluster.url))
        names = queue.layout().prefixes
        victim = owner(cluster, queue.keys.layout)
        dead = set(queue.masters()[f"127.0.0.1:{victim}"])
        assert 0 in dead and len(dead) < SHARDS
        live = [i for i in range(SHARDS) if i not in dead]
        kill(cluster, victim)

        producer = open_queue(config)
        tenants = (f"shop-{n}" for n in itertools.count())
        spared = list(itertools.islice((t for t in tenants if set(producer._hand(t)) - dead), 40))
        queued = {producer.submit("newsletter", tenant).job_id for tenant in spared}
        assert {producer.locate(job)[0] for job in queued} <= set(live)
        doomed = next(t for t in tenants if set(producer._hand(t)) <= dead)
        with pytest.raises(RedisUnavailable) as refused:
            producer.submit("newsletter", doomed)
        assert all(f"{names[i]} on 127.0.0.1:{victim}" in str(refused.value) for i in producer._hand(doomed))

        status = run_fairctl("status", "--interval", "0", "--json", "--config", path, timeout=120)
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert [s["answers"] for s in shown["shards"]] == [i in live for i in range(SHARDS)]
        assert sum(c["depth"] for c in shown["classes"]) == len(queued)
        assert shown["layout"]["copy_on"] != f"127.0.0.1:{victim}"
        text = run_fairctl("status", "--interval", "0", "--config", path, timeout=120).stdout
        assert f"not answer ({', '.join(names[i] for i in sorted(dead))} on 127.0.0.1:{victim})" in text, text

        url = serving(path, tmp_path / "exporter.log", processes)
        got = scrape(url)
        assert served(got) == {names[i]: 0.0 if i in dead else 1.0 for i in range(SHARDS)}
        assert sum(depths(got).values()) == len(queued)

        log = tmp_path / "worker.log"
        processes.append(spawn_worker(path, log, "unused", cluster.url, "--log-every", "1s",
                                        handlers="fairctl.handlers:sleep_handlers"))
        wait_for(lambda: sum(totals(queue.shard(i))["processed"] for i in live) == len(queued), 60,
                 "the worker to work the live shards' jobs")
        assert all(p.poll() is None for p in processes), "the exporter and the worker run"
        assert all(f"shard {names[i]} (on 127.0.0.1:{victim}) does not answer" in log.read_text() for i in dead)
        assert f"the master holding its layout (127.0.0.1:{victim}) does not answer" in log.read_text()
