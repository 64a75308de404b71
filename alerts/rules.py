"""The generated alerts, built from the config, the metric contract and the recordings.

Per-class thresholds (SLO, weight, arrival budget) are read from the exporter's ``queue_*`` config
gauges, so one rules file serves every deployment of the same classes; the rest (tolerances,
windows, ``for:``) come from the config's ``alerts:`` section. Only two alerts name classes: the
starvation alert, whose severity and ``for:`` depend on the class (the most urgent class pages),
and the inversion alert, which is about the most urgent class alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter import metrics as m
from exporter.sources import watched
from fairness_core.config import ClassConfig, Config

from . import recording as rec
from .annotations import Query, Text
from .config import DEFAULT_GRAFANA_URL, alert_settings
from .layout import GROUP_VAR, OVERVIEW_UID, QUEUE_VAR, RUNBOOKS_UID
from .promql import dedup, duration, excluding, logical, number, over_time, quote, selector
from .supplied import fed, paused_served
from .watch_terms import terms

CRITICAL, WARNING, INFO = "critical", "warning", "info"
# Prometheus's own series: the only names used here that are not the exporter's.
UP = "up"
JOB = "job"
ALERTS_SERIES = "ALERTS"
# A share judged from n jobs is uncertain by about sqrt(d(1-d)/n) at share d (binomial): a tenant
# starts to dominate this many of those above tenant_dominance, and keeps on while above it.
DOMINANCE_MARGIN_SD = 2

QUEUE_STARVING = "QueueStarving"
QUEUE_SHARE_BELOW_WEIGHT = "QueueShareBelowWeight"
PRIORITY_MIX_DRIFT = "PriorityMixDrift"
PRIORITY_REASON_SHIFT = "PriorityReasonShift"
TENANT_DOMINATING_QUEUE = "TenantDominatingQueue"
ACCOUNT_DOMINATING_QUEUE = "AccountDominatingQueue"  # TenantDominatingQueue's place under accounts
QUIET_TENANTS_STARVING = "QuietTenantsStarving"
QUEUE_STALLED = "QueueStalled"
QUEUE_SHARD_STALLED = "QueueShardStalled"
PRIORITY_INVERSION = "PriorityInversion"
JOBS_REDELIVERED_HIGH = "JobsRedeliveredHigh"
FAIRNESS_EXPORTER_DOWN = "FairnessExporterDown"
FAIRNESS_EXPORTER_REDIS_DOWN = "FairnessExporterRedisDown"
JOBS_DEAD_LETTERED = "JobsDeadLettered"
JOBS_WITHOUT_HANDLER = "JobsWithoutHandler"
QUEUE_PAUSED = "QueuePaused"
JOBS_UNDER_UNCONFIGURED_CLASS = "JobsUnderUnconfiguredClass"
REDIS_MEMORY_HIGH = "RedisMemoryHigh"
REDIS_MAY_EVICT_JOBS = "RedisMayEvictJobs"
TENANT_AT_LIMIT = "TenantAtLimit"
TENANTS_HELD_PAST_MAX_AGE = "TenantsHeldPastMaxAge"  # only with dispatch limits (tenants.max_in_flight, ...)
QUEUE_STATE_LOST = "QueueStateLost"
QUEUE_CONFIG_SPLIT = "QueueConfigSplit"
REDIS_MASTER_CHANGED = "RedisMasterChanged"

SLO = {"slo": Query(rec.MAX_AGE)}
# The Redis server holding the alert's shard, as its exporter last found it (slot map, sentinels).
MASTER = {"master": Query(m.REDIS_MASTER.name, (m.GROUP, m.SHARD), m.MASTER)}


@dataclass(frozen=True)
class Variant:
    """One rule of an alert: most alerts have one; QueueStarving has one per class."""

    expr: str
    for_seconds: float
    severity: str
    queue: str | None = None


@dataclass(frozen=True)
class Alert:
    name: str
    fires_when: str  # one line for the table in docs/alerts.md and the runbook
    summary: Text
    description: Text
    variants: tuple[Variant, ...]
    of_shards: bool = False  # about one shard of a sharded queue: never for a watched system's queues

    def variant(self, queue: str | None = None) -> Variant:
        """The rule serving ``queue``; the only rule of an alert that has one."""
        if len(self.variants) == 1:
            return self.variants[0]
        return next(v for v in self.variants if v.queue == queue)


def starving_for(config: Config, cls: ClassConfig) -> float:
    """QueueStarving's ``for:`` for one class: the class's ``starving_for`` if set, else
    ``alerts.for`` if set, else max_age / 4 in whole minutes between 1m and 15m (15m for a 1h
    SLO; a minute for a 60s SLO)."""
    if cls.starving_for is not None:
        return cls.starving_for
    configured = alert_settings(config).for_durations[QUEUE_STARVING]
    if configured is not None:
        return configured
    return float(min(15, max(1, int(cls.max_age / 4 // 60))) * 60)


def for_seconds(config: Config, alert: str) -> float:
    value = alert_settings(config).for_durations[alert]
    if value is None:
        raise ValueError(f"{alert} has a per-class for:")
    return value


# How much longer than its for: an alert on an event (a counter's increase) must look back: the
# increase is seen from the first evaluation after the event until the window passes it, so a
# window no longer than for: would clear before for: is over and never fire. A minute covers one
# evaluation of the generated unit tests and Prometheus's usual 15s scrape and evaluation.
EVENT_MARGIN_S = 60.0


def event_window(config: Config, alert: str) -> float:
    """The look-back of ``alert``, which fires on an event: ``alerts.rate_window``, but at least
    its for: and :data:`EVENT_MARGIN_S`, so that every valid config's rule can fire."""
    return max(alert_settings(config).rate_window, for_seconds(config, alert) + EVENT_MARGIN_S)


