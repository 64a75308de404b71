"""One logical queue sharded over N queue groups: the tenants' hands, where jobs go, that class
weights hold fleet-wide and tenants share alike on a real 3-master Redis Cluster, and that
re-sharding under load loses and repeats no job."""

from __future__ import annotations

import collections
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from exporter import metrics as m
from fairness_core import ConfigError, InvalidJob, Lease, parse_config, redis_client
from fairness_core.config import SHARD_NAME, config_name
from fairness_core.config_dump import config_to_data
from fairness_core.jobs import SEP
from fairness_core.queue import JOB_SEP, Queue, split_job_id
from fairness_core.sharding import hand, place, shard_prefix
from fairness_sim.shards import ShardFigures, predict
from fairness_stack.servers import RedisClusterServers, RedisServer

from .conftest import make_config
from .exporter_support import fetch, parse_grouped
from .support import run_fairctl, write_config
from .test_cluster import owner
from .test_groups import one_exporter_for_both

WEIGHTS = {"jobs:high": 70, "jobs:medium": 20, "jobs:low": 10}
TASKS = {"jobs:high": "password_reset", "jobs:medium": "invoice", "jobs:low": "newsletter"}
# The example classes without arrival budgets (which demote a burst of urgent jobs) or reserved
# slots: these tests measure the shares the weights alone give.
PLAIN_CLASSES = [{"name": name, "weight": weight, "max_age": "1h"} for name, weight in WEIGHTS.items()]


def sharded(url: str, shards: int = 6, hand_size: int = 2, **sections: Any) -> Any:
    base = make_config(classes=PLAIN_CLASSES, **sections)
    data = config_to_data(base)
    data["redis"].update(url=url, shards=shards, shard_hand=hand_size)
    return parse_config(data)


# ---------------------------------------------------------------- hands


@given(st.text(min_size=1, max_size=40), st.integers(1, 32), st.data())
@settings(max_examples=200, deadline=None)
def test_a_hand_is_stable_distinct_and_within_the_shards(tenant: str, shards: int, data: st.DataObject) -> None:
    size = data.draw(st.integers(1, shards))
    dealt = hand(tenant, shards, size)
    assert len(dealt) == size == len(set(dealt)) and all(0 <= s < shards for s in dealt)
    assert hand(tenant, shards, size) == dealt
    assert hand(tenant, shards, 1) == dealt[:1]  # a larger hand only adds shards after the home one


def test_growing_6_to_12_rehomes_about_half_the_tenants_and_spreads_them_evenly() -> None:
    tenants = [f"tenant-{i}" for i in range(12_000)]
    moved = sum(hand(t, 6, 1) != hand(t, 12, 1) for t in tenants)
    assert 0.47 < moved / len(tenants) < 0.53  # rendezvous hashing: only to the new shards, 6/12 of them
    assert all(hand(t, 12, 1)[0] >= 6 for t in tenants if hand(t, 6, 1) != hand(t, 12, 1))
    homes = collections.Counter(hand(t, 12, 1)[0] for t in tenants)
    assert len(homes) == 12 and max(homes.values()) < 1.15 * len(tenants) / 12


def test_the_config_names_a_bad_shard_count_or_hand() -> None:
    for redis_section, field in (({"shards": 0}, "redis.shards"), ({"shards": 4, "shard_hand": 5}, "redis.shard_hand"),
                                 ({"shards": 65}, "redis.shards")):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            make_config(redis={"prefix": "x", **redis_section})
    config = make_config(redis={"prefix": "x", "shards": 6})
    assert (config.redis.shards, config.redis.shard_hand) == (6, 2)  # the hand defaults to 2
    assert config_to_data(config)["redis"]["shards"] == 6
    assert "shards" not in config_to_data(make_config())["redis"]  # an unsharded group's fingerprint holds


