"""The alerts under dispatch limits (``tenants.max_in_flight``, ``dispatch_rate`` and the account
forms): TenantsHeldPastMaxAge with its recordings, runbook, the starvation runbooks' cause and
unit tests passing promtool, for the reasons the config's limits give; and without such a limit
(the example config) or for a watched system, nothing of it anywhere in the output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import promtool, recording
from alerts import rules as r
from alerts.layout import RULES_FILE, TESTS_DIR, runbook_file
from exporter import metrics as m
from exporter.sources import QueueRef, WatchConfig
from fairness_core import parse_config

from . import alert_mutation as mutation
from .conftest import EXAMPLE_CONFIG, make_config
from .support import promtool_passes_generated_tests
from .test_alerts import GENERATED, OTHER_CONFIGS, generate_into
from .test_alerts_accounts import rules_by_name

ALERT = r.TENANTS_HELD_PAST_MAX_AGE


def with_limits(**tenants: Any) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    limits = tenants or {"max_in_flight": 50, "overrides": {"acme": {"dispatch_rate": "5/s"}}}
    return {**data, "tenants": {**data.get("tenants", {}), **limits}}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_into(parse_config(with_limits()), tmp_path_factory.mktemp("holds"))


def test_limits_add_the_alert_and_the_held_recordings(generated: Path) -> None:
    rules = rules_by_name(generated)
    assert {ALERT, recording.HELD_TENANTS, recording.HELD_JOBS} <= set(rules)
    expr = rules[ALERT]["expr"]
    assert expr.startswith(f"{recording.HELD_JOBS} > 0\n  and ignoring ({m.REASON})\n")
    assert f"{recording.OLDEST_AGE} > {recording.MAX_AGE}" in expr
    assert f"unless ignoring ({m.REASON})\n{recording.PAUSED} > 0" in expr
    assert rules[ALERT]["for"] == "5m" and rules[ALERT]["labels"]["severity"] == "warning"
    assert "$labels.reason" in rules[ALERT]["annotations"]["summary"]
    assert rules[recording.HELD_JOBS]["expr"].count(m.QUEUE_HELD_JOBS.name) == 1
    assert (generated / TESTS_DIR / f"{ALERT}.yml").is_file()
    index = (generated / runbook_file(ALERT)).parent / "README.md"
    assert f"[{ALERT}]({ALERT}.md)" in index.read_text()


def test_the_runbook_says_what_the_series_mean_how_to_see_why_and_what_to_change(generated: Path) -> None:
    runbook = (generated / runbook_file(ALERT)).read_text()
    for words in ("### Tenants held by their limits", m.QUEUE_HELD_TENANTS.name, m.QUEUE_HELD_JOBS.name,
                  recording.HELD_JOBS, "`account_cap`", "fairctl explain --tenant", "tenants.overrides.<tenant>",
                  "tenants.limits.<tier>", "tenants.account_max_in_flight", "fairctl config apply fairness.yaml",
                  "[QueueStarving](QueueStarving.md)", "[TenantAtLimit](TenantAtLimit.md)"):
        assert words in runbook, words
    # The starvation runbooks name the limits as a cause, only when the config sets some.
    for alert in (r.QUEUE_STARVING, r.QUIET_TENANTS_STARVING):
        assert f"[{ALERT}]({ALERT}.md)" in (generated / runbook_file(alert)).read_text(), alert
        assert ALERT not in (GENERATED / runbook_file(alert)).read_text(), alert


def test_promtool_accepts_the_rules_and_passes_the_tests_generated_under_limits(generated: Path,
                                                                                 tmp_path: Path) -> None:
    assert "SUCCESS" in promtool.check_rules(generated / RULES_FILE)
    promtool_passes_generated_tests(generated, tmp_path / "pruned")
    tests = yaml.safe_load((generated / TESTS_DIR / f"{ALERT}.yml").read_text())["tests"]
    (first, *_) = tests
    fired = [a for check in first["alert_rule_test"] for a in check["exp_alerts"]]
    assert fired and {a["exp_labels"]["reason"] for a in fired} == {"cap"}  # the config's first reason
    assert "60 jobs of jobs:high wait queued" in fired[0]["exp_annotations"]["description"]
    assert "(3 held)" in fired[0]["exp_annotations"]["description"]


def test_the_cases_take_the_reasons_an_account_only_config_gives(tmp_path: Path) -> None:
    """Limits on accounts alone: the cases hold accounts (account_rate), and pass promtool, also for
    the odd SLOs of another config (a 45 s class first)."""
    data = {**with_limits(account_separator="/", account_dispatch_rate="20/s"),
            **OTHER_CONFIGS["four classes, odd SLOs and thresholds"]}
    generated = generate_into(parse_config(data), tmp_path / "accounts")
    tests = yaml.safe_load((generated / TESTS_DIR / f"{ALERT}.yml").read_text())["tests"]
    series = {x["series"] for t in tests for x in t["input_series"] if x["series"].startswith(m.QUEUE_HELD_JOBS.name)}
    assert series and all('reason="account_rate"' in x for x in series)
    document = yaml.safe_load((generated / RULES_FILE).read_text())
    pruned = tmp_path / "pruned"
    (pruned / TESTS_DIR).mkdir(parents=True)
    (pruned / RULES_FILE).write_text(yaml.safe_dump(mutation.pruned(document, {"tests": tests})))
    (pruned / TESTS_DIR / f"{ALERT}.yml").write_text((generated / TESTS_DIR / f"{ALERT}.yml").read_text())
    promtool.test_rules(pruned / TESTS_DIR / f"{ALERT}.yml")


@pytest.mark.slow  # a mutation run, as tests/test_alert_mutation.py's: out of the fast tier
def test_no_mutant_of_the_held_rules_survives(generated: Path) -> None:
    assert mutation.not_killed(generated, {ALERT, recording.HELD_TENANTS, recording.HELD_JOBS}) == {}


def test_without_limits_nothing_mentions_holds() -> None:
    committed = [p for p in GENERATED.rglob("*") if p.is_file()]
    assert len(committed) > 20
    for path in committed:
        text = path.read_text()
        for words in (ALERT, m.QUEUE_HELD_TENANTS.name, m.QUEUE_HELD_JOBS.name, "Tenants held by their limits",
                      "dispatch limit"):
            assert words not in text, (path, words)
    assert ALERT not in r.left_out(make_config()), "not left out: no config without limits has it"


def test_a_watched_system_with_limits_gets_no_held_alert() -> None:
    """A watched job system supplies no held series (fairctl's limits do not hold its jobs)."""
    config = make_config(tenants={"max_in_flight": 3})
    watching = config.with_section("watch", WatchConfig(system="celery", classes={
        name: (QueueRef(name.replace(":", "-")),) for name in config.class_names}))
    assert ALERT in {a.name for a in r.every_alert(watching)}
    assert ALERT not in {a.name for a in r.build_alerts(watching)} and ALERT in r.left_out(watching)
    assert recording.HELD_JOBS not in {x.name for x in recording.recording_rules(watching)}
