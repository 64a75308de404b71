"""The files the alerts output set generates: the rules file, the promtool tests, the runbooks.

Rendering is pure (config in, ``{relative path: text}`` out) so that ``fairctl generate`` can
write it, ``fairctl generate --check`` can compare it with what is on disk, and ``fairctl check``
can test it in a scratch directory, all from the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from exporter import metrics as m
from fairness_core.config import Config
from fairness_core.generated import RenderedSet, header, yaml_text

from . import recording as rec
from . import rules as r
from . import unittests
from .layout import GENERATED_DIR, RULES_FILE, TESTS_DIR
from .promql import duration

GROUP = "fairctl"


def _commented(comment: str, rule: Mapping[str, Any], indent: str) -> str:
    body = "".join(indent + line + "\n" for line in yaml_text([dict(rule)]).splitlines())
    return f"{indent}# {comment}\n{body}"


def alert_rules(config: Config) -> list[tuple[str, dict[str, Any]]]:
    """(comment, rule) for every alerting rule, annotations as Prometheus templates."""
    out = []
    for alert in r.build_alerts(config):
        texts = {"summary": alert.summary, "description": alert.description, **r.links(config, alert.name)}
        for variant in alert.variants:
            rule = {
                "alert": alert.name, "expr": variant.expr, "for": duration(variant.for_seconds),
                # A per-class rule names its class, or promtool sees two rules with the same labels.
                "labels": {"severity": variant.severity, **({m.QUEUE: variant.queue} if variant.queue else {})},
                "annotations": {key: text.go() for key, text in texts.items()},
            }
            out.append((f"{alert.name}: {alert.fires_when}.", rule))
    return out


def rules_text(config: Config) -> str:
    """One group, recording rules first: a group evaluates its rules in order, so every alert
    sees the recordings of the same evaluation."""
    indent = " " * 6
    parts = [(f"# {header(config)}\n# Recording rules (shared expressions), then the alerts.\n"
              f"groups:\n  - name: {GROUP}\n    rules:\n")]
    parts += [_commented(x.why, {"record": x.name, "expr": x.expr}, indent) for x in rec.recording_rules(config)]
    parts += [_commented(comment, rule, indent) for comment, rule in alert_rules(config)]
    return "".join(parts)


def render(config: Config) -> dict[PurePosixPath, str]:
    """Every file of the set, by path relative to the set's directory."""
    files = {RULES_FILE: rules_text(config)}
    for test_file in unittests.test_files(config):
        files[TESTS_DIR / f"{test_file.name}.yml"] = yaml_text(unittests.document(config, test_file), header(config))
    from . import runbooks  # jinja2, from the generate extra: the rules alone (the simulator's) need none

    files.update(runbooks.render(config))
    return files


# The alerts output set of ``fairctl generate`` (see fairctl/generate_command.py).
ALERTS = RenderedSet("alerts", GENERATED_DIR, render)
