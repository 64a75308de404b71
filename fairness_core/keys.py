"""Every Redis key name fairctl uses, built in this one module.

All keys of a queue group share the hash tag ``{prefix}``, so one group lives in one Redis Cluster
slot and every Lua script touching it runs on one node. Tenant ids appear only after the tag, so no
tenant id (braces, colons and all) can move a key to another slot or out of its namespace.
Per-class keys are ``{prefix}:q/<class>/<part>`` and tenant sub-queues ``{prefix}:q/<class>/t/<tenant>``:
``/`` cannot occur in a class name, so no class or tenant name can collide with another key. The Lua
script is given ``base`` and declares one key, the group's config key (which routes a call to the
group's slot); it gets everything else here compiled in (fairness_core.script): the group-wide key
suffixes, the per-class layout and parts.
"""

from __future__ import annotations

from dataclasses import dataclass

# Group-wide keys: ``base`` + suffix.
STATS = "stats"  # hash: per-class counters (depth, inflight, delayed, processed, ...)
SWRR = "swrr"  # hash: smooth weighted round-robin current value per class
PAUSED = "paused"  # set: paused class names
ARRIVALS = "arrivals"  # hash: sliding-window arrival counts for priority budgets
SEQ = "seq"  # string: job id counter
LEASES = "leases"  # zset: job id -> lease deadline (ms)
LEASED = "leased"  # hash: job id -> class, tenant and envelope of a leased job
DELAYED = "delayed"  # zset: class, tenant and envelope -> due time (ms), retries waiting for backoff
DEAD = "dead"  # list: dead-lettered records
WORKERS = "workers"  # zset: worker id -> registration expiry (ms)
WORKER_SLOTS = "workerslots"  # hash: worker id -> slots it serves
RETURNED = "returned"  # zset: job id -> when (ms) its lease was taken back from its worker, for an hour
REAPED = "reaped"  # string: when (ms) a worker last reaped, to tell a stall of Redis from a lost worker
# base + OWNED_SPACE + worker id; zset: job id -> attempts of each lease popped for that worker,
# taken back at once when the worker unregisters or its registration lapses. Built from ``base``.
OWNED_SPACE = "own:"
CONFIG = "config"  # hash: the applied config (fairness_core.config_store): text, moves, fingerprint, version
# base + RATE_SPACE + rate-window bucket; hash: tenant -> jobs accepted in that bucket
# (tenants.max_rate), expiring two windows after a tenant's first job in it. Not in FIXED: the
# script builds the two it reads from ``base``.
RATE_SPACE = "rate:"
# An account where a structure holds tenants and accounts side by side (a rate bucket's field for
# tenants.account_max_rate; RUNNING, PACE and HELD for the account's dispatch limits): this mark,
# then the account. No tenant id holds a control character, so no tenant's entry can be an account's.
ACCOUNT_MARK = "\x01"
# base + CHARGED; hash: job id -> the microseconds of worker time its pop charged (scheduler.charge:
# runtime), so its ack corrects the charge by the difference. Built from ``base`` like RATE_SPACE.
CHARGED = "charged"
# base + DEDUP_SPACE + a submit's key (scheduler.dedup_window); string: the id, class and reason of
# the job first submitted with that key and when the key stops naming it (ms), expiring then. Built
# from ``base`` like RATE_SPACE; a key may hold any text but control characters, after the tag.
DEDUP_SPACE = "key:"
# Dispatch limits (tenants.max_in_flight, dispatch_rate and the account forms), kept only while
# some are configured. Members are tenants, or ACCOUNT_MARK + account.
RUNNING = "running"  # zset: member -> its leased jobs, all classes together (what a cap counts)
PACE = "pace"  # zset: member -> when (µs) its dispatch rate's bucket is full again (GCRA's arrival time)
# zset: class + SEP + member -> until when (ms) it is held out of the class's fair order; +inf: at
# its cap, until one of its jobs settles
HELD = "held"
CAPPED = "capped"  # hash: member -> the classes it is held in at its cap (SEP between), rejoined as a job settles
# A sharded queue group's layout (fairness_core.layout): hash of shards, serve and version, under
# the logical group's own tag; each shard is a queue group of its own, tagged ``{prefix.i}``.
LAYOUT = "layout"
# The layout's copies, one on each master (fairness_core.layout), are the LAYOUT keys of the names
# ``P`` + LAYOUT_COPY + ``.i``; no group's name can hold a ``~``, so no group's keys are these.
LAYOUT_COPY = "~layout"

# The group-wide keys by the name the script uses for each (``KEY_<NAME>``, compiled in as the suffix).
FIXED: dict[str, str] = {
    "stats": STATS, "swrr": SWRR, "paused": PAUSED, "arrivals": ARRIVALS, "seq": SEQ, "leases": LEASES,
    "leased": LEASED, "delayed": DELAYED, "dead": DEAD, "workers": WORKERS, "worker_slots": WORKER_SLOTS,
    "returned": RETURNED, "reaped": REAPED, "config": CONFIG,
    "running": RUNNING, "pace": PACE, "held": HELD, "capped": CAPPED,
}

