"""The scheduler's Lua as a Redis function library: loaded once, called by name (``FCALL``).

Sent as a script (``EVALSHA``), Redis runs the whole chunk on every call: it defined the script's
sixty functions and its config table each time, 30 µs of a pop+ack's 88 µs inside Redis. A library
runs that once, when loaded, and each call runs only the operation.

A library is named by a hash of its code, which holds the config's policy but not the group's
name: every config (and every release) has its own, groups running one config share one (the
shards of a sharded queue, however many), and a process never runs another's code. Libraries are
loaded on demand: a call that finds its function missing (a new config, a restarted Redis without
persistence, a Cluster slot that moved) loads it and calls again.

Libraries are stored with the data (RDB, AOF, replicas), so each config applied would leave one
behind: a load prunes the libraries no process has loaded for :data:`EXPIRE_MS`. A library in use
is never that old: each load stamps it with Redis's time (its functions' description), and a
process whose library's stamp is older than :data:`REFRESH_S` loads it again (a cheap check, at
its first call and every :data:`REFRESH_S`). So no count of groups or configs on one Redis makes
processes prune each other's libraries, and a library pruned anyway (a process stopped for an hour)
is loaded again by its next call. Processes load and prune at the same time: a library another one
deleted first is gone as wanted, and a call whose library was pruned between its load and its call
loads it again, a few times, before it gives up.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any, Callable, Sequence

import redis

from .connection import redis_errors
from .jobs import decoded

NAME_PREFIX = "fairctl_"
STAMP = "fairctl library, loaded_ms="  # the functions' description: the Redis time of the last load
# A process checks its library's stamp at its first call and this often, and loads it again when
# the stamp is older: a library in use is stamped at most twice this long ago.
REFRESH_S = 600.0
# A library nobody loaded for this long (six refreshes) is no process's: the next load prunes it.
EXPIRE_MS = 3600 * 1000
_MISSING = "Function not found"
_GONE = "Library not found"  # FUNCTION DELETE of a library another process deleted first
# Loads a call tries when its library keeps being pruned under it by other processes' loads.
LOAD_TRIES = 3

log = logging.getLogger("fairctl.library")


def missing(error: Exception) -> bool:
    """Whether a call failed because its library is not loaded on that Redis."""
    return isinstance(error, redis.ResponseError) and str(error).startswith(_MISSING)


class Library:
    """The compiled scheduler (``body``: Lua defining ``call(keys, args)``) as a library with two
    functions of the same code: ``drain`` (Redis runs it even over ``maxmemory``: pops, acks and
    reaps are what free memory) and ``enqueue`` (refused up front over ``maxmemory``)."""

    def __init__(self, body: str) -> None:
        self.name = NAME_PREFIX + hashlib.sha1(body.encode("utf-8")).hexdigest()[:20]
        self.drain, self.enqueue = self.name, self.name + "_enqueue"
        self._body = body
        self._due = 0.0  # monotonic time of the next stamp check (0: at the first call)

    def code(self, loaded_ms: int) -> str:
        """The library's source, stamped as loaded at ``loaded_ms`` (Redis time)."""
        register = "redis.register_function{{function_name='{}', callback=call, description='{}'{}}}\n"
        stamp = f"{STAMP}{loaded_ms}"
        return (f"#!lua name={self.name}\n{self._body}\n"
                + register.format(self.drain, stamp, ", flags={'allow-oom'}")
                + register.format(self.enqueue, stamp, ""))

    def call(self, send: Callable[..., Any], node: Callable[[], Any], function: str, keys: Sequence[str],
             args: Sequence[object]) -> Any:
        """``send("FCALL", function, ...)``; when the library is missing, load it on ``node()``
        (the Redis serving the group's slot) and call again. First, when due, :meth:`keep_fresh`."""
        if time.monotonic() >= self._due:
            self.keep_fresh(node())
        for _ in range(LOAD_TRIES):
            try:
                return send("FCALL", function, len(keys), *keys, *args)
            except redis.ResponseError as exc:
                if not missing(exc):
                    raise
            self.load(node())
        return send("FCALL", function, len(keys), *keys, *args)

    def queue(self, pipe: Any, function: str, keys: Sequence[str], args: Sequence[object]) -> None:
        """Add ``FCALL function`` to a pipeline (whose replies the caller checks with :func:`missing`)."""
        pipe.fcall(function, len(keys), *keys, *args)

    def keep_fresh(self, node: Any) -> None:
        """Load the library again on ``node`` if its stamp is older than :data:`REFRESH_S` (a
        missing one is left to the call). A refused load (a Redis over ``maxmemory`` refuses
        FUNCTION LOAD) never fails the call that was due to check: it is tried again later."""
        with redis_errors(node):
            now_ms = _now_ms(node)
            loaded = stamps(node, self.name)
            try:
                if self.name in loaded and now_ms - loaded[self.name] >= REFRESH_S * 1000:
                    self._load(node, now_ms)
            except redis.ResponseError as exc:
                log.warning("could not stamp the scheduler's library %s as in use (%s); trying again in %.0fs",
                            self.name, exc, REFRESH_S)
        self._due = time.monotonic() + REFRESH_S

    def load(self, node: Any) -> None:
        """Load this library on ``node`` (replacing a copy another process loaded meanwhile), then
        prune the libraries nobody loaded for :data:`EXPIRE_MS`."""
        with redis_errors(node):
            self._load(node, _now_ms(node))

    def _load(self, node: Any, now_ms: int) -> None:
        node.function_load(self.code(now_ms), replace=True)
        self._due = time.monotonic() + REFRESH_S
        for name, loaded_ms in stamps(node).items():
            if name != self.name and now_ms - loaded_ms >= EXPIRE_MS:
                _delete(node, name)


def stamps(node: Any, name: str | None = None) -> dict[str, int]:
    """The fairctl libraries loaded on ``node`` (``name``: that one only) and when each was last
    loaded, in Redis milliseconds; 0 for one loaded by a release that did not stamp them."""
    out = {}
    for entry in node.function_list(library=name or NAME_PREFIX + "*"):
        library = _pairs(entry)
        functions = [_pairs(function) for function in library.get("functions") or []]
        description = decoded(functions[0].get("description") or "") if functions else ""
        stamp = description[len(STAMP):] if description.startswith(STAMP) else ""
        out[decoded(library["library_name"])] = int(stamp) if stamp.isdigit() else 0
    return out


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """A FUNCTION LIST entry (a flat list of names and values) as a dict."""
    return {decoded(key): value for key, value in zip(flat[::2], flat[1::2])}


def _now_ms(node: Any) -> int:
    seconds, micros = node.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _delete(node: Any, name: str) -> None:
    """Delete a library, unless another process pruning at the same time deleted it first."""
    try:
        node.function_delete(name)
    except redis.ResponseError as exc:
        if not str(exc).startswith(_GONE):
            raise
