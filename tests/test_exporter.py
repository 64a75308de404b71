"""The exporter against a real redis-server: values against ground truth from the jobs themselves,
promtool on a scrape under load, bounded cardinality, Redis stopped, restarted and stalled,
two sidecars on one Redis, TLS, and the ``fairctl exporter`` command."""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from exporter import metrics as m
from exporter.server import exporter_server, tls_context
from fairctl.cli import app
from fairctl.handlers import sleep_handlers
from fairness_core import Config, Lease, Queue, redis_client
from fairness_core.version import fairctl_version
from fairness_core.worker import Worker
from fairness_stack.servers import RedisServer, free_port

from .conftest import ROOT, make_config
from .exporter_support import fetch, parse_grouped, promtool_check_metrics, running_exporter, scrape
from .support import running, wait_for, write_config

NO_BUDGET = {"budget_min_arrivals": 10**9}  # arrival budgets are not what these tests measure
CLASSES = ("jobs:high", "jobs:medium", "jobs:low")
TASK_OF = {"jobs:high": "password_reset", "jobs:medium": "sync_contacts", "jobs:low": "newsletter"}
TENANT_LABELLED = {m.QUEUE_TENANT_SHARE.name, m.TENANT_SHARE.name, m.TENANT_OLDEST_AGE.name}


def config_on(url: str, **sections: Any) -> Config:
    return make_config(redis={"url": url}, **sections)


@dataclass
class Ledger:
    """Every job submitted and what became of it, kept by the test: the ground truth."""

    scheduler: Queue
    queued: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # id -> class, tenant, enqueued at
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    leased: dict[str, Lease] = field(default_factory=dict)
    acked: Counter[tuple[str, str]] = field(default_factory=Counter)  # (class, tenant)
    nacked: Counter[str] = field(default_factory=Counter)
    first_leases: Counter[str] = field(default_factory=Counter)

    def submit(self, task: str, tenant: str, **kwargs: object) -> None:
        done = self.scheduler.submit(task, tenant, **kwargs)  # type: ignore[arg-type]
        self.queued[done.job_id] = (done.queue, tenant, time.time())
        self.reasons[(done.queue, done.reason)] += 1

    def pop(self, n: int) -> list[Lease]:
        leases = self.scheduler.pop(n)
        for lease in leases:
            del self.queued[lease.job_id]
            self.leased[lease.job_id] = lease
            self.first_leases[lease.queue] += 1
        return leases

    def ack(self, lease: Lease) -> None:
        assert self.scheduler.ack(lease)
        del self.leased[lease.job_id]
        self.acked[(lease.queue, lease.tenant)] += 1

    def nack(self, lease: Lease) -> None:
        assert self.scheduler.nack(lease, "boom") == "retry"
        del self.leased[lease.job_id]
        self.nacked[lease.queue] += 1

    def oldest(self, queue: str, tenant: str | None = None) -> float | None:
        times = [t for q, who, t in self.queued.values() if q == queue and tenant in (None, who)]
        return min(times) if times else None


