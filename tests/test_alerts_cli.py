"""``fairctl check``, ``fairctl weights`` and ``fairctl generate``: output, exit codes, clear errors."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from alerts.weights import weights_report
from fairctl.cli import app
from fairctl.generate_command import OUTPUT_SETS
from fairness_core import load_config, parse_config
from fairness_core.generated import plan

from .conftest import EXAMPLE_CONFIG
from .test_config import with_change

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def config_file(tmp_path: Path, path: str, value: object) -> Path:
    out = tmp_path / "fairness.yaml"
    out.write_text(yaml.safe_dump(with_change(path, value)))
    return out


@pytest.mark.slow  # every promtool unit test again, through fairctl check: 15 s
def test_check_validates_lints_and_runs_promtool_on_the_generated_rules() -> None:
    result = invoke("check", "--config", EXAMPLE_CONFIG)
    assert result.exit_code == 0, result.output
    assert f"{EXAMPLE_CONFIG}: valid" in result.stdout and "jobs:low" in result.stdout
    assert "promtool check rules: fairctl-rules.yml passed; promtool test rules: 23 files passed" in result.stdout
    assert result.stderr == ""


def test_check_names_the_bad_field_of_an_invalid_config(tmp_path: Path) -> None:
    result = invoke("check", "--config", config_file(tmp_path, "classes.2.weight", 0))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"fairctl: error: --config: {tmp_path / 'fairness.yaml'}: classes[2].weight: must be > 0, got 0"]


def test_check_without_promtool_says_in_one_line_which_package_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    result = invoke("check", "--config", EXAMPLE_CONFIG)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        ("fairctl: error: promtool: not found on PATH; install the Debian package prometheus, which ships it "
         "(apt-get install -y prometheus, or bash scripts/setup.sh)")]
    assert "Traceback" not in result.output


def test_check_shows_promtools_report_when_the_rules_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "promtool"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nif [ "$2" = rules ] && [ "$1" = test ]; then\n'
                    '  printf "Unit Testing:  a.yml\\n\\n  FAILED:\\n    alertname: QueueStalled, time: 16m,\\n"; exit 1\n'
                    'fi\necho "  SUCCESS: 33 rules found"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(fake.parent))
    result = invoke("check", "--config", EXAMPLE_CONFIG)
    assert result.exit_code == 1
    assert "fairctl: promtool test rules" in result.stderr and "alertname: QueueStalled, time: 16m" in result.stderr


def test_weights_prints_the_derived_table() -> None:
    result = invoke("weights", "--config", EXAMPLE_CONFIG)
    assert result.exit_code == 0 and result.stderr == ""
    header, _, _, low = result.stdout.splitlines()[:4]
    assert header.split() == ["class", "weight", "pop", "share", "time", "share", "arrivals/s", "service", "s",
                              "needs", "min", "weight", "keeps", "up"]
    assert low.split() == ["jobs:low", "10", "10.0%", "40.0%", "8.33", "0.5", "10.4%", "2", "ok"]
    assert "fleet: 40 worker slots" in result.stdout


def test_weights_warns_when_a_weight_is_below_what_the_load_needs() -> None:
    result = invoke("weights", "--config", EXAMPLE_CONFIG, "--slots", "8")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        ("warning: classes[2].weight: jobs:low needs 52.1% of the slot time to keep up (8.33/s x 0.5s / 8 slots), "
         "its weight 10 guarantees 40.0% when every class is backlogged; raise it to at least 17")]
    assert "SHORT" in result.stdout
    assert invoke("weights", "--config", EXAMPLE_CONFIG, "--slots", "0").exit_code == 2


def test_the_suggested_weight_is_enough_and_the_one_below_is_not() -> None:
    data = with_change("classes.2.weight", 17)
    assert not weights_report(parse_config(data), 8).warnings()
    data["classes"][2]["weight"] = 16
    assert weights_report(parse_config(data), 8).warnings()


def test_weights_says_when_the_fleet_is_too_small_or_unknown(tmp_path: Path) -> None:
    too_small = invoke("weights", "--config", EXAMPLE_CONFIG, "--slots", "2")
    assert "warning: the classes need 308% of the fleet's 2 slots together" in too_small.stderr
    assert "it needs more than the whole fleet: add workers" in too_small.stderr
    unknown = invoke("weights", "--config", config_file(tmp_path, "alerts.worker_slots", "~"))
    assert "set alerts.worker_slots (or pass --slots)" in unknown.stderr


def test_check_and_weights_flag_reservations_that_take_the_fleet(tmp_path: Path) -> None:
    whole = config_file(tmp_path, "classes.0.reserved_slots", 1000)  # the example's fleet: 40 slots
    for command in ("weights", "check"):
        result = invoke(command, "--config", whole)
        assert result.exit_code == 0, result.output
        warned = [line for line in result.stderr.splitlines() if "reserved_slots" in line]
        assert warned == [
            "warning: classes[0].reserved_slots: jobs:high reserves 1000 slots, more than the fleet's 40 "
            "(alerts.worker_slots)",
            "warning: classes[0].reserved_slots: the classes reserve 1000 slots together, the fleet's 40 or more: "
            "while a reservation is unmet, the classes below theirs take every free slot and jobs:medium, "
            "jobs:low (no reservation) run none"], result.stderr
    assert not [w for w in weights_report(parse_config(with_change("classes.0.reserved_slots", 39))).warnings()
                if "reserved_slots" in w]
    assert "reserve 40 slots together" in " ".join(
        weights_report(parse_config(with_change("classes.1.reserved_slots", 38))).warnings())


def test_without_service_times_the_lint_assumes_equal_ones() -> None:
    data = with_change("classes.0.service_time", "~")
    del data["classes"][0]["arrival_rate"]
    report = weights_report(parse_config(data))
    assert report.equal_service_times
    assert [round(c.guaranteed, 2) for c in report.classes] == [0.7, 0.2, 0.1]
    assert report.classes[0].needed is None and report.classes[2].needed == pytest.approx(500 / 60 * 0.5 / 40)


def test_generate_refuses_an_slo_the_wait_histogram_cannot_resolve(tmp_path: Path) -> None:
    result = invoke("generate", "--out", tmp_path, "--config", config_file(tmp_path, "classes.0.max_age", "1d"))
    assert result.exit_code == 2
    assert "classes[0].max_age: PriorityInversion needs an SLO below 43200.0s" in result.stderr
    assert not (tmp_path / "alerts").exists()


def test_generate_writes_every_file_and_reports_only_changes(tmp_path: Path) -> None:
    total = len(plan(load_config(EXAMPLE_CONFIG), tmp_path, OUTPUT_SETS))
    first = invoke("generate", "--out", tmp_path, "--config", EXAMPLE_CONFIG)
    assert first.exit_code == 0 and f"{total} files generated, {total} changed" in first.stdout
    again = invoke("generate", "--out", tmp_path, "--config", EXAMPLE_CONFIG)
    assert again.stdout.strip() == f"{total} files generated, 0 changed"
