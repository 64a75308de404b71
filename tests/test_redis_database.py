"""A Redis URL whose database (its /<db>) the server does not have: one line naming --redis-url
and how many databases the server has, from every command; a clear error from the library. One
whose database is no number Redis could have is refused before any connection."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import CliRunner

from fairctl.cli import app
from fairness_core import ConfigError, Queue, RedisDatabaseOutOfRange, RedisUnavailable, load_config, redis_client
from fairness_stack.servers import RedisServer

from .conftest import EXAMPLE_CONFIG
from .support import write_config

ONE_LINE = re.compile(r"fairctl: error: --redis-url: Redis at 127\.0\.0\.1:\d+ has (\d+) databases \(0 to \d+\), "
                      r"so no database 99: fix the /<db> at the end of the URL\n")


def on_database(url: str, db: int) -> str:
    return urlsplit(url)._replace(path=f"/{db}").geturl()


@pytest.mark.parametrize("command", [["status"], ["enqueue", "x", "--tenant", "a"], ["pause", "jobs:low"],
                                     ["dead", "list"], ["config", "show"], ["worker"]])
def test_a_database_out_of_range_is_one_line_naming_the_url(
        redis_server: Any, tmp_path: Path, command: list[str]) -> None:
    path, _ = write_config(tmp_path, redis_server.url)
    result = CliRunner().invoke(app, [*command, "--config", str(path),
                                      "--redis-url", on_database(redis_server.url, 99)])
    assert result.exit_code == 2, result.output
    assert ONE_LINE.fullmatch(result.stderr), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.live
def test_the_library_raises_a_clear_error_saying_how_many_databases(tmp_path: Path) -> None:
    with RedisServer(extra_args=("--databases", "4")) as server:
        _, config = write_config(tmp_path, on_database(server.url, 4))
        scheduler = Queue(config, redis_client(config.redis.url))
        with pytest.raises(RedisDatabaseOutOfRange) as raised:
            scheduler.snapshot()
        assert isinstance(raised.value, RedisUnavailable)  # what callers already handle for a bad URL
        assert (raised.value.db, raised.value.databases) == (4, 4)
        assert str(raised.value) == (f"Redis at 127.0.0.1:{server.port} has 4 databases (0 to 3), so no database 4: "
                                     "fix the /<db> at the end of the URL")
        with pytest.raises(RedisDatabaseOutOfRange):
            scheduler.submit("x", tenant="a")
        _, config = write_config(tmp_path, on_database(server.url, 3))  # the last one is fine
        assert Queue(config, redis_client(config.redis.url)).snapshot() is not None


@pytest.mark.live
def test_when_config_is_refused_it_just_says_out_of_range(tmp_path: Path) -> None:
    with RedisServer(extra_args=("--rename-command", "CONFIG", "")) as server:
        _, config = write_config(tmp_path, on_database(server.url, 16))
        with pytest.raises(RedisDatabaseOutOfRange) as raised:
            Queue(config, redis_client(config.redis.url)).snapshot()
        assert raised.value.databases is None
        assert str(raised.value) == (f"Redis at 127.0.0.1:{server.port} has no database 16 (out of range for the "
                                     "server): fix the /<db> at the end of the URL")


BAD_DATABASES = ["/abc", "/-1", "/1/2", "/2147483647", "/0?db=x", "/0?db=-1", "/0?db="]


@pytest.mark.parametrize("db", BAD_DATABASES)
def test_a_database_that_is_no_number_redis_could_have_is_refused_naming_redis_url(db: str) -> None:
    """redis-py would read ``/abc`` as database 0 and ``/1/2`` as 12: a queue on the wrong data."""
    result = CliRunner().invoke(app, ["status", "--interval", "0", "--config", str(EXAMPLE_CONFIG),
                                      "--redis-url", f"redis://app:s3cret@127.0.0.1:6379{db}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("fairctl: error: --redis-url: the URL's database "), result.stderr
    assert "s3cret" not in result.output


@pytest.mark.parametrize("db", BAD_DATABASES)
def test_a_config_whose_redis_url_has_no_usable_database_is_refused_naming_the_field(tmp_path: Path, db: str) -> None:
    path = tmp_path / "fairness.yaml"
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    data["redis"]["url"] = f"rediss://app:s3cret@127.0.0.1:6379{db}"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"redis\.url: the URL's database ") as raised:
        load_config(path)
    assert "s3cret" not in str(raised.value)
