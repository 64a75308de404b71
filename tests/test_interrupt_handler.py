"""The Ctrl-C handler in-process: a signal that lands where Python swallows exceptions (a
finaliser, a garbage collector callback) still ends the command."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import pytest

from fairctl.interrupts import handled


def _signal_here() -> None:
    """SIGINT to this process, handled while the caller still runs (a Ctrl-C arriving then)."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs here


class _SignalledWhileFinalised:
    def __del__(self) -> None:
        _signal_here()


@contextmanager
def in_a_finaliser() -> Iterator[Callable[[], None]]:
    yield lambda: _SignalledWhileFinalised() and None


@contextmanager
def in_a_gc_callback() -> Iterator[Callable[[], None]]:
    fired: list[bool] = []

    def callback(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start" and not fired:
            fired.append(True)
            _signal_here()

    gc.callbacks.append(callback)
    try:
        yield gc.collect
    finally:
        gc.callbacks.remove(callback)


@pytest.mark.parametrize("where", [in_a_finaliser, in_a_gc_callback], ids=["finaliser", "gc-callback"])
def test_a_signal_where_python_swallows_exceptions_still_interrupts_the_command(where: Any) -> None:
    """Raised there, the interruption would be printed as "Exception ignored" and the command run
    on to its end (a fairctl loadgen run exited 0 after its whole replay): it is sent again."""
    finished = False
    with pytest.raises(click.exceptions.Exit) as exit_info, where() as trigger, handled():
        trigger()
        time.sleep(2)  # the signal, sent again, interrupts this
        finished = True
    assert (exit_info.value.exit_code, finished) == (130, False)
    assert_children_still_die_on_sigterm()


def assert_children_still_die_on_sigterm() -> None:
    """An interrupted command run in-process leaves no signal ignored: an ignored SIGTERM would be
    inherited by every process its caller starts afterwards (a multiprocessing pool started later
    in the same test process could then never be terminated, and the suite hung on one)."""
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    child.terminate()
    assert child.wait(timeout=10) == -signal.SIGTERM
