"""What each fairctl command imports, run in a fresh interpreter as a user runs it.

``fairctl --help`` lists every command from fairctl/cli.py's table without importing one of them
(nor fairness_core and Redis); the worker and the exporter, the processes a fleet runs, import none
of the operator's tools (the simulator, the charts, the dashboards, the runbooks).
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
from fairness_stack.servers import free_port

from .conftest import EXAMPLE_CONFIG

TOOLS = ("matplotlib", "grafanalib", "jinja2", "fairness_sim", "dashboards", "alerts")  # what a worker or an exporter never needs
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
    """Up to its first call to Redis (down here: exit 2)."""
    run = fairctl(tmp_path, "worker", "--config", str(EXAMPLE_CONFIG), "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert run.code == 2 and run.stderr.startswith("fairctl: error: --redis-url: "), run.stderr
    assert run.imported(TOOLS) == []
