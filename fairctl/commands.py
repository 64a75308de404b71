"""The click classes fairctl's commands are made of.

- :class:`Command` lists its positional arguments with their help (:class:`Argument`, through
  :func:`argument`) under "Arguments:", as options are listed, on every click release.
- :class:`Group` (``fairctl stack``, ``dead``, ``config``, and the root): its commands, in the
  order they are defined.

This module imports click only: it is part of what ``fairctl --help`` loads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
BAD_ARGUMENT = 2  # the exit code of every bad argument (fairctl.common.fail, and the root's parse errors)


def command_path(ctx: click.Context | None) -> str:
    """``fairctl`` and the subcommands of ``ctx``, whatever name the program was run under (a
    test runner calls the root ``root``, ``python -m fairctl`` calls it ``python -m fairctl``)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["fairctl", *reversed(names)])


class Argument(click.Argument):
    """A positional argument with a help text (click has one only from 8.5 on)."""

    def __init__(self, param_decls: Sequence[str], *, help: str | None = None, **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.help = help


def argument(*param_decls: str, **attrs: Any) -> Callable[[F], F]:
    """``click.argument`` with ``help=``, shown in the command's help under "Arguments:"."""
    return click.argument(*param_decls, cls=Argument, **attrs)


class Command(click.Command):
    """A command whose help lists its arguments (usage, text, arguments, options, epilog)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_arguments(ctx, formatter)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(param.human_readable_name, param.help + ("  [required]" if param.required else ""))
                for param in self.get_params(ctx) if isinstance(param, Argument) and param.help]
        if rows:
            with formatter.section("Arguments"):
                formatter.write_dl(rows)


class Group(click.Group):
    """A group of fairctl commands, each a :class:`Command`."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they are defined, not sorted

