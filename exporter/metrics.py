"""The metric contract: every series the exporter serves, named once.

The exporter, the generated alert rules and the dashboards all import these objects; nobody types
a metric name anywhere else, so a rename is one edit and a typo is an ImportError, not a silent
alert that never fires. ``MetricSpec.name`` is the name as PromQL sees it (counters end in
``_total``); ``family_name`` is what prometheus-client wants, because it appends ``_total`` to
counters itself.

The names ``queue_oldest_message_age_seconds{queue}`` and ``jobs_processed_total{queue}`` are the
ones queue dashboards and starvation alerts commonly use, and users' own queries are written
against them, so those names are fixed. Tenants appear only in gauges over a window, for the
busiest (or oldest) ``exporter.topk_tenants`` tenants of each class right now: never a counter per
tenant, whose label set would churn as tenants come and go (``rate()`` over a series that appears
and disappears is wrong), and never a set of tenants chosen by when they first came.

Every series also carries ``group`` and ``shard``, added to each family once
(:meth:`MetricSpec.family`) rather than listed in every spec. ``group`` names the logical queue
(the config's ``redis.prefix``), ``shard`` the queue group inside it that the series was read from:
a sharded queue's shard (``P.3``, or the salted name its layout gave it), or for an unsharded
queue the group itself, a logical queue of one shard. The rules and dashboards judge the logical
queue, folding ``shard`` (depth summed, ages the oldest, rates summed), and keep ``shard`` only
where one shard is the story. Two queues with the same class names, scraped under one Prometheus
job, stay two queues: every aggregation folds only the labels it names (``without``, never ``by``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from fairness_core.config import Config
from fairness_core.memory import SAFE_POLICY as SAFE_POLICY  # the rules read the safe policy from the contract
from fairness_core.snapshot import WAIT_BUCKETS_S

# Label names.
GROUP = "group"  # on every series: the logical queue (see the module docstring)
SHARD = "shard"  # on every series: the shard (queue group) of the logical queue it was read from
QUEUE = "queue"
TENANT = "tenant"
ACCOUNT = "account"
REASON = "reason"
VERSION = "version"
STATE = "state"
POLICY = "policy"
FINGERPRINT = "fingerprint"
CHARGE = "charge"
MASTER = "master"
RUN_ID = "run_id"  # a Redis server process's identity (INFO server): a restart changes it

# The states of queue_unconfigured_jobs.
UNCONFIGURED_STATES = ("queued", "inflight", "delayed")
# At most this many classes the config does not name are served (those holding most jobs), so a
# stats hash littered by old deployments cannot blow up the series count.
MAX_UNCONFIGURED = 20

# Bucket upper bounds of jobs_wait_seconds (plus +Inf): the classes' SLOs are edges.
WAIT_BUCKETS = WAIT_BUCKETS_S


def group_of(config: Config) -> str:
    """The ``group`` label of a config's series: the logical queue's name, its ``redis.prefix``
    (sharded or not; a shard's series carry their own name in ``shard``)."""
    return config.redis.prefix


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


_FAMILIES: dict[Kind, Callable[..., Metric]] = {
    Kind.GAUGE: GaugeMetricFamily, Kind.COUNTER: CounterMetricFamily, Kind.HISTOGRAM: HistogramMetricFamily}


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: name as queried, type, label names in order, help text."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str

    def __post_init__(self) -> None:
        if (self.kind is Kind.COUNTER) != self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters, and only counters, end in _total")

    @property
    def family_name(self) -> str:
        """The name prometheus-client is given (it adds ``_total`` to counters on exposition)."""
        return self.name.removesuffix("_total") if self.kind is Kind.COUNTER else self.name

    def family(self) -> Metric:
        """A new, empty family for one scrape, labelled ``group`` and ``shard`` first, then :attr:`labels`."""
        return _FAMILIES[self.kind](self.family_name, self.help, labels=[GROUP, SHARD, *self.labels])

    def series(self, suffix: str) -> str:
        """A histogram's ``_bucket``/``_sum``/``_count`` series, for rules and dashboards."""
        if self.kind is not Kind.HISTOGRAM or suffix not in ("_bucket", "_sum", "_count"):
            raise ValueError(f"{self.name} has no series {suffix!r}")
        return self.name + suffix


def _gauge(name: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, Kind.GAUGE, labels, help)


def _counter(name: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(name, Kind.COUNTER, labels, help)


Q = (QUEUE,)

# ------------------------------------------------------------------ per class, from Redis
QUEUE_OLDEST_AGE = _gauge(
    "queue_oldest_message_age_seconds", Q,
    "Age of the oldest due job in the class (0 when empty): the starvation detector.")
QUEUE_DEPTH = _gauge("queue_depth", Q, "Due jobs waiting in the class.")
QUEUE_INFLIGHT = _gauge("queue_inflight", Q, "Jobs of the class leased to workers right now.")
QUEUE_DELAYED = _gauge(
    "queue_delayed", Q,
    "Jobs of the class not yet due again: failed ones waiting out their retry backoff, and unhandled ones "
    "(jobs_unhandled_total).")
QUEUE_PAUSED = _gauge("queue_paused", Q, "1 while the class is paused (fairctl pause), else 0.")
QUEUE_ACTIVE_TENANTS = _gauge("queue_active_tenants", Q, "Tenants with due jobs in the class.")
QUEUE_NOISY_TENANTS = _gauge(
    "queue_noisy_tenants", Q,
    "Tenants holding more than 10% of the class's in-flight jobs (at least exporter.noisy_min_inflight) "
    "or of its queued jobs (at least exporter.noisy_min_queued).")
QUEUE_QUIET_OLDEST_AGE = _gauge(
    "queue_quiet_oldest_message_age_seconds", Q,
    "Age of the oldest due job among the class's non-noisy tenants (0 when none wait).")
QUEUE_FAIRNESS_INDEX = _gauge(
    "queue_tenant_fairness_index", Q,
    "Jain's index of weight-normalised service over the class's most backlogged tenants in the window "
    "(1 = fair, 1/n = one tenant takes all).")

# ------------------------------------------------------------------ classes the config does not name
UNCONFIGURED_JOBS = _gauge(
    "queue_unconfigured_jobs", (QUEUE, STATE),
    "Jobs Redis holds under a class the applied config does not name (removed or renamed), by state: "
    "queued (nothing serves them), inflight, delayed. Absent for configured classes.")
UNCONFIGURED_OLDEST_AGE = _gauge(
    "queue_unconfigured_oldest_message_age_seconds", Q,
    "Age of the oldest queued job of a class the applied config does not name (0 with none queued).")
UNCONFIGURED: tuple[MetricSpec, ...] = (UNCONFIGURED_JOBS, UNCONFIGURED_OLDEST_AGE)

# ------------------------------------------------------------------ per class, from the config
QUEUE_WEIGHT_RATIO = _gauge("queue_weight_ratio", Q, "Configured weight of the class / sum of all weights.")
QUEUE_MAX_AGE = _gauge("queue_max_age_seconds", Q, "Configured SLO for the class's oldest job age (max_age).")
QUEUE_ARRIVAL_BUDGET = _gauge(
    "queue_arrival_budget_ratio", Q, "Configured maximum share of arrivals for the class (1 when it has no budget).")

# ------------------------------------------------------------------ lifecycle counters
JOBS_ENQUEUED = _counter(
    "jobs_enqueued_total", (QUEUE, REASON), "Jobs queued into the class, by classification reason.")
JOBS_PROCESSED = _counter(
    "jobs_processed_total", Q,
    "Jobs of the class completed (acked); per tenant, see queue_tenant_share_ratio.")
QUEUE_WORKER_SECONDS = _counter(
    "queue_worker_seconds_total", Q,
    "Worker time the class's finished jobs took (acked or failed, as their workers measured it), under either "
    "scheduler.charge: the capacity each class really uses.")
JOBS_FAILED = _counter("jobs_failed_total", Q, "Job attempts of the class that failed (nacked by a handler).")
JOBS_REDELIVERED = _counter(
    "jobs_redelivered_total", Q, "Jobs of the class whose lease was taken back (expired, or its worker stopped or was "
    "lost) and that went back to the queue.")
JOBS_UNHANDLED = _counter(
    "jobs_unhandled_total", Q,
    "Leases of the class given back by a worker with no handler for the task (it waits leases.retry_backoff_max, "
    "then runs on a worker that has one; not a failure).")
JOBS_DEAD_LETTERED = _counter("jobs_dead_lettered_total", Q, "Jobs of the class given up after leases.max_attempts.")
JOBS_PROMOTED = _counter("jobs_promoted_total", Q, "Jobs that aged out of the class into the next class up (promote_after).")
JOBS_DEMOTED = _counter(
    "jobs_demoted_total", Q, "Arrivals for the class sent one class down because it was over its arrival budget.")
JOBS_REJECTED = _counter(
    "jobs_rejected_total", Q, "Arrivals for the class refused because it was over its arrival budget (budget_action reject).")
JOBS_REFUSED = _counter(
    "jobs_refused_total", Q,
    "Arrivals for the class refused because their tenant was at an admission limit (tenants.max_queued, tenants.max_rate).")
JOBS_DEDUPLICATED = _counter(
    "jobs_deduplicated_total", Q,
    "Keyed submits that queued nothing: their key named a job of the class submitted within scheduler.dedup_window "
    "(a producer's retry), and they were answered with that job.")
JOBS_WAIT = MetricSpec(
    "jobs_wait_seconds", Kind.HISTOGRAM, Q, "Time from enqueue to a job's first lease, by class.")

# ------------------------------------------------------------------ per tenant, bounded by topk_tenants
QUEUE_TENANT_SHARE = _gauge(
    "queue_tenant_share_ratio", (QUEUE, TENANT),
    "A tenant's share of the class's service over exporter.window (of its completions, or of its worker time under "
    "scheduler.charge: runtime), for the class's exporter.topk_tenants busiest tenants in that window "
    "(whenever each first sent a job).")
TENANT_SHARE = _gauge(
    "tenant_share_ratio", (TENANT,),
    "Share of all service over exporter.window (of all completions, or of all worker time under "
    "scheduler.charge: runtime), for the top exporter.topk_tenants tenants.")
# ------------------------------------------------------------------ per account (tenants.account_separator only)
QUEUE_ACTIVE_ACCOUNTS = _gauge("queue_active_accounts", Q, "Accounts with due jobs in the class.")
QUEUE_QUIET_ACCOUNTS_OLDEST_AGE = _gauge(
    "queue_quiet_accounts_oldest_message_age_seconds", Q,
    "Age of the oldest due job among the class's keys whose account is not noisy (its keys together hold more than "
    "10% of the class's in-flight or queued jobs); 0 when none wait.")
QUEUE_ACCOUNT_SHARE = _gauge(
    "queue_account_share_ratio", (QUEUE, ACCOUNT),
    "An account's share of the class's service over exporter.window, all its keys together (of completions, or of "
    "worker time under scheduler.charge: runtime), for the class's exporter.topk_tenants busiest accounts.")
QUEUE_ACCOUNT_TENANT_SHARE = _gauge(
    "queue_account_tenant_share_ratio", (QUEUE, ACCOUNT, TENANT),
    "For each account of queue_account_share_ratio, its busiest keys' (at most 3) shares of the account's service "
    "over exporter.window.")
ACCOUNTS: tuple[MetricSpec, ...] = (
    QUEUE_ACTIVE_ACCOUNTS, QUEUE_QUIET_ACCOUNTS_OLDEST_AGE, QUEUE_ACCOUNT_SHARE, QUEUE_ACCOUNT_TENANT_SHARE,
)

TENANT_OLDEST_AGE = _gauge(
    "tenant_oldest_message_age_seconds", (QUEUE, TENANT),
    "Age of a tenant's oldest due job, for the exporter.topk_tenants oldest tenants of each class.")

# ------------------------------------------------------------------ dispatch limits' holds (tenants.max_in_flight, ...)
QUEUE_HELD_TENANTS = _gauge(
    "queue_held_tenants", (QUEUE, REASON),
    "Tenants held out of the class's fair order by a dispatch limit right now, by reason: cap (at "
    "tenants.max_in_flight), rate (out of tenants.dispatch_rate's tokens); for account_cap and account_rate, accounts "
    "held by tenants.account_max_in_flight or account_dispatch_rate. Served for each reason the config's limits can "
    "give, 0 included (none without such a limit).")
QUEUE_HELD_JOBS = _gauge(
    "queue_held_jobs", (QUEUE, REASON),
    "Due jobs of the class whose tenant (or, for the account_ reasons, account) is held by a dispatch limit, by "
    "reason; they stay queued and wait for the hold to end. A job whose tenant and account are both held counts "
    "under each reason. Served as queue_held_tenants is.")
HOLDS: tuple[MetricSpec, ...] = (QUEUE_HELD_TENANTS, QUEUE_HELD_JOBS)

# ------------------------------------------------------------------ the queue group
WORKER_SLOTS = _gauge("fairness_worker_slots", (), "Worker slots registered by the fleet (what reserved_slots is counted against).")
DEAD_LETTERS = _gauge("fairness_dead_letters", (), "Jobs in the dead-letter list.")
CONFIG_VERSION = _gauge(
    "fairness_config_version", (FINGERPRINT,),
    "The version of the applied config this exporter serves, labelled with its fingerprint: every exporter of a "
    "group shows the same one within a scrape of a `fairctl config apply`.")
GROUP_CONFIG = _gauge(
    "fairness_group_config_info", (FINGERPRINT,),
    "Always 1; the fingerprint of the applied config as its logical queue's (the shard's own name, and the codes "
    "of the names its jobs store, left out): every shard of a sharded queue shows the same one once an apply "
    "reached them all, and a shard an apply stopped short of shows another.")

STATE_RESETS = _counter(
    "fairness_state_resets_total", (),
    "Times this exporter found its queue group's state reset under it since it started: the applied config gone "
    "or created anew (Redis restarted without persistence, a failover to an empty replica, a FLUSHALL), and with "
    "it every job queued or leased in the group.")
REDIS_MASTER = _gauge(
    "fairness_redis_master_info", (MASTER, RUN_ID),
    "Always 1; the Redis master holding the shard's keys: its host:port (on a Redis Cluster, the master of the "
    "shard's hash slot as the client's slot map last read it; under Sentinel, the master the sentinels named) and "
    "the run_id of the server last read there (INFO server; empty until one is read), which a restart changes. "
    "One series per shard, served on while that Redis cannot be read.")

# ------------------------------------------------------------------ Redis memory (INFO memory and stats)
REDIS_MEMORY_USED = _gauge(
    "fairness_redis_memory_used_bytes", (),
    "Memory Redis uses (INFO used_memory; on a cluster, that of the master holding the shard).")
REDIS_MEMORY_MAX = _gauge(
    "fairness_redis_memory_max_bytes", (),
    "Redis's maxmemory (0: no limit); fairctl refuses new enqueues at redis.memory_headroom of it.")
REDIS_MEMORY_POLICY = _gauge(
    "fairness_redis_maxmemory_policy_info", (POLICY,),
    "Always 1; Redis's maxmemory-policy. Any policy but noeviction may evict the scheduler's keys.")
REDIS_EVICTED_KEYS = _counter(
    "fairness_redis_evicted_keys_total", (),
    "Keys Redis evicted for memory since it started (INFO evicted_keys); 0 under noeviction.")
REDIS_MEMORY: tuple[MetricSpec, ...] = (REDIS_MEMORY_USED, REDIS_MEMORY_MAX, REDIS_MEMORY_POLICY, REDIS_EVICTED_KEYS)

# ------------------------------------------------------------------ the exporter itself
EXPORTER_REDIS_UP = _gauge(
    "fairness_exporter_redis_up", (), "1 when this scrape read the scheduler's bookkeeping from Redis in time, else 0.")
EXPORTER_SCRAPE_DURATION = _gauge(
    "fairness_exporter_scrape_duration_seconds", (), "Time this scrape spent reading and converting the snapshot.")
EXPORTER_SCRAPE_ERRORS = _counter(
    "fairness_exporter_scrape_errors_total", (REASON,),
    "Scrapes that could not read Redis: timeout (over exporter.scrape_timeout), unavailable (connection), error.")
EXPORTER_BUILD_INFO = _gauge(
    "fairness_exporter_build_info", (VERSION, CHARGE),
    "Always 1; the fairctl version serving and what the config charges a job (scheduler.charge): jobs or runtime, "
    "so the shares' basis is known.")

# The reasons of fairness_exporter_scrape_errors_total, all served from the start.
SCRAPE_ERROR_REASONS = ("timeout", "unavailable", "error")

# Served only when the snapshot was read (absent, not 0, while Redis cannot be read: a 0 would
# resolve a starvation alert that is still true).
FROM_REDIS: tuple[MetricSpec, ...] = (
    QUEUE_OLDEST_AGE, QUEUE_DEPTH, QUEUE_INFLIGHT, QUEUE_DELAYED, QUEUE_PAUSED, QUEUE_ACTIVE_TENANTS,
    QUEUE_NOISY_TENANTS, QUEUE_QUIET_OLDEST_AGE, QUEUE_FAIRNESS_INDEX, JOBS_ENQUEUED, JOBS_PROCESSED,
    QUEUE_WORKER_SECONDS, JOBS_FAILED, JOBS_REDELIVERED, JOBS_UNHANDLED, JOBS_DEAD_LETTERED, JOBS_PROMOTED,
    JOBS_DEMOTED, JOBS_REJECTED, JOBS_REFUSED, JOBS_DEDUPLICATED, JOBS_WAIT,
    QUEUE_TENANT_SHARE, TENANT_SHARE, TENANT_OLDEST_AGE, WORKER_SLOTS, DEAD_LETTERS, CONFIG_VERSION, GROUP_CONFIG,
    STATE_RESETS, *UNCONFIGURED, *REDIS_MEMORY, *ACCOUNTS, *HOLDS,
)
# Served once known, and on while Redis cannot be read: where the shard's Redis is, which the
# alerts about a Redis that cannot be read name.
WHERE: tuple[MetricSpec, ...] = (REDIS_MASTER,)
# Always served.
FROM_CONFIG: tuple[MetricSpec, ...] = (QUEUE_WEIGHT_RATIO, QUEUE_MAX_AGE, QUEUE_ARRIVAL_BUDGET)
EXPORTER_HEALTH: tuple[MetricSpec, ...] = (
    EXPORTER_REDIS_UP, EXPORTER_SCRAPE_DURATION, EXPORTER_SCRAPE_ERRORS, EXPORTER_BUILD_INFO,
)
ALL: tuple[MetricSpec, ...] = FROM_REDIS + WHERE + FROM_CONFIG + EXPORTER_HEALTH
