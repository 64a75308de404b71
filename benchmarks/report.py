"""BENCHMARKS.md: the machine, the table of ratios, and the hand-written notes on what limits the
figures and what was tried (``benchmarks/notes.md``, appended as it is)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from fairness_stack.servers import RedisServer

from .harness import Row

NOTES = Path(__file__).resolve().parent / "notes.md"


def run_alone(row: Callable[[str, int, int], Row | list[Row]], about: str, argv: list[str] | None) -> int:
    """``python -m benchmarks.<module>`` for a row, or rows, of jobs in turns (``row(url, jobs,
    repeats)``): on a redis-server of its own, printed as a table."""
    parser = argparse.ArgumentParser(description=about)
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per run (default 5000, as --preset full)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each, in turns (default 5)")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        made = row(server.url, args.jobs, args.repeats)
        print(table(made if isinstance(made, list) else [made]))
    return 0


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("yes" if met else "**no**")


def table(rows: list[Row]) -> str:
    lines = [
        "| # | measurement | fairctl | baseline | ratio | target | met | notes |",
        "| --- | --- | --- | --- | ---: | --- | --- | --- |",
    ]
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.number} | {r.what} | {r.ours} | {r.baseline} | {ratio} | {r.target} | {verdict(r.met)} "
                     f"| {r.limits} |")
    return "\n".join(lines)


def report_text(rows: list[Row], machine: str, preset: str, repeats: int, elapsed_s: float) -> str:
    """The Markdown of BENCHMARKS.md: the rows, then benchmarks/notes.md as it is."""
    notes = NOTES.read_text(encoding="utf-8") if NOTES.exists() else ""
    return (
        "# Benchmarks\n\n"
        f"Written by `python -m benchmarks --preset {preset}` on {time.strftime('%Y-%m-%d %H:%M %Z')} in "
        f"{elapsed_s / 60:.1f} minutes. Each figure is the median of {repeats} runs, taken in turns with its "
        "baseline on the same redis-server; the ratio is fairctl / baseline.\n\n"
        f"**Machine:** {machine}; load average {os.getloadavg()[0]:.2f} at the end (the machine is shared: "
        "other work ran beside the benchmark).\n\n"
        f"{table(rows)}\n\n{notes}"
    )