def test_values_match_ground_truth_from_the_jobs(redis_server: RedisServer) -> None:
    config = config_on(redis_server.url, scheduler=NO_BUDGET, leases={"retry_backoff": "10m"})
    ledger = Ledger(Queue(config, redis_client(redis_server.url)))
    for i in range(30):
        ledger.submit("newsletter", f"shop-{i % 5}")
        ledger.submit("password_reset", f"user-{i % 4}")
    time.sleep(1.5)  # ages of the first wave stand out from the second
    for i in range(12):
        ledger.submit("report_export", f"ent-{i % 3}", tier="enterprise")
        ledger.submit("sync_contacts", f"free-{i % 2}")
    leases = ledger.pop(20) + ledger.pop(20)
    for lease in leases[:22]:
        ledger.ack(lease)
    for lease in leases[22:28]:
        ledger.nack(lease)
    with running_exporter(config) as exporter:
        got = scrape(exporter.url)
    for queue in CLASSES:
        in_class = [v for v in ledger.queued.values() if v[0] == queue]
        assert got.value(m.QUEUE_DEPTH.name, queue=queue) == len(in_class)
        assert got.value(m.QUEUE_INFLIGHT.name, queue=queue) == sum(1 for x in ledger.leased.values() if x.queue == queue)
        assert got.value(m.QUEUE_DELAYED.name, queue=queue) == ledger.nacked[queue]
        assert got.value(m.JOBS_FAILED.name, queue=queue) == ledger.nacked[queue]
        assert got.value(m.QUEUE_ACTIVE_TENANTS.name, queue=queue) == len({t for _, t, _ in in_class})
        assert got.value(m.JOBS_WAIT.series("_count"), queue=queue) == ledger.first_leases[queue]
        oldest = ledger.oldest(queue)
        expected = got.at - oldest if oldest is not None else 0.0
        assert got.value(m.QUEUE_OLDEST_AGE.name, queue=queue) == pytest.approx(expected, abs=1.0)
        tenants = got.series(m.TENANT_OLDEST_AGE.name)
        listed = {dict(labels)["tenant"]: v for labels, v in tenants.items() if dict(labels)["queue"] == queue}
        assert set(listed) == {t for _, t, _ in in_class}, "k=10 covers every waiting tenant here"
        for tenant, tenant_age in listed.items():
            assert tenant_age == pytest.approx(got.at - (ledger.oldest(queue, tenant) or 0), abs=1.0)
        acked = {tenant: n for (q, tenant), n in ledger.acked.items() if q == queue}
        assert got.value(m.JOBS_PROCESSED.name, queue=queue) == sum(acked.values())
        shares = {dict(labels)["tenant"]: v for labels, v in got.series(m.QUEUE_TENANT_SHARE.name).items()
                  if dict(labels)["queue"] == queue}
        assert set(shares) == set(acked), "k=10 covers every tenant served here"
        if acked:
            assert sum(shares.values()) == pytest.approx(1.0)
            assert max(shares, key=shares.__getitem__) in {t for t, n in acked.items() if n == max(acked.values())}
    for (queue, reason), count in ledger.reasons.items():
        assert got.value(m.JOBS_ENQUEUED.name, queue=queue, reason=reason) == count
    total = sum(ledger.acked.values())
    by_tenant = Counter({tenant: n for (_, tenant), n in ledger.acked.items()})
    for labels, share in got.series(m.TENANT_SHARE.name).items():
        assert share == pytest.approx(by_tenant[dict(labels)["tenant"]] / total)
    assert got.value(m.EXPORTER_REDIS_UP.name) == 1


@pytest.mark.parametrize("charge", ["jobs", "runtime"])
def test_worker_time_and_tenant_shares_follow_the_reported_runtimes(redis_server: RedisServer, charge: str) -> None:
    """Worker time is counted (in seconds) under either charge; the tenant shares are of jobs under
    jobs and of worker time under runtime: two jobs of 0.3 s each against two of 0.1 s."""
    config = config_on(redis_server.url, scheduler={**NO_BUDGET, "charge": charge})
    scheduler = Queue(config, redis_client(redis_server.url))
    runtimes = {"long": 0.3, "short": 0.1}
    for tenant in ("long", "short") * 2:
        scheduler.submit("newsletter", tenant)
    scheduler.submit("sync_contacts", "failing")
    leases = scheduler.pop(10)
    assert sorted(lease.tenant for lease in leases) == ["failing", "long", "long", "short", "short"]
    for lease in leases:
        if lease.tenant == "failing":
            assert scheduler.nack(lease, "boom", runtime=0.05) == "retry"
        else:
            assert scheduler.ack(lease, runtime=runtimes[lease.tenant])
    with running_exporter(config) as exporter:
        got = scrape(exporter.url)
    assert got.value(m.EXPORTER_BUILD_INFO.name, version=fairctl_version(), charge=charge) == 1
    worker_time = {queue: got.value(m.QUEUE_WORKER_SECONDS.name, queue=queue) for queue in CLASSES}
    assert worker_time == {"jobs:high": 0, "jobs:medium": pytest.approx(0.05), "jobs:low": pytest.approx(0.8)}
    assert got.value(m.JOBS_PROCESSED.name, queue="jobs:low") == 4
    shares = {dict(labels)["tenant"]: v for labels, v in got.series(m.QUEUE_TENANT_SHARE.name).items()
              if dict(labels)["queue"] == "jobs:low"}
    expected = {"jobs": {"long": 0.5, "short": 0.5}, "runtime": {"long": 0.75, "short": 0.25}}[charge]
    assert shares == pytest.approx(expected)


