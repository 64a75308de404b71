"""The config's ``alerts`` section: thresholds and links of the generated rules, parsed and checked
here (fairness_core.config_sections declares it to the core) and read with :func:`alert_settings`.

Nothing here imports more than the core: a producer that loads a config with an ``alerts`` section
loads this module, and none of the rule generation's libraries.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fairness_core.config import Config, format_duration, fraction, one_line, parse_duration
from fairness_core.config_sections import Section
from fairness_core.yaml_reader import ConfigError, Reader, base_url, int_between, kind_of, nonempty_str

# Grafana as compose/docker-compose.yml publishes it: the alerts' links are built on it until
# alerts.grafana_url says where the team's Grafana is.
DEFAULT_GRAFANA_URL = "http://127.0.0.1:3000"
# Placeholders a runbook or dashboard URL template may use.
URL_PLACEHOLDERS = ("alert", "group", "queue")
# ``for:`` of every generated alert; ``alerts.for`` overrides any of them. None (QueueStarving)
# means per class: its max_age / 4 in whole minutes, between 1m and 15m, so a 1h SLO waits the
# usual 15m and the interactive class pages a minute after its SLO is missed.
ALERT_FOR: Mapping[str, float | None] = MappingProxyType({
    "QueueStarving": None,
    "QueueShareBelowWeight": 900.0,
    "PriorityMixDrift": 900.0,
    "PriorityReasonShift": 1800.0,
    "TenantDominatingQueue": 900.0,
    "QuietTenantsStarving": 300.0,
    "QueueStalled": 300.0,
    "QueueShardStalled": 300.0,
    "PriorityInversion": 300.0,
    "JobsRedeliveredHigh": 900.0,
    "FairnessExporterDown": 300.0,
    "FairnessExporterRedisDown": 120.0,
    # Dead letters: a minute, so a job dead-lettered is seen within minutes; the alert then holds
    # for alerts.rate_window after the last one.
    "JobsDeadLettered": 60.0,
    # Jobs given back for want of a handler: longer than the look-back (alerts.rate_window, or two
    # retry_backoff_max when longer), so a rolling deploy's burst of give-backs from old workers
    # does not fire it, while a handler missing for good, given back every backoff, does.
    "JobsWithoutHandler": 900.0,
    # How long a class may stay paused before it is called forgotten: half an hour covers a
    # deploy or a dependency's maintenance, and is shorter than the bulk class's usual SLO (1h).
    "QueuePaused": 1800.0,
    # Jobs under a class the config does not name: long enough to ride out the moment between a
    # config apply and its --move, short enough that nobody's jobs wait unseen for long.
    "JobsUnderUnconfiguredClass": 300.0,
    # Memory over alerts.memory_warning: a minute, since a storm can fill the rest to the headroom
    # (where enqueues are refused) within minutes.
    "RedisMemoryHigh": 60.0,
    # An evicting policy loses jobs silently: a minute, to ride out a scrape or a CONFIG SET typo.
    "RedisMayEvictJobs": 60.0,
    # A queue group's state lost (reset): a minute; the loss is final, and the counter that tells it
    # stays raised for alerts.rate_window, so the page goes out once, however long it is held.
    "QueueStateLost": 60.0,
    # The shards of a sharded queue on different configs: two minutes. An apply reaches every shard
    # within a second and every exporter sees it within a scrape, so a split that lasts is one an
    # apply left half done.
    "QueueConfigSplit": 120.0,
    # A shard's Redis master changed (a failover, or a restart): a minute, so the page names the
    # master every exporter settled on; the change is final, and the window it is counted over
    # (alerts.rate_window) holds it, so the page goes out once, however long it is held.
    "RedisMasterChanged": 60.0,
    # Refusals at a tenant's admission limit: five minutes, so a producer that backs off after a
    # refusal or two is not called stuck, while one that keeps sending into the limit is.
    "TenantAtLimit": 300.0,
    # Jobs held by their tenants' dispatch limits while the class is past its SLO (generated only
    # with such limits): QuietTenantsStarving's five minutes, as it is a finer reading of starvation.
    "TenantsHeldPastMaxAge": 300.0,
})


@dataclass(frozen=True)
class AlertsConfig:
    """Thresholds and links of the generated alert rules (see alerts/ and docs/alerts.md).

    Per-class thresholds (max_age, weights, arrival budgets) are not here: the rules read them from
    the exporter's config gauges, so one rules file serves every deployment of the same classes.
    Links: ``grafana_url`` is the one base both default links are built from (the runbooks are a
    generated Grafana dashboard too); ``runbook_url``/``dashboard_url`` templates override them.
    """

    rate_window: float = 600.0
    share_tolerance: float = 0.5
    tenant_dominance: float = 0.5
    # TenantDominatingQueue judges a tenant's share only once its class completed this many jobs
    # over exporter.window: after a pause, the first job served is 100% of one job.
    tenant_min_jobs: int = 20
    reason_shift: float = 0.3
    reason_baseline: float = 86400.0
    stall_after: float = 600.0
    inversion_max_depth: int = 5
    redelivery_ratio: float = 0.05
    # RedisMemoryHigh fires at this fraction of maxmemory: below redis.memory_headroom, so people
    # hear of it before enqueues are refused.
    memory_warning: float = 0.8
    exporter_job: str = "fairctl-exporter"
    runbook_url: str | None = None
    dashboard_url: str | None = None
    # Where people open Grafana, without a trailing slash; None: not configured, links are built
    # on DEFAULT_GRAFANA_URL (the compose stack's) and `fairctl check` warns.
    grafana_url: str | None = None
    worker_slots: int | None = None
    for_durations: Mapping[str, float | None] = field(default_factory=lambda: ALERT_FOR)


def _url_template(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    if any(ch.isspace() or ch == "$" for ch in text):
        raise ConfigError(path, f"expected a URL without spaces or $, got {text!r}")
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise ConfigError(path, f"not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    for name, spec, conv in fields:
        if name not in URL_PLACEHOLDERS or spec or conv:
            raise ConfigError(path, f"unknown placeholder {{{name}}}; use {{alert}}, {{group}} and {{queue}}")
    return text


def _for_durations(value: object, path: str) -> Mapping[str, float | None]:
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping of alert name to duration, got {kind_of(value)}")
    for name in value:
        if name not in ALERT_FOR:
            raise ConfigError(f"{path}.{name}", f"unknown alert; expected one of: {', '.join(ALERT_FOR)}")
    return MappingProxyType({**ALERT_FOR, **{k: parse_duration(v, f"{path}.{k}") for k, v in value.items()}})


def _parse(r: Reader | None, core: Config) -> AlertsConfig:
    if r is None:
        return _checked(AlertsConfig(), core)
    d = AlertsConfig
    out = AlertsConfig(
        rate_window=r.get("rate_window", d.rate_window, parse_duration),
        share_tolerance=r.get("share_tolerance", d.share_tolerance, fraction),
        tenant_dominance=r.get("tenant_dominance", d.tenant_dominance, fraction),
        tenant_min_jobs=r.get("tenant_min_jobs", d.tenant_min_jobs, int_between(1, 10**9)),
        reason_shift=r.get("reason_shift", d.reason_shift, fraction),
        reason_baseline=r.get("reason_baseline", d.reason_baseline, parse_duration),
        stall_after=r.get("stall_after", d.stall_after, parse_duration),
        inversion_max_depth=r.get("inversion_max_depth", d.inversion_max_depth, int_between(0, 10**6)),
        redelivery_ratio=r.get("redelivery_ratio", d.redelivery_ratio, fraction),
        memory_warning=r.get("memory_warning", d.memory_warning, fraction),
        exporter_job=r.get("exporter_job", d.exporter_job, one_line),
        runbook_url=r.get("runbook_url", None, _url_template),
        dashboard_url=r.get("dashboard_url", None, _url_template),
        grafana_url=r.get("grafana_url", None, base_url("https://grafana.example.com")),
        worker_slots=r.get("worker_slots", None, int_between(1, 10**6)),
        for_durations=r.get("for", ALERT_FOR, _for_durations),
    )
    if out.reason_baseline <= out.rate_window:
        raise r.error("reason_baseline", "must be longer than alerts.rate_window (it compares against that long ago)")
    return _checked(out, core)


def _checked(alerts: AlertsConfig, core: Config) -> AlertsConfig:
    """The checks against the core's sections, which the defaults must pass too."""
    reason_for = alerts.for_durations.get("PriorityReasonShift") or 0.0
    if alerts.reason_baseline <= core.scheduler.budget_window + reason_for:
        raise ConfigError("alerts.reason_baseline",
                          f"must be longer than scheduler.budget_window plus PriorityReasonShift's for: "
                          f"({format_duration(core.scheduler.budget_window + reason_for)}), got "
                          f"{format_duration(alerts.reason_baseline)}: a baseline that recent catches up with a lasting "
                          "shift before for: is over, so the alert could never fire", core.source)
    if alerts.memory_warning >= core.redis.memory_headroom:
        raise ConfigError("alerts.memory_warning", f"must be below redis.memory_headroom ({core.redis.memory_headroom:g}), "
                          f"got {alerts.memory_warning:g}: the alert must fire before enqueues are refused", core.source)
    return alerts


