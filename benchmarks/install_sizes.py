"""Installed size of each deployment role: pip installs fairctl with the role's extras into an
empty virtualenv, and the size and package count are what that install added to it.

    python -m benchmarks.install_sizes [--source DIR] [ROLE=EXTRAS ...]

Needs the package index (or a wheelhouse pip is configured with). The figures go into
docs/deployment.md's table of roles.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each role and the extras it installs (docs/deployment.md).
ROLES = {
    "producer, worker, exporter": "",
    "+ simulate --report": "report",
    "+ generate, check": "generate",
    "everything": "all",
}


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def packages(python: Path) -> set[str]:
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                             check=True, capture_output=True, text=True).stdout
    return {item["name"].lower() for item in json.loads(listing)}


def measure(source: Path, extras: str) -> tuple[int, int]:
    """Bytes and packages (fairctl included) that ``pip install source[extras]`` adds to a fresh venv."""
    with tempfile.TemporaryDirectory(prefix="fairctl-size-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        site = next((venv / "lib").glob("python*/site-packages"))
        before_bytes, before = tree_bytes(site), packages(python)
        target = f"{source}[{extras}]" if extras else str(source)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
                        target], check=True, env={**os.environ, "PIP_NO_INPUT": "1"})
        return tree_bytes(site) - before_bytes, len(packages(python) - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT, help="the fairctl source tree to install")
    parser.add_argument("roles", nargs="*", help="ROLE=EXTRAS pairs (default: every role)")
    args = parser.parse_args()
    roles = dict(r.split("=", 1) for r in args.roles) if args.roles else ROLES
    print("| role | extras | installed size | packages |\n| --- | --- | ---: | ---: |")
    for role, extras in roles.items():
        size, count = measure(args.source, extras)
        print(f"| {role} | {extras or '(base)'} | {size / 1e6:.0f} MB | {count} |", flush=True)


if __name__ == "__main__":
    main()
