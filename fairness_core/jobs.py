"""Jobs as they cross the API: input validation, the stored record layouts, leases and errors.

The envelope is one Redis list element per queued job. The tenant and class are implied by the
sub-queue it sits in; the classification reason travels in the envelope, next to the tenant,
never inside the payload: the scheduler routes on the envelope without deserialising the work.
:class:`Envelope`, :class:`Record` and :class:`DeadLetter` are the one definition of what the
scheduler stores: their fields, in order, joined by :data:`SEP`. The reference model uses them as
they are and the Lua script gets their field positions compiled in (fairness_core.script).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Any, Callable, Self, Sequence, get_type_hints

from .accounts import split_problem
from .config import NAME_PATTERN, Config


class FairnessError(Exception):
    """Base class of every error fairctl raises on purpose."""


class InvalidJob(FairnessError, ValueError):
    """An enqueue argument that cannot be accepted; ``field`` names which one."""

    def __init__(self, field: str, message: str, *, at: str | None = None) -> None:
        self.field = field
        super().__init__(f"{at or field}: {message}")


class BudgetRejected(FairnessError):
    """The class is over its arrival budget and ``scheduler.budget_action`` is ``reject``."""


class TenantLimitReached(FairnessError):
    """The tenant is at an admission limit: the job was refused, nothing queued. ``limit`` is the
    config field that set it (``tenants.max_queued``, ``tenants.limits.free.max_rate``), ``value``
    its value (queued jobs, or jobs per second). Room comes back as workers take the tenant's
    queued jobs, or as its accepted jobs age out of the rate window."""

    def __init__(self, tenant: str, limit: str, value: int | float) -> None:
        self.tenant, self.limit, self.value = tenant, limit, value
        whose = "its account's" if ".account_" in limit else "its"
        if limit.endswith("max_rate"):
            rate = int(value) if float(value).is_integer() else value
            super().__init__(f"tenant {tenant!r} is over {whose} arrival rate of {rate:g}/s ({limit}); job refused")
        else:
            super().__init__(f"tenant {tenant!r} is at {whose} limit of {value} queued jobs ({limit}); job refused")

    @classmethod
    def at(cls, config: Config, tenant: str, tier: str, name: str) -> TenantLimitReached:
        """The refusal of a job of ``tenant`` enqueued as ``tier`` at the limit ``name``, naming
        the field that set the limit for that tier and its configured value."""
        value = config.tenants.limit_for(tier, name)
        assert value is not None, f"no {name} limit for tier {tier!r}"
        return cls(tenant, config.tenants.limit_field(tier, name), value)


class StateDamaged(FairnessError):
    """The group's keys in Redis contradict each other: some were deleted or evicted. Nothing the
    scheduler can mend by itself; the message says what it found."""


class RedisUnavailable(FairnessError, ConnectionError):
    """Redis could not be reached or timed out.

    Each operation is one atomic script, so it was applied wholly or not at all. When the
    connection failed after the call was sent, :class:`ReplyLost` says so: it may have been applied.
    """


class ReplyLost(RedisUnavailable):
    """The connection failed after a call was sent and before its reply came: Redis may have run
    it (an enqueue sent again then is a duplicate, unless it carries a key). fairctl never sends
    such a call again by itself; the caller decides, knowing it may have been applied."""


# C0/C1 controls, DEL, and Unicode line/paragraph separators: they would break log lines,
# Prometheus exposition and the tab-separated records.
_FORBIDDEN_IN_TENANT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# Reserved: earlier versions folded the tail of tenants into this label value, and queries written
# then may still exclude it, so no tenant may use it.
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
    problem = split_problem(tenant, config.tenants.account_separator)
    if problem is not None:
        raise InvalidJob("tenant", f"{tenant!r} {problem}")
    if tenant.isspace():
        raise InvalidJob("tenant", f"must not be only whitespace: {tenant!r}")
    if tenant != tenant.strip():
        raise InvalidJob("tenant", f"must not start or end with whitespace: {tenant!r} would look the same as "
                                   f"{tenant.strip()!r} in status, dashboards and alerts")
    # Invisible format characters (Unicode category Cf: zero-width spaces and joiners, the byte
    # order mark, bidirectional overrides and isolates that reorder the text shown after them).
    # ASCII has none, so the common id skips the scan.
    if not tenant.isascii():
        hidden = next((c for c in tenant if unicodedata.category(c) == "Cf"), None)
        if hidden is not None:
            named_as = " ".join(filter(None, (f"U+{ord(hidden):04X}", unicodedata.name(hidden, ""))))
            raise InvalidJob("tenant", f"must not contain invisible format characters (Unicode category Cf, such as "
                                       f"zero-width spaces and bidirectional overrides): {named_as} in {tenant!r}")
    return tenant


# The longest key a submit may carry, in UTF-8 bytes: Redis stores it in its record's name.
MAX_KEY_BYTES = 256


def check_key(key: object) -> str:
    """A submit's key (its idempotency key): any text but control characters and line breaks, which
    would break log lines, up to :data:`MAX_KEY_BYTES`."""
    if not isinstance(key, str):
        raise InvalidJob("key", f"expected a string, got {type(key).__name__}")
    if not key:
        raise InvalidJob("key", "must not be empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJob("key", f"is not valid Unicode text: {key!r}") from None
    if size > MAX_KEY_BYTES:
        raise InvalidJob("key", f"is {size} bytes; at most {MAX_KEY_BYTES}")
    if _FORBIDDEN_IN_TENANT.search(key):
        raise InvalidJob("key", f"must not contain control characters or line breaks: {key!r}")
    return key


def check_task(task: object) -> str:
    if not isinstance(task, str) or not NAME_PATTERN.match(task):
        raise InvalidJob("task", f"expected 1-64 characters of A-Z a-z 0-9 _ . : -, got {task!r}")
    return task


def check_job_id(value: object) -> str:
    """A job id as the scheduler stores it (a positive whole number); InvalidJob naming ``job id``."""
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise InvalidJob("job id", f"expected a positive whole number such as 42, got {value!r}")
    return str(int(text))


def check_tier(tier: object, config: Config) -> str:
    if tier is None:
        return config.tenants.default_tier
    if tier not in config.tenants.tiers:
        raise InvalidJob("tier", f"unknown tier {tier!r}; tenants.tiers has: {', '.join(config.tenants.tiers)}")
    return str(tier)


# How deep lists and objects may nest in a payload: far beyond any job's arguments, and well short
# of the recursion that encoding (and every worker's decoding) would otherwise run out of.
MAX_PAYLOAD_DEPTH = 100
PAYLOAD_TOO_DEEP = (f"is nested more than {MAX_PAYLOAD_DEPTH} levels deep (lists and objects within each other); "
                    f"at most {MAX_PAYLOAD_DEPTH}")


def check_payload(payload: Any) -> None:
    """InvalidJob naming ``payload`` when its lists and objects nest deeper than
    :data:`MAX_PAYLOAD_DEPTH` (a payload that contains itself does too), or naming the place
    (``payload[0].x``) of an object with a key that is not a string: JSON would turn the key into
    text, so ``{1: 'a', '1': 'b'}`` would come back as ``{'1': 'b'}``. Walked without recursion,
    before anything tries to encode it."""
    if not isinstance(payload, (dict, list, tuple)):
        return
    # Each entry: a list or object, its depth, and its place as (parent's place, key or index).
    stack: list[tuple[Any, int, Any]] = [(payload, 1, None)]
    while stack:
        value, depth, place = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise InvalidJob("payload", PAYLOAD_TOO_DEEP)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    shown = repr(key) if len(repr(key)) <= 60 else repr(key)[:57] + "..."
                    raise InvalidJob("payload", f"keys must be strings, got {type(key).__name__} {shown}",
                                     at=_payload_place(place))
                if isinstance(item, (dict, list, tuple)):
                    stack.append((item, depth + 1, (place, key)))
        else:
            for index, item in enumerate(value):
                if isinstance(item, (dict, list, tuple)):
                    stack.append((item, depth + 1, (place, index)))


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _payload_place(place: Any) -> str:
    """``payload[0].x`` from the (parent, key or index) chain: an index (an int: every object key
    on the chain is a string) in brackets, a key after a dot, or in brackets as JSON text."""
    steps: list[str] = []
    while place is not None:
        place, step = place
        steps.append(f"[{step}]" if isinstance(step, int) else f".{step}" if _IDENTIFIER.match(step)
                     else f"[{json.dumps(step, ensure_ascii=False)}]")
    return "payload" + "".join(reversed(steps))


def encode_payload(payload: Any, config: Config) -> str:
    check_payload(payload)
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
    payload: Any  # the enqueued payload as JSON reads it back; {} for a job enqueued without one
    enqueued_at: float
    attempts: int
    # The worker it was popped for (``pop(owner=...)``), '' for none: an owned lease goes back to
    # the queue as soon as its worker unregisters or its registration lapses, not at its deadline.
    owner: str = ""
    # The state of its queue group it was leased in: when that state was created, as Redis
    # records it ('' checks none). Its ack, nack and heartbeat are refused once that state is
    # gone (Redis came back empty), so they never settle the new state's job that took its id.
    incarnation: str = ""


@dataclass(frozen=True)
class Finished:
    """A lease done, with the seconds its handler ran (a monotonic clock's difference, so no clock
    skew between machines enters it). Under ``scheduler.charge: runtime`` the ack corrects the
    tenant's and class's charge from the estimate to this; under either basis it is counted as the
    class's worker time."""

    lease: Lease
    runtime: float


