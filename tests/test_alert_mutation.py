"""The mutant generator of tests/alert_mutation.py on small expressions (each kind's text, label
matchers and metric names untouched, clauses dropped at the right precedence), that mutants stay
valid rules (promtool check rules), which test files see which rule, and one tiny run."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import yaml

from alerts import promtool
from alerts.layout import GENERATED_DIR, RULES_FILE, TESTS_DIR
from fairness_core.generated import yaml_text

from . import alert_mutation as mutation
from .conftest import ROOT

GENERATED = ROOT / GENERATED_DIR


def mutated(expr: str, kind: str) -> list[str]:
    return [edit.apply(expr) for edit in mutation.expression_edits(expr) if edit.kind == kind]


def rules_text(*rules: dict[str, object]) -> str:
    return yaml.safe_dump({"groups": [{"name": "g", "rules": list(rules)}]}, sort_keys=False)


def test_comparisons_flip_and_toggle_strictness_but_leave_label_matchers_alone() -> None:
    expr = 'x{a="b", c!="d", e=~"f=g", h!~">1"} >= 1'
    assert mutated(expr, "comparison") == [expr.replace(">= 1", "<= 1"), expr.replace(">= 1", "> 1")]
    assert mutated("x > bool 0", "comparison") == ["x < bool 0", "x >= bool 0"]
    assert mutated("x < y", "comparison") == ["x > y", "x <= y"]
    assert mutated("x <= y", "comparison") == ["x >= y", "x < y"]
    assert mutated("x == 0", "comparison") == ["x != 0"]
    assert mutated("x != 0", "comparison") == ["x == 0"]


def test_numbers_are_scaled_but_not_in_names_matchers_windows_or_offsets() -> None:
    expr = 'rate(x_2xx{code="500"}[10m] offset 1d) * 600 > 0'
    assert mutated(expr, "number") == [expr.replace("600", "480"), expr.replace("600", "750")]
    assert mutated("histogram_quantile(0.99, x)", "number") == ["histogram_quantile(0.792, x)",
                                                                 "histogram_quantile(1.2375, x)"]
    assert mutated("x > 0.05", "number") == ["x > 0.04", "x > 0.0625"]


def test_set_clauses_are_dropped_with_their_right_operand_by_precedence() -> None:
    assert mutated("a > 0 and b unless c > 0", "clause") == ["a > 0 unless c > 0", "a > 0 and b"]
    # or binds loosest: dropping it takes the whole and-chain on its right.
    assert mutated("a or b and c", "clause") == ["a", "a or b"]
    assert mutated("a and b or c", "clause") == ["a or c", "a and b"]


def test_parenthesised_clauses_are_dropped_inside_their_parentheses() -> None:
    expr = "(\na > 0.5\n  or\nb > 0.5\n  and on (q, t)\nc\n)\n  and ignoring (t)\nd >= 2"
    assert mutated(expr, "clause") == [
        "(\na > 0.5\n)\n  and ignoring (t)\nd >= 2",
        "(\na > 0.5\n  or\nb > 0.5\n)\n  and ignoring (t)\nd >= 2",
        "(\na > 0.5\n  or\nb > 0.5\n  and on (q, t)\nc\n)",
    ]
    assert mutated("sum(a unless b) > 0", "clause") == ["sum(a) > 0"]


def test_grouping_and_matching_lists_lose_one_label_or_swap_keyword() -> None:
    assert mutated("sum without (shard, pod) (x)", "grouping") == [
        "sum by (shard, pod) (x)", "sum without (pod) (x)", "sum without (shard) (x)"]
    assert mutated("a / ignoring (queue) group_left b", "matching") == [
        "a / on (queue) group_left b", "a / ignoring () group_left b"]
    assert mutated("a and on (q) b", "matching") == ["a and ignoring (q) b", "a and on () b"]


def test_range_windows_are_halved() -> None:
    assert mutated('min_over_time(x{a="b"}[10m])', "window") == ['min_over_time(x{a="b"}[5m])']
    assert mutated("max_over_time(x[1h:1m])", "window") == ["max_over_time(x[30m:1m])"]
    assert mutated("x offset 10m > 0", "window") == []


def test_for_moves_by_one_interval_and_a_zero_for_is_only_lengthened() -> None:
    text = rules_text({"record": "r", "expr": "x"}, {"alert": "A", "expr": "r", "for": "15m"},
                      {"alert": "B", "expr": "r", "for": "0s"}, {"alert": "C", "expr": "r", "for": "1m"})
    fors = {(x.rule.name, x.body["for"]) for x in mutation.mutants(text) if x.kind == "for"}
    assert fors == {("A", "14m"), ("A", "16m"), ("B", "1m"), ("C", "0s"), ("C", "2m")}


def test_mutants_have_unique_ids_and_readable_descriptions() -> None:
    text = rules_text(*[{"alert": "Starving", "expr": f'age{{queue="{q}"}} > 0', "for": "1m", "labels": {"queue": q}}
                        for q in ("high", "low")],
                      {"alert": "Dominating", "expr": "share > 0.5", "for": "15m"})
    found = {x.id: x.description for x in mutation.mutants(text)}
    assert found["Dominating:comparison:2"] == "Dominating: '> 0.5' -> '>= 0.5'"
    assert found["Starving[low]:for:1"] == "Starving[low]: 'for: 1m' -> 'for: 0s'"
    assert len(found) == len(mutation.mutants(text))


def test_mutants_of_the_committed_rules_are_valid_rules_files(tmp_path: Path) -> None:
    """Every dropped clause (the edit most likely to break the syntax) and the first of each other
    kind; all of them would take promtool a minute on a loaded machine."""
    text = (GENERATED / RULES_FILE).read_text()
    document, _ = mutation.load_rules(text)
    everything = mutation.mutants(text)
    firsts = {mutant.kind: mutant for mutant in reversed(everything)}
    chosen = [x for x in everything if x.kind == "clause"] + [x for k, x in firsts.items() if k != "clause"]
    files = []
    for index, mutant in enumerate(chosen):
        files.append(tmp_path / f"{index}.yml")
        files[-1].write_text(yaml_text(mutation.mutated(document, mutant)))
    assert "FAILED" not in promtool.check_rules(*files)


def test_a_recording_is_seen_by_the_tests_of_every_alert_reading_it_even_through_other_recordings() -> None:
    _, rules = mutation.load_rules((GENERATED / RULES_FILE).read_text())
    seen_by = mutation.visibility(rules, mutation.load_tests(GENERATED))
    assert seen_by["QueueStarving"] == ["QueueStarving.yml"]
    assert {"QueueStarving.yml", "QuietTenantsStarving.yml", "PriorityInversion.yml",
            "recording.yml"} <= set(seen_by["fairctl:queue_max_age_seconds:max"])
    # QueueShareBelowWeight reads it only through fairctl:queue_weight_ratio:backlogged.
    assert "QueueShareBelowWeight.yml" in seen_by["fairctl:queue_depth:backlogged"]
    assert "QueueStarving.yml" not in seen_by["fairctl:queue_depth:backlogged"]


def test_a_test_file_runs_against_only_the_rules_its_checks_read_in_their_order() -> None:
    document, _ = mutation.load_rules((GENERATED / RULES_FILE).read_text())
    tests = mutation.load_tests(GENERATED)
    kept = [mutation.rule_name(b) for b in mutation.pruned(document, tests["QueueShareBelowWeight.yml"])["groups"][0]["rules"]]
    assert "QueueShareBelowWeight" in kept and "fairctl:queue_weight_ratio:backlogged" in kept
    assert "fairctl:queue_depth:backlogged" in kept  # read through the weight ratio
    assert "RedisMemoryHigh" not in kept and "QueueStarving" not in kept
    everything = [mutation.rule_name(b) for b in document["groups"][0]["rules"]]
    assert kept == [name for name in everything if name in kept]
    # An alert reading ALERTS keeps itself; a check on ALERTS{alertname=...} keeps that alert.
    dominating = mutation.pruned(document, tests["TenantDominatingQueue.yml"])["groups"][0]["rules"]
    assert "TenantDominatingQueue" in [b.get("alert") for b in dominating]


def test_equivalents_match_ids_or_patterns() -> None:
    listed = {"A:number:*": "integer counts"}
    assert mutation.equivalence("A:number:3", listed) == "integer counts"
    assert mutation.equivalence("A:comparison:1", listed) is None


def test_every_listed_equivalent_names_a_mutant_of_the_committed_rules() -> None:
    ids = [mutant.id for mutant in mutation.mutants((GENERATED / RULES_FILE).read_text())]
    assert [pattern for pattern in mutation.EQUIVALENTS if not fnmatch.filter(ids, pattern)] == []


def test_a_run_kills_what_the_tests_pin_and_reports_the_survivors(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / RULES_FILE).write_text(rules_text({"alert": "High", "expr": "x > 1", "for": "0s"}))
    (tmp_path / TESTS_DIR).mkdir()
    test = {"rule_files": [f"../{RULES_FILE}"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": "x", "values": "1 2"}],
        "alert_rule_test": [{"eval_time": "0m", "alertname": "High", "exp_alerts": []},
                            {"eval_time": "1m", "alertname": "High", "exp_alerts": [{"exp_labels": {}}]}]}]}
    (tmp_path / TESTS_DIR / "High.yml").write_text(yaml.safe_dump(test))
    assert mutation.main(["--dir", str(tmp_path), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    # x=1 then 2: '>= 1' fires at 0m (killed), '< 1' never (killed), '> 0.8' fires at 0m (killed),
    # '> 1.25' still fires only at 2 (survives), 'for: 1m' misses 1m (killed).
    assert "score: 4/5 killed = 80.0%" in out
    assert "High:number:2  High: '> 1' -> '> 1.25'" in out


# Survivors of the committed rules no test kills yet: gaps in the generated tests, not
# equivalences (those are on mutation.EQUIVALENTS). The list only shrinks: a new survivor means a
# test lost its bite, and a listed one that is killed now must leave the list.
OPEN_SURVIVORS: frozenset[str] = frozenset()


SHARDS = 3  # the run split over the suite's workers (tests/conftest.py spreads this module's tests)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_mutant_of_the_committed_rules_survives_but_the_listed_ones(shard: int) -> None:
    text = (GENERATED / RULES_FILE).read_text()
    every = mutation.mutants(text, mutation.evaluation_intervals(mutation.load_tests(GENERATED)))
    selected = every[shard::SHARDS]
    outcomes = mutation.run(GENERATED, selected, jobs=1)
    survived = {o.mutant.id for o in outcomes if o.status == "survived"}
    listed = OPEN_SURVIVORS & {x.id for x in selected}
    assert [o.mutant.id for o in outcomes if o.status == "invalid"] == []
    assert sorted(survived - listed) == [], "new survivors: add a boundary case in alerts/unittests.py"
    assert sorted(listed - survived) == [], "killed now: take them off OPEN_SURVIVORS"
