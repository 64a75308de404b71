"""Lua-on-Redis against the pure-Python reference model: same operations, same pops, same state.

Hypothesis draws a config (policy, weights, batch, budgets, reservations, aging) and a sequence
of operations with a controlled clock; after every operation the return values and the complete
stored state of both implementations must be identical. Any mismatch is a bug in one of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import redis
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fairness_core import BudgetRejected, Finished, Lease, Model, TenantLimitReached
from fairness_core.admission import NOWHERE, Elsewhere
from fairness_core.config import POLICIES, parse_config
from fairness_core.config_dump import config_to_data
from fairness_core.config_store import CREATED_MS, ConfigRefused, Moves
from fairness_core.jobs import settled
from fairness_core.scheduler import Scheduler

from .conftest import make_config
from .redis_state import _glob, read_state

TASKS = ["password_reset", "newsletter", "order", "nightly_digest"]
# With accounts (tenants.account_separator "/"), acme/1 is a key of the account acme beside its
# one-key id acme, and ünï/ö one of ünï's; under "ï", ünï/ö and ünï are both the account ün's.
TENANTS = ["acme", "b", "c{x}", ":colon", "ünï", "d e", "acme/1", "ünï/ö"]
CLASSES = ["jobs:high", "jobs:medium", "jobs:low"]

configs = st.fixed_dictionaries({
    "policy": st.sampled_from(POLICIES),
    "weights": st.tuples(*(st.integers(1, 7) for _ in range(3))),
    "batch": st.integers(1, 4),
    "budget": st.sampled_from([None, 0.3, 0.6]),
    "reserved": st.integers(0, 2),
    "promote": st.booleans(),
    "budget_action": st.sampled_from(["demote", "reject"]),
    # Admission: a small group-wide limit, and a smaller one for the free tier, so runs reach them.
    "max_queued": st.sampled_from([None, 3, 6]),
    "free_max_queued": st.sampled_from([None, 2]),
    # And arrival rates of 3 and 2 jobs per 10s window, so runs are refused and let in as it moves.
    "max_rate": st.sampled_from([None, 0.3]),
    "free_max_rate": st.sampled_from([None, 0.2]),
    # What fairness counts: jobs, or microseconds of work (estimates at the pop, corrected at the ack).
    "charge": st.sampled_from(["jobs", "runtime"]),
    # Two-level fairness: every tenant its own party, or accounts before "/", with admission per
    # account (used only with accounts): 4 jobs queued, 4 jobs per 10s window.
    "accounts": st.sampled_from([None, "/"]),
    "account_max_queued": st.sampled_from([None, 4]),
    "account_max_rate": st.sampled_from([None, 0.4]),
    # Dispatch limits (weighted-fair only; a run with them forces it): caps on leased jobs, rates
    # with bursts, per tier, per account, and one tenant's override, small enough that runs hold
    # tenants, and rates that release them within a few sleeps.
    "limits": st.sampled_from([None, None, "caps", "rates", "both"]),
    "free_limit": st.sampled_from([None, "tight", "unlimited"]),
    "override": st.sampled_from([None, "acme", "b"]),
    "account_limits": st.booleans(),
})
# A runtime a worker reports (seconds): none, under the minimum charge, about the seed, far above it.
runtimes = st.sampled_from([None, 0.0, 0.0004, 0.05, 0.2, 0.5, 2.0])

# What a sharded queue's other shards hold of the tenant's limits (the enqueue's ``elsewhere``).
elsewheres = st.sampled_from([NOWHERE, NOWHERE, Elsewhere(2, 1, 0.5, 1.25), Elsewhere(5, 3, 2.0, 3.5)])
enqueues = st.tuples(st.just("enqueue"), st.sampled_from(TASKS), st.sampled_from(TENANTS),
                     st.sampled_from([None, "enterprise", "pro", "free"]), st.booleans(), st.integers(1, 8), elsewheres)
# Keyed submits (one by one, or a batch with submit_many): a key again within the window (30s)
# returns the first job; "sleep"s carry some past it.
keyed = st.tuples(st.just("keyed"), st.sampled_from(TASKS), st.sampled_from(TENANTS),
                  st.sampled_from([None, "pro", "free"]), st.booleans(),
                  st.lists(st.sampled_from(["k1", "k2", "k3", "ключ/{x}"]), min_size=1, max_size=4))
# The worker a pop is for: none (its leases go back only when they expire), or a registered one,
# whose leases go back when it unregisters or its registration lapses.
owners = st.sampled_from(["", "w1", "w2"])
pops = st.tuples(st.just("pop"), st.integers(1, 6),
                 st.one_of(st.none(), st.none(), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=2, unique=True)),
                 owners)
# Acks riding with the next pop: picked leases (repeats and long-settled ones are stale acks).
ack_and_pops = st.tuples(st.just("ack_and_pop"), st.lists(st.tuples(st.integers(0, 50), runtimes), max_size=3),
                         st.integers(1, 6),
                         st.one_of(st.none(), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=2, unique=True)),
                         owners)
# A config change while jobs are everywhere: new weights, policy and batch; the third class renamed
# (or back), its jobs moved or not; the tiers re-weighted (new costs, or their order turned round)
# or "free" dropped, its tenants moved to "pro" or not. Refused when a removed class or tier is still in use unmoved.
applies = st.tuples(st.just("apply"), st.fixed_dictionaries({
    "policy": st.sampled_from(POLICIES),
    "weights": st.tuples(*(st.integers(1, 7) for _ in range(3))),
    "batch": st.integers(1, 4),
    "low": st.sampled_from(["jobs:low", "jobs:bulk"]),
    "move_low": st.booleans(),
    "tiers": st.sampled_from(["same", "reweigh", "drop-free", "invert"]),
    "move_free": st.booleans(),
    "charge": st.sampled_from(["jobs", "runtime"]),
    # Accounts turned on, off or split another way (a multi-byte separator): the parties regroup.
    "accounts": st.sampled_from([None, "/", "ï"]),
    # Dispatch limits kept, lifted, or tightened (held members rejoin; counts are rebuilt).
    "limits": st.sampled_from(["same", "none", "tight"]),
}))
operations = st.lists(
    st.one_of(
        enqueues, enqueues, enqueues, keyed, pops, pops, pops, ack_and_pops, ack_and_pops,
        st.tuples(st.just("ack"), st.integers(0, 50), runtimes),
        st.tuples(st.just("nack"), st.integers(0, 50), runtimes),
        st.tuples(st.just("nack_final"), st.integers(0, 50), runtimes),
        st.tuples(st.just("defer_unhandled"), st.integers(0, 50)),
        st.tuples(st.just("give_back"), st.lists(st.integers(0, 50), max_size=3)),
        st.tuples(st.just("taken_back"), st.integers(0, 50)),
        st.tuples(st.just("reclaim"), st.sampled_from(["w1", "w2"]), st.lists(st.integers(0, 50), max_size=3)),
        # Dead letters: picked leases' ids (most are not dead: not found), or the oldest of a class.
        st.tuples(st.sampled_from(["requeue", "drop"]), st.lists(st.integers(0, 50), max_size=3),
                  st.one_of(st.none(), st.sampled_from(CLASSES)), st.integers(1, 3)),
        st.tuples(st.just("extend"), st.integers(0, 50)),
        st.tuples(st.just("reap")),
        st.tuples(st.just("promote")),
        st.tuples(st.just("pause"), st.sampled_from(CLASSES)),
        st.tuples(st.just("resume"), st.sampled_from(CLASSES)),
        st.tuples(st.just("register"), st.sampled_from(["w1", "w2"]), st.integers(0, 4)),
        st.tuples(st.just("sleep"), st.integers(0, 4000)),
        # Redis back empty (a FLUSHALL, a restart without persistence): ids start again from 1, and
        # the leases made before are refused.
        st.tuples(st.just("wipe")),
        applies,
    ),
    min_size=20, max_size=80,
)


def dispatch_limits(params: dict[str, Any]) -> dict[str, Any]:
    """The ``tenants`` keys of a run's dispatch limits (none unless weighted-fair)."""
    kind = params.get("limits")
    if kind is None or params["policy"] != "weighted-fair":
        return {}
    out: dict[str, Any] = {}
    if kind in ("caps", "both"):
        out["max_in_flight"] = 2
    if kind in ("rates", "both"):
        out.update(dispatch_rate="2/s", dispatch_burst=2)
    free = params.get("free_limit")
    if free:
        out["limits"] = {"free": {"max_in_flight": 1, "dispatch_rate": "1/s"} if free == "tight"
                         else {"max_in_flight": "unlimited", "dispatch_rate": "unlimited"}}
    if params.get("override") == "acme":
        out["overrides"] = {"acme": {"max_in_flight": 1}}
    elif params.get("override") == "b":
        out["overrides"] = {"b": {"dispatch_rate": "3/s", "dispatch_burst": 3}}
    if params.get("account_limits") and params.get("accounts"):
        out.update(account_max_in_flight=3, account_dispatch_rate="2/s")
    return out


