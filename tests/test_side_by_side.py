"""Cases packed side by side in one promtool group keep their verdicts: each sees only its own
series, a wrong expectation in any of them still fails promtool, and the cases that must stay
alone (the first firing one, those without a ``group`` label) do."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from alerts import promtool
from alerts.layout import GENERATED_DIR, TESTS_DIR
from alerts.side_by_side import PACKED_NAME, arranged, within
from alerts.unittest_cases import Case, Check, Firing, Series
from alerts.unittests import document
from alerts.unittests import test_files as generated_test_files
from fairness_core import load_config

from .conftest import EXAMPLE_CONFIG, ROOT

GROUPED = {"job": "j", "group": "fq", "shard": "fq"}


def case(name: str, *, fires: bool = False, grouped: bool = True) -> Case:
    labels = GROUPED if grouped else {"job": "j"}
    firing = (Firing({**labels, "severity": "page"}, 1),) if fires else ()
    return Case(name, (Series("x", labels, "1x5"),), (Check(5, "A", firing),))


def test_the_first_firing_case_and_ungrouped_ones_stay_alone_the_rest_are_packed() -> None:
    silent, fires, fires_too, ungrouped, also_silent = (
        case("silent"), case("fires", fires=True), case("fires too", fires=True), case("up", grouped=False),
        case("also silent"))
    groups = arranged((silent, fires, fires_too, ungrouped, also_silent))
    assert groups[:2] == (fires, ungrouped)
    (packed,) = groups[2:]
    assert packed.name.startswith(PACKED_NAME) and "#1: silent" in packed.name and "#5: also silent" in packed.name
    assert {x.labels["group"] for x in packed.series} == {"fq#1", "fq#3", "fq#5"}
    assert {x.labels["shard"] for x in packed.series} == {"fq#1", "fq#3", "fq#5"}
    (on_three,) = [chk for chk in packed.expr_checks if 'group=~".*#3"' in chk.record]
    assert [s.labels for s in on_three.samples] == [
        {"job": "j", "group": "fq#3", "shard": "fq#3", "severity": "page", "alertname": "A", "alertstate": "firing"}]
    # One packable case alone gains nothing: the file stays as it was.
    assert arranged((fires, silent, ungrouped)) == (fires, silent, ungrouped)


@pytest.mark.parametrize(("selector", "scoped"), [
    ("fairctl:queue_depth:max", 'fairctl:queue_depth:max{group=~".*#2"}'),
    ('ALERTS{alertname="A"}', 'ALERTS{group=~".*#2", alertname="A"}'),
    ('max without (alertstate) (ALERTS{alertname="A"})', 'max without (alertstate) (ALERTS{group=~".*#2", alertname="A"})'),
])
def test_a_packed_check_reads_only_its_own_case(selector: str, scoped: str) -> None:
    assert within(selector, 2) == scoped


def test_an_expression_without_a_selector_is_refused() -> None:
    with pytest.raises(ValueError, match="reads no series selector"):
        within("vector(1)", 2)


def test_a_wrong_expectation_in_any_packed_case_still_fails_promtool(tmp_path: Path) -> None:
    """Each packed silent check of QueueStalled turned into 'fires' fails promtool, naming its case:
    the packed checks bite as the alert_rule_test they replace did."""
    shutil.copytree(ROOT / GENERATED_DIR, tmp_path / GENERATED_DIR)
    config = load_config(EXAMPLE_CONFIG)
    (stalled,) = [f for f in generated_test_files(config) if f.name == "QueueStalled"]
    headline = next(c for c in stalled.cases if any(chk.firing for chk in c.checks))
    expected = next(chk.firing for chk in headline.checks if chk.firing)
    planted = 0
    for number, original in enumerate(stalled.cases, 1):
        silent = [i for i, chk in enumerate(original.checks) if not chk.firing and chk.alert == stalled.name]
        if original is headline or not silent:
            continue
        checks = list(original.checks)
        checks[silent[-1]] = replace(checks[silent[-1]], firing=expected)
        cases = tuple(replace(original, checks=tuple(checks)) if c is original else c for c in stalled.cases)
        path = tmp_path / GENERATED_DIR / TESTS_DIR / "planted.yml"
        path.write_text(yaml.safe_dump(document(config, replace(stalled, cases=cases))))
        with pytest.raises(promtool.PromtoolFailed, match=f'#{number}'):
            promtool.test_rules(path)
        planted += 1
    assert planted >= 3
