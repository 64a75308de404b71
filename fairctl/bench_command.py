"""``fairctl bench``: the benchmark suite (``python -m benchmarks``) from a source checkout.

The benchmarks are not part of the installed package (they install peers and run for minutes), so
this command runs them as their own process in the repository the package was installed from,
passing every argument through (``fairctl bench --quick``, ``fairctl bench --setup-peers``,
``fairctl bench --help``). Nothing of fairctl imports the benchmarks.

The suite runs in its own session, so a terminal's Ctrl-C reaches this process alone: on Ctrl-C or
SIGTERM it forwards the signal to the suite's process group (the suite, its redis-server and
peers), gives them FORWARD_GRACE_S to stop and then kills the group; what the suite writes to
stderr after the signal (its traceback) is dropped, so the interruption reads as one line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import click
from click.exceptions import Exit

from .interrupts import signal_of

ROOT = Path(__file__).resolve().parent.parent
PROG_VARIABLE = "BENCHMARKS_PROG"  # benchmarks/__main__.py's: the name its usage lines show
FORWARD_GRACE_S = 1.0


def _pass_through(stream: IO[str], muted: threading.Event) -> None:
    for line in stream:
        if not muted.is_set():
            sys.stderr.write(line)
            sys.stderr.flush()


def _stop_group(suite: subprocess.Popen[str], signum: int) -> None:
    """The signal to the suite's whole process group, then SIGKILL to whatever is left of it."""
    for sig in (signum, signal.SIGKILL):
        try:
            os.killpg(suite.pid, sig)
        except ProcessLookupError:
            break
        try:
            suite.wait(timeout=FORWARD_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        try:  # the suite is gone; its group may not be (a server it had no time to stop)
            os.killpg(suite.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break
    suite.wait()


@click.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Measure the scheduler, exporter and simulator against raw LPOP and against RQ and BullMQ;
    prints the report, or writes it with --write (BENCHMARKS.md) or --out FILE (see `fairctl bench --help`)."""
    if not (ROOT / "benchmarks" / "__main__.py").exists():
        click.echo(f"fairctl: error: bench: needs a source checkout of fairctl (no benchmarks/ in {ROOT})", err=True)
        raise Exit(2)
    # The suite's output passes through this process line by line, so it reads as this command's.
    suite = subprocess.Popen([sys.executable, "-m", "benchmarks", *ctx.args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True,
                             env={**os.environ, PROG_VARIABLE: "fairctl bench"})
    assert suite.stdout is not None and suite.stderr is not None
    muted = threading.Event()
    errors = threading.Thread(target=_pass_through, args=(suite.stderr, muted), daemon=True)
    errors.start()
    try:
        for line in suite.stdout:
            click.echo(line, nl=False)
        suite.wait()
    except KeyboardInterrupt as exc:
        muted.set()
        _stop_group(suite, signal_of(exc))
        raise
    finally:
        errors.join(timeout=FORWARD_GRACE_S)
        suite.stdout.close()
    raise Exit(suite.returncode)
