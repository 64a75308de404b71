"""The job the RQ watch tests queue: a tenant's short piece of work, run by a real ``rq worker``."""

from __future__ import annotations

import time


def work(tenant: str, n: int = 0) -> str:
    time.sleep(0.01)
    return f"{tenant}:{n}"
