"""Shared fixtures: a real redis-server per test module, a fresh queue group per test."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from fairctl.redis_server import RedisServer
from fairness_core import Config, Scheduler, load_config, parse_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "fairness.yaml"
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_server.url)
    yield conn
    conn.close()


@pytest.fixture
def example_config() -> Config:
    return load_config(EXAMPLE_CONFIG)


def make_config(**overrides: Any) -> Config:
    """The example config as a dict, with top-level sections replaced, and a fresh key prefix
    so tests sharing a redis-server never see each other's keys."""
    import yaml

    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"]["prefix"] = f"t{next(_prefixes)}"
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_config(data)


@pytest.fixture
def scheduler(client: redis.Redis) -> Scheduler:
    return Scheduler(make_config(), client)
