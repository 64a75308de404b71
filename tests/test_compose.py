"""compose/: what can be proved without a Docker engine. Every file the stack mounts exists, the
configs it mounts pass the real promtool, amtool and Alertmanager, laid out as the containers see
them, and its services, ports and commands are the native stack's and fairctl's own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import click
import pytest
import yaml

from alerts.config import alert_settings
from dashboards.layout import CONTAINER_DASHBOARDS
from dashboards.layout import GENERATED_DIR as DASHBOARDS_DIR
from dashboards.output import PROMETHEUS_URL
from fairctl.cli import app
from fairness_stack import configs as s
from fairness_stack.compose import (
    ALERTMANAGER_FILE,
    GENERATED_DIR,
    PROMETHEUS_FILE,
    address,
)
from fairness_stack.containers import CONFIG_FILE, OPERATOR, RUNTIME, SCRAPE_INTERVAL_S, image
from fairness_stack.servers import find_binary, free_port, stop_process

from .conftest import ROOT
from .support import wait_for

COMPOSE_DIR = ROOT / "compose"
COMPOSE: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
FAIRCTL_SERVICES = sorted(name for name, service in SERVICES.items() if "build" in service)
PROMETHEUS_IN_CONTAINER = PurePosixPath("/etc/prometheus/prometheus.yml")
ALERTMANAGER_IN_CONTAINER = PurePosixPath("/etc/alertmanager/alertmanager.yml")
DEBIAN_HINT = "install the Debian packages prometheus and prometheus-alertmanager (bash scripts/setup.sh)"


def bind_mounts(service: str) -> list[tuple[Path, PurePosixPath]]:
    """(host path, container path) of the service's bind mounts; named volumes are left out."""
    out = []
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            out.append(((COMPOSE_DIR / source).resolve(), PurePosixPath(target)))
    return out


def container_files(service: str, root: Path) -> Path:
    """The service's bind mounts copied under ``root`` at their container paths (outer mounts
    first, as Docker stacks them), so configs resolve their relative paths as in the container."""
    for source, target in sorted(bind_mounts(service), key=lambda mount: len(mount[1].parts)):
        dest = root / target.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, dest)
    return root


def published_ports(service: str) -> list[int]:
    """Container ports the service publishes, each required to be the same port on loopback."""
    out = []
    for spec in SERVICES[service].get("ports", []):
        host, published, target = spec.split(":")
        assert host == "127.0.0.1" and published == target, f"{service}: {spec} is not HOST_LOOPBACK:PORT:PORT"
        out.append(int(target))
    return out


def command_of(service: str) -> list[str]:
    return [str(word) for word in SERVICES[service]["command"]]


def option(service: str, name: str) -> str:
    words = command_of(service)
    return words[words.index(name) + 1]


# ------------------------------------------------------------------ the files it mounts and builds

@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_bind_mount_exists_in_the_repository(service: str) -> None:
    for source, target in bind_mounts(service):
        assert source.exists(), f"{service} mounts {source} at {target}, which does not exist"


