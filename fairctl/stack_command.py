"""``fairctl stack up|down|status``: the whole stack natively, for machines without Docker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
from click.exceptions import Exit

from exporter.server import parse_listen
from fairness_stack.configs import WORKERS, listening_ports
from fairness_stack.supervisor import ChosenPortTaken, Service, Stack, StackError, WorkerPool
from fairness_stack.webhook import webhook_server

from .commands import Group
from .common import PATH, clear_errors, config_option, fail, load
from .interrupts import stopped

group = Group("stack", help="Run Redis, workers, two exporters, Prometheus, Alertmanager and a webhook "
                            "receiver natively, on loopback.", no_args_is_help=True)

DEFAULT_DIR = Path(".fairctl-stack")
dir_option = click.option(
    "--dir", "directory", metavar="DIR", type=PATH, default=DEFAULT_DIR,
    help="Where the stack keeps its config, data, logs and stack.json.")
T = TypeVar("T")


def shown(name: str) -> str:
    """A service as the user reads it: a worker process of ``up``'s one pool (recorded as
    workers/workers/N) as ``worker N``, of a drill's pool P as ``worker P/N``."""
    group, _, rest = name.partition("/")
    if group != WORKERS or not rest:
        return name
    pool, _, index = rest.partition("/")
    return f"worker {index}" if pool == WORKERS else f"worker {rest}"


def _or_fail(action: Callable[[], T]) -> T:
    """``action()``; a stack that is missing or will not stop fails naming --dir (exit 1)."""
    try:
        return action()
    except StackError as exc:
        fail("--dir", str(exc), code=1)


@group.command()
@dir_option
@config_option
@click.option("--slots", metavar="N", type=click.IntRange(1, 1000), default=8,
              help="Worker slots (threads) in all, 16 per process.")
@click.option("--interval", metavar="SECONDS", type=click.FloatRange(0.1, 60), default=1.0,
              help="Prometheus scrape and rule evaluation interval, seconds.")
@click.option("--port-base", metavar="PORT", type=click.IntRange(1024, 65535 - len(listening_ports()) + 1),
              help="Serve on PORT and the next ones (Redis, the two exporters, the webhook receiver, "
                   "Prometheus, Alertmanager, in that order) instead of the usual ports; exit 1 if one is taken.")
def up(directory: Path, config: Path, slots: int, interval: float, port_base: int | None) -> None:
    """Start the stack for --config and print where each service listens.

    Redis (AOF on), the workers (fairctl.handlers:sleep_handlers), two exporters on the same
    Redis, Prometheus with the rules generated from the config, Alertmanager routing every alert
    to fairctl's webhook receiver (DIR/webhook.jsonl). Ports are the usual ones (6379, 29100,
    29101, 29110, 9090, 9093) when free, else free loopback ports, each named with the usual one it
    replaces (and all of them free ones when another program takes a usual port while the stack
    starts); or with --port-base exactly the ones chosen. Stop it with: fairctl stack down.
    Ctrl-C (or SIGTERM) while it starts stops what it had started.

    The stack's Redis keeps its data under DIR between runs, and with it the config its queue
    group runs: when --config differs from that one, it is applied (as fairctl config apply does)
    before anything else starts, and the changes are printed. One that would leave jobs under a
    class or tier it no longer names is refused, and the stack stops again (exit 1)."""
    cfg = load(config, None)
    stack = Stack(directory)
    try:
        with clear_errors():
            state = stack.up(cfg, pools=[WorkerPool(WORKERS, slots)], interval=interval, port_base=port_base)
    except ChosenPortTaken as exc:
        fail("--port-base", str(exc), code=1)
    except (StackError, FileNotFoundError) as exc:
        fail("--dir" if isinstance(exc, StackError) else "PATH", str(exc), code=1)
    except KeyboardInterrupt as exc:  # up() has stopped what it started
        stopped(exc, f"stopped {len(stack.stopped)} process(es) of the stack under {directory}: "
                     f"{', '.join(map(shown, stack.stopped)) or 'none had started'}")
        raise
    for service in state.services:
        click.echo(f"{shown(service.name):<22} pid {service.pid:<8} {service.url or ''}")
    for line in moved(state.services, listening_ports(port_base)):
        click.echo(line)
    if state.config_changes:
        click.echo("\n".join([state.config_changes[0], *(f"  {line}" for line in state.config_changes[1:])]))
    click.echo(f"redis: {state.redis_url}\nprometheus: {state.prometheus_url}\nalertmanager: {state.alertmanager_url}\n"
               f"alerts delivered to: {state.webhook_log}\nstop it with: fairctl stack down --dir {directory}")


def moved(services: list[Service], wanted: dict[str, int]) -> list[str]:
    """A line per service that listens on another port than ``wanted`` (its usual one was taken)."""
    return [f"{s.name}: on port {s.port}, not {wanted[s.name]} (in use; choose the ports with --port-base)"
            for s in services if s.name in wanted and s.port != wanted[s.name]]


@group.command()
@dir_option
def down(directory: Path) -> None:
    """Stop exactly the processes `up` started (recorded in DIR/stack.json) and check their ports are free."""
    names = _or_fail(Stack(directory).down)
    click.echo(f"stopped {len(names)} process(es): {', '.join(map(shown, names)) or 'none was running'}")


@group.command()
@dir_option
def status(directory: Path) -> None:
    """Each service of the stack, running or not; exits 1 when any has stopped."""
    services = _or_fail(Stack(directory).status)
    if not services:
        click.echo(f"no service of the stack under {directory} is running")
    for service, running in services:
        click.echo(f"{shown(service.name):<22} {'running' if running else 'STOPPED':<8} pid {service.pid:<8} {service.url or ''}")
    if not services or not all(running for _, running in services):
        raise Exit(1)


@group.command(hidden=True)
@click.option("--listen", metavar="HOST:PORT", required=True, help="Address to serve on.")
@click.option("--log", metavar="FILE", type=PATH, required=True, help="JSON-lines file each notification is appended to.")
def webhook(listen: str, log: Path) -> None:
    """Alertmanager's webhook receiver: append every notification to --log (the stack runs it)."""
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        fail("--listen", str(exc))
    server = webhook_server(host, port, log)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
