"""fairctl stack and fairctl drill on the real parts: Redis, workers, two exporters, Prometheus,
Alertmanager and the webhook receiver, started and stopped as a user would."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from exporter.config import serving
from fairctl.stack_command import moved
from fairness_core import load_config, redis_client
from fairness_core.config_store import differences
from fairness_sim.drill import drill_config
from fairness_sim.loadgen import Replay
from fairness_stack import configs as sc
from fairness_stack import supervisor
from fairness_stack.configs import WEBHOOK_PATH
from fairness_stack.servers import RedisServer, redis_answers
from fairness_stack.servers import free_port
from fairness_stack.supervisor import STATE_FILE, Service, Stack, _alive, _port_free
from fairness_stack.webhook import deliveries

from .conftest import EXAMPLE_CONFIG
from .support import run_fairctl


def _services(directory: Path) -> list[dict[str, object]]:
    return json.loads((directory / STATE_FILE).read_text())["services"]


def test_a_drills_configs_are_the_ones_its_stack_applies() -> None:
    """A stack scraping every second caps exporter.scrape_timeout at 800ms; a drill's configs are
    made so already, so its own queue follows the applied config with no difference to warn of."""
    config = load_config(EXAMPLE_CONFIG)
    assert serving(config).scrape_timeout == 2.0
    drilled = drill_config(config, Replay(speed=120, volume=115, until=1200), 1.0, "drill-weighted-fair")
    assert serving(drilled).scrape_timeout == 0.8
    assert differences(drilled, supervisor.scraped_in_time(drilled, 1.0)) == []


def free_base() -> int:
    """A port with the five after it free too, for --port-base."""
    while True:
        base = free_port()
        if all(_port_free(port) for port in range(base, base + len(sc.listening_ports()))):
            return base


def test_the_stack_serves_on_ports_from_a_base_and_names_any_usual_one_it_could_not_take(tmp_path: Path) -> None:
    assert sc.listening_ports(20000) == {"redis": 20000, "exporter": 20001, "exporter-2": 20002, "webhook": 20003,
                                         "prometheus": 20004, "alertmanager": 20005}
    assert sc.listening_ports()["redis"] == 6379 and sc.listening_ports()["prometheus"] == 9090
    services = [Service("redis", 1, [], "", port=41000), Service("prometheus", 2, [], "", port=9090)]
    assert moved(services, sc.listening_ports()) == [
        "redis: on port 41000, not 6379 (in use; choose the ports with --port-base)"]
    base = free_base()
    with socket.create_server(("127.0.0.1", base + 4)):  # the base's fifth port, Prometheus's: nothing starts
        up = run_fairctl("stack", "up", "--dir", tmp_path, "--config", EXAMPLE_CONFIG, "--port-base", base)
    assert up.returncode == 1 and "--port-base" in up.stderr and f"{base + 4} (prometheus) taken" in up.stderr
    assert not (tmp_path / STATE_FILE).exists()


@pytest.mark.slow
def test_stack_up_on_a_port_base_serves_every_service_there(tmp_path: Path) -> None:
    base = free_base()
    up = run_fairctl("stack", "up", "--dir", tmp_path, "--config", EXAMPLE_CONFIG, "--slots", "1", "--port-base", base)
    try:
        assert up.returncode == 0, up.stderr
        ports = {s["name"]: s["port"] for s in _services(tmp_path) if s["port"] is not None}
        assert ports == sc.listening_ports(base)
        assert f"redis: redis://127.0.0.1:{base}/0" in up.stdout and "not 6379" not in up.stdout
        assert redis_answers(base)
    finally:
        assert run_fairctl("stack", "down", "--dir", tmp_path).returncode == 0


@pytest.mark.slow
def test_stack_up_moves_to_free_ports_when_a_usual_one_is_taken_before_it_binds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stacks starting at once both see 6379 free; the one whose Redis loses the bind must
    neither take the other stack's Redis (answering on that port) for its own nor fail: it starts
    again on free ports. Here the usual Redis port is another Redis's, and the check that the
    port is free is made to miss it, as the race does."""
    with RedisServer() as other:
        monkeypatch.setattr(sc, "PORTS", {**sc.PORTS, sc.REDIS: other.port})
        monkeypatch.setattr(supervisor, "_port_free", lambda port: port == other.port or _port_free(port))
        stack = Stack(tmp_path)
        state = stack.up(load_config(EXAMPLE_CONFIG), pools=[])
        try:
            redis = next(s for s in state.services if s.name == sc.REDIS)
            assert redis.port != other.port and redis_answers(redis.port)
            assert state.redis_url == f"redis://127.0.0.1:{redis.port}/0"
            assert f"127.0.0.1:{redis.port}" in (tmp_path / "fairness.yaml").read_text()
            assert "Address already in use" in (tmp_path / "logs" / "redis.log").read_text()
            assert redis_client(other.url).dbsize() == 0  # the config went to the stack's own Redis
        finally:
            stack.down(state)


