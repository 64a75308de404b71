"""The ScaledObject's triggers against a real Prometheus: a redis-server, two exporters on the same
queue group (two worker pods' sidecars), and Prometheus scraping both with the generated rules
loaded. Each trigger's query, exactly as the ScaledObject carries it, returns one number from the
HTTP API, as KEDA's prometheus scaler requires (it refuses an answer of several series); the age
trigger does not move when one tenant floods a class, rises as a quiet tenant's job ages toward its
class's max_age, and falls back once that job is served."""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from pathlib import Path

from alerts import recording as rec
from alerts.output import rules_text
from fairness_core import Queue, redis_client
from fairness_stack import keda
from fairness_stack import kubernetes as k
from fairness_stack.servers import RedisServer

from .conftest import make_config
from .exporter_support import JOB, Prometheus, running_exporter
from .support import wait_for

FLOOD_JOBS, FLOOD_AGE_S = 500, 1800.0  # jobs:low (max_age 1h): the flood's first job at half the SLO
QUIET_AGE_S = 450.0  # jobs:medium (max_age 15m): a quiet tenant's job at half the SLO
SETTLE_S = 30  # bound on waiting for a scrape and a rule evaluation (each every second)


def test_each_trigger_returns_one_number_that_follows_the_quiet_tenants(redis_server: RedisServer,
                                                                        tmp_path: Path) -> None:
    config = make_config(redis={"url": redis_server.url}, scheduler={"budget_min_arrivals": 10**9},
                         alerts={"exporter_job": JOB})
    rules = tmp_path / "rules.yml"
    rules.write_text(rules_text(config))
    triggers = {t["name"]: t for t in k.scaled_object(config)["spec"]["triggers"]}
    age, depth = triggers[keda.AGE_TRIGGER]["metadata"]["query"], triggers[keda.DEPTH_TRIGGER]["metadata"]["query"]
    # For contrast, the same ratio on the class's oldest age, which the flood does raise.
    class_age = age.replace(rec.QUIET_AGE, rec.OLDEST_AGE)

    def queued_ago(seconds: float) -> Queue:
        """The queue with its clock set back: its jobs are ``seconds`` old when queued."""
        return Queue(config, redis_client(redis_server.url), clock=lambda: int((time.time() - seconds) * 1000))

    with ExitStack() as stack:
        exporters = [stack.enter_context(running_exporter(config)) for _ in range(2)]
        prometheus = stack.enter_context(
            Prometheus([f"127.0.0.1:{e.port}" for e in exporters], tmp_path, (rules,)))

        def one(query: str) -> float | None:
            """The one value the query returns, as KEDA reads it; None before there is any."""
            result = prometheus.query(query)
            assert len(result) <= 1, f"several series for KEDA's one number: {result}"
            if not result:
                return None
            (labels, value), = result
            assert labels == {} and math.isfinite(value), result
            return value

        def reads(query: str, low: float, high: float) -> bool:
            value = one(query)
            return value is not None and low <= value <= high

        # Nothing queued: both triggers already read one number, 0.
        wait_for(lambda: one(age) == 0.0 and one(depth) == 0.0, SETTLE_S, "both triggers at 0 on an empty queue")

        # One tenant floods jobs:low with jobs half an hour old: the class's oldest age is half its
        # SLO, yet no quiet tenant waits, and the age trigger stays at 0. The depth counts them all.
        queued_ago(FLOOD_AGE_S).submit_many("newsletter", "acme", [None] * FLOOD_JOBS)
        wait_for(lambda: reads(depth, FLOOD_JOBS, FLOOD_JOBS), SETTLE_S, "the flood in the depth trigger")
        wait_for(lambda: reads(class_age, 0.5, 0.6), SETTLE_S, "the flood in the class's oldest age")
        assert one(age) == 0.0

        # A quiet tenant's job in jobs:medium, queued 7.5 minutes ago: half its class's 15m SLO.
        quiet = queued_ago(QUIET_AGE_S)
        quiet.enqueue("sync_contacts", "small-shop")
        wait_for(lambda: reads(age, 0.5, 0.6), SETTLE_S, "the quiet tenant's age in the age trigger")
        first = one(age)
        assert first is not None
        wait_for(lambda: (one(age) or 0.0) > first, SETTLE_S, "the age trigger rising as the job ages")
        assert one(depth) == FLOOD_JOBS + 1

        # Paused, jobs:medium's wait is by design: neither trigger counts it.
        quiet.pause("jobs:medium")
        wait_for(lambda: one(age) == 0.0 and one(depth) == FLOOD_JOBS, SETTLE_S, "a paused class left out")
        quiet.resume("jobs:medium")
        wait_for(lambda: reads(age, 0.5, 0.7), SETTLE_S, "the class back in once resumed")

        # Served: the age trigger falls back to 0, while the flood still waits.
        (lease,) = quiet.pop(1, classes=["jobs:medium"])
        assert quiet.ack(lease)
        wait_for(lambda: one(age) == 0.0 and one(depth) == FLOOD_JOBS, SETTLE_S, "the age trigger back at 0 once served")
        assert reads(class_age, 0.5, 0.6)
