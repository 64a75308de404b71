"""Read a queue group's whole Redis state into the canonical form of ``Model.state()``.

Test support only: it scans the group's keys, which production code never does.
"""

from __future__ import annotations

from typing import Any

import redis

from fairness_core import Config
from fairness_core.keys import CLASS_PARTS, DEDUP_SPACE, RATE_SPACE, TENANT_QUEUE, Keys


def _s(value: bytes) -> str:
    return value.decode("utf-8")


def _zset(client: redis.Redis, key: str) -> dict[str, float]:
    return {_s(m): s for m, s in client.zrange(key, 0, -1, withscores=True)}


def _num(value: bytes) -> float:
    number = float(value)
    return int(number) if number.is_integer() else number


def _glob(text: str) -> str:
    """``text`` as a SCAN pattern matching only itself."""
    return text.replace("[", "\\[").replace("*", "\\*").replace("?", "\\?")


def read_state(config: Config, client: redis.Redis, now_ms: int) -> dict[str, Any]:
    k = Keys(config.redis.prefix)
    window_ms = int(config.exporter.window * 1000)
    classes = {}
    # Every class the counters name: the configured ones, and removed ones that may hold state.
    counted = {_s(f).split("\t")[1] for f in client.hkeys(k.stats) if "\t" in _s(f)}
    for name in [*config.class_names, *sorted(counted - set(config.class_names))]:
        # One SCAN per class for its keyed parts: sub-queues, accounts, estimates, service buckets.
        own = k.class_key(name, "")
        queues, accounts, tenant_estimates, served, served_total, account_served = {}, {}, {}, {}, {}, {}
        account_tiers: dict[str, dict[str, int]] = {}
        for key in client.scan_iter(match=_glob(own) + "*", count=1000):
            part = _s(key)[len(own):]
            if part.startswith(TENANT_QUEUE):
                queues[part[len(TENANT_QUEUE):]] = [_s(e) for e in client.lrange(key, 0, -1)]
            elif part.startswith(CLASS_PARTS["account"]):
                accounts[part[len(CLASS_PARTS["account"]):]] = _zset(client, key)
            elif part.startswith(CLASS_PARTS["account_tiers"]):
                account_tiers[part[len(CLASS_PARTS["account_tiers"]):]] = {
                    _s(t): int(n) for t, n in client.hgetall(key).items()}
            elif part.startswith(CLASS_PARTS["tenant_estimate"]):
                tenant_estimates[part[len(CLASS_PARTS["tenant_estimate"]):]] = {
                    _s(t): int(v) for t, v in client.hgetall(key).items()}
            elif part.startswith(CLASS_PARTS["account_served"]):
                bucket = int(part[len(CLASS_PARTS["account_served"]):])
                if bucket >= now_ms // window_ms - 1:  # the model forgets what Redis expires
                    account_served[bucket] = _zset(client, key)
            elif part.startswith("served"):
                kind, bucket = part.split(":")
                if int(bucket) >= now_ms // window_ms - 1:  # the model forgets what Redis expires
                    if kind == "served":
                        served[int(bucket)] = _zset(client, key)
                    else:
                        served_total[int(bucket)] = int(client.get(key))
        vt = client.get(k.class_key(name, "vt"))
        classes[name] = {
            "queues": queues,
            "tags": _zset(client, k.class_key(name, "tags")),
            "accounts": accounts,
            "heads": _zset(client, k.class_key(name, "heads")),
            "backlog": _zset(client, k.class_key(name, "backlog")),
            "cost": {_s(t): _s(c) for t, c in client.hgetall(k.class_key(name, "cost")).items()},
            "key_tier": {_s(t): _s(c) for t, c in client.hgetall(k.class_key(name, CLASS_PARTS["key_tier"])).items()},
            "account_tiers": account_tiers,
            "vt": _num(vt) if vt is not None else 0,
            "inflight": _zset(client, k.class_key(name, "inflight")),
            "served": served,
            "served_total": served_total,
            "account_backlog": _zset(client, k.class_key(name, CLASS_PARTS["account_backlog"])),
            "account_served": account_served,
            "estimates": {_s(t): int(v) for t, v in client.hgetall(k.class_key(name, "est")).items()},
            "tenant_estimates": tenant_estimates,
        }
        if name not in config.class_names and not any(v for key, v in classes[name].items() if key != "vt"):
            del classes[name]
    rate_window_ms = int(config.tenants.rate_window * 1000)
    rates = {}
    for key in client.scan_iter(match=_glob(k.base + RATE_SPACE) + "*", count=1000):
        bucket = int(_s(key).rsplit(":", 1)[1])
        if bucket >= now_ms // rate_window_ms - 1:  # the model forgets what Redis expires
            rates[bucket] = {_s(t): int(n) for t, n in client.hgetall(key).items()}
    seq = client.get(k.seq)
    owned = {}
    for key in client.scan_iter(match=_glob(k.owned("")) + "*", count=1000):
        owned[_s(key)[len(k.owned("")):]] = {m: int(a) for m, a in _zset(client, key).items()}
    reaped = client.get(k.reaped)
    keyed = {}
    for key in client.scan_iter(match=_glob(k.base + DEDUP_SPACE) + "*", count=1000):
        record = _s(client.get(key))
        if int(record.split("\t", 1)[0]) > now_ms:  # a record past its window names no job any more
            keyed[_s(key)[len(k.base + DEDUP_SPACE):]] = record
    return {
        "stats": {f: v for f, v in ((_s(f), int(v)) for f, v in client.hgetall(k.stats).items()) if v != 0},
        "swrr": {_s(f): _num(v) for f, v in client.hgetall(k.swrr).items()},
        "paused": {_s(m) for m in client.smembers(k.paused)},
        "arrivals": {_s(f): _num(v) for f, v in client.hgetall(k.arrivals).items()},
        "rates": rates,
        "seq": int(seq) if seq else 0,
        "classes": classes,
        "leases": _zset(client, k.leases),
        "leased": {_s(f): _s(v) for f, v in client.hgetall(k.leased).items()},
        "delayed": _zset(client, k.delayed),
        "dead": [_s(e) for e in client.lrange(k.dead, 0, -1)],
        "workers": _zset(client, k.workers),
        "worker_slots": {_s(f): int(v) for f, v in client.hgetall(k.worker_slots).items()},
        "owned": owned,
        "returned": _zset(client, k.returned),
        "reaped": int(reaped) if reaped else None,
        "charged": {_s(f): int(v) for f, v in client.hgetall(k.charged).items()},
        "running": _zset(client, k.running),
        "pace": _zset(client, k.pace),
        "held": _zset(client, k.held),
        "capped": {_s(f): _s(v) for f, v in client.hgetall(k.capped).items()},
        "keyed": keyed,
    }
