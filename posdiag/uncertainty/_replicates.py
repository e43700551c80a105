"""Bootstrap replicates of the cross-fitted geometry without per-replicate sparse bookkeeping.

A replicate of :func:`posdiag.uncertainty.bootstrap.bootstrap_stress` keeps half of the ``K``
shards and cross-fits them: each split sums a quarter of the shards into ``C^A`` and ``C^B``, takes
``R = sqrt(C / N)`` row-wise and multiplies ``R^A (R^B)^T``. Done with scipy objects that is
~10 sparse constructions and products per split, whose fixed overhead dominates small inputs
such as the bundled corpus.

Every shard's counts on positions ``0..n-1`` sit inside the support of the total, so
:class:`ShardPattern` lays them out once on that fixed pattern: a dense ``(K, nnz)`` array.
Then a subset's counts are one matrix-vector product, the supports a ``reduceat``, ``R`` an
elementwise ``sqrt`` on the pattern, and the product is split once by column: the frequent
tokens as a dense BLAS block (the rule of :mod:`posdiag.geometry._gram`), the rare ones as a
precomputed list of entry pairs sharing a column, summed by one ``bincount``. A cell a half
does not hold is an explicit 0, which adds nothing to any sum, so the numbers are those of the
scipy path up to the order of floating-point additions (~1e-14;
tests/uncertainty/test_replicates.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import PosdiagError
from ..geometry._gram import DENSE_FRACTION

__all__ = ["MAX_PAIRS", "MAX_TABLE_BYTES", "PatternTooLarge", "ShardPattern"]

# Rare-column entry pairs summed by bincount (3 int64 arrays, 24 bytes a pair). Past 5 M the
# compiled products (geometry._gram on a uncertainty._shardsum stack) are ~3x faster; below, the
# pattern is as fast and needs no kernels compiled on a first run (docs/performance.md).
MAX_PAIRS = 5_000_000
# The (K, nnz) table of shard counts: beyond this the replicates use scipy products (long
# contexts, where the products, not their overhead, are the cost).
MAX_TABLE_BYTES = 256 << 20


class PatternTooLarge(PosdiagError):
    """The fixed-pattern layout would exceed :data:`MAX_TABLE_BYTES` or :data:`MAX_PAIRS`."""


def _check_table(k: int, nnz: int) -> None:
    """Raise :class:`PatternTooLarge` when a (k, nnz) float64 table exceeds its bound."""
    if 8 * k * nnz > MAX_TABLE_BYTES:
        raise PatternTooLarge(
            f"the replicate pattern needs {8 * k * nnz / 1e6:,.0f} MB "
            f"(max {MAX_TABLE_BYTES / 1e6:,.0f} MB)"
        )


class ShardPattern:
    """The shards' counts on rows ``0..n-1``, laid out on the total's sparsity pattern.

    Parameters
    ----------
    shards : sequence of K matrices of shape (n_positions, vocab_size)
    n : int
        Rows (positions) kept.
    cells : int, optional
        Stored cells of the shards' total on those rows, if known: a lower bound of the
        union's, to refuse a too-large table early (:class:`PatternTooLarge`).

    Attributes
    ----------
    table : ndarray of shape (K, nnz)
        ``table[k, e]`` is shard ``k``'s count at the total's ``e``-th stored cell (row-major,
        sorted columns); 0 where the shard lacks the token.
    """

    def __init__(
        self,
        shards: Sequence[sp.spmatrix | sp.sparray | np.ndarray],
        n: int,
        cells: int | None = None,
    ) -> None:
        parts = [sp.csr_matrix(s)[:n] for s in shards]
        # The union holds at least the largest shard's cells, and as many as the total's
        # (``cells``, when the caller has it): too large is then known before summing the
        # shards, itself a cost at long contexts.
        _check_table(len(parts), max(cells or 0, *(p.nnz for p in parts)))
        total = sp.csr_matrix(parts[0], dtype=np.float64, copy=True)
        for p in parts[1:]:
            total = total + p
        total.sum_duplicates()
        total.eliminate_zeros()
        total.sort_indices()
        v = total.shape[1]
        self.k, self.n = len(parts), n
        self.indptr, self.indices = total.indptr, total.indices
        self.row = np.repeat(np.arange(n), np.diff(total.indptr))
        if np.any(np.diff(total.indptr) == 0):
            raise PosdiagError("every analysed position needs tokens for the bootstrap")
        _check_table(self.k, total.nnz)
        # The rare pairs (below) before the table: past MAX_PAIRS the table would be wasted.
        col_nnz = np.bincount(total.indices, minlength=v)
        dense_cols = col_nnz > DENSE_FRACTION * n
        pairs = int(np.sum(col_nnz[~dense_cols].astype(np.int64) ** 2))
        if pairs > MAX_PAIRS:
            raise PatternTooLarge(
                f"the replicate pattern needs {pairs:,} rare pairs (max {MAX_PAIRS:,}); "
                "fewer positions take the other replicate path"
            )
        keys = self.row.astype(np.int64) * v + self.indices
        self.table = np.zeros((self.k, keys.size))
        for i, p in enumerate(parts):
            p = sp.csr_matrix(p, dtype=np.float64)
            p.sum_duplicates()
            p.eliminate_zeros()
            pk = np.repeat(np.arange(n), np.diff(p.indptr)).astype(np.int64) * v + p.indices
            self.table[i, np.searchsorted(keys, pk)] = p.data
        # Column split, once for every split of every replicate: the fastgram rule on the
        # total's pattern (a half holds a subset of it). Below fastgram's hybrid size a dense
        # block still beats scipy here, whose per-product cost is what we are saving.
        self.kd = int(dense_cols.sum())
        position = np.cumsum(dense_cols) - 1
        is_dense = dense_cols[self.indices]
        self.dense_entries = np.flatnonzero(is_dense)
        self.dense_flat = self.row[is_dense] * self.kd + position[self.indices[is_dense]]
        rare = np.flatnonzero(~is_dense)
        r_cols = self.indices[rare]
        # The rare part as a list of entry pairs sharing a column: sum_v nnz_v^2 pairs (~40k
        # on the bundled corpus), each adding ra[e] rb[f] to cell (row e, row f). One
        # bincount per split, without a csr product's fixed overhead.
        order = rare[np.argsort(r_cols, kind="stable")]
        per_col = np.bincount(r_cols, minlength=v)
        m = per_col[self.indices[order]]  # column size, per entry in column order
        starts = np.concatenate(([0], np.cumsum(per_col)))[self.indices[order]]
        self.pair_a = np.repeat(order, m)
        block = np.repeat(np.cumsum(m) - m, m)
        self.pair_b = order[np.repeat(starts, m) + np.arange(pairs) - block]
        self.pair_cell = self.row[self.pair_a] * n + self.row[self.pair_b]
        self.v = v
        self.starts = self.indptr[:-1]

    def counts(self, weights: np.ndarray) -> np.ndarray:
        """Counts on the pattern of the shards weighted by ``weights`` (shape (K,)): (nnz,).

        Weights are 0/1, so this is a sum of rows of :attr:`table`: exact integers in float64.
        """
        return np.asarray(weights, dtype=np.float64) @ self.table

    def supports(self, data: np.ndarray) -> np.ndarray:
        """Row sums of counts on the pattern, shape (n,)."""
        return np.add.reduceat(data, self.starts)

    def sqrt_rows(self, data: np.ndarray, supports: np.ndarray) -> np.ndarray:
        """``sqrt(C / N)`` on the pattern, as :func:`posdiag.geometry.estimator.sqrt_rows` computes
        it
        (``C * (1/N)``, then the root)."""
        inv = 1.0 / supports
        return np.sqrt(data * inv[self.row])

    def product(self, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
        """``R^A (R^B)^T`` for two rows-on-pattern arrays, dense (n, n)."""
        n = self.n
        out = np.zeros((n, n))
        if self.kd:
            da = np.zeros(n * self.kd)
            db = np.zeros(n * self.kd)
            da[self.dense_flat] = ra[self.dense_entries]
            db[self.dense_flat] = rb[self.dense_entries]
            out += da.reshape(n, self.kd) @ db.reshape(n, self.kd).T
        if self.pair_cell.size:
            out += np.bincount(
                self.pair_cell, weights=ra[self.pair_a] * rb[self.pair_b], minlength=n * n
            ).reshape(n, n)
        return out

    def csr(self, data: np.ndarray) -> sp.csr_matrix:
        """Counts on the pattern as a csr matrix of shape (n, V) (explicit zeros removed)."""
        # Own copies: eliminate_zeros compacts the arrays in place.
        m = sp.csr_matrix(
            (data.copy(), self.indices.copy(), self.indptr.copy()), shape=(self.n, self.v)
        )
        m.eliminate_zeros()
        return m
