"""The packages type-check: mypy as pyproject.toml's ``[tool.mypy]`` sets it up, which says what
is checked and how strictly (fairness_core and exporter as ``--strict``).

A fast test, not live: mypy reads the source and starts nothing. It fails, rather than skips,
without mypy: the test extra installs it, so a missing mypy is a broken install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def test_the_packages_type_check(tmp_path: Path) -> None:
    # A cache of this run's own, so parallel runs (xdist, two checkouts) never share one.
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, f"mypy exited {run.returncode}:\n{run.stdout}{run.stderr}"
