"""Sums of subsets of shards (``C^A``, ``C^B`` of a split by sequence): :class:`ShardStack` places
every stored count once on the shards' union pattern, so a sum is two linear compiled passes with
canonical output (exact: counts are integers).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._util.jit import load_numba
from ..errors import PosdiagError

__all__ = ["ShardStack"]

# Row chunks per compiled pass, each with its own vocabulary-sized int32 scratch.
_CHUNKS = 64


class ShardStack:
    """``K`` shards' counts on rows ``0..n-1``, stacked (shard ``k``, row ``i`` is stack row
    ``k n + i``), with each stored count's place on the union pattern.

    ``stack`` (K n, V): :func:`posdiag.geometry.estimator.stack_shards`; ``indptr`` (n + 1,),
    ``indices`` (nnz,): the union pattern, columns ascending; ``row_sums`` (K, n): each shard's
    count per row.
    """

    def __init__(self, stack: sp.csr_matrix, n: int) -> None:
        stack = sp.csr_matrix(stack, dtype=np.float64)
        rows = stack.shape[0]
        # The kernels read shard k's row i at stack row k n + i unchecked.
        if n < 1 or rows % n or rows == 0:
            raise PosdiagError(
                f"shard sums: a stack of {rows:,} rows is not whole shards of {n:,} positions"
            )
        self.n = int(n)
        self.k = rows // self.n
        self.v = stack.shape[1]
        self._ptr = stack.indptr.astype(np.int64, copy=False)
        self._idx = stack.indices
        self._val = stack.data
        cumulative = np.concatenate(([0.0], np.cumsum(self._val)))
        self.row_sums = (cumulative[self._ptr[1:]] - cumulative[self._ptr[:-1]]).reshape(
            self.k, self.n
        )
        counts = np.zeros(self.n, dtype=np.int64)
        kernels = _kernels()
        args = (self._ptr, self._idx, self.n, self.k, self.v, _CHUNKS)
        kernels["union_counts"](*args, counts)
        self.indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        self.indices = np.empty(int(self.indptr[-1]), dtype=self._idx.dtype)
        # Each stored count's cell on the union pattern, as an offset within its row.
        self._at = np.empty(self._idx.size, dtype=np.int32)
        kernels["union_fill"](*args, self.indptr, self.indices, self._at)

    def supports(self, weights: np.ndarray) -> np.ndarray:
        """Row sums of the shards weighted by ``weights`` (shape (K,)): shape (n,)."""
        return np.asarray(weights, dtype=np.float64) @ self.row_sums

    def sum(self, shards: np.ndarray) -> sp.csr_matrix:
        """The counts of the shards ``shards`` (indices in ``0..K-1``) summed: a canonical csr
        of shape (n, V), float64, without explicit zeros."""
        chosen = np.asarray(shards, dtype=np.int64).ravel()
        if chosen.size and (chosen.min() < 0 or chosen.max() >= self.k):
            raise PosdiagError(
                f"shard sums: shards must be in [0, {self.k - 1}]; got {chosen.tolist()}"
            )
        kernels = _kernels()
        counts = np.zeros(self.n, dtype=np.int64)
        width = int(np.diff(self.indptr).max(initial=0))
        args = (self._ptr, self._at, self._val, self.indptr, chosen, self.n, _CHUNKS, width)
        kernels["sum_counts"](*args, counts)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        indices = np.empty(int(indptr[-1]), dtype=self.indices.dtype)
        data = np.empty(int(indptr[-1]), dtype=np.float64)
        kernels["sum_fill"](*args, self.indices, indptr, indices, data)
        return sp.csr_matrix((data, indices, indptr), shape=(self.n, self.v))


# Module globals: as closure variables they would enter numba's cache key (a recompile a run).
_first_seen: Any = None
_accumulate: Any = None


@cache
def _kernels() -> dict[str, Callable[..., None]]:
    global _first_seen, _accumulate
    numba = load_numba()

    @numba.njit(cache=True, nogil=True)
    def first_seen(ptr, idx, n, k, i, seen, out, q):  # pragma: no cover - compiled
        # Row i's columns over every shard, each counted at its first sight (seen[j] == i
        # marks it) and written to out[q:] unless out is empty; returns how many.
        m = 0
        for s in range(k):
            r = s * n + i
            for p in range(ptr[r], ptr[r + 1]):
                j = idx[p]
                if seen[j] != i:
                    seen[j] = i
                    if out.size:
                        out[q + m] = j
                    m += 1
        return m

    _first_seen = first_seen

    @numba.njit(parallel=True, cache=True, nogil=True)
    def union_counts(ptr, idx, n, k, v, chunks, counts):  # pragma: no cover - compiled
        for c in numba.prange(chunks):
            seen = np.full(v, -1, dtype=np.int32)
            nowhere = idx[:0]  # count only
            for i in range(c * n // chunks, (c + 1) * n // chunks):
                counts[i] = _first_seen(ptr, idx, n, k, i, seen, nowhere, np.int64(0))

    @numba.njit(parallel=True, cache=True, nogil=True)
    def union_fill(ptr, idx, n, k, v, chunks, u_ptr, u_idx, at):  # pragma: no cover - compiled
        for c in numba.prange(chunks):
            seen = np.full(v, -1, dtype=np.int32)
            where = np.zeros(v, dtype=np.int32)
            for i in range(c * n // chunks, (c + 1) * n // chunks):
                q = u_ptr[i] + _first_seen(ptr, idx, n, k, i, seen, u_idx, u_ptr[i])
                u_idx[u_ptr[i] : q] = np.sort(u_idx[u_ptr[i] : q])
                for e in range(u_ptr[i], q):
                    where[u_idx[e]] = e - u_ptr[i]
                for s in range(k):
                    r = s * n + i
                    for p in range(ptr[r], ptr[r + 1]):
                        at[p] = where[idx[p]]

    @numba.njit(cache=True, nogil=True)
    def accumulate(ptr, at, val, u_ptr, chosen, n, i, acc):  # pragma: no cover - compiled
        # Row i of the chosen shards' sum on its union slice, in acc[:size]; returns size.
        size = u_ptr[i + 1] - u_ptr[i]
        acc[:size] = 0.0
        for s in chosen:
            r = s * n + i
            for p in range(ptr[r], ptr[r + 1]):
                acc[at[p]] += val[p]
        return size

    _accumulate = accumulate

    @numba.njit(parallel=True, cache=True, nogil=True)
    def sum_counts(ptr, at, val, u_ptr, chosen, n, chunks, width, counts):  # pragma: no cover
        for c in numba.prange(chunks):
            acc = np.zeros(width)
            for i in range(c * n // chunks, (c + 1) * n // chunks):
                size = _accumulate(ptr, at, val, u_ptr, chosen, n, i, acc)
                m = 0
                for e in range(size):
                    if acc[e] != 0.0:
                        m += 1
                counts[i] = m

    @numba.njit(parallel=True, cache=True, nogil=True)
    def sum_fill(
        ptr, at, val, u_ptr, chosen, n, chunks, width, u_idx, o_ptr, o_idx, o_val
    ):  # pragma: no cover - compiled
        for c in numba.prange(chunks):
            acc = np.zeros(width)
            for i in range(c * n // chunks, (c + 1) * n // chunks):
                size = _accumulate(ptr, at, val, u_ptr, chosen, n, i, acc)
                q = o_ptr[i]
                for e in range(size):
                    if acc[e] != 0.0:
                        o_idx[q] = u_idx[u_ptr[i] + e]
                        o_val[q] = acc[e]
                        q += 1

    return {
        "union_counts": union_counts,
        "union_fill": union_fill,
        "sum_counts": sum_counts,
        "sum_fill": sum_fill,
    }