def test_the_fairctl_services_build_the_runtime_image() -> None:
    """Every service runs the runtime image, the base install; the operator image adds every extra
    for the tools that need one (generate, check, simulate --report, loadgen into Celery ...)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = {line.split()[-1]: line for line in dockerfile.splitlines() if line.startswith("FROM ")}
    assert stages == {RUNTIME: f"FROM python:3.11-slim AS {RUNTIME}", OPERATOR: f"FROM {RUNTIME} AS {OPERATOR}"}
    runtime_part, operator_part = dockerfile.split(stages[OPERATOR])
    assert "RUN pip install . " in runtime_part and "[" not in runtime_part.split("RUN pip install")[1].split("\n")[0]
    assert "RUN pip install '.[all]'" in operator_part
    assert 'ENTRYPOINT ["fairctl"]' in runtime_part
    for part in (runtime_part, operator_part):
        users = [line.split()[1] for line in part.splitlines() if line.startswith("USER ")]
        assert users and users[-1].isdigit() and users[-1] != "0", "each image runs as a numeric non-root user"
    for name in FAIRCTL_SERVICES:
        build = SERVICES[name]["build"]
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert context == ROOT and (context / build["dockerfile"]).is_file()
        assert build["target"] == RUNTIME and SERVICES[name]["image"] == image(RUNTIME), name


def test_every_image_is_pinned_to_a_version() -> None:
    for name, service in SERVICES.items():
        tag = service["image"].rpartition(":")[2]
        assert tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {service['image']} is not pinned"


def test_fairctl_services_read_the_mounted_config() -> None:
    for name in FAIRCTL_SERVICES:
        if "--config" in command_of(name):
            assert PurePosixPath(option(name, "--config")) == CONFIG_FILE
            assert ((ROOT / "fairness.yaml").resolve(), CONFIG_FILE) in bind_mounts(name)


# ------------------------------------------------------------------ the same stack as `fairctl stack`

def test_services_and_ports_are_the_native_stacks() -> None:
    expected = {**s.PORTS, **s.COMPOSE_ONLY}
    assert set(SERVICES) == set(expected)
    for name, port in expected.items():
        assert published_ports(name) == ([port] if port is not None else []), name


def test_fairctl_servers_listen_on_their_services_port() -> None:
    for name in FAIRCTL_SERVICES:
        if "--listen" in command_of(name):
            assert option(name, "--listen") == f"0.0.0.0:{s.PORTS[name]}", name


def test_redis_keeps_an_append_only_file_and_everything_uses_it() -> None:
    assert "--appendonly" in command_of(s.REDIS) and option(s.REDIS, "--appendonly") == "yes"
    redis_url = f"redis://{address(s.REDIS)}/0"
    for name in FAIRCTL_SERVICES:
        if "--redis-url" in command_of(name):
            assert option(name, "--redis-url") == redis_url, name


def _subcommand(words: list[str]) -> tuple[Any, list[str]]:
    """The fairctl command the words name (through command groups) and the words after it."""
    command: Any = app
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        assert words[0] in command.list_commands(click.Context(command)), f"fairctl has no command {words[0]!r}"
        command, words = command.get_command(click.Context(command), words[0]), words[1:]
    return command, words


@pytest.mark.parametrize("service", FAIRCTL_SERVICES)
def test_commands_are_real_fairctl_commands_and_options(service: str) -> None:
    command, rest = _subcommand(command_of(service))
    assert getattr(command, "commands", None) is None, f"{service}: {command_of(service)} names a group"
    known = {opt for param in command.params for opt in param.opts}
    for word in rest:
        if word.startswith("--"):
            assert word in known, f"{service}: fairctl {command.name} has no option {word}"


# ------------------------------------------------------------------ the configs, by the real binaries

def test_prometheus_config_and_its_rules_pass_promtool(tmp_path: Path) -> None:
    root = container_files(s.PROMETHEUS, tmp_path)
    config = root / PROMETHEUS_IN_CONTAINER.relative_to("/")
    assert config.read_text() == (ROOT / GENERATED_DIR / PROMETHEUS_FILE).read_text()
    result = subprocess.run([find_binary("promtool", DEBIAN_HINT), "check", "config", "--lint-fatal", str(config)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = yaml.safe_load((ROOT / "alerts/generated" / s.RULES_FILE).read_text())
    assert "SUCCESS: 1 rule files found" in result.stdout
    assert f"SUCCESS: {sum(len(g['rules']) for g in rules['groups'])} rules found" in result.stdout


def test_prometheus_scrapes_both_exporters_and_alerts_the_alertmanager(example_config: Any) -> None:
    config = yaml.safe_load((ROOT / GENERATED_DIR / PROMETHEUS_FILE).read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == alert_settings(example_config).exporter_job
    assert job["static_configs"] == [{"targets": [address(e) for e in s.EXPORTERS]}]
    assert config["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": [address(s.ALERTMANAGER)]}]}]
    assert config["global"]["scrape_interval"] == f"{SCRAPE_INTERVAL_S:g}s"


def test_alertmanager_config_passes_amtool_and_sends_to_the_webhook(tmp_path: Path) -> None:
    config = container_files(s.ALERTMANAGER, tmp_path) / ALERTMANAGER_IN_CONTAINER.relative_to("/")
    assert config.read_text() == (ROOT / GENERATED_DIR / ALERTMANAGER_FILE).read_text()
    result = subprocess.run([find_binary("amtool", DEBIAN_HINT), "check-config", str(config)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    (receiver,) = yaml.safe_load(config.read_text())["receivers"]
    assert receiver["webhook_configs"][0]["url"] == f"http://{address(s.WEBHOOK)}{s.WEBHOOK_PATH}"


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """The real Alertmanager serving the compose config on a free loopback port; its base URL."""
    config = container_files(s.ALERTMANAGER, tmp_path / "root") / ALERTMANAGER_IN_CONTAINER.relative_to("/")
    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [find_binary("prometheus-alertmanager", DEBIAN_HINT), f"--config.file={config}",
             f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(process)
            log.seek(0)
            print(log.read().decode(errors="replace"))


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_alertmanager_loads_the_config(alertmanager: str) -> None:
    wait_for(lambda: _ready(alertmanager), 30, "Alertmanager to load the compose config and be ready")
    with urllib.request.urlopen(f"{alertmanager}/api/v2/status", timeout=5) as response:
        status = yaml.safe_load(response.read())
    assert f"http://{address(s.WEBHOOK)}{s.WEBHOOK_PATH}" in status["config"]["original"]


# ------------------------------------------------------------------ Grafana

def test_grafana_is_provisioned_with_the_datasource_and_every_dashboard(tmp_path: Path) -> None:
    root = container_files(s.GRAFANA, tmp_path)
    provisioning = root / "etc/grafana/provisioning"
    (datasource,) = yaml.safe_load((provisioning / "datasources/fairctl.yml").read_text())["datasources"]
    assert datasource["url"] == PROMETHEUS_URL == f"http://{address(s.PROMETHEUS)}"
    (provider,) = yaml.safe_load((provisioning / "dashboards/fairctl.yml").read_text())["providers"]
    served = root / PurePosixPath(provider["options"]["path"]).relative_to("/")
    assert provider["options"]["path"] == CONTAINER_DASHBOARDS
    generated = sorted(p.name for p in (ROOT / DASHBOARDS_DIR).glob("*.json"))
    assert generated and sorted(p.name for p in served.glob("*.json")) == generated
    home = SERVICES[s.GRAFANA]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (root / PurePosixPath(home).relative_to("/")).is_file()
