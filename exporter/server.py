"""The exporter's HTTP(S) server: ``/metrics`` from a registry, and a small ``/`` page linking to it.

The default port, 29100, sits outside Prometheus's standard exporter range (9100-9999), which its
"Default port allocations" wiki page lists as fully allocated; see docs/exporter.md.
"""

from __future__ import annotations

import html
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector, CollectorRegistry

from fairness_core import Config, QueueGroup

from . import metrics as m
from .collector import make_registry, own_registry
from .groups import Describing, GroupsCollector, QueueCollector
from .sources import watched
from .watch import WatchCollector, watch_client

log = logging.getLogger(__name__)

DEFAULT_PORT = 29100
DEFAULT_HOST = "0.0.0.0"
REQUEST_TIMEOUT_S = 30.0  # a client that stops talking (or never finishes a TLS handshake) frees its thread

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:29100`` for IPv6, ``:29100`` for all interfaces) -> (host, port);
    ValueError saying what is expected."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT such as 0.0.0.0:{DEFAULT_PORT} or [::1]:{DEFAULT_PORT}, got {text!r}")
    return host or DEFAULT_HOST, int(port)


def listen_address(configured: str | None) -> tuple[str, int]:
    """The configured ``exporter.listen``, or all interfaces on the default port."""
    return parse_listen(configured) if configured else (DEFAULT_HOST, DEFAULT_PORT)


def make_app(registry: CollectorRegistry, title: str) -> WSGIApp:
    """``/metrics`` (prometheus-client: text or OpenMetrics, gzip), ``/`` a link page, else 404."""
    metrics = make_wsgi_app(registry)
    index = (f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
             f"<h1>{html.escape(title)}</h1><p><a href=\"metrics\">Metrics</a></p></body></html>\n").encode()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            body: Iterable[bytes] = metrics(environ, start_response)
            return body
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [index]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: metrics are at /metrics\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (Prometheus scrapes every few seconds); idle clients time out."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingWSGIServer):
    """A client that hangs up, times out or speaks plain HTTP to the TLS port costs a debug line,
    not a traceback on stderr (port scanners and health checks do all three)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("client %s: %s", client_address[0], exc)
        else:
            log.exception("serving a request from %s failed", client_address[0])


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context for ``cert``/``key`` (PEM), TLS 1.2 or newer. OSError/SSLError when unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert, keyfile=key)
    return context


class ExporterServer:
    """Serves ``app`` on ``host:port`` from a daemon thread, over TLS when given a context.

    ``port`` 0 picks a free port (tests); :attr:`port` tells which. Binding errors (address in use,
    no such address) surface from :meth:`start` as OSError.
    """

    def __init__(self, app: WSGIApp, host: str, port: int, *, tls: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.host = host
        self.requested_port = port
        self.tls = tls
        self._httpd: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1]) if self._httpd else self.requested_port

    @property
    def url(self) -> str:
        """Where to scrape, e.g. ``https://127.0.0.1:29100/metrics`` (0.0.0.0 shown as 127.0.0.1)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        shown = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{shown}:{self.port}/metrics"

    def start(self) -> ExporterServer:
        family = socket.getaddrinfo(self.host, self.requested_port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        server_class = type("Server", (_Server,), {"address_family": family})
        httpd: ThreadingWSGIServer = make_server(self.host, self.requested_port, self.app, server_class, handler_class=_QuietHandler)
        if self.tls is not None:
            # The handshake happens on the request's own thread, so a slow client cannot stall accept().
            httpd.socket = self.tls.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="exporter-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ExporterServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def exporter_server(config: Config, scheduler: QueueGroup, host: str, port: int, *,
                    tls: ssl.SSLContext | None = None) -> ExporterServer:
    """The whole sidecar for one queue group, not yet started."""
    title = f"fairctl exporter: queue group {config.redis.prefix} ({', '.join(config.class_names)})"
    return ExporterServer(make_app(make_registry(config, scheduler), title), host, port, tls=tls)


def server_for(queues: Sequence[tuple[Config, Sequence[Config]]], host: str, port: int, *,
               tls: ssl.SSLContext | None = None) -> ExporterServer:
    """The sidecar of one or several logical queues, each given with its queue groups (itself, or
    a sharded queue's shards as it starts: ``fairctl.common.load_queues``), not yet started. Each
    group is read with its own client and budget, its series labelled with its queue and its
    shard; a sharded queue's shards follow its layout (:class:`QueueCollector`)."""
    collectors: list[Describing] = []
    for config, groups in queues:
        if watched(config) is None:
            collectors.append(QueueCollector(config, groups))
        else:
            collectors.extend(WatchCollector(group, watch_client(group)) for group in groups)
    collector = collectors[0] if len(collectors) == 1 else GroupsCollector(collectors)
    title = "fairctl exporter: " + "; ".join(
        f"{f'{w.system} queues' if (w := watched(c)) is not None else f'queue {m.group_of(c)}'} "
        f"({', '.join(c.class_names)}{f', {len(groups)} shards' if len(groups) > 1 else ''})" for c, groups in queues)
    return ExporterServer(make_app(own_registry(collector), title), host, port, tls=tls)
