"""The three dashboards (overview, tenant, runbooks) as grafanalib objects, built from the config,
the metric contract and the recording rules, and their import-ready JSON.

Panels are declared as sections of (panel, width) and placed by :func:`layout`, so adding a panel
never means recomputing coordinates by hand. Every panel and query uses the ``$datasource``
variable, which the ``DS_PROMETHEUS`` import input defaults, so nothing names a datasource uid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import attr
from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    REFRESH_ON_TIME_RANGE_CHANGE,
    Annotations,
    Dashboard,
    DashboardLink,
    DataSourceInput,
    GridPos,
    Panel,
    RowPanel,
    Target,
    Template,
    Templating,
    Text,
    Time,
    TimeSeries,
)

from alerts import recording as rec
from alerts import runbooks as rb
from alerts.config import alert_settings
from alerts.layout import runbook_file
from alerts.promql import logical, number
from alerts.rules import build_alerts, link, runbook_panel
from alerts.supplied import fed
from alerts.watch_terms import terms
from exporter import metrics as m
from exporter.sources import watched
from fairness_core.config import Config, format_duration

from . import queries as q
from .layout import GROUP_VAR, OVERVIEW_UID, QUEUE_VAR, RUNBOOKS_UID, TENANT_UID

INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": q.var(q.DATASOURCE_VAR)}
TAG = "fairctl"
GRID_WIDTH = 24
PANEL_HEIGHT = 8
# The oldest Grafana whose dashboard model (timeseries panels, datasource refs by uid) this uses.
GRAFANA_VERSION = "9.0.0"
PANEL_NAMES = {"timeseries": "Time series", "text": "Text"}
# Jobs, not HTTP requests: Grafana's custom suffix unit.
JOBS_PER_SECOND = "suffix: jobs/s"
# Worker seconds per second: about the number of worker slots kept busy.
WORKER_SECONDS_PER_SECOND = "suffix: worker-s/s"
RUNBOOK_HEIGHT = 30


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


def timeseries(title: str, description: str, queries: Sequence[Query], unit: str, *,
               slo: float | None = None, dashed: str | None = None, stacked: bool = False,
               max_value: int | None = None) -> TimeSeries:
    """A time-series panel. ``slo`` draws a red threshold line there; ``dashed`` draws the series
    whose legend ends with it dashed (the configured target a realised value is read against)."""
    overrides = [] if dashed is None else [{
        "matcher": {"id": "byRegexp", "options": f".* {dashed}$"},
        "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
    }]
    steps = [{"color": "green", "value": None}] + ([] if slo is None else [{"color": "red", "value": slo}])
    return TimeSeries(
        title=title, description=description, dataSource=DATASOURCE, unit=unit, overrides=overrides,
        targets=[Target(expr=x.expr, legendFormat=x.legend, refId=chr(ord("A") + i), datasource=DATASOURCE)
                 for i, x in enumerate(queries)],
        thresholds=steps, thresholdsStyleMode="off" if slo is None else "line",
        stacking={"mode": "normal", "group": "A"} if stacked else {}, fillOpacity=30 if stacked else 0,
        valueMin=0, valueMax=max_value, legendDisplayMode="table", legendPlacement="right",
    )


Section = tuple[str, Sequence[tuple[Panel, int]]]


def layout(sections: Sequence[Section]) -> list[Panel]:
    """A row per section and its panels left to right, wrapping at the grid's width."""
    out: list[Panel] = []
    y = 0
    for title, cells in sections:
        out.append(RowPanel(title=title, dataSource=DATASOURCE, gridPos=GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        y, x = y + 1, 0
        for panel, width in cells:
            if x + width > GRID_WIDTH:
                y, x = y + PANEL_HEIGHT, 0
            out.append(attr.evolve(panel, gridPos=GridPos(h=PANEL_HEIGHT, w=width, x=x, y=y)))
            x += width
        y += PANEL_HEIGHT
    return out


def per_class(expr: str, suffix: str = "") -> Query:
    return Query(expr, "{{" + m.QUEUE + "}}" + suffix)


def per_shard(expr: str) -> Query:
    return Query(expr, "{{" + m.SHARD + "}}")


def runbook_url(config: Config, alert: str) -> str:
    """The alert's runbook as its rules link it (the configured template, else its panel of the
    runbooks dashboard)."""
    return link(config, alert, "runbook_url")


def alerts_panel(config: Config) -> Text:
    rows = [f"| [{a.name}]({runbook_url(config, a.name)}) | {a.fires_when} |" for a in build_alerts(config)]
    return Text(title="Alerts and runbooks", dataSource=DATASOURCE, content="\n".join(
        ["Firing alerts of this kit are the red annotations on every graph.", "",
         "| Alert (runbook) | Fires when |", "|---|---|", *rows]))


def alert_annotation(config: Config) -> dict[str, Any]:
    """The kit's firing alerts as annotations on every panel (Prometheus's ALERTS series)."""
    names = "|".join(a.name for a in build_alerts(config))
    return {
        "name": "fairctl alerts", "datasource": DATASOURCE, "enable": True, "hide": False, "iconColor": "red",
        "expr": f"{q.ALERTS}{{alertstate=\"firing\",alertname=~\"{names}\"}}", "step": "60s",
        "titleFormat": "{{alertname}}", "textFormat": "{{" + m.QUEUE + "}} {{severity}}",
        "tagKeys": f"severity,{m.QUEUE},{m.SHARD}", "useValueForTime": False,
    }


def picker(name: str, label: str, query: str) -> Template:
    """A multi-value variable, every value by default (as ``.*``, so a value that appears later is
    shown too)."""
    return Template(name=name, label=label, dataSource=DATASOURCE, refresh=REFRESH_ON_TIME_RANGE_CHANGE,
                    query=query, multi=True, includeAll=True, default="$__all", allValue=".*")


def class_variable() -> Template:
    """The overview's class picker: every class by default; an alert's dashboard link selects its own."""
    return picker(QUEUE_VAR, "Class", q.label_values(m.QUEUE_WEIGHT_RATIO.name, m.QUEUE))


def shard_variable() -> Template:
    """The shards of the group that the per-shard panels lay side by side: every one by default
    (an unsharded queue is one shard, named after its group)."""
    return picker(q.SHARD_VAR, "Shard", q.label_values(m.EXPORTER_BUILD_INFO.name, m.SHARD))


def variables(config: Config, *extra: Template) -> Templating:
    """The datasource (defaulted by the import input), the job and the queue group (one at a time, so
    every legend names one group's classes; both defaulted from the config: the group is the
    logical queue, its shards folded)."""
    return Templating(list=[
        Template(name=q.DATASOURCE_VAR, label="Data source", type="datasource", query="prometheus",
                 default=f"${{{INPUT}}}"),
        Template(name=q.JOB_VAR, label="Exporter job", dataSource=DATASOURCE,
                 default=alert_settings(config).exporter_job,
                 query=f"label_values({m.EXPORTER_BUILD_INFO.name}, {q.JOB})",
                 refresh=REFRESH_ON_TIME_RANGE_CHANGE),
        Template(name=GROUP_VAR, label="Queue group", dataSource=DATASOURCE, default=m.group_of(config),
                 query=f"label_values({m.EXPORTER_BUILD_INFO.name}{{{q.re(q.JOB, q.var(q.JOB_VAR))}}}, {m.GROUP})",
                 refresh=REFRESH_ON_TIME_RANGE_CHANGE),
        *extra,
    ])


def fed_sections(config: Config, sections: Sequence[Section]) -> list[Section]:
    """``sections`` less the panels whose queries read a series the config's exporter does not
    serve (a watched job system that lacks it, alerts.supplied), and less the rows left empty."""
    recordings = rec.expressions(config)

    def fed_panel(panel: Panel) -> bool:
        return fed(config, (t.expr for t in getattr(panel, "targets", ()) or ()), recordings)

    kept = [(title, [(panel, width) for panel, width in cells if fed_panel(panel)]) for title, cells in sections]
    return [(title, cells) for title, cells in kept if cells]


def dashboard(config: Config, uid: str, title: str, description: str, sections: Sequence[Section],
              *extra: Template) -> Dashboard:
    sections = fed_sections(config, sections)
    return Dashboard(
        uid=uid, title=title, description=description, tags=[TAG], editable=True, refresh="30s",
        time=Time("now-6h", "now"), timezone="browser", panels=layout(sections),
        templating=variables(config, *extra), annotations=Annotations(list=[alert_annotation(config)]),
        links=[DashboardLink(title="fairctl", type="dashboards", tags=[TAG], asDropdown=True, includeVars=True,
                             keepTime=True)],
        inputs=[DataSourceInput(name=INPUT, label="Prometheus", pluginId="prometheus", pluginName="Prometheus",
                                description="The Prometheus that scrapes the fairctl exporters")],
    ).auto_panel_ids()


def overview(config: Config) -> Dashboard:
    """Per class of the logical queue: SLO, share against weight, arrivals against budget, load,
    waits; its shards side by side; then tenants, lease churn and the alerts with their runbooks.
    For a watched system, in its terms, and without the shards (its queues have none)."""
    window = alert_settings(config).rate_window
    b, t = rec.basis(config), terms(config)
    cls_matcher = q.re(m.QUEUE, q.var(QUEUE_VAR))
    oldest = [(timeseries(
        f"Oldest job age: {c.name}", f"Age of the oldest due job in {c.name}; the red line is its max_age SLO "
        f"({number(c.max_age)}s, QueueStarving).",
        [Query(q.select(rec.OLDEST_AGE, q.eq(m.QUEUE, c.name)), "oldest age")], "s", slo=c.max_age),
        max(6, GRID_WIDTH // len(config.classes))) for c in config.classes]
    shards = shard_sections(config, cls_matcher)
    return dashboard(config, OVERVIEW_UID, "fairctl: overview",
                     "Priority classes and tenants of the fairctl queues, each queue as one over its shards "
                     "unless a panel says per shard (generated by fairctl generate)." if t is None else
                     f"Priority classes and tenants of the {t.name} queues the config watches (generated by fairctl "
                     "generate).", [
        ("Service level per class", oldest),
        ("Shares", [
            (timeseries(f"Realised {b.share_noun} vs configured weight",
                        f"Each class's part of all {b.served} (solid) against its weight / total weight (dashed).",
                        [per_class(q.select(b.share, cls_matcher), " realised"),
                         per_class(q.select(rec.WEIGHT_RATIO, cls_matcher), " weight")],
                        "percentunit", dashed="weight", max_value=1), 6),
            (timeseries("Worker time per class",
                        "Worker seconds per second that each class's finished jobs took, as their workers measured "
                        "them: about the worker slots the class keeps busy. Counted whatever scheduler.charge is; "
                        "under charge: runtime the weights share it out.",
                        [per_class(q.select(rec.WORKER_RATE, cls_matcher))], WORKER_SECONDS_PER_SECOND,
                        stacked=True), 6),
            (timeseries("Arrival mix vs budget",
                        "Each class's share of the arrivals the rules asked for (before demotion), against its "
                        "arrival_budget (dashed; PriorityMixDrift).",
                        [per_class(q.select(rec.REQUESTED_SHARE, cls_matcher), " asked"),
                         per_class(q.select(rec.ARRIVAL_BUDGET, cls_matcher), " budget")],
                        "percentunit", dashed="budget", max_value=1), 6),
            (timeseries("Arrivals by classification reason", "Jobs queued per second, by class and reason.",
                        [Query(q.select(rec.ENQUEUED_RATE, cls_matcher), "{{" + m.QUEUE + "}}: {{" + m.REASON + "}}")],
                        JOBS_PER_SECOND, stacked=True), 6),
        ]),
        ("Load", [
            (timeseries("Depth", "Due jobs waiting per class, over every shard.",
                        [per_class(q.select(rec.DEPTH, cls_matcher))], "short"), 6),
            (timeseries("Throughput", "Jobs completed per second per class.",
                        [per_class(q.select(rec.PROCESSED_RATE, cls_matcher))], JOBS_PER_SECOND), 6),
            (timeseries("In flight", "Jobs leased to workers right now, per class, over every shard." if t is None
                        else f"Jobs {t.name} is running right now, per class.",
                        [per_class(q.gauge("sum", m.QUEUE_INFLIGHT, cls_matcher))], "short", stacked=True), 6),
            (timeseries("Wait p50 / p99", f"Enqueue-to-{'lease' if t is None else 'start'} wait per class "
                        "(PriorityInversion reads the p99).",
                        [per_class(q.quantile(0.5, m.JOBS_WAIT.series("_bucket"), window, cls_matcher), " p50"),
                         per_class(q.select(rec.WAIT_P99, cls_matcher), " p99")], "s"), 6),
        ]),
        *shards,
        ("Tenants", [
            (timeseries(f"Top {config.exporter.topk_tenants} tenants per class",
                        f"Each class's busiest tenants over the last {format_duration(config.exporter.window)} "
                        "(exporter.window), whenever they first sent a job, and their share of the class's "
                        f"{b.served} (TenantDominatingQueue)." if t is None else
                        f"Each class's busiest tenants among the jobs waiting in it (the next {t.sample} "
                        "read), and their share of those (TenantDominatingQueue).",
                        [Query(q.select(b.tenant_share, cls_matcher), "{{" + m.QUEUE + "}}: {{" + m.TENANT + "}}")],
                        "percentunit", max_value=1), 6),
            (timeseries("Quiet tenants' oldest age",
                        "Oldest due job among each class's non-noisy tenants (QuietTenantsStarving).",
                        [per_class(q.select(rec.QUIET_AGE, cls_matcher))], "s"), 6),
            (timeseries("Noisy tenants", "Tenants holding over 10% of a class's in-flight jobs on their shard, "
                        "added up over the shards.",
                        [per_class(q.gauge("sum", m.QUEUE_NOISY_TENANTS, cls_matcher))], "short"), 6),
            (timeseries("Fairness index (worst shard)",
                        "Jain's index over the most backlogged tenants (1 = fair, 0 = none served). Each shard computes its own, "
                        "and indexes do not add up: this is the lowest shard's, per class.",
                        [per_class(q.gauge("min", m.QUEUE_FAIRNESS_INDEX, cls_matcher))], "none", max_value=1), 6),
        ]),
        *hold_sections(config, cls_matcher),
        ("Leases and moves between classes" if t is None else "Alerts", [
            (timeseries("Lease redeliveries", "Expired leases per second (JobsRedeliveredHigh).",
                        [per_class(q.select(rec.REDELIVERED_RATE, cls_matcher))], JOBS_PER_SECOND), 8),
            (timeseries("Promotions and demotions",
                        "Jobs aged up a class (promote_after) and arrivals sent down by an arrival budget.",
                        [per_class(q.rate(m.JOBS_PROMOTED.name, window, cls_matcher), " promoted"),
                         per_class(q.rate(m.JOBS_DEMOTED.name, window, cls_matcher), " demoted")], JOBS_PER_SECOND), 8),
            (alerts_panel(config), 8),
        ]),
        ("Dead letters and pauses", [
            (timeseries("Jobs dead-lettered", f"Jobs of each class given up on over the last "
                        f"{format_duration(window)}: failed leases.max_attempts times, or no "
                        "handler for their task (JobsDeadLettered). fairctl dead list shows them." if t is None else
                        f"Jobs of each class {t.name} gave up on over the last {format_duration(window)} "
                        f"(JobsDeadLettered): {t.gave_up}.",
                        [per_class(q.select(rec.DEAD_LETTERED, cls_matcher))], "short"), 8),
            (timeseries("Dead-letter list", "Jobs waiting in the dead-letter list until fairctl dead requeue "
                        "or drop takes them off, over every shard." if t is None else
                        f"Jobs waiting in {t.dead}: {t.again}.",
                        [Query(q.gauge("sum", m.DEAD_LETTERS), "dead letters")], "short"), 8),
            (timeseries("Paused classes", f"1 while a class is paused with {'fairctl pause' if t is None else t.pause} "
                        "(QueuePaused; its starvation alerts are silent meanwhile).",
                        [per_class(q.select(rec.PAUSED, cls_matcher))], "short", max_value=1), 8),
        ]),
    ], class_variable(), *([shard_variable()] if shards else []))


def shard_sections(config: Config, cls_matcher: str) -> list[Section]:
    """The queue's shards side by side; none for a watched system, whose queues live on one Redis."""
    if watched(config) is not None:
        return []
    window = alert_settings(config).rate_window
    return [("Shards side by side", [
        (timeseries("Depth per shard", "Due jobs of the classes picked waiting on each shard (the shard "
                    "variable picks which): one shard far above the others is the outlier. An unsharded "
                    "queue is one shard, named after its group.",
                    [per_shard(q.shard_gauge("sum", m.QUEUE_DEPTH, cls_matcher))], "short"), 8),
        (timeseries("Oldest job age per shard", "Age of the oldest due job of the classes picked on each "
                    "shard: the shard whose tenants wait longest.",
                    [per_shard(q.shard_gauge("max", m.QUEUE_OLDEST_AGE, cls_matcher))], "s"), 8),
        (timeseries("Throughput per shard", "Jobs of the classes picked completed per second on each shard: "
                    "one at 0 while it holds due jobs and the others complete is stalled (QueueShardStalled).",
                    [per_shard(q.shard_rate(m.JOBS_PROCESSED.name, window, cls_matcher))], JOBS_PER_SECOND), 8),
    ])]


def tenant(config: Config) -> Dashboard:
    """One tenant (the ``$tenant`` variable) against the rest of its classes. A watched system's
    tenant share is of the jobs waiting (docs/watching.md), and its panels say so."""
    this, rest = q.eq(m.TENANT, q.var(q.TENANT_VAR)), q.ne(m.TENANT, q.var(q.TENANT_VAR))
    b, t = rec.basis(config), terms(config)
    share = "its share" if t is None else "its share of the jobs waiting"
    # The tenant's part of what its classes serve, in the basis's own unit.
    served_title, served_what, served_unit = {
        m.JOBS_PROCESSED: ("Throughput per class",
                           f"Jobs of the tenant completed per second ({share} times the class's throughput)",
                           JOBS_PER_SECOND),
        m.QUEUE_WORKER_SECONDS: ("Worker time per class",
                                 (f"Worker seconds per second that the tenant's jobs took ({share} times the class's "
                                  "worker time)"), WORKER_SECONDS_PER_SECOND),
    }[b.counter]
    # Every tenant that was among a class's busiest at some point of the time range shown: the
    # tenants worth a look now, not the first ones the database ever saw.
    tenants = Template(
        name=q.TENANT_VAR, label="Tenant", dataSource=DATASOURCE, refresh=REFRESH_ON_TIME_RANGE_CHANGE,
        query=q.label_values(m.QUEUE_TENANT_SHARE.name, m.TENANT))
    accounts = () if config.tenants.account_separator is None else (account_variable(),)
    return dashboard(config, TENANT_UID, "fairctl: tenant", "One tenant against the rest of its classes.", [
        ("Tenant $tenant", [
            (timeseries(f"Share of its classes' {b.served if t is None else 'waiting jobs'}",
                        (f"The tenant's part of each class's {b.served} over exporter.window "
                         f"({format_duration(config.exporter.window)})" if t is None else
                         f"The tenant's part of the jobs waiting in each class (the next {t.sample} read)")
                        + f" while it is among the class's {config.exporter.topk_tenants} busiest "
                        "(TenantDominatingQueue).",
                        [per_class(q.select(b.tenant_share, this))], "percentunit", max_value=1), 12),
            (timeseries(f"Share of all {b.served} (top {config.exporter.topk_tenants})",
                        "The tenant against the other busiest tenants.",
                        [Query(q.tenant_share(b.counter, config.exporter.window, this), "$tenant"),
                         Query(q.tenant_share(b.counter, config.exporter.window, rest), "{{" + m.TENANT + "}}")],
                        "percentunit", max_value=1), 12),
            (timeseries("Oldest job age", "The tenant's oldest due job against its class's oldest, on any shard.",
                        [per_class(q.gauge("max", m.TENANT_OLDEST_AGE, this), " $tenant"),
                         per_class(q.select(rec.OLDEST_AGE), " class")], "s", dashed="class"), 12),
            (timeseries(served_title, f"{served_what}, against the class's.",
                        [per_class(f"{q.select(b.tenant_share, this)}\n  * ignoring ({m.TENANT}) group_left\n"
                                   f"{q.select(b.rate)}", " $tenant"),
                         per_class(q.select(b.rate), " class")],
                        served_unit, dashed="class"), 12),
        ]),
        *account_sections(config),
    ], tenants, *accounts)


def hold_sections(config: Config, *matchers: str) -> list[Section]:
    """With dispatch limits (tenants.max_in_flight, dispatch_rate, the account forms), who they hold
    per class and reason, and the jobs held; none without such a limit (nothing is held)."""
    if not rec.holds(config):
        return []
    by_reason = "{{" + m.QUEUE + "}}: {{" + m.REASON + "}}"
    return [("Dispatch limits", [
        (timeseries("Tenants held by their limits",
                    "Tenants held out of their class's fair order by a dispatch limit, per class and reason: cap "
                    "(tenants.max_in_flight), rate (dispatch_rate); for account_cap and account_rate, accounts "
                    "(account_max_in_flight, account_dispatch_rate). Their jobs stay queued until the hold ends; "
                    "fairctl explain --tenant says why one waits (TenantsHeldPastMaxAge).",
                    [Query(q.select(rec.HELD_TENANTS, *matchers), by_reason)], "short"), 12),
        (timeseries("Jobs held by their limits",
                    "Due jobs whose tenant (or account) is held by a dispatch limit, per class and reason, against "
                    "the class's due jobs (dashed). A job held by its tenant's and its account's limit counts under "
                    "each reason.",
                    [Query(q.select(rec.HELD_JOBS, *matchers), by_reason),
                     per_class(q.select(rec.DEPTH, *matchers), " depth")], "short", dashed="depth"), 12),
    ])]


def account_variable() -> Template:
    """The accounts that were among a class's busiest in the time range shown (one or several:
    Grafana escapes the values of a multi-value variable for the regex matcher)."""
    return Template(name=q.ACCOUNT_VAR, label="Account", dataSource=DATASOURCE, refresh=REFRESH_ON_TIME_RANGE_CHANGE,
                    query=q.label_values(m.QUEUE_ACCOUNT_SHARE.name, m.ACCOUNT), multi=True)


def account_sections(config: Config) -> list[Section]:
    """With ``tenants.account_separator``, the level fair queuing is fair to first: the accounts
    (every key of one together). Each panel reads only the top-k series the exporter serves, so
    the series shown stay bounded however many accounts and keys there are. None without it."""
    if config.tenants.account_separator is None:
        return []
    b, topk, window = rec.basis(config), config.exporter.topk_tenants, config.exporter.window
    picked = q.re(m.ACCOUNT, q.var(q.ACCOUNT_VAR))
    return [("Accounts", [
        (timeseries(f"Top {topk} accounts' share of each class's {b.served}",
                    f"Each class's {topk} busiest accounts over exporter.window ({format_duration(window)}), every "
                    f"key of an account together, and their share of the class's {b.served}, each shard's "
                    "weighted by what the shard served (AccountDominatingQueue).",
                    [Query(q.account_share(b.counter, window), "{{" + m.QUEUE + "}}: {{" + m.ACCOUNT + "}}")],
                    "percentunit", max_value=1), 12),
        (timeseries("Keys of $account",
                    f"The busiest keys (at most 3) of each account picked, and their share of the account's "
                    f"{b.served} in the class over exporter.window, while the account is among the class's "
                    f"{topk} busiest.",
                    [Query(q.account_tenant_share(b.counter, window, picked),
                           "{{" + m.QUEUE + "}}: {{" + m.TENANT + "}}")],
                    "percentunit", max_value=1), 12),
        (timeseries("Quiet accounts' oldest age",
                    "Oldest due job among each class's keys whose account is not noisy (its keys together hold over "
                    "10% of the class's in-flight or queued jobs), against the class's max_age SLO (dashed).",
                    [per_class(logical("max", q.select(m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name)), " quiet"),
                     per_class(q.select(rec.MAX_AGE), " SLO")], "s", dashed="SLO"), 12),
        (timeseries("Active accounts", "Accounts with due jobs per class, added up over the shards (an account's "
                    "jobs of a class stay on one shard of its hand while it has some queued there).",
                    [per_class(logical("sum", q.select(m.QUEUE_ACTIVE_ACCOUNTS.name)))], "short"), 12),
    ])]


_RUNBOOK_LINK = re.compile(r"\]\((\w+)\.md(#[\w-]*)?\)")


def runbook_text(config: Config, alert: str, text: str) -> str:
    """A rendered runbook as a Grafana text panel shows it: links between runbooks point at their
    panels (the index at the dashboard), so they open inside Grafana too."""
    names = {a.name for a in build_alerts(config)}

    def target(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in names:
            return f"]({runbook_url(config, name)})"
        return f"](/d/{RUNBOOKS_UID})" if name == "README" else match.group(0)

    return _RUNBOOK_LINK.sub(target, text.split("-->", 1)[-1].lstrip())


def runbooks(config: Config) -> Dashboard:
    """Every runbook, one full-width text panel per alert (its id is the alert's runbook_url's
    viewPanel), so the alerts' default links open in the same Grafana as the graphs."""
    texts = rb.render(config)
    panels = [Text(title=a.name, dataSource=DATASOURCE, id=runbook_panel(config, a.name),
                   content=runbook_text(config, a.name, texts[runbook_file(a.name)]),
                   gridPos=GridPos(h=RUNBOOK_HEIGHT, w=GRID_WIDTH, x=0, y=i * RUNBOOK_HEIGHT))
              for i, a in enumerate(build_alerts(config))]
    return Dashboard(
        uid=RUNBOOKS_UID, title="fairctl: runbooks",
        description="What each fairctl alert means and what to do (generated by fairctl generate).",
        tags=[TAG], editable=True, time=Time("now-6h", "now"), timezone="browser", panels=panels,
        templating=variables(config),
        links=[DashboardLink(title="fairctl", type="dashboards", tags=[TAG], asDropdown=True, includeVars=True,
                             keepTime=True)],
        inputs=[DataSourceInput(name=INPUT, label="Prometheus", pluginId="prometheus", pluginName="Prometheus",
                                description="The Prometheus that scrapes the fairctl exporters")],
    )


DASHBOARDS = (overview, tenant, runbooks)


def requires(board: Dashboard) -> list[dict[str, str]]:
    """What Grafana checks on import: itself, the datasource plugin and each panel plugin used."""
    panel_types = sorted({p.to_json_data()["type"] for p in board._iter_panels()} - {"row"})
    return [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *({"type": "panel", "id": t, "name": PANEL_NAMES[t], "version": ""} for t in panel_types)]


def without_nulls(data: Any) -> Any:
    """grafanalib writes every unset option as null, which Grafana's schema does not allow where
    it expects an object; omitted means default. Threshold values stay: null is the base step."""
    if isinstance(data, dict):
        return {k: without_nulls(v) for k, v in data.items() if v is not None or k == "value"}
    if isinstance(data, list):
        return [without_nulls(v) for v in data]
    return data


def to_json(board: Dashboard) -> str:
    data = without_nulls(json.loads(json.dumps(board.to_json_data(), cls=DashboardEncoder)))
    data["__requires"] = requires(board)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
