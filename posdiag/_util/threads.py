"""One BLAS thread where multi-threading costs more than it gives.

Small dense work (the bundled corpus's 76 x 76 eigenproblems, products of a few hundred rows,
the block Lanczos' skinny products) spends more on waking and syncing OpenBLAS's threads than
on the arithmetic, badly so on a loaded machine: a (76 x 1,332) @ (1,332 x 76) product took
7.4 ms with 2 threads and 0.39 ms with one, a (20 x 40k) matrix-vector product 9.8 ms against
0.19 ms (load 6 on 2 cores); ``eigh`` of 608 x 608 83-580 ms against 38-48 ms.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

__all__ = ["BLAS_THREADS_FROM", "one_blas_thread", "small_blas"]

# Positions from which a report's dense work keeps the BLAS library's own thread count.
BLAS_THREADS_FROM = 512

_CONTROLLER: list[object] = []


def one_blas_thread() -> AbstractContextManager[object]:
    """One BLAS thread inside the ``with`` block. One controller for the process:
    ``threadpool_limits`` looks the libraries up on every call (3 ms)."""
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
