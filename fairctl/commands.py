"""The click classes fairctl's commands are made of.

- :class:`Command` lists its positional arguments with their help (:class:`Argument`, through
  :func:`argument`) under "Arguments:", as options are listed, on every click release.
- :class:`Group` (``fairctl stack``, ``dead``, ``config``, and the root): a command that needs an
  optional module which is not installed fails with one line naming the extra that brings it
  (fairctl/extras.py), whichever command it is.
- :class:`LazyGroup` (the root, fairctl/cli.py): its commands are named with the module that
  defines them, which is imported only when the command runs or shows its help, so that
  ``fairctl --help`` lists them all from its table and ``fairctl worker`` loads only the worker.

This module imports click and fairctl.extras only: it is part of what ``fairctl --help`` loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from .extras import needed_by

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
    """A group of fairctl commands (each a :class:`Command`): one that needs a module an extra
    brings, not installed, fails naming the extra (exit 1), not with a traceback."""

    command_class = Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order they are defined, not sorted

    def invoke(self, ctx: click.Context) -> Any:
        with needed_by(lambda: f"{command_path(ctx)} {ctx.invoked_subcommand or ''}".strip()):
            return super().invoke(ctx)


class LazyGroup(Group):
    """A group whose commands are ``{name: ("module:attribute", short help)}``: the module is
    imported when the command is looked up to run it or show its help, never to list it; the
    short help is the one line the group's help shows for it (tests/test_cli_imports.py checks it
    against the command's own)."""

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *super().list_commands(ctx)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = self.lazy[cmd_name][0].partition(":")
        with needed_by(lambda: f"{command_path(ctx)} {cmd_name}"):
            command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), f"{module}:{attribute} is no click command"
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists them (each line cut to the width as click cuts it), but from the table:
        listing imports nothing."""
        rows = [(name, short) for name, (_, short) in self.lazy.items()]
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl([(name, click.Command(name, help=short).get_short_help_str(limit)) for name, short in rows])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        """Command names from the table (tab completion imports no command either)."""
        from click.shell_completion import CompletionItem

        names = [CompletionItem(name, help=short) for name, (_, short) in self.lazy.items() if name.startswith(incomplete)]
        return names + click.Command.shell_complete(self, ctx, incomplete)
