"""The Lua scheduler and the Python side share one definition of settings, stored lines and keys.

The script must hard-code nothing Python defines (separator, field positions, key layout, KEYS
order), every name it uses must be compiled in, and the model and the scheduler must read every
config-derived value from the one Settings object. These checks fail as soon as the sides drift.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import fields
from pathlib import Path

from fairness_core import load_config
from fairness_core.jobs import SEP, DeadLetter, Envelope, Record
from fairness_core.keys import FIXED, Keys
from fairness_core.script import ENVELOPE_READ, layout, script_source
from fairness_core.settings import Settings, derive

from .conftest import EXAMPLE_CONFIG, ROOT

LUA = (ROOT / "fairness_core/lua/scheduler.lua").read_text(encoding="utf-8")
CODE = re.sub(r"--[^\n]*", "", LUA)  # the script without its comments


def test_the_script_hard_codes_no_separator_key_layout_or_keys_index() -> None:
    for literal in (r"\t", "q/", "/t/", "'t/'", "served:", "servedn:"):
        assert literal not in CODE, f"lua/scheduler.lua writes {literal} by hand"
    assert not re.search(r"ckey\(\w+, ['\"]", CODE), "a class key part written by hand"
    assert not re.search(r"KEYS\[\d", CODE), "a KEYS index written by hand"


def test_every_layout_name_the_script_uses_is_compiled_in_and_every_one_is_used() -> None:
    names = set(re.findall(r"\b(?:SEP|CODE_MARK|CODE_PLACES|STAMP_DIGITS|STAMP_VALUES|CLASS_SPACE|RATE_SPACE|CHARGED|WAKE_MEMBER|SWEEP_BATCH|OWNED_SPACE|DEDUP_SPACE|REAP_GAP_MS|RETURNED_KEEP_MS|PART_SEP|TENANT_QUEUE|ACCOUNT_MARK|(?:ENV|REC|DEAD|KEY|PART)_[A-Z_]+)\b", CODE))
    assert names == set(layout())


def test_the_compiled_script_holds_the_values_not_the_names() -> None:
    settings = derive(load_config(EXAMPLE_CONFIG))
    code = re.sub(r"--[^\n]*", "", script_source(settings))
    assert "__SETTINGS__" not in code
    assert not set(re.findall(r"\b[A-Z][A-Z0-9_]*\b", code)) & set(layout())
    assert '"stats"' in code and '"q/"' in code


def test_the_lua_cfg_is_the_settings_object() -> None:
    read = set(re.findall(r"\bcfg\.([a-z_]+)", CODE))
    assert read == {f.name for f in fields(Settings)}


def test_the_envelope_pattern_captures_every_field_the_script_reads() -> None:
    read = set(re.findall(r"\bf\[ENV_([A-Z_]+)\]", CODE))
    assert read and {name.lower() for name in read} <= set(ENVELOPE_READ)


def _config_reads(path: Path) -> set[str]:
    """Attributes read off a ``config`` / ``self.config`` in the module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "config") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "config"):
                out.add(node.attr)
    return out


def test_model_and_scheduler_read_derived_values_only_from_settings() -> None:
    for module in ("model.py", "scheduler.py"):
        assert _config_reads(ROOT / "fairness_core" / module) <= {"class_index", "redis"}, module


def test_the_scripts_group_keys_are_the_keys_module_s() -> None:
    keys = Keys("p")
    assert {name: keys.base + suffix for name, suffix in FIXED.items()} == {name: getattr(keys, name) for name in FIXED}
    assert keys.declared() == [keys.config]
    assert keys.tenant_queue("jobs:high", "a/b") == "{p}:q/jobs:high/t/a/b"
    assert keys.class_key("jobs:high", "tags") == "{p}:q/jobs:high/tags"


def test_lines_keep_their_bytes_and_read_back() -> None:
    job = Envelope(7, 1_700_000_000_000, 2, "pro", "order", "user waiting", '{"a":"x\\ty"}')
    line = '7\td5myuqs\t2\tpro\torder\tuser waiting\t{"a":"x\\ty"}'  # the time in base 62
    assert SEP == "\t" and job.encode() == line and Envelope.decode(line) == job
    # As an earlier release stored it: the time in decimal digits.
    assert Envelope.decode('7\t1700000000000\t2\tpro\torder\tuser waiting\t{"a":"x\\ty"}') == job
    fresh = dataclasses.replace(job, attempts=0)  # attempts 0 is stored as nothing
    assert fresh.encode() == line.replace("\t2\t", "\t\t", 1) and Envelope.decode(fresh.encode()) == fresh
    record = Record("jobs:high", "acme", 2, job)
    assert record.encode() == "jobs:high\tacme\t2\t" + line and Record.decode(record.encode()) == record
    dead = DeadLetter("jobs:high", "acme", 2, 99, "boom", job)
    assert dead.encode() == "jobs:high\tacme\t2\t99\tboom\t" + line and DeadLetter.decode(dead.encode()) == dead
    lease = record.lease(())
    assert (lease.job_id, lease.queue, lease.attempts, lease.payload, lease.enqueued_at) == (
        "7", "jobs:high", 2, {"a": "x\ty"}, 1_700_000_000.0)