def build_config(params: dict[str, Any]):
    if params.get("limits"):  # dispatch limits hold only under weighted-fair
        params = {**params, "policy": "weighted-fair"}
    classes = [
        {"name": "jobs:high", "weight": params["weights"][0], "max_age": "60s",
         "reserved_slots": params["reserved"], **({"arrival_budget": params["budget"]} if params["budget"] else {})},
        # An expected service time: the seed of the class's runtime estimates.
        {"name": "jobs:medium", "weight": params["weights"][1], "max_age": "15m", "arrival_rate": "1/s",
         "service_time": "200ms"},
        {"name": "jobs:low", "weight": params["weights"][2], "max_age": "1h",
         **({"promote_after": "5s"} if params["promote"] else {})},
    ]
    return make_config(
        classes=classes,
        scheduler={"policy": params["policy"], "budget_window": "10s", "budget_min_arrivals": 4, "dedup_window": "30s",
                   "budget_action": params.get("budget_action", "demote"), "charge": params.get("charge", "jobs")},
        tenants={"batch": params["batch"], "max_queued": params.get("max_queued"), **dispatch_limits(params),
                 **({"account_separator": params["accounts"],
                     **{name: params[name] for name in ("account_max_queued", "account_max_rate") if params.get(name)}}
                    if params.get("accounts") else {}),
                 "max_rate": params.get("max_rate"), "rate_window": "10s",
                 **({"limits": {"free": {"max_queued": params.get("free_max_queued"),
                                         "max_rate": params.get("free_max_rate"),
                                         **dispatch_limits(params).get("limits", {}).get("free", {})}}}
                    if params.get("free_max_queued") or params.get("free_max_rate") else {})},
        leases={"visibility_timeout": "3s", "max_attempts": 3, "retry_backoff": "500ms", "retry_backoff_max": "2s"},
        exporter={"window": "5s", "topk_tenants": 2, "fairness_sample": 3,
                  "noisy_min_inflight": 1},
    )