# ---------------------------------------------------------------- one Redis


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def test_a_tenant_stays_on_the_hand_shard_that_holds_its_jobs_and_new_ones_avoid_a_flood(server: RedisServer) -> None:
    queue = Queue(sharded(server.url, shards=6, hand_size=2), redis_client(server.url))
    flooder = "flooder"
    home, other = hand(flooder, 6, 2)
    # A flood on the flooder's other hand shard: its first job goes to the emptier home shard, and stays there.
    queue.shard(other).submit_many("newsletter", "someone-else", [None] * 50)
    first = queue.submit("newsletter", flooder)
    assert split_job_id(first.job_id)[0] == home and first.job_id == f"{home}{JOB_SEP}1"
    queue.shard(home).submit_many("newsletter", "another", [None] * 500)  # now home is the fuller one
    assert {split_job_id(queue.submit("newsletter", flooder).job_id)[0] for _ in range(5)} == {home}
    # A tenant without jobs queued goes to the least backlogged shard of its hand.
    fresh = next(t for t in (f"t{i}" for i in range(1000)) if set(hand(t, 6, 2)) == {home, other})
    assert split_job_id(queue.submit("newsletter", fresh).job_id)[0] == other


def test_leases_carry_their_shard_and_ack_nack_defer_and_extend_reach_it(server: RedisServer) -> None:
    config = sharded(server.url, shards=3, hand_size=1)
    queue = Queue(config, redis_client(server.url))
    ids = {queue.enqueue("invoice", f"shop-{i}") for i in range(9)}
    leases = [lease for _ in range(9) for lease in queue.pop()]
    assert {lease.job_id for lease in leases} == ids
    assert {split_job_id(i)[0] for i in ids} == {0, 1, 2}
    assert all(queue.extend(lease) for lease in leases)
    assert queue.nack(leases[0], "boom") == "retry"
    assert queue.defer_unhandled(leases[1]) == "unhandled"
    assert all(queue.ack(lease) for lease in leases[2:])
    views = [queue.shard(i).snapshot().classes["jobs:medium"] for i in range(3)]
    assert sum(v.counters["processed"] for v in views) == 7
    assert [v.counters["unhandled"] for v in views] == [int(i == split_job_id(leases[1].job_id)[0]) for i in range(3)]
    with pytest.raises(InvalidJob, match="job id"):
        queue.ack(Lease("17", "jobs:medium", "shop-1", "", "invoice", None, 0.0, 1))


def test_a_class_that_runs_dry_is_not_asked_again_nor_owed_a_burst_when_it_returns(server: RedisServer) -> None:
    """The view of the shards is up to VIEW_TTL_S old: a class that just ran dry still shows work
    there. A pop that finds none marks the shard dry at once, so the next pops do not ask every
    shard again, and the class back with work starts level with the others."""
    queue = Queue(sharded(server.url, shards=6, hand_size=2), redis_client(server.url), seed=1)
    for n in range(60):
        queue.enqueue(list(TASKS.values())[n % 3], f"shop-{n % 10}")
    with redis.Redis.from_url(server.url) as conn:
        before = conn.info("commandstats")["cmdstat_fcall"]["calls"]
        held: list[Lease] = []
        for _ in range(61):
            held = queue.ack_and_pop(held).leases
        calls = conn.info("commandstats")["cmdstat_fcall"]["calls"] - before
    assert held == [] and calls <= 2 * 60 + 20, calls  # 244 when dry shards were asked again and again
    for queue_name, task in TASKS.items():
        for t in range(5):
            queue.submit_many(task, f"{queue_name}-{t}", [None] * 100)
    assert queue.wait_for_work(1.0) == 0.0  # as an idle worker finds the new work (a fresh view)
    classes, _ = drain([queue], 60)
    assert all(abs(classes[c] - 60 * w / 100) <= 1 for c, w in WEIGHTS.items()), classes  # 58/2/0 when owed


def test_a_pool_of_some_classes_takes_only_theirs_from_every_shard(server: RedisServer) -> None:
    """A reserved pool (``fairctl worker --classes``) on the sharded queue: only its classes, from
    whichever shards hold them, and it waits only for them."""
    queue = Queue(sharded(server.url, shards=4, hand_size=2), redis_client(server.url))
    for t in range(6):
        queue.submit_many("newsletter", f"bulk-{t}", [None] * 5)
    assert queue.wait_for_work(0.2, ["jobs:high"]) is None
    ids = {queue.enqueue("password_reset", f"shop-{t}") for t in range(6)}
    assert queue.wait_for_work(1.0, ["jobs:high"]) == 0.0
    taken = [lease for _ in range(10) for lease in queue.pop(2, classes=["jobs:high"])]
    assert {lease.job_id for lease in taken} == ids and {lease.queue for lease in taken} == {"jobs:high"}
    assert len({split_job_id(i)[0] for i in ids}) > 1


