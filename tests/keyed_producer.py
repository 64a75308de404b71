"""A producer process for tests/test_idempotent.py: ``python -m tests.keyed_producer CONFIG P N``
makes N keyed submits of tenant ``tenant-P`` (keys ``pP-0`` ..), in batches of 50, and sends half
of each batch again at random as if their replies were lost (the whole batch's again, or one by
one in turns), then prints how many submits it sent in all."""

from __future__ import annotations

import random
import sys

from fairness_core import load_config, open_queue

BATCH = 50


def produce(config_path: str, p: int, count: int) -> int:
    queue, rng = open_queue(load_config(config_path)), random.Random(p)
    sent = 0
    for first in range(0, count, BATCH):
        keys = [f"p{p}-{i}" for i in range(first, min(first + BATCH, count))]
        queue.submit_many("order", f"tenant-{p}", [{"key": k} for k in keys], keys=keys)
        again = [k for k in keys if rng.random() < 0.5]  # their replies "lost": sent again
        if first // BATCH % 2:
            queue.submit_many("order", f"tenant-{p}", [{"key": k} for k in again], keys=again)
        else:
            for k in again:
                queue.submit("order", f"tenant-{p}", {"key": k}, key=k)
        sent += len(keys) + len(again)
    return sent


if __name__ == "__main__":
    print(produce(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