def unhandled_window(config: Config) -> float:
    """The look-back of JobsWithoutHandler: a job given back comes due again after
    ``leases.retry_backoff_max``, so two of those see each waiting job given back again."""
    return max(alert_settings(config).rate_window, 2 * config.leases.retry_backoff_max)


def given_back(config: Config) -> str:
    """Leases given back for want of a handler per class over :func:`unhandled_window`: what
    JobsWithoutHandler and its runbook read."""
    return logical("sum", over_time("increase", m.JOBS_UNHANDLED.name, unhandled_window(config)))


def _one(config: Config, alert: str, expr: str, severity: str) -> tuple[Variant, ...]:
    return (Variant(expr, for_seconds(config, alert), severity),)


def _class(name: str) -> str:
    return f"{{{m.QUEUE}={quote(name)}}}"


def dominating_alert(party: rec.Level) -> str:
    """The dominance alert of ``party``'s level: TenantDominatingQueue, or under accounts
    AccountDominatingQueue in its place (an account of many keys dominates while none of its keys
    does, and an account of one key must not page twice)."""
    return ACCOUNT_DOMINATING_QUEUE if party is rec.ACCOUNTS else TENANT_DOMINATING_QUEUE


def dominating(config: Config) -> str:
    """A tenant (under accounts, an account) taking more than ``tenant_dominance`` of its class,
    with hysteresis: it starts clearly above the line (by :data:`DOMINANCE_MARGIN_SD` of the share's
    noise, so two tenants splitting a class near 50/50 do not take turns), stays while above it, and
    is judged only on ``tenant_min_jobs`` completions of the window (after a long pause, one job is
    100%)."""
    a, b, party = alert_settings(config), rec.basis(config), rec.level(config)
    d, label, share = number(a.tenant_dominance), party.label, b.share_of(party)
    entry = (f"{d} + {DOMINANCE_MARGIN_SD} * sqrt({number(a.tenant_dominance * (1 - a.tenant_dominance))} / "
             f"{rec.TENANT_WINDOW_JOBS})")
    already = selector(ALERTS_SERIES, alertname=dominating_alert(party))
    return (f"(\n{share}\n  > ignoring ({label}) group_left\n{entry}\n  or\n"
            f"{share} > {d}\n  and on ({m.GROUP}, {m.QUEUE}, {label})\n{already}\n)\n"
            f"  and ignoring ({label})\n{party.active} >= 2\n"
            f"  and ignoring ({label})\n{rec.TENANT_WINDOW_JOBS} >= {a.tenant_min_jobs}")


def dominance_words(config: Config) -> tuple[str, str, str]:
    """What a dominating party's share is of, for the dominance alert's texts: (how much it takes,
    the window its jobs completed are counted in, its description). For fairctl's own queues, its
    class's service over exporter.window; a watched system records no tenant with a completion, so
    there it is the share of the jobs waiting, sampled (watch.sample; docs/watching.md)."""
    a, b, party, t = alert_settings(config), rec.basis(config), rec.level(config), terms(config)
    share, window = number(a.tenant_dominance * 100), duration(config.exporter.window)
    if t is None:
        return (f"gets more than {share}% of a class's {b.served} over {window} (exporter.window)", "the window",
                f"Over the last {window}, {party.noun} ${party.label} got $value:percent of {b.served_in} $queue "
                f"while $active:number {party.noun}s had jobs waiting in it.")
    return (f"has more than {share}% of the jobs waiting in a class (of the next {t.sample} read)",
            f"{window} (exporter.window)",
            f"{party.noun.capitalize()} ${party.label} has $value:percent of the next {t.sample} jobs waiting in "
            f"$queue while $active:number {party.noun}s have jobs waiting in it.")


