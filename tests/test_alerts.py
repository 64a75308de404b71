"""The generated alert rules: promtool accepts them and their unit tests pass (for the example and
for other configs), the committed output is current, every expression uses only contract metrics,
and every alert of the docs' table has its annotations, runbook, firing case and silent control."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import promtool, recording
from alerts.annotations import humanize, humanize_duration, humanize_percentage
from alerts.config import ALERT_FOR
from alerts.layout import GENERATED_DIR, RULES_FILE, TESTS_DIR, runbook_file
from alerts.output import ALERTS, render
from alerts.rules import ALERTS_SERIES, TENANTS_HELD_PAST_MAX_AGE, UP, build_alerts
from alerts.runbooks import diagnostics
from alerts.unittest_cases import Case
from alerts.unittests import test_files as generated_test_files
from exporter import metrics as m
from fairctl.generate_command import OUTPUT_SETS
from fairness_core import Config, load_config, parse_config
from fairness_core.generated import plan, write

from .conftest import EXAMPLE_CONFIG, ROOT
from .support import promtool_passes_generated_tests, run_fairctl
from .test_config import with_change

GENERATED = ROOT / GENERATED_DIR
# The alert table of docs/alerts.md, in its order.
DOCUMENTED_ALERTS = (
    "QueueStarving", "QueueShareBelowWeight", "PriorityMixDrift", "PriorityReasonShift", "TenantDominatingQueue",
    "QuietTenantsStarving", "QueueStalled", "QueueShardStalled", "PriorityInversion", "JobsRedeliveredHigh", "JobsDeadLettered",
    "JobsWithoutHandler", "QueuePaused", "JobsUnderUnconfiguredClass", "RedisMemoryHigh", "RedisMayEvictJobs", "FairnessExporterDown",
    "FairnessExporterRedisDown", "TenantAtLimit", "QueueStateLost", "QueueConfigSplit", "RedisMasterChanged",
)
ANNOTATIONS = {"summary", "description", "runbook_url", "dashboard_url"}


def committed_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load((GENERATED / RULES_FILE).read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def committed_tests() -> list[Path]:
    return sorted((GENERATED / TESTS_DIR).glob("*.yml"))


def generate_into(config: Config, root: Path) -> Path:
    """The alerts output for ``config`` under ``root``; returns its generated directory."""
    write(plan(config, root, (ALERTS,)), root, (ALERTS,))
    return root / GENERATED_DIR


# ------------------------------------------------------------------ promtool on the committed output

def test_promtool_accepts_the_committed_rules_file() -> None:
    assert "SUCCESS" in promtool.check_rules(GENERATED / RULES_FILE)


def test_promtool_unit_tests_pass_on_every_committed_test_file() -> None:
    files = committed_tests()
    assert {f.stem for f in files} == {*DOCUMENTED_ALERTS, "recording"}
    report = promtool.test_rules(*files)
    assert report.count("Unit Testing:") == 0  # readable(): only failing files are listed


def test_promtool_check_config_loads_the_rules_as_prometheus_would(tmp_path: Path) -> None:
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "15s"},
        "rule_files": [str(GENERATED / RULES_FILE)],
        "scrape_configs": [{"job_name": "fairctl-exporter", "static_configs": [{"targets": ["127.0.0.1:29100"]}]}],
    }))
    assert "SUCCESS" in promtool.check_config(config_file)


# ------------------------------------------------------------------ other configs: the tests adapt

OTHER_CONFIGS: dict[str, dict[str, Any]] = {
    "one class, reject, custom links": {
        "classes": [{"name": "jobs", "weight": 1, "max_age": "5m", "arrival_budget": 0.5}],
        "classification": [{"class": "jobs", "reason": "everything"}],
        "scheduler": {"budget_action": "reject", "budget_window": "5m", "budget_min_arrivals": 40},
        "alerts": {"runbook_url": "https://runbooks.example.com/fairctl/{alert}",
                   "dashboard_url": "https://grafana.example.com/d/fairctl?var-queue={queue}&alert={alert}",
                   "exporter_job": "queues", "rate_window": "5m", "for": {"QueueStarving": "2m"}},
    },
    "four classes, odd SLOs and thresholds": {
        "classes": [
            {"name": "p0", "weight": 5, "max_age": "45s", "reserved_slots": 1},
            {"name": "p1", "weight": 3, "max_age": "7m", "arrival_budget": 0.3},
            {"name": "p2", "weight": 2, "max_age": "2h"},
            {"name": "p3", "weight": 1, "max_age": "20m", "promote_after": "10m"},
        ],
        "classification": [{"tasks": ["a"], "class": "p0", "reason": "r0"}, {"tasks": ["b"], "class": "p1", "reason": "r1"},
                           {"tasks": ["c"], "class": "p1", "reason": "r1b"}, {"class": "p3", "reason": "rest"}],
        "alerts": {"share_tolerance": 0.3, "tenant_dominance": 0.8, "reason_shift": 0.5, "reason_baseline": "6h",
                   "stall_after": "4m", "inversion_max_depth": 0, "redelivery_ratio": 0.5,
                   "for": {"JobsRedeliveredHigh": "5m", "QueueStalled": "90s"}},
    },
    # Found by tests/test_alerts_property.py: a skewed weight the uneven-shard case could not fit,
    # a reason threshold above the case's 60% shift, QueueStalled's for: longer than the shard alert's.
    "skewed weights, high reason threshold, one minute's rate window": {
        "classes": [{"name": "p0", "weight": 24, "max_age": "45s"}, {"name": "p1", "weight": 1, "max_age": "45s"}],
        "classification": [{"tasks": ["a"], "class": "p0", "reason": "r0"}, {"class": "p1", "reason": "rest"}],
        "alerts": {"rate_window": "1m", "share_tolerance": 0.2, "reason_shift": 0.6, "reason_baseline": "1h",
                   "stall_after": "1m", "for": {"QueueStalled": "6m"}},
    },
}


@pytest.mark.parametrize("name", sorted(OTHER_CONFIGS))
def test_rules_and_unit_tests_generated_for_other_configs_pass(name: str, tmp_path: Path) -> None:
    data = {**yaml.safe_load(EXAMPLE_CONFIG.read_text()), **OTHER_CONFIGS[name]}
    generated = generate_into(parse_config(data), tmp_path)
    promtool.check_rules(generated / RULES_FILE)
    promtool_passes_generated_tests(generated, tmp_path / "pruned")


@pytest.mark.parametrize("window", ["1m", "2m"])
def test_unit_tests_generated_for_a_short_rate_window_pass(window: str, tmp_path: Path) -> None:
    """A valid config with a rate window shorter than the scenarios' usual timelines: every alert
    that holds on an event (keys evicted, state reset) still fires, and its tests fit the window."""
    generated = generate_into(parse_config(with_change("alerts.rate_window", window)), tmp_path)
    promtool.check_rules(generated / RULES_FILE)
    promtool_passes_generated_tests(generated, tmp_path / "pruned")


def test_promtool_failures_are_reported_with_what_failed(tmp_path: Path) -> None:
    generated = generate_into(load_config(EXAMPLE_CONFIG), tmp_path)
    rules = generated / RULES_FILE
    rules.write_text(rules.read_text().replace("> 0.5\n", "> 0.99\n"))  # TenantDominatingQueue's threshold
    with pytest.raises(promtool.PromtoolFailed) as failed:
        promtool_passes_generated_tests(generated, tmp_path / "pruned")
    assert "TenantDominatingQueue.yml" in failed.value.report and "QueueStarving.yml" not in failed.value.report
    assert "\n\n" not in failed.value.report
    rules.write_text("groups: [{name: x, rules: [{record: 'a b', expr: 'sum('}]}]")
    with pytest.raises(promtool.PromtoolFailed, match="promtool check rules --lint-fatal .* failed"):
        promtool.check_rules(rules)


def test_a_missing_promtool_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(promtool.PromtoolMissing, match=r"^promtool not found on PATH; install the Debian package prometheus"):
        promtool.check_rules(GENERATED / RULES_FILE)


def test_check_metrics_judges_an_exposition() -> None:
    good = f"# HELP {m.QUEUE_DEPTH.name} x\n# TYPE {m.QUEUE_DEPTH.name} gauge\n{m.QUEUE_DEPTH.name}{{queue=\"a\"}} 1\n"
    promtool.check_metrics(good)
    with pytest.raises(promtool.PromtoolFailed):
        promtool.check_metrics(f"{m.JOBS_PROCESSED.name} 1\n# TYPE {m.JOBS_PROCESSED.name} gauge\n")


# ------------------------------------------------------------------ generate --check

def test_generate_check_is_clean_on_the_committed_output() -> None:
    checked = run_fairctl("generate", "--check", "--config", EXAMPLE_CONFIG)
    assert checked.returncode == 0, checked.stderr
    assert "generated files are up to date" in checked.stdout


def test_generate_check_lists_edited_missing_and_stray_files_and_generate_repairs_them(tmp_path: Path) -> None:
    for output in OUTPUT_SETS:
        shutil.copytree(ROOT / output.directory, tmp_path / output.directory)
    generated = tmp_path / GENERATED_DIR
    edited, removed, stray = generated / runbook_file("QueueStalled"), generated / TESTS_DIR / "QueueStarving.yml", \
        generated / "runbooks" / "OldAlert.md"
    edited.write_text(edited.read_text().replace("completed none", "completed nothing"))
    removed.unlink()
    stray.write_text("# gone\n")
    checked = run_fairctl("generate", "--check", "--out", tmp_path, "--config", EXAMPLE_CONFIG)
    assert checked.returncode == 1
    assert f"{edited}: changed" in checked.stderr and f"{removed}: missing" in checked.stderr
    assert f"{stray}: not generated any more" in checked.stderr and "3 generated file(s) out of date" in checked.stderr
    assert run_fairctl("generate", "--out", tmp_path, "--config", EXAMPLE_CONFIG).returncode == 0
    assert not stray.exists() and removed.exists()
    assert run_fairctl("generate", "--check", "--out", tmp_path, "--config", EXAMPLE_CONFIG).returncode == 0


def test_generate_check_fails_when_the_config_changes_the_rules(tmp_path: Path) -> None:
    shutil.copytree(GENERATED, tmp_path / GENERATED_DIR)
    changed = tmp_path / "fairness.yaml"
    changed.write_text(yaml.safe_dump(with_change("alerts.stall_after", "20m")))
    checked = run_fairctl("generate", "--check", "--out", tmp_path, "--config", changed)
    assert checked.returncode == 1 and f"{tmp_path / GENERATED_DIR / RULES_FILE}: changed" in checked.stderr


# ------------------------------------------------------------------ the metric contract

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSETS = re.compile(r"\boffset\s+\w+")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NOT_METRICS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right",
                "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev", "stdvar"}


def metric_names(expr: str) -> set[str]:
    """The series names an expression selects (functions, operators and labels left out)."""
    text = _OFFSETS.sub("", _LABEL_LISTS.sub(r"\1", _RANGES.sub("", _MATCHERS.sub("", _STRINGS.sub('""', expr)))))
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end():].lstrip()
        if match.group() not in _NOT_METRICS and not rest.startswith("("):
            names.add(match.group())
    return names


def test_the_name_parser_sees_metrics_not_functions_labels_or_durations() -> None:
    expr = ('histogram_quantile(0.99, max without (instance, pod) (rate(a_bucket{le!="1"}[10m] offset 1d)))\n'
            '  / ignoring (queue) group_left sum by (queue) (b:c:d) > bool 0 and on() absent(e{job="f g"})')
    assert metric_names(expr) == {"a_bucket", "b:c:d", "e"}


def test_every_name_in_every_rule_and_runbook_query_is_in_the_contract_or_recorded() -> None:
    contract = {spec.name for spec in m.ALL} | {m.JOBS_WAIT.series(s) for s in ("_bucket", "_sum", "_count")}
    rules = committed_rules()
    recorded = {rule["record"] for rule in rules if "record" in rule}
    assert all(name.startswith(f"{recording.LEVEL}:") for name in recorded)
    expressions = [rule["expr"] for rule in rules] + [d.promql for d in diagnostics(load_config(EXAMPLE_CONFIG)).values()]
    used = set().union(*map(metric_names, expressions))
    assert used <= contract | recorded | {UP, ALERTS_SERIES}, used - contract - recorded
    assert {m.QUEUE_OLDEST_AGE.name, m.JOBS_PROCESSED.name, m.JOBS_WAIT.series("_bucket")} <= used


def test_no_metric_name_is_typed_in_the_alerts_sources() -> None:
    names = {spec.name for spec in m.ALL}
    sources = [p for p in (ROOT / "alerts").rglob("*") if p.suffix in (".py", ".j2")]
    assert len(sources) > 10
    for path in sources:
        typed = {name for name in names if re.search(rf"\b{re.escape(name)}\b", path.read_text())}
        assert not typed, f"{path.relative_to(ROOT)} types {typed}: use exporter.metrics"


# ------------------------------------------------------------------ every alert of the design

def test_every_design_alert_has_its_labels_annotations_and_a_for() -> None:
    # TenantsHeldPastMaxAge is generated only for a config with dispatch limits (tests/test_alerts_holds.py).
    assert set(ALERT_FOR) == set(DOCUMENTED_ALERTS) | {TENANTS_HELD_PAST_MAX_AGE}
    rules = [rule for rule in committed_rules() if "alert" in rule]
    classes = len(load_config(EXAMPLE_CONFIG).classes)
    assert [r["alert"] for r in rules] == [DOCUMENTED_ALERTS[0]] * classes + list(DOCUMENTED_ALERTS[1:])  # one QueueStarving per class
    for rule in rules:
        assert set(rule["annotations"]) == ANNOTATIONS, rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info") and rule["for"]
        assert rule["annotations"]["runbook_url"].startswith("http://127.0.0.1:3000/d/fairctl-runbooks?viewPanel=")
        assert rule["annotations"]["dashboard_url"] == (
            "http://127.0.0.1:3000/d/fairctl-overview?var-group={{ $labels.group | urlquery }}"
                "&var-queue={{ $labels.queue | urlquery }}")
        assert (GENERATED / runbook_file(rule["alert"])).is_file()
    starving = {r["labels"]["queue"]: (r["labels"]["severity"], r["for"]) for r in rules if r["alert"] == "QueueStarving"}
    assert starving == {"jobs:high": ("critical", "1m"), "jobs:medium": ("warning", "3m"), "jobs:low": ("warning", "15m")}


def test_configured_links_are_templated_per_alert_and_class() -> None:
    config = parse_config(with_change("alerts", {"runbook_url": "https://rb.example.com/fairctl/{alert}",
                                                 "dashboard_url": "https://g.example.com/d/f?var-queue={queue}"}))
    rules = yaml.safe_load(render(config)[RULES_FILE])["groups"][0]["rules"]
    stalled = next(r for r in rules if r.get("alert") == "QueueStalled")["annotations"]
    assert stalled["runbook_url"] == "https://rb.example.com/fairctl/QueueStalled"
    assert stalled["dashboard_url"] == "https://g.example.com/d/f?var-queue={{ $labels.queue | urlquery }}"


def test_every_design_alert_has_a_runbook_with_causes_actions_and_a_dashboard_section() -> None:
    for alert in DOCUMENTED_ALERTS:
        text = (GENERATED / runbook_file(alert)).read_text()
        for heading in ("## What it means", "## Tell the likely causes apart", "## What to do", "## Dashboard"):
            assert heading in text, (alert, heading)
        assert text.count("```promql") >= 2, alert
    index = (GENERATED / "runbooks" / "README.md").read_text()
    assert all(f"[{a}]({a}.md)" in index for a in DOCUMENTED_ALERTS)


def _cases(alert: str) -> tuple[Case, ...]:
    """The example config's cases for ``alert``, as generated before packing."""
    return next(f.cases for f in generated_test_files(load_config(EXAMPLE_CONFIG)) if f.name == alert)


