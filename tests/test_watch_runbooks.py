"""What ``fairctl generate`` writes for a config watching another job system speaks that system's
terms: no alert, runbook or dashboard text tells the responder to run a fairctl command that needs
fairctl's own queues (a worker there would take nothing, a pause would stop nothing), and every
PromQL they show reads only series the system supplies, or the recordings the generated rules
define from them. Checked on what each system supplies today, and with the series its reader may
add (dead letters, waits, pauses, Redis memory, quiet tenants' age), so that the runbooks of the
alerts those bring are in the system's terms too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.output import ALERTS
from alerts.supplied import needs, served_metrics
from dashboards.output import DASHBOARDS_OUTPUT
from exporter import metrics as m
from exporter.sources import reader_of, systems
from fairctl.cli import COMMANDS
from fairness_core import Config
from fairness_core.generated import plan

from .conftest import make_config
from .test_watch_generate import watching

# The fairctl commands that take a watch config (the others open fairctl's own queues and refuse it).
WATCH_COMMANDS = frozenset({"exporter", "generate", "check", "weights", "loadgen"})
# The series a watched system's reader may come to supply beside its own.
MAY_SUPPLY = frozenset(spec.name for spec in (
    m.DEAD_LETTERS, m.JOBS_DEAD_LETTERED, m.JOBS_WAIT, m.QUEUE_PAUSED, m.REDIS_MEMORY_USED, m.REDIS_MEMORY_MAX,
    m.REDIS_MEMORY_POLICY, m.REDIS_EVICTED_KEYS, m.QUEUE_QUIET_OLDEST_AGE, m.QUEUE_ACTIVE_TENANTS,
    m.TENANT_OLDEST_AGE))
PROMQL = re.compile(r"```promql\n(.*?)```", re.DOTALL)
FAIRCTL_COMMAND = re.compile(r"\bfairctl ([a-z][a-z-]*)")
RECORDING = re.compile(r"\bfairctl:[A-Za-z0-9_:]+")
# What only fairctl's own queues have: leases, and the queues themselves.
OWN_QUEUES = re.compile(r"fairctl queues|\blease", re.IGNORECASE)


@pytest.fixture(params=list(systems()))
def system(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["today", "with more series"])
def more(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, system: str) -> bool:
    """Whether ``system``'s reader supplies the series it may add, beside what it does today."""
    if request.param:
        reader = reader_of(system)
        monkeypatch.setattr(reader, "supplies", reader.supplies | MAY_SUPPLY)
    return bool(request.param)


@pytest.fixture
def config(more: bool, system: str) -> Config:
    return watching(system)


def generated(config: Config) -> dict[Path, str]:
    """The rules, runbooks and dashboards ``fairctl generate`` writes for ``config``."""
    return plan(config, Path(), (ALERTS, DASHBOARDS_OUTPUT))


def texts(files: Mapping[Path, str]) -> Iterator[tuple[str, str]]:
    """Every runbook and runbook panel, as (where, markdown)."""
    for path, text in files.items():
        if path.suffix == ".md":
            yield str(path), text
        elif path.suffix == ".json":
            for panel in json.loads(text).get("panels", ()):
                if panel.get("type") == "text":
                    yield f"{path}: {panel['title']}", panel["options"]["content"]


def labels(files: Mapping[Path, str]) -> Iterator[tuple[str, str]]:
    """Every dashboard's description and every panel's (and row's) title and description."""
    for path, text in files.items():
        if path.suffix == ".json" and path.parent.name == "generated":
            board = json.loads(text)
            yield str(path), board.get("description", "")
            for panel in board.get("panels", ()):
                yield f"{path}: {panel.get('title', '')}", f"{panel.get('title', '')}\n{panel.get('description', '')}"


def dashboard_exprs(files: Mapping[Path, str]) -> Iterator[tuple[str, str]]:
    """Every PromQL of the dashboards: panel targets, annotations and variable queries."""
    def walk(data: Any, where: str) -> Iterator[tuple[str, str]]:
        if isinstance(data, dict):
            for key, value in data.items():
                if key in ("expr", "query") and isinstance(value, str):
                    yield where, value
                else:
                    yield from walk(value, f"{where}: {data.get('title', '')}")
        elif isinstance(data, list):
            for value in data:
                yield from walk(value, where)
    for path, text in files.items():
        if path.suffix == ".json" and path.parent.name == "generated":
            yield from walk(json.loads(text), str(path))


def recordings(files: Mapping[Path, str]) -> dict[str, str]:
    """The recording rules the generated rules file defines, name -> expression."""
    rules = yaml.safe_load(files[Path("alerts/generated/fairctl-rules.yml")])
    return {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def test_no_runbook_runs_a_fairctl_command_that_refuses_a_watch_config(config: Config) -> None:
    """Every line of every runbook and text panel, the alerts' summaries and descriptions they
    quote (from alerts/rules.py) included; nor does it speak of leases or fairctl's queues."""
    files = generated(config)
    found = [(where, line.strip()) for where, text in texts(files) for line in text.splitlines()
             for command in FAIRCTL_COMMAND.findall(line) if command in COMMANDS and command not in WATCH_COMMANDS]
    assert not found, found[:10]
    own = [(where, line.strip()) for where, text in texts(files) for line in text.splitlines() if OWN_QUEUES.search(line)]
    assert not own, own[:10]


def test_no_panel_speaks_of_fairctls_own_queues(config: Config) -> None:
    """The dashboards' descriptions and their panels' titles and descriptions name no fairctl command
    that refuses a watch config, nor leases or fairctl's queues, which a watched system has none of."""
    found = [(where, text) for where, text in labels(generated(config))
             if OWN_QUEUES.search(text) or set(FAIRCTL_COMMAND.findall(text)) & set(COMMANDS) - WATCH_COMMANDS]
    assert not found, found[:10]


def test_every_promql_shown_reads_only_what_the_system_supplies(config: Config) -> None:
    files = generated(config)
    defined, served = recordings(files), served_metrics(config)
    assert served is not None
    shown = [*((where, x) for where, text in texts(files) for x in PROMQL.findall(text)), *dashboard_exprs(files)]
    assert any(where.endswith("QueueStarving.md") for where, _ in shown)
    unfed = [(where, x) for where, x in shown
             if not needs(x, defined) <= served or not set(RECORDING.findall(x)) <= set(defined)]
    assert not unfed, unfed[:5]


def test_fairctls_own_runbooks_keep_their_commands() -> None:
    """The watch wording is for watch configs only: fairctl's own runbooks still pause with fairctl,
    and its dashboards still speak of its queues, leases and pauses."""
    files = generated(make_config())
    starving = files[Path("alerts/generated/runbooks/QueueStarving.md")]
    assert "fairctl pause" in starving and "fairctl worker --classes" in starving
    described = [text for _, text in labels(files)]
    assert any(OWN_QUEUES.search(text) for text in described) and any("fairctl pause" in text for text in described)
