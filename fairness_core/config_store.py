"""A queue group's applied config: the one policy every process sharing the group runs.

The config lives in Redis beside the group's state (the hash ``{prefix}:config``, see
:mod:`fairness_core.keys`): the YAML text of its shared part, the moves and names that go with it, a
fingerprint of all three and a version counting applies. Every scheduler script compares the
fingerprint it was compiled with against the stored one in the same atomic call, so no process
acts on any policy but the applied one: a process whose copy is stale is refused, reloads the
applied config and retries (:class:`fairness_core.Queue` does this by itself).

Process-local settings are never stored and never compared: ``redis.url`` (it may hold a
password) and the keys a section another layer owns calls local (``exporter.listen``; see
:mod:`fairness_core.config_sections`); each process keeps its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from .config import OVER_BUDGET_REASON, Config, ConfigError, SchedulerConfig, format_duration, parse_config
from .config_dump import config_to_data
from .config_sections import local_keys
from .generated import yaml_text
from .jobs import FairnessError

# Fields of the config hash.
TEXT, MOVES, NAMES, FINGERPRINT, VERSION, APPLIED_MS = "yaml", "moves", "names", "fingerprint", "version", "applied_ms"
CREATED_MS = "created_ms"  # when the group's state was created: a reset that removes it changes it


class ConfigRefused(FairnessError):
    """An apply that would leave jobs where no configured class serves them."""

    def __init__(self, classes: Mapping[str, int], tiers: tuple[str, ...]) -> None:
        self.classes, self.tiers = dict(classes), tiers
        parts = [f"class {name!r} still holds {n} job(s) (queued, leased or waiting to retry) and the new config "
                 f"does not name it; say where they go with --move {name}=CLASS" for name, n in sorted(classes.items())]
        parts += [f"tier {tier!r} is still some queued tenant's tier and the new config does not name it; say "
                  f"which tier those tenants take with --move-tier {tier}=TIER" for tier in tiers]
        super().__init__("config not applied: " + "; ".join(parts))


class PausedMoveRefused(ConfigRefused):
    """A move out of a paused class into one that is not paused: its jobs would run at once,
    though someone paused them. The pause does not carry over (it would hold the target's own
    jobs too); the operator decides."""

    def __init__(self, moves: Mapping[str, str]) -> None:
        self.classes, self.tiers = {}, ()
        FairnessError.__init__(self, "config not applied: " + "; ".join(
            f"--move {old}={new}: {old} is paused and {new} is not, so its jobs would run at once; resume {old} "
            f"first to let them run, or pause {new} too to keep them waiting" for old, new in sorted(moves.items())))


class AppliedConfigUnreadable(FairnessError):
    """The group's applied config is one this release cannot read (another release applied it)."""


class ConfigConflict(FairnessError):
    """The applied config changed between reading it and applying a new one."""