def test_every_design_alert_has_a_firing_case_and_a_silent_control() -> None:
    for alert in DOCUMENTED_ALERTS:
        checks = [c for case in _cases(alert) for c in case.checks]
        assert {c.alert for c in checks} <= set(DOCUMENTED_ALERTS)  # a related alert may be checked beside it
        own = [c for c in checks if c.alert == alert]
        assert any(c.firing for c in own) and any(not c.firing for c in own), alert
        assert all("severity" in f.labels for c in own for f in c.firing)
        tests = yaml.safe_load((GENERATED / TESTS_DIR / f"{alert}.yml").read_text())["tests"]
        fired = [a for case in tests for c in case.get("alert_rule_test", []) if c["alertname"] == alert
                 for a in c["exp_alerts"]]  # the first firing case stays alone, with its annotations
        assert fired and all(set(a["exp_annotations"]) == ANNOTATIONS for a in fired), alert


@pytest.mark.parametrize(("alert", "control"), [
    ("QueueShareBelowWeight", "jobs:high is empty, so the others realise more than their weights: silent"),
    ("QueueStarving", "a burst drains while its oldest job is younger than the SLO: silent throughout"),
    ("TenantDominatingQueue", "the big tenant is alone in the class: silent"),
    ("PriorityMixDrift", "two exporters each see the same few arrivals"),
    ("PriorityInversion", "two exporters; jobs:high waits over its SLO with 3 jobs due: fires once"),
])
def test_the_required_controls_and_two_exporter_cases_are_there(alert: str, control: str) -> None:
    names = [case.name for case in _cases(alert)]
    assert any(name.startswith(control) for name in names), names


