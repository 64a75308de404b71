"""What a job may carry: payloads JSON can carry faithfully (not nested past the limit, string keys
only) and tenant ids that show as what they are; the rest refused with InvalidJob naming what is
wrong, from the library and from ``fairctl enqueue``."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fairctl.cli import app
from fairness_core import InvalidJob, Queue
from fairness_core.jobs import MAX_PAYLOAD_DEPTH, check_tenant, encode_payload

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
    scheduler = Queue(make_config(), client)
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
    scheduler = Queue(make_config(), client)
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


@pytest.mark.parametrize(("tenant", "rule"), [
    (" ", "must not be only whitespace"),
    ("\u3000\t", "must not contain control characters"),
    ("\u3000", "must not be only whitespace"),
    (" acme", "must not start or end with whitespace: ' acme' would look the same as 'acme'"),
    ("acme\u00a0", "must not start or end with whitespace"),
    ("ac\u200bme", "invisible format characters (Unicode category Cf, such as zero-width spaces and "
                    "bidirectional overrides): U+200B ZERO WIDTH SPACE in 'ac\\u200bme'"),
    *((f"acme{chr(c)}x", f"U+{c:04X} ") for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]),
    ("\ufeffacme", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("a\u00adb", "U+00AD SOFT HYPHEN"),
])
def test_a_tenant_id_that_would_not_show_as_itself_is_refused_naming_the_rule(tenant: str, rule: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        check_tenant(tenant, CONFIG)
    assert caught.value.field == "tenant" and rule in str(caught.value), str(caught.value)


@pytest.mark.parametrize("tenant", ["acme", "acme corp", "租户", "é", "a-b", "{x}:/y"])
def test_ordinary_tenant_ids_are_accepted(tenant: str) -> None:
    assert check_tenant(tenant, CONFIG) == tenant


@given(st.text(max_size=12))
def test_an_accepted_tenant_id_is_visible_text_with_no_whitespace_at_its_ends(tenant: str) -> None:
    try:
        check_tenant(tenant, CONFIG)
    except InvalidJob:
        return
    assert tenant.strip() == tenant and tenant
    assert not any(unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in tenant)


def test_fairctl_enqueue_refuses_an_invisible_tenant_in_one_line(redis_server: Any, tmp_path: Path) -> None:
    path, _ = write_config(tmp_path, redis_server.url)
    result = CliRunner().invoke(app, ["enqueue", "newsletter", "--tenant", "acme\u202e", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("fairctl: error: --tenant: must not contain invisible format characters")
    assert result.stderr.count("\n") == 1


def test_a_job_enqueued_without_a_payload_is_leased_with_an_empty_object(client: redis.Redis) -> None:
    """The documented handler reads ``lease.payload.get(...)``: it works for a job with no payload
    (None, and JSON null from fairctl enqueue --payload null), which is leased with {}."""
    scheduler = Queue(make_config(), client)
    scheduler.enqueue("password_reset", "acme")
    scheduler.enqueue("password_reset", "acme", payload=None)
    scheduler.enqueue("password_reset", "acme", payload={"user": 42})
    scheduler.enqueue("password_reset", "acme", payload=[])
    leases = scheduler.pop(4)
    assert [lease.payload for lease in leases] == [{}, {}, {"user": 42}, []]
    assert [lease.payload.get("user") for lease in leases[:3]] == [None, None, 42]
    leases[0].payload["changed"] = 1
    assert leases[1].payload == {}, "each lease gets an object of its own"


def test_fairctl_runs_the_documented_handler_on_a_job_enqueued_without_a_payload(
        redis_server: Any, tmp_path: Path) -> None:
    path, config = write_config(tmp_path, redis_server.url)
    runner = CliRunner()
    for args in ([], ["--payload", "null"]):
        result = runner.invoke(app, ["enqueue", "password_reset", "--tenant", "acme", "--config", str(path), *args])
        assert result.exit_code == 0, result.output
    scheduler = Queue(config, redis.Redis.from_url(redis_server.url))
    leases = scheduler.pop(2)
    assert [lease.payload.get("user", "nobody") for lease in leases] == ["nobody", "nobody"]
