"""``fairctl generate``: write every generated file from the config, or check they are current."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
from click.exceptions import Exit

from alerts.output import ALERTS
from alerts.rules import left_out
from dashboards.output import DASHBOARDS_OUTPUT
from exporter.sources import watched
from fairness_core.generated import OutputSet, differences, plan, write
from fairness_stack.compose import COMPOSE_OUTPUT
from fairness_stack.kubernetes import KUBERNETES_OUTPUT

from .common import PATH, clear_errors, config_option, fail, load

LIST_CHANGES_UP_TO = 10  # more changes than this are summarised unless --verbose

# Every set `fairctl generate` writes, each under its own directory of --out.
OUTPUT_SETS: tuple[OutputSet, ...] = (ALERTS, DASHBOARDS_OUTPUT, COMPOSE_OUTPUT, KUBERNETES_OUTPUT)


@click.command()
@click.option("--out", metavar="DIR", type=PATH, default=Path("."),
              help="Root the generated directories go under (alerts/generated/ ...).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 listing every file that regenerating would change.")
@click.option("--verbose", "-v", is_flag=True, help="List every file written or removed, however many.")
@config_option
def generate(out: Path, check: bool, verbose: bool, config: Path) -> None:
    """Generate the Prometheus rules, their promtool unit tests, the runbooks and the dashboards from the config.

    With a watch section, only the rules and panels whose series that job system supplies, naming
    the alerts it left out.

    Each output set owns its directory: files in it that are no longer generated are removed (and
    reported by --check), so the committed output always matches the config."""
    cfg = load(config, None)
    with clear_errors():
        planned = plan(cfg, out, OUTPUT_SETS)
    left = left_out(cfg)
    if (watch := watched(cfg)) is not None and left:
        click.echo(f"watch.system {watch.system}: its queues do not supply the series of {len(left)} alert(s), "
                   f"left out with their panels: {', '.join(left)} (see docs/exporter.md)", err=True)
    if check:
        stale = differences(planned, out, OUTPUT_SETS)
        for change in stale:
            click.echo(f"{change.path}: {change.what}", err=True)
        if stale:
            click.echo(f"fairctl: {len(stale)} generated file(s) out of date; run: fairctl generate --config {config}",
                       err=True)
            raise Exit(1)
        click.echo(f"{len(planned)} generated files are up to date")
        return
    try:
        changes = write(planned, out, OUTPUT_SETS)
    except OSError as exc:
        fail("--out", f"cannot write {exc.filename}: {exc.strerror}")
    if verbose or len(changes) <= LIST_CHANGES_UP_TO:
        for change in changes:
            click.echo(f"{change.path}: {'removed' if change.path not in planned else change.what}")
    counts = Counter("removed" if c.path not in planned else {"missing": "new"}.get(c.what, c.what) for c in changes)
    detail = f" ({', '.join(f'{n} {what}' for what, n in counts.items())}; --verbose lists them)" \
        if changes and not verbose and len(changes) > LIST_CHANGES_UP_TO else ""
    click.echo(f"{len(planned)} files generated, {len(changes)} changed{detail}")
