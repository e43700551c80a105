"""One BLAS thread where multi-threading costs more than it gives: small dense work spends more
on waking OpenBLAS's threads than on the arithmetic (docs/performance.md)."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

__all__ = ["BLAS_THREADS_FROM", "one_blas_thread", "small_blas"]

# Positions from which dense work keeps the BLAS library's own thread count.
BLAS_THREADS_FROM = 2048

_CONTROLLER: list[object] = []


def one_blas_thread() -> AbstractContextManager[object]:
    """One BLAS thread inside the ``with`` block. One controller for the process:
    ``threadpool_limits`` looks the libraries up on every call."""
    from threadpoolctl import ThreadpoolController

    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    controller = _CONTROLLER[0]
    assert isinstance(controller, ThreadpoolController)
    return controller.limit(limits=1, user_api="blas")


def small_blas(n: int) -> AbstractContextManager[object]:
    """:func:`one_blas_thread` while the work is on fewer than :data:`BLAS_THREADS_FROM`
    positions, else nothing."""
    return one_blas_thread() if n < BLAS_THREADS_FROM else contextlib.nullcontext()
