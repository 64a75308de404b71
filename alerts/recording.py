"""Recording rules: the expressions several alerts (and the dashboards) share, evaluated once.

Names follow Prometheus's ``level:metric:operation`` convention under the ``fairctl`` level and
are built from the metric contract; they carry no window so that dashboards can rely on them
whatever ``alerts.rate_window`` is. Every recording describes a logical queue: each raw series is
deduplicated across exporters first (:func:`alerts.promql.dedup`), then folded over the queue's
shards (:func:`alerts.promql.logical`; the operation in the name says how: ``sum``, ``max``, or a
rate summed). Import the name constants; never retype them. The realised shares
depend on ``scheduler.charge`` (shares of completions or of worker time): take their names from
:func:`basis`.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import metrics as m
from fairness_core.config import OVER_BUDGET_REASON, Config

from .config import alert_settings
from .promql import dedup, deduped_rate, excluding, logical, logical_rate, over_shards, over_time, share
from .supplied import fed, paused_served

LEVEL = "fairctl"


def _name(spec: m.MetricSpec, operation: str) -> str:
    return f"{LEVEL}:{spec.name.removesuffix('_total')}:{operation}"


# Gauges of the logical queue, each folded over the shards as the queue is one: counts summed (a
# tenant's due jobs of a class sit on one shard, so active tenants add up too), ages the oldest,
# paused if any shard is, and the config's gauges (the same on every shard) as they are.
LOGICAL_GAUGES: tuple[tuple[m.MetricSpec, str], ...] = (
    (m.QUEUE_OLDEST_AGE, "max"), (m.QUEUE_QUIET_OLDEST_AGE, "max"), (m.QUEUE_DEPTH, "sum"),
    (m.QUEUE_ACTIVE_TENANTS, "sum"), (m.QUEUE_MAX_AGE, "max"), (m.QUEUE_WEIGHT_RATIO, "max"),
    (m.QUEUE_ARRIVAL_BUDGET, "max"), (m.QUEUE_PAUSED, "max"), (m.UNCONFIGURED_OLDEST_AGE, "max"),
)
OLDEST_AGE, QUIET_AGE, DEPTH, ACTIVE_TENANTS, MAX_AGE, WEIGHT_RATIO, ARRIVAL_BUDGET, PAUSED, UNCONFIGURED_AGE = (
    _name(spec, operation) for spec, operation in LOGICAL_GAUGES)
BACKLOGGED = _name(m.QUEUE_DEPTH, "backlogged")
PROCESSED_RATE = _name(m.JOBS_PROCESSED, "rate")
TENANT_WINDOW_JOBS = _name(m.JOBS_PROCESSED, "tenant_window_increase")
WORKER_RATE = _name(m.QUEUE_WORKER_SECONDS, "rate")
ENTITLED_SHARE = _name(m.QUEUE_WEIGHT_RATIO, "backlogged")
ENQUEUED_RATE = _name(m.JOBS_ENQUEUED, "rate")
REASON_SHARE = _name(m.JOBS_ENQUEUED, "reason_share")
REASON_BASELINE = _name(m.JOBS_ENQUEUED, "reason_share_baseline")
REQUESTED_RATE = _name(m.JOBS_ENQUEUED, "requested_rate")
REQUESTED_SHARE = _name(m.JOBS_ENQUEUED, "requested_share")
REDELIVERED_RATE = _name(m.JOBS_REDELIVERED, "rate")
DEAD_LETTERED = _name(m.JOBS_DEAD_LETTERED, "increase")
REFUSED = _name(m.JOBS_REFUSED, "increase")
WAIT_P99 = _name(m.JOBS_WAIT, "p99")

# With tenants.account_separator set, the exporter serves account series too; the active accounts
# are folded over the shards as active tenants are (an account's due jobs of a class sit on one shard).
ACCOUNT_GAUGES: tuple[tuple[m.MetricSpec, str], ...] = ((m.QUEUE_ACTIVE_ACCOUNTS, "sum"),)
ACTIVE_ACCOUNTS = _name(m.QUEUE_ACTIVE_ACCOUNTS, "sum")

# With dispatch limits (tenants.max_in_flight, dispatch_rate and the account forms), the exporter
# serves who they hold per class and reason; summed over the shards (each counts those it holds).
HOLD_GAUGES: tuple[tuple[m.MetricSpec, str], ...] = ((m.QUEUE_HELD_TENANTS, "sum"), (m.QUEUE_HELD_JOBS, "sum"))
HELD_TENANTS, HELD_JOBS = (_name(spec, operation) for spec, operation in HOLD_GAUGES)


def holds(config: Config) -> bool:
    """Whether the config's dispatch limits can hold a tenant or an account (the held series are served)."""
    return config.tenants.holds


