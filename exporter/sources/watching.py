"""The config's ``watch`` section: a job system the exporter reads instead of fairctl's own queues,
parsed and checked here and read with :func:`watched`.

The systems are not listed here: each module of ``exporter/sources/`` declares its own (its
reader's ``kind``, whether its queues have priorities a class may select, and where its jobs keep
their arguments), and the parser asks the registry (:func:`exporter.sources.systems`) for them, so
a new system is one module there. The registry imports the readers, and so prometheus_client, only
when a config has a ``watch`` section; this module imports nothing beyond the core.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairness_core.config import Config, config_name
from fairness_core.config_sections import Section
from fairness_core.redis_url import check_url
from fairness_core.yaml_reader import ConfigError, Reader, choice, int_between, kind_of, list_value, nonempty_str

# Where a job carries its tenant: a path into its arguments, e.g. kwargs.tenant_id, args.0, data.tenant.
_TENANT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)+$")


@dataclass(frozen=True)
class QueueRef:
    """One of a watched system's queues as a class takes it: all of it, or only some of its
    priorities (Celery's priority steps, BullMQ's priority levels)."""

    queue: str
    priorities: tuple[int, ...] = ()  # empty: every priority


@dataclass(frozen=True)
class WatchConfig:
    """A job system the exporter reads instead of fairctl's own queues: which of its queues make
    up each class of ``classes``, and where its jobs carry their tenant."""

    system: str  # a reader's kind (exporter.sources.systems())
    classes: Mapping[str, tuple[QueueRef, ...]]  # every configured class, in config order
    url: str | None = None  # the system's Redis; None: redis.url
    tenant: tuple[str, ...] | None = None  # path into a job's arguments, split at the dots
    sample: int = 100  # waiting jobs read per class for the tenant shares
    prefix: str | None = None  # the system's key prefix where it has one (BullMQ's "bull"); None: its default


def _queue_ref(value: object, path: str) -> QueueRef:
    """A queue name, or ``{queue: NAME, priorities: [..]}``."""
    if isinstance(value, str):
        return QueueRef(nonempty_str(value, path))
    r = Reader(value, path, None)

    def priorities(raw: object, ppath: str) -> tuple[int, ...]:
        items = list_value(raw, ppath)
        if not items:
            raise ConfigError(ppath, "expected at least one priority (leave it out for all of them)")
        return tuple(int_between(0, 2**21)(p, f"{ppath}[{i}]") for i, p in enumerate(items))

    out = QueueRef(r.require("queue", nonempty_str), r.get("priorities", (), priorities))
    r.done()
    return out


def _parse(r: Reader | None, core: Config) -> WatchConfig | None:
    if r is None:
        return None
    from . import systems  # the readers, imported only for a config that watches one

    known = systems()
    with_priorities = [kind for kind, reader in known.items() if reader.has_priorities]
    class_names = core.class_names
    system = r.require("system", choice(tuple(known)))
    roots = known[system].tenant_roots
    url = r.get("url", None, nonempty_str)
    if url is not None:
        try:
            check_url(url)
        except ValueError as exc:  # never quote the URL: it may hold a password
            raise r.error("url", str(exc)) from None

    def classes(raw: object, cpath: str) -> dict[str, tuple[QueueRef, ...]]:
        if not isinstance(raw, dict):
            raise ConfigError(cpath, f"expected a mapping of class name to its queues, got {kind_of(raw)}")
        for name in raw:
            if name not in class_names:
                raise ConfigError(f"{cpath}.{name}", f"unknown class {name!r}; classes are: {', '.join(class_names)}")
        missing = [name for name in class_names if name not in raw]
        if missing:
            raise ConfigError(cpath, f"every class needs its queues; missing: {', '.join(missing)}")
        out = {}
        for name in class_names:
            items = list_value(raw[name], f"{cpath}.{name}")
            if not items:
                raise ConfigError(f"{cpath}.{name}", "expected at least one queue")
            out[name] = tuple(_queue_ref(item, f"{cpath}.{name}[{i}]") for i, item in enumerate(items))
            for i, ref in enumerate(out[name]):
                if ref.priorities and system not in with_priorities:
                    raise ConfigError(f"{cpath}.{name}[{i}].priorities", f"{system}'s queues have no priorities to "
                                      f"select: a class takes whole queues (priorities are for "
                                      f"{' and '.join(with_priorities)})")
        return out

    def tenant(raw: object, tpath: str) -> tuple[str, ...]:
        text = nonempty_str(raw, tpath)
        if not _TENANT_PATH.match(text):
            raise ConfigError(tpath, f"expected a path into a job's arguments such as kwargs.tenant_id, args.0 or "
                                     f"data.tenant, got {text!r}")
        path = tuple(text.split("."))
        if path[0] not in roots:
            raise ConfigError(tpath, f"a {system} job keeps its arguments under {' or '.join(roots)}: "
                                     f"start the path there, got {text!r}")
        return path

    return WatchConfig(
        system=system, classes=r.require("classes", classes), url=url, tenant=r.get("tenant", None, tenant),
        sample=r.get("sample", WatchConfig.sample, int_between(1, 10_000)), prefix=r.get("prefix", None, config_name))


def _dump(w: WatchConfig | None) -> dict[str, Any] | None:
    if w is None:  # left out: the fingerprints of configs from before the section existed hold
        return None
    out: dict[str, Any] = {"system": w.system}
    if w.url is not None:
        out["url"] = w.url
    out["classes"] = {name: [q.queue if not q.priorities else {"queue": q.queue, "priorities": list(q.priorities)}
                             for q in queues] for name, queues in w.classes.items()}
    if w.tenant is not None:
        out["tenant"] = ".".join(w.tenant)
    out["sample"] = w.sample
    if w.prefix is not None:
        out["prefix"] = w.prefix
    return out


SECTION = Section(name="watch", default=None, parse=_parse, dump=_dump, classification_optional=True)


def watched(config: Config) -> WatchConfig | None:
    """The job system the config's exporter watches; None: fairctl's own queues."""
    settings = config.section(SECTION.name)
    assert settings is None or isinstance(settings, WatchConfig)
    return settings