def _dump(a: AlertsConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rate_window": format_duration(a.rate_window), "share_tolerance": a.share_tolerance,
        "tenant_dominance": a.tenant_dominance, "reason_shift": a.reason_shift,
        "reason_baseline": format_duration(a.reason_baseline), "stall_after": format_duration(a.stall_after),
        "inversion_max_depth": a.inversion_max_depth, "redelivery_ratio": a.redelivery_ratio,
        "memory_warning": a.memory_warning, "exporter_job": a.exporter_job,
        "for": {k: format_duration(v) for k, v in a.for_durations.items() if v is not None and v != ALERT_FOR[k]},
    }
    optional = {"runbook_url": a.runbook_url, "dashboard_url": a.dashboard_url, "grafana_url": a.grafana_url,
                "worker_slots": a.worker_slots,
                # Stored only when set, so the fingerprints of configs from before it stay the same.
                "tenant_min_jobs": a.tenant_min_jobs if a.tenant_min_jobs != AlertsConfig.tenant_min_jobs else None}
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


# Dumped even at its defaults, as before the section had an owner: the stored forms (and so the
# fingerprints) of the groups running hold.
SECTION = Section(name="alerts", default=AlertsConfig(), parse=_parse, dump=_dump)


def alert_settings(config: Config) -> AlertsConfig:
    """The config's ``alerts`` section (its defaults where the file leaves it out)."""
    settings = config.section(SECTION.name)
    assert isinstance(settings, AlertsConfig)
    return settings