def settled(done: Lease | Finished) -> tuple[Lease, float | None]:
    """A lease done and its runtime (None when not reported)."""
    return (done.lease, done.runtime) if isinstance(done, Finished) else (done, None)


def runtime_us(runtime: float | None) -> str:
    """A reported runtime as the script reads it: whole microseconds, or '' for none reported.
    InvalidJob naming ``runtime`` for anything but a finite number of seconds >= 0."""
    if runtime is None:
        return ""
    if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or not 0 <= runtime < 10**9:
        raise InvalidJob("runtime", f"expected the seconds the job ran (a number >= 0), got {runtime!r}")
    return str(round(runtime * 1_000_000))


@dataclass(frozen=True)
class DeadOutcome:
    """What a requeue or drop of dead letters did: the job ids handled, and those left in the list
    because their class is no longer configured."""

    done: list[str]
    skipped: list[str]


@dataclass(frozen=True)
class Popped:
    """What ``ack_and_pop`` did: for each lease given, whether its ack counted (False: the lease
    had expired, as with ``ack``; None: not sent, as its shard of a sharded queue did not answer,
    for the caller to send again), and the newly leased jobs. ``held_back``: none leased though a
    class had work, as other classes' ``reserved_slots`` keep the fleet's free slots; a worker
    then waits for those classes' work, or for a while, rather than pop again at once."""

    acked: list[bool | None]
    leases: list[Lease]
    held_back: bool = False