def quiet_age(config: Config) -> str:
    """The oldest due job among the parties not flooding a class: with accounts, those of the
    accounts that are not noisy (a flooding account's own keys are each small, and would count as
    quiet tenants), else the quiet tenants' recording."""
    if rec.level(config) is rec.TENANTS:
        return rec.QUIET_AGE
    return logical("max", m.QUEUE_QUIET_ACCOUNTS_OLDEST_AGE.name)


def unless_paused(config: Config, expr: str, queue: str | None = None) -> str:
    """``expr`` silenced for a class while it is paused: a paused class's jobs wait by design, and
    QueuePaused tells that story instead of a starvation alert's. A watched system whose pauses
    the exporter cannot see gets ``expr`` as it is."""
    if not paused_served(config):
        return expr
    return f"{expr}\n  unless\n{rec.PAUSED}{_class(queue) if queue else ''} > 0"


def unconfigured_jobs() -> str:
    """Jobs per class the config does not name, every state and shard together."""
    return f"sum without ({m.STATE}) ({logical('sum', m.UNCONFIGURED_JOBS.name)})"


def memory_fill() -> str:
    """Redis's used memory / maxmemory (nothing when it has no limit), the fullest a shard reads."""
    return (f"max without ({m.SHARD}) (\n  {dedup(m.REDIS_MEMORY_USED.name)}\n  / "
            f"{dedup(m.REDIS_MEMORY_MAX.name + ' > 0')}\n)")


def may_evict(window: float) -> str:
    """An evicting policy (with its name), or else keys evicted within ``window``, on any shard: per
    queue group, since each group may have a Redis of its own."""
    unsafe = logical("max", excluding(m.REDIS_MEMORY_POLICY, m.POLICY, m.SAFE_POLICY))
    evicted = logical("max", over_time("increase", m.REDIS_EVICTED_KEYS.name, window))
    return f"{unsafe}\n  or\n({evicted} > 0\n  unless ignoring ({m.POLICY})\n{unsafe})"


def stalled(config: Config, fold: Callable[[str, str], str]) -> str:
    """Due jobs through ``alerts.stall_after`` (and at its start), no completion in it, and never
    paused in it; ``fold`` folds the shards' series: :func:`~alerts.promql.logical` for the logical
    queue, or one shard's deduplicated series as they are."""
    stall = alert_settings(config).stall_after
    return (f"{fold('sum', over_time('min_over_time', m.QUEUE_DEPTH.name, stall))} > 0\n"
            f"  and\n{fold('sum', m.QUEUE_DEPTH.name + ' offset ' + duration(stall))} > 0\n"
            + (f"  unless\n{fold('max', over_time('max_over_time', m.QUEUE_PAUSED.name, stall))} > 0\n"
               if paused_served(config) else "")
            + f"  unless\n{fold('sum', over_time('increase', m.JOBS_PROCESSED.name, stall))} > 0")


def held_past_max_age(config: Config) -> str:
    """Jobs of a class held by a dispatch limit (per reason) while its oldest due job is older than
    its max_age, and the class not paused (QueuePaused tells that story)."""
    expr = (f"{rec.HELD_JOBS} > 0\n  and ignoring ({m.REASON})\n{rec.OLDEST_AGE} > {rec.MAX_AGE}")
    if paused_served(config):
        expr += f"\n  unless ignoring ({m.REASON})\n{rec.PAUSED} > 0"
    return expr


def holds_alerts(config: Config) -> tuple[Alert, ...]:
    """The alert on tenants held by their dispatch limits: only when the config sets such a limit
    (without one, nothing is held and the exporter serves no held series)."""
    if not rec.holds(config):
        return ()
    return (Alert(
        TENANTS_HELD_PAST_MAX_AGE,
        f"some of a class's due jobs are held by their tenant's or account's dispatch limit "
        f"(tenants.max_in_flight, dispatch_rate, account_max_in_flight, account_dispatch_rate: "
        f"{m.QUEUE_HELD_JOBS.name}, labelled with the reason) while the class's oldest due job is older "
        "than its max_age, and the class is not paused",
        Text("Jobs of $queue held by a $reason limit wait while the class is past its SLO"),
        Text('$value:number jobs of $queue wait queued because their tenant (for the account_ reasons, their '
             'account) is held by a dispatch limit, reason "$reason" ($tenants:number held), while the class\'s '
             "oldest due job has waited $age:duration, over its SLO of $slo:duration. When the oldest jobs are "
             "theirs, the limit is why they wait, not the workers: raise that tenant's limit (tenants.overrides) "
             "and apply the config, or tell the tenant its jobs wait by its own limit.",
             {**SLO, "age": Query(rec.OLDEST_AGE),
              "tenants": Query(rec.HELD_TENANTS, (m.GROUP, m.QUEUE, m.REASON))}),
        _one(config, TENANTS_HELD_PAST_MAX_AGE, held_past_max_age(config), WARNING),
    ),)


