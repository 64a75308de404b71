"""What each fairctl command imports, run in a fresh interpreter as a user runs it.

``fairctl --help`` lists every command from fairctl/cli.py's table without importing one of them
(nor fairness_core and Redis); the worker and the exporter, the processes a fleet runs, import none
of the operator's tools (the simulator, the charts, the dashboards, the runbooks). Without the
optional modules the install extras bring, those commands still work, and one that needs a missing
module fails with one line naming the extra to install.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from fairctl.cli import COMMANDS
from fairctl.extras import EXTRAS
from fairness_stack.servers import free_port

from .conftest import EXAMPLE_CONFIG

OPTIONAL = tuple(EXTRAS)  # matplotlib, grafanalib, jinja2
TOOLS = (*OPTIONAL, "fairness_sim", "dashboards", "alerts")  # what a worker or an exporter never needs
COMMAND_MODULES = sorted({where.partition(":")[0] for where, _ in COMMANDS.values()})

# Runs the CLI's main with ARGS, the modules BLOCKED unimportable (as if not installed), and
# writes the modules it imported to OUT, however it ends.
RUN = """
import json, sys

blocked, args, out = set(json.loads(sys.argv[1])), json.loads(sys.argv[2]), sys.argv[3]


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
sys.argv = ["fairctl", *args]
try:
    from fairctl.cli import main

    main()
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
"""


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    modules: frozenset[str]

    def imported(self, packages: tuple[str, ...] | list[str]) -> list[str]:
        """Those of ``packages`` (or their submodules) the run imported."""
        return [p for p in packages if any(m == p or m.startswith(f"{p}.") for m in self.modules)]


def fairctl(tmp_path: Path, *args: str, blocked: tuple[str, ...] = ()) -> Run:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(blocked), json.dumps(args), str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    return Run(done.returncode, done.stdout, done.stderr, frozenset(json.loads(out.read_text())))


def test_the_bare_help_lists_every_command_and_imports_none(tmp_path: Path) -> None:
    run = fairctl(tmp_path, "--help")
    assert run.code == 0, run.stderr
    listed = re.findall(r"^  (\S+)\s", run.stdout.partition("Commands:")[2], re.MULTILINE)
    assert listed == list(COMMANDS)
    assert run.imported(COMMAND_MODULES) == []
    assert run.imported(["fairness_core", "redis", "exporter", "fairness_stack", *TOOLS]) == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_tables_short_help_is_the_commands_own(name: str) -> None:
    """The line ``fairctl --help`` shows without importing the command is the one it would show."""
    where, short = COMMANDS[name]
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command)
    assert command.get_short_help_str(limit=1_000) == short


@pytest.mark.parametrize("command", ["worker", "exporter"])
def test_the_worker_and_the_exporter_import_none_of_the_tools(tmp_path: Path, command: str) -> None:
    run = fairctl(tmp_path, command, "--help")
    assert run.code == 0 and f"Usage: fairctl {command} " in run.stdout, run.stderr
    assert run.imported(TOOLS) == []
    assert run.imported(COMMAND_MODULES) == [f"fairctl.{command}_command"]


def test_a_worker_run_imports_none_of_the_tools(tmp_path: Path) -> None:
    """Up to its first call to Redis (down here: exit 2). Loading the config reads the alerts
    section with its parser (alerts/config.py, plain Python): nothing else of the tools."""
    run = fairctl(tmp_path, "worker", "--config", str(EXAMPLE_CONFIG), "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert run.code == 2 and run.stderr.startswith("fairctl: error: --redis-url: "), run.stderr
    tools = {m for m in run.modules if m.partition(".")[0] in TOOLS}
    assert tools == {"alerts", "alerts.config"}, sorted(tools)


@pytest.mark.parametrize("command", ["worker", "exporter", "simulate", "loadgen", "weights", "demo", "drill", "stack"])
def test_commands_that_need_no_extra_work_without_their_modules(tmp_path: Path, command: str) -> None:
    run = fairctl(tmp_path, command, "--help", blocked=OPTIONAL)
    assert run.code == 0 and f"Usage: fairctl {command} " in run.stdout, run.stderr
    assert run.imported(OPTIONAL) == []


def test_simulate_without_a_report_runs_without_the_extras(tmp_path: Path) -> None:
    """Its text needs no chart, and the rules it evaluates with promtool need no runbook (the
    runbooks are what needs jinja2): the storm's alerts are still evaluated."""
    run = fairctl(tmp_path, "simulate", "--duration", "10m", "--policy", "fifo", blocked=OPTIONAL)
    assert run.code == 0, run.stderr
    assert "policy fifo" in run.stdout and "verdict:" in run.stdout
    assert "not evaluated" not in run.stdout and "QueueStarving" in run.stdout
    assert run.imported(OPTIONAL) == []


def test_a_report_without_matplotlib_fails_at_once_naming_the_extra(tmp_path: Path) -> None:
    run = fairctl(tmp_path, "simulate", "--report", "report.html", blocked=OPTIONAL)
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == ("fairctl: error: fairctl simulate needs the 'report' extra (no module matplotlib): "
                          "pip install 'fairctl[report]'\n")
    assert not (tmp_path / "report.html").exists()


@pytest.mark.parametrize(("args", "named"), [
    (["generate"], "fairctl generate"),  # its module renders the runbooks and the dashboards
    (["check"], "fairctl check"),  # after the config and weights checks, it tests the generated files
], ids=["generate", "check"])
def test_a_command_that_needs_a_missing_module_says_which_extra_brings_it(
        tmp_path: Path, args: list[str], named: str) -> None:
    run = fairctl(tmp_path, *args, blocked=OPTIONAL)
    assert run.code == 1, run.stderr
    assert re.fullmatch(rf"(.*\n)?fairctl: error: {named} needs the 'generate' extra \(no module "
                        r"(jinja2|grafanalib|attr)\): pip install 'fairctl\[generate\]'\n", run.stderr, re.S), run.stderr
