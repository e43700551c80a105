"""Faults that are not the user's input: signals, OS errors, memory, closed streams.

The CLI's one error handler (:class:`CommandGroup`, ``posdiag``'s command group) asks
:func:`error_message` for the single ``Error: ...`` line and exit code of any exception, so no
traceback ever reaches the user, and runs every command inside :func:`signals_as_interrupts`, so
SIGTERM unwinds like Ctrl-C: every ``finally`` runs, temporary files are removed and forked
workers are stopped.

Set ``POSDIAG_DEBUG=1`` to get the traceback of an unexpected exception instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

import typer
from typer._click.exceptions import UsageError
from typer.core import TyperGroup
from typer.exceptions import TyperException

from .._util.signals import Interrupted, signals_as_interrupts
from ..errors import PosdiagError, PosdiagWarning
from ._help import tidy_params

__all__ = ["CommandGroup", "check_stdout", "error_message", "on_error", "run_error_hooks"]


# Called with the error message when the command fails (exit 2 or a signal), before it is
# printed: e.g. ``check --junit`` replaces its report by one that records the error.
_error_hooks: list[Callable[[str], object]] = []
on_error = _error_hooks.append


def run_error_hooks(message: str | None) -> None:
    """Run (once) and forget the hooks; None forgets them only. A failing hook must not hide
    the error that called it."""
    hooks = list(_error_hooks)
    _error_hooks.clear()
    if message is None:
        return
    for hook in hooks:
        with contextlib.suppress(Exception):  # the original error is what gets reported
            hook(message)


def check_stdout() -> None:
    """Refuse to start when standard output is closed: the report would be lost (exit 0)."""
    try:
        fd = -1 if sys.stdout is None else sys.stdout.fileno()  # -1: fstat fails, as closed
    except (OSError, ValueError, AttributeError):
        return  # an in-process stream (test runners) has no descriptor
    try:
        os.fstat(fd)
    except OSError:
        raise PosdiagError("standard output is closed; nothing could be reported") from None


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
# An OS error without a file name and one of these is the report going to standard output (a
# full /dev/full, a closed pipe): files posdiag writes name themselves (posdiag._util.atomic).
_STDOUT_ERRNOS = (errno.EPIPE, errno.EBADF, errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT)


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
    if isinstance(exc, KeyboardInterrupt):
        from .._util.atomic import completed_outputs

        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name + (" (Ctrl-C)" if signum == signal.SIGINT else "")
        done = completed_outputs()
        # True in every timing (posdiag._util.atomic): outputs appear whole or not at all,
        # temporaries are always removed; a signal after an output was placed must not deny it.
        left = (
            f"{', '.join(done)} {'was' if len(done) == 1 else 'were'} written whole before it; "
            "nothing partial was left"
            if done
            else "nothing was written"
        )
        return f"interrupted by {name}; {left}", 128 + signum
    if isinstance(exc, MemoryError):
        detail = _first_line(exc) if str(exc) else "the allocation failed"
        return f"out of memory ({detail}); try a smaller input or --max-len", 2
    if isinstance(exc, OSError):
        reason = _OS_MESSAGES.get(exc.errno or -1) or exc.strerror or _first_line(exc)
        where = exc.filename
        if where is None and exc.errno in _STDOUT_ERRNOS:
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


def silence_stdout() -> None:
    """Point a broken standard output at /dev/null, so the exit does not print a second error."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


class CommandGroup(TyperGroup):
    """``posdiag``'s command group: turns every exception into ``Error: <message>`` and its
    exit code (:func:`error_message`), the one place that does so."""

    # Flags show no value in the help, every other parameter one plain placeholder (_help.py).
    def get_params(self, ctx: Any) -> list[Any]:
        return tidy_params(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            tidy_params(cmd.get_params(ctx))
        return cmd

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["posdiag_argv"] = list(args)  # the command line, for messages that repeat it
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        from .._util.atomic import forget_outputs

        forget_outputs()  # the interruption message names this command's outputs only
        run_error_hooks(None)  # hooks of an earlier command in this process (tests) go
        try:
            with signals_as_interrupts(), warnings.catch_warnings():
                warnings.simplefilter("ignore", PosdiagWarning)
                check_stdout()  # every command reports on standard output
                result = super().invoke(ctx)
                if sys.stdout is not None:
                    sys.stdout.flush()  # a full disk or closed pipe fails here, not at exit
                return result
        except UsageError as exc:  # a bad option value (exit 2): click prints it itself
            _annotate(ctx, exc.format_message())
            raise
        except (typer.Exit, typer.Abort, TyperException):
            raise  # typer's own exits and usage errors keep their codes
        except BaseException as exc:
            found = error_message(exc)
            debug = os.environ.get("POSDIAG_DEBUG", "") not in ("", "0")  # keep the traceback
            if found is None or (debug and not isinstance(exc, PosdiagError)):
                raise
            run_error_hooks(found[0])  # e.g. check --junit's error report, written first
            message, code = error_message(exc) or found  # so an interruption names it
            from ..corpus.sources import HubUnavailable

            if isinstance(exc, HubUnavailable):
                message = exc.message_for(ctx.meta.get("posdiag_argv"))
            if isinstance(exc, OSError) and exc.filename is None:  # standard output failed
                silence_stdout()
            _annotate(ctx, message)
            typer.echo(f"Error: {message}", err=True)
            raise typer.Exit(code) from None


def _annotate(ctx: Any, message: str) -> None:
    """With ``--format github``, an error (exit 2) is also a workflow ``::error`` annotation."""
    from ..render.gate import asks_github_format, error_annotation

    if asks_github_format(ctx.meta.get("posdiag_argv")):
        typer.echo(error_annotation(message))
