"""How fast ``fairctl simulate`` replays the marketing storm: per policy, the simulation's wall
time, simulated jobs per second and virtual seconds per wall second, then the whole command
(four policies, the alerts evaluated by promtool, worker processes) end to end.

The baseline, measured in the same run, is the reference model alone doing the same kind of work
with no simulator around it (submit, pop, ack in a tight loop): the ratio is what the event loop,
the service-time sampling and the scrapes cost on top of the policy itself.

    python -m benchmarks.simulator [--duration 2h] [--policies fifo,strict,weighted,weighted-fair]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time

from fairness_core import Model, parse_duration
from fairness_sim.scenario import DEFAULT_SCENARIO, load_scenario
from fairness_sim.simulator import scenario_config, simulate

BASELINE_JOBS = 50_000


def baseline(policy: str) -> float:
    """Jobs per second of the bare model: submit one, pop one, ack it."""
    scenario = load_scenario(DEFAULT_SCENARIO)
    model = Model(scenario_config(scenario, policy))
    started = time.perf_counter()
    for i in range(BASELINE_JOBS):
        model.submit(i, "order_confirmation", f"shop-{i % 300}")
        for lease in model.pop(i, 1):
            model.ack(i, lease)
    return BASELINE_JOBS / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default=None, help="simulated time (default: the scenario's)")
    parser.add_argument("--policies", default="fifo,strict,weighted,weighted-fair")
    args = parser.parse_args(argv)
    scenario = load_scenario(DEFAULT_SCENARIO)
    if args.duration:
        scenario = dataclasses.replace(scenario, duration=parse_duration(args.duration, "--duration"), expect={})
    print(f"{'policy':<14} {'wall s':>7} {'jobs started':>13} {'sim jobs/s':>11} {'virtual s/s':>12} "
          f"{'model jobs/s':>13} {'ratio':>6}")
    for policy in args.policies.split(","):
        run = simulate(scenario, policy)
        bare = baseline(policy)
        rate = run.jobs_started / run.wall_s
        print(f"{policy:<14} {run.wall_s:7.1f} {run.jobs_started:13,} {rate:11,.0f} {scenario.duration / run.wall_s:12,.0f} "
              f"{bare:13,.0f} {bare / rate:6.2f}")
    command = [sys.executable, "-m", "fairctl", "simulate", *(a for p in args.policies.split(",") for a in ("--policy", p))]
    if args.duration:
        command += ["--duration", args.duration]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(f"\nfairctl simulate (all policies, alerts by promtool, worker processes): "
          f"{time.perf_counter() - started:.1f}s wall, exit {done.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
