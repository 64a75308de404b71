"""The ``fairctl`` command line. Each command (or group of them) lives in its own module and is
added here, so a new command is one import and one line of the list below."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from click.exceptions import Abort, ClickException, NoArgsIsHelpError, UsageError

from . import (
    bench_command,
    check_commands,
    completion,
    config_commands,
    dead_commands,
    demo,
    drill_command,
    exporter_command,
    generate_command,
    interrupts,
    queue_commands,
    simulate_command,
    stack_command,
    status_command,
    worker_command,
)
from .commands import BAD_ARGUMENT, Group, command_path


class OneLineErrors(Group):
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
        except ClickException as exc:
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


@click.group("fairctl", cls=OneLineErrors, no_args_is_help=True, context_settings={"show_default": True})
@completion.options
def app() -> None:
    """Fair Redis job queues: priority classes with weighted shares, fair queuing across tenants,
    and the tools to watch them."""


for command in (queue_commands.enqueue, queue_commands.reshard, queue_commands.pause, queue_commands.resume,
                status_command.status, worker_command.worker, exporter_command.exporter, demo.demo,
                simulate_command.simulate, drill_command.drill, drill_command.loadgen, generate_command.generate,
                check_commands.weights, check_commands.check, stack_command.group, dead_commands.group,
                config_commands.group, bench_command.bench):
    app.add_command(command)


def main() -> None:
    app.main()