def test_pause_holds_a_class_on_every_shard(server: RedisServer) -> None:
    queue = Queue(sharded(server.url, shards=4, hand_size=1), redis_client(server.url))
    for i in range(8):
        queue.enqueue("newsletter", f"shop-{i}")
    queue.pause("jobs:low")
    assert queue.pop(5) == [] and queue.wait_for_work(0.2) is None
    queue.resume("jobs:low")
    assert queue.wait_for_work(1.0) == 0.0
    assert len([lease for _ in range(8) for lease in queue.pop()]) == 8


def test_a_pause_holds_on_the_shards_a_reshard_adds_and_a_resume_releases_them(server: RedisServer) -> None:
    queue = Queue(sharded(server.url, shards=2, hand_size=1), redis_client(server.url))
    queue.pause("jobs:low")
    queue.reshard(4)
    tenants = [t for t in (f"shop-{i}" for i in range(100)) if hand(t, 4, 1)[0] >= 2][:6]
    for tenant in tenants:
        queue.enqueue("newsletter", tenant)
    assert {queue.shard_for("newsletter", t) for t in tenants} == {2, 3}
    assert queue.pop(5) == [] and queue.wait_for_work(0.2) is None
    queue.resume("jobs:low")
    queue.reshard(6)  # a shard added while nothing is paused is not paused either
    assert len([lease for _ in range(6) for lease in queue.pop()]) == 6
    assert all(not queue.shard(i).snapshot().classes["jobs:low"].paused for i in range(6))


# ---------------------------------------------------------------- a 3-master cluster


def test_placing_puts_each_new_shard_on_a_master_with_the_fewest(cluster: RedisClusterServers) -> None:
    """6 shards on 3 masters 2-2-2 and grown to 12, 4-4-4, whatever the prefix: the plain names'
    slots are XORs of one another (CRC16 is linear), and land 2-2-2 for about a third of prefixes."""
    client = redis_client(cluster.url)
    for _ in range(3):
        config = sharded(cluster.url, shards=6)
        queue = Queue(config, client)
        held = queue.masters()
        assert sorted(len(shards) for shards in held.values()) == [2, 2, 2], held
        assert sorted(i for shards in held.values() for i in shards) == list(range(6))
        owners = {client.cluster().get_node_from_key(queue.shard(i).keys.config).port for i in range(6)}
        assert {int(master.rpartition(":")[2]) for master in held} == owners
        assert queue.layout().prefixes[0] == shard_prefix(config.redis.prefix, 0)  # where a dashboard opens
        queue.reshard(12)
        assert sorted(len(shards) for shards in queue.masters().values()) == [4, 4, 4]
        assert queue.layout().prefixes[:6] == Queue(config, client).layout().prefixes[:6]


