"""The sections of ``fairness.yaml`` that other layers own, found without the core importing them.

The core parses what the scheduler needs: ``redis``, ``scheduler``, ``classes``, ``tenants``,
``classification``, ``leases`` and the keys of ``exporter`` that configure what the scheduler's
scripts keep and compute for every role (``Config.exporter``). The rest is parsed and checked by
the package that reads it: ``alerts`` by ``alerts.config``, the exporter process's own keys of
``exporter`` (``listen``, ``scrape_timeout``) by ``exporter.config``, and ``watch`` by
``exporter.sources.watching``, which learns the watched systems from the modules of
``exporter/sources/``. Each declares one :class:`Section` under the entry-point group
:data:`GROUP` in pyproject.toml, so adding a section or a watched system touches no core file.

Why entry points rather than an import list in the core: the core stays the bottom layer (it
names no upper package, tests/test_layers.py checks it), and it still parses a whole config file
for a producer that imported nothing but ``fairness_core``: the owning modules ship in the same
distribution, and they are kept light (no prometheus_client, jinja2, grafanalib or matplotlib at
import), so loading them costs a producer a few milliseconds once.

The parsed values live in ``Config.sections`` by section name; each owning package offers a typed
accessor (``alerts.config.alert_settings(config)``, ``exporter.config.serving(config)``,
``exporter.sources.watched(config)``). Errors read as the core's: a section reads its keys with the
same :class:`~fairness_core.yaml_reader.Reader`, and the core refuses the keys no part read, with
"did you mean".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

from .yaml_reader import ConfigError, Reader

# The entry-point group each owning package declares its sections under (name = Section.name).
GROUP = "fairctl.config_sections"


@dataclass(frozen=True)
class Section:
    """One part of the config file another layer owns.

    ``parse(r, core)`` reads the section's keys from ``r`` (None when the file leaves the section
    out or sets it to null: return ``default``, after any check against ``core`` the default must
    pass too) and checks them against ``core``, the :class:`~fairness_core.config.Config` of the
    core's sections (class names, ``redis.memory_headroom``...). It never calls ``r.done()``: the
    core does, once every part reading the same mapping has read its keys.

    ``dump(value)`` is the section in the stored form (:mod:`fairness_core.config_dump`, which
    :mod:`fairness_core.config_store` fingerprints): what ``parse`` reads back to ``value``. None or
    an empty mapping leaves the key out; a section added later dumps nothing while it holds its
    default, so the fingerprints of groups already running hold across the upgrade.
    """

    name: str  # unique; the key in Config.sections and the entry point's name
    default: Any
    parse: Callable[[Reader | None, Any], Any]
    dump: Callable[[Any], dict[str, Any] | None]
    # The top-level mapping read: the section's own, or a core section's it adds keys to (two parts
    # share one mapping, one set of known keys and one stored mapping).
    key: str = ""
    # Keys each process keeps for itself (an address to listen on): neither stored nor fingerprinted;
    # a process reading the applied config keeps its own.
    local: tuple[str, ...] = ()
    # Where a key goes in a shared mapping's stored form: after the named key of the other part (the
    # stored form keeps its order, which fingerprints depend on). Unlisted keys go at the end.
    after: Mapping[str, str] = field(default_factory=dict)
    # Whether the jobs it describes are classified by a system of their own, so a config that has
    # the section may leave ``classification`` out (``watch``).
    classification_optional: bool = False

    @property
    def mapping(self) -> str:
        return self.key or self.name


@functools.cache
def owned_sections() -> Mapping[str, Section]:
    """Every section declared under :data:`GROUP`, by name, in name order (the order they are
    parsed in and follow the core's sections in the stored form)."""
    found: dict[str, Section] = {}
    for point in entry_points(group=GROUP):
        section = point.load()
        if not isinstance(section, Section) or section.name != point.name:
            raise TypeError(f"entry point {point.name} = {point.value} of {GROUP} is no Section named {point.name!r}")
        found[point.name] = section
    return MappingProxyType(dict(sorted(found.items())))


def parse_sections(top: Reader, core: Any, shared: Mapping[str, Reader | None]) -> dict[str, Any]:
    """Every owned section of the document ``top`` reads, checked against ``core``. ``shared``: the
    readers of the core's mappings a section may add keys to (None where the file leaves it out);
    each mapping's unknown keys are refused once all of its parts have read theirs."""
    readers: dict[str, Reader | None] = dict(shared)
    values: dict[str, Any] = {}
    for section in owned_sections().values():
        key = section.mapping
        if key not in readers:
            top.seen.add(key)
            raw = top.data.get(key)
            readers[key] = None if raw is None else Reader(raw, top.sub(key), top.source)
        try:
            values[section.name] = section.parse(readers[key], core)
        except ConfigError as exc:
            if exc.source is not None:
                raise
            raise ConfigError(exc.path, exc.message, top.source) from None
    for reader in readers.values():
        if reader is not None:
            reader.done()
    return values


def mark_seen(top: Reader) -> None:
    """Count every owned section's key as known to ``top`` (before its unknown keys are refused)."""
    top.seen.update(section.mapping for section in owned_sections().values())


def dump_sections(sections: Mapping[str, Any], data: dict[str, Any]) -> None:
    """Add the owned sections (``sections``: by name; a missing one its default) to the stored form
    ``data``: a section's own mapping after the core's, a part's keys into the core's mapping."""
    for section in owned_sections().values():
        part = section.dump(sections.get(section.name, section.default))
        if not part:
            continue
        key = section.mapping
        data[key] = _merged(data[key], part, section.after) if key in data else dict(part)


def _merged(base: Mapping[str, Any], part: Mapping[str, Any], after: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in base.items():
        out[key] = value
        out.update({k: v for k, v in part.items() if after.get(k) == key})
    out.update({k: v for k, v in part.items() if after.get(k) not in base})
    return out


def local_keys() -> dict[str, tuple[str, ...]]:
    """The process-local keys of each mapping (besides the core's ``redis.url``)."""
    out: dict[str, tuple[str, ...]] = {}
    for section in owned_sections().values():
        if section.local:
            out[section.mapping] = out.get(section.mapping, ()) + section.local
    return out
