"""Auth and TLS: a redis-server with an ACL user (default user off) on a TLS port serves the
scheduler, ``fairctl worker`` and ``fairctl exporter`` (itself on HTTPS, bound where told) through
``rediss://user:password@`` URLs; the password never shows in logs, metrics or error messages."""

from __future__ import annotations

import signal
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from exporter import metrics as m
from fairctl.cli import app
from fairness_core import Queue, RedisUnavailable, redis_client
from fairness_stack.servers import RedisServer, free_port, stop_process

from .conftest import EXAMPLE_CONFIG, make_config
from .exporter_support import fetch, redis_up, scrape
from .support import spawn_exporter, spawn_worker, totals, wait_for, write_config
from .test_exporter import self_signed

PASSWORD = "Tr0ub4dor-s3cret"


@dataclass(frozen=True)
class SecureRedis:
    """A TLS redis-server whose only user is ``app`` with :data:`PASSWORD`."""

    server: RedisServer
    tls_port: int
    ca: Path

    def url(self, password: str = PASSWORD) -> str:
        return f"rediss://app:{password}@127.0.0.1:{self.tls_port}/0?ssl_ca_certs={self.ca}"


@pytest.fixture(scope="module")
def secure_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    cert, key = self_signed(tmp_path_factory.mktemp("redis-tls"))
    tls_port = free_port()
    with RedisServer(extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
            "--user", "default", "off", "--user", "app", "on", f">{PASSWORD}", "~*", "&*", "+@all")) as server:
        yield SecureRedis(server, tls_port, cert)


def test_scheduler_worker_and_exporter_over_tls_with_an_acl_user(secure_redis: SecureRedis, tmp_path: Path) -> None:
    url = secure_redis.url()
    path, config = write_config(tmp_path, url)
    scheduler = Queue(config, redis_client(url))
    for i in range(20):
        scheduler.enqueue("password_reset", f"tenant-{i % 3}")
    cert, key = self_signed(tmp_path)
    port = free_port()
    worker = spawn_worker(path, tmp_path / "worker.log", f"{config.redis.prefix}:record", url, "--concurrency", "2")
    exporter = spawn_exporter(path, tmp_path / "exporter.log", "--listen", f"127.0.0.1:{port}",
                              "--tls-cert", str(cert), "--tls-key", str(key))
    trusting = ssl.create_default_context(cafile=str(cert))
    try:
        wait_for(lambda: totals(scheduler)["processed"] == 20, 60, "the worker to work every job over TLS")

        metrics = f"https://127.0.0.1:{port}/metrics"
        wait_for(lambda: redis_up(metrics, context=trusting) == 1, 30, "the exporter to serve HTTPS")
        got = scrape(metrics, context=trusting)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()  # bound to 127.0.0.1 only
    finally:
        for process in (worker, exporter):
            process.send_signal(signal.SIGTERM)
            stop_process(process, timeout=30)
    assert got.value(m.EXPORTER_REDIS_UP.name) == 1
    assert got.value(m.JOBS_PROCESSED.name, queue="jobs:high") == 20
    shares = {dict(labels)[m.TENANT]: v for labels, v in got.series(m.QUEUE_TENANT_SHARE.name).items()
              if dict(labels)[m.QUEUE] == "jobs:high"}
    assert set(shares) == {f"tenant-{i}" for i in range(3)} and sum(shares.values()) == pytest.approx(1.0)
    for text in (got.text, (tmp_path / "worker.log").read_text(), (tmp_path / "exporter.log").read_text()):
        assert PASSWORD not in text


def test_a_wrong_password_is_named_as_such_and_never_shown(secure_redis: SecureRedis, tmp_path: Path) -> None:
    wrong = "Wr0ng-pa55word"
    path, config = write_config(tmp_path, secure_redis.url(wrong))
    with pytest.raises(RedisUnavailable, match=r"^Redis at 127\.0\.0\.1:\d+ refused the user name or password") as err:
        Queue(config, redis_client(config.redis.url)).enqueue("newsletter", "acme")
    assert wrong not in str(err.value)
    for command in (["status"], ["enqueue", "newsletter", "--tenant", "a"], ["worker"]):
        result = CliRunner().invoke(app, [*command, "--config", str(path)])
        assert result.exit_code == 2 and result.stderr.startswith(f"fairctl: error: {path}: redis.url: Redis at 127.0.0.1:")
        assert wrong not in result.output and "refused the user name or password" in result.stderr
    port = free_port()
    exporter = spawn_exporter(path, tmp_path / "exporter.log", "--listen", f"127.0.0.1:{port}")
    try:
        wait_for(lambda: redis_up(f"http://127.0.0.1:{port}/metrics") == 0, 30, "the exporter to answer")
        text = fetch(f"http://127.0.0.1:{port}/metrics")
    finally:
        exporter.send_signal(signal.SIGTERM)
        stop_process(exporter, timeout=30)
    log = (tmp_path / "exporter.log").read_text()
    assert wrong not in text and wrong not in log and "refused the user name or password" in log


def test_an_untrusted_redis_certificate_is_a_clear_tls_error(secure_redis: SecureRedis) -> None:
    url = f"rediss://app:{PASSWORD}@127.0.0.1:{secure_redis.tls_port}/0"  # no ssl_ca_certs: not trusted
    with pytest.raises(RedisUnavailable, match="TLS failed.*CERTIFICATE_VERIFY_FAILED.*ssl_ca_certs") as err:
        with redis_client(url) as client:
            Queue(make_config(redis={"url": url}), client).enqueue("newsletter", "acme")
    assert PASSWORD not in str(err.value)


# Passwords with the characters that break URLs unless percent-encoded (/ ? # @ :).
passwords = st.text(alphabet=st.characters(codec="ascii", categories=("L", "N", "P", "S")), min_size=10, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=passwords, scheme=st.sampled_from(["redis", "rediss", "redis+cluster"]))
def test_no_error_ever_quotes_the_password_of_a_url(password: str, scheme: str) -> None:
    port = free_port()
    url = f"{scheme}://app:{password}@127.0.0.1:{port}/0"
    assume(password not in f"Redis Cluster at 127.0.0.1:{port} is unavailable (ConnectionError)")
    try:
        client = redis_client(url, connect_timeout=0.5)
        Queue(make_config(), client).enqueue("newsletter", "acme")
    except (ValueError, RedisUnavailable) as exc:
        assert password not in str(exc)
    else:
        raise AssertionError("nothing listens there")
    result = CliRunner().invoke(app, ["status", "--interval", "0", "--redis-url", url,
                                      "--config", str(EXAMPLE_CONFIG)])
    assert result.exit_code == 2 and password not in result.output
