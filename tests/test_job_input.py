"""What a job may carry: payloads JSON can carry faithfully (not nested past the limit), refused
with InvalidJob naming what is wrong, from the library and from ``fairctl enqueue``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from fairctl.cli import app
from fairness_core import InvalidJob, Scheduler
from fairness_core.jobs import MAX_PAYLOAD_DEPTH, encode_payload

from .conftest import make_config
from .support import write_config

CONFIG = make_config()


def nested(depth: int) -> Any:
    """Lists and objects alternating, ``depth`` levels deep."""
    payload: Any = 1
    for level in range(depth):
        payload = [payload] if level % 2 else {"x": payload}
    return payload


def test_a_payload_nested_up_to_the_limit_is_accepted_and_one_level_more_is_refused() -> None:
    assert json.loads(encode_payload(nested(MAX_PAYLOAD_DEPTH), CONFIG)) == nested(MAX_PAYLOAD_DEPTH)
    for depth in (MAX_PAYLOAD_DEPTH + 1, 5_000, 100_000):
        with pytest.raises(InvalidJob) as caught:
            encode_payload(nested(depth), CONFIG)
        assert caught.value.field == "payload"
        assert str(caught.value) == (f"payload: is nested more than {MAX_PAYLOAD_DEPTH} levels deep "
                                     f"(lists and objects within each other); at most {MAX_PAYLOAD_DEPTH}")


def test_a_payload_that_contains_itself_is_refused_as_too_deep() -> None:
    payload: list[Any] = []
    payload.append(payload)
    with pytest.raises(InvalidJob, match="nested more than"):
        encode_payload(payload, CONFIG)


def test_the_library_refuses_a_deep_payload_before_touching_redis(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(), client)
    before = set(client.scan_iter(match=scheduler.keys.base + "*"))
    for call in (lambda: scheduler.enqueue("newsletter", "acme", payload=nested(5_000)),
                 lambda: scheduler.submit_many("newsletter", "acme", [{}, nested(5_000)])):
        with pytest.raises(InvalidJob) as caught:
            call()
        assert caught.value.field == "payload" and "nested more than" in str(caught.value)
    assert set(client.scan_iter(match=scheduler.keys.base + "*")) == before


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 5_000])
def test_fairctl_enqueue_refuses_a_deep_payload_in_one_line(redis_server: Any, tmp_path: Path, depth: int) -> None:
    path, _ = write_config(tmp_path, redis_server.url)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * depth + "]" * depth)
    result = CliRunner().invoke(app, ["enqueue", "newsletter", "--tenant", "acme", "--config", str(path),
                                      "--payload", f"@{deep}"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"fairctl: error: --payload: is nested more than {MAX_PAYLOAD_DEPTH} levels deep "
                             f"(lists and objects within each other); at most {MAX_PAYLOAD_DEPTH}\n")


@pytest.mark.parametrize(("payload", "message"), [
    ({1: "a", "1": "b"}, "payload: keys must be strings, got int 1"),
    ([{"x": {"ok": 1, 1: "a"}}], "payload[0].x: keys must be strings, got int 1"),
    ({"a b": [0, {True: 1}]}, 'payload["a b"][1]: keys must be strings, got bool True'),
    ({"x": [{None: 1}]}, "payload.x[0]: keys must be strings, got NoneType None"),
    ({"t": {(1, 2): 3}}, "payload.t: keys must be strings, got tuple (1, 2)"),
])
def test_a_key_that_is_not_a_string_is_refused_naming_where_it_is(payload: Any, message: str) -> None:
    """JSON would turn the key into text: {1: 'a', '1': 'b'} would come back as {'1': 'b'}."""
    with pytest.raises(InvalidJob) as caught:
        encode_payload(payload, CONFIG)
    assert caught.value.field == "payload" and str(caught.value) == message


def test_string_keys_and_non_finite_numbers() -> None:
    """String keys of any text are kept; NaN and infinities, which JSON has no way to write, are
    refused (as before), not turned into text no other JSON reader takes."""
    payload = {"": 1, "1": [{"a b": None, "é": {"x": 2.5}}]}
    assert json.loads(encode_payload(payload, CONFIG)) == payload
    for number in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(InvalidJob, match="^payload: is not JSON-serialisable"):
            encode_payload({"x": [number]}, CONFIG)


def test_the_library_refuses_a_key_that_is_not_a_string_before_touching_redis(client: redis.Redis) -> None:
    scheduler = Scheduler(make_config(), client)
    with pytest.raises(InvalidJob, match=r"^payload: keys must be strings, got int 1$"):
        scheduler.submit_many("newsletter", "acme", [{"1": "b"}, {1: "a", "1": "b"}])
    assert not set(client.scan_iter(match=scheduler.keys.base + "*"))


@pytest.mark.parametrize("source", ["argument", "stdin"])
def test_fairctl_enqueue_refuses_a_payload_with_a_key_twice(redis_server: Any, tmp_path: Path, source: str) -> None:
    """json.loads would keep the last value of a repeated key and drop the others."""
    path, _ = write_config(tmp_path, redis_server.url)
    text = '{"a": {"1": "a", "1": "b"}}'
    base = ["enqueue", "newsletter", "--tenant", "acme", "--config", str(path), "--payload"]
    result = (CliRunner().invoke(app, [*base, text]) if source == "argument"
              else CliRunner().invoke(app, [*base, "-"], input=text))
    assert result.exit_code == 2, result.output
    where = " (stdin)" if source == "stdin" else ""
    assert result.stderr == (f"fairctl: error: --payload: an object has the key '1' more than once{where}: "
                             "only its last value would be kept\n")