# The field separator of every line the scheduler stores (envelopes, lease and dead-letter
# records, counter names). No field but a line's last can hold it: task and class names and tenant
# ids are checked, error text is flattened by one_line, and JSON escapes it.
SEP = "\t"


class Fields:
    """A stored line: the dataclass's fields in declaration order, joined by :data:`SEP`. Only the
    last field may contain the separator (a payload, an envelope), so a reader splits off the
    others and keeps the rest whole; the script reads a header without copying the payload."""

    __slots__ = ()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return _names(cls)  # type: ignore[arg-type]  # mypy wrongly finds a class unhashable

    def encode(self) -> str:
        return SEP.join(_encoded(getattr(self, name)) for name in self.names())

    @classmethod
    def decode(cls, line: str) -> Self:
        return cls.from_fields(line.split(SEP, len(cls.names()) - 1))

    @classmethod
    def from_fields(cls, values: Sequence[str]) -> Self:
        """The line from its fields as text, each read back as the type the dataclass declares."""
        readers = _readers(cls)  # type: ignore[arg-type]  # mypy wrongly finds a class unhashable
        return cls(*(read(v) for read, v in zip(readers, values, strict=True)))


def _encoded(value: object) -> str:
    return value.encode() if isinstance(value, Fields) else str(value)