def configs_run() -> str:
    """How many configs the shards of each logical queue run: its shards' fingerprints as the
    queue's (each shard deduplicated over its exporters), counted once each."""
    return f"count without ({m.FINGERPRINT}) (\n  count without ({m.SHARD}) ({dedup(m.GROUP_CONFIG.name)})\n)"


def masters_read(window: float) -> str:
    """How many Redis masters each shard's exporters read within ``window``: servers told apart by
    run_id (another address, or a restart at the same one), each counted once over the exporters.
    A series whose run_id is not read yet ("": an exporter started while Redis was down, a Cluster
    slot map that moved before the new master was read) counts for none."""
    seen = over_time("count_over_time", excluding(m.REDIS_MASTER, m.RUN_ID, ""), window)
    return f"count without ({m.MASTER}, {m.RUN_ID}) (\n  {dedup(seen)}\n)"


def per_shard(_aggregation: str, expr: str) -> str:
    """A shard's own series, deduplicated (the ``fold`` of :func:`stalled` that keeps shards apart)."""
    return dedup(expr)


def build_alerts(config: Config) -> tuple[Alert, ...]:
    """Every alert the config's exporter can feed (alerts.supplied; a watched system's queues have no
    shards), in the order the docs list them."""
    recordings = rec.expressions(config)
    return tuple(a for a in every_alert(config) if fed(config, (v.expr for v in a.variants), recordings)
                 and not (a.of_shards and watched(config) is not None))


def left_out(config: Config) -> tuple[str, ...]:
    """The alerts the config's exporter cannot feed (a watched system that lacks their series)."""
    kept = {a.name for a in build_alerts(config)}
    return tuple(a.name for a in every_alert(config) if a.name not in kept)


