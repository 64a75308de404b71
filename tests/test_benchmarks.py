"""The benchmark suite still runs: its smallest preset end to end, with no peers (they need
installing). Speed targets are judged in BENCHMARKS.md, never here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from click.testing import CliRunner

from benchmarks import suite
from benchmarks.harness import Row
from benchmarks.report import NOTES, report_text
from fairctl.cli import app

from .conftest import ROOT

SHARDED = "## The sharded queue on 1, 2 and 3 masters"


@pytest.mark.live  # the smoke run starts redis-servers
def test_the_benchmark_suite_runs_and_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--preset", "smoke", "--peers", "none", "--out", str(out),
                           "--memory-server", "redis-server"],  # row 6b, on the same server here
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = out.read_text()
    notes = NOTES.read_text(encoding="utf-8")
    assert report.endswith(notes) and SHARDED in report, "the run dropped the notes or the sharded queue's section"
    head = report.removesuffix(notes)  # the notes have tables of their own (the sharded queue's)
    rows = [line.split("|")[1].strip() for line in head.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["1", "1b", "1c", "1d", "1e", "1f", "2", "3", "4", "4", "4b", "4b", "4c", "4d", "5", "6", "6b", "7", "7b", "7c", "8", "8b", "8c", "8d", "9", "9b", "9c", "10", "11a", "11b", "11c", "11d"], report
    assert "**Machine:**" in report and "skipped (--peers none)" in report


def test_a_memory_server_that_is_no_executable_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        suite.main(["--memory-server", "/nonexistent/valkey-server"])
    assert exc.value.code == 2
    assert "--memory-server: /nonexistent/valkey-server is no executable file" in capsys.readouterr().err


def test_a_full_run_keeps_the_sharded_section_and_the_notes_benchmarks_md_has() -> None:
    """BENCHMARKS.md is rewritten by a full run from its rows and benchmarks/notes.md, appended as
    it is; the sharded queue's section (measured apart, by ``--sharded``) lives in the notes, so a
    full run keeps it, and the committed BENCHMARKS.md ends with the notes as they are."""
    notes = NOTES.read_text(encoding="utf-8")
    assert SHARDED in notes
    assert (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").endswith(notes), (
        "BENCHMARKS.md's notes differ from benchmarks/notes.md: edit the notes there, a full run rewrites the rest")


def test_the_report_appends_the_notes_with_the_sharded_section() -> None:
    report = report_text([], "a machine", "smoke", 1, 1.0)
    assert report.endswith(NOTES.read_text(encoding="utf-8")) and SHARDED in report


def test_the_report_is_printed_and_written_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A trial run leaves the committed BENCHMARKS.md alone: --write or --out asks for a file."""
    def measure(*_: object) -> tuple[list[Row], str]:  # the rows themselves take minutes
        return [], "a machine"

    monkeypatch.setattr(suite, "measure", measure)
    monkeypatch.setattr(suite, "REPORT", tmp_path / "BENCHMARKS.md")
    assert suite.main(["--peers", "none"]) == 0
    assert capsys.readouterr().out.startswith("# Benchmarks\n") and not suite.REPORT.exists()
    assert suite.main(["--peers", "none", "--write"]) == 0
    assert suite.REPORT.read_text(encoding="utf-8").startswith("# Benchmarks\n")
    assert suite.main(["--peers", "none", "--out", str(tmp_path / "b.md")]) == 0
    assert (tmp_path / "b.md").is_file() and "# Benchmarks" not in capsys.readouterr().out


def test_fairctl_bench_help_names_fairctl_bench() -> None:
    result = CliRunner().invoke(app, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("usage: fairctl bench "), result.output


@pytest.mark.live  # the smoke run starts a cluster
def test_the_sharded_benchmark_runs_and_reports_every_cluster_and_class(tmp_path: Path) -> None:
    """A tiny run of ``--sharded`` (loopback clusters of 1, 2 and 3 masters): the report has both
    phases for each cluster, every class in the drift table, and the ratios' base of 1.00; the
    figures themselves are judged in BENCHMARKS.md, never here."""
    out = tmp_path / "sharded.md"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--sharded", "--preset", "smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = out.read_text()
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in report.splitlines()
            if line.startswith("| ") and "---" not in line]
    phases = [(row[0], row[1], row[2]) for row in rows if row[0].startswith(("enqueue", "pop+ack"))]
    assert [(phase.split(",")[0], masters) for phase, masters, _ in phases] == [
        (phase, masters) for phase in ("enqueue", "pop+ack") for masters in ("1", "2", "3")], report
    assert all(sum(map(int, spread.split("-"))) == 6 for _, _, spread in phases), report
    assert [row[4] for row in rows if row[0].startswith(("enqueue", "pop+ack")) and row[1] == "1"] == ["1.00", "1.00"]
    assert [row[0] for row in rows if row[0].startswith(("jobs:", "all tenants"))] == [
        "jobs:high", "jobs:medium", "jobs:low", "all tenants"], report
    assert "every tenant still had jobs queued at the end:" in report
    # The cluster client finds an FCALL's slot itself: the masters ran no COMMAND GETKEYS.
    assert [row[7].split(" / ")[1] for row in rows if row[0].startswith(("enqueue", "pop+ack"))] == ["0.00"] * 6, report
