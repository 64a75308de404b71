"""The alerts' links open: built on alerts.grafana_url (runbooks are a generated Grafana dashboard,
one panel per alert), checked by the config, warned about by fairctl check; paused classes have
their own alert and no starvation story."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from alerts import recording as rec
from alerts.rules import QUEUE_PAUSED, build_alerts, link, link_warnings, runbook_panel
from dashboards.build import JOBS_PER_SECOND, overview, runbooks
from fairctl.cli import app
from fairness_core import ConfigError, load_config, parse_config

from .conftest import EXAMPLE_CONFIG, ROOT
from .test_config import with_change


def test_default_links_open_grafana_with_the_runbook_panel_and_the_group_and_class() -> None:
    config = parse_config(with_change("alerts", {"grafana_url": "https://grafana.example.com/"}))
    assert link(config, "QueueStalled", "runbook_url") == (
        f"https://grafana.example.com/d/fairctl-runbooks?viewPanel={runbook_panel(config, 'QueueStalled')}")
    assert link(config, "QueueStalled", "dashboard_url", "jobs:low") == (
        "https://grafana.example.com/d/fairctl-overview?var-group=fq&var-queue=jobs:low")
    board = json.loads(json.dumps(runbooks(config).to_json_data(), default=lambda o: o.to_json_data()))
    panels = {p["id"]: p for p in board["panels"]}
    for alert in build_alerts(config):
        panel = panels[runbook_panel(config, alert.name)]
        assert panel["title"] == alert.name and f"# {alert.name}" in panel["options"]["content"]
        assert ".md)" not in panel["options"]["content"]  # links between runbooks open in Grafana too
    data = json.loads(json.dumps(overview(config).to_json_data(), default=lambda o: o.to_json_data()))
    assert {"group", "queue"} <= {t["name"] for t in data["templating"]["list"]}


def test_a_link_template_may_name_the_group() -> None:
    config = parse_config(with_change("alerts", {"dashboard_url": "https://g.example.com/d/x?g={group}&q={queue}"}))
    assert link(config, "QueueStarving", "dashboard_url", "jobs:high") == "https://g.example.com/d/x?g=fq&q=jobs:high"


def test_configured_templates_still_win() -> None:
    config = parse_config(with_change("alerts", {"runbook_url": "https://wiki.example.com/{alert}.md"}))
    assert link(config, "QueuePaused", "runbook_url") == "https://wiki.example.com/QueuePaused.md"


@pytest.mark.parametrize("value, message", [
    ("grafana:3000", "expected an absolute http:// or https:// URL"),
    ("/grafana", "expected an absolute http:// or https:// URL"),
    ("https://g.example.com/{x}", "without spaces, ?, #, $ or braces"),
])
def test_a_bad_grafana_url_is_named(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="alerts.grafana_url") as info:
        parse_config(with_change("alerts", {"grafana_url": value}))
    assert message in str(info.value)


@pytest.mark.slow  # fairctl check runs every promtool unit test: 15 s
def test_check_warns_when_links_cannot_open(tmp_path: Path) -> None:
    unset = parse_config(_without_grafana())
    assert any("alerts.grafana_url is not set" in w for w in link_warnings(unset))
    relative = parse_config(with_change("alerts", {"runbook_url": "runbooks/{alert}.md"}))
    assert any("alerts.runbook_url" in w and "not an absolute URL" in w for w in link_warnings(relative))
    assert link_warnings(load_config(EXAMPLE_CONFIG)) == []
    path = tmp_path / "fairness.yaml"
    path.write_text(yaml.safe_dump(_without_grafana()))
    result = CliRunner().invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 0 and "warning: alerts.grafana_url is not set" in result.stderr


def _without_grafana() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["alerts"].pop("grafana_url")
    return data


def test_paused_classes_have_their_own_alert_and_no_starvation_story() -> None:
    alerts = {a.name: a for a in build_alerts(load_config(EXAMPLE_CONFIG))}
    assert alerts[QUEUE_PAUSED].variant().expr == f"{rec.PAUSED} > 0"
    for name in ("QueueStarving", "QuietTenantsStarving"):
        assert all(f"unless\n{rec.PAUSED}" in v.expr for v in alerts[name].variants), name
    assert "queue_paused" in alerts["PriorityInversion"].variant("jobs:high").expr


def test_panels_count_jobs_not_requests() -> None:
    for path in (ROOT / "dashboards/generated").glob("*.json"):
        assert "reqps" not in path.read_text(), path
    assert JOBS_PER_SECOND in (ROOT / "dashboards/generated/fairctl-overview.json").read_text()
