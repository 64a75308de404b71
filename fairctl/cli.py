"""The ``fairctl`` command line. Each command group lives in its own module and is merged here,
so new groups (generate, simulate, exporter, ...) are one import and one ``add_typer`` each."""

from __future__ import annotations

import typer

from . import (
    check_commands, demo, drill_command, exporter_command, generate_command, queue_commands, simulate_command,
    stack_command, worker_command,
)

app = typer.Typer(
    help="Fair Redis job queues: priority classes with weighted shares, fair queuing across tenants, "
         "and the tools to watch them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
for group in (queue_commands, worker_command, exporter_command, demo, simulate_command, drill_command,
              generate_command, check_commands):
    app.add_typer(group.app)
app.add_typer(stack_command.app, name="stack")


def main() -> None:
    app()
