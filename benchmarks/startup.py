"""(11) What each role pays to start: CPU time (user + system) of a fresh process running
``fairctl --help``, ``fairctl worker --help``, ``fairctl exporter --help`` and
``python -c "import fairness_core"``, against a bare ``python -c pass`` in the same turns.

    python -m benchmarks.startup [--repeats N] [--before DIR]

``--before DIR`` also measures another source tree (a ``git worktree`` of an earlier commit) with
the same interpreter, in the same turns, and prints a before/after table for the notes.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

from .harness import Row, alternate, log

# Runs the CLI from whichever tree is first on PYTHONPATH, as the console script would.
_CLI = "import sys; from fairctl.cli import main; sys.argv[0] = 'fairctl'; main()"
COMMANDS = {
    "fairctl --help": ["-c", _CLI, "--help"],
    "fairctl worker --help": ["-c", _CLI, "worker", "--help"],
    "fairctl exporter --help": ["-c", _CLI, "exporter", "--help"],
    'python -c "import fairness_core"': ["-c", "import fairness_core"],
}
BARE = ["-c", "pass"]
LIMIT_MS = 500.0  # well under half a second: the target of each CLI row


def cpu_ms(args: list[str], tree: Path | None = None) -> float:
    """CPU milliseconds (user + system) of one ``python args`` run, its output discarded."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else os.environ.copy()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, cwd=tree or None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def rows(repeats: int) -> list[Row]:
    """One row per command: its median CPU time, against a bare interpreter's in the same turns."""
    log("start-up CPU of each role's command")
    out = []
    for letter, (name, args) in zip("abcd", COMMANDS.items()):
        ours, bare = alternate(repeats, lambda a=args: cpu_ms(a), lambda: cpu_ms(BARE))
        cli = name.startswith("fairctl")
        out.append(Row(f"11{letter}", f"CPU time to start `{name}`", f"{ours:.0f} ms", f"bare python {bare:.0f} ms",
                       ours / bare, f"< {LIMIT_MS:.0f} ms" if cli else "informative",
                       ours < LIMIT_MS if cli else None))
    return out


def before_after(before: Path, repeats: int) -> str:
    """A Markdown table: each command's median CPU time from ``before`` and from this tree, in turns."""
    lines = ["| command | before | after | after / before |", "| --- | ---: | ---: | ---: |"]
    for name, args in COMMANDS.items():
        old, new = alternate(repeats, lambda a=args: cpu_ms(a, before), lambda a=args: cpu_ms(a))
        lines.append(f"| `{name}` | {old:.0f} ms | {new:.0f} ms | {new / old:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="runs of each command (the median is reported)")
    parser.add_argument("--before", type=Path, help="another source tree to compare with, in turns")
    args = parser.parse_args()
    if args.before:
        print(before_after(args.before.resolve(), args.repeats))
        return
    for row in rows(args.repeats):
        print(f"{row.what}: {row.ours} ({row.baseline}; {row.target})")


if __name__ == "__main__":
    main()
