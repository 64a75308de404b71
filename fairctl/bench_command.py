"""``fairctl bench``: the benchmark suite (``python -m benchmarks``) from a source checkout.

The benchmarks are not part of the installed package (they install peers and run for minutes), so
this command runs them as their own process in the repository the package was installed from,
passing every argument through (``fairctl bench --quick``, ``fairctl bench --setup-peers``,
``fairctl bench --help``). Nothing of fairctl imports the benchmarks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parent.parent

app = typer.Typer()


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def bench(ctx: typer.Context) -> None:
    """Measure the scheduler, exporter and simulator against raw LPOP and against RQ and BullMQ;
    writes BENCHMARKS.md (arguments as for `python -m benchmarks`, see `fairctl bench --help`)."""
    if not (ROOT / "benchmarks" / "__main__.py").exists():
        typer.echo(f"fairctl: error: bench: needs a source checkout of fairctl (no benchmarks/ in {ROOT})", err=True)
        raise typer.Exit(2)
    # The suite's output passes through this process line by line, so it reads as this command's.
    with subprocess.Popen([sys.executable, "-m", "benchmarks", *ctx.args], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True, bufsize=1) as suite:
        assert suite.stdout is not None
        for line in suite.stdout:
            typer.echo(line, nl=False)
    raise typer.Exit(suite.returncode)
