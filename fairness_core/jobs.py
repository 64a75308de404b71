"""Jobs as they cross the API: input validation, the envelope format, leases and errors.

The envelope is one Redis list element per queued job. The tenant and class are implied by the
sub-queue it sits in; the classification reason travels in the envelope, next to the tenant,
never inside the payload: the scheduler routes on the envelope without deserialising the work.
Layout (tab-separated, payload last so the scripts never copy it to read the header)::

    id \t enqueued_ms \t attempts \t cost \t task \t reason \t payload-json
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .config import NAME_PATTERN, Config


class FairnessError(Exception):
    """Base class of every error fairctl raises on purpose."""


class InvalidJob(FairnessError, ValueError):
    """An enqueue argument that cannot be accepted; ``field`` names which one."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class BudgetRejected(FairnessError):
    """The class is over its arrival budget and ``scheduler.budget_action`` is ``reject``."""


class RedisUnavailable(FairnessError, ConnectionError):
    """Redis could not be reached or timed out.

    Each operation is one atomic script, so it was applied wholly or not at all; when the
    connection dropped after sending, it may have been applied with the reply lost (an enqueue
    retried then is a duplicate; a lost pop's lease returns the job after the visibility timeout).
    """


# C0/C1 controls, DEL, and Unicode line/paragraph separators: they would break log lines,
# Prometheus exposition and the tab-separated records.
_FORBIDDEN_IN_TENANT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# The exporter folds tenants past tenant_label_limit into this label value; no tenant may use it.
RESERVED_TENANT = "__other__"


def check_tenant(tenant: object, config: Config) -> str:
    if not isinstance(tenant, str):
        raise InvalidJob("tenant", f"expected a string, got {type(tenant).__name__}")
    if not tenant:
        raise InvalidJob("tenant", "must not be empty")
    size = len(tenant.encode("utf-8", errors="surrogatepass"))
    if size > config.tenants.max_id_bytes:
        raise InvalidJob("tenant", f"is {size} bytes; at most {config.tenants.max_id_bytes} (tenants.max_id_bytes)")
    if tenant == RESERVED_TENANT:
        raise InvalidJob("tenant", f"{RESERVED_TENANT!r} is reserved: it names the tenants past the metrics label limit")
    if _FORBIDDEN_IN_TENANT.search(tenant):
        raise InvalidJob("tenant", f"must not contain control characters or line breaks: {tenant!r}")
    try:
        tenant.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob("tenant", f"is not valid Unicode text: {tenant!r}") from None
    return tenant


def check_task(task: object) -> str:
    if not isinstance(task, str) or not NAME_PATTERN.match(task):
        raise InvalidJob("task", f"expected 1-64 characters of A-Z a-z 0-9 _ . : -, got {task!r}")
    return task


def check_tier(tier: object, config: Config) -> str:
    if tier is None:
        return config.tenants.default_tier
    if tier not in config.tenants.tiers:
        raise InvalidJob("tier", f"unknown tier {tier!r}; tenants.tiers has: {', '.join(config.tenants.tiers)}")
    return str(tier)


def encode_payload(payload: Any, config: Config) -> str:
    try:
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidJob("payload", f"is not JSON-serialisable: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidJob("payload", f"holds text that is not valid Unicode: {exc.reason}") from None
    if size > config.scheduler.max_payload_bytes:
        raise InvalidJob("payload", f"is {size} bytes as JSON; at most {config.scheduler.max_payload_bytes} (scheduler.max_payload_bytes)")
    return text


def one_line(text: str, limit: int = 500) -> str:
    """Error text stored with a failed job: one line, bounded, no tabs (records are tab-separated)."""
    return " ".join(text.split())[:limit]


@dataclass(frozen=True)
class Enqueued:
    """What ``submit`` did: the job id and the class and reason it was queued under (after any
    priority-budget demotion, so the reason may be ``over priority budget``)."""

    job_id: str
    queue: str
    reason: str


@dataclass(frozen=True)
class Lease:
    """A job handed to a worker until ``ack``/``nack`` or its visibility deadline."""

    job_id: str
    queue: str
    tenant: str
    reason: str
    task: str
    payload: Any
    enqueued_at: float
    attempts: int


@dataclass(frozen=True)
class Popped:
    """What ``ack_and_pop`` did: for each lease given, whether its ack counted (False: the lease
    had expired, as with ``ack``), and the newly leased jobs."""

    acked: list[bool]
    leases: list[Lease]


def lease_from_envelope(queue: str, tenant: str, attempts: int, envelope: str) -> Lease:
    job_id, enqueued_ms, _, _, task, reason, payload = envelope.split("\t", 6)
    return Lease(
        job_id=job_id, queue=queue, tenant=tenant, reason=reason, task=task,
        payload=json.loads(payload), enqueued_at=int(enqueued_ms) / 1000.0, attempts=attempts,
    )