def changed_config(config: Any, change: dict[str, Any]) -> tuple[Any, Moves]:
    """The config of an ``apply`` op on top of ``config`` (same prefix), and its moves."""
    data = config_to_data(config)
    low = change["low"]
    removed = "jobs:bulk" if low == "jobs:low" else "jobs:low"
    for item, weight in zip(data["classes"], change["weights"]):
        item["weight"] = weight
    data["classes"][2]["name"] = low
    for rule in data["classification"]:
        if rule["class"] in ("jobs:low", "jobs:bulk"):
            rule["class"] = low
    data["scheduler"]["policy"] = change["policy"]
    held = ("max_in_flight", "dispatch_rate", "dispatch_burst", "overrides", "account_max_in_flight",
            "account_dispatch_rate")
    if change.get("limits") == "tight" and change["policy"] == "weighted-fair":
        data["tenants"].update(max_in_flight=1, dispatch_rate="1/s")
    if change.get("limits") == "none" or change["policy"] != "weighted-fair":
        for name in held:
            data["tenants"].pop(name, None)
        for limits in data["tenants"].get("limits", {}).values():
            for name in held:
                limits.pop(name, None)
    data["scheduler"]["charge"] = change.get("charge", "jobs")
    data["tenants"]["batch"] = change["batch"]
    data["tenants"].pop("account_separator", None)
    if change.get("accounts"):
        data["tenants"]["account_separator"] = change["accounts"]
    else:  # account limits need accounts
        for name in ("account_max_queued", "account_max_rate", "account_max_in_flight", "account_dispatch_rate"):
            data["tenants"].pop(name, None)
    tiers = {"same": {"enterprise": 6, "pro": 3, "free": 1}, "reweigh": {"enterprise": 4, "pro": 3, "free": 1},
             "drop-free": {"enterprise": 6, "pro": 3}, "invert": {"enterprise": 1, "pro": 3, "free": 6}}[change["tiers"]]
    data["tenants"]["tiers"] = tiers
    data["tenants"]["default_tier"] = "free" if "free" in tiers else "pro"
    if "free" not in tiers:
        data["tenants"].get("limits", {}).pop("free", None)
    moves = Moves(classes={removed: low} if change["move_low"] else {},
                  tiers={"free": "pro"} if change["move_free"] and "free" not in tiers else {})
    return parse_config(yaml.safe_load(yaml.safe_dump(data))), moves


