"""Bad input, property-tested: configs, tenant ids, task names, payloads and CLI arguments each get
a clear error naming what is wrong, and no accepted tenant id can leave its queue group's key
namespace or hash slot, or break the Prometheus exposition. Runs on a Redis Cluster too
(tests/test_cluster.py), where a group's slot is a real placement."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from redis.crc import key_slot

from exporter.collector import make_registry
from fairctl.cli import app
from fairness_core import ConfigError, InvalidJob, Queue, parse_config
from fairness_core.config import NAME_PATTERN, parse_duration
from fairness_core.jobs import check_task, check_tenant, encode_payload
from fairness_core.keys import Keys

from .conftest import make_config
from .exporter_support import parse, promtool_check_metrics
from .support import write_config
from .test_config import EXAMPLE

FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
CONFIG = make_config()
NASTY = st.sampled_from(["{", "}", ":", "/", "\n", "\r", "\t", "\x00", "\u2028", " ", "*", "?", "[", "]", "\\", '"',
                         "__other__", "é", "租", "🙂", "\ud800"])
# Tenant ids: any text, weighted towards what breaks keys, slots, labels and records.
tenant_ids = st.one_of(st.text(max_size=40), st.lists(NASTY | st.text(max_size=3), max_size=12).map("".join),
                       st.text(min_size=250, max_size=300))

# Scalar fields by path, and values of the wrong type for each.
SCALARS = ["classes.0.weight", "classes.1.max_age", "classes.0.arrival_budget", "classes.0.reserved_slots",
           "tenants.batch", "tenants.default_tier", "tenants.max_id_bytes", "leases.visibility_timeout",
           "leases.max_attempts", "scheduler.policy", "scheduler.max_payload_bytes", "redis.url", "redis.prefix",
           "exporter.topk_tenants", "exporter.window", "exporter.scrape_timeout"]
# (null is left out: for an optional field it means "not set", as YAML reads it)
wrong_types = st.one_of(st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                        st.booleans())


def dotted_to_path(dotted: str) -> str:
    """``classes.0.weight`` -> ``classes[0].weight``, as ConfigError names it."""
    out = ""
    for part in dotted.split("."):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def changed(dotted: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    *parents, last = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return data


@given(dotted=st.sampled_from(SCALARS), value=wrong_types)
def test_a_value_of_the_wrong_type_is_named_by_its_path(dotted: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(changed(dotted, value), source="fairness.yaml")
    assert err.value.path == dotted_to_path(dotted), str(err.value)


@given(section=st.sampled_from(["redis", "scheduler", "tenants", "leases", "exporter", "alerts", "classes.1"]),
       key=st.from_regex(r"\A[a-z_]{1,20}\Z"))
def test_an_unknown_key_is_named_by_its_path(section: str, key: str) -> None:
    data = copy.deepcopy(EXAMPLE)
    node: Any = data
    for part in section.split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    if key in node:
        return  # a known key: not what this test is about
    node[key] = 1
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert err.value.path == f"{dotted_to_path(section)}.{key}" and "unknown key" in err.value.message


@given(dotted=st.sampled_from(["classes.0.weight", "classes.2.weight", "tenants.tiers.pro", "tenants.tiers.free"]),
       weight=st.integers(max_value=0))
def test_zero_and_negative_weights_are_refused_by_path(dotted: str, weight: int) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(changed(dotted, weight))
    assert err.value.path == dotted_to_path(dotted)


@given(text=st.text(max_size=12))
def test_a_duration_either_parses_to_a_positive_time_or_names_its_field(text: str) -> None:
    try:
        seconds = parse_duration(text, "classes[1].max_age")
    except ConfigError as err:
        assert err.path == "classes[1].max_age" and ("duration" in err.message or "longer than zero" in err.message)
    else:
        assert seconds > 0


@settings(max_examples=500)
@given(tenant=tenant_ids, queue=st.sampled_from(CONFIG.class_names))
def test_an_accepted_tenant_id_stays_in_its_namespace_and_slot(tenant: str, queue: str) -> None:
    try:
        accepted = check_tenant(tenant, CONFIG)
    except InvalidJob as err:
        assert err.field == "tenant" and str(err).startswith("tenant: ")
        return
    keys = Keys(CONFIG.redis.prefix)
    key = keys.tenant_queue(queue, accepted)
    assert key.startswith(keys.base) and key[len(keys.base):].startswith(f"q/{queue}/t/")
    assert key_slot(key.encode()) == key_slot(keys.base.encode()), "the {prefix} tag is the key's first {...}"
    assert not any(c in accepted for c in "\n\r\t\x00\u2028"), "nothing that breaks a record, log line or label"


@given(task=st.one_of(st.text(max_size=70), st.from_regex(r"\A[A-Za-z0-9_.:-]{1,64}\Z")))
def test_a_task_name_is_accepted_exactly_when_it_is_a_name(task: str) -> None:
    try:
        check_task(task)
    except InvalidJob as err:
        assert err.field == "task" and not NAME_PATTERN.match(task)
    else:
        assert NAME_PATTERN.match(task)


@given(size=st.integers(min_value=0, max_value=200))
def test_a_payload_over_the_limit_names_its_size_and_the_limit(size: int) -> None:
    config = make_config(scheduler={"max_payload_bytes": 100})
    payload = "x" * size  # JSON: size + 2 bytes of quotes
    try:
        encode_payload(payload, config)
    except InvalidJob as err:
        assert size + 2 > 100 and err.field == "payload"
        assert f"is {size + 2} bytes as JSON; at most 100 (scheduler.max_payload_bytes)" in str(err)
    else:
        assert size + 2 <= 100


@settings(max_examples=15, deadline=None, suppress_health_check=FIXTURES)
@given(tenants=st.lists(tenant_ids, min_size=1, max_size=12, unique=True))
def test_nasty_tenants_round_trip_through_redis_and_the_exposition(client: redis.Redis, tenants: list[str]) -> None:
    """Whatever is accepted is stored under the group's tag only, comes back intact from a pop, and
    is a valid, faithfully parsed Prometheus label (promtool check metrics)."""
    scheduler = Queue(make_config(exporter={"topk_tenants": 20}), client)
    accepted = []
    for tenant in tenants:
        try:
            scheduler.enqueue("password_reset", tenant)
        except InvalidJob:
            continue
        accepted.append(tenant)
    leases = scheduler.pop(len(accepted)) if accepted else []
    assert sorted(lease.tenant for lease in leases) == sorted(accepted)
    for lease in leases:
        scheduler.ack(lease)
    base = scheduler.keys.base.encode()
    ours = [key for key in client.scan_iter(match=b"{" + scheduler.config.redis.prefix.encode() + b"}*", count=1000)]
    assert {key_slot(key) for key in ours} == ({key_slot(base)} if accepted else set()), "a refused id writes nothing"
    text = generate_latest(make_registry(scheduler.config, scheduler.groups()[0])).decode()
    checked = promtool_check_metrics(text)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
    labelled = {dict(labels).get("tenant") for (name, labels) in parse(text) if name == "queue_tenant_share_ratio"}
    assert set(accepted) <= labelled


cli_text = st.one_of(st.text(max_size=20), NASTY)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(task=cli_text, tenant=cli_text, tier=st.one_of(st.none(), cli_text), payload=st.one_of(st.none(), cli_text))
@example(task="-0", tenant="", tier=None, payload=None)  # a task that reads as an option: the error names fairctl enqueue
def test_fairctl_enqueue_either_queues_or_exits_2_naming_the_argument(
        redis_server: Any, tmp_path_factory: pytest.TempPathFactory, task: str, tenant: str, tier: str | None,
        payload: str | None) -> None:
    path, _ = write_config(tmp_path_factory.mktemp("cli"), redis_server.url)
    args = ["enqueue", task, "--tenant", tenant, "--config", str(path)]
    args += ["--tier", tier] if tier is not None else []
    args += ["--payload", payload] if payload is not None else []
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 0:
        assert "enqueued 1 job" in result.stdout
        return
    assert result.exit_code == 2, result.output
    # One line naming the argument, also when the command line itself does not parse (then the
    # command is named, and the message names the option).
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairctl: error: "), result.output
    assert lines[0].split(": ")[2] in {"TASK", "--tenant", "--tier", "--payload", "fairctl enqueue"}, lines[0]


def test_a_payload_near_the_limit_fits_through_a_file_or_stdin_and_one_over_is_refused(
        redis_server: Any, tmp_path: Path) -> None:
    """A payload up to scheduler.max_payload_bytes (1 MiB) does not fit in an argument list
    ("Argument list too long"): --payload @FILE and --payload - (stdin) take it; one byte over
    the limit exits 2 with one line naming --payload."""
    path, config = write_config(tmp_path, redis_server.url)
    limit = config.scheduler.max_payload_bytes
    near, over = tmp_path / "near.json", tmp_path / "over.json"
    near.write_text(json.dumps({"blob": "x" * (limit - 20)}))  # compact JSON: 11 bytes more
    over.write_text(json.dumps({"blob": "x" * (limit - 5)}))
    base = ["enqueue", "newsletter", "--tenant", "acme", "--config", str(path), "--payload"]
    runner = CliRunner()
    for result in (runner.invoke(app, [*base, f"@{near}"]), runner.invoke(app, [*base, "-"], input=near.read_text())):
        assert result.exit_code == 0, result.output
        assert "enqueued 1 job" in result.stdout
    for result in (runner.invoke(app, [*base, f"@{over}"]), runner.invoke(app, [*base, "-"], input=over.read_text())):
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("fairctl: error: --payload: is ") and result.stderr.count("\n") == 1
        assert "(scheduler.max_payload_bytes)" in result.stderr
    missing = runner.invoke(app, [*base, f"@{tmp_path / 'nope.json'}"])
    assert missing.exit_code == 2 and missing.stderr.startswith("fairctl: error: --payload: cannot read ")
    broken = runner.invoke(app, [*base, "-"], input="{nope")
    assert broken.exit_code == 2 and "--payload: not valid JSON (stdin)" in broken.stderr
