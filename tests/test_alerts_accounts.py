"""The alerts under accounts (``tenants.account_separator``): AccountDominatingQueue in
TenantDominatingQueue's place, judged on the account shares, its rules and generated unit tests
passing promtool; and without a separator, nothing of accounts anywhere in the output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import promtool, recording
from alerts.layout import RULES_FILE, TESTS_DIR, runbook_file
from alerts.rules import ACCOUNT_DOMINATING_QUEUE, TENANT_DOMINATING_QUEUE
from exporter import metrics as m
from fairness_core import parse_config

from . import alert_mutation as mutation
from .conftest import EXAMPLE_CONFIG
from .support import promtool_passes_generated_tests
from .test_alerts import GENERATED, OTHER_CONFIGS, generate_into


def with_accounts(**tenants: Any) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return {**data, "tenants": {**data.get("tenants", {}), "account_separator": "/", **tenants}}


def rules_by_name(generated: Path) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((generated / RULES_FILE).read_text())["groups"]
    return {rule.get("alert") or rule["record"]: rule for group in groups for rule in group["rules"]}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_into(parse_config(with_accounts()), tmp_path_factory.mktemp("accounts"))


def test_accounts_replace_the_tenant_dominance_alert(generated: Path) -> None:
    rules = rules_by_name(generated)
    assert ACCOUNT_DOMINATING_QUEUE in rules and TENANT_DOMINATING_QUEUE not in rules
    expr = rules[ACCOUNT_DOMINATING_QUEUE]["expr"]
    share = recording.basis(parse_config(with_accounts())).share_of(recording.ACCOUNTS)
    assert share in expr and f"{recording.ACTIVE_ACCOUNTS} >= 2" in expr
    assert f'ALERTS{{alertname="{ACCOUNT_DOMINATING_QUEUE}"}}' in expr and "tenant_share" not in expr
    assert rules[ACCOUNT_DOMINATING_QUEUE]["for"] == "15m"  # TenantDominatingQueue's
    assert {share, recording.ACTIVE_ACCOUNTS} <= set(rules)
    assert rules[share]["expr"].count(m.QUEUE_ACCOUNT_SHARE.name) == 1
    assert "$labels.account" in rules[ACCOUNT_DOMINATING_QUEUE]["annotations"]["summary"]
    assert (generated / runbook_file(ACCOUNT_DOMINATING_QUEUE)).is_file()
    assert not (generated / runbook_file(TENANT_DOMINATING_QUEUE)).exists()
    assert (generated / TESTS_DIR / f"{ACCOUNT_DOMINATING_QUEUE}.yml").is_file()
    assert not (generated / TESTS_DIR / f"{TENANT_DOMINATING_QUEUE}.yml").exists()


def test_quiet_tenants_starving_reads_the_quiet_accounts_age(generated: Path) -> None:
    """A flooding account's keys are each a sliver of the class, so each passes as a quiet tenant:
    with accounts the alert reads the accounts' figure, and its generated cases hold it silent while
    only those keys are old."""
    rule = rules_by_name(generated)["QuietTenantsStarving"]
    assert m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name in rule["expr"] and recording.QUIET_AGE not in rule["expr"]
    assert "Quiet accounts" in rule["annotations"]["summary"]
    tests = yaml.safe_load((generated / TESTS_DIR / "QuietTenantsStarving.yml").read_text())["tests"]
    assert any("the noisy account's own backlog is old" in test["name"] for test in tests)


def test_the_account_runbook_says_what_to_do(generated: Path) -> None:
    runbook = (generated / runbook_file(ACCOUNT_DOMINATING_QUEUE)).read_text()
    for words in ("TenantDominatingQueue", "tenants.account_max_queued", "tenants.account_max_rate",
                  "tenants.tiers", m.QUEUE_ACCOUNT_SHARE.name, recording.ACTIVE_ACCOUNTS):
        assert words in runbook, words


def test_the_generated_cases_hold_the_key_flood_and_the_small_accounts(generated: Path) -> None:
    tests = yaml.safe_load((generated / TESTS_DIR / f"{ACCOUNT_DOMINATING_QUEUE}.yml").read_text())["tests"]
    names = " ".join(t["name"] for t in tests)
    assert "a 200-key flood" in names and "200 small accounts" in names
    flood = next(t for t in tests if t["name"].startswith("a 200-key flood"))  # alone: exact labels
    (fired,) = [a for check in flood["alert_rule_test"] for a in check["exp_alerts"]]
    assert fired["exp_labels"]["account"] == "bigco" and "tenant" not in fired["exp_labels"]
    assert "Account bigco takes most of" in fired["exp_annotations"]["summary"]
    # The keys' shares are served beside the accounts', each far under the threshold.
    keys = [x for x in flood["input_series"] if x["series"].startswith("queue_tenant_share_ratio{")]
    assert keys and all('tenant="bigco/key-' in x["series"] and x["values"].startswith("0.0045x") for x in keys)
    # The tenant level's hysteresis, evidence and boundary cases, judged per account.
    for case in ("an account exactly at the entry margin", "falls to exactly the threshold: it resolves",
                 "under the entry margin: it keeps firing", "take turns", "(tenant_min_jobs): pending",
                 "too few to judge", "2.1 times its share's noise", "account-big dominates"):
        assert case in names, case


def test_promtool_accepts_the_rules_and_passes_the_tests_generated_under_accounts(generated: Path,
                                                                                   tmp_path: Path) -> None:
    assert "SUCCESS" in promtool.check_rules(generated / RULES_FILE)
    promtool_passes_generated_tests(generated, tmp_path / "pruned")


@pytest.mark.slow  # a mutation run, as tests/test_alert_mutation.py's: out of the fast tier
def test_no_mutant_of_the_account_rules_survives(generated: Path) -> None:
    """The account alert and the recordings only it reads are pinned as the tenant ones are (the
    active-count '>= 2' as '>= 1.6' is listed equivalent, as for tenants)."""
    share = recording.basis(parse_config(with_accounts())).share_of(recording.ACCOUNTS)
    assert mutation.not_killed(generated, {ACCOUNT_DOMINATING_QUEUE, share, recording.ACTIVE_ACCOUNTS}) == {}


def test_the_account_cases_adapt_to_other_thresholds_and_to_runtime_charge(tmp_path: Path) -> None:
    """tenant_dominance 0.8 (the flood still clears its entry margin) and shares of worker time."""
    data = {**with_accounts(), **OTHER_CONFIGS["four classes, odd SLOs and thresholds"]}
    data["scheduler"] = {**data.get("scheduler", {}), "charge": "runtime"}
    generated = generate_into(parse_config(data), tmp_path)
    share = recording.BASES["runtime"].share_of(recording.ACCOUNTS)
    assert share == "fairctl:queue_worker_seconds:account_share"
    assert share in rules_by_name(generated)[ACCOUNT_DOMINATING_QUEUE]["expr"]
    promtool.check_rules(generated / RULES_FILE)
    promtool_passes_generated_tests(generated, tmp_path / "pruned")


def test_without_a_separator_nothing_mentions_accounts() -> None:
    committed = [p for p in GENERATED.rglob("*") if p.is_file()]
    assert len(committed) > 20
    for path in committed:
        text = path.read_text()
        assert ACCOUNT_DOMINATING_QUEUE not in text and "account" not in text.lower(), path
