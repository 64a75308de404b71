"""``fairctl simulate`` end to end on a scaled-down storm: the table, the ``--json`` shape, alerts
decided by the real ``promtool``, the exit codes, worker processes, and the HTML report as a
browser renders it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from PIL import Image

from fairctl.cli import app
from fairness_sim.alert_evaluation import encode_values, load_rules, parse_report
from fairness_sim.scenario import shipped_scenarios

from .conftest import EXAMPLE_CONFIG
from .test_simulate_core import MINI_STORM

runner = CliRunner()
CLASS_KEYS = {"jobs", "wait_mean_s", "wait_p50_s", "wait_p99_s", "wait_max_s", "max_oldest_age_s", "realised_share"}
# The two alerts the mini storm is about, in the shape of the generated rules (for: included).
RULES = {"groups": [{"name": "fairness", "rules": [
    {"alert": "QueueStarving", "for": "2m", "labels": {"severity": "page"},
     "expr": "max without(instance, job) (queue_oldest_message_age_seconds)"
             " > on(queue) group_left max without(instance, job) (queue_max_age_seconds)"},
    {"alert": "QuietTenantsStarving", "for": "5m", "labels": {"severity": "warning"},
     "expr": "max without(instance, job) (queue_quiet_oldest_message_age_seconds)"
             " > on(queue) group_left max without(instance, job) (queue_max_age_seconds)"},
]}]}


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["simulate", *(str(a) for a in args)])


def write_scenario(tmp_path: Path, file: str = "mini.yaml", **changes: Any) -> Path:
    data: dict[str, Any] = {
        "name": "mini-storm", "description": "20,000 newsletters beside password resets and digests",
        "duration": "12m", "seed": 7, "config": str(EXAMPLE_CONFIG),
        "config_patch": {"classes[0].arrival_budget": None, "classes[0].reserved_slots": 0},
        "workers": [{"count": 8, "classes": "all"}], "streams": MINI_STORM,
        "policies": ["fifo", "weighted-fair"],
        "expect": {"fifo": {"fire": [{"alert": "QueueStarving", "labels": {"queue": "jobs:high"}, "before": "5m"}]},
                   "weighted-fair": {"silent": ['QueueStarving{queue="jobs:high"}', "QuietTenantsStarving"]}},
        **changes,
    }
    path = tmp_path / file
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(RULES))
    return path


def test_table_json_and_alerts_from_promtool(tmp_path: Path, rules: Path) -> None:
    out = tmp_path / "out.json"
    result = invoke(write_scenario(tmp_path), "--rules", rules, "--json", out, "--processes", "1")
    assert result.exit_code == 0, result.output
    assert "policy fifo" in result.stdout and "policy weighted-fair" in result.stdout
    assert re.search(r'alerts fired \(first firing\):\n +\dm\d+s  QueueStarving\{queue="jobs:high"\} \(page\)\n',
                     result.stdout), result.stdout
    fifo_part = result.stdout.split("policy weighted-fair")[0]
    # A class that started no job has no waits to show; fifo starves the interactive class.
    assert re.search(r"jobs:medium +0 +- +- +- +- ", fifo_part), fifo_part
    assert "verdict: starved: missed the SLO of jobs:high (oldest " in fifo_part
    assert result.stdout.count("as expected by the scenario") == 2
    doc = json.loads(out.read_text())
    assert set(doc) >= {"scenario", "policies"} and doc["scenario"] == "mini-storm"
    assert doc["policies"]["fifo"]["classes"]["jobs:medium"]["wait_mean_s"] is None  # none started
    assert doc["policies"]["fifo"]["verdict"] == "starved" and doc["policies"]["weighted-fair"]["verdict"] == "met SLOs"
    assert set(doc["policies"]) == {"fifo", "weighted-fair"}
    for policy in doc["policies"].values():
        assert set(policy["classes"]) == {"jobs:high", "jobs:medium", "jobs:low"}
        assert all(set(figures) == CLASS_KEYS for figures in policy["classes"].values())
        assert abs(sum(f["realised_share"] for f in policy["classes"].values()) - 1) < 1e-9
        for alert in policy["alerts"]:
            assert {"alert", "labels", "first_firing_s"} <= set(alert)
    fifo = {(a["alert"], a["labels"].get("queue")): a["first_firing_s"] for a in doc["policies"]["fifo"]["alerts"]}
    # The first password reset arrives seconds after the storm (t=30 s); 60 s SLO, then for: 2m.
    assert 150 <= fifo[("QueueStarving", "jobs:high")] <= 240
    fair = doc["policies"]["weighted-fair"]
    assert not [a for a in fair["alerts"] if a["labels"].get("queue") == "jobs:high"]
    assert fair["classes"]["jobs:high"]["max_oldest_age_s"] < 60 < doc["policies"]["fifo"]["classes"]["jobs:high"]["max_oldest_age_s"]


def test_a_contradicted_expectation_exits_1(tmp_path: Path, rules: Path) -> None:
    scenario = write_scenario(tmp_path, policies=["weighted-fair"],
                              expect={"weighted-fair": {"fire": ['QueueStarving{queue="jobs:high"}']}})
    result = invoke(scenario, "--rules", rules, "--processes", "1")
    assert result.exit_code == 1, result.output
    assert 'EXPECTATION FAILED: QueueStarving{queue="jobs:high"} should fire but stayed silent' in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{scenario}", "--policy", "lifo"], "fairctl: error: --policy: unknown policy 'lifo'"),
        (["{scenario}", "--duration", "soon"], "fairctl: error: --duration: expected a duration"),
        (["{missing}"], "fairctl: error: SCENARIO: "),
        (["{bad}"], "fairctl: error: SCENARIO: "),
        (["{scenario}", "--rules", "{missing}"], "fairctl: error: --rules: no such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    paths = {"scenario": write_scenario(tmp_path), "missing": tmp_path / "nope.yaml",
             "bad": write_scenario(tmp_path, "bad.yaml", workers=[{"count": 0}])}
    result = invoke(*(a.format(**paths) for a in args))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_bad_scenario_names_the_field(tmp_path: Path) -> None:
    result = invoke(write_scenario(tmp_path, workers=[{"count": 0}]))
    assert "workers[0].count: must be between 1 and 100000, got 0" in result.stderr


def test_without_promtool_the_comparison_still_prints(tmp_path: Path, rules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "out.json"
    result = invoke(write_scenario(tmp_path, policies=["fifo"]), "--rules", rules, "--json", out, "--processes", "1")
    assert result.exit_code == 0, result.output
    assert "policy fifo" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("alerts not evaluated: promtool not found on PATH")
    assert json.loads(out.read_text())["policies"]["fifo"]["alerts"] is None


def test_worker_processes_give_the_same_results(tmp_path: Path, rules: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    scenario = write_scenario(tmp_path, duration="6m")
    assert invoke(scenario, "--rules", rules, "--json", one, "--processes", "1").exit_code == 0
    assert invoke(scenario, "--rules", rules, "--json", two, "--processes", "2").exit_code == 0
    assert json.loads(one.read_text()) == json.loads(two.read_text())


def test_the_default_scenario_is_the_marketing_storm() -> None:
    result = invoke("--duration", "3m", "--policy", "weighted-fair", "--processes", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("scenario marketing-storm: 3m0s simulated")
    assert "2,30" in result.stdout  # 2.3M jobs enqueued (and the steady streams)


@pytest.mark.slow  # the README's two hours under four policies: 20-35 s
def test_the_readme_main_job_meets_the_storm_expectations() -> None:
    """The whole storm under the four policies, exactly as the README's main job runs it (~20 s):
    every policy's outcome must agree with the scenario's ``expect``."""
    result = invoke()
    assert result.exit_code == 0, result.output
    assert result.stdout.count("as expected by the scenario") == 4 and "EXPECTATION FAILED" not in result.stdout


def test_series_encoding_and_report_parsing() -> None:
    """Runs of a constant step collapse (promtool adds the step cumulatively: checked bit for bit),
    vanished series get a staleness marker; promtool's failure report reads back per group."""
    assert encode_values([1.0, 2.0, 3.0, None, None, 0.1, 0.2, 0.30000000000000004, 5.0]) == "1+1x2 stale _ 0.1+0.1x2 5"
    assert encode_values([None, 3.0, 1.0, -1.0, float("nan")]) == "_ 3-2x2 NaN"
    report = '''  FAILED:
    name: fifo,
    alertname: QueueStarving, time: 1h2m15s,
        exp:[],
        got:[
            0:
              Labels:{alertname="QueueStarving", queue="jobs:\\"high\\"", severity="page"}
              Annotations:{summary="x"}
            ]
    name: strict,
    alertname: QueueStarving, time: 5m,
        got:[
            0:
              Labels:{alertname="QueueStarving", queue="jobs:low"}
            ]
'''
    assert parse_report(report, "fifo") == {("QueueStarving", (("queue", 'jobs:"high"'), ("severity", "page"))): [3735.0]}