@pytest.mark.slow
def test_stack_up_serves_every_part_and_down_leaves_nothing(tmp_path: Path) -> None:
    up = run_fairctl("stack", "up", "--dir", str(tmp_path), "--config", str(EXAMPLE_CONFIG), "--slots", "2")
    assert up.returncode == 0, up.stderr
    assert "config v1 applied (the first of queue group fq)" in up.stdout
    services = _services(tmp_path)
    try:
        names = {s["name"] for s in services}
        assert {"redis", "exporter", "exporter-2", "webhook", "prometheus", "alertmanager", "workers/workers/0"} <= names
        assert run_fairctl("stack", "status", "--dir", str(tmp_path)).returncode == 0
        # A second `up` on the same directory refuses rather than starting a twin.
        again = run_fairctl("stack", "up", "--dir", str(tmp_path), "--config", str(EXAMPLE_CONFIG))
        assert again.returncode == 1 and "already running" in again.stderr
        by_name = {s["name"]: s for s in services}
        # The webhook receiver logs what Alertmanager would POST.
        note = {"status": "firing", "alerts": [{"status": "firing", "labels": {"alertname": "QueueStarving", "queue": "q"},
                                                "startsAt": "2026-11-29T10:00:00.5Z"}]}
        request = urllib.request.Request(f"{by_name['webhook']['url']}{WEBHOOK_PATH}", data=json.dumps(note).encode(),
                                         headers={"Content-Type": "application/json"})
        sent = time.time()
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        (delivery,) = deliveries(tmp_path / "webhook.jsonl")
        assert (delivery.alert, delivery.labels) == ("QueueStarving", {"queue": "q"})
        assert delivery.received_at is not None and sent <= delivery.received_at <= time.time()  # the page's arrival
        rules = (tmp_path / "fairctl-rules.yml").read_text()
        assert "QueueStarving" in rules and "1s" in (tmp_path / "prometheus.yml").read_text()
        # A job left queued in jobs:low for the next run (its Redis keeps its data under --dir).
        stack_config = tmp_path / "fairness.yaml"
        assert run_fairctl("pause", "jobs:low", "--config", stack_config).returncode == 0
        assert run_fairctl("enqueue", "newsletter", "--tenant", "acme", "--config", stack_config).returncode == 0
    finally:
        down = run_fairctl("stack", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert f"stopped {len(services)} process(es)" in down.stdout
    assert [s["name"] for s in services if _alive(int(s["pid"]))] == []
    assert [s["port"] for s in services if s["port"] is not None and not _port_free(int(s["port"]))] == []
    status = run_fairctl("stack", "status", "--dir", str(tmp_path))
    assert status.returncode == 1 and "no service" in status.stdout

    # Re-running `up` with an edited config applies it, since its processes follow what Redis has
    # applied, not their file; one that would strand the queued jobs:low job is refused.
    example = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    edits = tmp_path / "edits"
    edits.mkdir()
    no_low = {**example, "classes": [c for c in example["classes"] if c["name"] != "jobs:low"],
              "classification": [r for r in example["classification"] if r["class"] != "jobs:low"]}
    heavier = {**example, "classes": [{**example["classes"][0], "weight": 60}, *example["classes"][1:]]}
    for name, data in (("no-low.yaml", no_low), ("heavier.yaml", heavier)):
        (edits / name).write_text(yaml.safe_dump(data))
    refused = run_fairctl("stack", "up", "--dir", str(tmp_path), "--config", str(edits / "no-low.yaml"), "--slots", "2")
    assert refused.returncode == 1 and "--move jobs:low=CLASS" in refused.stderr, refused.stderr
    assert [s["name"] for s in _services(tmp_path) if _alive(int(s["pid"]))] == []
    applied = run_fairctl("stack", "up", "--dir", str(tmp_path), "--config", str(edits / "heavier.yaml"), "--slots", "2")
    try:
        assert applied.returncode == 0, applied.stderr
        assert "config v2 applied\n  classes.jobs:high.weight: 70 -> 60\n" in applied.stdout
    finally:
        assert run_fairctl("stack", "down", "--dir", str(tmp_path)).returncode == 0


@pytest.mark.parametrize(("args", "argument", "words"), [
    (["--until", "3h"], "--until", "the scenario lasts 2h"),
    (["--until", "soon"], "--until", "duration"),
    (["--speed", "1000"], "--speed", "at most 150"),
    (["--policy", "lifo"], "--policy", "unknown policy"),
    (["--redis-url", "redis://127.0.0.1:1/0"], "--prometheus-url", "go together"),
    (["scenarios/none.yaml"], "SCENARIO", "none.yaml"),
])
def test_drill_rejects_bad_arguments_naming_them(args: list[str], argument: str, words: str) -> None:
    run = run_fairctl("drill", *args, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"fairctl: error: {argument}: ") and words in run.stderr
    assert "Traceback" not in run.stderr

