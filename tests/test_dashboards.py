"""The generated dashboards: current with the config, written against the metric contract, parsed
by Grafana's own dashboard model (grafana-foundation-sdk), laid out on the grid without overlap,
importable anywhere (datasource and job are variables, ``__inputs``/``__requires`` present), and
showing the logical queue: every raw series folded over its shards, but in the per-shard panels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as schema

from alerts import promtool, recording
from alerts.config import alert_settings
from alerts.rules import build_alerts
from dashboards import queries as q
from dashboards.build import DATASOURCE, GRID_WIDTH, INPUT, overview
from dashboards.layout import (
    CONTAINER_DASHBOARDS,
    GENERATED_DIR,
    GROUP_VAR,
    OVERVIEW_UID,
    QUEUE_VAR,
    TENANT_UID,
    dashboard_file,
)
from dashboards.output import render
from exporter import metrics as m
from fairctl.cli import app
from fairness_core import Config, load_config

from .conftest import EXAMPLE_CONFIG, ROOT, make_config
from .test_alerts import metric_names

GENERATED = ROOT / GENERATED_DIR
UIDS = (OVERVIEW_UID, TENANT_UID)
RAW_SERIES = {spec.name for spec in m.ALL} | {m.JOBS_WAIT.series(s) for s in ("_bucket", "_sum", "_count")}
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")
FOLDING_SHARD = re.compile(rf"without \({m.SHARD}\) \(")


def committed(uid: str) -> dict[str, Any]:
    return json.loads((GENERATED / dashboard_file(uid)).read_text())


def panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows included (rows are expanded: their panels are top-level)."""
    return data["panels"]