def test_configured_classes_with_no_work_report_zero(redis_server: RedisServer) -> None:
    config = config_on(redis_server.url)
    with running_exporter(config) as exporter:
        got = scrape(exporter.url)
    for spec in (m.QUEUE_DEPTH, m.QUEUE_INFLIGHT, m.QUEUE_DELAYED, m.QUEUE_PAUSED, m.QUEUE_OLDEST_AGE,
                 m.QUEUE_ACTIVE_TENANTS, m.QUEUE_NOISY_TENANTS, m.QUEUE_QUIET_OLDEST_AGE, m.JOBS_FAILED,
                 m.JOBS_REDELIVERED, m.JOBS_UNHANDLED, m.JOBS_DEAD_LETTERED, m.JOBS_PROMOTED, m.JOBS_DEMOTED):
        assert got.series(spec.name) == {((m.QUEUE, q),): 0 for q in config.class_names}, spec.name
    assert got.series(m.JOBS_PROCESSED.name) == {((m.QUEUE, q),): 0 for q in config.class_names}
    assert got.series(m.TENANT_SHARE.name) == {} and got.series(m.TENANT_OLDEST_AGE.name) == {}
    assert got.series(m.QUEUE_TENANT_SHARE.name) == {}
    # An unsharded queue is a logical queue of one shard, the group itself, on the one Redis (on a
    # Cluster, the suite's run there: the master its hash slot is on, one of the cluster's).
    (labels, up), = got.series(m.REDIS_MASTER.name).items()
    if isinstance(redis_server, RedisServer):
        run_id = redis.Redis(port=redis_server.port).info("server")["run_id"]
        assert labels == ((m.MASTER, f"127.0.0.1:{redis_server.port}"), (m.RUN_ID, run_id)) and up == 1
    else:
        masters = {f"{n.host}:{n.port}" for n in redis_client(redis_server.url).cluster().get_primaries()}
        assert dict(labels)[m.MASTER] in masters and up == 1
    places = {(dict(labels)[m.GROUP], dict(labels)[m.SHARD]) for _, labels in parse_grouped(got.text)}
    assert places == {(config.redis.prefix, config.redis.prefix)}


def test_promtool_finds_nothing_wrong_in_a_scrape_while_workers_run(redis_server: RedisServer) -> None:
    config = config_on(redis_server.url, scheduler=NO_BUDGET)
    scheduler = Queue(config, redis_client(redis_server.url))
    odd = ['say "hi"', "back\\slash", "ünïcødé 租户", "{tag}:x/y", "trailing\\"]
    for i in range(300):
        tenant = odd[i % len(odd)] if i % 3 == 0 else f"tenant-{i % 17}"
        scheduler.enqueue(TASK_OF[CLASSES[i % 3]], tenant, {"service_s": 0.002})
    scheduler.enqueue("fails_always", "broken")  # no handler: nacked, retried, counted
    with running_exporter(config) as exporter, running(Worker(scheduler, sleep_handlers, concurrency=4)):
        wait_for(lambda: (scrape(exporter.url).get(m.QUEUE_TENANT_SHARE.name, queue="jobs:high", tenant=odd[0]) or 0) > 0,
                 30, "some jobs of an odd tenant processed")
        got = scrape(exporter.url)
    assert got.value(m.EXPORTER_REDIS_UP.name) == 1
    checked = promtool_check_metrics(got.text)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def load_tenants(config: Config, url: str, tenants: int) -> None:
    """Two jobs per tenant in every class, then one job in six processed (no class runs dry)."""
    scheduler = Queue(config, redis_client(url))
    for i in range(tenants):
        for queue in CLASSES:
            scheduler.enqueue(TASK_OF[queue], f"tenant-{i}")
            scheduler.enqueue(TASK_OF[queue], f"tenant-{i}")
    for start in range(0, tenants, 1000):
        for lease in scheduler.pop(min(1000, tenants - start)):
            scheduler.ack(lease)