@given(st.integers(1, 40), st.integers(1, 5), st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_place_balances_any_slot_map(shards: int, masters: int, seed: int) -> None:
    """On a slot map of ``masters`` masters, each with its even share of the slots give or take
    40 %, every master ends with the fewest or one more; shard 0 keeps its plain name; names stay
    valid names, of the form no config may give a group."""
    share, rng = 16384 // masters, random.Random(seed)
    bounds = [0, *(k * share + rng.randint(-share * 2 // 5, share * 2 // 5) for k in range(1, masters)), 16384]

    def master_of(name: str) -> str:
        slot = key_slot(("{" + name + "}").encode())
        return str(next(m for m in range(masters) if bounds[m] <= slot < bounds[m + 1]))

    names = place("shop", range(shards), [], master_of, [str(m) for m in range(masters)])
    counts = collections.Counter(map(master_of, names))
    assert max(counts.values()) - min(counts.get(str(m), 0) for m in range(masters)) <= 1
    assert names[0] == "shop.0" and len(set(names)) == shards
    # valid names for keys and labels, and never a group's own name in a config file
    assert all(config_name(name, "shard") == name and SHARD_NAME.fullmatch(name) for name in names)


def drain(workers: list[Queue], pops: int) -> tuple[collections.Counter[str], collections.Counter[tuple[str, str]]]:
    """``pops`` jobs taken and acked in turn by ``workers``, each as a worker slot would."""
    classes: collections.Counter[str] = collections.Counter()
    tenants: collections.Counter[tuple[str, str]] = collections.Counter()
    held: dict[int, list[Lease]] = {}
    for n in range(pops):
        slot = n % len(workers)
        popped = workers[slot].ack_and_pop(held.get(slot, []))
        assert all(popped.acked)
        held[slot] = popped.leases
        for lease in popped.leases:
            classes[lease.queue] += 1
            tenants[(lease.queue, lease.tenant)] += 1
    return classes, tenants


def tenants_homed(shard: int, count: int, shards: int = 6) -> list[str]:
    """``count`` tenant ids whose home shard (hand of one) is ``shard``."""
    return [t for t in (f"tenant-{i}" for i in range(100_000)) if hand(t, shards, 1)[0] == shard][:count]


def test_class_weights_hold_fleet_wide_and_tenants_share_alike_across_shards(cluster: RedisClusterServers) -> None:
    """The classes' work on different shards (urgent on 0-2, bulk alone on 3-5) and the tenants
    spread unevenly (20 urgent ones on shard 0, 5 on each of 1 and 2): each shard serving its own
    work by the weights would give the bulk class half the fleet and shard 0's tenants a quarter of
    the others' service. The fleet's shares are the weights within 2 points, and every urgent
    tenant gets about the same service."""
    config = sharded(cluster.url, shards=6, hand_size=1)
    producer = Queue(config, redis_client(cluster.url))
    placed = {"jobs:high": [t for shard, n in ((0, 20), (1, 5), (2, 5)) for t in tenants_homed(shard, n)],
              "jobs:medium": [t for shard in (1, 2) for t in tenants_homed(shard, 5)],
              "jobs:low": [t for shard in (3, 4, 5) for t in tenants_homed(shard, 5)]}
    for queue, tenants in placed.items():
        for tenant in tenants:
            producer.submit_many(TASKS[queue], tenant, [None] * 60)
    workers = [Queue(config, redis_client(cluster.url), seed=i) for i in range(4)]
    classes, tenants_served = drain(workers, 1500)
    total = sum(classes.values())
    for queue, weight in WEIGHTS.items():
        assert abs(100 * classes[queue] / total - weight) <= 2, classes
    high = [n for (queue, _), n in tenants_served.items() if queue == "jobs:high"]
    fair = classes["jobs:high"] / 30
    assert len(high) == 30 and max(high) <= 1.5 * fair and min(high) >= 0.5 * fair, sorted(high)


def test_each_shard_counts_its_queued_tenants_per_tier_and_never_below_zero(server: RedisServer) -> None:
    """The counts the shards' turns are weighed by: a tenant counts under its latest job's tier
    while it has jobs queued; one queued before the counts existed (an older release) leaves
    them at 0, not below."""
    queue = Queue(sharded(server.url, shards=2, hand_size=1), redis_client(server.url))
    shop, studio = tenants_homed(0, 2, shards=2)
    queue.submit_many("newsletter", shop, [None] * 2, tier="free")
    queue.submit_many("newsletter", studio, [None] * 2, tier="free")
    queue.submit_many("newsletter", studio, [None], tier="enterprise")
    assert queue.loads(fresh=True)[0].tenant_weight["jobs:low"] == 1 + 6
    stats = queue.shard(0).keys.stats
    counted = {f"tenants{SEP}jobs:low{SEP}{tier}": n for tier, n in (("free", 1), ("enterprise", 1))}
    assert {f: int(queue.client.hget(stats, f)) for f in counted} == counted
    queue.client.hdel(stats, f"tenants{SEP}jobs:low{SEP}free")  # as an older release left it
    while queue.pop(5):
        pass
    assert {f: int(queue.client.hget(stats, f) or 0) for f in counted} == dict.fromkeys(counted, 0)


def test_a_tenants_tier_weight_holds_across_shards(server: RedisServer) -> None:
    """One enterprise tenant (tier weight 6) alone on shard 0 and six free ones (weight 1) on shard
    1, all backlogged in one class: one queue group would give the enterprise tenant half the
    class (6 against 6). The shards' turns are weighed by their tenants' tier weights, so it gets
    half fleet-wide too; weighed by tenant counts it got a seventh."""
    config = sharded(server.url, shards=2, hand_size=1)
    assert config.tenants.tiers["enterprise"] == 6 and config.tenants.tiers["free"] == 1
    producer = Queue(config, redis_client(server.url))
    enterprise, free = tenants_homed(0, 1, shards=2), tenants_homed(1, 6, shards=2)
    for tenant in enterprise:
        producer.submit_many("newsletter", tenant, [None] * 400, tier="enterprise")
    for tenant in free:
        producer.submit_many("newsletter", tenant, [None] * 100, tier="free")
    workers = [Queue(config, redis_client(server.url), seed=i) for i in range(3)]
    _, served = drain(workers, 420)
    share = served[("jobs:low", enterprise[0])] / 420
    assert abs(share - 0.5) <= 0.03, served
    print(f"\nenterprise share {share:.3f}, free tenants {sorted(served[('jobs:low', t)] for t in free)}")
    free_served = [served[("jobs:low", t)] for t in free]
    assert max(free_served) - min(free_served) <= 0.2 * 35, free_served  # each free tenant about 420 / 12


def test_a_flooding_tenant_costs_its_shard_mates_what_the_simulator_predicts(cluster: RedisClusterServers) -> None:
    """A tenant floods (20,000 jobs) before 40 others queue 200 each, all in one class, 6 shards,
    hands of 2. The tenants whose hands share a shard with the flooder's get the service per tenant
    the others get, as ``fairctl simulate``'s model of the same queue predicts, within 5 points;
    and the flooder gets one tenant's share, not its backlog's."""
    config = sharded(cluster.url, shards=6, hand_size=2)
    backlogs = [("jobs:low", "flooder", 20_000)] + [("jobs:low", f"shop-{i}", 200) for i in range(40)]
    producer = Queue(config, redis_client(cluster.url))
    for queue, tenant, count in backlogs:
        producer.submit_many(TASKS[queue], tenant, [None] * count)
    workers = [Queue(config, redis_client(cluster.url), seed=i) for i in range(4)]
    _, served = drain(workers, 4000)
    measured = ShardFigures(6, 2, {(q, t): n for q, t, n in backlogs}, served).flood_cost()
    predicted = predict(backlogs, 6, 2, config, 4000).figures.flood_cost()
    assert measured is not None and predicted is not None and measured.mates == predicted.mates > 0
    assert measured.percent is not None and predicted.percent is not None
    assert abs(measured.percent - predicted.percent) <= 5, (measured, predicted)
    assert measured.percent >= 90  # the flood does not fall on its shard-mates
    fair = 4000 / 41
    assert served[("jobs:low", "flooder")] <= 1.2 * fair, served[("jobs:low", "flooder")]


def test_resharding_6_to_12_under_load_loses_and_repeats_no_job(cluster: RedisClusterServers) -> None:
    """Producers keep enqueuing and workers keep taking jobs while the group grows from 6 shards to
    12, then shrinks back to 6 and settles: every job is done exactly once (a lease here never
    expires, so there is no redelivery to count)."""
    config = sharded(cluster.url, shards=6)
    admin = Queue(config, redis_client(cluster.url))
    sent: list[str] = []
    done: collections.Counter[str] = collections.Counter()
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        queue = Queue(config, redis_client(cluster.url))
        for i in range(n):
            for enqueued in queue.submit_many("invoice", f"shop-{i % 50}", [{"n": i}] * 4):
                assert enqueued is not None
                sent.append(enqueued.job_id)

    def work(seed: int) -> None:
        try:
            queue = Queue(config, redis_client(cluster.url), seed=seed)
            held: list[Lease] = []
            while not stop.is_set() or held or queue.wait_for_work(0.3) is not None:
                popped = queue.ack_and_pop(held, 5)
                assert all(popped.acked)
                held = popped.leases
                done.update(lease.job_id for lease in held)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
    for thread in workers:
        thread.start()
    produce(150)
    grown = admin.reshard(12)
    assert (grown.shards, grown.serve) == (12, 12)
    produce(150)
    shrunk = admin.reshard(6)
    assert (shrunk.shards, shrunk.serve) == (6, 12)
    produce(150)
    stop.set()
    for thread in workers:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(sent) == len(set(sent)) == 1800
    assert set(done) == set(sent) and max(done.values()) == 1
    assert {split_job_id(j)[0] for j in sent} == set(range(12))  # the grown layout's shards all took jobs
    # Settling waits until every process has seen the layout, then stops serving the empty shards 6..11.
    time.sleep(2.2)
    assert admin.settle().serve == 6


# ---------------------------------------------------------------- the CLI


def test_a_settle_that_must_wait_says_how_many_jobs_wait_where(server: RedisServer, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, server.url, classes=PLAIN_CLASSES,
                                redis={"url": server.url, "prefix": make_config().redis.prefix, "shards": 3})
    queue = Queue(config, redis_client(server.url))
    ids = [queue.enqueue("invoice", f"shop-{i}") for i in range(40)]
    left = collections.Counter(split_job_id(j)[0] for j in ids)
    assert left[1] and left[2], left
    shrunk = run_fairctl("reshard", "--to", "1", "--settle", "--config", path)
    assert shrunk.returncode == 0, shrunk.stderr
    assert "workers serve 3 (shards 1..2 until they are empty)" in shrunk.stdout
    assert (f"not settled yet: {left[1] + left[2]} job(s) (queued, leased or waiting to retry) are on shards 1..2 "
            f"(shard 1: {left[1]}, shard 2: {left[2]}) and are served there; run fairctl reshard --settle again "
            "once they are done (fairctl status shows each shard's jobs)") in shrunk.stdout, shrunk.stdout


def test_the_cli_enqueues_reshards_and_shows_each_shard(server: RedisServer, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, server.url, classes=PLAIN_CLASSES,
                                redis={"url": server.url, "prefix": make_config().redis.prefix, "shards": 3})
    enqueued = run_fairctl("enqueue", "invoice", "--tenant", "acme", "--count", "2", "--config", path)
    assert enqueued.returncode == 0, enqueued.stderr
    home = hand("acme", 3, 2)[0]
    assert f"enqueued 2 jobs: {home}:1 {home}:2" in enqueued.stdout
    shown = run_fairctl("reshard", "--config", path)
    assert f"queue group {config.redis.prefix}: new jobs go to 3 shards, workers serve 3; layout v1" in shown.stdout
    assert "layout wins" not in shown.stderr
    grown = run_fairctl("reshard", "--to", "5", "--config", path)
    assert "new jobs go to 5 shards, workers serve 5; was 3 and 3; layout v2" in grown.stdout, grown.stderr
    shrunk = run_fairctl("reshard", "--to", "4", "--settle", "--config", path)
    assert ("new jobs go to 4 shards, workers serve 5 (shards 4..4 until they are empty); was 5 and 5; layout v3"
            in shrunk.stdout), shrunk.stdout
    # the file still says 3: every command started from it says the layout wins, and what to set
    stale = run_fairctl("status", "--config", path)
    assert (f"queue group {config.redis.prefix} runs 4 shards (its layout v3, from fairctl reshard), and {path} says "
            "redis.shards: 3: the layout wins; set redis.shards: 4 there") in stale.stderr, stale.stderr
    check_status_shows_one_queue_and_each_shard(path, config.redis.prefix, home)
    heavier = tmp_path / "heavier.yaml"
    heavier.write_text(path.read_text().replace("weight: 70", "weight: 80"))
    assert run_fairctl("config", "diff", path).returncode == 0
    applied = run_fairctl("config", "apply", heavier)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("applied v2 to queue group") == 5  # every shard the layout serves
    assert run_fairctl("config", "diff", heavier).returncode == 0
    shown = run_fairctl("config", "show", "--config", heavier).stdout
    assert shown.count("# version: 2") == 5 and "weight: 80" in shown
    (tmp_path / "plain").mkdir()
    unsharded, _ = write_config(tmp_path / "plain", server.url)
    plain = run_fairctl("reshard", "--to", "2", "--config", unsharded)
    assert plain.returncode == 2 and "not sharded" in plain.stderr
    with redis.Redis.from_url(server.url) as conn:
        assert conn.exists("{" + config.redis.prefix + "}:layout")


def test_dead_letters_of_every_shard_are_listed_shown_requeued_and_dropped_by_sharded_id(
        server: RedisServer, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, server.url, classes=PLAIN_CLASSES,
                                redis={"url": server.url, "prefix": make_config().redis.prefix, "shards": 3})
    queue = Queue(config, redis_client(server.url))
    tenants = [next(t for t in (f"shop-{i}" for i in range(100)) if hand(t, 3, 2)[0] == shard) for shard in range(3)]
    for tenant in tenants:
        queue.submit_many("invoice", tenant, [None] * 2)
    dead = []
    for _ in range(3):
        for lease in queue.pop(2):
            assert queue.nack(lease, f"boom {lease.job_id}", final=True) == "dead"
            dead.append(lease.job_id)
    assert len(dead) == 6 and {split_job_id(j)[0] for j in dead} == {0, 1, 2}

    listed = json.loads(run_fairctl("dead", "list", "--json", "--config", path).stdout)
    assert listed["total"] == 6 and sorted(r["id"] for r in listed["dead_letters"]) == sorted(dead)
    assert [r["dead_at"] for r in listed["dead_letters"]] == sorted(r["dead_at"] for r in listed["dead_letters"])
    assert len(json.loads(run_fairctl("dead", "list", "--limit", "2", "--json", "--config", path).stdout)[
        "dead_letters"]) == 2
    shown = run_fairctl("dead", "show", dead[0], "--config", path)
    assert shown.returncode == 0 and f"boom {dead[0]}" in shown.stdout, shown.stderr
    unsharded = run_fairctl("dead", "show", split_job_id(dead[0])[1], "--config", path)
    assert unsharded.returncode == 2 and "shard" in unsharded.stderr
    requeued = run_fairctl("dead", "requeue", dead[0], dead[3], "--config", path)
    assert requeued.returncode == 0 and requeued.stdout.startswith("requeued 2 dead letters: ")
    assert sorted(requeued.stdout.split(": ")[1].split()) == sorted([dead[0], dead[3]])
    again = {lease.job_id for _ in range(2) for lease in queue.pop(1)}
    assert again == {dead[0], dead[3]}  # back on their own shards, under their ids
    missing = run_fairctl("dead", "drop", "9:1", "--config", path)
    assert missing.returncode == 2 and "no shard 9" in missing.stderr
    dropped = run_fairctl("dead", "drop", "--all", "--yes", "--config", path)
    assert dropped.returncode == 0 and "dropped 4 dead letters" in dropped.stdout
    assert sum(queue.shard(i).dead_letter_count() for i in range(3)) == 0


def check_status_shows_one_queue_and_each_shard(path: Path, prefix: str, home: int) -> None:
    """``fairctl status`` of a sharded queue: the classes over every shard, then a line per shard
    (its group, backlog and config version); --json says the same."""
    status = run_fairctl("status", "--interval", "0", "--config", path)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == f"queue group {prefix}: one queue sharded 4 ways, 5 served until the re-shard settles (layout v3)"
    depths = {line.split()[0]: int(line.split()[1]) for line in lines if line.split()[0] in WEIGHTS}
    assert sorted(depths.values()) == [0] * (len(WEIGHTS) - 1) + [2]  # each class's depth over every shard
    rows = {line.split()[0]: line.split() for line in lines[lines.index("shards:") + 2:] if line.startswith("  ")}
    assert [rows[str(i)][1] for i in range(5)] == [f"{prefix}.{i}" for i in range(5)]
    assert [int(rows[str(i)][2]) for i in range(5)] == [2 if i == home else 0 for i in range(5)]
    assert "master" not in lines[lines.index("shards:") + 1]  # one Redis: no master column
    assert lines[-1].startswith("config: v1 on every shard")
    data = json.loads(run_fairctl("status", "--interval", "0", "--json", "--config", path).stdout)
    assert data["group"] == prefix and data["layout"] == {"shards": 4, "serve": 5, "version": 3}
    assert [shard["depth"] for shard in data["shards"]] == [2 if i == home else 0 for i in range(5)]
    assert sum(c["depth"] for c in data["classes"]) == 2


def test_status_of_a_sharded_queue_on_a_cluster_names_each_shards_master(
        cluster: RedisClusterServers, tmp_path: Path) -> None:
    """On a Cluster the shard lines name the master holding each shard, and the class table over
    the shards adds up their backlogs (measured over an interval, with classes no job reached)."""
    path, config = write_config(tmp_path, cluster.url, classes=PLAIN_CLASSES,
                                redis={"url": cluster.url, "prefix": make_config().redis.prefix, "shards": 6})
    queue = Queue(config, redis_client(cluster.url))
    for t in range(12):
        queue.submit_many("newsletter", f"shop-{t}", [None] * (t + 1))
    popped = queue.pop(5)  # up to 5, from one shard's tenant: as many as that tenant has
    for lease in popped:
        queue.ack(lease)
    shown = run_fairctl("status", "--json", "--config", path)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    loads = queue.loads(fresh=True)
    assert [s["depth"] for s in data["shards"]] == [sum(load.depth.values()) for load in loads]
    assert popped and sum(c["depth"] for c in data["classes"]) == sum(range(1, 13)) - len(popped)
    assert [int(s["master"].rpartition(":")[2]) for s in data["shards"]] == [
        owner(cluster, queue.shard(i).keys.base) for i in range(6)]
    text = run_fairctl("status", "--interval", "0", "--config", path).stdout
    assert "master" in text.splitlines()[text.splitlines().index("shards:") + 1]


def test_one_exporter_serves_every_shard_of_the_logical_queue(server: RedisServer, tmp_path: Path) -> None:
    """``fairctl exporter --config sharded.yaml``: each shard's depth under ``group="P",shard="P.i"``."""
    path, config = write_config(tmp_path, server.url, classes=PLAIN_CLASSES,
                                redis={"url": server.url, "prefix": make_config().redis.prefix, "shards": 4})
    queue = Queue(config, redis_client(server.url))
    for t in range(12):
        queue.submit_many("newsletter", f"shop-{t}", [None] * (t + 1))
    expected = {f"{config.redis.prefix}.{i}": load.depth["jobs:low"] for i, load in enumerate(queue.loads(fresh=True))}
    with one_exporter_for_both([], [path], tmp_path) as (target,):
        text = fetch(f"http://{target}/metrics")
    depth = {dict(labels)[m.SHARD]: v for (name, labels), v in parse_grouped(text).items()
             if name == m.QUEUE_DEPTH.name and dict(labels)[m.QUEUE] == "jobs:low"}
    assert depth == expected and sum(depth.values()) == sum(range(1, 13))
    groups = {dict(labels)[m.GROUP] for (_, labels) in parse_grouped(text)}
    assert groups == {config.redis.prefix}, "every shard's series name the logical queue"


def test_a_sharded_group_on_a_cluster_that_does_not_answer_is_named_not_guessed(tmp_path: Path) -> None:
    """The shards' names on a Cluster are the layout's: without the Cluster, the exporter and
    status say why they cannot start instead of serving guessed groups."""
    path, _ = write_config(tmp_path, "redis+cluster://127.0.0.1:1", classes=PLAIN_CLASSES,
                           redis={"url": "redis+cluster://127.0.0.1:1", "prefix": make_config().redis.prefix,
                                  "shards": 6})
    for command in (["status", "--interval", "0"], ["exporter", "--listen", "127.0.0.1:0"]):
        refused = run_fairctl(*command, "--config", path, timeout=60)
        assert refused.returncode == 1 and "--config" in refused.stderr and "sharded over a Redis Cluster" in refused.stderr