def test_two_exporters_in_the_test_inputs_differ_only_by_instance_and_pod() -> None:
    two = next(case for case in _cases("recording") if case.name.startswith("two exporters"))
    for label in ("instance", "pod"):
        assert len({x.labels[label] for x in two.series}) == 2
    others = {(x.name, tuple(sorted((k, v) for k, v in x.labels.items() if k not in ("instance", "pod"))))
              for x in two.series}
    assert len(others) == len(two.series) // 2


# ------------------------------------------------------------------ the annotation texts

@pytest.mark.parametrize(("value", "duration", "percent", "number"), [
    (0, "0s", "0%", "0"), (0.25, "250ms", "25%", "250m"), (45.5, "45.5s", "4550%", "45.5"),
    (119.4, "1m 59s", "1.194e+04%", "119.4"), (90061, "1d 1h 1m 1s", "9.006e+06%", "90.06k"),
    (math.inf, "+Inf", "+Inf%", "+Inf"),
])
def test_humanize_ports_write_what_prometheus_writes(value: float, duration: str, percent: str, number: str) -> None:
    assert (humanize_duration(value), humanize_percentage(value), humanize(value)) == (duration, percent, number)


def test_annotations_render_as_go_templates_and_as_expected_text() -> None:
    alert = next(a for a in build_alerts(load_config(EXAMPLE_CONFIG)) if a.name == "QueueStarving")
    assert "{{ $value | humanizeDuration }}" in alert.description.go()
    assert ('printf "fairctl:queue_max_age_seconds:max{group=%q,queue=%q}" $labels.group $labels.queue | query'
            in alert.description.go()), "the SLO of the alert's own group and class"
    text = alert.description.render({"queue": "jobs:high"}, 150, {"slo": 60})
    assert text.startswith("The oldest due job in jobs:high has waited 2m 30s; the class's SLO (max_age) is 1m 0s.")