@cache
def _names(cls: type[Fields]) -> tuple[str, ...]:
    if not is_dataclass(cls):  # a Fields subclass is a line only as a dataclass
        raise TypeError(f"{cls.__name__} is a Fields line, so it must be a dataclass")
    return tuple(f.name for f in fields(cls))


@cache
def _readers(cls: type[Fields]) -> tuple[Callable[[str], Any], ...]:
    """How each field is read back from its text: its declared type (int, str), or a nested
    line's decode."""
    hints = get_type_hints(cls)
    names = _names(cls)  # type: ignore[arg-type]  # mypy wrongly finds a class unhashable
    return tuple(hints[name].decode if issubclass(hints[name], Fields) else hints[name] for name in names)


# An envelope's enqueue time is stored as its milliseconds in base 62, these digits in this
# order, led by a letter: 'A' (a zero) goes first when the leading digit would be 0-9. Seven
# characters from 1971 to 2063 (eight after), in place of thirteen decimal digits. An envelope queued by an earlier
# release holds decimal digits, which lead with a digit, and reads back as them.
STAMP_DIGITS = string.ascii_uppercase + string.ascii_lowercase + string.digits
_STAMP_VALUE = {c: i for i, c in enumerate(STAMP_DIGITS)}
_DECIMAL = frozenset(string.digits)


def stamp(ms: int) -> str:
    """The stored form of an enqueue time in ms (>= 0)."""
    digits: list[str] = []
    while True:
        ms, digit = divmod(ms, 62)
        digits.append(STAMP_DIGITS[digit])
        if not ms:
            break
    if digits[-1] in _DECIMAL:
        digits.append("A")
    return "".join(reversed(digits))


def stamp_ms(text: str) -> int:
    """An enqueue time read back from its stored form, or from the decimal digits of an envelope
    an earlier release queued."""
    if text[:1] in _DECIMAL:
        return int(text)
    ms = 0
    for c in text:
        ms = ms * 62 + _STAMP_VALUE[c]
    return ms


@dataclass(slots=True)
class Envelope(Fields):
    """A queued job, one list element; the payload (JSON text) is last. The enqueue time is stored
    as :func:`stamp` writes it, and attempts 0 as nothing for a job never leased, or as ``0`` for
    one whose only attempt a worker gave back (``given_back``, not stored as a field of its own):
    its wait was counted when it was first leased, so its next lease does not count it again."""

    id: int
    enqueued_ms: int
    attempts: int
    # The next three are stored as codes where the group's names list holds them (named() reads
    # one back); the envelope itself keeps what is stored.
    tier: str  # charged at the applied config's cost for it when popped
    task: str
    reason: str
    payload: str
    given_back: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return _STORED

    def encode(self) -> str:
        attempts = str(self.attempts) if self.attempts or self.given_back else ""
        return SEP.join((str(self.id), stamp(self.enqueued_ms), attempts, self.tier, self.task, self.reason,
                         self.payload))

    @classmethod
    def from_fields(cls, values: Sequence[str]) -> Self:
        job_id, enqueued, attempts, tier, task, reason, payload = values
        return cls(int(job_id), stamp_ms(enqueued), int(attempts or 0), tier, task, reason, payload, attempts == "0")

    def lease(self, queue: str, tenant: str, attempts: int, names: Sequence[str], owner: str = "",
              incarnation: str = "") -> Lease:
        return _lease(self.id, self.enqueued_ms, self.task, self.reason, self.payload, queue, tenant, attempts, names,
                      owner, incarnation)


# An envelope's stored fields, in their order: every field of Envelope but given_back.
_STORED = tuple(f.name for f in fields(Envelope) if f.name != "given_back")


