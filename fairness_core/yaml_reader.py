"""Reading a YAML document field by field, with errors that name the field's path.

The config file and the scenario files are read with the same reader, so a typo in either fails
the same way: ``storm.yaml: streams[1].arrivals.poisson.rate_per_s: must be > 0, got 0``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml


class ConfigError(ValueError):
    """An invalid configuration value; ``path`` names the field (``classes[2].weight``)."""

    def __init__(self, path: str, message: str, source: str | None = None) -> None:
        self.path = path
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


T = TypeVar("T")
D = TypeVar("D")


class Reader:
    """Walks a YAML mapping, recording the field path for every error."""

    def __init__(self, data: object, path: str, source: str | None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(path or "(top level)", f"expected a mapping, got {kind_of(data)}", source)
        self.data: dict[Any, Any] = data
        self.path = path
        self.source = source
        self.seen: set[str] = set()

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.sub(key), message, self.source)

    def get(self, key: str, default: D, convert: Callable[[object, str], T]) -> T | D:
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        return self._convert(key, convert)

    def require(self, key: str, convert: Callable[[object, str], T]) -> T:
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            # A typo (max_agee) is the likeliest reason a required key is missing: name it first.
            unknown = [str(k) for k in self.data if k not in self.seen]
            typo = difflib.get_close_matches(key, unknown, n=1)
            if typo:
                raise self.error(typo[0], f"unknown key; did you mean {key}? ({key} is required)")
            raise self.error(key, "is required")
        return self._convert(key, convert)

    def _convert(self, key: str, convert: Callable[[object, str], T]) -> T:
        try:
            return convert(self.data[key], self.sub(key))
        except ConfigError as exc:
            raise ConfigError(exc.path, exc.message, self.source) from None

    def done(self) -> None:
        unknown = [str(k) for k in self.data if k not in self.seen]
        if unknown:
            close = difflib.get_close_matches(unknown[0], [k for k in self.seen if k not in self.data], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(
                self.sub(unknown[0]),
                f"unknown key; {hint}expected one of: {', '.join(sorted(self.seen))}",
                self.source,
            )


def kind_of(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def nonempty_str(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"expected a non-empty string, got {value!r}")
    return value


def base_url(example: str) -> Callable[[object, str], str]:
    """An absolute http(s) URL that others build on (append a path, fill a link): a relative path,
    a query, a fragment, spaces, $ and braces are refused; ``example`` shows a good one."""
    def convert(value: object, path: str) -> str:
        text = nonempty_str(value, path).rstrip("/")
        scheme, sep, rest = text.partition("://")
        if scheme not in ("http", "https") or not sep or not rest or rest.startswith("/"):
            raise ConfigError(path, f"expected an absolute http:// or https:// URL such as {example}, got {value!r}")
        if any(ch.isspace() or ch in "${}?#" for ch in text):
            raise ConfigError(path, f"expected a base URL without spaces, ?, #, $ or braces, got {value!r}")
        return text
    return convert


def int_between(low: int, high: int) -> Callable[[object, str], int]:
    def convert(value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected a whole number, got {value!r}")
        if not low <= value <= high:
            raise ConfigError(path, f"must be between {low} and {high}, got {value}")
        return value

    return convert


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false, got {value!r}")
    return value


def choice(options: tuple[str, ...]) -> Callable[[object, str], str]:
    def convert(value: object, path: str) -> str:
        if value not in options:
            raise ConfigError(path, f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)

    return convert


def list_value(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(path, f"expected a list, got {kind_of(value)}")
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping: PyYAML would keep the last
    silently, so a second ``weight:`` line would quietly win over the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, what: str) -> object:
    """A YAML file's document; ConfigError (without a field path) when it cannot be read or parsed.
    Shared by config and scenario files so both fail the same way."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except OSError as exc:
        raise ConfigError("", f"cannot read {what} {path}: {exc.strerror}", str(path)) from None
    except yaml.YAMLError as exc:
        # PyYAML names the text it parsed ("<unicode string>"): name the file and line instead.
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).replace('"<unicode string>"', str(path))
        context, opened = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and opened is not None and opened is not mark:
            context += f" (line {opened.line + 1})"  # where the unclosed bracket or quote began
        detail = f"{context}, {problem}" if context else problem
        raise ConfigError("", f"{what} is not valid YAML: {detail}", where) from None