@pytest.mark.parametrize("expr, kept", [
    (None, ["queue_max_age_seconds", "queue_oldest_message_age_seconds", "queue_quiet_oldest_message_age_seconds"]),
    ('count({job="fairctl"}) > 0', None),
    ('count({__name__=~"queue_.*"}) > 0', None),
])
def test_promtool_gets_the_series_the_rules_can_select(tmp_path: Path, expr: str | None, kept: list[str] | None) -> None:
    """Series of metrics no expression names stay out of the evaluation (promtool would skip them at
    every step); a selector without a metric name may select any, so then every series goes in."""
    names = ["queue_inflight", "queue_max_age_seconds", "queue_oldest_message_age_seconds",
             "queue_quiet_oldest_message_age_seconds", "tenant_share_ratio"]
    series = [{"series": f'{name}{{queue="jobs:high"}}', "values": "1"} for name in names]
    extra = [] if expr is None else [{"alert": "AnySeries", "expr": expr}]
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": RULES["groups"][0]["rules"] + extra}]}))
    given = [s["series"].partition("{")[0] for s in load_rules(rules).read(series)]
    assert given == (names if kept is None else kept)


@pytest.mark.live  # starts headless Chromium
def test_report_renders_in_headless_chromium(tmp_path: Path, rules: Path) -> None:
    """The page is self-contained (no URL to fetch) and a real browser draws its plots without a
    console message."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is not installed: run bash scripts/setup.sh"
    page = tmp_path / "report.html"
    result = invoke(write_scenario(tmp_path, duration="6m"), "--rules", rules, "--report", page, "--processes", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().splitlines()[-1] == f"report written to {page.resolve()}"
    text = page.read_text()
    assert text.count("<svg") >= 5 and "QueueStarving" in text
    # The verdict table comes first: per policy a one-word verdict, the interactive SLO, each class's
    # worst oldest age against its SLO, the alerts and the scenario's expectation.
    verdicts = text[text.index('<table class="verdicts">'):]
    verdicts = verdicts[:verdicts.index("</table>")]
    assert text.index('<table class="verdicts">') < text.index("<svg")
    rows = re.findall(r"<tr>(.*?)</tr>", verdicts)
    assert "verdict" in rows[0] and "interactive SLO met" in rows[0] and "as the scenario expects?" in rows[0]
    fifo, fair = rows[1], rows[2]
    assert "<b>fifo</b>" in fifo and ">starved<" in fifo and ">no<" in fifo
    assert "<b>weighted-fair</b>" in fair and ">met SLOs<" in fair and ">yes<" in fair
    # Every figure the terminal prints is on the page too; axes carry units.
    for label in ("quiet tenants' oldest: max", "fairness index", "jobs started", "wait mean",
                  "simulated time (minutes)", "age (log scale)", "SLO 1m0s"):
        assert label in text, label
    assert not re.search(r'(src|href)\s*=\s*"(https?:|//)', text) and "<script" not in text
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ":CONSOLE" not in proc.stderr, proc.stderr
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    not_white = sum(n for n, rgb in colours if rgb != (255, 255, 255))
    assert len(colours) > 50 and not_white > 0.05 * image.width * image.height
    # The verdict table is drawn at the top: the first 600 px hold its red "starved" and green "met".
    top = image.crop((0, 0, image.width, 600))
    top_colours = {rgb for _, rgb in top.getcolors(maxcolors=1 << 20) or []}
    assert any(r > 150 and g < 60 and b < 60 for r, g, b in top_colours), "no red verdict at the top"
    assert any(g > 90 and r < 60 and b < 60 for r, g, b in top_colours), "no green verdict at the top"


@pytest.mark.slow  # each shipped scenario replayed with the rules evaluated: 80 s in all
@pytest.mark.parametrize("scenario", [name for name in shipped_scenarios() if name != "marketing-storm"])
def test_failure_mode_scenarios_raise_the_alert_that_must_catch_them(scenario: str) -> None:
    """The failure modes of a prioritised queue, each a shipped scenario named as a user names it,
    under the rules ``fairctl generate`` writes for its config: the alert that must catch it fires,
    the ones that must not stay silent. (The storm itself has its own test above.)"""
    result = invoke(scenario, "--processes", "1")
    assert result.exit_code == 0, result.output
    assert "EXPECTATION FAILED" not in result.stdout and "as expected by the scenario" in result.stdout
