"""In-place and one-pass ``n x n`` passes over dense symmetric arrays, and distances to row 0:
numpy below :data:`~._compiled.COMPILED_FROM` positions, else one compiled pass over square tiles
with numpy's operations in numpy's order (the same numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from .._util.jit import load_numba
from ..errors import PosdiagError
from ._compiled import COMPILED_FROM

__all__ = [
    "centred_half",
    "distances_to_first",
    "implied_distances",
    "mirror_upper",
    "pack_upper",
    "symmetrize",
    "unpack_upper",
]

# Square tiles of the in-place passes: a tile and its mirror (64 KB) stay in cache.
_TILE = 64

# The modes of the square-tile kernel (pairs) and its packed argument when it reads a square.
_CENTRED, _IMPLIED, _UPPER = 0, 1, 2
_NO_PACKED = np.zeros(0, dtype=np.float64)


def mirror_upper(m: np.ndarray, block: int = 64) -> np.ndarray:
    """``m[j, i] = m[i, j]`` for ``j > i`` in place (``m`` (n, n) float64, C-contiguous).

    Compiled from :data:`COMPILED_FROM` rows (numpy's strided copies cost a TLB miss per element
    there), else by blocks of ``block`` rows. Copies only."""
    _check_square(m)
    n = m.shape[0]
    if n >= COMPILED_FROM:
        zeros = np.zeros(n)
        _square_kernels()["pairs"](m, zeros, zeros, 0.0, 1.0, zeros, _UPPER, _NO_PACKED, m, _TILE)
        return m
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        m[hi:, lo:hi] = m[lo:hi, hi:].T
        tile = m[lo:hi, lo:hi]
        low = np.tril_indices(hi - lo, -1)
        tile[low] = tile.T[low]
    return m


def pack_upper(m: np.ndarray) -> np.ndarray:
    """The upper triangle of ``m`` (n, n), diagonal included, row after row: shape
    (n (n + 1) / 2,); :func:`unpack_upper` inverts it bit for bit for a symmetric ``m``."""
    n = m.shape[0]
    out = np.empty(n * (n + 1) // 2, dtype=m.dtype)
    at = 0
    for i in range(n):
        out[at : at + n - i] = m[i, i:]
        at += n - i
    return out


def unpack_upper(packed: np.ndarray, n: int) -> np.ndarray:
    """The symmetric (n, n) float64 array whose upper triangle, diagonal included, ``packed`` (shape
    (n (n + 1) / 2,), float64) holds row after row; copies only, so bit for bit."""
    if packed.shape != (n * (n + 1) // 2,) or packed.dtype != np.float64:
        raise PosdiagError(
            f"expected a packed triangle of shape ({n * (n + 1) // 2},) float64; "
            f"got {packed.dtype} {packed.shape}"
        )
    out = np.empty((n, n), dtype=np.float64)
    if n >= COMPILED_FROM:
        zeros = np.zeros(n)
        packed = np.ascontiguousarray(packed)
        _square_kernels()["pairs"](out, zeros, zeros, 0.0, 1.0, zeros, _UPPER, packed, out, _TILE)
        return out
    at = 0
    for i in range(n):
        out[i, i:] = packed[at : at + n - i]
        at += n - i
    return mirror_upper(out)


def symmetrize(m: np.ndarray) -> np.ndarray:
    """``m <- (m + m^T) / 2`` in place, ``(a + b) / 2`` per pair (``m`` (n, n) float64,
    C-contiguous); returns ``m``."""
    _check_square(m)
    if m.shape[0] < COMPILED_FROM:
        m[...] = (m + m.T) / 2.0
        return m
    zeros = np.zeros(m.shape[0])
    _square_kernels()["pairs"](m, zeros, zeros, 0.0, 1.0, zeros, _CENTRED, _NO_PACKED, m, _TILE)
    return m


def centred_half(
    bc: np.ndarray,
    col: np.ndarray,
    row: np.ndarray,
    grand: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``((bc - col[None, :]) - row[:, None] + grand) * 0.5``, symmetrised, in one pass
    (:func:`~.crossfit.gram_from_bc`'s arithmetic), as a new (n, n) array or into ``out`` (may be
    ``bc``).

    ``bc`` (n, n) float64 C-contiguous; ``col``, ``row`` (n,) its column and row means, ``grand``
    its mean."""
    _check_square(bc)
    if out is None:
        out = np.empty_like(bc)
    else:
        _check_square(out)
        if out.shape != bc.shape:
            raise PosdiagError(f"expected out of shape {bc.shape}; got {out.shape}")
    if bc.shape[0] < COMPILED_FROM:
        x = bc - col[None, :]
        x -= row[:, None]
        x += grand
        x *= 0.5
        out[...] = (x + x.T) / 2.0
        return out
    _square_kernels()["pairs"](
        bc, col, row, float(grand), 0.5, col, _CENTRED, _NO_PACKED, out, _TILE
    )
    return out


def implied_distances(bc: np.ndarray) -> np.ndarray:
    """``sqrt(max(0, (BC_ii + BC_jj) / 2 - BC_ij))``, zero diagonal, symmetrised, a new (n, n)
    array: :func:`~.crossfit.implied_distances`' numpy passes in one compiled pass, bit for bit."""
    _check_square(bc)
    out = np.empty_like(bc)
    zeros = np.zeros(bc.shape[0])
    diag = np.ascontiguousarray(np.diag(bc))
    _square_kernels()["pairs"](bc, zeros, zeros, 0.0, 1.0, diag, _IMPLIED, _NO_PACKED, out, _TILE)
    return out


