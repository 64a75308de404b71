"""What ``fairctl generate`` keeps for each watched system: the alerts docs/watching.md lists, each
with only the series that system supplies, and promtool passing on them."""

from __future__ import annotations

import pytest

from alerts import rules as r
from alerts.output import rules_text
from alerts.recording import expressions
from alerts.supplied import needs, served_metrics
from exporter.sources import QueueRef, WatchConfig, systems
from fairness_core import Config

from .conftest import make_config

KEPT = {
    "bullmq": (r.QUEUE_STARVING, r.QUEUE_SHARE_BELOW_WEIGHT, r.QUEUE_STALLED, r.FAIRNESS_EXPORTER_DOWN,
               r.FAIRNESS_EXPORTER_REDIS_DOWN),
    "celery": (r.QUEUE_STARVING, r.FAIRNESS_EXPORTER_DOWN, r.FAIRNESS_EXPORTER_REDIS_DOWN),
    "rq": (r.QUEUE_STARVING, r.QUEUE_SHARE_BELOW_WEIGHT, r.QUEUE_STALLED, r.FAIRNESS_EXPORTER_DOWN,
           r.FAIRNESS_EXPORTER_REDIS_DOWN),
    "sidekiq": (r.QUEUE_STARVING, r.FAIRNESS_EXPORTER_DOWN, r.FAIRNESS_EXPORTER_REDIS_DOWN),
}


def watching(system: str) -> Config:
    config = make_config()
    return config.with_section("watch", WatchConfig(system=system, classes={
        name: (QueueRef(name.replace(":", "-")),) for name in config.class_names}))


def test_every_system_is_listed() -> None:
    assert set(KEPT) == set(systems())


@pytest.mark.parametrize("system", list(systems()))
def test_each_system_keeps_the_alerts_its_series_feed(system: str) -> None:
    config = watching(system)
    assert tuple(a.name for a in r.build_alerts(config)) == KEPT[system]
    assert set(r.left_out(config)) | set(KEPT[system]) == {a.name for a in r.every_alert(make_config())}
    served = served_metrics(config)
    assert served is not None
    assert needs(rules_text(config), expressions(config)) <= served, "no rule reads a series the exporter does not serve"


def test_fairctls_own_queues_keep_every_alert() -> None:
    config = make_config()
    assert served_metrics(config) is None and r.left_out(config) == ()
    assert [a.name for a in r.build_alerts(config)] == [a.name for a in r.every_alert(config)]
