"""Helpers of the exporter tests: a running exporter, scraping it, reading samples back."""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from exporter.collector import scrape_client
from exporter.server import ExporterServer, exporter_server
from fairctl.redis_server import find_binary
from fairness_core import Config, Scheduler

PROMETHEUS_HINT = "install it with: apt-get install -y prometheus (promtool comes with it)"

Labels = tuple[tuple[str, str], ...]


@contextmanager
def running_exporter(config: Config) -> Iterator[ExporterServer]:
    """The sidecar for ``config`` on a free loopback port, with its own budget-fitted client."""
    with exporter_server(config, Scheduler(config, scrape_client(config)), "127.0.0.1", 0) as server:
        yield server


def fetch(url: str, *, context: ssl.SSLContext | None = None, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
        return response.read().decode("utf-8")


@dataclass(frozen=True)
class Scrape:
    """One scrape's text, its samples and how long it took to answer."""

    text: str
    samples: dict[tuple[str, Labels], float]
    seconds: float
    at: float  # wall-clock time (s) half way through the request

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def series(self, name: str) -> dict[Labels, float]:
        """Every series of one sample name: labels -> value."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def parse(text: str) -> dict[tuple[str, Labels], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str, *, context: ssl.SSLContext | None = None) -> Scrape:
    wall, started = time.time(), time.monotonic()
    text = fetch(url, context=context)
    seconds = time.monotonic() - started
    return Scrape(text, parse(text), seconds, wall + seconds / 2)


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on a scrape: exit 0 and no output when nothing is wrong."""
    promtool = find_binary("promtool", PROMETHEUS_HINT)
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