def _check_square(m: np.ndarray) -> None:
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.dtype != np.float64:
        raise PosdiagError(f"expected a square float64 matrix; got {m.dtype} {m.shape}")
    if not m.flags.c_contiguous:
        raise PosdiagError("expected a C-contiguous matrix")


def distances_to_first(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hellinger distance of each row of a canonical csr count matrix to row 0; shape (n,).

    ``H^2 = 1/2 sum_v (sqrt(p_0v) - sqrt(p_iv))^2`` by a merge of the two sorted rows: exactly 0 for
    a row equal to row 0. A row without tokens is at distance 1 (every row when row 0 has none).
    ``indptr`` (n + 1,), ``indices``/``data``: sorted column indices, no duplicates, counts >= 0."""
    out = np.empty(indptr.size - 1)
    if out.size < COMPILED_FROM:
        return _distances_to_first_numpy(indptr.astype(np.int64), indices, data)
    _square_kernels()["to_first"](indptr.astype(np.int64), indices, data, out)
    return out


def _distances_to_first_numpy(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray
) -> np.ndarray:
    """:func:`distances_to_first` in numpy: the same terms summed in another order, and exactly
    0 for a row equal to row 0."""
    n = indptr.size - 1
    data = np.asarray(data[: indptr[-1]], dtype=np.float64)
    indices = indices[: indptr[-1]]
    lengths = np.diff(indptr)
    rows = np.repeat(np.arange(n), lengths)
    totals = np.bincount(rows, weights=data, minlength=n)
    e0 = int(indptr[1])
    if totals[0] <= 0.0:
        return np.ones(n)
    first = np.zeros(int(indices.max()) + 1 if indices.size else 1)
    first[indices[:e0]] = np.sqrt(data[:e0]) / np.sqrt(totals[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.sqrt(data) / np.sqrt(totals[rows])
    at = first[indices]
    shared = np.bincount(rows, weights=at * at, minlength=n)  # row 0's mass met by row i
    met = np.bincount(rows, weights=(at > 0).astype(np.float64), minlength=n)
    terms = np.bincount(rows, weights=(at - value) ** 2, minlength=n)
    # Row 0's terms that row i lacks; none (exactly 0) when row i holds all of row 0's tokens.
    missing = np.where(met == np.count_nonzero(first), 0.0, np.sum(first * first) - shared)
    acc = terms + np.maximum(missing, 0.0)
    out = np.sqrt(np.clip(acc / 2.0, 0.0, 1.0))
    out[totals <= 0.0] = 1.0
    return out


@cache
def _square_kernels() -> dict[str, Callable[..., None]]:
    import math

    numba = load_numba()

    @numba.njit(parallel=True, cache=True, nogil=True)
    def pairs(bc, col, row, grand, scale, diag, mode, packed, out, tile):  # pragma: no cover
        # Each pair (i, j >= i) is read (so out may be bc) and both entries written, by mode:
        # - _UPPER: the upper entry bc[i, j], or the packed triangle's (a mirror);
        # - _IMPLIED: sqrt(max(0, (diag_i + diag_j) / 2 - bc_ij)), zero diagonal, in numpy's
        #   order (clip passes NaN, sqrt, and the symmetrisation turning -0.0 into 0.0);
        # - _CENTRED: sym(((bc - col) - row + grand) * scale); zeros and scale 1 symmetrise.
        # Tile rows I and nt - 1 - I go to the same thread: equal shares of the triangle.
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
                        # Row i's packed segment starts at i n - i (i - 1) / 2.
                        start = i * n - (i * (i - 1)) // 2 - i
                        for j in range(max(lo2, i), hi2):
                            if mode == _UPPER:
                                avg = packed[start + j] if packed.size > 0 else bc[i, j]
                            elif mode == _IMPLIED:
                                if i == j:
                                    out[i, i] = 0.0
                                    continue
                                x = (diag[i] + diag[j]) / 2.0 - bc[i, j]
                                if x < 0.0:  # not max(): a NaN must pass
                                    x = 0.0
                                y = (diag[j] + diag[i]) / 2.0 - bc[j, i]
                                if y < 0.0:
                                    y = 0.0
                                avg = ((math.sqrt(x) + 0.0) + (math.sqrt(y) + 0.0)) / 2.0
                            else:
                                x = (((bc[i, j] - col[j]) - row[i]) + grand) * scale
                                y = (((bc[j, i] - col[i]) - row[j]) + grand) * scale
                                avg = (x + y) / 2.0
                            out[i, j] = avg
                            out[j, i] = avg

    @numba.njit(parallel=True, cache=True, nogil=True)
    def to_first(indptr, indices, data, out):  # pragma: no cover - compiled
        e0 = indptr[1]
        n0 = 0.0
        for p in range(e0):
            n0 += data[p]
        # sqrt(c) / sqrt(N), the same expression for every row: row 0's copy is at exactly 0.
        first = np.empty(e0)
        for p in range(e0):
            first[p] = math.sqrt(data[p]) / math.sqrt(n0)
        for i in numba.prange(indptr.size - 1):
            ni = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                ni += data[p]
            if n0 <= 0.0 or ni <= 0.0:
                out[i] = 1.0
                continue
            root = math.sqrt(ni)
            acc = 0.0
            p, q, pe = 0, indptr[i], indptr[i + 1]
            while p < e0 or q < pe:
                if q >= pe or (p < e0 and indices[p] < indices[q]):
                    d = first[p]
                    p += 1
                elif p >= e0 or indices[q] < indices[p]:
                    d = math.sqrt(data[q]) / root
                    q += 1
                else:
                    d = first[p] - math.sqrt(data[q]) / root
                    p += 1
                    q += 1
                acc += d * d
            out[i] = math.sqrt(min(1.0, max(0.0, acc / 2.0)))

    return {"pairs": pairs, "to_first": to_first}
