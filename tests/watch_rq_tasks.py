"""The job the RQ watch tests queue: a tenant's short piece of work, run by a real ``rq worker``."""

from __future__ import annotations

import time


def work(tenant: str, n: int = 0) -> str:
    time.sleep(0.01)
    return f"{tenant}:{n}"


def fail(tenant: str, n: int = 0) -> str:
    """A job that raises: RQ's worker files it in the failed registry, its dead letters."""
    raise RuntimeError(f"{tenant}:{n} failed on purpose")
