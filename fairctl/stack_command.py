"""``fairctl stack up|down|status``: the whole stack natively, for machines without Docker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from exporter.server import parse_listen
from fairness_stack.configs import WORKERS
from fairness_stack.supervisor import Stack, StackError, WorkerPool
from fairness_stack.webhook import webhook_server

from .common import DEFAULT_CONFIG, ConfigOption, clear_errors, fail, load
from .interrupts import stopped

app = typer.Typer(help="Run Redis, workers, two exporters, Prometheus, Alertmanager and a webhook "
                       "receiver natively, on loopback.", no_args_is_help=True)

DirOption = Annotated[Path, typer.Option(
    "--dir", metavar="DIR", help="Where the stack keeps its config, data, logs and stack.json.")]
DEFAULT_DIR = Path(".fairctl-stack")
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


@app.command()
def up(
    directory: DirOption = DEFAULT_DIR,
    config: ConfigOption = DEFAULT_CONFIG,
    slots: Annotated[int, typer.Option(metavar="N", min=1, max=1000, help="Worker slots (threads) in all, 16 per process.")] = 8,
    interval: Annotated[float, typer.Option(
        metavar="SECONDS", min=0.1, max=60, help="Prometheus scrape and rule evaluation interval, seconds.")] = 1.0,
) -> None:
    """Start the stack for --config and print where each service listens.

    Redis (AOF on), the workers (fairctl.handlers:sleep_handlers), two exporters on the same
    Redis, Prometheus with the rules generated from the config, Alertmanager routing every alert
    to fairctl's webhook receiver (DIR/webhook.jsonl). Ports are the usual ones (6379, 29100,
    29101, 29110, 9090, 9093) when free, else free loopback ports (and all of them free ones when
    another program takes a usual port while the stack starts). Stop it with: fairctl stack down.
    Ctrl-C (or SIGTERM) while it starts stops what it had started.

    The stack's Redis keeps its data under DIR between runs, and with it the config its queue
    group runs: when --config differs from that one, it is applied (as fairctl config apply does)
    before anything else starts, and the changes are printed. One that would leave jobs under a
    class or tier it no longer names is refused, and the stack stops again (exit 1)."""
    cfg = load(config, None)
    stack = Stack(directory)
    try:
        with clear_errors():
            state = stack.up(cfg, pools=[WorkerPool(WORKERS, slots)], interval=interval)
    except (StackError, FileNotFoundError) as exc:
        fail("--dir" if isinstance(exc, StackError) else "PATH", str(exc), code=1)
    except KeyboardInterrupt as exc:  # up() has stopped what it started
        stopped(exc, f"stopped {len(stack.stopped)} process(es) of the stack under {directory}: "
                     f"{', '.join(map(shown, stack.stopped)) or 'none had started'}")
        raise
    for service in state.services:
        typer.echo(f"{shown(service.name):<22} pid {service.pid:<8} {service.url or ''}")
    if state.config_changes:
        typer.echo("\n".join([state.config_changes[0], *(f"  {line}" for line in state.config_changes[1:])]))
    typer.echo(f"redis: {state.redis_url}\nprometheus: {state.prometheus_url}\nalertmanager: {state.alertmanager_url}\n"
               f"alerts delivered to: {state.webhook_log}\nstop it with: fairctl stack down --dir {directory}")


@app.command()
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop exactly the processes `up` started (recorded in DIR/stack.json) and check their ports are free."""
    names = _or_fail(Stack(directory).down)
    typer.echo(f"stopped {len(names)} process(es): {', '.join(map(shown, names)) or 'none was running'}")


@app.command()
def status(directory: DirOption = DEFAULT_DIR) -> None:
    """Each service of the stack, running or not; exits 1 when any has stopped."""
    services = _or_fail(Stack(directory).status)
    if not services:
        typer.echo(f"no service of the stack under {directory} is running")
    for service, running in services:
        typer.echo(f"{shown(service.name):<22} {'running' if running else 'STOPPED':<8} pid {service.pid:<8} {service.url or ''}")
    if not services or not all(running for _, running in services):
        raise typer.Exit(1)


@app.command(hidden=True)
def webhook(
    listen: Annotated[str, typer.Option(metavar="HOST:PORT", help="Address to serve on.")],
    log: Annotated[Path, typer.Option(metavar="FILE", help="JSON-lines file each notification is appended to.")],
) -> None:
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
