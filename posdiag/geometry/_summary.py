"""Compiled passes of :func:`posdiag.geometry.heldout.split_half_summary` over row blocks.

Two passes over each (rows, n) block instead of a dozen numpy ones, each element getting numpy's
operations in numpy's order (no fast-math), so the results are the numpy path's bit for bit.
Imported only from :data:`~._compiled.COMPILED_FROM` positions on.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from .._util.jit import load_numba

__all__ = ["kernels"]


@cache
def kernels() -> dict[str, Callable[..., None]]:
    """``differences`` and ``within``, compiled on first use (cached on disk by numba)."""
    import math

    numba = load_numba()

    @numba.njit(parallel=True, cache=True, nogil=True)
    def differences(p, q, dd, lo, first, last, scale, acc, acc_m, noise):  # pragma: no cover
        # One half's terms of row block lo: acc (+)= (p - q)^2, divided by scale after the
        # last half; with noise acc_m (+)= ((dd_i + dd_j) - 2 (p - q))^2. The first half
        # writes (0.0 + x is x for these squares, never -0.0).
        rows, n = p.shape
        for r in numba.prange(rows):
            i = lo + r
            for j in range(n):
                d = p[r, j] - q[r, j]
                e = d * d
                if not first:
                    e = acc[r, j] + e
                if last:
                    e = e / scale
                acc[r, j] = e
                if noise:
                    m = (dd[i] + dd[j]) - 2.0 * d
                    m = m * m
                    if not first:
                        m = acc_m[r, j] + m
                    acc_m[r, j] = m

    @numba.njit(parallel=True, cache=True, nogil=True)
    def within(acc_m, h, diag, lo, scale, upper, partners, above):  # pragma: no cover
        # Pair (i, j != i) is within its sampling error when the squared distance of the
        # gram h, (diag_i + diag_j) - 2 h_ij, is at most sqrt(acc_m / scale). partners[r]
        # counts row lo + r's pairs, above[r] those with j > i, which upper marks.
        rows, n = h.shape
        for r in numba.prange(rows):
            i = lo + r
            count = 0
            right = 0
            for j in range(n):
                bound = math.sqrt(acc_m[r, j] / scale)
                near = j != i and ((diag[i] + diag[j]) - 2.0 * h[r, j]) <= bound
                upper[r, j] = near and j > i
                if near:
                    count += 1
                    if j > i:
                        right += 1
            partners[r] = count
            above[r] = right

    return {"differences": differences, "within": within}
