"""``fairctl worker --processes N``: N worker processes under one parent, one signal for all.

A worker's slots are threads of one process, so they share Python's GIL: handlers that compute
(not wait on I/O) run one at a time, and even no-op jobs are bound by the one core that runs the
client side of every pop. More processes, each with ``--concurrency`` slots, take more cores.

Each child is a plain ``fairctl worker`` with the same options, in its own process group, so a
Ctrl-C in the terminal reaches the parent alone and each child gets each signal exactly once: the
parent passes every SIGTERM/SIGINT on to every child (the first drains it, a second stops it at
once). A child that exits while the others run (Redis down at start, an evicting Redis, a crash)
stops the others gracefully: the parent exits non-zero, for the supervisor to restart the lot,
rather than run short of the slots it was asked for. On Linux a child also gets SIGTERM when the
parent dies, so killing the parent hard never leaves orphans working.

A child starts with SIGTERM/SIGINT blocked until its command can handle them (a signal passed on
while it still imports waits, instead of a traceback from inside the import). A signal that
stops a child before it works (it exits 130/143 quietly) ends the parent as it ends any command:
one line, exit 130 (143 for SIGTERM); once every child works, a signal drains them and exit 0.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from .interrupts import QUIET_VARIABLE, Interrupted, stopped

log = logging.getLogger("fairctl.worker")

TICK_S = 0.1  # how often the parent passes signals on and looks for exited children
FORWARDED = (signal.SIGTERM, signal.SIGINT)
# Set in each child's environment: the parent's pid, for the child to follow (see follow_parent).
PARENT_VARIABLE = "FAIRCTL_WORKER_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def run_processes(count: int, worker_args: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run ``count`` ``fairctl worker WORKER_ARGS`` processes until they stop; the exit code is 0
    when every one exited 0, else the highest a child exited with (1 for one killed by a signal)."""
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)  # only recorded: the loop below passes it on

    previous = {sig: signal.signal(sig, on_signal) for sig in FORWARDED}
    children: list[subprocess.Popen[bytes]] = []
    child_env = {**(os.environ if env is None else env), PARENT_VARIABLE: str(os.getpid()), QUIET_VARIABLE: "1"}
    try:
        for _ in range(count):
            if received:
                break
            unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # the child inherits the mask
            try:
                children.append(subprocess.Popen([sys.executable, "-m", "fairctl", "worker", *worker_args],
                                                 env=child_env, process_group=0))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        log.info("started %d worker processes: %s", len(children), " ".join(str(c.pid) for c in children))
        code, before_work = _supervise(children, received)
        if code == 0 and received and (before_work or len(children) < count):
            interrupted = Interrupted(received[0])
            if children:
                stopped(interrupted, f"stopped {len(children)} worker processes before they were all working")
            raise interrupted
        return code
    finally:
        for child in children:  # an unexpected error in the parent: leave no child working unsupervised
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(children: list[subprocess.Popen[bytes]], received: list[int]) -> tuple[int, int]:
    """Pass each received signal to every running child, and stop the rest gracefully when one
    exits by itself; return once all have exited: the exit code, and how many children a passed
    signal stopped before they worked (they exit 128 + its number, as any interrupted command)."""
    passed = 0
    stopping = False
    codes: dict[int, int] = {}
    while len(codes) < len(children):
        while passed < len(received):
            stopping = True
            _signal_running(children, codes, received[passed])
            passed += 1
        for child in children:
            if child.pid not in codes and (code := child.poll()) is not None:
                codes[child.pid] = code
                if not stopping:
                    log.error("worker process %d exited with code %d; stopping the others", child.pid, code)
                    stopping = True
                    _signal_running(children, codes, signal.SIGTERM)
        time.sleep(TICK_S)
    by_signal = {128 + signum for signum in received}
    before_work = sum(1 for code in codes.values() if code in by_signal)
    failed = {pid: code for pid, code in codes.items() if code != 0 and code not in by_signal}
    if failed:
        log.error("worker processes that failed (pid: exit code): %s",
                  ", ".join(f"{pid}: {code}" for pid, code in failed.items()))
    return max((code if code > 0 else 1 for code in failed.values()), default=0), before_work


def _signal_running(children: list[subprocess.Popen[bytes]], exited: dict[int, int], signum: int) -> None:
    for child in children:
        if child.pid not in exited and child.poll() is None:
            child.send_signal(signum)


def follow_parent() -> bool:
    """In a child: on Linux, ask for SIGTERM when the parent dies (so it drains rather than work on
    unsupervised). False when the parent is gone already; True too when not started by a parent."""
    parent = os.environ.pop(PARENT_VARIABLE, None)
    if parent is None or not sys.platform.startswith("linux"):
        return True
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == int(parent)  # checked after the request: the parent may have died before it
