"""Ctrl-C and SIGTERM end every command the same way.

The first SIGINT or SIGTERM raises :class:`Interrupted` (a KeyboardInterrupt, so every ``finally``,
``with`` and ``except KeyboardInterrupt`` that cleans up on Ctrl-C cleans up on SIGTERM too) in
the main thread (one that lands in a finaliser or a garbage collector callback, where Python
would print the exception and go on, is sent again a moment later), and from then on further signals are only noted: the clean-up (stopping a pool,
a stack, a subprocess) runs to its end, and each of those is bounded in time, so a second Ctrl-C
neither hangs the run nor cuts the clean-up short. Once the command has unwound,
:func:`handled` prints the one line that says what happened (and what was stopped, when a command
says so with :func:`stopped`) and exits 130 for SIGINT, 143 for SIGTERM, as a shell reports a
process killed by them.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click
from click.exceptions import Exit

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Set (to 1) by a parent process that reports an interruption of its children itself: a child
# then exits with the code alone, so a Ctrl-C still ends in one line (fairctl worker --processes).
QUIET_VARIABLE = "FAIRCTL_QUIET_INTERRUPT"
_quiet = os.environ.pop(QUIET_VARIABLE, None) == "1"
REDELIVER_AFTER_S = 0.01  # a signal whose exception Python swallowed is sent again this much later
# Python functions whose C calls must not see an exception raised by a signal handler: hiredis's
# pack_command (3.5, under redis-py's HiredisRespSerializer.pack) crashes the interpreter with
# SIGSEGV when one is, so an interruption landing there is sent again a moment later instead.
# Matched by file and name, so that no command imports redis to handle its Ctrl-C.
UNSAFE_FRAMES = frozenset({(os.path.join("redis", "connection.py"), "pack")})
WORDS: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}  # by signal number


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal behind an interruption (a bare KeyboardInterrupt counts as SIGINT)."""
    return int(getattr(exc, "signum", signal.SIGINT))


def exit_code(signum: int) -> int:
    return 128 + signum


def stopped(exc: BaseException, what: str) -> None:
    """Record, on the interruption being handled, what the command stopped on its way out."""
    exc.__dict__.setdefault("fairctl_stopped", []).append(what)


def line(exc: BaseException) -> str:
    signum = signal_of(exc)
    what = "; ".join(exc.__dict__.get("fairctl_stopped", []))
    return f"fairctl: {WORDS.get(signum, f'signal {signum}')}" + (f"; {what}" if what else "")


def inside_unsafe_call(frame: FrameType | None) -> bool:
    """Whether the signal landed in a call listed in :data:`UNSAFE_FRAMES`."""
    return frame is not None and any(frame.f_code.co_name == name and frame.f_code.co_filename.endswith(path)
                                     for path, name in UNSAFE_FRAMES)


def send_again(signum: int) -> None:
    """The signal once more, :data:`REDELIVER_AFTER_S` from now."""
    again = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    again.start()


def _ignore_signals() -> None:
    """At exit: SIGINT and SIGTERM ignored while the interpreter finalises (Python-level handlers
    no longer run then, and the default would kill it half way)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def handled() -> Iterator[None]:
    """Around a whole command: turn SIGINT and SIGTERM into :class:`Interrupted`, and an
    interruption that reaches here into its one line and exit code. Without a signal, the
    previous handlers come back (a command run in-process, as tests do, leaves nothing behind);
    after one, further signals are only noted until the process exits, so the interpreter's own
    exit (joining threads) is not interrupted either, and ignored once it finalises. Noted, not
    ignored, until then: an ignored signal is inherited by every process started afterwards, and
    a command run in-process would leave its caller's future children deaf to SIGTERM (a
    multiprocessing pool could then never be terminated)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def note(signum: int, _frame: FrameType | None) -> None:
        arrived.append(signum)

    def first(signum: int, frame: FrameType | None) -> None:
        if inside_unsafe_call(frame):
            send_again(signum)
            return
        arrived.append(signum)
        for sig in SIGNALS:
            signal.signal(sig, note)
        raise Interrupted(signum)

    def swallowed(unraisable: Any) -> None:
        """Python's hook for an exception it cannot raise (one from a ``__del__`` or a garbage
        collector callback, which can run at any allocation): an interruption that landed there
        would be printed and lost, and the command run on, so it is sent again a moment later."""
        if not isinstance(unraisable.exc_value, Interrupted):
            earlier_hook(unraisable)
            return
        for sig in SIGNALS:
            signal.signal(sig, first)
        send_again(unraisable.exc_value.signum)

    previous = {sig: signal.signal(sig, first) for sig in SIGNALS}
    earlier_hook, sys.unraisablehook = sys.unraisablehook, swallowed
    try:
        # A parent may start a command with these signals blocked (pending until it can handle
        # them, rather than a traceback from inside an import): from here on they are handled.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        yield
    except KeyboardInterrupt as exc:
        arrived.append(signal_of(exc))  # a bare KeyboardInterrupt (no signal of ours) ends it all too
        for sig in SIGNALS:  # the clean-up is done: what arrives now is only noted
            signal.signal(sig, note)
        atexit.register(_ignore_signals)  # the interpreter's finalisation runs no Python-level handler
        if not _quiet:
            click.echo(line(exc), err=True)
        raise Exit(exit_code(signal_of(exc))) from None
    finally:
        sys.unraisablehook = earlier_hook
        if not arrived:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
