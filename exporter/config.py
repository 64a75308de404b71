"""The exporter process's own keys of the config's ``exporter`` section, read with :func:`serving`.

The ``exporter`` mapping has two owners. Its keys ``topk_tenants``, ``window``,
``noisy_min_inflight``, ``noisy_min_queued`` and ``fairness_sample`` are the core's
(``Config.exporter``): they size what the scheduler's script keeps and computes in every role, so
they are compiled into it and fingerprinted. ``listen`` and ``scrape_timeout`` are only this
process's: where it serves and how long one scrape may take. They are parsed here, from the same
mapping (one set of known keys: a typo in either part is refused with "did you mean"), and
``listen`` is local to each exporter: it is neither stored with the applied config nor
fingerprinted.

Nothing here imports prometheus_client: a producer loading a config parses this section too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairness_core.config import Config, format_duration, parse_duration
from fairness_core.config_sections import Section
from fairness_core.yaml_reader import ConfigError, Reader, nonempty_str


@dataclass(frozen=True)
class ServingConfig:
    """Where the exporter serves and its budget per scrape. ``listen`` None means the exporter's
    documented default port on all interfaces."""

    listen: str | None = None
    scrape_timeout: float = 2.0


def _listen(value: object, path: str) -> str:
    text = nonempty_str(value, path)
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(path, f"expected HOST:PORT such as 0.0.0.0:9000 or [::1]:9000, got {text!r}")
    return text


def _parse(r: Reader | None, core: Config) -> ServingConfig:
    if r is None:
        return ServingConfig()
    return ServingConfig(listen=r.get("listen", None, _listen),
                         scrape_timeout=r.get("scrape_timeout", ServingConfig.scrape_timeout, parse_duration))


def _dump(s: ServingConfig) -> dict[str, Any]:
    return {"scrape_timeout": format_duration(s.scrape_timeout), **({"listen": s.listen} if s.listen is not None else {})}


# scrape_timeout is stored after the core's window, as it was before the mapping had two owners:
# the stored form, and so every group's fingerprint, holds.
SECTION = Section(name="exporter", key="exporter", default=ServingConfig(), parse=_parse, dump=_dump,
                  local=("listen",), after={"scrape_timeout": "window"})


def serving(config: Config) -> ServingConfig:
    """The exporter process's keys of the config (their defaults where the file leaves them out)."""
    settings = config.section(SECTION.name)
    assert isinstance(settings, ServingConfig)
    return settings
