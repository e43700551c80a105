"""Signals as exceptions: SIGTERM and SIGHUP unwind like Ctrl-C, and a few file operations
defer them until they are done.

:func:`signals_as_interrupts` wraps every command, so every ``finally`` runs;
:func:`deferred_signals` wraps the file operations of :mod:`posdiag._util.atomic`.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "Interrupted",
    "deferred_signals",
    "exit_on_signals_at_shutdown",
    "signals_as_interrupts",
]


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when a handled signal (SIGTERM, SIGHUP) arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# Signals that arrived inside deferred_signals(), raised when its outermost block ends.
_pending: list[int] = []
_depth = 0


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(signum)


def _raise(signum: int, frame: FrameType | None) -> None:
    if _depth > 0:
        _pending.append(signum)  # a file operation that must finish first (posdiag._util.atomic)
        return
    raise _interrupt(signum)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Within the block, a handled signal (SIGINT, SIGTERM, SIGHUP) waits until the block ends,
    then raises (unless an exception is already leaving it): file operations are never cut."""
    global _depth
    _depth += 1
    failed = True
    try:
        yield
        failed = False
    finally:
        _depth -= 1
        if _depth == 0 and _pending:
            signum = _pending[0]
            _pending.clear()
            if not failed:
                raise _interrupt(signum)


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (SIGINT
    KeyboardInterrupt, as by default), or wait for the end of a :func:`deferred_signals` block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, _raise) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():
            # The command line's process only ends after this: exit at once from here on.
            signal.signal(s, _exit_at_shutdown if _exit_when_done else handler)


def _exit_at_shutdown(signum: int, frame: FrameType | None) -> None:
    """A signal while the interpreter shuts down after the command (atexit callbacks): exit at
    once with the signal's code, not 0 and a traceback."""
    name = signal.Signals(signum).name
    try:
        line = f"Error: interrupted by {name} while exiting, after the command had finished\n"
        os.write(2, line.encode())
    finally:
        os._exit(128 + signum)


_exit_when_done = False


def exit_on_signals_at_shutdown() -> None:
    """For the ``posdiag`` process only (not a library caller, not a test runner): once a
    command has run, SIGINT, SIGTERM and SIGHUP exit at once with their code."""
    global _exit_when_done
    _exit_when_done = True
