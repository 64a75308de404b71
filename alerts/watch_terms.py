"""The words of a watched job system for what the alerts and panels speak of: how a class's queues
are paused and resumed, when the system gives a job up and where it keeps it. The generated rules
and dashboards of a config that watches one (its ``watch``) say these in place of fairctl's own
commands, which act on fairctl's queues only; fairctl's own texts stay as they are.

Sources: https://docs.celeryq.dev/en/stable/userguide/workers.html#queues and
https://docs.celeryq.dev/en/stable/userguide/tasks.html#retrying;
https://python-rq.org/docs/workers/ and https://python-rq.org/docs/exceptions/;
https://docs.bullmq.io/guide/workers/pausing-queues and
https://docs.bullmq.io/guide/retrying-failing-jobs; https://github.com/sidekiq/sidekiq/wiki/Pro-API
and https://github.com/sidekiq/sidekiq/wiki/Error-Handling.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.sources import watched
from fairness_core.config import Config


@dataclass(frozen=True)
class Terms:
    """How one job system says it; each phrase fits the sentence its comment shows."""

    name: str  # the system as its documentation spells it: "{name}'s jobs"
    pause: str  # what pauses a class's queues: "paused with {pause}"
    resume: str  # what lets workers take them again: "Resume it ({resume})"
    gave_up: str  # when it gives a job up: "jobs were given up: {gave_up}"
    dead: str  # where it keeps those: "they wait in {dead}"
    again: str  # what runs them again: "and {again}"
    sample: int = 0  # the config's watch.sample, the waiting jobs read per class: "the next {sample} read"


TERMS = {
    "celery": Terms(
        "Celery", "celery control cancel_consumer", "celery control add_consumer",
        "they raised past their retries (autoretry_for, self.retry)",
        "the result backend, if there is one (a Redis broker keeps no failed task)",
        "nothing runs them again unless they are sent again"),
    "rq": Terms(
        "RQ", "rq suspend", "rq resume", "they failed past their Retry, or their worker died",
        "RQ's failed job registries", "nothing runs them again until someone requeues them (rq requeue)"),
    "bullmq": Terms(
        "BullMQ", "queue.pause()", "queue.resume()", "they failed their last attempt",
        "BullMQ's failed sets (until removeOnFail drops them)",
        "nothing runs them again until someone retries them (queue.retryJobs(), Taskforce.sh or bull-board)"),
    "sidekiq": Terms(
        "Sidekiq", "Sidekiq Pro's pause!", "unpause!", "they failed their last retry (25 by default)",
        "Sidekiq's Dead set (the Web UI's Dead tab)", "nothing runs them again until someone retries them there"),
}


def terms(config: Config) -> Terms | None:
    """The words of the system ``config`` watches, with its sample; None for fairctl's own queues."""
    watch = watched(config)
    return None if watch is None else replace(TERMS[watch.system], sample=watch.sample)
