"""The benchmark suite still runs: its smallest preset end to end, with no peers (they need
installing). Speed targets are judged in BENCHMARKS.md, never here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def test_the_benchmark_suite_runs_and_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--preset", "smoke", "--peers", "none", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = out.read_text()
    rows = [line.split("|")[1].strip() for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["1", "1b", "1c", "2", "3", "4", "4", "4b", "4b", "4c", "4d", "5", "6", "7", "7b", "8", "9", "9b", "10"], report
    assert "**Machine:**" in report and "skipped (--peers none)" in report