def _apply(target: Any, op: tuple, now: int | None, leases: list[Lease]) -> Any:
    """Run one operation on the Scheduler (now=None) or the Model (now given)."""
    try:
        return _run(target, op, now, leases)
    except (KeyError, ValueError):  # a class a config change removed: refused by both
        return "unknown class"


def _run(target: Any, op: tuple, now: int | None, leases: list[Lease]) -> Any:
    args = () if now is None else (now,)
    name = op[0]
    if name == "apply":
        config, moves = changed_config(target.config, op[1])
        try:
            if now is None:
                return ("applied", target.apply(config, moves=moves).moved)
            target.apply(now, config, moves=moves)
            moved = 0
            while (n := target.move(now)) > 0:
                moved += n
            return ("applied", moved)
        except ConfigRefused as exc:
            return ("refused", exc.classes, exc.tiers)
    if name == "enqueue":
        out = []
        for i in range(op[5]):
            try:
                out.append(target.submit(*args, op[1], op[2], {"n": i}, tier=op[3], user_waiting=op[4],
                                         elsewhere=op[6] if len(op) > 6 else NOWHERE))
            except BudgetRejected:
                out.append("rejected")
            except TenantLimitReached as exc:
                out.append(f"refused: {exc}")
        return out
    if name == "keyed":
        return _keyed(target, op, args)
    if name == "pop":
        return target.pop(*args, op[1], classes=op[2], owner=op[3] if len(op) > 3 else "")
    if name == "ack_and_pop":
        return target.ack_and_pop(*args, _done(op, leases), op[2], classes=op[3], owner=op[4] if len(op) > 4 else "")
    if name == "give_back":
        return target.give_back(*args, [leases[i % len(leases)] for i in op[1]] if leases else [])
    if name == "reclaim":
        return target.reclaim(*args, op[1], [leases[i % len(leases)] for i in op[2]] if leases else [])
    if name == "taken_back":
        return target.lease_taken_back(leases[op[1] % len(leases)].job_id) if leases else None
    if name in ("ack", "nack", "extend", "nack_final", "defer_unhandled"):
        if not leases:
            return None
        lease = leases[op[1] % len(leases)]
        runtime = op[2] if len(op) > 2 else None
        if name == "nack_final":
            return target.nack(*args, lease, "no handler for task x", final=True, runtime=runtime)
        if name == "nack":
            return target.nack(*args, lease, "boom", runtime=runtime)
        if name == "ack":
            return target.ack(*args, lease, runtime=runtime)
        if name == "defer_unhandled":
            return target.defer_unhandled(*args, lease)
        return target.extend(*args, lease)
    if name in ("requeue", "drop"):
        ids = [leases[i % len(leases)].job_id for i in op[1]] if leases else []
        method = target.requeue_dead if name == "requeue" else target.drop_dead
        return method(*args, ids, queue=op[2], limit=op[3])
    if name == "reap":
        return target.reap(*args)
    if name == "promote":
        return target.promote_overdue(*args)
    if name in ("pause", "resume"):
        return getattr(target, name)(op[1])
    if name == "register":
        return target.register_worker(*args, op[1], op[2], 10.0)
    raise AssertionError(name)


def _keyed(target: Any, op: tuple, args: tuple) -> list[Any]:
    """A keyed op: on the Scheduler one submit, or a submit_many of them all; on the Model, a
    submit for each key. None for a job refused or rejected."""
    task, tenant, tier, user_waiting, keys = op[1:]
    payloads = [{"n": i} for i in range(len(keys))]
    if args or len(keys) == 1:
        out: list[Any] = []
        for key, payload in zip(keys, payloads):
            try:
                out.append(target.submit(*args, task, tenant, payload, tier=tier, user_waiting=user_waiting, key=key))
            except (BudgetRejected, TenantLimitReached):
                out.append(None)
        return out
    return target.submit_many(task, tenant, payloads, tier=tier, user_waiting=user_waiting, keys=keys)


PLAIN = {"policy": "weighted-fair", "weights": (3, 2, 1), "batch": 2, "budget": None, "reserved": 0, "promote": False}
RENAME = {"policy": "weighted-fair", "weights": (1, 2, 3), "batch": 2, "low": "jobs:bulk", "move_low": True,
          "tiers": "same", "move_free": False}
