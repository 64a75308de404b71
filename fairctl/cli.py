"""The ``fairctl`` command line. Each command (or group of them) lives in its own module, named in
:data:`COMMANDS` and imported only when that command runs or shows its help: ``fairctl --help``
imports none of them, ``fairctl worker`` only the worker's (not the simulator's charts, the
dashboards or the runbooks). A new command is one line of the table."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from click.exceptions import Abort, ClickException, NoArgsIsHelpError, UsageError

from . import completion, interrupts
from .commands import BAD_ARGUMENT, LazyGroup, command_path

# name: ("module:attribute" of the command, the one line `fairctl --help` shows for it: the first
# sentence of its help, which tests/test_cli_imports.py checks it against)
COMMANDS: dict[str, tuple[str, str]] = {
    "enqueue": ("fairctl.queue_commands:enqueue",
                "Enqueue jobs; prints their ids and the class and reason the classification rules chose."),
    "reshard": ("fairctl.queue_commands:reshard",
                "Change how many shards a sharded queue group (redis.shards) spreads over, under load."),
    "pause": ("fairctl.queue_commands:pause",
              "Stop workers from taking jobs of a class; jobs still queue up (fleet-wide, takes effect at once)."),
    "resume": ("fairctl.queue_commands:resume", "Let workers take jobs of a paused class again."),
    "status": ("fairctl.status_command:status", "Show each class's backlog and the share of work it really gets."),
    "worker": ("fairctl.worker_command:worker", "Work jobs until SIGTERM or SIGINT."),
    "exporter": ("fairctl.exporter_command:exporter",
                 "Serve the queue metrics for Prometheus on /metrics until SIGTERM or SIGINT."),
    "demo": ("fairctl.demo:demo", "Replay a marketing storm in miniature; needs no setup."),
    "simulate": ("fairctl.simulate_command:simulate",
                 "Replay a scenario under each scheduling policy and compare waits, fairness and alerts."),
    "drill": ("fairctl.drill_command:drill",
              "Replay a scenario live and check the alerts that fire, against the scenario's expect."),
    "loadgen": ("fairctl.drill_command:loadgen",
                "Enqueue a scenario's arrivals into Redis in real time, for workers of your own to consume."),
    "generate": ("fairctl.generate_command:generate", (
        "Generate the Prometheus rules, their promtool unit tests, the runbooks and the dashboards from the config.")),
    "weights": ("fairctl.check_commands:weights",
                "Print each class's share of the work and of the fleet's time, and what its load needs."),
    "check": ("fairctl.check_commands:check", (
        "Validate the config, lint the weights and the alerts' links, and run promtool on the rules it generates.")),
    "stack": ("fairctl.stack_command:group", (
        "Run Redis, workers, two exporters, Prometheus, Alertmanager and a webhook receiver natively, on loopback.")),
    "dead": ("fairctl.dead_commands:group", "List, inspect, requeue and drop dead-lettered jobs."),
    "explain": ("fairctl.explain_command:explain",
                "Say where a job is and why it has not run yet, or where a tenant stands."),
    "config": ("fairctl.config_commands:group", (
        "Show, compare and apply the config a queue group runs: it lives in the group's Redis, and every process "
        "follows the applied one without a restart.")),
    "bench": ("fairctl.bench_command:bench", (
        "Measure the scheduler, exporter and simulator against raw LPOP and against RQ and BullMQ; prints the "
        "report, or writes it with --write (BENCHMARKS.md) or --out FILE (see `fairctl bench --help`).")),
}


class OneLineErrors(LazyGroup):
    """Arguments the command line itself cannot parse (an unknown option, a value out of range, a
    missing argument) fail like every other bad argument: one line naming it, exit code 2, no
    usage box."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            outcome = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # a bare group: its help is the answer
            exc.show()
            sys.exit(exc.exit_code)
        except UsageError as exc:
            where = command_path(exc.ctx)
            param = getattr(exc, "param", None)
            if param is None:
                argument = where
            elif param.param_type_name == "argument" or not param.opts:
                argument = (getattr(param, "metavar", None) or str(param.name).upper()).strip("[]")
            else:
                argument = param.opts[0]
            message = exc.message.replace("\n", " ") or exc.format_message()
            click.echo(f"fairctl: error: {argument}: {message} (see: {where} --help)", err=True)
            sys.exit(BAD_ARGUMENT)
        except ClickException as exc:  # a missing extra (fairctl/extras.py) among them
            exc.show()
            sys.exit(exc.exit_code)
        except Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(outcome if isinstance(outcome, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        """Every command ends alike on Ctrl-C or SIGTERM: one line, exit 130 or 143 (interrupts.py)."""
        with interrupts.handled():
            return super().invoke(ctx)


@click.group("fairctl", cls=OneLineErrors, lazy=COMMANDS, no_args_is_help=True,
             context_settings={"show_default": True})
@completion.options
def app() -> None:
    """Fair Redis job queues: priority classes with weighted shares, fair queuing across tenants,
    and the tools to watch them."""


def main() -> None:
    app.main()
