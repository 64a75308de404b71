"""Annotation texts written once and rendered twice.

An alert's summary and description are Go templates that Prometheus expands when it fires; a
promtool unit test must spell out the exact text it expects. Writing both by hand would be two
copies that drift, so each text is written once with ``$field`` or ``$field:format`` markers and
rendered either as the Go template or, for given labels and values, as the text Prometheus would
produce. The generated promtool tests then prove the two renderings agree.

A field is ``value`` (the alert's value), the name of a :class:`Query` (a recorded series read
for the alert's labels, such as the class's SLO, or a label of one, such as the Redis holding a
shard), or otherwise a label of the alert. Formats are
Prometheus's ``humanize*`` functions (ported below) and ``urlquery``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote_plus

from exporter.metrics import GROUP, QUEUE

FIELD = re.compile(r"\$(\w+)(?::(\w+))?")
VALUE = "value"


def _go_g(value: float) -> str:
    """Go's ``%.4g`` (Python's, except how infinities and NaN are spelt)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def _small(value: float, unit: str) -> str:
    """Values below 1 with an SI prefix, as Prometheus's humanize functions write them."""
    prefix = ""
    for candidate in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix, value = candidate, value * 1000
    return f"{_go_g(value)}{prefix}{unit}"


def humanize(value: float) -> str:
    """Prometheus's ``humanize``: 4 significant digits with an SI prefix (1.5k, 250m)."""
    if value == 0 or not math.isfinite(value):
        return _go_g(value)
    if abs(value) < 1:
        return _small(value, "")
    prefix = ""
    for candidate in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
        if abs(value) < 1000:
            break
        prefix, value = candidate, value / 1000
    return f"{_go_g(value)}{prefix}"


def humanize_duration(value: float) -> str:
    """Prometheus's ``humanizeDuration``: ``1m 59s``, ``2d 3h 0m 0s``, ``30s``, ``250ms``."""
    if not math.isfinite(value):
        return _go_g(value)
    if value == 0:
        return "0s"
    if abs(value) < 1:
        return _small(value, "s")
    sign, value = ("-", -value) if value < 0 else ("", value)
    whole = int(value)
    days, hours, minutes, seconds = whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60
    if days:
        return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
    if hours:
        return f"{sign}{hours}h {minutes}m {seconds}s"
    if minutes:
        return f"{sign}{minutes}m {seconds}s"
    return f"{sign}{_go_g(value)}s"


def humanize_percentage(value: float) -> str:
    return f"{_go_g(value * 100)}%"


# format -> (Prometheus template function, its Python port)
FORMATS: Mapping[str, tuple[str, Callable[[float], str]]] = {
    "duration": ("humanizeDuration", humanize_duration),
    "percent": ("humanizePercentage", humanize_percentage),
    "number": ("humanize", humanize),
}
URL = "url"  # labels only: Go's urlquery, which is Python's quote_plus


def _numeric(fmt: str | None) -> tuple[str, Callable[[float], str]]:
    """A value's format (checked when the text was made: values always have one)."""
    return FORMATS[fmt or ""]


@dataclass(frozen=True)
class Query:
    """A recorded series read at expansion time for the alert's ``labels`` (a threshold, a count):
    its queue group's and class's by default, as two groups may share class names. With ``label``,
    the text is that label of the series (an info series' value is always 1), not its value."""

    record: str
    labels: tuple[str, ...] = (GROUP, QUEUE)
    label: str | None = None

    def go(self) -> str:
        matchers = ",".join(f"{label}=%q" for label in self.labels)
        args = " ".join(f"$labels.{label}" for label in self.labels)
        return f'printf "{self.record}{{{matchers}}}" {args} | query'


@dataclass(frozen=True)
class Text:
    """One annotation: ``template`` with ``$field[:format]`` markers, and the queries it reads."""

    template: str
    queries: Mapping[str, Query] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "{{" in self.template or "}}" in self.template:
            raise ValueError(f"literal template braces in {self.template!r}")
        for name, fmt in self.fields():
            numeric = name == VALUE or (name in self.queries and self.queries[name].label is None)
            if numeric and fmt not in FORMATS:
                raise ValueError(f"${name} needs one of the formats {', '.join(FORMATS)}")
            if not numeric and fmt not in (None, URL):
                raise ValueError(f"label ${name} takes no format but :{URL}")
            if name in self.queries and self.queries[name].label is not None and fmt is not None:
                raise ValueError(f"${name} shows a label of its query and takes no format")

    def fields(self) -> list[tuple[str, str | None]]:
        return [(m.group(1), m.group(2)) for m in FIELD.finditer(self.template)]

    def outline(self) -> str:
        """The text with ``{field}`` where values go, for people reading a runbook."""
        return FIELD.sub(lambda m: "{" + m.group(1) + "}", self.template)

    def go(self) -> str:
        """The Go template Prometheus expands."""
        return FIELD.sub(lambda m: self._go_field(m.group(1), m.group(2)), self.template)

    def _go_field(self, name: str, fmt: str | None) -> str:
        if name == VALUE:
            return f"{{{{ $value | {_numeric(fmt)[0]} }}}}"
        if name in self.queries:
            query = self.queries[name]
            shown = f'label "{query.label}"' if query.label else f"value | {_numeric(fmt)[0]}"
            return f"{{{{ with {query.go()} }}}}{{{{ . | first | {shown} }}}}{{{{ end }}}}"
        return f"{{{{ $labels.{name} | urlquery }}}}" if fmt == URL else f"{{{{ $labels.{name} }}}}"

    def render(self, labels: Mapping[str, str], value: float, queried: Mapping[str, float | str]) -> str:
        """The text Prometheus produces for an alert with these labels, value and query results."""

        def one(match: re.Match[str]) -> str:
            name, fmt = match.group(1), match.group(2)
            if name == VALUE:
                return _numeric(fmt)[1](value)
            if name in self.queries:
                found = queried[name]
                return found if isinstance(found, str) else _numeric(fmt)[1](found)
            text = labels.get(name, "")
            return quote_plus(text) if fmt == URL else text

        return FIELD.sub(one, self.template)
