"""The implied distances of :func:`posdiag.estimator.implied_distances` in one compiled pass.

``sqrt(max(0, (BC_ii + BC_jj) / 2 - BC_ij))``, zero diagonal, then ``(d_ij + d_ji) / 2`` for
both entries of each pair: numpy took six passes over ``n x n`` arrays for it (outer sum,
halving, subtraction, clip, sqrt, then the symmetrisation), 5.1 s at n = 16,384 under load.
Here each pair is visited once, tile by tile, with the same operations in the same order, so
the same numbers bit for bit (tests/test_implied_distances.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["implied_distances_compiled"]

# Square tiles: a tile and its mirror (2 x 64 x 64 float64, 64 KB) stay in cache while the
# mirror is read column-wise (as posdiag.fastgram's in-place passes).
_TILE = 64

_KERNEL: list[Callable[..., None]] = []


def _kernel() -> Callable[..., None]:
    if _KERNEL:
        return _KERNEL[0]
    import math

    import numba

    @numba.njit(parallel=True, cache=True, nogil=True)
    def implied(bc, diag, out, tile):  # pragma: no cover - compiled
        # Tile row I owns the tiles (I, J >= I) and their mirrors; rows I and nt - 1 - I go to
        # the same thread, so every thread gets the same share of the triangle.
        n = bc.shape[0]
        nt = (n + tile - 1) // tile
        for k in numba.prange((nt + 1) // 2):
            for s in range(2):
                ti = k if s == 0 else nt - 1 - k
                if s == 1 and ti == k:
                    continue
                lo, hi = ti * tile, min(n, (ti + 1) * tile)
                for tj in range(ti, nt):
                    lo2, hi2 = tj * tile, min(n, (tj + 1) * tile)
                    for i in range(lo, hi):
                        for j in range(max(lo2, i), hi2):
                            if i == j:
                                out[i, i] = 0.0
                                continue
                            # numpy's order: (d_i + d_j) / 2 - bc; clip (NaN passes); sqrt.
                            x = (diag[i] + diag[j]) / 2.0 - bc[i, j]
                            if x < 0.0:
                                x = 0.0
                            x = math.sqrt(x)
                            y = (diag[j] + diag[i]) / 2.0 - bc[j, i]
                            if y < 0.0:
                                y = 0.0
                            y = math.sqrt(y)
                            # The symmetrisation's x - 0 - 0 + 0 turns a -0.0 into 0.0.
                            avg = ((x + 0.0) + (y + 0.0)) / 2.0
                            out[i, j] = avg
                            out[j, i] = avg

    _KERNEL.append(implied)
    return implied


def implied_distances_compiled(bc: np.ndarray) -> np.ndarray:
    """:func:`posdiag.estimator.implied_distances` of a C-contiguous float64 ``bc`` (n, n)."""
    out = np.empty_like(bc)
    _kernel()(bc, np.ascontiguousarray(np.diag(bc)), out, _TILE)
    return out
