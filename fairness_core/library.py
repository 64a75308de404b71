"""The scheduler's Lua as a Redis function library: loaded once, called by name (``FCALL``).

Sent as a script (``EVALSHA``), Redis runs the whole chunk on every call: it defined the script's
sixty functions and its config table each time, 30 µs of a pop+ack's 88 µs inside Redis. A library
runs that once, when loaded, and each call runs only the operation.

A library is named by a hash of its code, so every config (and every release) has its own, and a
process never runs another's code. Libraries are loaded on demand: a call that finds its function
missing (a new config, a restarted Redis without persistence, a Cluster slot that moved) loads it
and calls again. Loading one prunes the others once more than :data:`KEEP` are loaded: libraries
are stored with the data (RDB, AOF, replicas), and each config applied would otherwise leave one
behind. A process whose library was pruned loads it again on its next call. Processes prune at
the same time: a library another one deleted first is gone as wanted, and a call whose library was
pruned between its load and its call loads it again, a few times, before it gives up.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import redis

from .connection import redis_errors
from .jobs import decoded

NAME_PREFIX = "fairctl_"
# Libraries kept loaded: enough for the configs a rolling change runs side by side, and a few groups.
KEEP = 8
_MISSING = "Function not found"
_GONE = "Library not found"  # FUNCTION DELETE of a library another process deleted first
# Loads a call tries when its library keeps being pruned under it by other processes' loads.
LOAD_TRIES = 3


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
        self.code = (f"#!lua name={self.name}\n{body}\n"
                     f"redis.register_function{{function_name='{self.drain}', callback=call, flags={{'allow-oom'}}}}\n"
                     f"redis.register_function{{function_name='{self.enqueue}', callback=call}}\n")

    def call(self, send: Callable[..., Any], node: Callable[[], Any], function: str, keys: Sequence[str],
             args: Sequence[object]) -> Any:
        """``send("FCALL", function, ...)``; when the library is missing, load it on ``node()``
        (the Redis serving the group's slot) and call again."""
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

    def load(self, node: Any) -> None:
        """Load this library on ``node`` (replacing a copy another process loaded meanwhile), then
        prune the others past :data:`KEEP`."""
        with redis_errors(node):
            node.function_load(self.code, replace=True)
            loaded = [decoded(entry[1]) for entry in node.function_list(library=NAME_PREFIX + "*")]
            if len(loaded) > KEEP:
                for name in loaded:
                    if name != self.name:
                        _delete(node, name)


def _delete(node: Any, name: str) -> None:
    """Delete a library, unless another process pruning at the same time deleted it first."""
    try:
        node.function_delete(name)
    except redis.ResponseError as exc:
        if not str(exc).startswith(_GONE):
            raise