def panel_queries(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target."""
    return [(p["title"], t["expr"]) for p in panels(data) for t in p.get("targets", [])]


def variable_queries(data: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["query"] for v in data["templating"]["list"] if v["type"] == "query"}


def variable_series(query: str) -> str:
    """The series selector of a ``label_values(selector, label)`` variable query."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert match, query
    return match.group(1)


def annotation_queries(data: dict[str, Any]) -> list[str]:
    return [a["expr"] for a in data["annotations"]["list"]]


def rows(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every row's title with the panels under it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p in panels(data):
        if p["type"] == "row":
            out[p["title"]] = []
        else:
            list(out.values())[-1].append(p)
    return out


def unfolded(expr: str, raw: set[str] = RAW_SERIES) -> set[str]:
    """The raw series (of ``raw``) ``expr`` selects outside every aggregation that folds ``shard``
    (``... without (shard) (...)``): those it shows per shard."""
    spans = []
    for match in FOLDING_SHARD.finditer(expr):
        end, depth = match.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[end], 0)
            end += 1
        spans.append((match.end(), end))
    return {s.group(1) for s in SELECTOR.finditer(expr)
            if s.group(1) in raw and not any(start <= s.start() < end for start, end in spans)}


def test_committed_output_is_what_the_example_config_generates() -> None:
    files = render(load_config(EXAMPLE_CONFIG))
    assert {dashboard_file(uid) for uid in UIDS} <= files.keys()
    for rel, text in files.items():
        assert (GENERATED / rel).read_text() == text, f"{rel}: run fairctl generate"


@pytest.mark.parametrize("uid", UIDS)
def test_every_metric_name_in_every_query_is_in_the_contract_or_recorded(uid: str) -> None:
    data = committed(uid)
    contract = {spec.name for spec in m.ALL} | {m.JOBS_WAIT.series(s) for s in ("_bucket", "_sum", "_count")}
    recorded = {rule.name for rule in recording.recording_rules(load_config(EXAMPLE_CONFIG))}
    expressions = [expr for _, expr in panel_queries(data)] + [*map(variable_series, variable_queries(data).values())]
    expressions += annotation_queries(data)
    used = set().union(*map(metric_names, expressions))
    assert used <= contract | recorded | {q.ALERTS}, used - contract - recorded
    assert len(panel_queries(data)) >= 7


def test_the_grafana_schema_parses_every_panel_target_variable_and_annotation() -> None:
    """grafana-foundation-sdk's models (generated from Grafana's schema) decode the JSON into typed
    panels and Prometheus queries, and encode back the same ids, positions and queries."""
    register_default_plugins()
    for uid in UIDS:
        data = committed(uid)
        board = schema.Dashboard.from_json(data)
        again = json.loads(json.dumps(board, cls=JSONEncoder))
        assert [(p["id"], p["type"], p["gridPos"]) for p in again["panels"]] == \
               [(p["id"], p["type"], p["gridPos"]) for p in panels(data)]
        assert panel_queries(again) == panel_queries(data)
        assert [v["name"] for v in again["templating"]["list"]] == [v["name"] for v in data["templating"]["list"]]
        assert annotation_queries(again) == annotation_queries(data)
        for panel in board.panels or []:
            if isinstance(panel, schema.Panel) and panel.type_val != "row":
                # The panel plugin's own options model was used, not a bare dict.
                assert type(panel.options).__module__.endswith(panel.type_val), (panel.title, type(panel.options))
                assert all(type(t).__module__.endswith("prometheus") for t in panel.targets or []), panel.title


@pytest.mark.parametrize("uid", UIDS)
def test_panel_ids_are_unique_and_panels_fit_the_grid_without_overlap(uid: str) -> None:
    fits_the_grid(panels(committed(uid)))


@pytest.mark.parametrize("uid", UIDS)
def test_datasource_and_job_are_variables_and_the_json_imports_through_the_ui(uid: str) -> None:
    data = committed(uid)
    assert [i["name"] for i in data["__inputs"]] == [INPUT] and data["__inputs"][0]["pluginId"] == "prometheus"
    required = {(r["type"], r["id"]) for r in data["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= required
    assert {("panel", p["type"]) for p in panels(data) if p["type"] != "row"} <= required
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables[q.DATASOURCE_VAR]["type"] == "datasource"
    assert variables[q.DATASOURCE_VAR]["current"]["value"] == f"${{{INPUT}}}"
    assert variables[q.JOB_VAR]["current"]["value"] == alert_settings(load_config(EXAMPLE_CONFIG)).exporter_job
    refs = [p["datasource"] for p in panels(data)] + [t["datasource"] for p in panels(data) for t in p.get("targets", [])]
    refs += [a["datasource"] for a in data["annotations"]["list"]]
    assert refs and all(ref == DATASOURCE for ref in refs)
    for title, expr in panel_queries(data):
        assert f'{q.JOB}=~"${q.JOB_VAR}"' in expr, title
        assert all(f"{label}=" not in expr.replace(f'{q.JOB}=~"', "") for label in ("job", "namespace", "cluster")), title


def test_every_alert_is_an_annotation_and_links_its_runbook() -> None:
    config = load_config(EXAMPLE_CONFIG)
    data = committed(OVERVIEW_UID)
    (annotation,) = annotation_queries(data)
    text = next(p["options"]["content"] for p in panels(data) if p["type"] == "text")
    for alert in build_alerts(config):
        assert alert.name in annotation
        assert f"[{alert.name}](http://127.0.0.1:3000/d/fairctl-runbooks?viewPanel=" in text
        assert (ROOT / "alerts/generated/runbooks" / f"{alert.name}.md").is_file()


def test_each_class_has_its_oldest_age_panel_with_its_slo_as_a_threshold_line() -> None:
    classes = [{"name": f"c{i}", "weight": 10 - i, "max_age": f"{i + 1}m"} for i in range(5)]
    config = make_config(classes=classes, classification=[{"class": "c4", "reason": "default"}],
                         alerts={"runbook_url": "https://runbooks.example.com/{alert}"})
    data = json.loads(json.dumps(overview(config).to_json_data(), default=lambda o: o.to_json_data()))
    oldest = [p for p in panels(data) if p["title"].startswith("Oldest job age:")]
    assert [p["title"] for p in oldest] == [f"Oldest job age: c{i}" for i in range(5)]
    for i, p in enumerate(oldest):
        assert p["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] == 60.0 * (i + 1)
        assert p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
        assert f'{m.QUEUE}="c{i}"' in p["targets"][0]["expr"]
    text = next(p["options"]["content"] for p in panels(data) if p["type"] == "text")
    assert "(https://runbooks.example.com/QueueStarving)" in text


def test_provisioning_loads_the_dashboards_from_a_default_prometheus() -> None:
    provisioning = GENERATED / "provisioning"
    (datasource,) = yaml.safe_load((provisioning / "datasources/fairctl.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    (provider,) = yaml.safe_load((provisioning / "dashboards/fairctl.yml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == CONTAINER_DASHBOARDS


def test_generate_check_covers_the_dashboards(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["generate", "--out", str(tmp_path), "--config", str(EXAMPLE_CONFIG)]).exit_code == 0
    board = tmp_path / GENERATED_DIR / dashboard_file(OVERVIEW_UID)
    board.write_text(board.read_text().replace("Throughput", "Thruput"))
    checked = runner.invoke(app, ["generate", "--check", "--out", str(tmp_path), "--config", str(EXAMPLE_CONFIG)])
    assert checked.exit_code == 1 and f"{board}: changed" in checked.output


@pytest.mark.parametrize("charge", ["jobs", "runtime"])
def test_share_panels_use_the_configured_basis_and_worker_time_is_shown_under_either(charge: str) -> None:
    config = make_config(scheduler={"charge": charge})
    basis, recorded = recording.basis(config), {rule.name for rule in recording.recording_rules(config)}
    other = next(b for name, b in recording.BASES.items() if name != charge)
    boards = {uid: json.loads(render(config)[dashboard_file(uid)]) for uid in UIDS}
    used = {name for data in boards.values() for _, expr in panel_queries(data) for name in metric_names(expr)}
    assert {basis.share, basis.tenant_share} <= used <= recorded | {spec.name for spec in m.ALL} | {
        m.JOBS_WAIT.series("_bucket")}
    assert not {other.share, other.backlogged_share, other.tenant_share} & used
    worker_time = [title for title, expr in panel_queries(boards[OVERVIEW_UID])
                   if metric_names(expr) == {recording.WORKER_RATE}]
    assert worker_time == ["Worker time per class"]
    titles = " ".join(p["title"] + " " + p.get("description", "") for data in boards.values() for p in panels(data)
                      if "share" in p["title"].lower())
    assert basis.served in titles and other.served not in titles


def test_the_logical_panels_fold_shard_and_one_row_lays_the_shards_side_by_side() -> None:
    boards = {uid: committed(uid) for uid in UIDS}
    shard_var = q.var(q.SHARD_VAR)
    (row,) = [title for title, cells in rows(boards[OVERVIEW_UID]).items()
              if any(shard_var in t["expr"] for p in cells for t in p["targets"])]
    side_by_side = rows(boards[OVERVIEW_UID])[row]
    targets = [t for p in side_by_side for t in p["targets"]]
    assert {m.QUEUE_DEPTH.name, m.QUEUE_OLDEST_AGE.name} <= set().union(*(metric_names(t["expr"]) for t in targets))
    for t in targets:
        assert t["legendFormat"] == "{{" + m.SHARD + "}}" and shard_var in t["expr"], t
        assert unfolded(t["expr"]) and not FOLDING_SHARD.search(t["expr"]), t["expr"]
    logical = [(title, expr) for data in boards.values() for title, expr in panel_queries(data)
               if title not in {p["title"] for p in side_by_side}]
    assert any(metric_names(expr) & RAW_SERIES for _, expr in logical)
    for title, expr in logical:
        assert shard_var not in expr and not unfolded(expr), (title, expr)
    (fairness,) = [p for p in panels(boards[OVERVIEW_UID]) if m.QUEUE_FAIRNESS_INDEX.name in str(p.get("targets"))]
    assert f"min without ({m.SHARD})" in fairness["targets"][0]["expr"] and "shard" in fairness["description"]


def test_the_shard_variable_picks_every_shard_of_the_group_by_default() -> None:
    variables = {v["name"]: v for v in committed(OVERVIEW_UID)["templating"]["list"]}
    shard = variables[q.SHARD_VAR]
    assert (shard["multi"], shard["includeAll"], shard["current"]["value"], shard["allValue"]) == \
           (True, True, "$__all", ".*")
    assert re.fullmatch(rf"label_values\(.+, {m.SHARD}\)", shard["query"])
    assert f'{m.GROUP}=~"{q.var(GROUP_VAR)}"' in variable_series(shard["query"])
    assert list(variables).index(GROUP_VAR) < list(variables).index(q.SHARD_VAR)  # the group's shards


def test_a_sharded_queue_opens_on_its_logical_queue_not_a_shard() -> None:
    config = make_config(redis={"prefix": "shop", "shards": 4})
    for text in render(config).values():
        assert "shop.0" not in text
    for uid in UIDS:
        variables = {v["name"]: v for v in json.loads(render(config)[dashboard_file(uid)])["templating"]["list"]}
        assert variables[GROUP_VAR]["current"]["value"] == "shop"


# The exporter's account series, served only with tenants.account_separator set.
ACCOUNT_SERIES = {m.QUEUE_ACCOUNT_SHARE.name, m.QUEUE_ACCOUNT_TENANT_SHARE.name, m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name, m.QUEUE_ACTIVE_ACCOUNTS.name}


def accounts_config(**overrides: Any) -> Config:
    return make_config(tenants={"account_separator": "/"}, **overrides)


def fits_the_grid(placed: list[dict[str, Any]]) -> None:
    """Unique panel ids; every panel on the grid, none overlapping another."""
    ids = [p["id"] for p in placed]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    cells: dict[tuple[int, int], str] = {}
    for p in placed:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= GRID_WIDTH, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize("charge", ["jobs", "runtime"])
def test_with_accounts_the_tenant_board_gets_an_account_variable_and_row(charge: str) -> None:
    config = accounts_config(scheduler={"charge": charge})
    basis = recording.basis(config)
    data = json.loads(render(config)[dashboard_file(TENANT_UID)])
    variables = {v["name"]: v for v in data["templating"]["list"]}
    account = variables[q.ACCOUNT_VAR]
    assert account["type"] == "query" and account["multi"] is True and account["includeAll"] is False
    assert re.fullmatch(rf"label_values\(.+, {m.ACCOUNT}\)", account["query"])
    assert metric_names(variable_series(account["query"])) == {m.QUEUE_ACCOUNT_SHARE.name}
    assert list(variables).index(q.TENANT_VAR) < list(variables).index(q.ACCOUNT_VAR)
    board_rows = rows(data)
    accounts = board_rows.pop("Accounts")
    # The tenant's own row is as it is without accounts.
    assert board_rows == rows(json.loads(render(make_config(scheduler={"charge": charge}))[dashboard_file(TENANT_UID)]))
    reads = [set().union(*(metric_names(t["expr"]) for t in p["targets"])) for p in accounts]
    assert reads == [{m.QUEUE_ACCOUNT_SHARE.name, basis.counter.name}, {m.QUEUE_ACCOUNT_TENANT_SHARE.name, m.QUEUE_ACCOUNT_SHARE.name, basis.counter.name},
                     {m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name, recording.MAX_AGE}, {m.QUEUE_ACTIVE_ACCOUNTS.name}]
    share, keys, quiet, active = accounts
    assert [t["legendFormat"] for t in share["targets"]] == ["{{" + m.QUEUE + "}}: {{" + m.ACCOUNT + "}}"]
    assert [t["legendFormat"] for t in keys["targets"]] == ["{{" + m.QUEUE + "}}: {{" + m.TENANT + "}}"]
    assert basis.served in share["title"] and "$account" in keys["title"]
    # The keys are the accounts picked: every account series it reads is selected by the variable.
    (expr,) = [t["expr"] for t in keys["targets"]]
    picked = f'{m.ACCOUNT}=~"{q.var(q.ACCOUNT_VAR)}"'
    selectors = re.findall(rf"(?:{m.QUEUE_ACCOUNT_SHARE.name}|{m.QUEUE_ACCOUNT_TENANT_SHARE.name})\{{[^}}]*\}}", expr)
    assert selectors and all(picked in s for s in selectors), expr
    assert q.var(q.ACCOUNT_VAR) not in str(share["targets"]) + str(quiet["targets"]) + str(active["targets"])
    assert quiet["fieldConfig"]["overrides"][0]["matcher"]["options"] == ".* SLO$"
    for p in accounts:
        for t in p["targets"]:
            # Only the exporter's series (its top-k accounts and their top keys, per class), each
            # folded over the shards; no query of its own widens or narrows them.
            assert not re.search(r"\b(topk|bottomk|count|label_replace|group)\s*\(", t["expr"]), t["expr"]
            assert not unfolded(t["expr"], RAW_SERIES | ACCOUNT_SERIES), t["expr"]
            assert q.var(q.SHARD_VAR) not in t["expr"] and f'{q.JOB}=~"${q.JOB_VAR}"' in t["expr"]
    contract = {spec.name for spec in m.ALL} | {recording_rule.name for recording_rule in recording.recording_rules(config)}
    assert set().union(*reads) <= contract | ACCOUNT_SERIES
    fits_the_grid(panels(data))
    register_default_plugins()
    assert panel_queries(json.loads(json.dumps(schema.Dashboard.from_json(data), cls=JSONEncoder))) == panel_queries(data)


@pytest.mark.parametrize("charge", ["jobs", "runtime"])
def test_without_accounts_no_dashboard_reads_an_account_series(charge: str) -> None:
    config = make_config(scheduler={"charge": charge})
    assert config.tenants.account_separator is None
    for uid in UIDS:
        data = json.loads(render(config)[dashboard_file(uid)])
        assert "Accounts" not in rows(data)
        assert q.ACCOUNT_VAR not in {v["name"] for v in data["templating"]["list"]}
        assert not any(metric_names(expr) & ACCOUNT_SERIES for _, expr in panel_queries(data))


def test_the_account_panels_weigh_each_shard_by_what_it_served(tmp_path: Path) -> None:
    """promtool evaluates the account share and the account's keys' share on two shards that served
    1 and 3 jobs/s of a class: account A holds half of the first and all of the second (7/8 over
    both), and its keys' shares of it are weighted by what each shard served of A (0.5 and 3)."""
    labels = 'job="fairctl",group="g",queue="q1"'
    resolve = {q.var(q.JOB_VAR): "fairctl", q.var(GROUP_VAR): "g", q.var(q.ACCOUNT_VAR): "A"}

    def resolved(expr: str) -> str:
        for name, value in resolve.items():
            expr = expr.replace(name, value)
        return expr

    rules = {"groups": [{"name": "accounts", "rules": [
        {"record": "accounts", "expr": resolved(q.account_share(m.JOBS_PROCESSED, 600))},
        {"record": "keys", "expr": resolved(q.account_tenant_share(m.JOBS_PROCESSED, 600,
                                                                   q.re(m.ACCOUNT, q.var(q.ACCOUNT_VAR))))},
    ]}]}

    def series(name: str, shard: str, values: str, **extra: str) -> dict[str, str]:
        more = "".join(f',{k}="{v}"' for k, v in extra.items())
        return {"series": f'{name}{{{labels},shard="{shard}",instance="{shard}:9",pod="p"{more}}}', "values": values}

    inputs = [
        series(m.JOBS_PROCESSED.name, "s0", "0+60x20"), series(m.JOBS_PROCESSED.name, "s1", "0+180x20"),
        series(m.QUEUE_ACCOUNT_SHARE.name, "s0", "0.5x20", account="A"), series(m.QUEUE_ACCOUNT_SHARE.name, "s0", "0.5x20", account="B"),
        series(m.QUEUE_ACCOUNT_SHARE.name, "s1", "1x20", account="A"),
        series(m.QUEUE_ACCOUNT_TENANT_SHARE.name, "s0", "1x20", account="A", tenant="A/k1"),
        series(m.QUEUE_ACCOUNT_TENANT_SHARE.name, "s1", "0.5x20", account="A", tenant="A/k1"),
        series(m.QUEUE_ACCOUNT_TENANT_SHARE.name, "s1", "0.5x20", account="A", tenant="A/k2"),
    ]

    def sample(name: str, value: float, **extra: str) -> dict[str, Any]:
        return {"labels": name + "{" + ",".join([labels, *(f'{k}="{v}"' for k, v in extra.items())]) + "}",
                "value": value}

    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs, "promql_expr_test": [
            {"expr": "accounts", "eval_time": "15m",
             "exp_samples": [sample("accounts", 0.875, account="A"), sample("accounts", 0.125, account="B")]},
            {"expr": "keys", "eval_time": "15m",
             "exp_samples": [sample("keys", 2 / 3.5, account="A", tenant="A/k1"),
                             sample("keys", 1.5 / 3.5, account="A", tenant="A/k2")]},
        ]}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    promtool.test_rules(tmp_path / "tests.yml")


# The series of the dispatch limits' holds, raw and recorded: served only when a config sets one.
HELD_SERIES = {m.QUEUE_HELD_TENANTS.name, m.QUEUE_HELD_JOBS.name, recording.HELD_TENANTS, recording.HELD_JOBS}


def test_with_dispatch_limits_the_overview_shows_the_tenants_held_and_their_jobs() -> None:
    config = make_config(tenants={"max_in_flight": 20, "overrides": {"acme": {"dispatch_rate": "5/s"}}})
    data = json.loads(render(config)[dashboard_file(OVERVIEW_UID)])
    board_rows = rows(data)
    tenants, jobs = board_rows.pop("Dispatch limits")
    assert (tenants["title"], jobs["title"]) == ("Tenants held by their limits", "Jobs held by their limits")
    assert [metric_names(t["expr"]) for t in tenants["targets"]] == [{recording.HELD_TENANTS}]
    assert [metric_names(t["expr"]) for t in jobs["targets"]] == [{recording.HELD_JOBS}, {recording.DEPTH}]
    by_reason = "{{" + m.QUEUE + "}}: {{" + m.REASON + "}}"
    assert [t["legendFormat"] for t in tenants["targets"] + jobs["targets"]] == [
        by_reason, by_reason, "{{" + m.QUEUE + "}} depth"]
    assert jobs["fieldConfig"]["overrides"][0]["matcher"]["options"] == ".* depth$"
    for t in tenants["targets"] + jobs["targets"]:
        assert f'{m.QUEUE}=~"{q.var(QUEUE_VAR)}"' in t["expr"], t["expr"]
    assert "fairctl explain --tenant" in tenants["description"]
    recorded = {rule.name for rule in recording.recording_rules(config)}
    assert {recording.HELD_TENANTS, recording.HELD_JOBS} <= recorded
    # Every other row has the panels it has without limits; the alerts panel lists the alert too.
    plain = rows(json.loads(render(make_config())[dashboard_file(OVERVIEW_UID)]))
    assert {row: [p["title"] for p in cells] for row, cells in board_rows.items()} == {
        row: [p["title"] for p in cells] for row, cells in plain.items()}
    text = next(p["options"]["content"] for p in panels(data) if p["type"] == "text")
    assert "[TenantsHeldPastMaxAge](" in text
    fits_the_grid(panels(data))
    register_default_plugins()
    assert panel_queries(json.loads(json.dumps(schema.Dashboard.from_json(data), cls=JSONEncoder))) == panel_queries(data)


def test_without_dispatch_limits_no_dashboard_reads_a_held_series() -> None:
    for uid in UIDS:
        data = committed(uid)
        assert "Dispatch limits" not in rows(data)
        assert not any(metric_names(expr) & HELD_SERIES for _, expr in panel_queries(data))