ORDER = ("enqueue", "order", "acme", None, False, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=configs, ops=operations)
# A retry released behind a redelivered, older job: the head time must stay the older one.
@example(params=PLAIN, ops=[ORDER, ("sleep", 10), ORDER, ("pop", 2, None), ("nack", 1), ("sleep", 3500), ("reap",)])
# Caps: acme (override 1) and b (2) held at their caps while c goes on; an ack rejoins its
# tenant; a nack's retry and a give-back count as settled; every class of a held tenant holds it.
@example(params={**PLAIN, "limits": "caps", "override": "acme"}, ops=[
    ("enqueue", "order", "acme", None, False, 4), ("enqueue", "order", "b", None, False, 4),
    ("enqueue", "newsletter", "b", None, False, 3), ("enqueue", "order", "c{x}", None, False, 3),
    ("pop", 6, None), ("pop", 2, None), ("ack", 0, None), ("pop", 3, None), ("nack", 1, None),
    ("give_back", [2]), ("ack_and_pop", [(3, None)], 4, None), ("apply", {**RENAME, "limits": "none"}),
    ("pop", 6, None)])
# Rates: 2/s with a burst of 2 (b: 3/s, 3), the free tier 1/s; holds released as tokens come due.
@example(params={**PLAIN, "limits": "rates", "override": "b", "free_limit": "tight"}, ops=[
    ("enqueue", "order", "acme", None, False, 5), ("enqueue", "order", "b", "free", False, 5),
    ("enqueue", "order", "d e", "free", False, 3), ("pop", 6, None), ("sleep", 400), ("pop", 6, None),
    ("sleep", 700), ("pop", 6, None), ("reap",), ("sleep", 3000), ("reap",), ("pop", 6, None)])
# Accounts with their own limits and their keys': the account held at 3, keys at 2.
@example(params={**PLAIN, "limits": "both", "accounts": "/", "account_limits": True}, ops=[
    ("enqueue", "order", "acme", None, False, 3), ("enqueue", "order", "acme/1", None, False, 3),
    ("enqueue", "newsletter", "acme/1", None, False, 2), ("enqueue", "order", "b", None, False, 2),
    ("pop", 6, None), ("sleep", 600), ("pop", 6, None), ("ack", 0, None), ("ack", 1, None), ("sleep", 1000),
    ("pop", 6, None), ("promote",), ("apply", {**RENAME, "limits": "tight", "accounts": "/"}), ("pop", 6, None)])
# A retry whose backoff has passed is served by the next pop.
@example(params=PLAIN, ops=[ORDER, ("pop", 1, None), ("nack", 0), ("sleep", 600), ("pop", 1, None)])
# A pop for a class a config change removed is refused before it releases a due retry.
@example(params=PLAIN, ops=[ORDER, ("pop", 1, None), ("nack", 0), ("apply", {**RENAME, "move_low": False}),
                            ("sleep", 600), ("pop", 1, ["jobs:low"])])
# Aging promotes at most a batch per tenant per sweep.
@example(params={**PLAIN, "promote": True}, ops=[
    ("enqueue", "newsletter", "acme", None, False, 5), ("enqueue", "newsletter", "b", None, False, 1),
    ("sleep", 4000), ("sleep", 2000), ("promote",)])
# An ack riding with a pop frees the reserved capacity that pop then uses; a repeated ack is stale.
@example(params={**PLAIN, "reserved": 1}, ops=[
    ("register", "w1", 2), ORDER, ORDER, ("pop", 1, None), ("ack_and_pop", [(0, None), (0, None)], 1, None)])
# A job dead-lettered at once is requeued with attempts reset, served again, then dropped for good.
@example(params=PLAIN, ops=[ORDER, ORDER, ("pop", 2, None), ("nack_final", 0), ("nack_final", 1),
                            ("requeue", [0], None, 1), ("pop", 1, None), ("drop", [], "jobs:medium", 3)])
# A job no worker has a handler for goes back with its attempt, is popped again when due, given
# back again (never dead-lettered by attempts), then fails as any job does.
@example(params=PLAIN, ops=[ORDER, ("pop", 1, None), ("defer_unhandled", 0), ("defer_unhandled", 0), ("sleep", 5000),
                            ("reap",), ("pop", 1, None), ("defer_unhandled", 1), ("sleep", 5000), ("reap",),
                            ("pop", 1, None), ("nack", 2)])
