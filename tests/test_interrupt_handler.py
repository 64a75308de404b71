"""The Ctrl-C handler in-process: a signal that lands in a finaliser still ends the command."""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest
import typer

from fairctl.interrupts import handled


class SignalledWhileCollected:
    """Sends SIGINT to its own process as the garbage collector finalises it, as a Ctrl-C that
    arrives while a collection runs (a load generator allocates a burst's payloads) does."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, inside __del__


def test_a_signal_landing_in_a_finaliser_still_interrupts_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Raised inside ``__del__``, the interruption would be printed as "Exception ignored" and the
    command would run on to its end (a loadgen run exited 0 after its whole replay)."""
    finished = False
    with pytest.raises(typer.Exit) as exit_info:
        with handled():
            SignalledWhileCollected()
            gc.collect()
            time.sleep(2)  # the signal, sent again, interrupts this
            finished = True
    assert (exit_info.value.exit_code, finished) == (130, False)
    assert "Exception ignored" not in capsys.readouterr().err
