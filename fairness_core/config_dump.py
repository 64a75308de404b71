"""A :class:`Config` back as the YAML document that :func:`parse_config` reads.

Processes started for a derived config (a drill's time-compressed one, a scenario's patched one)
read it from a file like any other: this writes that file. ``parse_config(config_to_data(c))``
gives ``c`` back (durations at millisecond resolution, as they are written).
"""

from __future__ import annotations

from typing import Any

from .config import UNLIMITED, Config, RedisConfig, SchedulerConfig, TenantsConfig, TierLimits, format_duration
from .config_sections import dump_sections
from .generated import yaml_text


def _duration(seconds: float | None) -> str | None:
    return None if seconds is None else format_duration(seconds)


# The limits a tenant's, a tier's or the group's section may set, in the order they are written.
_LIMITS = ("max_queued", "max_rate", "max_in_flight", "dispatch_rate", "dispatch_burst")


def _limits(limits: TenantsConfig | TierLimits) -> dict[str, Any]:
    """The limits ``limits`` sets (the group's, one tier's or one tenant's); the group's dispatch
    burst only when it is not the default, so a group's fingerprint holds across the upgrade."""
    out = {name: "unlimited" if isinstance(limits, TierLimits) and getattr(limits, name) == UNLIMITED
           else getattr(limits, name) for name in _LIMITS if getattr(limits, name) is not None}
    if isinstance(limits, TenantsConfig) and limits.dispatch_burst == TenantsConfig.dispatch_burst:
        del out["dispatch_burst"]
    return out


def config_to_data(config: Config) -> dict[str, Any]:
    """Every field of ``config``, optional ones only when set, in the example file's order: the
    core's sections, then the owned ones as each dumps itself (fairness_core.config_sections)."""
    s, t, le, e = config.scheduler, config.tenants, config.leases, config.exporter
    classes = []
    for c in config.classes:
        item: dict[str, Any] = {"name": c.name, "weight": c.weight, "max_age": format_duration(c.max_age),
                                "reserved_slots": c.reserved_slots}
        optional = {"arrival_budget": c.arrival_budget, "promote_after": _duration(c.promote_after),
                    "starving_for": _duration(c.starving_for), "arrival_rate": c.arrival_rate,
                    "service_time": _duration(c.service_time)}
        item.update({k: v for k, v in optional.items() if v is not None})
        classes.append(item)
    rules = []
    for r in config.classification:
        rule: dict[str, Any] = {"class": r.queue, "reason": r.reason}
        if r.tasks is not None:
            rule["tasks"] = sorted(r.tasks)
        if r.user_waiting is not None:
            rule["user_waiting"] = r.user_waiting
        if r.tenant_tier is not None:
            rule["tenant_tier"] = r.tenant_tier
        rules.append(rule)
    exporter: dict[str, Any] = {
        "topk_tenants": e.topk_tenants, "window": format_duration(e.window),
        "noisy_min_inflight": e.noisy_min_inflight, "noisy_min_queued": e.noisy_min_queued,
        "fairness_sample": e.fairness_sample,
    }
    tenants: dict[str, Any] = {"tiers": dict(t.tiers), "default_tier": t.default_tier, "batch": t.batch,
                               "max_id_bytes": t.max_id_bytes}
    tenants.update(_limits(t))
    if t.rate_window != TenantsConfig.rate_window:
        tenants["rate_window"] = format_duration(t.rate_window)
    if t.limits:
        tenants["limits"] = {tier: _limits(lim) for tier, lim in t.limits.items()}
    if t.account_separator is not None:  # only when set: a group's fingerprint holds across the upgrade
        tenants["account_separator"] = t.account_separator
    for name in ("account_max_queued", "account_max_rate", "account_max_in_flight", "account_dispatch_rate"):
        if getattr(t, name) is not None:
            tenants[name] = getattr(t, name)
    if t.overrides:
        tenants["overrides"] = {tenant: _limits(lim) for tenant, lim in t.overrides.items()}
    scheduler: dict[str, Any] = {
        "policy": s.policy, "max_payload_bytes": s.max_payload_bytes, "budget_window": format_duration(s.budget_window),
        "budget_min_arrivals": s.budget_min_arrivals, "budget_action": s.budget_action}
    if s.charge != SchedulerConfig.charge:  # only when set: a group's fingerprint holds across the upgrade
        scheduler["charge"] = s.charge
    if s.dedup_window != SchedulerConfig.dedup_window:  # only when set, as for charge
        scheduler["dedup_window"] = format_duration(s.dedup_window)
    data: dict[str, Any] = {
        "redis": {"url": config.redis.url, "prefix": config.redis.prefix,
                  "memory_headroom": config.redis.memory_headroom},
        "scheduler": scheduler,
        "classes": classes,
        "tenants": tenants,
        "classification": rules,
        "leases": {"visibility_timeout": format_duration(le.visibility_timeout), "max_attempts": le.max_attempts,
                   "retry_backoff": format_duration(le.retry_backoff),
                   "retry_backoff_max": format_duration(le.retry_backoff_max)},
        "exporter": exporter,
    }
    if config.redis.shards != RedisConfig.shards:  # only when set, as for charge
        data["redis"].update(shards=config.redis.shards, shard_hand=config.redis.shard_hand)
    dump_sections(config.sections, data)
    return data


def config_to_yaml(config: Config, header: str = "") -> str:
    """The config file's text, with ``header`` as a leading comment."""
    return yaml_text(config_to_data(config), header)