# A worker's leases: one acked riding with its pop, one given back unstarted (attempt returned),
# the rest taken back when its registration lapses (reaps every 4 s: no gap), and remembered so.
@example(params=PLAIN, ops=[
    ("register", "w1", 4), ORDER, ORDER, ORDER, ORDER, ("pop", 4, None, "w1"), ("ack_and_pop", [(0, None)], 1, None, "w1"),
    ("give_back", [1]), ("reap",), ("sleep", 4000), ("reap",), ("sleep", 4000), ("reap",), ("sleep", 4000), ("reap",),
    ("taken_back", 2), ("taken_back", 0), ("register", "w2", 1), ("pop", 2, None, "w2"), ("register", "w2", 0)])
# Reaps that stop for longer than the gap (a stall): the registrations lapse that much later.
@example(params=PLAIN, ops=[("register", "w1", 2), ORDER, ("pop", 1, None, "w1"), ("reap",), ("sleep", 4000),
                            ("sleep", 4000), ("sleep", 4000), ("reap",), ("taken_back", 0), ("sleep", 4000), ("reap",),
                            ("sleep", 4000), ("reap",), ("taken_back", 0)])
# A wait of exactly a histogram bucket's upper bound (50 ms) falls into that bucket.
@example(params=PLAIN, ops=[ORDER, ("sleep", 49), ("pop", 1, None)])
# A class renamed while it holds queued, leased and retrying jobs: refused without a move; with one
# its queue moves, and its leased job comes back to the new class when reaped.
@example(params=PLAIN, ops=[
    ("enqueue", "newsletter", "acme", "free", False, 3), ("pop", 2, ["jobs:low"]), ("nack", 0),
    ("apply", {**RENAME, "move_low": False}), ("apply", RENAME), ("sleep", 3500), ("reap",), ("pop", 3, None)])
# Dropping a tier still queued tenants' is refused without a move; new costs keep the tags.
@example(params=PLAIN, ops=[
    ORDER, ("enqueue", "order", "b", "free", False, 2), ("apply", {**RENAME, "low": "jobs:low", "tiers": "drop-free"}),
    ("apply", {**RENAME, "low": "jobs:low", "tiers": "drop-free", "move_free": True}), ("pop", 2, None),
    ("apply", {**RENAME, "low": "jobs:low", "tiers": "same"}), ("pop", 2, None)])
# A tenant at its limit is refused (counted) while another is accepted; a pop makes room again.
@example(params={**PLAIN, "max_queued": 3, "free_max_queued": 2}, ops=[
    ("enqueue", "order", "acme", None, False, 4), ("enqueue", "newsletter", "b", "pro", False, 4),
    ("enqueue", "order", "b", "free", False, 1), ("pop", 1, None), ("enqueue", "order", "acme", None, False, 2)])
# A tenant over its arrival rate is refused (no arrival) while another is let in; the estimate lets
# it in again as the window moves on, the previous bucket counting less and less.
@example(params={**PLAIN, "max_rate": 0.3, "free_max_rate": 0.2}, ops=[
    ("enqueue", "order", "acme", None, False, 4), ("enqueue", "order", "b", "free", False, 3),
    ("sleep", 4000), ("sleep", 4000), ("sleep", 4000), ("enqueue", "order", "acme", None, False, 2),
    ("sleep", 4000), ("enqueue", "order", "acme", None, False, 3)])
# Charging by runtime: the pops charge estimates (seeds first), acks correct them and teach the
# estimates, a failure is charged without teaching, and a tenant that leaves loses its estimates
# and rejoins at the class's virtual time, its late corrections dropped.
@example(params={**PLAIN, "charge": "runtime"}, ops=[
    ("enqueue", "order", "acme", None, False, 3), ("enqueue", "newsletter", "b", "pro", False, 3),
    ("pop", 2, None), ("ack_and_pop", [(0, 2.0), (1, 0.05)], 2, None), ("ack", 2, 0.5), ("nack", 3, 0.2),
    ("pop", 2, None), ("ack_and_pop", [(4, 0.0004), (5, None)], 3, None), ("ack", 6, 2.0),
    ("enqueue", "order", "acme", None, False, 2), ("pop", 1, None), ("ack", 7, 0.05)])
# Switching the basis under load re-bases the tags and drops the estimates and charges.
@example(params={**PLAIN, "charge": "runtime"}, ops=[
    ("enqueue", "order", "acme", None, False, 3), ("pop", 2, None), ("ack", 0, 1.0),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "charge": "jobs"}), ("ack", 1, 1.0), ("pop", 1, None),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "charge": "runtime"}), ("ack", 2, 0.3)])
