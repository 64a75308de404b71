"""Config and scenario errors a user makes by hand: a typo in a key is named with a "did you
mean", also when the key it misspells is required; a YAML syntax error names the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter import sources
from exporter.sources import watched
from fairness_core import ConfigError, load_config, parse_config
from fairness_core.config_dump import config_to_data
from fairness_sim.scenario import load_scenario

from .conftest import EXAMPLE_CONFIG


def _example_with(tmp_path: Path, edit: str, replacement: str) -> Path:
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    assert edit in text
    path = tmp_path / "fairness.yaml"
    path.write_text(text.replace(edit, replacement, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("index, key, typo, says", [
    # A required key: the typo is named, not only the key it leaves missing.
    (0, "max_age", "max_agee", "unknown key; did you mean max_age? (max_age is required)"),
    (2, "promote_after", "promote_aftr", "unknown key; did you mean promote_after? expected one of:"),
])
def test_a_typo_in_a_key_names_the_typo_and_suggests_the_key(index: int, key: str, typo: str, says: str) -> None:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["classes"][index][typo] = data["classes"][index].pop(key)
    with pytest.raises(ConfigError) as err:
        parse_config(data, "fairness.yaml")
    assert err.value.path == f"classes[{index}].{typo}"
    assert says in str(err.value)


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = _example_with(tmp_path, "  prefix: fq", "  prefix: [fq")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "<unicode string>" not in text
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if "prefix: [fq" in l)
    # PyYAML finds the problem where the next token starts; the unclosed bracket's line is named too.
    assert text.startswith(f"{path}:") and "config file is not valid YAML: " in text, text
    assert f"while parsing a flow sequence (line {line})" in text, text


def test_a_key_given_twice_is_refused_naming_the_key_and_its_line(tmp_path: Path) -> None:
    path = _example_with(tmp_path, "  policy: weighted-fair", "  policy: weighted-fair\n  policy: fifo")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if "policy: fifo" in l)
    assert str(err.value).startswith(f"{path}:{line}:") and "key 'policy' is given twice" in str(err.value)


def test_a_scenario_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "storm.yaml"
    path.write_text("name: x\nduration: 2h\nworkers: [{count: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}:4:") and "scenario file is not valid YAML" in str(err.value)
    assert "(line 3)" in str(err.value)


def test_an_unknown_class_in_a_rule_lists_the_classes_in_config_order() -> None:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["classification"][0]["class"] = "jobs:urgent"
    with pytest.raises(ConfigError) as err:
        parse_config(data, "fairness.yaml")
    assert err.value.path == "classification[0].class"
    assert err.value.message.endswith("classes are: jobs:high, jobs:medium, jobs:low")


def test_a_removed_key_says_what_replaced_it() -> None:
    """A config written for an earlier version that still sets exporter.tenant_label_limit is
    refused with the key named and what serves per-tenant figures now."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["exporter"]["tenant_label_limit"] = 200
    with pytest.raises(ConfigError) as err:
        parse_config(data, "fairness.yaml")
    assert err.value.path == "exporter.tenant_label_limit"
    assert "queue_tenant_share_ratio" in str(err.value) and "delete this key" in str(err.value)


WATCHED = {"jobs:high": ["emails"], "jobs:medium": ["default"], "jobs:low": ["bulk"]}


