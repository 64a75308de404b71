"""Which install extra brings each optional module, and the one line a command that needs a
missing one fails with (pyproject.toml lists the extras).

The base install is a producer's, a worker's and an exporter's; the operator's tools import
matplotlib, grafanalib or jinja2 only where they draw or render. A command that reaches one that
is not installed fails with one line naming the extra to install, exit code 1, no traceback: the
groups of fairctl/groups.py turn the ModuleNotFoundError into it, for every command alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

EXTRAS = {
    "matplotlib": "report",  # the charts of fairctl simulate --report
    "grafanalib": "generate",  # the Grafana dashboards
    "attr": "generate",  # attrs, grafanalib's own dependency, which the dashboards' code uses too
    "jinja2": "generate",  # the alerts' runbooks
}
EXIT_MISSING_EXTRA = 1


def extra_of(exc: ModuleNotFoundError) -> str | None:
    """The extra that brings the module ``exc`` did not find, or None when no extra does."""
    return EXTRAS.get((exc.name or "").partition(".")[0])


def needs(command: str, exc: ModuleNotFoundError) -> str:
    """``fairctl simulate needs the 'report' extra (no module matplotlib): pip install ...``: the
    extra first, as the module may be one the user never heard of (attr), the command to run last."""
    module, extra = (exc.name or "").partition(".")[0], extra_of(exc)
    return f"{command} needs the '{extra}' extra (no module {module}): pip install 'fairctl[{extra}]'"


class MissingExtra(click.ClickException):
    """A command needs an optional module that is not installed: one line, exit code 1."""

    exit_code = EXIT_MISSING_EXTRA

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"fairctl: error: {self.message}", err=True)


@contextmanager
def needed_by(command: Callable[[], str]) -> Iterator[None]:
    """Around loading or running a command (``command()`` names it: ``fairctl simulate``): a
    ModuleNotFoundError for a module an extra brings becomes :class:`MissingExtra`; any other goes
    on as it is."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if extra_of(exc) is None:
            raise
        raise MissingExtra(needs(command(), exc)) from None