def every_alert(config: Config) -> tuple[Alert, ...]:
    """Every alert, in the order the docs list them."""
    a = alert_settings(config)
    window, budget_window = duration(a.rate_window), duration(config.scheduler.budget_window)
    unhandled_window_text = duration(unhandled_window(config))
    evict_window = duration(event_window(config, REDIS_MAY_EVICT_JOBS))
    lost_window = duration(event_window(config, QUEUE_STATE_LOST))
    changed_window = duration(event_window(config, REDIS_MASTER_CHANGED))
    min_arrivals = config.scheduler.budget_min_arrivals
    urgent = config.classes[0].name
    stall = a.stall_after
    up = selector(UP, **{JOB: a.exporter_job})
    b, party = rec.basis(config), rec.level(config)
    whom = "tenant" if party is rec.TENANTS else "account (all of a customer's keys together)"
    t = terms(config)  # a watched system's words; None: fairctl's own queues
    dominance = dominance_words(config)
    owner = "the scheduler" if t is None else t.name  # whose jobs and bookkeeping Redis holds
    # Whether the alerts judge a class "not paused": not where the exporter sees no pauses (a watched system's).
    not_paused = paused_served(config)
    return (
        Alert(
            QUEUE_STARVING,
            f"the class's oldest due job is older than its max_age ({m.QUEUE_MAX_AGE.name})"
            + (", and the class is not paused" if not_paused else ""),
            Text("$queue: the oldest job has waited longer than the class's SLO"),
            Text("The oldest due job in $queue has waited $value:duration; the class's SLO (max_age) is "
                 "$slo:duration. Every job behind it waits too.", SLO),
            tuple(
                Variant(unless_paused(config, f"{rec.OLDEST_AGE}{_class(c.name)} > {rec.MAX_AGE}{_class(c.name)}", c.name),
                        starving_for(config, c), CRITICAL if c.name == urgent else WARNING, c.name)
                for c in config.classes
            ),
        ),
        Alert(
            QUEUE_SHARE_BELOW_WEIGHT,
            f"a class backlogged for {window} realises less than {number(a.share_tolerance)} x the share its "
            "weight entitles it to among the backlogged classes (never when it gets more because others are empty)",
            Text("$queue gets far less than its weight"),
            Text(f"Over the last {window}, $queue got $value:percent of {b.served_for} the backlogged "
                 f"classes: less than {number(a.share_tolerance)} x the $entitled:percent its weight entitles it "
                 "to, while other classes were backlogged too.", {"entitled": Query(rec.ENTITLED_SHARE)}),
            _one(config, QUEUE_SHARE_BELOW_WEIGHT,
                 f"{b.backlogged_share}\n  < {number(a.share_tolerance)} * {rec.ENTITLED_SHARE}", WARNING),
        ),
        Alert(
            PRIORITY_MIX_DRIFT,
            f"a class's share of the arrivals asked for over {budget_window} exceeds its arrival_budget "
            f"({m.QUEUE_ARRIVAL_BUDGET.name}), with at least {min_arrivals} arrivals",
            Text("$queue is asked for more than its arrival budget"),
            Text(f"Over the last {budget_window}, the classification rules put $value:percent of all arrivals "
                 "in $queue (counting the jobs then demoted or rejected); its arrival_budget is "
                 "$budget:percent. The budget holds the excess back; find the rule or caller that drifted.",
                 {"budget": Query(rec.ARRIVAL_BUDGET)}),
            _one(config, PRIORITY_MIX_DRIFT,
                 f"{rec.REQUESTED_SHARE} > {rec.ARRIVAL_BUDGET}\n  and ignoring ({m.QUEUE})\n"
                 f"sum without ({m.QUEUE}) ({rec.REQUESTED_RATE}) * {number(config.scheduler.budget_window)} "
                 f">= {min_arrivals}", WARNING),
        ),
        Alert(
            PRIORITY_REASON_SHIFT,
            f"one classification reason's share of a class's arrivals rose by more than "
            f"{number(a.reason_shift * 100)} points against {duration(a.reason_baseline)} ago "
            f"(classes with at least {min_arrivals} arrivals per {budget_window})",
            Text('"$reason" grew in $queue'),
            Text(f'"$reason" gave $value:percent of the arrivals into $queue over the last {budget_window}, '
                 f"against $baseline:percent {duration(a.reason_baseline)} earlier: a classification rule, "
                 "or what callers send, changed.",
                 {"baseline": Query(rec.REASON_BASELINE, (m.GROUP, m.QUEUE, m.REASON))}),
            _one(config, PRIORITY_REASON_SHIFT,
                 f"{rec.REASON_SHARE} > {rec.REASON_BASELINE} + {number(a.reason_shift)}\n"
                 f"  and ignoring ({m.REASON})\nsum without ({m.REASON}) ({rec.ENQUEUED_RATE}) * "
                 f"{number(config.scheduler.budget_window)} >= {min_arrivals}", INFO),
        ),
        Alert(
            dominating_alert(party),
            f"one {whom} {dominance[0]} while at least one other {party.noun} has jobs waiting in it: clearly "
            f"more to start (beyond the noise of a share of that many jobs), judged on at least "
            f"{a.tenant_min_jobs} jobs completed in {dominance[1]}",
            Text(f"{party.noun.capitalize()} ${party.label} takes most of $queue"),
            Text(dominance[2], {"active": Query(party.active)}),
            # Its for: and thresholds are TenantDominatingQueue's: the same alert, judged per account.
            _one(config, TENANT_DOMINATING_QUEUE, dominating(config), WARNING),
        ),
        Alert(
            QUIET_TENANTS_STARVING,
            f"the oldest job among a class's non-noisy {party.noun}s is older than the class's max_age"
            + (", and the class is not paused" if not_paused else ""),
            Text(f"Quiet {party.noun}s of $queue wait longer than its SLO"),
            Text(f"The oldest due job among the {party.noun}s of $queue that are not flooding it has waited "
                 "$value:duration, over the class's SLO of $slo:duration: "
                 + (f"fair queuing is not protecting the small {party.noun}s." if t is None else
                    f"{t.name} takes each queue's jobs in the order they came, so the small {party.noun}s' jobs "
                    "wait behind the flood."), SLO),
            _one(config, QUIET_TENANTS_STARVING, unless_paused(config, f"{quiet_age(config)} > {rec.MAX_AGE}"), WARNING),
        ),
        Alert(
            QUEUE_STALLED,
            f"a class {'that is not paused ' if not_paused else ''}had due jobs for {duration(stall)} and completed "
            "none on any of its shards",
            Text("$queue has due jobs but completes none"),
            Text(f"$queue has had at least $value:number due jobs for {duration(stall)} and completed none"
                 + (", and it was not paused." if not_paused else ".")),
            _one(config, QUEUE_STALLED, stalled(config, logical), CRITICAL),
        ),
        Alert(
            QUEUE_SHARD_STALLED,
            f"one shard of a class that is not paused had due jobs for {duration(stall)} and completed none, "
            "while the class's other shards complete jobs",
            Text("Shard $shard of $queue has due jobs but completes none"),
            Text(f"Shard $shard of $queue (on Redis $master) has had at least $value:number due jobs for "
                 f"{duration(stall)} and completed none, while the class completes jobs on its other shards: "
                 "the tenants whose jobs sit on this shard wait while the queue looks healthy.", MASTER),
            _one(config, QUEUE_SHARD_STALLED,
                 f"(\n{stalled(config, per_shard)}\n)\n  unless ignoring ({m.SHARD})\n(\n{stalled(config, logical)}\n)",
                 CRITICAL),
            of_shards=True,
        ),
        Alert(
            PRIORITY_INVERSION,
            f"{urgent}'s p99 wait over {window} exceeds its max_age while at most "
            f"{a.inversion_max_depth} of its jobs are due, and it was not paused in that window",
            Text("$queue waits longer than its SLO while nearly empty"),
            Text(f"The p99 wait of $queue over the last {window} is $value:duration, over its SLO of "
                 "$slo:duration, with only $depth:number jobs due: the worker slots are busy with other "
                 "classes' long jobs.", {**SLO, "depth": Query(rec.DEPTH)}),
            (Variant(f"{rec.WAIT_P99}{_class(urgent)} > {rec.MAX_AGE}{_class(urgent)}\n"
                     f"  and\n{rec.DEPTH}{_class(urgent)} <= {a.inversion_max_depth}\n"
                     f"  unless\n{logical('max', over_time('max_over_time', m.QUEUE_PAUSED.name + _class(urgent), a.rate_window))}"
                     " > 0",
                     for_seconds(config, PRIORITY_INVERSION), WARNING, urgent),),
        ),
        Alert(
            JOBS_REDELIVERED_HIGH,
            f"leases taken back exceed {number(a.redelivery_ratio * 100)}% of a class's completions over {window}",
            Text("Leases of $queue are being taken back"),
            Text(f"Over the last {window}, leases taken back in $queue came to $value:percent of its completed "
                 f"jobs (more than {number(a.redelivery_ratio * 100)}%; +Inf: none completed): workers die "
                 f"or jobs outlive leases.visibility_timeout ({duration(config.leases.visibility_timeout)})."),
            _one(config, JOBS_REDELIVERED_HIGH,
                 f"{rec.REDELIVERED_RATE} / {rec.PROCESSED_RATE} > {number(a.redelivery_ratio)}", WARNING),
        ),
        Alert(
            JOBS_DEAD_LETTERED,
            f"jobs of a class were dead-lettered in the last {window} (failed leases.max_attempts times, or "
            "had no handler at a worker started with --unhandled dead-letter)" if t is None else
            f"{t.name} gave up jobs of a class in the last {window} ({t.gave_up})",
            Text("Jobs of $queue were dead-lettered"),
            Text(f"$value:number jobs of $queue were dead-lettered in the last {window}: they failed "
                 f"{config.leases.max_attempts} times (leases.max_attempts) or had no handler at a worker that "
                 "dead-letters those, and nothing runs them again until someone requeues them (fairctl dead list)."
                 if t is None else
                 f"{t.name} gave up $value:number jobs of $queue in the last {window}: {t.gave_up}. They wait in "
                 f"{t.dead}, and {t.again}."),
            _one(config, JOBS_DEAD_LETTERED, f"{rec.DEAD_LETTERED} > 0", WARNING),
        ),
        Alert(
            JOBS_WITHOUT_HANDLER,
            f"workers kept giving back jobs of a class for want of a handler for their task: some in every "
            f"{unhandled_window_text} for {duration(for_seconds(config, JOBS_WITHOUT_HANDLER))}",
            Text("Workers have no handler for jobs of $queue"),
            Text(f"Workers gave back $value:number leases of $queue in the last {unhandled_window_text} because "
                 "they have no handler for the job's task. The jobs wait, queued, for a worker that has one: "
                 "a worker runs an older build than the producers, or a task name is mistyped."),
            _one(config, JOBS_WITHOUT_HANDLER,
                 f"{given_back(config)} > 0",
                 WARNING),
        ),
        Alert(
            QUEUE_PAUSED,
            f"a class has been paused ({'fairctl pause' if t is None else t.pause}) for "
            f"{duration(for_seconds(config, QUEUE_PAUSED))} (alerts.for.QueuePaused); its starvation alerts stay "
            "silent meanwhile",
            Text("$queue has been paused for a long time"),
            Text(f"$queue has been paused for at least {duration(for_seconds(config, QUEUE_PAUSED))}: no worker "
                 "takes its jobs ($depth:number are due) and its starvation alerts are silent while it is paused. "
                 f"Resume it ({'fairctl resume' if t is None else t.resume}) unless the pause is still meant.",
                 {"depth": Query(rec.DEPTH)}),
            _one(config, QUEUE_PAUSED, f"{rec.PAUSED} > 0", WARNING),
        ),
        Alert(
            JOBS_UNDER_UNCONFIGURED_CLASS,
            "Redis holds jobs (queued, in flight or delayed) under a class the applied config does not name",
            Text("Jobs wait under $queue, a class the config no longer names"),
            Text("$value:number jobs sit under $queue, which the applied config does not name (removed or "
                 "renamed without moving its jobs): no worker takes its queued jobs, and the oldest has waited "
                 "$age:duration. Move them to a configured class (fairctl config apply FILE --move OLD=NEW) or "
                 "put the class back.", {"age": Query(rec.UNCONFIGURED_AGE)}),
            _one(config, JOBS_UNDER_UNCONFIGURED_CLASS, f"{unconfigured_jobs()} > 0", WARNING),
        ),
        Alert(
            REDIS_MEMORY_HIGH,
            f"Redis uses more than {number(a.memory_warning * 100)}% of its maxmemory (alerts.memory_warning); "
            + (f"fairctl refuses new enqueues at {number(config.redis.memory_headroom * 100)}% (redis.memory_headroom)"
               if t is None else f"at 100% it refuses {t.name}'s writes"),
            Text("Redis is filling up: enqueues will be refused soon"),
            Text(f"Redis uses $value:percent of its maxmemory. At {number(config.redis.memory_headroom * 100)}% "
                 "(redis.memory_headroom) fairctl refuses new enqueues (RedisMemoryFull), and Redis itself at "
                 "100%; pops and acks go on, so workers drain. Find what fills it before producers fail." if t is None
                 else f"Redis uses $value:percent of its maxmemory. At 100% it refuses writes (OOM): {t.name}'s "
                 "producers cannot queue jobs, and its workers cannot take or finish them. Find what fills it "
                 "before producers fail."),
            _one(config, REDIS_MEMORY_HIGH, f"{memory_fill()} > {number(a.memory_warning)}", WARNING),
        ),
        Alert(
            REDIS_MAY_EVICT_JOBS,
            f"Redis's maxmemory-policy is not {m.SAFE_POLICY}, or it evicted keys in the last {evict_window}",
            Text(f"Redis may evict {owner}'s jobs"),
            Text(f'Redis\'s maxmemory-policy is "$policy" (empty: it is {m.SAFE_POLICY} now but evicted keys in the '
                 f"last {evict_window}). Under any policy but {m.SAFE_POLICY} Redis deletes keys when memory runs short, "
                 + ("the scheduler's among them: queued jobs and leases vanish with no error. Workers and producers "
                    "refuse such a Redis" if t is None else
                    f"{t.name}'s among them: queued and running jobs vanish with no error")
                 + f"; set maxmemory-policy {m.SAFE_POLICY}."),
            _one(config, REDIS_MAY_EVICT_JOBS, may_evict(event_window(config, REDIS_MAY_EVICT_JOBS)), CRITICAL),
        ),
        Alert(
            FAIRNESS_EXPORTER_DOWN,
            f"no target of job {a.exporter_job} is up (or there is none)",
            Text("No fairctl exporter is up in job $job"),
            Text("Prometheus reaches no fairctl exporter of job $job: the queue alerts cannot fire."),
            _one(config, FAIRNESS_EXPORTER_DOWN,
                 f"{dedup(up)} == 0\n  or\nabsent({up})", CRITICAL),
        ),
        Alert(
            FAIRNESS_EXPORTER_REDIS_DOWN,
            f"no exporter can read {owner}'s {'bookkeeping of a shard' if t is None else 'queues'} from Redis",
            Text("The fairctl exporters cannot read Redis"),
            Text(f"No exporter of job $job has read shard $shard of queue $group from its Redis, $master "
                 f"({m.EXPORTER_REDIS_UP.name} 0 everywhere): that Redis is down or too slow, and the queue alerts "
                 "cannot see the jobs on it.", MASTER),
            _one(config, FAIRNESS_EXPORTER_REDIS_DOWN, f"{dedup(m.EXPORTER_REDIS_UP.name)} == 0", CRITICAL),
        ),
        Alert(
            TENANT_AT_LIMIT,
            f"arrivals for a class were refused because their tenant was at an admission limit, its "
            f"queued jobs (tenants.max_queued) or its arrival rate (tenants.max_rate): some within the last "
            f"{window}, for {duration(for_seconds(config, TENANT_AT_LIMIT))} on end",
            Text("Arrivals for $queue are refused at a tenant's admission limit"),
            Text(f"$value:number arrivals for $queue were refused in the last {window}: their tenant had as many "
                 "jobs queued as its limit allows (tenants.max_queued) or sent faster than its arrival rate "
                 "(tenants.max_rate), or its tier's tenants.limits. The producer sends faster than its limits "
                 "let in; what it sends meanwhile is lost unless it retries."),
            _one(config, TENANT_AT_LIMIT, f"{rec.REFUSED} > 0", WARNING),
        ),
        *holds_alerts(config),
        Alert(
            QUEUE_STATE_LOST,
            f"an exporter found its queue group's state reset in the last {lost_window} (its applied config gone or "
            f"created anew: {m.STATE_RESETS.name}); every job queued or leased in that shard was lost",
            Text("Shard $shard of queue $group lost its state, and its jobs"),
            Text(f"The exporters of shard $shard of $group found its state reset (in the last {lost_window}): its applied "
                 "config is gone or was created anew, and with it every job that was queued, leased or delayed there. "
                 "Redis restarted without persistence, failed over to an empty replica, or was flushed. Nothing in "
                 "Redis can bring the jobs back: producers must send them again."),
            _one(config, QUEUE_STATE_LOST,
                 f"{dedup(over_time('increase', m.STATE_RESETS.name, event_window(config, QUEUE_STATE_LOST)))} > 0",
                 CRITICAL),
        ),
        Alert(
            QUEUE_CONFIG_SPLIT,
            f"the shards of a sharded queue run different configs ({m.GROUP_CONFIG.name}): an apply stopped part "
            "way (its process died, a shard refused the config or its Redis went away), where one takes well "
            "under a second",
            Text("The shards of queue $group run $value:number different configs"),
            Text("The shards of $group run $value:number different configs: an apply stopped part way (its process "
                 "died, a shard refused the config, or its Redis went away). Each shard schedules by its own, so the "
                 "queue's weights, SLOs and limits are not the ones applied. Apply the config again (fairctl config "
                 "apply FILE): it reaches every shard."),
            _one(config, QUEUE_CONFIG_SPLIT, f"{configs_run()} > 1", WARNING),
        ),
        Alert(
            REDIS_MASTER_CHANGED,
            f"the exporters of a shard read more than one Redis master in the last {changed_window} "
            f"({m.REDIS_MASTER.name}, told apart by run_id): a failover put another server in its place, or the "
            "master restarted; labelled with the shard",
            Text("Shard $shard of queue $group changed Redis master"),
            Text(f"The exporters of shard $shard of $group read $value:number Redis masters in the last "
                 f"{changed_window} (another server, or the same address restarted); it is on $master now. Writes "
                 "the old master acknowledged and had not replicated are gone: jobs submitted then may be missing, "
                 + ("jobs acked then may run again, and leases taken then come back after their visibility timeout. "
                    "On a Redis Cluster, a reshard that moved the shard's slot changes its master with nothing lost."
                    if t is None else f"and jobs {t.name}'s workers took or finished then may run again."),
                 MASTER),
            _one(config, REDIS_MASTER_CHANGED,
                 f"{masters_read(event_window(config, REDIS_MASTER_CHANGED))} > 1", CRITICAL),
        ),
    )


