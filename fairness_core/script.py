"""The scheduler script as Redis runs it: the Lua source with its constants compiled in.

The script hard-codes nothing that Python defines. Its ``cfg`` table is the config's
:class:`~fairness_core.settings.Settings`, and its upper-case layout names (:func:`layout`) become
the record separator and field positions of :mod:`fairness_core.jobs` and the key layout of
:mod:`fairness_core.keys`, written into the code as literal constants. Nothing is sent or decoded
per call: decoding the config from JSON on every call cost more than a fifth of a pop's time in
Redis. Redis runs it as a function library (:mod:`fairness_core.library`).
"""

from __future__ import annotations

import re
import string
from dataclasses import asdict
from importlib import resources
from typing import Any

from .jobs import CODE_MARK, CODE_PLACES, SEP, STAMP_DIGITS, DeadLetter, Envelope, Fields, Record
from .keys import (
    ACCOUNT_MARK,
    CHARGED,
    CLASS_PARTS,
    CLASS_SPACE,
    DEDUP_SPACE,
    FIXED,
    OWNED_SPACE,
    PART_SEP,
    RATE_SPACE,
    TENANT_QUEUE,
    WAKE_MEMBER,
)
from .settings import REAP_GAP_MS, RETURNED_KEEP_MS, SWEEP_BATCH, Settings

_SOURCE = resources.files("fairness_core").joinpath("lua/scheduler.lua").read_text(encoding="utf-8")
_LUA_SAFE = frozenset(string.ascii_letters + string.digits + " _-:./")
# A comment (left as it is) or an upper-case name (a layout constant's, or another the script uses).
_COMMENT_OR_NAME = re.compile(r"--[^\n]*|\b[A-Z][A-Z0-9_]*\b")


def lua_literal(value: Any) -> str:
    """``value`` (dicts with string keys, lists, strings, numbers, booleans) as a Lua constructor;
    strings escape every byte outside a safe set, so no config text can end one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(chr(b) if chr(b) in _LUA_SAFE else f"\\{b:03d}" for b in value.encode("utf-8")) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"[{lua_literal(key)}]={lua_literal(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "{" + ",".join(lua_literal(item) for item in value) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _positions(prefix: str, line: type[Fields]) -> dict[str, int]:
    """A line's 1-based field positions, as ``<prefix>_<FIELD>`` constants."""
    return {f"{prefix}_{name.upper()}": i for i, name in enumerate(line.names(), start=1)}


# The envelope fields the script reads back (the others it only writes): its envelope pattern
# captures up to the last of these, not the task and reason, as each capture costs time on a pop.
ENVELOPE_READ = ("id", "enqueued_ms", "attempts", "tier")


def _head(line: type[Fields], through: str) -> str:
    """A Lua pattern capturing the fields of ``line`` up to ``through``, which must not be the
    last (it may hold the separator). The separator is a tab: no Lua pattern magic to escape."""
    return "^" + f"([^{SEP}]*){SEP}" * (line.names().index(through) + 1)


def layout() -> dict[str, Any]:
    """What the script must know of jobs.py's lines and keys.py's keys, as named constants. The
    script parses envelopes, records and dead letters."""
    return {
        "SEP": SEP, "CODE_MARK": CODE_MARK, "CODE_PLACES": CODE_PLACES,
        "STAMP_DIGITS": STAMP_DIGITS, "STAMP_VALUES": {ord(c): i for i, c in enumerate(STAMP_DIGITS)},
        **_positions("ENV", Envelope),
        "ENV_HEAD": _head(Envelope, max(ENVELOPE_READ, key=Envelope.names().index)),
        "ENV_TASK_HEAD": _head(Envelope, "task"),  # charging by runtime looks up the task's estimate
        **_positions("REC", Record), "REC_HEAD": _head(Record, Record.names()[-2]),
        **_positions("DEAD", DeadLetter), "DEAD_HEAD": _head(DeadLetter, DeadLetter.names()[-2]),
        **{f"KEY_{name.upper()}": suffix for name, suffix in FIXED.items()},
        "CLASS_SPACE": CLASS_SPACE, "PART_SEP": PART_SEP, "TENANT_QUEUE": TENANT_QUEUE, "RATE_SPACE": RATE_SPACE,
        "CHARGED": CHARGED, "WAKE_MEMBER": WAKE_MEMBER, "SWEEP_BATCH": SWEEP_BATCH, "OWNED_SPACE": OWNED_SPACE,
        "REAP_GAP_MS": REAP_GAP_MS, "RETURNED_KEEP_MS": RETURNED_KEEP_MS,
        "ACCOUNT_MARK": ACCOUNT_MARK, "DEDUP_SPACE": DEDUP_SPACE,
        **{f"PART_{name.upper()}": part for name, part in CLASS_PARTS.items()},
    }


def script_source(settings: Settings) -> str:
    """The scheduler's Lua with ``settings`` as its ``cfg`` table (the line ``local cfg =
    __SETTINGS__``) and each layout name replaced by its value, a literal constant in the code as
    if written there. It defines ``call(keys, args)``, which :class:`~fairness_core.library.Library`
    registers as the library's functions."""
    constants = {name: lua_literal(value) for name, value in layout().items()}
    source = _SOURCE.replace("\nlocal cfg = __SETTINGS__\n", f"\nlocal cfg = {lua_literal(asdict(settings))}\n", 1)
    return _COMMENT_OR_NAME.sub(lambda m: constants.get(m.group(0), m.group(0)), source)
