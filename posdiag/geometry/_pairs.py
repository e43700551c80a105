"""Compiled (numba) kernels behind :mod:`posdiag.geometry.implicit`: sums over position pairs of
the cross-fitted ``BC`` without an ``n x n`` array (lag sums by pair lists, sparse row dot
products for sampled pairs, sparse gathers ``M x``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba

__all__ = ["gather_product", "pair_products", "rare_lag_sums"]


@cache
def _kernels() -> dict[str, Callable[..., object]]:
    numba = load_numba()

    @numba.njit(cache=True, nogil=True)
    def lags(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, tokens, out):  # pragma: no cover
        # out[l] += a_p b_q / 2 at l = |row_q - row_p| (both orientations: X and X^T, halved).
        for t in range(tokens.size):
            v = tokens[t]
            for p in range(a_ptr[v], a_ptr[v + 1]):
                ia = a_idx[p]
                va = 0.5 * a_val[p]
                for q in range(b_ptr[v], b_ptr[v + 1]):
                    lag = b_idx[q] - ia
                    w = va * b_val[q]
                    if lag >= 0:
                        out[lag] += w
                    if lag <= 0:
                        out[-lag] += w

    @numba.njit(cache=True, nogil=True)
    def self_lags(ptr, idx, val, tokens, out):  # pragma: no cover
        # A A^T is symmetric: each pair once (rows ascending, q >= p, lag >= 0).
        for t in range(tokens.size):
            v = tokens[t]
            for p in range(ptr[v], ptr[v + 1]):
                ip = idx[p]
                vp = val[p]
                for q in range(p, ptr[v + 1]):
                    out[idx[q] - ip] += vp * val[q]

    @numba.njit(cache=True, nogil=True)
    def dot(a_ptr, a_idx, a_val, i, b_ptr, b_idx, b_val, j):  # pragma: no cover
        p, pe = a_ptr[i], a_ptr[i + 1]
        q, qe = b_ptr[j], b_ptr[j + 1]
        acc = 0.0
        while p < pe and q < qe:
            x, y = a_idx[p], b_idx[q]
            if x == y:
                acc += a_val[p] * b_val[q]
                p += 1
                q += 1
            elif x < y:
                p += 1
            else:
                q += 1
        return acc

    @numba.njit(parallel=True, cache=True, nogil=True)
    def pairs(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, rows, cols, out):  # pragma: no cover
        for k in numba.prange(rows.size):
            out[k] = dot(a_ptr, a_idx, a_val, rows[k], b_ptr, b_idx, b_val, cols[k])

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gather(ptr, idx, val, x, out):  # pragma: no cover
        k = x.shape[1]
        for i in numba.prange(ptr.size - 1):
            for p in range(ptr[i], ptr[i + 1]):
                w = val[p]
                row = x[idx[p]]
                for c in range(k):
                    out[i, c] += w * row[c]

    return {"lags": lags, "self_lags": self_lags, "pairs": pairs, "gather": gather}


def _csr(m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A csr matrix as the kernels take it: ``(indptr, indices, data)``."""
    return m.indptr, m.indices, m.data


def _int64(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def rare_lag_sums(
    a_csc: sp.csr_matrix, b_csc: sp.csr_matrix, tokens: np.ndarray, out: np.ndarray
) -> None:
    """Add the symmetrised lag sums of the tokens' part of ``A B^T`` into ``out`` (shape (n,)):
    ``out[l] += (sum_i X[i, i+l] + sum_i X[i+l, i]) / 2`` over the listed tokens.

    ``a_csc``, ``b_csc``: the transposes of ``A`` and ``B`` as canonical csr (V, n), the same
    object when ``A = B``. Cost ``sum_v nnz_A(v) nnz_B(v)``: for tokens in few rows.
    """
    if a_csc is b_csc:
        # One matrix: the pairs of A A^T once each (sorted rows), half the work.
        _kernels()["self_lags"](*_csr(a_csc), _int64(tokens), out)
    else:
        _kernels()["lags"](*_csr(a_csc), *_csr(b_csc), _int64(tokens), out)


def pair_products(
    a_csr: sp.csr_matrix, b_csr: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """``<A_i, B_j>`` for each pair ``(rows[k], cols[k])``; shape (m,). Canonical csr inputs."""
    out = np.empty(rows.size)
    _kernels()["pairs"](*_csr(a_csr), *_csr(b_csr), _int64(rows), _int64(cols), out)
    return out


def gather_product(m_csr: sp.csr_matrix, x: np.ndarray, out: np.ndarray) -> None:
    """``out += M @ x`` for csr ``M`` (r, c) and a C-contiguous float64 ``x`` (c, k)."""
    _kernels()["gather"](*_csr(m_csr), x, out)
