"""Helpers of the exporter tests: a running exporter, scraping it, reading samples back."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter import metrics as m
from exporter.collector import scrape_client
from exporter.server import ExporterServer, exporter_server
from fairness_core import Config, Queue
from fairness_stack.servers import find_binary, free_port, stop_process

PROMETHEUS_HINT = "install it with: apt-get install -y prometheus (promtool comes with it)"
# The job_name the test Prometheus scrapes the exporters under.
JOB = "fairness"

Labels = tuple[tuple[str, str], ...]


@contextmanager
def running_exporter(config: Config) -> Iterator[ExporterServer]:
    """The sidecar for ``config`` on a free loopback port, with its own budget-fitted client."""
    with exporter_server(config, Queue(config, scrape_client(config)).groups()[0], "127.0.0.1", 0) as server:
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

    @property
    def answered(self) -> float:
        """Wall-clock time (s) the answer came: no reading in it is from later, so an age it
        reports is at most this time less the enqueue time."""
        return self.at + self.seconds / 2

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def series(self, name: str) -> dict[Labels, float]:
        """Every series of one sample name: labels -> value."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def parse_grouped(text: str) -> dict[tuple[str, Labels], float]:
    """Every sample, keyed by its name and all its labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def parse(text: str) -> dict[tuple[str, Labels], float]:
    """The samples of one queue group's exporter, keyed without the ``group`` and ``shard`` labels,
    which every sample must carry, with one value each: a scrape of several groups or shards needs
    :func:`parse_grouped`."""
    out: dict[tuple[str, Labels], float] = {}
    places = set()
    for (name, labels), value in parse_grouped(text).items():
        where = dict(labels)
        assert m.GROUP in where and m.SHARD in where, f"{name}{where} lacks a {m.GROUP} or {m.SHARD} label"
        places.add((where[m.GROUP], where[m.SHARD]))
        out[(name, tuple(kv for kv in labels if kv[0] not in (m.GROUP, m.SHARD)))] = value
    assert len(places) <= 1, f"a scrape of several groups or shards ({sorted(places)}): read it with parse_grouped"
    return out


def scrape(url: str, *, context: ssl.SSLContext | None = None) -> Scrape:
    wall, started = time.time(), time.monotonic()
    text = fetch(url, context=context)
    seconds = time.monotonic() - started
    return Scrape(text, parse(text), seconds, wall + seconds / 2)


def scrape_if_serving(url: str, *, context: ssl.SSLContext | None = None) -> Scrape | None:
    """A scrape, or None while nothing answers at ``url`` yet (an exporter process starting up)."""
    try:
        return scrape(url, context=context)
    except OSError:
        return None


def redis_up(url: str, *, context: ssl.SSLContext | None = None) -> float | None:
    """``fairness_exporter_redis_up`` of a scrape, or None while nothing answers."""
    got = scrape_if_serving(url, context=context)
    return None if got is None else got.value(m.EXPORTER_REDIS_UP.name)


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on a scrape: exit 0 and no output when nothing is wrong."""
    promtool = find_binary("promtool", PROMETHEUS_HINT)
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


class Prometheus:
    """A real ``prometheus`` scraping ``targets`` every second, on a free loopback port, with its
    data in ``directory``, evaluating ``rule_files`` every second; :meth:`query` is the HTTP API's
    instant query."""

    def __init__(self, targets: list[str], directory: Path, rule_files: tuple[Path, ...] = ()) -> None:
        self.binary = find_binary("prometheus", PROMETHEUS_HINT)
        self.targets = targets
        self.rule_files = rule_files
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Prometheus:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": self.targets}]}],
            "rule_files": [str(path) for path in self.rule_files],
        }
        config_file = self.directory / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={config_file}", f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()}")
            try:
                if "Ready" in fetch(f"{self.url}/-/ready", timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus did not become ready within {timeout:.0f}s")

    def api(self, path: str, params: dict[str, str]) -> Any:
        """One HTTP API call's ``data``, asserting it succeeded."""
        reply = json.loads(fetch(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: (labels, value) per series."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        data = self.api("query", params)
        assert data["resultType"] == "vector", data
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def stop(self) -> None:
        stop_process(self.process, timeout=20)
        self.process = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