# Two levels: the account acme (two keys and its own id) takes turns with b as one party, its keys
# alternating inside its share; a key leaving keeps the account queued; then accounts are turned
# off and on again under load, the parties rebuilt from the queued tenants each time.
@example(params={**PLAIN, "batch": 1, "accounts": "/"}, ops=[
    ("enqueue", "order", "acme/1", None, False, 3), ("enqueue", "order", "acme/2", "pro", False, 3),
    ("enqueue", "order", "acme", None, False, 1), ("enqueue", "order", "b", None, False, 4), ("pop", 5, None),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "accounts": None}), ("pop", 2, None),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "accounts": "/"}), ("pop", 3, None)])
# An account of keys of three tiers is charged at the highest queued: a key's latest job lowers
# only that key, the account falls as its top keys leave, tiers turned round charge it anew, and
# a dropped default tier is written in for its keys.
@example(params={**PLAIN, "batch": 1, "accounts": "/"}, ops=[
    ("enqueue", "order", "acme/1", "enterprise", False, 2), ("enqueue", "order", "acme", "free", False, 3),
    ("enqueue", "order", "acme/2", "pro", False, 3), ("enqueue", "order", "b", "pro", False, 6),
    ("enqueue", "order", "acme/2", "free", False, 1), ("pop", 4, None),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "accounts": "/", "tiers": "invert"}), ("pop", 3, None),
    ("apply", {**RENAME, "low": "jobs:low", "move_low": False, "accounts": "/", "tiers": "drop-free", "move_free": True}),
    ("pop", 6, None)])
# Admission per account: its keys together are refused at the account's queued limit (a pop makes
# room) and at its arrival rate, naming the account's field; a key's own limit comes first.
@example(params={**PLAIN, "accounts": "/", "account_max_queued": 4, "account_max_rate": 0.4, "max_queued": 3}, ops=[
    ("enqueue", "order", "acme/1", None, False, 4), ("enqueue", "order", "acme/2", None, False, 2),
    ("pop", 2, None), ("enqueue", "order", "acme", None, False, 2), ("enqueue", "order", "b", None, False, 5),
    ("sleep", 6000), ("enqueue", "order", "acme/2", None, False, 1)])
# Accounts under runtime charging: a correction lands on the account's tag and on its key's.
@example(params={**PLAIN, "charge": "runtime", "accounts": "/"}, ops=[
    ("enqueue", "order", "acme/1", None, False, 3), ("enqueue", "order", "acme/2", None, False, 3),
    ("enqueue", "newsletter", "b", "pro", False, 3), ("pop", 2, None), ("ack_and_pop", [(0, 2.0), (1, 0.05)], 2, None),
    ("ack", 2, 0.5), ("pop", 3, None)])
# A wipe: the new state's jobs take ids 1 and 2 again; the acks, nacks, heartbeats, give-backs
# and reclaims of the leases made before it are refused and touch none of them.
@example(params=PLAIN, ops=[
    ("register", "w1", 4), ORDER, ORDER, ("pop", 2, None, "w1"), ("wipe",), ("register", "w1", 4),
    ("enqueue", "order", "b", None, False, 2), ("pop", 2, None, "w1"), ("ack", 0, None), ("nack", 1, None),
    ("extend", 0), ("defer_unhandled", 1), ("give_back", [0, 1]), ("reclaim", "w1", [0, 1]),
    ("ack_and_pop", [(0, None), (2, 0.05)], 1, None, "w1"), ("ack", 3, None)])
# A key returns its job queued, and done; past the window it is a new job's. A key refused at a
# limit names no job, and its retry after a pop is queued; a key twice in one batch is one job.
@example(params={**PLAIN, "max_queued": 3}, ops=[
    ("keyed", "order", "acme", None, False, ["k1", "k2", "k1", "k3", "ключ/{x}"]),
    ("keyed", "order", "acme", None, False, ["k1"]),
    ("pop", 1, None), ("ack", 0, None), ("keyed", "order", "acme", None, False, ["ключ/{x}", "k1"]),
    *[("sleep", 4000)] * 8, ("keyed", "order", "acme", None, False, ["k1", "k2"])])
