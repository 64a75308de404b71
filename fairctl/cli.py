"""The ``fairctl`` command line. Each command group lives in its own module and is merged here,
so new groups (generate, simulate, exporter, ...) are one import and one ``add_typer`` each."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer import Abort
from typer.core import TyperGroup

try:  # recent typer bundles its own copy of click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on the external click
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from . import (
    bench_command,
    check_commands,
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
from .common import BAD_ARGUMENT


def command_path(ctx: Any) -> str:
    """``fairctl`` and the subcommands of ``ctx``, whatever name the program was run under (a
    test runner calls the root ``root``, ``python -m fairctl`` calls it ``__main__.py``)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["fairctl", *reversed(names)])


class OneLineErrors(TyperGroup):
    """Arguments the command line itself cannot parse (an unknown option, a value out of range, a
    missing argument) fail like every other bad argument: one line naming it, exit code 2, no
    usage box."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            outcome = super().main(*args, standalone_mode=False, **kwargs)
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
            typer.echo(f"fairctl: error: {argument}: {message} (see: {where} --help)", err=True)
            sys.exit(BAD_ARGUMENT)
        except ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(outcome if isinstance(outcome, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        """Every command ends alike on Ctrl-C or SIGTERM: one line, exit 130 or 143 (interrupts.py)."""
        with interrupts.handled():
            return super().invoke(ctx)


app = typer.Typer(
    cls=OneLineErrors,
    help="Fair Redis job queues: priority classes with weighted shares, fair queuing across tenants, "
         "and the tools to watch them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
for group in (queue_commands, status_command, worker_command, exporter_command, demo, simulate_command, drill_command,
              generate_command, check_commands):
    app.add_typer(group.app)
app.add_typer(stack_command.app, name="stack")
app.add_typer(dead_commands.app, name="dead")
app.add_typer(config_commands.app, name="config")
app.add_typer(bench_command.app)


def main() -> None:
    app()
