"""Every Redis key name fairctl uses, built in this one module.

All keys of a queue group share the hash tag ``{prefix}``, so one group lives in one Redis Cluster
slot and every Lua script touching it runs on one node. Tenant ids appear only after the tag, so no
tenant id (braces, colons and all) can move a key to another slot or out of its namespace.
Per-class keys are ``{prefix}:q/<class>/<part>`` and tenant sub-queues ``{prefix}:q/<class>/t/<tenant>``:
``/`` cannot occur in a class name, so no class or tenant name can collide with another key. The Lua
script receives ``base`` and builds the per-class keys with this same layout (``ckey``/``tkey``).
"""

from __future__ import annotations

from dataclasses import dataclass

# Suffixes shared with the Lua scripts (see fairness_core/lua/*.lua, which receive ``base``).
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

    def class_key(self, queue: str, part: str) -> str:
        """Per-class structure: ``tags`` (WFQ virtual times), ``heads`` (head enqueue time),
        ``backlog`` (queued jobs per tenant), ``cost`` (per-job virtual cost per tenant),
        ``vt`` (class virtual time), ``done`` (processed per tenant)."""
        return f"{self.base}q/{queue}/{part}"

    def tenant_queue(self, queue: str, tenant: str) -> str:
        return f"{self.base}q/{queue}/t/{tenant}"

    def fixed(self) -> list[str]:
        """The group-wide keys every script declares (KEYS[1..n]); order matches the Lua."""
        return [self.stats, self.swrr, self.paused, self.arrivals, self.seq, self.leases,
                self.leased, self.delayed, self.dead, self.workers, self.worker_slots]