@dataclass(frozen=True)
class Level:
    """Whom the per-party figures judge: each tenant, or with ``tenants.account_separator`` each
    account (all of its keys together), the party fair queuing is fair to."""

    noun: str  # "tenant", "account"
    one: str  # "a tenant", "an account"
    label: str  # the party's label on its series
    share_metric: m.MetricSpec  # the exporter's share of the class per party, for the busiest
    active_metric: m.MetricSpec  # parties with due jobs per class
    active: str  # recorded: ``active_metric`` of the logical queue


TENANTS = Level("tenant", "a tenant", m.TENANT, m.QUEUE_TENANT_SHARE, m.QUEUE_ACTIVE_TENANTS, ACTIVE_TENANTS)
ACCOUNTS = Level("account", "an account", m.ACCOUNT, m.QUEUE_ACCOUNT_SHARE, m.QUEUE_ACTIVE_ACCOUNTS, ACTIVE_ACCOUNTS)


def level(config: Config) -> Level:
    """The party the config's fair queuing is fair to: accounts when it names them, else tenants."""
    return TENANTS if config.tenants.account_separator is None else ACCOUNTS


@dataclass(frozen=True)
class Basis:
    """What the realised shares are shares of, which ``scheduler.charge`` decides: completions
    (``jobs``), or worker time (``runtime``, where the weights are shares of worker time). The
    share recordings are named after the counter they share out, so a name never claims a basis
    the figures are not in; the phrases put the basis in every text that speaks of a share."""

    counter: m.MetricSpec
    rate: str  # recorded per-second rate of ``counter`` per class
    share: str  # each class's part of all of it
    backlogged_share: str  # each backlogged class's part among the backlogged classes
    tenant_share: str  # a tenant's part of its class's over exporter.window, over every shard
    share_noun: str  # "realised {share_noun} against ..."
    served: str  # what is shared out: "of all {served}", "a class's {served}"
    served_for: str  # "{served_for} the backlogged classes"
    served_in: str  # "{served_in} a class"

    def share_of(self, party: Level) -> str:
        """A party's part of its class's service over exporter.window, over every shard
        (:attr:`tenant_share` for tenants)."""
        return _name(self.counter, f"{party.noun}_share")


def _basis(counter: m.MetricSpec, rate: str, share_noun: str, served: str, served_for: str,
           served_in: str) -> Basis:
    return Basis(counter, rate, _name(counter, "share"), _name(counter, "backlogged_share"),
                 _name(counter, "tenant_share"), share_noun, served, served_for, served_in)


BASES: dict[str, Basis] = {
    "jobs": _basis(m.JOBS_PROCESSED, PROCESSED_RATE, "share", "completions", "the jobs completed for",
                   "the jobs completed in"),
    "runtime": _basis(m.QUEUE_WORKER_SECONDS, WORKER_RATE, "share of worker time", "worker time",
                      "the worker time spent on", "the worker time spent on"),
}


def basis(config: Config) -> Basis:
    """The basis of the realised shares under ``config``'s ``scheduler.charge``."""
    return BASES[config.scheduler.charge]


@dataclass(frozen=True)
class Recording:
    name: str
    expr: str
    why: str


def zero_filled(expr: str) -> str:
    """``expr`` with a 0 for every configured class it has no series for (a class that never
    completed a job has no completion series at all, and must count as 0, not vanish)."""
    return f"({expr})\nor\n({WEIGHT_RATIO} * 0)"


def recording_rules(config: Config) -> tuple[Recording, ...]:
    """The recording rules the config's exporter can feed (alerts.supplied), in dependency order."""
    exprs = expressions(config)
    return tuple(x for x in every_recording(config) if fed(config, (x.expr,), exprs))


def expressions(config: Config) -> dict[str, str]:
    """Every recording rule's expression by its name: what a query naming one reads."""
    return {x.name: x.expr for x in every_recording(config)}


