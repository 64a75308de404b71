"""The stack's Alertmanager receiver: every webhook notification appended to a JSON-lines file.

What Alertmanager delivered is the last link of the chain a drill proves (rule → Prometheus →
Alertmanager → a receiver), so the drill reads it back from this file rather than trusting
Prometheus's own view alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .configs import WEBHOOK_PATH

MAX_BODY_BYTES = 4 * 1024 * 1024
RECEIVED_AT = "received_at"


def webhook_server(host: str, port: int, log_file: Path) -> ThreadingHTTPServer:
    """A server appending each POST to ``WEBHOOK_PATH`` as one line of ``log_file``, with the time
    it came in as ``received_at`` (epoch s: when the page reached its receiver); GET / answers
    ``ok`` (the readiness check)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(200 if self.path == "/" else 404, b"ok\n" if self.path == "/" else b"not found\n")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != WEBHOOK_PATH or not 0 < length <= MAX_BODY_BYTES:
                self._answer(404 if self.path != WEBHOOK_PATH else 413, b"rejected\n")
                return
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                self._answer(400, b"not JSON\n")
                return
            if not isinstance(body, dict):
                self._answer(400, b"not a notification\n")
                return
            body[RECEIVED_AT] = time.time()
            with lock, log_file.open("a", encoding="utf-8") as out:
                out.write(json.dumps(body, separators=(",", ":")) + "\n")
            self._answer(200, b"ok\n")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (overrides the base)
            pass  # one line per notification is already in the log file

    return ThreadingHTTPServer((host, port), Handler)


@dataclass(frozen=True)
class Delivery:
    """One alert as Alertmanager delivered it as firing."""

    alert: str
    labels: dict[str, str]
    starts_at: float  # when Prometheus says it started firing (epoch s)
    received_at: float | None  # when the notification reached the receiver (None: a log without it)


def epoch(text: str) -> float:
    """An RFC 3339 time as Prometheus and Alertmanager write it, in epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def deliveries(log_file: Path) -> Iterator[Delivery]:
    """Every firing alert in the notifications logged so far, in delivery order."""
    if not log_file.exists():
        return
    for line in log_file.read_text(encoding="utf-8").splitlines():
        notification = json.loads(line)
        for alert in notification.get("alerts", []):
            if alert.get("status") == "firing":
                labels = dict(alert.get("labels", {}))
                yield Delivery(labels.pop("alertname", "?"), labels, epoch(alert["startsAt"]),
                               notification.get(RECEIVED_AT))
