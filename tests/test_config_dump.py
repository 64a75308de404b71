"""config_to_data: a derived config written to a file reads back as the same config."""

from __future__ import annotations

import dataclasses

import yaml

from fairness_core import Config, parse_config
from fairness_core.config_dump import config_to_yaml
from fairness_core.config_store import fingerprint, shared_data

from .conftest import make_config


def _round_trip(config: Config) -> Config:
    return parse_config(yaml.safe_load(config_to_yaml(config, "derived\nconfig")))


def test_example_config_round_trips(example_config: Config) -> None:
    assert _round_trip(example_config) == dataclasses.replace(example_config, source=None)


def test_every_optional_field_round_trips() -> None:
    config = make_config(
        exporter={"listen": "127.0.0.1:9999"},
        alerts={"runbook_url": "https://runbooks.example/{alert}", "for": {"QueueStalled": "90s"},
                "worker_slots": 12},
    )
    high = dataclasses.replace(config.classes[0], starving_for=1.5, promote_after=None)
    low = dataclasses.replace(config.classes[2], starving_for=None, promote_after=7.25)
    config = dataclasses.replace(config, classes=(high, config.classes[1], low))
    assert _round_trip(config) == dataclasses.replace(config, source=None)


def test_header_is_a_comment() -> None:
    text = config_to_yaml(make_config(), "written by a drill\nfor policy fifo")
    assert text.startswith("# written by a drill\n# for policy fifo\n")


def test_the_stored_form_and_fingerprint_hold_whoever_parses_each_section(example_config: Config) -> None:
    """Groups already running keep their fingerprint in Redis: the sections other layers own dump
    themselves into the same stored form, in the same order, as when the core dumped them all
    (the exporter's ``scrape_timeout`` still after the core's ``window``; ``listen`` local)."""
    with_listen = make_config(exporter={"listen": "127.0.0.1:9999"})
    stored = shared_data(with_listen)
    assert list(stored) == ["redis", "scheduler", "classes", "tenants", "classification", "leases", "exporter",
                            "alerts"]
    assert list(stored["exporter"]) == ["topk_tenants", "window", "scrape_timeout", "noisy_min_inflight",
                                        "noisy_min_queued", "fairness_sample"]
    assert fingerprint(example_config) == "feea1754b5efcec4"  # as computed before the sections had owners
    watching = dict(yaml.safe_load(config_to_yaml(example_config)), watch={"system": "celery", "classes": {
        name: [name.replace(":", "-")] for name in example_config.class_names}})
    assert list(shared_data(parse_config(watching)))[-2:] == ["alerts", "watch"]
