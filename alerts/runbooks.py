"""One Markdown runbook per alert, rendered with jinja2 from templates shipped as package data.

The templates hold the prose (the failure modes of a prioritised queue); every PromQL query they
show comes from :func:`diagnostics`, built here from the metric contract and the recording rules,
so the runbooks never spell a metric name and always match the rules they explain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import jinja2

from exporter import metrics as m
from exporter.config import serving
from exporter.sources import watched
from fairness_core.config import OVER_BUDGET_REASON, Config

from . import recording as rec
from . import rules as r
from .config import alert_settings
from .layout import RUNBOOKS_DIR, runbook_file
from .promql import dedup, duration, logical, logical_rate, number, over_time, selector
from .supplied import fed

INDEX = RUNBOOKS_DIR / "README.md"


@dataclass(frozen=True)
class Diagnostic:
    """A query to run while investigating: what it shows, and the PromQL."""

    title: str
    promql: str


def diagnostics(config: Config) -> Mapping[str, Diagnostic]:
    """Every query the runbooks show, by the key the templates use."""
    a, budget = alert_settings(config), serving(config).scrape_timeout
    window = a.rate_window
    inflight = logical("sum", m.QUEUE_INFLIGHT.name)
    stall = a.stall_after
    b = rec.basis(config)
    # What is running: fairctl's leases, or a watched system's jobs its workers run.
    held, started = ("Leased jobs", "lease") if watched(config) is None else ("Jobs running", "start")
    d = Diagnostic
    return {
        "oldest_vs_slo": d("Oldest due job per class against its SLO (above 1: older than max_age)",
                           f"{rec.OLDEST_AGE} / {rec.MAX_AGE}"),
        "quiet_vs_slo": d(f"Oldest job of the quiet (non-noisy) {rec.level(config).noun}s against the SLO",
                          f"{r.quiet_age(config)} / {rec.MAX_AGE}"),
        "depth": d("Due jobs per class", rec.DEPTH),
        "delayed": d("Failed jobs waiting out their retry backoff", logical("sum", m.QUEUE_DELAYED.name)),
        "paused": d("Paused classes (1: paused" + (" with fairctl pause)" if watched(config) is None else ")"),
                    rec.PAUSED),
        "inflight": d(f"{held} per class: who holds the worker slots", inflight),
        "fleet_busy": d(f"{held} against the slots the fleet registered (near 1: saturated)",
                        f"sum without ({m.QUEUE}) ({inflight})\n  / {logical('max', m.WORKER_SLOTS.name)}"),
        "throughput": d("Completions per second per class", rec.PROCESSED_RATE),
        "worker_time": d("Worker seconds per second per class (about the worker slots its jobs keep busy)",
                         rec.WORKER_RATE),
        "share_vs_weight": d(f"Realised {b.share_noun} against configured weight ("
                             "above 1 is the surplus of empty classes, as it should be)",
                             f"{b.share} / {rec.WEIGHT_RATIO}"),
        "backlogged": d(f"Classes backlogged through the last {duration(window)} and not paused", rec.BACKLOGGED),
        "backlogged_share": d("Realised against entitled share among the backlogged classes (what "
                              "QueueShareBelowWeight compares)", f"{b.backlogged_share} / {rec.ENTITLED_SHARE}"),
        "requested_vs_budget": d("Share of arrivals asked for against the arrival budget (above 1: over budget)",
                                 f"{rec.REQUESTED_SHARE} / {rec.ARRIVAL_BUDGET}"),
        "demoted": d("Arrivals demoted one class down by the budget, per second",
                     logical_rate(m.JOBS_DEMOTED.name, window)),
        "rejected": d("Arrivals rejected by the budget, per second", logical_rate(m.JOBS_REJECTED.name, window)),
        "reason_rate": d("Arrivals per second by class and classification reason: which rule sends what",
                         f"sort_desc({rec.ENQUEUED_RATE})"),
        "reason_shift": d(f"Each reason's share of its class now, minus {duration(a.reason_baseline)} ago",
                          f"{rec.REASON_SHARE} - {rec.REASON_BASELINE}"),
        "top_tenants": d(f"The five tenants with the largest share of their class's {b.served} over "
                         f"{duration(config.exporter.window)}",
                         f"topk(5, {b.tenant_share})"),
        "noisy": d(f"Tenants judged noisy per class (more than 10% of its {held.lower()})",
                   logical("sum", m.QUEUE_NOISY_TENANTS.name)),
        "active_tenants": d("Tenants with due jobs per class", rec.ACTIVE_TENANTS),
        "fairness_index": d("Jain's fairness index over the class's backlogged tenants, per shard (1: fair; 1/n: one "
                            "takes all; 0: none of them served, starved)", dedup(m.QUEUE_FAIRNESS_INDEX.name)),
        "oldest_tenants": d("The ten tenants whose oldest job has waited longest",
                            f"topk(10, {dedup(m.TENANT_OLDEST_AGE.name)})"),
        "wait_p99_vs_slo": d(f"p99 enqueue-to-{started} wait per class against its SLO", f"{rec.WAIT_P99} / {rec.MAX_AGE}"),
        "completed_lately": d(f"Jobs completed per class over the last {duration(stall)}",
                              logical("sum", over_time("increase", m.JOBS_PROCESSED.name, stall))),
        "failed": d("Failed attempts per second per class (handlers raising)", logical_rate(m.JOBS_FAILED.name, window)),
        "redelivered_vs_completed": d("Leases taken back against completions per class",
                                      f"{rec.REDELIVERED_RATE} / {rec.PROCESSED_RATE}"),
        "dead_letters": d("Jobs in the dead-letter lists", logical("sum", m.DEAD_LETTERS.name)),
        "dead_lettered": d(f"Jobs dead-lettered per class over the last {duration(window)}", rec.DEAD_LETTERED),
        "unhandled": d(f"Leases given back for want of a handler per class over the last "
                       f"{duration(r.unhandled_window(config))}",
                       r.given_back(config)),
        "refused": d(f"Arrivals refused at a tenant's admission limit per class over the last {duration(window)}",
                     rec.REFUSED),
        "paused_since": d("Time each class spent paused over the last day (seconds)",
                          f"count_over_time(({rec.PAUSED} > 0)[1d:1m]) * 60"),
        "unconfigured_jobs": d("Jobs under classes the config does not name, by state (queued: served by no one)",
                               logical("sum", m.UNCONFIGURED_JOBS.name)),
        "unconfigured_age": d("Age of the oldest queued job of each class the config does not name",
                              rec.UNCONFIGURED_AGE),
        "memory_fill": d(f"Redis's used memory against maxmemory (fairctl refuses enqueues at "
                         f"{number(config.redis.memory_headroom)}, redis.memory_headroom)", r.memory_fill()),
        "memory_growth": d(f"How fast Redis's memory grows, bytes per second over {duration(window)}",
                           dedup(over_time("deriv", m.REDIS_MEMORY_USED.name, window))),
        "policy": d("Redis's maxmemory-policy (fairctl runs only on noeviction)", dedup(m.REDIS_MEMORY_POLICY.name)),
        "evicted": d(f"Keys Redis evicted over the last {duration(window)}",
                     dedup(over_time("increase", m.REDIS_EVICTED_KEYS.name, window))),
        "shard_depth": d("Due jobs per class on each shard (one shard far above the rest: the outlier)",
                         dedup(m.QUEUE_DEPTH.name)),
        "shard_oldest": d("Oldest due job per class on each shard", dedup(m.QUEUE_OLDEST_AGE.name)),
        "shard_inflight": d("Leased jobs per class on each shard", dedup(m.QUEUE_INFLIGHT.name)),
        "shard_completed": d(f"Jobs completed per class on each shard over the last {duration(stall)}",
                             dedup(over_time("increase", m.JOBS_PROCESSED.name, stall))),
        "shard_master": d("The Redis server holding each shard", dedup(m.REDIS_MASTER.name)),
        "masters_read": d(f"The Redis masters each shard's exporters read over the last "
                          f"{duration(r.event_window(config, r.REDIS_MASTER_CHANGED))}, by address and run_id (a "
                          "restarted server has another run_id; the value: samples of each)",
                          dedup(over_time("count_over_time", m.REDIS_MASTER.name,
                                          r.event_window(config, r.REDIS_MASTER_CHANGED)))),
        "state_resets": d(f"Resets of each shard's state found over the last {duration(window)}",
                          dedup(over_time("increase", m.STATE_RESETS.name, window))),
        "shard_configs": d("The config each shard runs, by its fingerprint as the queue's (one per queue when they "
                           "agree)", dedup(m.GROUP_CONFIG.name)),
        "shard_config_versions": d("The applied config's version on each shard (each shard counts its own applies, "
                                   "and a shard a re-shard added starts again at 1)", dedup(m.CONFIG_VERSION.name)),
        "up": d("Which exporter targets Prometheus reaches", selector(r.UP, **{r.JOB: a.exporter_job})),
        "redis_up": d("Which exporters read Redis (per exporter, not deduplicated)", m.EXPORTER_REDIS_UP.name),
        "scrape_errors": d("Why scrapes could not read Redis (timeout, unavailable, error), per second",
                           over_time("rate", m.EXPORTER_SCRAPE_ERRORS.name, 300)),
        "scrape_duration": d(f"Time a scrape takes (exporter.scrape_timeout is {duration(budget)})",
                             m.EXPORTER_SCRAPE_DURATION.name),
        **(_account_diagnostics(config) if rec.level(config) is rec.ACCOUNTS else {}),
        **(_hold_diagnostics() if rec.holds(config) else {}),
    }


def _hold_diagnostics() -> Mapping[str, Diagnostic]:
    """The queries about tenants held by dispatch limits, recorded only when the config sets one."""
    return {
        "held_tenants": Diagnostic("Tenants held by their dispatch limits per class and reason (accounts, for the "
                                   "account_ reasons)", rec.HELD_TENANTS),
        "held_jobs": Diagnostic("Due jobs waiting held, per class and reason", rec.HELD_JOBS),
        "held_share": Diagnostic("Held jobs as a share of the class's due jobs (a job held by its tenant's and its "
                                 "account's limit counts twice)",
                                 f"sum without ({m.REASON}) ({rec.HELD_JOBS})\n  / {rec.DEPTH}"),
    }


def _account_diagnostics(config: Config) -> Mapping[str, Diagnostic]:
    """The queries about accounts, recorded only when the config names them."""
    b = rec.basis(config)
    return {
        "top_accounts": Diagnostic(f"The five accounts (all of a customer's keys together) with the largest share of "
                                   f"their class's {b.served} over {duration(config.exporter.window)}",
                                   f"topk(5, {b.share_of(rec.ACCOUNTS)})"),
        "active_accounts": Diagnostic("Accounts with due jobs per class", rec.ACTIVE_ACCOUNTS),
    }


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("alerts", "templates"), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
    )


def render(config: Config) -> dict[PurePosixPath, str]:
    """Every runbook and their index, by path relative to the generated directory."""
    env = _environment()
    alerts = r.build_alerts(config)
    recordings = rec.expressions(config)
    watch = watched(config)
    common = {
        "config": config, "alert_settings": alert_settings(config), "serving": serving(config),
        "q": {key: d for key, d in diagnostics(config).items() if fed(config, (d.promql,), recordings)},
        "alerts": alerts, "duration": duration, "number": number,
        "system": None if watch is None else watch.system,
        "queues": {} if watch is None else {name: tuple(dict.fromkeys(ref.queue for ref in refs))
                                            for name, refs in watch.classes.items()},
        "config_file": Path(config.source).name if config.source else "fairness.yaml",
        "each": lambda template, names: [template.replace("{}", name) for name in names],
        "urgent": config.classes[0].name, "bulk": config.classes[-1].name,
        "link": lambda alert, key: r.link(config, alert, key), "over_budget_reason": OVER_BUDGET_REASON,
        "tenant_share_metric": m.QUEUE_TENANT_SHARE.name, "account_share_metric": m.QUEUE_ACCOUNT_SHARE.name,
        "basis": rec.basis(config),
        "holds": rec.holds(config), "held_tenants_metric": m.QUEUE_HELD_TENANTS.name,
        "held_jobs_metric": m.QUEUE_HELD_JOBS.name,
        "runtime": config.scheduler.charge == "runtime", "unhandled_window": r.unhandled_window(config),
    }
    files = {runbook_file(a.name): env.get_template(f"runbooks/{a.name}.md.j2").render(alert=a, **common)
             for a in alerts}
    files[INDEX] = env.get_template("index.md.j2").render(**common)
    return files
