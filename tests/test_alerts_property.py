"""Every valid config generates rules whose promtool unit tests pass: random configs (rate window
and exporter window from 1m to 1h, for: durations, thresholds, one to four classes and their weights) rendered and run
through the real ``promtool test rules``, as ``fairctl check`` does, down to the shortest
``alerts.reason_baseline`` the config accepts."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts import promtool
from alerts.config import ALERT_FOR
from alerts.layout import RULES_FILE
from alerts.output import render
from fairness_core import parse_config

from .conftest import EXAMPLE_CONFIG
from .support import promtool_passes_generated_tests

EXAMPLE = yaml.safe_load(EXAMPLE_CONFIG.read_text())
MAX_AGES = ("45s", "1m", "5m", "15m", "1h", "2h")
BUDGET_WINDOW_M = 10  # the example's scheduler.budget_window, which the configs keep


def minutes(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: f"{n}m")


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    n = draw(st.integers(1, 4))
    names = [f"p{i}" for i in range(n)]
    data["classes"] = [{"name": name, "weight": draw(st.integers(1, 100)), "max_age": draw(st.sampled_from(MAX_AGES))}
                       for name in names]
    data["classification"] = ([{"tasks": [f"t{i}"], "class": name, "reason": f"r{i}"} for i, name in enumerate(names)]
                              + [{"class": names[-1], "reason": "rest"}])
    window = draw(st.integers(1, 60))
    fors = draw(st.dictionaries(st.sampled_from(sorted(ALERT_FOR)), st.integers(1, 30), max_size=6))
    reason_for = fors.get("PriorityReasonShift", int((ALERT_FOR["PriorityReasonShift"] or 0) // 60))
    data["alerts"] = {
        **data["alerts"],
        "rate_window": f"{window}m",
        # Longer than the window and than the budget window plus the alert's for:, as the config
        # demands, from the shortest it accepts; kept short so PriorityReasonShift's test stays quick.
        "reason_baseline": f"{max(window, BUDGET_WINDOW_M + reason_for) + draw(st.integers(1, 120))}m",
        "share_tolerance": draw(st.sampled_from([0.2, 0.3, 0.5, 0.8])),
        "tenant_dominance": draw(st.sampled_from([0.3, 0.5, 0.75, 0.9, 0.99])),
        "tenant_min_jobs": draw(st.sampled_from([1, 20, 500])),
        "reason_shift": draw(st.sampled_from([0.1, 0.3, 0.6])),
        "redelivery_ratio": draw(st.sampled_from([0.01, 0.05, 0.5])),
        "memory_warning": draw(st.sampled_from([0.5, 0.8, 0.85])),
        "stall_after": draw(minutes(1, 30)),
        "inversion_max_depth": draw(st.integers(0, 10)),
        "for": {name: f"{n}m" for name, n in fors.items()},
    }
    data["exporter"] = {**data["exporter"], "window": draw(minutes(1, 60))}
    return data


def test_every_for_at_its_shortest_generates_unit_tests_that_pass() -> None:
    """The edge a random draw reaches only by chance: each case that moves or stops its series a
    minute before ``for:`` runs out still starts at minute 0 when ``for:`` is 1m."""
    data = copy.deepcopy(EXAMPLE)
    data["alerts"] = {**data["alerts"], "for": {name: "1m" for name, seconds in ALERT_FOR.items() if seconds}}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for path, text in render(parse_config(data)).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        promtool_passes_generated_tests(root, Path(scratch) / "pruned")


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=configs())
def test_every_valid_config_generates_unit_tests_that_pass(data: dict[str, Any]) -> None:
    config = parse_config(data)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for path, text in render(config).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        promtool.check_rules(root / RULES_FILE)
        promtool_passes_generated_tests(root, Path(scratch) / "pruned")

