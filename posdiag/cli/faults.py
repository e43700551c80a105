"""Faults that are not the user's input: signals, OS errors, memory, closed streams.

The CLI's one error handler (``posdiag.cli.app._Group``) asks :func:`error_message` for the single
``Error: ...`` line and exit code of any exception, so no traceback ever reaches the user, and
runs every command inside :func:`signals_as_interrupts`, so SIGTERM unwinds like Ctrl-C: every
``finally`` runs, temporary files are removed and forked workers are stopped.

Set ``POSDIAG_DEBUG=1`` to get the traceback of an unexpected exception instead.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from ..errors import PosdiagError

__all__ = ["Interrupted", "error_message", "signals_as_interrupts", "check_stdout"]


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when a handled signal (SIGTERM, SIGHUP) arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (like SIGINT does)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def check_stdout() -> None:
    """Refuse to start when standard output is closed: the report would be lost (exit 0)."""
    out = sys.stdout
    closed = out is None
    if not closed:
        try:
            fd = out.fileno()
        except (OSError, ValueError, AttributeError):
            fd = None  # an in-process stream (test runners) has no descriptor
        if fd is not None:
            try:
                os.fstat(fd)
            except OSError:
                closed = True
    if closed:
        raise PosdiagError("standard output is closed; nothing could be reported")


_OS_MESSAGES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for this file system or the file size limit (ulimit -f)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.EPIPE: "the reader of the output went away (broken pipe)",
    errno.EBADF: "the stream is closed",
    errno.ENOMEM: "out of memory",
}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def error_message(exc: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit code of ``exc``; None for exits (SystemExit, click's).

    PosdiagError: its message and code. Signals: 130 (SIGINT) or 128 + signal number.
    OS errors: the file and the reason, exit 2. MemoryError, numerical and any other
    unexpected error: exit 2 with the exception's first line.
    """
    if isinstance(exc, PosdiagError):
        return str(exc), exc.exit_code
    if isinstance(exc, Interrupted):
        name = signal.Signals(exc.signum).name
        return f"interrupted by {name}; no partial output was left", 128 + exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT (Ctrl-C); no partial output was left", 130
    if isinstance(exc, MemoryError):
        detail = _first_line(exc) if str(exc) else "the allocation failed"
        return f"out of memory ({detail}); try a smaller input or --max-len", 2
    if isinstance(exc, OSError):
        reason = _OS_MESSAGES.get(exc.errno or -1) or exc.strerror or _first_line(exc)
        where = exc.filename if exc.filename is not None else None
        # Files posdiag writes name themselves (posdiag._util.atomic); an unnamed write error is the
        # report going to standard output (a full /dev/full, a closed pipe).
        if where is None and exc.errno in (
            errno.EPIPE,
            errno.EBADF,
            errno.ENOSPC,
            errno.EFBIG,
            errno.EIO,
            errno.EDQUOT,
        ):
            where = "standard output"
        prefix = f"{where}: " if where is not None else ""
        return f"{prefix}cannot complete: {reason}", 2
    if isinstance(exc, Exception):
        from numpy.linalg import LinAlgError

        if isinstance(exc, LinAlgError):
            return f"numerical failure ({_first_line(exc)}); the input is degenerate", 2
        return (
            f"unexpected internal error ({type(exc).__name__}: {_first_line(exc)}); "
            "please report it (POSDIAG_DEBUG=1 shows the traceback)",
            2,
        )
    return None


def debug() -> bool:
    """Whether unexpected errors should keep their traceback (``POSDIAG_DEBUG=1``)."""
    return os.environ.get("POSDIAG_DEBUG", "") not in ("", "0")


def silence_stdout() -> None:
    """Point a broken standard output at /dev/null, so the exit does not print a second error."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass
