"""Reading a Prometheus back over its HTTP API: what a drill learns of the live run."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from fairness_stack.webhook import epoch

Samples = list[tuple[float, float]]  # (epoch s, value), oldest first


def prometheus_api(base: str, path: str, params: Mapping[str, str]) -> Any:
    url = f"{base.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path}: {body.get('error', body)}")
    return body["data"]


def raw_samples(prometheus_url: str, selector: str, start: float, end: float) -> list[tuple[dict[str, str], Samples]]:
    """Every sample Prometheus stored for ``selector`` in (``start``, ``end``], at the times it
    stored them (a scrape's start, a rule evaluation's time): a range query would resample them
    onto its own steps and hide the gaps."""
    span_ms = max(1, int((end - start) * 1000))
    data = prometheus_api(prometheus_url, "query", {"query": f"{selector}[{span_ms}ms]", "time": f"{end:.3f}"})
    return [(dict(series["metric"]), [(float(t), float(v)) for t, v in series["values"]])
            for series in data["result"]]


def rules_evaluated_since(prometheus_url: str, since: float) -> bool:
    """Whether every rule group has been evaluated at least once after ``since`` (epoch s)."""
    groups = prometheus_api(prometheus_url, "rules", {})["groups"]
    return bool(groups) and all(epoch(g["lastEvaluation"]) > since for g in groups)  # never: year 1