# Per-class keys: base + CLASS_SPACE + class + PART_SEP + part; a tenant's sub-queue is the part
# TENANT_QUEUE + tenant.
CLASS_SPACE = "q/"
PART_SEP = "/"
TENANT_QUEUE = "t/"

# The parts of a class, by the name the script uses for each.
CLASS_PARTS: dict[str, str] = {
    # The party fair queuing runs across: each tenant, or with tenants.account_separator each
    # account (fairness_core.accounts), whose own zset holds its queued tenants' tags inside it.
    "tags": "tags",  # zset: party -> WFQ virtual finish tag
    "account": "a/",  # + account; zset: the account's queued tenants -> their tags among its tenants
    "account_backlog": "abacklog",  # zset: account -> its queued jobs (with accounts)
    "account_served": "aserved:",  # + window bucket; zset: account -> its service in that bucket (with accounts)
    "heads": "heads",  # zset: tenant -> enqueue time (ms) of its head job
    "backlog": "backlog",  # zset: tenant -> queued jobs
    "cost": "cost",  # hash: queued party -> the tier its jobs are charged at, for parties off the default tier
    # With accounts, what an account's tier is taken from: the highest of its queued keys' tiers.
    "key_tier": "ktier",  # hash: queued key -> its latest job's tier, for keys off the default tier
    "account_tiers": "atiers/",  # + account; hash: tier -> the account's queued keys of that tier
    "vt": "vt",  # string: the class's virtual time
    "inflight": "inflight",  # zset: tenant -> leased jobs
    "served": "served:",  # + window bucket; zset: tenant -> jobs processed in that bucket
    "served_total": "servedn:",  # + window bucket; string: jobs processed in that bucket
    # Under scheduler.charge: runtime (served and served_total then count microseconds of work):
    "estimate": "est",  # hash: task -> moving average of its jobs' runtimes in the class (µs)
    "tenant_estimate": "est/",  # + tenant; hash: task -> the tenant's own moving average (µs)
    # zset of one member, WAKE_MEMBER: idle workers block on it (BZPOPMIN). Scored 0 when the class
    # may have work to take now, else the time (ms) a retry of the class comes due. A sharded queue
    # has its own under the logical group's tag (fairness_core.queue), which every enqueue to any
    # of its shards arms: no one blocking command can wait on the shards' own, in as many slots.
    "wake": "wake",
}
WAKE_MEMBER = "work"


@dataclass(frozen=True)
class Keys:
    """Key names of one queue group (one ``redis.prefix``)."""

    prefix: str

    @property
    def base(self) -> str:
        return "{" + self.prefix + "}:"

    @property
    def stats(self) -> str:
        return self.base + STATS

    @property
    def swrr(self) -> str:
        return self.base + SWRR

    @property
    def paused(self) -> str:
        return self.base + PAUSED

    @property
    def arrivals(self) -> str:
        return self.base + ARRIVALS

    @property
    def seq(self) -> str:
        return self.base + SEQ

    @property
    def leases(self) -> str:
        return self.base + LEASES

    @property
    def leased(self) -> str:
        return self.base + LEASED

    @property
    def delayed(self) -> str:
        return self.base + DELAYED

    @property
    def dead(self) -> str:
        return self.base + DEAD

    @property
    def workers(self) -> str:
        return self.base + WORKERS

    @property
    def worker_slots(self) -> str:
        return self.base + WORKER_SLOTS

    @property
    def returned(self) -> str:
        return self.base + RETURNED

    @property
    def reaped(self) -> str:
        return self.base + REAPED

    def owned(self, worker_id: str) -> str:
        """The leases popped for a worker (job id -> attempts)."""
        return self.base + OWNED_SPACE + worker_id

    @property
    def config(self) -> str:
        return self.base + CONFIG

    @property
    def running(self) -> str:
        return self.base + RUNNING

    @property
    def pace(self) -> str:
        return self.base + PACE

    @property
    def held(self) -> str:
        return self.base + HELD

    @property
    def capped(self) -> str:
        return self.base + CAPPED

    @property
    def charged(self) -> str:
        return self.base + CHARGED

    def rate_bucket(self, bucket: int) -> str:
        """The accepted jobs of each tenant (and account) in one rate-window bucket."""
        return f"{self.base}{RATE_SPACE}{bucket}"

    def dedup(self, key: str) -> str:
        """The record of the job first submitted with ``key``."""
        return self.base + DEDUP_SPACE + key

    @property
    def layout(self) -> str:
        return self.base + LAYOUT

    def class_key(self, queue: str, part: str) -> str:
        """A per-class structure; ``part`` is one of :data:`CLASS_PARTS`' values."""
        return f"{self.base}{CLASS_SPACE}{queue}{PART_SEP}{part}"

    def tenant_queue(self, queue: str, tenant: str) -> str:
        return self.class_key(queue, TENANT_QUEUE + tenant)

    def wake(self, queue: str) -> str:
        """The class's wake key, which idle workers block on."""
        return self.class_key(queue, CLASS_PARTS["wake"])

    def declared(self) -> list[str]:
        """The keys every scheduler call declares: the config key alone, which every call reads
        and which names the group's slot (the script builds every other key from ``base``)."""
        return [self.config]