def runbook_panel(config: Config, alert: str) -> int:
    """The id of ``alert``'s panel on the runbooks dashboard: its place in :func:`build_alerts`."""
    return 1 + [a.name for a in build_alerts(config)].index(alert)


def link_templates(config: Config, alert: str) -> dict[str, str]:
    """``runbook_url`` and ``dashboard_url`` of ``alert`` as ``str.format`` templates with
    ``{alert}``, ``{group}`` and ``{queue}``: the config's templates, else built on
    ``alerts.grafana_url``: the alert's panel of the runbooks dashboard, and the overview dashboard
    with the alert's queue group and class selected."""
    a = alert_settings(config)
    grafana = a.grafana_url or DEFAULT_GRAFANA_URL
    return {
        "runbook_url": a.runbook_url or f"{grafana}/d/{RUNBOOKS_UID}?viewPanel={runbook_panel(config, alert)}",
        "dashboard_url": a.dashboard_url
        or f"{grafana}/d/{OVERVIEW_UID}?var-{GROUP_VAR}={{group}}&var-{QUEUE_VAR}={{queue}}",
    }


def link(config: Config, alert: str, key: str, queue: str = "") -> str:
    """One link of ``alert`` as a URL, for the config's queue group and ``queue`` (none: every class)."""
    return link_templates(config, alert)[key].format(alert=alert, group=m.group_of(config), queue=queue)


def links(config: Config, alert: str) -> Mapping[str, Text]:
    """``runbook_url`` and ``dashboard_url`` as annotations: the group and class filled in by
    Prometheus, URL-escaped."""
    return {key: Text(template.format(alert=alert, group=f"${m.GROUP}:url", queue=f"${m.QUEUE}:url"))
            for key, template in link_templates(config, alert).items()}


def link_warnings(config: Config) -> list[str]:
    """Why the alerts' links may not open where the alerts are read (``fairctl check`` prints them)."""
    a = alert_settings(config)
    out = []
    for key, template in (("runbook_url", a.runbook_url), ("dashboard_url", a.dashboard_url)):
        if template is not None and "://" not in template:
            out.append(f"alerts.{key} {template!r} is not an absolute URL: Alertmanager receivers, chat and "
                       "Grafana cannot open it; use https://... (or leave it unset to link into Grafana)")
    if a.grafana_url is None and (a.runbook_url is None or a.dashboard_url is None):
        out.append(f"alerts.grafana_url is not set: the alerts' links point at {DEFAULT_GRAFANA_URL} (the compose "
                   "stack's Grafana) and open only on that machine; set it to the Grafana your team opens")
    return out
