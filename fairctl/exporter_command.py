"""``fairctl exporter``: the Prometheus sidecar for one queue group (see exporter/)."""

from __future__ import annotations

import logging
import signal
import ssl
import threading
from pathlib import Path
from types import FrameType

import click

from exporter import metrics as m
from exporter.config import serving
from exporter.server import DEFAULT_PORT, listen_address, server_for, tls_context
from exporter.sources import watched

from .common import PATH, configs_option, fail, load_queues, redis_url_option, url_origin

log = logging.getLogger("fairctl.exporter")


def _tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        fail("--tls-cert" if cert is None else "--tls-key", "--tls-cert and --tls-key go together")
    try:
        return tls_context(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        fail("--tls-cert", f"cannot load {cert} with key {key}: {exc.strerror or exc}")


@click.command()
@click.option("--listen", metavar="HOST:PORT", show_default=False,
              help=f"Address to serve on; default exporter.listen from the config, else 0.0.0.0:{DEFAULT_PORT}.")
@click.option("--tls-cert", type=PATH, help="PEM certificate: serve HTTPS (with --tls-key).")
@click.option("--tls-key", type=PATH, help="PEM private key of --tls-cert.")
@configs_option
@redis_url_option
def exporter(listen: str | None, tls_cert: Path | None, tls_key: Path | None, configs: tuple[Path, ...],
             redis_url: str | None) -> None:
    """Serve the queue metrics for Prometheus on /metrics until SIGTERM or SIGINT.

    One scripted Redis round trip per scrape, whatever the number of tenants or jobs; every
    configured class always has its series. With the config's watch section it reads that job
    system's queues instead (Celery, RQ, BullMQ, Sidekiq), read-only, and serves the metrics the
    system supplies. When Redis is down or too slow for exporter.scrape_timeout, scrapes still
    answer in time with fairness_exporter_redis_up 0, and values come back by themselves when
    Redis does. Several --config serve several queue groups from one exporter, each group read
    with its own client and budget at once."""
    queues = load_queues(configs, redis_url)
    loaded = [config for config, _ in queues]
    cfg = loaded[0]
    try:  # the config's exporter.listen was checked when it was loaded
        host, port = listen_address(listen if listen is not None else serving(cfg).listen)
    except ValueError as exc:
        fail("--listen", str(exc))
    tls = _tls(tls_cert, tls_key)
    try:
        server = server_for(queues, host, port, tls=tls)
    except ValueError as exc:  # the message never repeats the URL
        fail("watch.url" if any((w := watched(c)) is not None and w.url for c in loaded) else url_origin(), str(exc))
    try:
        server.start()
    except OSError as exc:
        fail("--listen", f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for c, groups in queues:
        watch = watched(c)
        what = f"{watch.system}'s queues as group" if watch is not None else "queue"
        shards = f", {len(groups)} shards" if len(groups) > 1 else ""
        log.info("serving %s for %s %s (%d classes%s), scrape budget %gs", server.url, what, m.group_of(c),
                 len(c.classes), shards, serving(c).scrape_timeout)
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    while not stopping.wait(0.5):
        pass
    server.stop()
    log.info("stopped")