def _lease(job_id: int, enqueued_ms: int, task: str, reason: str, payload: str, queue: str, tenant: str,
           attempts: int, names: Sequence[str], owner: str = "", incarnation: str = "") -> Lease:
    """The one place a Lease is made from an envelope's fields (positional: this runs per job). A
    job enqueued without a payload (stored as JSON null) is leased with an empty object, so a
    handler's ``lease.payload.get(...)`` works for every job."""
    return Lease(str(job_id), queue, tenant, named(reason, names), named(task, names),
                 {} if payload == "null" else json.loads(payload), enqueued_ms / 1000.0, attempts, owner, incarnation)


# What an envelope stores in place of a name the group's names list (fairness_core.config_store.Names)
# holds, before the name's 1-based place there. No stored name can start with it: tiers and tasks
# are A-Z a-z 0-9 _ . : - and reasons hold no tab, CR or LF, in this release and every earlier one.
CODE_MARK = "\r"
# The place is one letter, A-Z then a-z, for the first 52 names; decimal digits after them, as an
# earlier release wrote every place (those codes read back as they were).
CODE_LETTERS = string.ascii_uppercase + string.ascii_lowercase
CODE_PLACES = {c: i for i, c in enumerate(CODE_LETTERS, start=1)}  # letter -> 1-based place


def code(place: int) -> str:
    """What an envelope stores for the name at 1-based ``place`` of the group's names."""
    return CODE_MARK + (CODE_LETTERS[place - 1] if place <= len(CODE_LETTERS) else str(place))


def named(field: str, names: Sequence[str]) -> str:
    """The name an envelope field holds: a code read back from ``names``, any other text as it is
    (and so is a code ``names`` does not reach, which only a group whose config key was deleted
    under queued jobs can hold: it shows, rather than failing every pop that meets it)."""
    if field[:1] != CODE_MARK:
        return field
    rest = field[1:]
    place = CODE_PLACES.get(rest) or (int(rest) if rest.isdigit() else 0)
    return names[place - 1] if 0 < place <= len(names) else field


@dataclass(slots=True)
class Record(Fields):
    """A leased job (the leased hash's value) or a retry waiting for its backoff (the delayed set's
    member): its class, tenant and attempts so far, then its envelope."""

    queue: str
    tenant: str
    attempts: int
    job: Envelope

    def lease(self, names: Sequence[str], owner: str = "", incarnation: str = "") -> Lease:
        return self.job.lease(self.queue, self.tenant, self.attempts, names, owner, incarnation)


# Where the fields a lease needs sit in an envelope line, taken from Envelope's declaration.
_ENVELOPE_AT = {name: i for i, name in enumerate(Envelope.names())}
_ID, _ENQUEUED, _TASK, _REASON, _PAYLOAD = (_ENVELOPE_AT[name] for name in ("id", "enqueued_ms", "task", "reason",
                                                                             "payload"))


def popped_lease(names: Sequence[str], queue: bytes | str, tenant: bytes | str, attempts: int,
                 envelope: bytes | str, owner: str = "", incarnation: bytes | str = "") -> Lease:
    """The lease of one record of a pop reply (its fields in Record's order, as Redis sends them),
    its names read back from ``names``: the same Lease as ``Record.from_fields(...).lease(names)``,
    read straight from the envelope line without the generic field readers, because every job a
    worker runs passes through here."""
    fields = decoded(envelope).split(SEP, len(_ENVELOPE_AT) - 1)
    return _lease(int(fields[_ID]), stamp_ms(fields[_ENQUEUED]), fields[_TASK], fields[_REASON], fields[_PAYLOAD],
                  decoded(queue), decoded(tenant), int(attempts), names, owner, decoded(incarnation))


def decoded(value: bytes | str) -> str:
    """A Redis reply's text, from a client that decodes replies or one that does not."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class DeadLetter(Fields):
    """A dead-lettered job: where it was, when and why it died, then its envelope."""

    queue: str
    tenant: str
    attempts: int
    dead_ms: int
    error: str
    job: Envelope
