"""fairness.yaml loading: the example is valid, and every invalid value is named by its path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from fairness_core import ConfigError, classify, load_config, parse_config, parse_duration

from .conftest import EXAMPLE_CONFIG

EXAMPLE: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())


def with_change(path: str, value: Any) -> dict[str, Any]:
    """The example with one value replaced; ``path`` like ``classes.2.weight`` (``~`` deletes)."""
    data = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value == "~":
        del node[key]
    else:
        node[key] = value
    return data


def test_example_config_loads_into_frozen_typed_objects() -> None:
    config = load_config(EXAMPLE_CONFIG)
    assert config.class_names == ("jobs:high", "jobs:medium", "jobs:low")
    assert [c.weight for c in config.classes] == [70, 20, 10]
    assert config.classes[0].max_age == 60 and config.classes[2].promote_after == 1800
    assert config.scheduler.policy == "weighted-fair"
    assert config.leases.visibility_timeout == 300
    assert dict(config.tenants.tiers) == {"enterprise": 6, "pro": 3, "free": 1}
    with pytest.raises(AttributeError):
        config.classes[0].weight = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("task", "tier", "user_waiting", "queue", "reason"),
    [
        ("password_reset", "free", False, "jobs:high", "a human is blocked on this"),
        ("2fa_code", "enterprise", False, "jobs:high", "a human is blocked on this"),
        ("report_export", "free", True, "jobs:high", "a human is blocked on this"),
        ("nightly_digest", "enterprise", False, "jobs:low", "deferred batch work"),
        ("newsletter", "pro", False, "jobs:low", "deferred batch work"),
        ("invoice_pdf", "enterprise", False, "jobs:medium", "contractual latency commitment"),
        ("invoice_pdf", "pro", False, "jobs:medium", "default"),
    ],
)
def test_classification_matches_document_000_dispatch(task: str, tier: str, user_waiting: bool, queue: str, reason: str) -> None:
    decision = classify(load_config(EXAMPLE_CONFIG), task, tier=tier, user_waiting=user_waiting)
    assert (decision.queue, decision.reason) == (queue, reason)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == seconds


@pytest.mark.parametrize(
    ("path", "value", "where", "what"),
    [
        ("classes.2.weight", 0, "classes[2].weight", "must be > 0"),
        ("classes.1.weight", -5, "classes[1].weight", "must be > 0"),
        ("classes.0.weight", "70", "classes[0].weight", "expected a whole number"),
        ("classes.0.weight", 7.5, "classes[0].weight", "expected a whole number"),
        ("classes.0.max_age", "60", "classes[0].max_age", "expected a duration"),
        ("classes.0.max_age", "1 hour", "classes[0].max_age", "expected a duration"),
        ("classes.0.max_age", "0s", "classes[0].max_age", "longer than zero"),
        ("classes.2.promote_after", "soon", "classes[2].promote_after", "expected a duration"),
        ("classes.0.arrival_budget", 1.5, "classes[0].arrival_budget", "ratio in (0, 1]"),
        ("classes.0.reserved_slots", -1, "classes[0].reserved_slots", "between 0 and"),
        ("classes.0.name", "jobs high", "classes[0].name", "A-Z a-z 0-9"),
        ("classes.1.name", "jobs:high", "classes[1].name", "duplicate class name"),
        ("classes.0.colour", "red", "classes[0].colour", "unknown key"),
        ("classes.0.weight", "~", "classes[0].weight", "is required"),
        ("classes", [], "classes", "1 to 8 classes"),
        ("classes", "jobs:high", "classes", "expected a list"),
        ("classes.0.promote_after", "5m", "classes[0].promote_after", "no class above"),
        ("classification.0.class", "jobs:urgent", "classification[0].class", "unknown class 'jobs:urgent'"),
        ("classification.3.tenant_tier", "gold", "classification[3].tenant_tier", "unknown tier 'gold'"),
        ("classification.4", {"tasks": ["x"], "class": "jobs:low", "reason": "r"}, "classification[4]", "catch-all"),
        ("classification.0.tasks", [], "classification[0].tasks", "at least one task"),
        ("classification.0.reason", "a\tb", "classification[0].reason", "without tabs"),
        ("classification.1.user_waiting", "yes", "classification[1].user_waiting", "true or false"),
        ("tenants.tiers", {}, "tenants.tiers", "non-empty mapping"),
        ("tenants.tiers.pro", 0, "tenants.tiers.pro", "between 1 and 1000"),
        ("tenants.default_tier", "gold", "tenants.default_tier", "must be one of the tiers"),
        ("tenants.batch", 0, "tenants.batch", "between 1 and 1000"),
        ("leases.visibility_timeout", 300, "leases.visibility_timeout", "expected a duration"),
        ("leases.max_attempts", 0, "leases.max_attempts", "between 1 and 1000"),
        ("scheduler.policy", "random", "scheduler.policy", "fifo, strict, weighted, weighted-fair"),
        ("scheduler.budget_action", "drop", "scheduler.budget_action", "demote, reject"),
        ("redis.url", "http://localhost", "redis.url", "redis://"),
        ("redis.prefix", "a{b}", "redis.prefix", "A-Z a-z 0-9"),
        ("redis.prefix", "coll.0", "redis.prefix", "the name of shard 0 of a sharded queue 'coll'"),
        ("redis.prefix", "coll.3-1", "redis.prefix", "the name of shard 3 of a sharded queue 'coll'"),
        ("redis.port", 6379, "redis.port", "unknown key"),
        ("exporters", {}, "exporters", "unknown key"),
    ],
)
def test_invalid_values_name_the_field(path: str, value: Any, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(with_change(path, value), source="fairness.yaml")
    assert err.value.path == where
    assert what in err.value.message
    assert str(err.value).startswith(f"fairness.yaml: {where}: ")


def test_budget_on_the_last_class_needs_reject() -> None:
    with pytest.raises(ConfigError, match=r"classes\[2\].arrival_budget: the least urgent class"):
        parse_config(with_change("classes.2.arrival_budget", 0.5))
    data = with_change("classes.2.arrival_budget", 0.5)
    data["scheduler"]["budget_action"] = "reject"
    assert parse_config(data).classes[2].arrival_budget == 0.5


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- just a list\n")
    with pytest.raises(ConfigError, match=r"\(top level\): expected a mapping"):
        load_config(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@given(section=st.sampled_from(["redis", "scheduler", "tenants", "leases", "classes", "classification"]),
       value=json_values)
def test_any_garbage_in_a_section_is_a_config_error_never_a_crash(section: str, value: Any) -> None:
    data = copy.deepcopy(EXAMPLE)
    data[section] = value
    try:
        parse_config(data)
    except ConfigError as err:
        assert err.path, "every error names where it is"
