"""``fairctl check`` and ``fairctl weights``: is the config sound, and do its rules work?"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from click.exceptions import Exit

from alerts import promtool
from alerts.layout import RULES_FILE, TESTS_DIR
from alerts.rules import link_warnings
from alerts.weights import notes, table_rows, weights_report
from fairness_core import Config
from fairness_core.generated import plan, write

from .common import clear_errors, config_option, fail, load
from .text_table import text_table

slots_option = click.option(
    "--slots", metavar="N", type=click.IntRange(min=1), show_default=False,
    help="Worker slots of the fleet (jobs run at once); default alerts.worker_slots from the config.")


def _weights(cfg: Config, slots: int | None) -> list[str]:
    report = weights_report(cfg, slots)
    click.echo("\n".join([*text_table(table_rows(report)), "", *notes(report)]))
    warnings = report.warnings()
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    return warnings


@click.command()
@config_option
@slots_option
def weights(config: Path, slots: int | None) -> None:
    """Print each class's share of the work and of the fleet's time, and what its load needs.

    From the optional classes[].arrival_rate and service_time: the slot time each class needs to
    keep up (arrival_rate x service_time / slots) against what its weight guarantees when every
    class is backlogged, with the smallest weight that would do. A weight is a share of the jobs
    started (pop share) under scheduler.charge: jobs, and of the worker time (time share) under
    runtime; the other column follows from the service times. Warns, naming the fields, when
    classes[].reserved_slots reserve more than the fleet: one class more slots than it has, or
    all of them together as many or more."""
    _weights(load(config, None), slots)


@click.command()
@config_option
@slots_option
def check(config: Path, slots: int | None) -> None:
    """Validate the config, lint the weights and the alerts' links, and run promtool on the rules it generates.

    The weights lint warns too of classes[].reserved_slots the fleet cannot hold (as fairctl
    weights does). Generates the rules and their unit tests in a scratch directory, then runs promtool check
    rules and promtool test rules on them. Exit 0 when all pass (weight warnings do not fail),
    1 when promtool reports a failure, 2 for a bad config or a missing promtool."""
    from alerts.output import ALERTS  # the runbooks' too (jinja2): weights needs none of it

    cfg = load(config, None)
    click.echo(f"{config}: valid")
    _weights(cfg, slots)
    try:
        promtool.binary()
    except promtool.PromtoolMissing:
        fail(promtool.BINARY, promtool.MISSING)
    for line in link_warnings(cfg):
        click.echo(f"warning: {line}", err=True)
    with tempfile.TemporaryDirectory(prefix="fairctl-check-") as tmp:
        with clear_errors():
            planned = plan(cfg, Path(tmp), (ALERTS,))
        write(planned, Path(tmp), (ALERTS,))
        generated = Path(tmp) / ALERTS.directory
        tests = sorted(path for path in planned if path.parent == generated / TESTS_DIR)
        try:
            promtool.check_rules(generated / RULES_FILE)
            promtool.test_rules(*tests)
        except promtool.PromtoolFailed as exc:
            click.echo(f"fairctl: {exc}", err=True)
            raise Exit(1) from None
    click.echo(f"promtool check rules: {RULES_FILE} passed; promtool test rules: {len(tests)} files passed")