def test_series_count_does_not_grow_with_the_number_of_tenants(redis_server: RedisServer) -> None:
    shapes, scrapes = [], []
    for tenants in (10, 2000):
        config = config_on(redis_server.url, scheduler=NO_BUDGET)
        load_tenants(config, redis_server.url, tenants)
        with running_exporter(config) as exporter:
            got = scrape(exporter.url)
        scrapes.append(got)
        # Each load is its own group (prefix), so its own config fingerprint, and on a Cluster maybe
        # another master: one series either way.
        shapes.append({key for key in got.samples
                       if key[0] not in TENANT_LABELLED | {m.CONFIG_VERSION.name, m.GROUP_CONFIG.name,
                                                           m.REDIS_MASTER.name}})
    assert shapes[0] == shapes[1]
    big = scrapes[1]
    for queue in CLASSES:
        assert big.value(m.JOBS_PROCESSED.name, queue=queue) == big.value(m.JOBS_WAIT.series("_count"), queue=queue)
    assert len(big.series(m.QUEUE_TENANT_SHARE.name)) == len(CLASSES) * 10
    assert len(big.series(m.TENANT_SHARE.name)) <= 10
    assert len(big.series(m.TENANT_OLDEST_AGE.name)) == len(CLASSES) * 10


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, with AOF, that the test stops and starts."""
    server = RedisServer(appendonly=True).start()
    yield server
    server.close()


def test_redis_stopped_then_restarted_under_a_running_exporter(own_redis: RedisServer) -> None:
    config = config_on(own_redis.url, exporter={"scrape_timeout": "1s"})
    scheduler = Queue(config, redis_client(own_redis.url))
    for i in range(7):
        scheduler.enqueue("newsletter", f"t{i}")
    with running_exporter(config) as exporter:
        assert scrape(exporter.url).value(m.QUEUE_DEPTH.name, queue="jobs:low") == 7
        own_redis.stop()
        for expected_errors in (1, 2):
            down = scrape(exporter.url)
            assert down.seconds < 1.0 + 1.0
            assert down.value(m.EXPORTER_REDIS_UP.name) == 0
            assert down.value(m.EXPORTER_SCRAPE_ERRORS.name, reason="unavailable") == expected_errors
            assert down.get(m.QUEUE_DEPTH.name, queue="jobs:low") is None
            assert down.value(m.QUEUE_WEIGHT_RATIO.name, queue="jobs:low") == pytest.approx(0.1)
        restarted = RedisServer(port=own_redis.port, appendonly=True, directory=str(own_redis.directory)).start()
        try:
            wait_for(lambda: scrape(exporter.url).value(m.EXPORTER_REDIS_UP.name) == 1, 20, "the exporter to recover")
            back = scrape(exporter.url)
        finally:
            restarted.close()
    assert back.value(m.QUEUE_DEPTH.name, queue="jobs:low") == 7
    assert back.value(m.JOBS_ENQUEUED.name, queue="jobs:low", reason="deferred batch work") == 7


def test_a_stalled_redis_still_gets_an_answer_within_the_budget(redis_server: RedisServer,
                                                                client: redis.Redis) -> None:
    """CLIENT PAUSE ALL: connections are accepted but no command is answered."""
    config = config_on(redis_server.url, exporter={"scrape_timeout": "1s"})
    Queue(config, client).enqueue("newsletter", "t")
    with running_exporter(config) as exporter:
        assert scrape(exporter.url).value(m.EXPORTER_REDIS_UP.name) == 1
        client.execute_command("CLIENT", "PAUSE", 3000, "ALL")  # over by itself after 3 s
        stalled = scrape(exporter.url)
        assert stalled.seconds < 1.0 + 1.0
        assert stalled.value(m.EXPORTER_REDIS_UP.name) == 0
        assert stalled.value(m.EXPORTER_SCRAPE_ERRORS.name, reason="timeout") == 1
        wait_for(lambda: scrape(exporter.url).value(m.EXPORTER_REDIS_UP.name) == 1, 20, "the exporter to recover")
        assert scrape(exporter.url).value(m.QUEUE_DEPTH.name, queue="jobs:low") == 1


def test_two_exporters_on_one_redis_serve_identical_values(redis_server: RedisServer) -> None:
    config = config_on(redis_server.url, scheduler=NO_BUDGET)
    ledger = Ledger(Queue(config, redis_client(redis_server.url)))
    for i in range(60):
        ledger.submit(TASK_OF[CLASSES[i % 3]], f"t{i % 7}")
    for lease in ledger.pop(25):
        ledger.ack(lease)
    with running_exporter(config) as one, running_exporter(config) as two:
        a, b = scrape(one.url), scrape(two.url)
    timed = {m.QUEUE_OLDEST_AGE.name, m.QUEUE_QUIET_OLDEST_AGE.name, m.TENANT_OLDEST_AGE.name,
             m.EXPORTER_SCRAPE_DURATION.name}
    assert a.samples.keys() == b.samples.keys()
    # Each exporter reads Redis's clock somewhere inside its request, not at the request's middle:
    # the two readings lie apart by at most the middles' gap and half of each request's time.
    apart = abs(b.at - a.at) + (a.seconds + b.seconds) / 2
    for key, value in a.samples.items():
        if key[0] in timed:
            assert b.samples[key] == pytest.approx(value, abs=apart + 0.05), key
        elif key[0] == m.REDIS_MEMORY_USED.name:  # each exporter's own connection takes some
            assert b.samples[key] == pytest.approx(value, rel=0.05), key
        else:
            assert b.samples[key] == value, key


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_metrics_over_https_with_a_self_signed_certificate(redis_server: RedisServer, tmp_path: Path,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    config = config_on(redis_server.url)
    cert, key = self_signed(tmp_path)
    scheduler = Queue(config, redis_client(redis_server.url))
    trusting = ssl.create_default_context(cafile=str(cert))
    with exporter_server(config, scheduler.groups()[0], "127.0.0.1", 0, tls=tls_context(str(cert), str(key))) as server:
        assert server.url.startswith("https://127.0.0.1:")
        got = scrape(server.url, context=trusting)
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            fetch(server.url)  # not trusted by default: it really is TLS
        with pytest.raises(OSError):
            fetch(server.url.replace("https://", "http://"))  # plain HTTP to the TLS port
        assert scrape(server.url, context=trusting).value(m.EXPORTER_REDIS_UP.name) == 1, "still serving"
    assert got.value(m.EXPORTER_REDIS_UP.name) == 1
    assert "Traceback" not in capfd.readouterr().err


def test_fairctl_exporter_serves_metrics_and_an_index_and_stops_on_sigterm(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """The command end to end, over TLS, with a password in the Redis URL that must never show."""
    config_path, _ = write_config(tmp_path, redis_server.url)
    cert, key = self_signed(tmp_path)
    port = free_port()
    down_url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FAIRCTL_REDIS_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "fairctl", "exporter", "--config", str(config_path), "--redis-url", down_url,
         "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    trusting = ssl.create_default_context(cafile=str(cert))
    try:
        def answers() -> bool:
            try:
                return "Metrics" in fetch(f"https://127.0.0.1:{port}/", context=trusting, timeout=2)
            except OSError:
                return False

        wait_for(answers, 30, "fairctl exporter to answer")
        got = scrape(f"https://127.0.0.1:{port}/metrics", context=trusting)
        assert got.value(m.EXPORTER_REDIS_UP.name) == 0
        assert got.value(m.QUEUE_MAX_AGE.name, queue="jobs:high") == 60
        assert "hunter2" not in got.text
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "hunter2" not in output and "serving https://127.0.0.1:" in output
    assert "Redis at 127.0.0.1:" in output and "unavailable" in output


@pytest.mark.parametrize("args, message", [
    (["--listen", "nope"], "--listen: expected HOST:PORT"),
    (["--tls-cert", "cert.pem"], "--tls-key: --tls-cert and --tls-key go together"),
    (["--tls-cert", "absent.pem", "--tls-key", "absent.key"], "--tls-cert: cannot load absent.pem"),
    (["--redis-url", "http://example.com"], "--redis-url: expected a redis://"),
])
def test_fairctl_exporter_bad_arguments_exit_2_naming_the_argument(
        redis_server: RedisServer, tmp_path: Path, args: list[str], message: str) -> None:
    config_path, _ = write_config(tmp_path, redis_server.url)
    result = CliRunner().invoke(app, ["exporter", "--config", str(config_path), *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"fairctl: error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_fairctl_exporter_port_in_use_exits_2(redis_server: RedisServer, tmp_path: Path) -> None:
    config_path, _ = write_config(tmp_path, redis_server.url)
    with running_exporter(config_on(redis_server.url)) as busy:
        port = busy.port
        result = CliRunner().invoke(app, ["exporter", "--config", str(config_path), "--listen", f"127.0.0.1:{port}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"fairctl: error: --listen: cannot listen on 127.0.0.1:{port}: "), result.stderr