@pytest.mark.parametrize(("watch", "path", "says"), [
    ({"system": "kafka", "classes": WATCHED}, "watch.system", "expected one of bullmq, celery, rq, sidekiq"),
    ({"classes": WATCHED}, "watch.system", ""),
    ({"system": "rq", "classes": {"jobs:high": ["a"]}}, "watch.classes", "missing: jobs:medium, jobs:low"),
    ({"system": "rq", "classes": {**WATCHED, "jobs:urgent": ["a"]}}, "watch.classes.jobs:urgent", "unknown class"),
    ({"system": "rq", "classes": {**WATCHED, "jobs:low": []}}, "watch.classes.jobs:low", "at least one queue"),
    ({"system": "celery", "classes": {**WATCHED, "jobs:low": [{"queue": "bulk", "priorities": [10**7]}]}},
     "watch.classes.jobs:low[0].priorities[0]", ""),
    ({"system": "sidekiq", "classes": {**WATCHED, "jobs:low": [{"queue": "bulk", "priorities": [1]}]}},
     "watch.classes.jobs:low[0].priorities", "sidekiq's queues have no priorities to select"),
    ({"system": "rq", "classes": {**WATCHED, "jobs:low": [{"queue": "bulk", "priorities": [1]}]}},
     "watch.classes.jobs:low[0].priorities", "rq's queues have no priorities to select"),
    ({"system": "rq", "classes": WATCHED, "tenant": "tenant_id"}, "watch.tenant", "such as kwargs.tenant_id"),
    ({"system": "sidekiq", "classes": WATCHED, "tenant": "kwargs.tenant_id"}, "watch.tenant",
     "a sidekiq job keeps its arguments under args"),
    ({"system": "bullmq", "classes": WATCHED, "tenant": "args.0"}, "watch.tenant", "under data: start the path there"),
    ({"system": "rq", "classes": WATCHED, "url": "http://x"}, "watch.url", ""),
])
def test_a_bad_watch_section_names_the_field(watch: dict, path: str, says: str) -> None:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["watch"] = watch
    with pytest.raises(ConfigError) as err:
        parse_config(data, "watch.yaml")
    assert err.value.path == path and says in err.value.message, str(err.value)


def test_a_watch_config_needs_no_classification_and_reads_back_as_written() -> None:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    del data["classification"]
    data["watch"] = {"system": "celery", "tenant": "kwargs.tenant_id",
                     "classes": {**WATCHED, "jobs:low": ["bulk", {"queue": "default", "priorities": [6, 9]}]}}
    config = parse_config(data, "watch.yaml")
    watch = watched(config)
    assert watch is not None and watch.tenant == ("kwargs", "tenant_id")
    assert parse_config(config_to_data(config), "watch.yaml") == config


@pytest.mark.parametrize(("typo", "says"), [("scrape_timout", "did you mean scrape_timeout?"),
                                            ("windw", "did you mean window?"), ("lissen", "did you mean listen?")])
def test_a_typo_in_the_exporter_section_is_named_whichever_layer_owns_the_key(typo: str, says: str) -> None:
    """The core parses the exporter keys its scripts use, the exporter its own (listen,
    scrape_timeout): one mapping, one set of known keys, one "did you mean" over both."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["exporter"] = {typo: "1s"}
    with pytest.raises(ConfigError) as err:
        parse_config(data, "fairness.yaml")
    assert err.value.path == f"exporter.{typo}" and says in err.value.message, str(err.value)
    assert "fairness_sample, listen, noisy_min_inflight, noisy_min_queued, scrape_timeout, topk_tenants, window" in (
        err.value.message)


def test_a_watched_system_is_declared_by_its_reader_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch section takes the systems from the readers of exporter/sources/ (each one's kind,
    whether a class may take some of its queues' priorities, where its jobs keep their arguments),
    so a new system is one module there."""
    class KafkaSource:
        kind, has_priorities, tenant_roots = "kafka", False, ("value",)

    known = dict(sources.systems())
    monkeypatch.setattr(sources, "systems", lambda: {**known, "kafka": KafkaSource})
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["watch"] = {"system": "kafka", "classes": WATCHED, "tenant": "value.tenant"}
    watch = watched(parse_config(data, "watch.yaml"))
    assert watch is not None and watch.system == "kafka" and watch.tenant == ("value", "tenant")
    data["watch"]["tenant"] = "args.0"
    with pytest.raises(ConfigError, match="a kafka job keeps its arguments under value: start the path there"):
        parse_config(data, "watch.yaml")
    data["watch"] = {"system": "kafka", "classes": {**WATCHED, "jobs:low": [{"queue": "bulk", "priorities": [1]}]}}
    with pytest.raises(ConfigError, match=r"kafka's queues have no priorities .* are for bullmq and celery\)"):
        parse_config(data, "watch.yaml")
