"""Handlers for the end-to-end run with CPU-bound jobs (row 4d): each job computes in Python for
COMPUTE_S of its thread's CPU time, holding the GIL as real computing handlers do, so the slots of
one process take turns and more processes take more cores."""

from __future__ import annotations

import time

from fairness_core.jobs import Lease
from fairness_core.worker import HandlerRegistry

COMPUTE_S = 0.001


def compute(_lease: Lease) -> None:
    """Pure-Python arithmetic until this thread has used COMPUTE_S of CPU (waiting for the GIL
    does not count, so every job does the same work however many slots share the process)."""
    end = time.thread_time() + COMPUTE_S
    total = 0
    while time.thread_time() < end:
        for i in range(200):
            total += i


handlers = HandlerRegistry(fallback=compute)
