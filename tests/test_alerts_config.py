"""The config's ``alerts:`` section and the classes' expected load: every invalid value is named by its path."""

from __future__ import annotations

from typing import Any

import pytest

from alerts.config import ALERT_FOR, AlertsConfig, alert_settings
from fairness_core import Model, load_config, parse_config
from fairness_core.config import OVER_BUDGET_REASON

from . import test_config
from .conftest import EXAMPLE_CONFIG
from .test_config import with_change


def test_the_example_sets_the_alerts_section_and_expected_load() -> None:
    config = load_config(EXAMPLE_CONFIG)
    alerts = alert_settings(config)
    assert alerts.rate_window == 600 and alerts.share_tolerance == 0.5
    assert alerts.reason_baseline == 86400 and alerts.worker_slots == 40
    assert alerts.runbook_url is None and dict(alerts.for_durations) == dict(ALERT_FOR)
    low = config.classes[2]
    assert low.arrival_rate == pytest.approx(500 / 60) and low.service_time == 0.5


def test_without_an_alerts_section_every_default_applies() -> None:
    data = with_change("alerts", "~")
    for cls in data["classes"]:
        cls.pop("arrival_rate"), cls.pop("service_time")
    config = parse_config(data)
    assert alert_settings(config) == AlertsConfig()
    assert all(c.arrival_rate is None and c.service_time is None for c in config.classes)


@pytest.mark.parametrize(("text", "per_second"), [(8, 8.0), (0.5, 0.5), ("500/m", 500 / 60), ("8/s", 8.0),
                                                  ("1000/h", 1000 / 3600), ("2.5 / d", 2.5 / 86400)])
def test_arrival_rates(text: Any, per_second: float) -> None:
    config = parse_config(with_change("classes.1.arrival_rate", text))
    assert config.classes[1].arrival_rate == pytest.approx(per_second)


def test_for_overrides_merge_with_the_defaults() -> None:
    config = parse_config(with_change("alerts.for", {"QueueStalled": "10m", "QueueStarving": "2m"}))
    assert alert_settings(config).for_durations["QueueStalled"] == 600
    assert alert_settings(config).for_durations["QueueStarving"] == 120
    assert alert_settings(config).for_durations["PriorityInversion"] == ALERT_FOR["PriorityInversion"]


@pytest.mark.parametrize(
    ("path", "value", "where", "what"),
    [
        ("alerts.share_tolerance", 0, "alerts.share_tolerance", "fraction in (0, 1)"),
        ("alerts.share_tolerance", 1, "alerts.share_tolerance", "fraction in (0, 1)"),
        ("alerts.tenant_dominance", "half", "alerts.tenant_dominance", "fraction in (0, 1)"),
        ("alerts.reason_shift", True, "alerts.reason_shift", "fraction in (0, 1)"),
        ("alerts.redelivery_ratio", 1.5, "alerts.redelivery_ratio", "fraction in (0, 1)"),
        ("alerts.rate_window", "10", "alerts.rate_window", "expected a duration"),
        ("alerts.stall_after", "0s", "alerts.stall_after", "longer than zero"),
        ("alerts.reason_baseline", "5m", "alerts.reason_baseline", "longer than alerts.rate_window"),
        ("alerts.reason_baseline", "40m", "alerts.reason_baseline", "plus PriorityReasonShift's for: (40m)"),
        ("alerts.inversion_max_depth", -1, "alerts.inversion_max_depth", "between 0 and"),
        ("alerts.worker_slots", 0, "alerts.worker_slots", "between 1 and"),
        ("alerts.exporter_job", "", "alerts.exporter_job", "non-empty string"),
        ("alerts.runbook_url", "https://x/{alert", "alerts.runbook_url", "not a valid template"),
        ("alerts.runbook_url", "https://x/{name}", "alerts.runbook_url", "unknown placeholder {name}"),
        ("alerts.runbook_url", "https://x/{alert!r}", "alerts.runbook_url", "unknown placeholder {alert}"),
        ("alerts.dashboard_url", "https://x/d?q=$queue", "alerts.dashboard_url", "without spaces or $"),
        ("alerts.dashboard_url", "https://x/ d", "alerts.dashboard_url", "without spaces"),
        ("alerts.for", {"QueueStaled": "5m"}, "alerts.for.QueueStaled", "unknown alert"),
        ("alerts.for", {"QueueStalled": 5}, "alerts.for.QueueStalled", "expected a duration"),
        ("alerts.for", ["QueueStalled"], "alerts.for", "mapping of alert name to duration"),
        ("alerts.colour", "red", "alerts.colour", "unknown key"),
        ("alerts", [], "alerts", "expected a mapping"),
        ("classes.0.arrival_rate", "fast", "classes[0].arrival_rate", "such as 500/m"),
        ("classes.0.arrival_rate", 0, "classes[0].arrival_rate", "more than zero"),
        ("classes.0.arrival_rate", "5/w", "classes[0].arrival_rate", "such as 500/m"),
        ("classes.0.arrival_rate", "~", "classes[0].arrival_rate", "go together"),
        ("classes.0.service_time", "~", "classes[0].service_time", "go together"),
        ("classes.0.service_time", 2, "classes[0].service_time", "expected a duration"),
        ("classification.4.reason", OVER_BUDGET_REASON, "classification[4].reason", "reserved"),
    ],
)
def test_invalid_values_name_the_field(path: str, value: Any, where: str, what: str) -> None:
    test_config.test_invalid_values_name_the_field(path, value, where, what)


def test_the_reserved_reason_is_the_one_the_scheduler_demotes_with() -> None:
    config = parse_config(with_change("scheduler.budget_min_arrivals", 1))
    model = Model(config)
    outcomes = [model.submit(1000 + i, "password_reset", "acme") for i in range(20)]
    assert {o.reason for o in outcomes if o.queue == "jobs:medium"} == {OVER_BUDGET_REASON}