def test_lua_and_model_agree(client: redis.Redis, params: dict[str, Any], ops: list[tuple]) -> None:
    config = build_config(params)
    clock = [1_700_000_000_000]
    lua = Scheduler(config, client, clock=lambda: clock[0])
    model = _new_state(lua, client)
    leases: list[Lease] = []
    accepted: set[str] = set()
    finished: set[str] = set()
    for step, op in enumerate(ops):
        if op[0] == "sleep":
            clock[0] += op[1]
            continue
        if op[0] == "wipe":  # every key of the group gone; the leases made before stay in hand
            client.delete(*client.scan_iter(match=_glob(lua.keys.base) + "*", count=1000))
            model = _new_state(lua, client)
            accepted.clear()
            finished.clear()
            clock[0] += 1
            continue
        got_lua = _apply(lua, op, None, leases)
        got_model = _apply(model, op, clock[0], leases)
        assert got_lua == got_model, f"step {step} {op}: lua={got_lua!r} model={got_model!r}"
        _account(op, got_lua, leases, accepted, finished)
        if op[0] == "pop" and isinstance(got_lua, list):
            leases.extend(got_lua)
        elif op[0] == "ack_and_pop" and not isinstance(got_lua, str):
            leases.extend(got_lua.leases)
        assert read_state(lua.config, client, clock[0]) == model.state(clock[0]), f"state differs after step {step} {op}"
        snapshot = lua.snapshot()
        assert snapshot == model.snapshot(clock[0]), f"snapshot differs after step {step} {op}"
        _no_job_lost_or_hidden(model.state(clock[0]), snapshot, lua.config.class_names, accepted - finished)
        clock[0] += 1


def _new_state(lua: Scheduler, client: redis.Redis) -> Model:
    """The group created now from the Scheduler's config file, and a Model of it whose leases
    carry the same token of the group's state."""
    lua.sync()
    return Model(lua.file_config, incarnation=client.hget(lua.keys.config, CREATED_MS).decode())


def _done(op: tuple, leases: list[Lease]) -> list[Lease | Finished]:
    """The leases an ack_and_pop op acks, each with its runtime when one is reported."""
    picked = [(leases[i % len(leases)], runtime) for i, runtime in op[1]] if leases else []
    return [lease if runtime is None else Finished(lease, runtime) for lease, runtime in picked]


def _account(op: tuple, got: Any, leases: list[Lease], accepted: set[str], finished: set[str]) -> None:
    """Track the jobs Redis accepted and those that left it for good (acked, dropped)."""
    if op[0] in ("enqueue", "keyed"):
        accepted.update(e.job_id for e in got if e is not None and not isinstance(e, str))
    elif op[0] == "ack" and got:
        finished.add(leases[op[1] % len(leases)].job_id)
    elif op[0] == "ack_and_pop" and not isinstance(got, str):
        done = [settled(item)[0] for item in _done(op, leases)]
        finished.update(lease.job_id for lease, ok in zip(done, got.acked) if ok)
    elif op[0] == "drop" and not isinstance(got, str):
        finished.update(got.done)


def _no_job_lost_or_hidden(state: dict[str, Any], snapshot: Any, configured: tuple[str, ...], alive: set[str]) -> None:
    """Every accepted job not yet finished is somewhere (queued, leased, retrying, dead-lettered),
    and queued jobs under a class the config does not name show in the snapshot."""
    present = {line.split("\t", 1)[0] for c in state["classes"].values() for q in c["queues"].values() for line in q}
    present |= set(state["leased"])
    present |= {rec.split("\t", 4)[3] for rec in state["delayed"]}
    present |= {line.split("\t", 6)[5] for line in state["dead"]}
    assert present == alive, f"lost: {sorted(alive - present)}, unknown: {sorted(present - alive)}"
    for name, c in state["classes"].items():
        queued = sum(len(q) for q in c["queues"].values())
        if name not in configured and queued:
            assert snapshot.unconfigured[name].depth == queued, f"{queued} jobs of {name} hidden"


def test_differential_catches_a_divergence(client: redis.Redis) -> None:
    """The comparison is sharp: a model whose weights differ from the Lua's shows up at once."""
    config = build_config({"policy": "weighted", "weights": (5, 1, 1), "batch": 1, "budget": None,
                           "reserved": 0, "promote": False})
    lua = Scheduler(config, client, clock=lambda: 1_700_000_000_000)
    model = Model(config)
    model.settings = replace(model.settings, weights=(1, 1, 5))
    for task in ("password_reset", "order", "newsletter") * 3:
        lua.enqueue(task, "acme")
        model.enqueue(1_700_000_000_000, task, "acme")
    with pytest.raises(AssertionError):
        assert lua.pop(3) == model.pop(1_700_000_000_000, 3)