def every_recording(config: Config) -> tuple[Recording, ...]:
    """Every recording rule, in dependency order (one group evaluates them in turn)."""
    window, budget_window = alert_settings(config).rate_window, config.scheduler.budget_window
    baseline = alert_settings(config).reason_baseline
    b = basis(config)
    enqueued_then = logical_rate(m.JOBS_ENQUEUED.name, budget_window, baseline)
    backlogged_part = f"{WEIGHT_RATIO} * {BACKLOGGED}"
    served_part = f"{b.rate} * {BACKLOGGED}"
    requested = (
        "(\n" + zero_filled(f"sum without ({m.REASON}) ("
                            f"{logical_rate(excluding(m.JOBS_ENQUEUED, m.REASON, OVER_BUDGET_REASON), budget_window)})")
        + f"\n)\n+ {logical_rate(m.JOBS_DEMOTED.name, budget_window)}"
        f"\n+ {logical_rate(m.JOBS_REJECTED.name, budget_window)}"
    )
    return (
        *(Recording(_name(spec, operation), logical(operation, spec.name),
                    f"{spec.name} of the logical queue: the {operation} over its shards, one value whatever the "
                    "number of exporters.")
          for spec, operation in LOGICAL_GAUGES + (ACCOUNT_GAUGES if level(config) is ACCOUNTS else ())
          + (HOLD_GAUGES if holds(config) else ())),
        Recording(
            BACKLOGGED,
            f"(\n  {logical('max', over_time('min_over_time', m.QUEUE_DEPTH.name, window) + ' > bool 0')}\n)"
            + (f"\n* (\n  {logical('max', over_time('max_over_time', m.QUEUE_PAUSED.name, window))} == bool 0\n)"
               if paused_served(config) else ""),
            "1 when the class had due jobs through the whole window (on a shard at least) and was never paused "
            "in it, else 0.",
        ),
        Recording(
            PROCESSED_RATE,
            zero_filled(logical_rate(m.JOBS_PROCESSED.name, window)),
            "Completions per second per class, rated per exporter, deduplicated, summed over the shards.",
        ),
        Recording(
            WORKER_RATE,
            zero_filled(logical_rate(m.QUEUE_WORKER_SECONDS.name, window)),
            "Worker seconds per second per class (about the worker slots its jobs keep busy), whatever "
            "scheduler.charge is.",
        ),
        Recording(b.share, share(b.rate, m.QUEUE), f"Realised share: each class's part of all {b.served}."),
        Recording(
            TENANT_WINDOW_JOBS,
            logical("sum", over_time("increase", m.JOBS_PROCESSED.name, config.exporter.window)),
            "Jobs completed per class over exporter.window, the window of the tenant shares: how much "
            "evidence a share stands on, whatever scheduler.charge is.",
        ),
        *(Recording(
            b.share_of(party),
            party_share(party, b.counter, config.exporter.window),
            f"The part of its class's {b.served} over exporter.window of each of the class's busiest {party.noun}s "
            f"in that window, over every shard: each shard's {party.share_metric.name} weighted by what the "
            "shard served of the class.",
        ) for party in dict.fromkeys((TENANTS, level(config)))),
        Recording(ENTITLED_SHARE, share(backlogged_part, m.QUEUE),
                  f"The share of {b.served} each backlogged class's weight entitles it to among the backlogged classes."),
        Recording(b.backlogged_share, share(served_part, m.QUEUE),
                  "The share each backlogged class realised among the backlogged classes."),
        Recording(REQUESTED_RATE, requested,
                  "Arrivals per second that the classification rules put in each class, before any budget "
                  f"demotion: jobs queued for their own reason (not {OVER_BUDGET_REASON!r}), demoted or rejected."),
        Recording(REQUESTED_SHARE, share(REQUESTED_RATE, m.QUEUE),
                  "Each class's share of the arrivals asked for, to compare with its arrival budget."),
        Recording(ENQUEUED_RATE, logical_rate(m.JOBS_ENQUEUED.name, budget_window),
                  "Arrivals per second by class and classification reason."),
        Recording(REASON_SHARE, share(ENQUEUED_RATE, m.REASON),
                  "Each reason's share of its class's arrivals."),
        Recording(
            REASON_BASELINE,
            f"(\n{share(enqueued_then, m.REASON)}\n)\nor\n("
            f"{REASON_SHARE} * 0\n  and ignoring ({m.REASON})\nsum without ({m.REASON}) ({enqueued_then}) > 0\n)",
            "The same share one baseline ago; 0 for a reason that is new in a class that had arrivals then "
            "(a new classification rule), nothing when the class had no arrivals then.",
        ),
        Recording(REDELIVERED_RATE, logical_rate(m.JOBS_REDELIVERED.name, window),
                  "Expired leases per second per class."),
        Recording(DEAD_LETTERED, logical("sum", over_time("increase", m.JOBS_DEAD_LETTERED.name, window)),
                  "Jobs dead-lettered per class over the window."),
        Recording(REFUSED, logical("sum", over_time("increase", m.JOBS_REFUSED.name, window)),
                  "Arrivals refused at a tenant's admission limit per class over the window."),
        Recording(
            WAIT_P99,
            f"histogram_quantile(0.99, {logical_rate(m.JOBS_WAIT.series('_bucket'), window)})",
            "99th percentile of the enqueue-to-lease wait per class over the window.",
        ),
    )


def party_share(party: Level, counter: m.MetricSpec, window: float) -> str:
    """A tenant's (or an account's) share of its class's service over every shard: each shard's
    share of the party (over ``window``, exporter.window) weighted by what that shard served of the
    class."""
    return over_shards(dedup(party.share_metric.name), deduped_rate(counter.name, window), party.label)