@dataclass(frozen=True)
class Moves:
    """Where the jobs of removed classes go, and which tier tenants of a removed tier are charged
    as. They stay with the applied config (and redirect a removed class's leased jobs and retries
    when they come back) until a later apply names the class or tier again."""

    classes: Mapping[str, str] = field(default_factory=dict)
    tiers: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """Canonical text (sorted keys): part of the fingerprint."""
        return json.dumps({"classes": dict(sorted(self.classes.items())), "tiers": dict(sorted(self.tiers.items()))},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> Moves:
        data = json.loads(text) if text else {}
        return cls(classes=dict(data.get("classes", {})), tiers=dict(data.get("tiers", {})))

    def check_paused(self, paused: set[str]) -> None:
        """PausedMoveRefused naming each move from a paused class into one that is not."""
        released = {old: new for old, new in self.classes.items() if old in paused and new not in paused}
        if released:
            raise PausedMoveRefused(released)

    def check(self, config: Config) -> None:
        """ValueError naming the move when a source is configured or a target is not."""
        for kind, moves, names in (("move", self.classes, config.class_names),
                                   ("move-tier", self.tiers, tuple(config.tenants.tiers))):
            for old, new in moves.items():
                if old in names:
                    raise ValueError(f"--{kind} {old}={new}: {old!r} is still in the config; only a removed "
                                     "one can be moved")
                if new not in names:
                    raise ValueError(f"--{kind} {old}={new}: {new!r} is not in the config; configured: "
                                     f"{', '.join(names)}")

    def carried(self, config: Config) -> Moves:
        """The moves still meaningful under ``config``: a later apply keeps the earlier moves whose
        source is still removed and whose target is still configured."""
        return Moves(
            classes={o: n for o, n in self.classes.items() if o not in config.class_names and n in config.class_names},
            tiers={o: n for o, n in self.tiers.items() if o not in config.tenants.tiers and n in config.tenants.tiers})

    def merged(self, newer: Moves) -> Moves:
        return Moves(classes={**self.classes, **newer.classes}, tiers={**self.tiers, **newer.tiers})


NO_MOVES = Moves()


@dataclass(frozen=True)
class Names:
    """The names queued jobs carry as short codes: tiers, the tasks classification rules name, and
    reasons. A job stores a name listed here as :data:`fairness_core.jobs.CODE_MARK` and its
    1-based place in the list (two or three bytes for a reason of thirty), any other name (a task
    no rule names) as it is. Kept with the applied config and only ever extended, so a job queued
    under one config reads back the same under every later one."""

    names: tuple[str, ...] = ()

    def text(self) -> str:
        return json.dumps(list(self.names), ensure_ascii=False, separators=(",", ":")) if self.names else ""

    @classmethod
    def parse(cls, text: str) -> Names:
        return cls(tuple(json.loads(text))) if text else cls()

    def covering(self, config: Config) -> Names:
        """These names, then those of ``config`` not among them yet, in an order its stored text
        keeps (tiers sorted: a mapping's order does not survive the text)."""
        wanted = [*sorted(config.tenants.tiers),
                  *(task for rule in config.classification for task in sorted(rule.tasks or ())),
                  *(rule.reason for rule in config.classification), OVER_BUDGET_REASON]
        names = list(self.names)
        for name in wanted:
            if name not in names:
                names.append(name)
        return Names(tuple(names))


NO_NAMES = Names()


def shared_data(config: Config) -> dict[str, Any]:
    """The config as a document, less what is local to each process."""
    data = config_to_data(config)
    data["redis"].pop("url")
    for key, local in local_keys().items():
        for name in local:
            data.get(key, {}).pop(name, None)
    return data


def shared_text(config: Config) -> str:
    return yaml_text(shared_data(config))


def fingerprint(config: Config, moves: Moves = NO_MOVES, names: Names = NO_NAMES) -> str:
    """What every script checks: equal fingerprints, equal policy (and equal codes for names). A
    group applied before names had codes has none, and keeps the fingerprint it was applied with.
    The group's name (``redis.prefix``) is not part of it: the shards of a sharded queue, and any
    groups running one config, have one fingerprint, so one compiled script (one function library
    on their Redis) and one value for the exporter's config series. A group applied by a release
    that counted the name keeps the fingerprint stored with it until its next apply."""
    data = shared_data(config)
    data["redis"].pop("prefix", None)
    coded = "\n" + names.text() if names.names else ""
    digest = hashlib.sha256((yaml_text(data) + "\n" + moves.text() + coded).encode("utf-8")).hexdigest()
    return digest[:16]


@dataclass(frozen=True)
class Applied:
    """The applied config as a process runs it: the stored shared part with its own local part."""

    config: Config
    moves: Moves
    names: Names
    fingerprint: str
    version: int
    applied_at: float  # seconds since the epoch


@dataclass(frozen=True)
class GroupState:
    """What a process saw of its group's stored state: when it was created (None: by a release
    that did not say), and the config version and fingerprint applied to it."""

    created: str | None
    version: int
    fingerprint: str

    @staticmethod
    def of(fields: Mapping[str, str | None]) -> GroupState | None:
        """The state the stored config hash's fields describe; None when there is none."""
        found = fields.get(FINGERPRINT)
        if not found:
            return None
        return GroupState(fields.get(CREATED_MS) or None, int(fields.get(VERSION) or 0), found)


# libyaml's safe loader where PyYAML was built with it (every wheel is): 0.3 ms against 4.1 ms for
# the stored config, which every process reads at start, at each apply and on each shard.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def from_stored(fields: Mapping[str, str], local: Config) -> Applied:
    """The stored config hash read back; AppliedConfigUnreadable if this release cannot read it
    (one written by a newer release, with fields this one does not know): a process never runs a
    policy it cannot read in full."""
    version = int(fields.get(VERSION, "0"))
    data = yaml.load(fields[TEXT], Loader=SAFE_LOADER)
    # The group's name is the process's own (a shard's is P.3, which no config file may name).
    data["redis"] = {**data.get("redis", {}), "url": local.redis.url}
    data["redis"].pop("prefix", None)
    own = config_to_data(local)
    for key, names in local_keys().items():
        for name in names:
            if name in own.get(key, {}):
                data.setdefault(key, {})[name] = own[key][name]
    try:
        config = parse_config(data, source=f"applied config v{version} of {local.redis.prefix}")
        config = replace(config, redis=replace(config.redis, prefix=local.redis.prefix))
    except ConfigError as exc:
        raise AppliedConfigUnreadable(
            f"{exc}: this fairctl cannot read the config its queue group runs, so it will not run another; "
            "another release applied it: upgrade this process, or apply a config it reads with fairctl config "
            "apply") from None
    return Applied(config=config, moves=Moves.parse(fields.get(MOVES, "")),
                   names=Names.parse(fields.get(NAMES, "")), fingerprint=fields[FINGERPRINT],
                   version=version, applied_at=int(fields.get(APPLIED_MS, "0")) / 1000.0)


def differences(old: Config, new: Config) -> list[str]:
    """What changes from ``old`` to ``new``, one line per changed field (``path: old -> new``),
    classes matched by name so a re-weight reads as one line, not a reordered list."""
    lines: list[str] = []
    _diff(_keyed(shared_data(old)), _keyed(shared_data(new)), "", lines)
    return lines


def _keyed(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    # Written only when set (so fingerprints of configs from before it existed hold): a change
    # from or to the default reads as one.
    out["scheduler"] = {**data["scheduler"], "charge": data["scheduler"].get("charge", SchedulerConfig.charge),
                        "dedup_window": data["scheduler"].get("dedup_window",
                                                              format_duration(SchedulerConfig.dedup_window))}
    out["classes"] = {c["name"]: {k: v for k, v in c.items() if k != "name"} for c in data["classes"]}
    out["classification"] = {str(i): rule for i, rule in enumerate(data["classification"])}
    out["class order"] = [c["name"] for c in data["classes"]]
    return out


def _diff(old: Any, new: Any, path: str, lines: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                lines.append(f"{sub}: removed (was {_short(old[key])})")
            elif key not in old:
                lines.append(f"{sub}: added ({_short(new[key])})")
            else:
                _diff(old[key], new[key], sub, lines)
    elif old != new:
        lines.append(f"{path}: {_short(old)} -> {_short(new)}")


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)
