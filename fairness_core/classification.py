"""Decide a job's class at enqueue time, from the config's rules, with the reason recorded.

Callers never pass a queue name: one rule set decides, first match wins, and the reason travels
with the job so a group-by on it tells which rule moved the priority mix.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import Config


@dataclass(frozen=True)
class Classification:
    queue: str
    reason: str


def classify(config: Config, task: str, *, tier: str, user_waiting: bool = False) -> Classification:
    """The first matching rule's class and reason (the config guarantees a catch-all last rule)."""
    for rule in config.classification:
        if rule.matches(task, tier, user_waiting):
            return Classification(rule.queue, rule.reason)
    raise AssertionError("config validation guarantees a catch-all classification rule")
